"""The server's end of a call to a node agent: AgentRunner sends a node step to `remediate agent` on its node.

Calls to an agent (paths, request and answer shapes, error classes: remediate.agentwire.protocol, which the
agent's side uses too): POST {action, params, context} to /v1/steps/plan|execute, signed with
the target node's own credential derived from the master `agent_token` (remediate.agentwire.auth:
the signature covers the body, so the run and step ids it names); connection failures
(refused, connect timeout, 502/503/504 from a proxy, no agent pod yet) are retried
`agent_retries` times with backoff inside the step's
deadline (tenacity), then raised as RetryableActionError, so the executor's own step
retries apply to execute. The agent answers with the plan/result, or with
{error_class: retryable|permanent, message}, raised here as RetryableActionError /
ActionError. Only an answer signed by the node's agent for this very request is believed
(agentwire.auth.verify_answer): any other is refused (a permanent error, or, for the execute of an
action that is not idempotent, AmbiguousActionError), except a bare 502/503/504 of a proxy. A
call sent but not answered in time is not retried: the step may have run on the node, and the
error says so (AmbiguousActionError). For the execute of an action that is not idempotent, so
is a connection dropped after the request was sent and any 5xx that is not the agent's own
answer (a proxy's 502/503/504 included: a relay may forward the request, then fail): only errors
that prove nothing reached the agent are retried.

When the executor stops (`StepContext.stopping`, SIGTERM) during a call, the runner asks the
agent to stop that step (signed POST /v1/steps/cancel naming the run and step): the agent sets
the step's own `stopping` event, and the step's answer (a withdrawn training command: a
failure; a taken one: OutcomePending) is recorded as usual.

Connections: the runners of one process share an AgentConnections (one requests.Session, made on first use):
idle connections are kept for AGENT_HOSTS_KEPT agents at most (the least recently used agent's are closed first)
and AGENT_CONNECTIONS_PER_HOST per agent (more calls at once to one agent open more, closed after use), so a
fleet of 10,000 agents costs the server at most 64 x 4 idle sockets, never one per agent ever called. The execute
of an action that is not idempotent goes on a new connection of its own: a kept one the agent closed while idle
(it drops a connection that sends nothing for request_timeout) fails only once the request is written, and that
call could not be sent again.

Each runner has `ran_on`, recorded in node steps' plans and results ("node-b (agent
http://10.0.0.7:9096)", "node-a (server)") so `/runs/<id>` shows where a step ran.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from remediate.actions.base import Action, StepContext
from remediate.actions.notify import request_not_sent
from remediate.agentwire.auth import ANSWER_HEADER, AgentAuthError, new_nonce, node_token, sign, verify_answer
from remediate.agentwire.protocol import (
    CANCEL_PATH,
    EXECUTE,
    PLAN,
    STEP_PATHS,
    AgentDirectory,
    AgentNotFound,
    CancelRequest,
    StepRequest,
    answer_key,
    error_from_answer,
)
from remediate.errors import ActionError, AmbiguousActionError, RetryableActionError

if TYPE_CHECKING:
    import requests

log = logging.getLogger("remediate.runners")

STOP_POLL_S = 0.1
"""How often a call to an agent checks whether the executor is stopping (then it asks the agent to stop the step)."""
AGENT_HOSTS_KEPT = 64
"""Agents (scheme, host, port) whose idle connections one process keeps: the executor's threads call a few nodes
at a time (a storm's breaker lets a handful change); more are reconnected, ~1 ms on a cluster network."""
AGENT_CONNECTIONS_PER_HOST = 4
"""Idle connections kept per agent: a step's call and its cancel, and a few steps on one node at once."""


class AgentConnections:
    """The connection pool of a process's calls to agents (module docstring): one requests.Session with both
    bounds, made on first use (requests is loaded then: remediate.outbound.lazyhttp). Thread-safe: the session's
    pools are; it keeps no cookies (agents set none, and one step's answer must not shape another's request)."""

    def __init__(self, hosts: int = AGENT_HOSTS_KEPT, per_host: int = AGENT_CONNECTIONS_PER_HOST) -> None:
        self.hosts, self.per_host = hosts, per_host
        self._session: requests.Session | None = None
        self._lock = threading.Lock()

    @property
    def session(self) -> requests.Session:
        with self._lock:
            if self._session is None:
                from http.cookiejar import DefaultCookiePolicy

                from requests.adapters import HTTPAdapter

                from remediate.outbound.session import EnvironmentOnceSession

                session = EnvironmentOnceSession()
                session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
                adapter = HTTPAdapter(pool_connections=self.hosts, pool_maxsize=self.per_host)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
                self._session = session
            return self._session


@dataclass(frozen=True)
class StaticAgents(AgentDirectory):
    """The `agents` map of the config file."""

    agents: Mapping[str, str]

    def known_name(self, names: Sequence[str]) -> str | None:
        return next((name for name in names if name in self.agents), None)

    def url_for(self, node: str) -> str:
        try:
            return self.agents[node]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise AgentNotFound(
                f"no agent configured for node {node!r} (the agents map knows: {known})", retryable=False
            ) from None


class ChainedAgents(AgentDirectory):
    """The static map first, then Kubernetes discovery."""

    def __init__(self, *directories: AgentDirectory) -> None:
        self.directories = directories

    def url_for(self, node: str) -> str:
        last: AgentNotFound | None = None
        for directory in self.directories:
            try:
                return directory.url_for(node)
            except AgentNotFound as exc:
                last = exc
        assert last is not None
        raise last

    def forget(self, node: str) -> None:
        for directory in self.directories:
            directory.forget(node)

    def known_name(self, names: Sequence[str]) -> str | None:
        return next((known for d in self.directories if (known := d.known_name(names)) is not None), None)


# --------------------------------------------------------------------------- calling an agent


class _Unreachable(Exception):
    """The request did not reach an agent; trying again is safe."""


class _BadAnswer(ActionError):
    """The agent (or what stands before it) answered something that is not an answer of the protocol."""


AGENT_CALL_ERRORS = ("unreachable", "ambiguous", "bad_answer")
"""The reasons `on_call_error` is told of a failed agent call (remediate_agent_call_errors_total{reason})."""


@dataclass(eq=False)
class AgentRunner:
    """Sends the step to the agent of `node`; see the module docstring for retries and errors."""

    node: str
    directory: AgentDirectory
    token: str | None
    _: KW_ONLY
    retries: int = 3
    connect_timeout: float = 3.0
    default_timeout: float = 300.0
    retry_wait_max: float = 2.0
    on_call_error: Callable[[str], None] | None = None
    """Told the reason (AGENT_CALL_ERRORS) of each call that failed for want of an answer; an error the
    agent answered (the action failed there) is the step's failure, not the call's."""
    on_call_done: Callable[[str, str, float], None] | None = None
    """Told (action, outcome, seconds) of each call: "answered" (the agent answered: the action succeeded
    or failed there), "not_found" (no agent serves the node), or the reason of AGENT_CALL_ERRORS it got no
    answer (remediate_agent_call_duration_seconds)."""
    answer_slack: float = 5.0
    """Seconds the agent may take beyond the step's remaining time to answer (it enforces the deadline)."""
    connections: AgentConnections | None = None
    """The process's kept connections to agents (the Dispatch's); None: a new connection for each call."""
    names_tried: tuple[str, ...] = ()
    """Every name of the node the agent was looked up by (Dispatch.names_for), for the error when none has one."""
    url: str | None = None

    @property
    def ran_on(self) -> str:
        return f"{self.node} (agent {self.url or 'not found'})"

    def plan(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        return self._call(PLAN, action, params, ctx)

    def execute(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        return self._call(EXECUTE, action, params, ctx)

    def _timeout(self, ctx: StepContext) -> float:
        remaining = ctx.remaining()
        return self.default_timeout if remaining == float("inf") else remaining

    def _call(self, kind: str, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        answered = threading.Event()
        watcher = threading.Thread(
            target=self._cancel_when_stopping,
            args=(ctx, answered),
            name=f"remediate-cancel-r{ctx.run_id}-s{ctx.step_index}",
            daemon=True,
        )
        watcher.start()
        try:
            return self._call_agent(kind, action, params, ctx)
        finally:
            answered.set()

    def _cancel_when_stopping(self, ctx: StepContext, answered: threading.Event) -> None:
        """While the call waits: once the executor is stopping, ask the agent to stop this step (once)."""
        while not answered.wait(STOP_POLL_S):
            if ctx.stopping.is_set():
                self._cancel(ctx)
                return

    def _cancel(self, ctx: StepContext) -> None:
        import requests  # here, not at the top: see remediate.outbound.lazyhttp

        if self.url is None:
            return  # no agent found yet: nothing was sent
        data = CancelRequest(run_id=ctx.run_id, step_index=ctx.step_index, target=self.node).encode()
        try:
            response, nonce = self._send(CANCEL_PATH, data, 10.0)
        except requests.RequestException as exc:
            log.warning(
                "run %s step %s: stopping, but the agent of node %s was not told: %s",
                ctx.run_id,
                ctx.step_index,
                self.node,
                _short_error(exc),
            )
            return
        problem = self._unauthenticated(response, CANCEL_PATH, nonce)
        log.info(
            "run %s step %s: stopping: asked the agent of node %s to stop the step (HTTP %s: %s)%s",
            ctx.run_id,
            ctx.step_index,
            self.node,
            response.status_code,
            response.text[:200].strip(),
            f"; that answer is not the agent's: {problem}" if problem else "",
        )

    def _call_agent(self, kind: str, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        started = time.monotonic()
        budget = self._timeout(ctx)
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1) | stop_after_delay(max(0.0, budget - 1.0)),
            wait=wait_exponential(multiplier=0.25, min=min(0.2, self.retry_wait_max), max=self.retry_wait_max),
            retry=retry_if_exception_type(_Unreachable),
            reraise=True,
        )
        tries = 0
        try:
            for attempt in retrying:
                with attempt:
                    tries += 1
                    remaining = budget - (time.monotonic() - started)
                    result = self._post(kind, action, params, ctx, max(remaining, 0.5))
                    self._call_done(action.name, "answered", started)
                    return result
        except AmbiguousActionError:
            self._call_failed("ambiguous", action.name, started)
            raise
        except _BadAnswer:
            self._call_failed("bad_answer", action.name, started)
            raise
        except _Unreachable as exc:
            self._call_failed("unreachable", action.name, started)
            raise RetryableActionError(
                f"agent of node {self.node} unreachable ({tries} {'try' if tries == 1 else 'tries'}): {exc}"
            ) from exc
        except ActionError as exc:
            # The action failed on the node (the agent answered so), or no agent serves the node.
            not_found = isinstance(exc.__cause__, AgentNotFound)
            self._call_done(action.name, "not_found" if not_found else "answered", started)
            raise
        raise RetryableActionError(f"agent of node {self.node}: no time left for a call")  # pragma: no cover

    def _call_failed(self, reason: str, action: str, started: float) -> None:
        if self.on_call_error is not None:
            self.on_call_error(reason)
        self._call_done(action, reason, started)

    def _call_done(self, action: str, outcome: str, started: float) -> None:
        if self.on_call_done is not None:
            self.on_call_done(action, outcome, time.monotonic() - started)

    def _post(self, kind: str, action: Action, params: Mapping[str, Any], ctx: StepContext, timeout: float) -> Any:
        import requests  # here, not at the top: see remediate.outbound.lazyhttp

        try:
            self.url = self.directory.url_for(self.node)
        except AgentNotFound as exc:
            if exc.retryable:
                raise _Unreachable(str(exc)) from exc
            others = [name for name in self.names_tried if name != self.node]
            also = f"; nor for its other names {', '.join(map(repr, others))}" if others else ""
            raise ActionError(f"{exc}{also}") from exc
        data = StepRequest(
            action=action.name,
            params=dict(params),
            run_id=ctx.run_id,
            step_index=ctx.step_index,
            playbook=ctx.playbook,
            target=self.node,  # the name the agent is known by (ctx.target may be another name of the node)
            alert=ctx.alert.as_mapping(),
            timeout=round(timeout, 3),
        ).encode()
        where = f"agent {self.url} of node {self.node}"
        try:
            # The agent enforces the step's deadline itself and answers; a little slack for the answer.
            once = kind == EXECUTE and not action.idempotent
            response, nonce = self._send(STEP_PATHS[kind], data, timeout + self.answer_slack, fresh=once)
        except requests.ConnectionError as exc:  # refused, DNS, connect timeout: nothing was run
            self.directory.forget(self.node)
            if kind == EXECUTE and not action.idempotent and not request_not_sent(exc):
                raise AmbiguousActionError(
                    f"{where}: connection lost after the request was sent ({_short_error(exc)}); the step may "
                    f"have run there and {action.name} is not idempotent: not sent again, check the node"
                ) from exc
            raise _Unreachable(f"{where}: {_short_error(exc)}") from exc
        except requests.ReadTimeout as exc:
            raise AmbiguousActionError(
                f"{where} did not answer within {timeout + self.answer_slack:.1f}s; the step may have run (or still be "
                "running) there: check the node"
            ) from exc
        except requests.RequestException as exc:
            raise _BadAnswer(f"{where}: {_short_error(exc)}") from exc
        return self._answer(response, kind, where, nonce, once=kind == EXECUTE and not action.idempotent)

    def _send(
        self, path: str, data: bytes, read_timeout: float, *, fresh: bool = False
    ) -> tuple[requests.Response, str]:
        """POST `data` to `path` of the agent found (`url`), signed with the node's own credential, never the
        master (the agent of one node cannot command another); its answer and the request's nonce. On a kept
        connection (`connections`) unless `fresh`."""
        import requests  # here, not at the top: see remediate.outbound.lazyhttp

        headers = {"Content-Type": "application/json"}
        nonce = new_nonce()
        if self.token:
            credential = node_token(self.token, self.node)
            headers["Authorization"] = sign(credential, self.node, "POST", path, data, nonce=nonce)
        timeout = (self.connect_timeout, read_timeout)
        sender: Any = requests if fresh or self.connections is None else self.connections.session
        return sender.post(f"{self.url}{path}", data=data, headers=headers, timeout=timeout), nonce

    def _unauthenticated(self, response: requests.Response, path: str, nonce: str) -> str | None:
        """Why the answer is not the agent of this node's answer to this request; None when it is (or when
        authentication is off)."""
        if not self.token:
            return None
        try:
            verify_answer(
                response.headers.get(ANSWER_HEADER),
                node_token(self.token, self.node),
                self.node,
                path,
                nonce,
                response.status_code,
                response.content,
            )
        except AgentAuthError as exc:
            return str(exc)
        return None

    def _answer(self, response: requests.Response, kind: str, where: str, nonce: str, *, once: bool = False) -> Any:
        problem = self._unauthenticated(response, STEP_PATHS[kind], nonce)
        if problem is not None and ANSWER_HEADER not in response.headers and response.status_code in (502, 503, 504):
            problem = None  # what a proxy says when no agent answered: handled below, its body never trusted
            data = None
        else:
            try:
                data = response.json()
            except ValueError:
                data = None
        if problem is not None:
            # Not the answer of this node's agent to this request (anyone on the path, or another node's agent):
            # nothing it says is believed. What it claims is quoted, for whoever reads the error.
            claimed = f"HTTP {response.status_code} {response.text[:200]}".replace("\n", " ")
            if once:
                raise AmbiguousActionError(
                    f"{where}: refused an answer that is not the agent's ({problem}; it said: {claimed}); the "
                    "step may have run there: not sent again, check the node"
                )
            raise _BadAnswer(f"{where}: refused an answer that is not the agent's ({problem}; it said: {claimed})")
        key = answer_key(kind)
        if response.status_code == 200 and isinstance(data, dict) and key in data:
            return data[key]
        failure = error_from_answer(data, where)
        if failure is not None:
            raise failure
        proxy = response.status_code in (502, 503, 504)
        if proxy:
            self.directory.forget(self.node)
        if once and response.status_code >= 500:
            # Whatever stands between here and the agent may have passed the request on before failing: a relay
            # that forwards and then answers a bare 503 (or 500, with authentication off) as much as a 502.
            raise AmbiguousActionError(
                f"{where}: HTTP {response.status_code} {'from a proxy' if proxy else 'outside the protocol'} (not "
                "the agent's answer); the step may have run there: not sent again, check the node"
            )
        if proxy:
            raise _Unreachable(f"{where}: HTTP {response.status_code}")
        text = response.text[:200].replace("\n", " ")
        raise _BadAnswer(f"{where} gave an unexpected answer: HTTP {response.status_code} {text}")


def _short_error(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    return text if len(text) <= 300 else text[:299] + "…"
