"""Helpers of the node agent tests: small node/cluster actions, an agent served on loopback, a step body."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import requests

from remediate.actions.base import Action, ActionRegistry, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.agent.server import AgentHTTPServer
from remediate.agent.service import AgentService
from remediate.config.settings import Settings
from remediate.errors import ActionError, RetryableActionError
from tests.support.waiting import scaled

AGENT_TOKEN = "agent-token-0123456789"


class Echo(Action):
    """A node action: plan says what it would do, execute records the call and remembers it."""

    name: ClassVar[str] = "test.echo"
    where: ClassVar[Where] = Where.NODE
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "word": Param(str, required=True, check=lambda v: None if v.isalpha() else "letters only"),
            "fail": Param(str, default="no", choices=("no", "retryable", "permanent", "bug")),
            "sleep": Param(float, default=0.0),
        }
    )

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], StepContext]] = []

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.calls.append(("plan", dict(params), ctx))
        return {"would_echo": params["word"], "remembered": ctx.memory.recall("test.echo/last")}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.calls.append(("execute", dict(params), ctx))
        if params["sleep"]:
            time.sleep(params["sleep"])
        if params["fail"] == "retryable":
            raise RetryableActionError("device busy")
        if params["fail"] == "permanent":
            raise ActionError("permission denied")
        if params["fail"] == "bug":
            raise KeyError("oops")
        ctx.memory.remember("test.echo/last", {"word": params["word"]}, run_id=ctx.run_id)
        return {"echoed": params["word"], "run_id": ctx.run_id, "alertname": ctx.alert.alertname}


class ClusterThing(Action):
    name: ClassVar[str] = "test.cluster"
    where: ClassVar[Where] = Where.CLUSTER

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        raise AssertionError("a cluster action must never run on an agent")


def step_body(
    action: str = "test.echo",
    params: Mapping[str, Any] | None = None,
    *,
    target: str = "node-b",
    timeout: float = 10.0,
    run_id: int = 7,
) -> dict[str, Any]:
    return {
        "action": action,
        "params": dict(params if params is not None else {"word": "hello"}),
        "context": {
            "run_id": run_id,
            "step_index": 0,
            "playbook": "pb",
            "target": target,
            "alert": {"alertname": "Hot", "labels": {"Hostname": target}},
            "timeout": timeout,
        },
    }


def agent_settings(tmp_path: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "node_name": "node-b",
        "agent_token": AGENT_TOKEN,
        "agent_state_file": tmp_path / "agent-state" / "agent.db",
    }
    values.update(overrides)
    return Settings.of(**values)


@contextmanager
def serve_agent(service: AgentService, settings: Settings) -> Iterator[str]:
    """The agent's HTTP server on a free loopback port, in a thread; yields its base URL."""
    server = AgentHTTPServer(settings, service, ("127.0.0.1", 0))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class AgentClient:
    """Requests to an agent that serve_agent serves: `post(path, data, content_type=..., headers=...)`, `get(path)`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()

    def post(
        self, path: str, data: bytes | str = b"", *, content_type: str | None = None, **kwargs: Any
    ) -> requests.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if content_type:
            headers["Content-Type"] = content_type
        return self.session.post(self.url + path, data=data, headers=headers, timeout=scaled(30), **kwargs)

    def get(self, path: str) -> requests.Response:
        return self.session.get(self.url + path, timeout=scaled(30))


@contextmanager
def agent_client(service: AgentService, settings: Settings) -> Iterator[AgentClient]:
    with serve_agent(service, settings) as url:
        yield AgentClient(url)


def registry_with(*actions: Action) -> ActionRegistry:
    return ActionRegistry(actions)
