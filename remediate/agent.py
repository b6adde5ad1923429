"""`remediate agent`: runs `where: node` steps on the node that owns the GPUs, training processes and disks.

The server sends a node step for another node here (remediate.runners.AgentRunner);
the agent (its HTTP face is remediate.agent_server) runs the action's `plan` or
`execute` and answers with what it returned, or with a structured error
{error_class: retryable|permanent, message}.

The agent trusts the server's signature, not its judgement. Every request is signed with this
node's own credential (remediate.agentauth: HMAC of the master secret and the node name, so the
agent of one node cannot command another) and names its run and step; the agent logs every call
(run, step, action, params, caller) and refuses a request signed for another node. Whatever a
request says:

- only `where: node` actions run, and only for this node (`node_name`, default the
  host name, or one of `node_aliases`): a step for another node is refused;
- params are validated again with the action's own schema;
- the node's own settings decide the limits: the GPU backend and the power floor
  (`gpu_power_floor_watts` / `gpu_power_floor_percent`: a lower limit is refused; with
  neither set the agent's floor is DEFAULT_FLOOR_PERCENT of each GPU's default limit),
  the cleanup policies file (allowed roots, patterns, caps), the training control
  root; none of them can be sent by the server;
- the step's deadline is the request's `timeout`, at most MAX_STEP_TIMEOUT.

What node actions remember (ActionMemory, e.g. the power limit a restore puts
back) lives on the node, in the agent's own SQLite file (`agent_state_file`;
Helm: a hostPath beside the control root): it describes the node's own hardware,
it is written before the hardware is changed, and it survives restarts of the
agent and of the server, and the loss of the server's database. The server's
audit history keeps every plan and result (which show the remembered values).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediate.actions import default_registry
from remediate.actions.base import Action, ActionMemory, ActionRegistry, StepContext, Where
from remediate.agentauth import Verifier
from remediate.config import Settings
from remediate.errors import ConfigError, ParamsError, RemediateError, RetryableActionError
from remediate.executor import call_with_deadline
from remediate.store import Store

log = logging.getLogger("remediate.agent")

PLAN = "plan"
EXECUTE = "execute"
MAX_STEP_TIMEOUT = 24 * 3600.0
RETRYABLE = "retryable"
PERMANENT = "permanent"
DEFAULT_FLOOR_PERCENT = 50.0
"""The agent's power floor (% of each GPU's default limit) when neither floor setting is given: a signed
but wrong request can slow a GPU down, never starve it. Set gpu_power_floor_percent/_watts to change it."""


class AgentRequestError(RemediateError):
    """The request is not a step request (bad JSON shape)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class WrongNodeError(RemediateError):
    """The step is for another node than this agent's."""


class NotANodeAction(ParamsError):
    """The action does not exist here or is not a `where: node` action."""


class AgentStopping(RetryableActionError):
    """The agent is stopping (SIGTERM): it starts no new step; another agent (or this one restarted) may."""


@dataclass(frozen=True)
class CancelRequest:
    """Stop one running step: {run_id, step_index, target}, sent by a server whose executor is stopping."""

    run_id: int
    step_index: int
    target: str

    @classmethod
    def parse(cls, body: Any) -> CancelRequest:
        if not isinstance(body, dict):
            raise AgentRequestError("body", "must be a JSON object {run_id, step_index, target}")
        for name in ("run_id", "step_index"):
            value = body.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise AgentRequestError(name, "must be a non-negative integer")
        if not isinstance(body.get("target"), str) or not body["target"]:
            raise AgentRequestError("target", "must be a non-empty string")
        return cls(run_id=body["run_id"], step_index=body["step_index"], target=body["target"])


@dataclass(frozen=True)
class StepRequest:
    """One step as the server sends it: {action, params, context: {run_id, ..., timeout}}."""

    action: str
    params: dict[str, Any]
    run_id: int
    step_index: int
    playbook: str
    target: str
    alert: dict[str, Any]
    timeout: float

    @classmethod
    def parse(cls, body: Any) -> StepRequest:
        if not isinstance(body, dict):
            raise AgentRequestError("body", "must be a JSON object {action, params, context}")
        action = body.get("action")
        if not isinstance(action, str) or not action:
            raise AgentRequestError("action", "must be a non-empty string")
        params = body.get("params", {})
        if not isinstance(params, dict):
            raise AgentRequestError("params", "must be an object")
        context = body.get("context")
        if not isinstance(context, dict):
            raise AgentRequestError(
                "context", "must be an object {run_id, step_index, playbook, target, alert, timeout}"
            )
        for name in ("run_id", "step_index"):
            value = context.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise AgentRequestError(f"context.{name}", "must be a non-negative integer")
        for name in ("playbook", "target"):
            if not isinstance(context.get(name), str) or not context[name]:
                raise AgentRequestError(f"context.{name}", "must be a non-empty string")
        alert = context.get("alert", {})
        if not isinstance(alert, dict):
            raise AgentRequestError("context.alert", "must be an object")
        timeout = context.get("timeout")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= MAX_STEP_TIMEOUT:
            raise AgentRequestError("context.timeout", f"must be seconds, more than 0 and at most {MAX_STEP_TIMEOUT:g}")
        return cls(
            action=action,
            params=params,
            run_id=context["run_id"],
            step_index=context["step_index"],
            playbook=context["playbook"],
            target=context["target"],
            alert=alert,
            timeout=float(timeout),
        )


