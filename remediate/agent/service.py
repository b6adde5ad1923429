"""`remediate agent`: runs `where: node` steps on the node that owns the GPUs, training processes and disks.

The server sends a node step for another node here (remediate.executor.agent_calls.AgentRunner);
the agent (its HTTP face and its process are remediate.agent.server's) runs the action's `plan`
or `execute` and answers with what it returned, or with a structured error {error_class:
retryable|permanent, message}: the request and answer shapes are in remediate.agentwire.protocol,
shared with the server.

The agent trusts the server's signature, not its judgement. Every request is signed with this
node's own credential (remediate.agentwire.auth: HMAC of the master secret and the node name, so the
agent of one node cannot command another) and names its run and step; the agent logs every call
(run, step, action, params, caller), refuses a request signed for another node or seen before (also
before a restart: the signatures are kept in the state file), and signs its answers with the same
credential. Whatever a request says:

- only `where: node` actions run, and only for this node (`node_name`, default the
  host name, or one of `node_aliases`): a step for another node is refused;
- params are validated again with the action's own schema;
- the node's own settings decide the limits: the GPU backend and the power floor
  (`gpu_power_floor_watts` / `gpu_power_floor_percent`: a lower limit is refused; with
  neither set the agent's floor is DEFAULT_FLOOR_PERCENT of each GPU's default limit),
  the cleanup policies file (allowed roots, patterns, caps), the training control
  root; none of them can be sent by the server;
- the step's deadline is the request's `timeout`, at most agentwire.protocol.MAX_STEP_TIMEOUT.

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
from pathlib import Path
from typing import Any

from remediate.actions import default_registry
from remediate.actions.base import Action, ActionMemory, ActionRegistry, StepContext, Where
from remediate.actions.deadline import call_with_deadline
from remediate.agent.state import MemoryStore
from remediate.agentwire.auth import SeenSignatures, Verifier
from remediate.agentwire.protocol import (
    PLAN,
    AgentStopping,
    CancelRequest,
    NotANodeAction,
    StepRequest,
    WrongNodeError,
    step_answer,
)
from remediate.config.settings import Settings
from remediate.errors import ConfigError
from remediate.intake.alerts import alert_ref

log = logging.getLogger("remediate.agent")

DEFAULT_FLOOR_PERCENT = 50.0
"""The agent's power floor (% of each GPU's default limit) when neither floor setting is given: a signed
but wrong request can slow a GPU down, never starve it. Set gpu_power_floor_percent/_watts to change it."""


def open_memory(path: Path) -> tuple[MemoryStore, ActionMemory]:
    """The agent's own ActionMemory: a SQLite file at `path` with only that table (its parent directory is created)."""
    path = Path(path).expanduser().resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the directory of agent_state_file {path}: {exc.strerror}") from exc
    store = MemoryStore.open(path)
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
        self.node_name = settings.agent.node_name or socket.gethostname()
        self.names = {self.node_name, *settings.agent.node_aliases}
        registry = registry or default_registry(with_default_floor(settings))
        self.actions: dict[str, Action] = {
            name: registry.get(name) for name in registry.names() if registry.get(name).where == Where.NODE
        }
        self.store: MemoryStore | None = None
        if memory is None:
            self.store, memory = open_memory(settings.agent.state_file)
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
            alert=alert_ref(request.alert),
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
        return step_answer(kind, self.node_name, value, seconds)

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


def with_default_floor(settings: Settings) -> Settings:
    """`settings` with the agent's default power floor when no floor is configured."""
    if settings.gpu.power_floor_watts is None and settings.gpu.power_floor_percent is None:
        gpu = dataclasses.replace(settings.gpu, power_floor_percent=DEFAULT_FLOOR_PERCENT)
        return dataclasses.replace(settings, gpu=gpu)
    return settings


def check_agent_settings(settings: Settings) -> str | None:
    """The master agent token, if the agent has it; ConfigError when it has no credential at all."""
    token = settings.agent.resolved_token()
    if not token and not settings.agent.resolved_node_token() and not settings.auth.insecure_no_auth:
        raise ConfigError(
            "no agent token configured: set REMEDIATE_AGENT_NODE_TOKEN (this node's credential, from `remediate "
            "agent-credential NODE`) or REMEDIATE_AGENT_TOKEN (the server's master secret), or, for local "
            "experiments only, --insecure-no-auth"
        )
    return token


def agent_verifier(
    settings: Settings, node_name: str, names: set[str], *, seen: SeenSignatures | None = None
) -> Verifier | None:
    """How the agent checks signed requests (and signs its answers); None only with insecure_no_auth and no
    credential. `seen`: where accepted signatures are kept (the state file's, so replays stay refused across
    restarts; in memory when None)."""
    master = check_agent_settings(settings)
    own = settings.agent.resolved_node_token()
    if not master and not own:
        return None
    return Verifier.for_names(names, master=master, own=(node_name, own) if own else None, seen=seen)