def open_memory(path: Path) -> tuple[Store, ActionMemory]:
    """The agent's own ActionMemory: a SQLite store at `path` (its parent directory is created)."""
    path = Path(path).expanduser().resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the directory of agent_state_file {path}: {exc.strerror}") from exc
    store = Store.open(f"sqlite:///{path}")
    return store, store.memory()


class AgentService:
    """The agent's logic, without HTTP: `run(kind, request)` and `ready()`."""

    def __init__(
        self,
        settings: Settings,
        *,
        registry: ActionRegistry | None = None,
        memory: ActionMemory | None = None,
    ) -> None:
        self.settings = settings
        self.node_name = settings.node_name or socket.gethostname()
        self.names = {self.node_name, *settings.node_aliases}
        registry = registry or default_registry(with_default_floor(settings))
        self.actions: dict[str, Action] = {
            name: registry.get(name) for name in registry.names() if registry.get(name).where == Where.NODE
        }
        self.store: Store | None = None
        if memory is None:
            self.store, memory = open_memory(settings.agent_state_file)
        self.memory = memory
        self.stopping = threading.Event()
        """Set by `stop_all` (the worker got SIGTERM): no new step starts."""
        # The steps running now, by (run id, step index): their `stopping` events are what
        # stop_step/stop_all set, so a waiting action withdraws what has not taken effect.
        self._running: dict[tuple[int, int], list[StepContext]] = {}
        self._running_lock = threading.Lock()

    def stop_all(self) -> int:
        """The agent is stopping: refuse new steps and tell every running one to stop; how many were told."""
        self.stopping.set()
        with self._running_lock:
            contexts = [ctx for running in self._running.values() for ctx in running]
        for ctx in contexts:
            ctx.stopping.set()
        if contexts:
            log.warning("stopping: told %d running step(s) to stop", len(contexts))
        return len(contexts)

    def stop_step(self, request: CancelRequest) -> int:
        """Tell one running step to stop (its server is stopping); how many calls of it were running."""
        self._check_target(request.target)
        with self._running_lock:
            contexts = list(self._running.get((request.run_id, request.step_index), ()))
        for ctx in contexts:
            ctx.stopping.set()
        log.info(
            "run %s step %s: the server is stopping: %s",
            request.run_id,
            request.step_index,
            f"told {len(contexts)} running call(s) to stop" if contexts else "not running here",
        )
        return len(contexts)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def action(self, name: str) -> Action:
        action = self.actions.get(name)
        if action is None:
            raise NotANodeAction(
                f"action {name!r} does not run on a node agent (node actions here: {', '.join(sorted(self.actions))})"
            )
        return action

    def run(self, kind: str, request: StepRequest) -> dict[str, Any]:
        """Plan or execute one step here; returns {node, plan|result, seconds}. Raises on refusal or failure."""
        started = time.monotonic()
        action = self.action(request.action)
        self._check_target(request.target)
        params = action.validate(request.params)
        if self.stopping.is_set():
            raise AgentStopping(f"the agent of node {self.node_name} is stopping: {action.name} was not started")
        ctx = StepContext(
            run_id=request.run_id,
            step_index=request.step_index,
            playbook=request.playbook,
            target=request.target,
            alert=request.alert,
            deadline=started + request.timeout,
            memory=self.memory,
            logger=logging.getLogger("remediate.actions"),
        )
        call = action.plan if kind == PLAN else action.execute
        label = f"run {request.run_id} step {request.step_index} {action.name} ({kind})"
        key = (request.run_id, request.step_index)
        with self._running_lock:
            self._running.setdefault(key, []).append(ctx)
        if self.stopping.is_set():  # SIGTERM came between the check above and the registration
            ctx.stopping.set()
        try:
            value = call_with_deadline(lambda: call(params, ctx), request.timeout)
        except Exception as exc:
            log.warning("%s failed after %.2fs: %s", label, time.monotonic() - started, exc)
            raise
        finally:
            with self._running_lock:
                running = self._running[key]
                running.remove(ctx)
                if not running:
                    del self._running[key]
        seconds = round(time.monotonic() - started, 3)
        log.info("%s done in %.3fs", label, seconds)
        return {"node": self.node_name, ("plan" if kind == PLAN else "result"): value, "seconds": seconds}

    def _check_target(self, target: str) -> None:
        if target not in self.names:
            aliases = sorted(self.names - {self.node_name})
            known = f" (also known as {', '.join(aliases)})" if aliases else ""
            raise WrongNodeError(
                f"this agent runs steps for node {self.node_name!r}{known}, not for {target!r}: "
                "the server sent it to the wrong agent"
            )

    def ready(self) -> dict[str, Any]:
        """Raises if the state file cannot be read."""
        if self.store is not None:
            self.store.ping()
        return {"status": "ready", "node": self.node_name, "actions": sorted(self.actions)}


def classify(exc: BaseException) -> tuple[str, str]:
    """(error_class, message) of a failed step, as the agent reports it to the server."""
    if isinstance(exc, RetryableActionError):
        return RETRYABLE, str(exc)
    if isinstance(exc, RemediateError):
        return PERMANENT, str(exc)
    return PERMANENT, f"unexpected {exc.__class__.__name__} in the agent: {exc}"


def with_default_floor(settings: Settings) -> Settings:
    """`settings` with the agent's default power floor when no floor is configured."""
    if settings.gpu_power_floor_watts is None and settings.gpu_power_floor_percent is None:
        return dataclasses.replace(settings, gpu_power_floor_percent=DEFAULT_FLOOR_PERCENT)
    return settings


def check_agent_settings(settings: Settings) -> str | None:
    """The master agent token, if the agent has it; ConfigError when it has no credential at all."""
    token = settings.resolved_agent_token()
    if not token and not settings.resolved_agent_node_token() and not settings.insecure_no_auth:
        raise ConfigError(
            "no agent token configured: set REMEDIATE_AGENT_NODE_TOKEN (this node's credential, from `remediate "
            "agent-credential NODE`) or REMEDIATE_AGENT_TOKEN (the server's master secret), or, for local "
            "experiments only, --insecure-no-auth"
        )
    return token


def agent_verifier(settings: Settings, node_name: str, names: set[str]) -> Verifier | None:
    """How the agent checks signed requests; None only with insecure_no_auth and no credential."""
    master = check_agent_settings(settings)
    own = settings.resolved_agent_node_token()
    if not master and not own:
        return None
    return Verifier.for_names(names, master=master, own=(node_name, own) if own else None)


# --------------------------------------------------------------------------- serving


def preflight(settings: Settings) -> None:
    """Fail before forking: token, node actions, state file, an explicitly chosen GPU simulator."""
    check_agent_settings(settings)
    if settings.gpu_backend == "simulated":
        from remediate.gpu import open_backend

        open_backend(settings.gpu_backend, simulator_file=settings.gpu_simulator_file)
    service = AgentService(settings)
    try:
        service.ready()
    finally:
        service.close()
    log.info(
        "agent for node %s on %s; node actions: %s; state %s",
        service.node_name,
        settings.agent_bind,
        ", ".join(sorted(service.actions)),
        settings.agent_state_file,
    )


def run_agent(settings: Settings) -> None:
    """Serve the agent under gunicorn: one worker (one state file writer), `agent_threads` threads."""
    from gunicorn.app.base import BaseApplication

    from remediate.agent_server import stop_running_steps
    from remediate.httpworker import worker_class
    from remediate.logsafe import configure_logging

    configure_logging()  # alert data in a message can never start a forged log line
    preflight(settings)
    if settings.insecure_no_auth and not settings.resolved_agent_token():
        log.warning(
            "!!! --insecure-no-auth: the agent runs node steps for ANYONE who can reach %s", settings.agent_bind
        )

    class AgentApplication(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            options: Mapping[str, Any] = {
                "bind": settings.agent_bind,
                "workers": 1,
                "threads": max(1, settings.agent_threads),
                # Steps run in the threads; slow or idle clients hold none (remediate.httpworker).
                # SIGTERM tells the running steps to stop (a training step withdraws its command) and
                # answers the server before graceful_timeout.
                "worker_class": worker_class(settings.request_timeout, on_stop=stop_running_steps),
                # A step may run as long as its timeout: the worker must not be killed for it.
                "timeout": 0,
                "graceful_timeout": 30,
                "accesslog": None,
                "errorlog": "-",
                "loglevel": "info",
                "proc_name": "remediate-agent",
            }
            for key, value in options.items():
                self.cfg.set(key, value)
            if "control_socket_disable" in self.cfg.settings:
                self.cfg.set("control_socket_disable", True)

        def load(self) -> Any:
            from remediate.agent_server import create_agent_app

            return create_agent_app(settings)

    AgentApplication().run()
