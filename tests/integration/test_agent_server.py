"""The node agent's HTTP API (served on loopback) and its own limits: node, schema, power floor, memory."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

import pytest

from remediate.actions import default_registry
from remediate.actions.base import InMemoryMemory, StepContext
from remediate.agent.server import AgentHTTPServer
from remediate.agent.service import AgentService
from remediate.agentwire.auth import ANSWER_HEADER, AgentAuthError, node_token, sign, verify_answer
from remediate.config.settings import Settings
from remediate.errors import ActionError, ConfigError, RetryableActionError
from remediate.executor.agent_calls import AgentRunner, StaticAgents
from remediate.gpu import SimulatedBackend
from remediate.intake.alerts import alert_ref
from tests.support.agent import (
    AGENT_TOKEN,
    AgentClient,
    ClusterThing,
    Echo,
    agent_client,
    agent_settings,
    registry_with,
    serve_agent,
    step_body,
)
from tests.support.waiting import scaled

W = 1000


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def memory() -> InMemoryMemory:
    return InMemoryMemory()


Serve = Callable[[AgentService, Settings], AgentClient]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Serves an agent on loopback until the test ends; a client of it."""
    with ExitStack() as stack:
        yield lambda service, settings: stack.enter_context(agent_client(service, settings))


@pytest.fixture
def client(serve: Serve, tmp_path: Path, echo: Echo, memory: InMemoryMemory) -> AgentClient:
    settings = agent_settings(tmp_path, node_aliases=("node-b.example",))
    return serve(AgentService(settings, registry=registry_with(echo, ClusterThing()), memory=memory), settings)


def signed(
    data: bytes, path: str, *, node: str = "node-b", credential: str | None = None, now: float | None = None
) -> dict[str, str]:
    """The Authorization header the server sends: signed with `node`'s credential derived from the master."""
    return {"Authorization": sign(credential or node_token(AGENT_TOKEN, node), node, "POST", path, data, now=now)}


def post(client: AgentClient, kind: str, body: Any, headers: dict[str, str] | None = None, **signing: Any) -> Any:
    """POST a step as the server does: signed for its target node unless `headers` or `node` say otherwise."""
    path = f"/v1/steps/{kind}"
    data = json.dumps(body).encode()
    if headers is None:
        target = body.get("context", {}).get("target") if isinstance(body, dict) else None
        signing.setdefault("node", target if isinstance(target, str) and target else "node-b")
        headers = signed(data, path, **signing)
    return client.post(path, data=data, content_type="application/json", headers=headers)


def test_execute_runs_the_node_action_with_the_servers_context_and_answers_its_result(
    client: AgentClient, echo: Echo, memory: InMemoryMemory
) -> None:
    response = post(client, "execute", step_body(params={"word": "hi"}, run_id=42))

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["node"] == "node-b"
    assert body["result"] == {"echoed": "hi", "run_id": 42, "alertname": "Hot"}
    assert body["seconds"] >= 0
    ((kind, params, ctx),) = echo.calls
    assert kind == "execute"
    assert params == {"word": "hi", "fail": "no", "sleep": 0.0}  # validated here, defaults filled in
    assert (ctx.run_id, ctx.step_index, ctx.playbook, ctx.target) == (42, 0, "pb", "node-b")
    assert 9 < ctx.remaining() <= 10  # the request's timeout is the step's deadline here
    assert memory.recall("test.echo/last") == {"word": "hi"}  # the agent's own memory


def test_plan_answers_the_plan_and_reads_the_agents_memory(client: AgentClient, memory: InMemoryMemory) -> None:
    memory.remember("test.echo/last", {"word": "before"}, run_id=1)

    response = post(client, "plan", step_body(params={"word": "hi"}))

    assert response.status_code == 200
    assert response.json()["plan"] == {"would_echo": "hi", "remembered": {"word": "before"}}
    assert "result" not in response.json()


def test_an_alias_of_the_node_is_accepted(client: AgentClient) -> None:
    assert post(client, "plan", step_body(target="node-b.example")).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        # The old shared bearer token itself is no longer a credential.
        {"Authorization": f"Bearer {AGENT_TOKEN}"},
        {"Authorization": f"Basic {AGENT_TOKEN}"},
        {"Authorization": 'Remediate-HMAC node="node-b"'},
    ],
)
def test_without_a_signature_of_this_nodes_credential_nothing_runs(
    client: AgentClient, echo: Echo, headers: dict[str, str]
) -> None:
    response = post(client, "execute", step_body(), headers=headers)

    assert response.status_code == 401
    assert response.json()["error_class"] == "permanent"
    assert response.headers["WWW-Authenticate"].startswith("Remediate-HMAC")
    assert echo.calls == []


def test_a_step_for_another_node_is_refused(client: AgentClient, echo: Echo) -> None:
    response = post(client, "execute", step_body(target="node-a"))

    assert response.status_code == 421
    assert response.json()["error_class"] == "permanent"
    assert (
        "signed for node 'node-a'; this agent holds the credential of node-b, node-b.example"
        in (response.json()["message"])
    )
    assert echo.calls == []


@pytest.mark.parametrize(
    ("action", "params", "message"),
    [
        ("test.cluster", {}, "does not run on a node agent"),
        ("shell.run", {}, "does not run on a node agent (node actions here: test.echo)"),
        ("test.echo", {"word": "rm -rf /"}, "parameter 'word': letters only"),
        ("test.echo", {"word": "hi", "path": "/etc"}, "unknown parameter 'path'"),
        ("test.echo", {}, "missing required parameter 'word'"),
    ],
)
def test_the_agent_validates_action_and_params_itself(
    client: AgentClient, echo: Echo, action: str, params: dict[str, Any], message: str
) -> None:
    response = post(client, "execute", step_body(action, params))

    assert response.status_code == 422
    assert response.json()["error_class"] == "permanent"
    assert message in response.json()["message"]
    assert echo.calls == []


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b.pop("action"), "action"),
        (lambda b: b.update(params=[1]), "params"),
        (lambda b: b.pop("context"), "context"),
        (lambda b: b["context"].update(run_id=-1), "context.run_id"),
        (lambda b: b["context"].update(step_index=True), "context.step_index"),
        (lambda b: b["context"].update(target=""), "context.target"),
        (lambda b: b["context"].update(alert="x"), "context.alert"),
        (lambda b: b["context"].update(timeout=0), "context.timeout"),
        (lambda b: b["context"].update(timeout=10**9), "context.timeout"),
    ],
)
def test_a_malformed_request_is_a_400_naming_the_field(client: AgentClient, mutate: Any, field: str) -> None:
    body = step_body()
    mutate(body)

    response = post(client, "execute", body)

    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["error_class"] == "permanent"


def test_not_json_is_a_415(client: AgentClient) -> None:
    response = client.post("/v1/steps/execute", data="action=x", headers=signed(b"action=x", "/v1/steps/execute"))
    assert response.status_code == 415
    assert response.json()["error_class"] == "permanent"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        ("GET", "/v1/nope", b"", 404, "not_found"),
        ("GET", "/v1/steps/execute", b"", 405, "method_not_allowed"),
        ("POST", "/healthz", b"", 405, "method_not_allowed"),
        ("POST", "/v1/steps/execute", b"x" * (4 * 1024 * 1024 + 1), 413, "request_entity_too_large"),
        ("PUT", "/v1/steps/execute", b"", 405, "method_not_allowed"),
    ],
)
def test_what_the_agent_does_not_serve_is_a_json_error(
    client: AgentClient, method: str, path: str, body: bytes, status: int, error: str
) -> None:
    response = client.session.request(method, client.url + path, data=body, timeout=scaled(30))
    assert response.status_code == status
    assert (response.json()["error"], response.json()["error_class"]) == (error, "permanent")


@pytest.mark.parametrize(
    ("fail", "status", "error_class", "message"),
    [
        ("retryable", 503, "retryable", "device busy"),
        ("permanent", 500, "permanent", "permission denied"),
        ("bug", 500, "permanent", "unexpected KeyError in the agent"),
    ],
)
def test_action_errors_come_back_structured(
    client: AgentClient, fail: str, status: int, error_class: str, message: str
) -> None:
    response = post(client, "execute", step_body(params={"word": "x", "fail": fail}))

    assert response.status_code == status
    assert response.json()["error_class"] == error_class
    assert message in response.json()["message"]


def test_the_agent_enforces_the_steps_timeout(client: AgentClient) -> None:
    response = post(client, "execute", step_body(params={"word": "x", "sleep": 2}, timeout=0.2))

    assert response.status_code == 500
    assert response.json()["error_class"] == "permanent"
    assert "timed out after 0.2s" in response.json()["message"]


def test_health_and_readiness_need_no_token(client: AgentClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "node": "node-b"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "node": "node-b", "actions": ["test.echo"]}


def test_the_agent_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    settings = agent_settings(tmp_path, agent_token=None)
    with pytest.raises(ConfigError, match="no agent token"):
        AgentHTTPServer(settings, AgentService(settings, registry=registry_with(), memory=InMemoryMemory()))


def test_the_node_name_defaults_to_the_host_name(tmp_path: Path) -> None:
    import socket

    service = AgentService(agent_settings(tmp_path, node_name=None), registry=registry_with(), memory=InMemoryMemory())
    assert service.node_name == socket.gethostname()


# --------------------------------------------------------------------------- the shipped node actions


@pytest.fixture
def gpus(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2))


def gpu_app(serve: Serve, tmp_path: Path, gpus: SimulatedBackend, **overrides: Any) -> tuple[AgentClient, AgentService]:
    settings = agent_settings(tmp_path, gpu_backend="simulated", gpu_simulator_file=gpus.path, **overrides)
    service = AgentService(settings)
    return serve(service, settings), service


def test_only_node_actions_of_the_registry_are_served(serve: Serve, tmp_path: Path, gpus: SimulatedBackend) -> None:
    client, service = gpu_app(serve, tmp_path, gpus)
    node_actions = sorted(a for a in default_registry().names() if default_registry().get(a).where == "node")
    assert client.get("/readyz").json()["actions"] == node_actions
    assert {"gpu.set_power_limit", "gpu.restore_power_limit", "disk.cleanup"} <= set(node_actions)
    assert {"gpu.lock_clocks", "gpu.unlock_clocks", "gpu.reset"} <= set(node_actions)
    assert "log" not in node_actions
    service.close()


def test_the_agents_power_floor_refuses_a_lower_limit_whatever_the_server_asks(
    serve: Serve, tmp_path: Path, gpus: SimulatedBackend
) -> None:
    client, service = gpu_app(serve, tmp_path, gpus, gpu_power_floor_watts=600)
    uuid = gpus.devices()[0].uuid

    response = post(client, "execute", step_body("gpu.set_power_limit", {"gpu": uuid, "percent_of_default": 80}))

    assert response.status_code == 500
    assert response.json()["error_class"] == "permanent"
    assert response.json()["type"] == "BelowPowerFloor"
    assert "below this node's power floor 600 W (gpu_power_floor_watts=600)" in response.json()["message"]
    assert gpus.device(uuid).power_limit_mw == 700 * W
    # Above the floor it works.
    ok = post(client, "execute", step_body("gpu.set_power_limit", {"gpu": uuid, "watts": 650}))
    assert ok.status_code == 200, ok.json()
    assert gpus.device(uuid).power_limit_mw == 650 * W
    service.close()


def test_the_floor_as_percent_of_default(serve: Serve, tmp_path: Path, gpus: SimulatedBackend) -> None:
    client, service = gpu_app(serve, tmp_path, gpus, gpu_power_floor_percent=90)
    uuid = gpus.devices()[1].uuid

    response = post(client, "execute", step_body("gpu.set_power_limit", {"gpu": uuid, "watts": 500}))

    assert response.status_code == 500
    assert "power floor 630 W (gpu_power_floor_percent=90)" in response.json()["message"]
    service.close()


def test_what_the_gpu_action_remembers_survives_an_agent_restart_in_its_state_file(
    serve: Serve, tmp_path: Path, gpus: SimulatedBackend
) -> None:
    uuid = gpus.devices()[0].uuid
    client, service = gpu_app(serve, tmp_path, gpus)
    lowered = post(client, "execute", step_body("gpu.set_power_limit", {"gpu": uuid, "percent_of_default": 80}))
    assert lowered.status_code == 200, lowered.json()
    assert gpus.device(uuid).power_limit_mw == 560 * W
    service.close()

    client, service = gpu_app(serve, tmp_path, gpus)  # a new agent process on the same state file
    restored = post(client, "execute", step_body("gpu.restore_power_limit", {"gpu": uuid}, run_id=8))

    assert restored.status_code == 200, restored.json()
    (gpu,) = restored.json()["result"]["gpus"]
    assert gpu["outcome"] == "restored"
    assert gpu["reason"] == "restoring 700 W replaced by run 7"
    assert gpus.device(uuid).power_limit_mw == 700 * W
    assert (tmp_path / "agent-state" / "agent.db").exists()
    service.close()


def test_the_clock_lock_and_its_undo_run_on_the_agent_and_its_memory_survives_a_restart(
    serve: Serve, tmp_path: Path, gpus: SimulatedBackend
) -> None:
    """gpu.lock_clocks / gpu.unlock_clocks take the same path as the power actions."""
    uuid = gpus.devices()[1].uuid
    gpus.lock_gpu_clocks(uuid, 1200, 1800)  # the person's own lock, to come back afterwards
    client, service = gpu_app(serve, tmp_path, gpus, gpu_power_floor_watts=300)
    planned = post(client, "plan", step_body("gpu.lock_clocks", {"gpu": uuid, "percent_of_max": 70}))
    assert planned.status_code == 200, planned.json()
    assert planned.json()["plan"]["gpus"][0]["change"] == "1200..1800 MHz -> 345..1380 MHz"
    assert gpus.clocks(uuid).locked_graphics_mhz == (1200, 1800)  # a plan changes nothing

    locked = post(client, "execute", step_body("gpu.lock_clocks", {"gpu": uuid, "percent_of_max": 70}))
    assert locked.status_code == 200, locked.json()
    assert locked.json()["result"]["gpus"][0]["outcome"] == "locked"
    assert gpus.clocks(uuid).locked_graphics_mhz == (345, 1380)
    service.close()

    client, service = gpu_app(serve, tmp_path, gpus)  # a new agent process on the same state file
    unlocked = post(client, "execute", step_body("gpu.unlock_clocks", {"gpu": uuid}, run_id=8))
    assert unlocked.status_code == 200, unlocked.json()
    (gpu,) = unlocked.json()["result"]["gpus"]
    assert (gpu["outcome"], gpu["reason"]) == ("relocked", "restoring the lock 1200..1800 MHz replaced by run 7")
    assert gpus.clocks(uuid).locked_graphics_mhz == (1200, 1800)
    service.close()


def test_a_gpu_reset_on_the_agent_is_refused_while_a_process_runs_then_resets_the_drained_gpu(
    serve: Serve, tmp_path: Path, gpus: SimulatedBackend
) -> None:
    uuid = gpus.devices()[0].uuid
    client, service = gpu_app(serve, tmp_path, gpus)
    planned = post(client, "plan", step_body("gpu.reset", {"gpu": uuid}))
    assert planned.status_code == 200, planned.json()
    assert planned.json()["plan"]["gpus"][0]["blocked_by"] == ["1 compute process(es) on the GPU: pid 4200 (python)"]

    refused = post(client, "execute", step_body("gpu.reset", {"gpu": uuid}))
    assert refused.status_code == 500
    assert (refused.json()["error_class"], refused.json()["type"]) == ("permanent", "GpuResetRefused")
    assert "pid 4200 (python)" in refused.json()["message"]
    assert gpus.reset_count(uuid) == 0

    gpus.update_device(uuid, processes=[])  # drained
    done = post(client, "execute", step_body("gpu.reset", {"gpu": uuid}, run_id=9))
    assert done.status_code == 200, done.json()
    assert done.json()["result"]["gpus"][0]["outcome"] == "reset"
    assert gpus.reset_count(uuid) == 1
    service.close()


def test_the_servers_agent_runner_sends_the_new_gpu_steps_over_http_like_the_power_steps(
    tmp_path: Path, gpus: SimulatedBackend
) -> None:
    """The server side of the path: AgentRunner (what the executor uses for a node step) to a served agent."""
    uuid = gpus.devices()[0].uuid
    settings = agent_settings(tmp_path, gpu_backend="simulated", gpu_simulator_file=gpus.path)
    service = AgentService(settings)
    registry = default_registry(settings)
    ctx = StepContext(
        run_id=11,
        step_index=0,
        playbook="gpu-overheat",
        target="node-b",
        alert=alert_ref({"alertname": "GPUTemperatureHigh", "labels": {"Hostname": "node-b", "UUID": uuid}}),
        deadline=time.monotonic() + 10,
        memory=InMemoryMemory(),  # the server's memory: the agent keeps its own
    )
    with serve_agent(service, settings) as url:
        remote = AgentRunner("node-b", StaticAgents({"node-b": url}), AGENT_TOKEN, retry_wait_max=0.01)
        lock = registry.get("gpu.lock_clocks")
        result = remote.execute(lock, lock.validate({"gpu": uuid, "max_mhz": 1500}), ctx)
        assert result["gpus"][0]["outcome"] == "locked"
        assert gpus.clocks(uuid).locked_graphics_mhz == (345, 1500)
        assert ctx.memory.values == {}  # type: ignore[attr-defined]

        reset = registry.get("gpu.reset")
        with pytest.raises(ActionError, match="GPU reset refused, nothing was reset") as refused:
            remote.execute(reset, reset.validate({"gpu": uuid}), ctx)
        assert not isinstance(refused.value, RetryableActionError)
        assert f"(on agent {url} of node node-b)" in str(refused.value)
    service.close()


# --------------------------------------------------------------------------- per-node credentials


def own_credential_client(serve: Serve, tmp_path: Path, echo: Echo) -> AgentClient:
    """An agent of node-b that knows only its own credential, not the master secret."""
    settings = agent_settings(tmp_path, agent_token=None, agent_node_token=node_token(AGENT_TOKEN, "node-b"))
    return serve(AgentService(settings, registry=registry_with(echo), memory=InMemoryMemory()), settings)


def test_an_agent_with_only_its_own_credential_runs_the_servers_signed_steps(
    serve: Serve, tmp_path: Path, echo: Echo
) -> None:
    client = own_credential_client(serve, tmp_path, echo)

    response = post(client, "execute", step_body())

    assert response.status_code == 200, response.json()
    assert [call[0] for call in echo.calls] == ["execute"]


def test_another_nodes_credential_cannot_command_this_node(serve: Serve, tmp_path: Path, echo: Echo) -> None:
    client = own_credential_client(serve, tmp_path, echo)
    node_a = node_token(AGENT_TOKEN, "node-a")  # what node-a's agent holds, e.g. after node-a is compromised

    claims_b = post(client, "execute", step_body(), node="node-b", credential=node_a)
    as_itself = post(client, "execute", step_body(), node="node-a", credential=node_a)

    assert claims_b.status_code == 401
    assert "wrong signature for node 'node-b'" in claims_b.json()["message"]
    assert as_itself.status_code == 421
    assert echo.calls == []


def test_a_request_signed_for_this_node_but_targeting_another_name_is_403(client: AgentClient, echo: Echo) -> None:
    response = post(client, "execute", step_body(target="node-b.example"), node="node-b")

    assert response.status_code == 403
    assert response.json()["error"] == "wrong_credential"
    assert echo.calls == []


def test_a_replayed_or_stale_signed_request_is_refused(client: AgentClient, echo: Echo) -> None:
    path, data = "/v1/steps/execute", json.dumps(step_body()).encode()
    headers = signed(data, path)
    first = client.post(path, data=data, content_type="application/json", headers=headers)
    replay = client.post(path, data=data, content_type="application/json", headers=headers)
    stale = post(client, "execute", step_body(), now=time.time() - 600)
    tampered = client.post(
        path, data=data.replace(b'"run_id": 7', b'"run_id": 8'), content_type="application/json", headers=headers
    )

    assert first.status_code == 200
    assert (replay.status_code, stale.status_code, tampered.status_code) == (401, 401, 401)
    assert "replay" in replay.json()["message"]
    assert "signed 600s ago (at most 120s either way)" in stale.json()["message"]
    assert "wrong signature" in tampered.json()["message"]
    assert len(echo.calls) == 1


def test_every_call_is_logged_with_run_step_action_params_and_caller(
    client: AgentClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remediate.agent")

    post(client, "execute", step_body(run_id=42))
    post(client, "execute", step_body(), headers={"Authorization": "Bearer guess"})

    messages = [r.getMessage() for r in caplog.records if r.name == "remediate.agent"]
    assert (
        'call execute run 42 step 0 playbook pb action test.echo target node-b params {"word": "hello"} '
        "from 127.0.0.1 (signed for node-b)"
    ) in messages
    assert any(m.startswith("refused execute from 127.0.0.1: expected Authorization: Remediate-HMAC") for m in messages)


def test_without_a_configured_floor_the_agent_refuses_to_starve_a_gpu(
    serve: Serve, tmp_path: Path, gpus: SimulatedBackend
) -> None:
    client, service = gpu_app(serve, tmp_path, gpus)
    uuid = gpus.devices()[0].uuid

    response = post(client, "execute", step_body("gpu.set_power_limit", {"gpu": uuid, "watts": 1}))

    assert response.status_code == 500
    assert response.json()["type"] == "BelowPowerFloor"
    assert "power floor 350 W (gpu_power_floor_percent=50)" in response.json()["message"]
    assert gpus.device(uuid).power_limit_mw == 700 * W
    service.close()


def test_two_identical_steps_signed_in_the_same_millisecond_are_both_accepted(client: AgentClient, echo: Echo) -> None:
    now = time.time()

    first = post(client, "execute", step_body(), now=now)
    second = post(client, "execute", step_body(), now=now)

    assert (first.status_code, second.status_code) == (200, 200)  # the nonce tells them apart from a replay
    assert len(echo.calls) == 2


class Waiter(Echo):
    """A node action that waits, as a training step waits for its acknowledgement, until told to stop."""

    name: ClassVar[str] = "test.wait"

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.started.set()
        if ctx.stopping.wait(5):
            raise ActionError("remediate is stopping: withdrawn")
        return {"waited": True}


def _waiting_step(serve: Serve, tmp_path: Path) -> tuple[AgentService, Waiter, AgentClient, Any]:
    """An agent whose run 7 step 0 is waiting; the future of its answer."""
    waiter = Waiter()
    settings = agent_settings(tmp_path)
    service = AgentService(settings, registry=registry_with(waiter), memory=InMemoryMemory())
    client = serve(service, settings)
    pool = ThreadPoolExecutor(1)
    answer = pool.submit(post, AgentClient(client.url), "execute", step_body("test.wait", {"word": "hi"}))
    pool.shutdown(wait=False)
    assert waiter.started.wait(scaled(5))
    return service, waiter, client, answer


def cancel(client: AgentClient, body: Any, **signing: Any) -> Any:
    data = json.dumps(body).encode()
    return client.post(
        "/v1/steps/cancel",
        data=data,
        content_type="application/json",
        headers=signed(data, "/v1/steps/cancel", **signing),
    )


def test_a_signed_cancel_stops_the_named_running_step_which_answers_as_usual(serve: Serve, tmp_path: Path) -> None:
    _service, _waiter, client, answer = _waiting_step(serve, tmp_path)
    other_step = cancel(client, {"run_id": 7, "step_index": 1, "target": "node-b"})
    assert other_step.status_code == 200 and other_step.json() == {"node": "node-b", "running": 0}
    assert not answer.done()
    refused = client.post("/v1/steps/cancel", json={"run_id": 7, "step_index": 0, "target": "node-b"})
    assert refused.status_code == 401  # unsigned: nobody else may stop a step
    foreign = cancel(client, {"run_id": 7, "step_index": 0, "target": "node-c"})
    assert foreign.status_code == 403
    assert cancel(client, {"run_id": "7", "step_index": 0, "target": "node-b"}).json()["field"] == "run_id"
    assert not answer.done()

    stopped = cancel(client, {"run_id": 7, "step_index": 0, "target": "node-b"})
    assert stopped.status_code == 200 and stopped.json()["running"] == 1
    response = answer.result(5)
    assert response.status_code == 500 and response.json()["error_class"] == "permanent"
    assert "remediate is stopping" in response.json()["message"]


def test_a_stopping_agent_stops_its_running_steps_and_starts_no_new_one(serve: Serve, tmp_path: Path) -> None:
    service, _waiter, client, answer = _waiting_step(serve, tmp_path)
    assert service.stop_all() == 1  # what SIGTERM calls (agent.server.serve_agent)
    assert "remediate is stopping" in answer.result(5).json()["message"]
    again = post(client, "execute", step_body("test.wait", {"word": "hi"}, run_id=8))
    assert again.status_code == 503 and again.json()["error_class"] == "retryable"  # the server may try again later
    assert "is stopping" in again.json()["message"]


# --------------------------------------------------------------------------- replays, signed answers


def test_a_signed_request_replayed_after_the_agent_restarts_is_refused(tmp_path: Path, echo: Echo) -> None:
    """The signatures an agent accepted are kept in its state file: a restart (new process, same node) does not
    make a request taken off the wire good again while its timestamp is."""
    settings = agent_settings(tmp_path)
    path, data = "/v1/steps/execute", json.dumps(step_body()).encode()
    headers = signed(data, path)

    before = AgentService(settings, registry=registry_with(echo))
    with agent_client(before, settings) as client:
        first = client.post(path, data=data, content_type="application/json", headers=headers)
    before.close()
    after = AgentService(settings, registry=registry_with(echo))  # the agent restarted: same state file
    with agent_client(after, settings) as client:
        replay = client.post(path, data=data, content_type="application/json", headers=headers)
        fresh = post(client, "execute", step_body())
    after.close()

    assert first.status_code == 200
    assert replay.status_code == 401 and "replay" in replay.json()["message"]
    assert fresh.status_code == 200
    assert len(echo.calls) == 2


def test_the_agent_signs_its_answers_to_the_servers_requests_only(client: AgentClient) -> None:
    path, data = "/v1/steps/execute", json.dumps(step_body(params={"word": "x", "fail": "permanent"})).encode()
    nonce = "ab" * 16
    headers = {"Authorization": sign(node_token(AGENT_TOKEN, "node-b"), "node-b", "POST", path, data, nonce=nonce)}

    answer = client.post(path, data=data, content_type="application/json", headers=headers)
    guess = post(client, "execute", step_body(), headers={"Authorization": "Bearer guess"})
    wrong_node = post(client, "execute", step_body(), node="node-a")

    assert answer.status_code == 500  # an error answer is signed like a result
    verify_answer(
        answer.headers.get(ANSWER_HEADER),
        node_token(AGENT_TOKEN, "node-b"),
        "node-b",
        path,
        nonce,
        500,
        answer.content,
    )
    with pytest.raises(AgentAuthError, match="wrong answer signature"):  # not for another status or body
        verify_answer(
            answer.headers.get(ANSWER_HEADER), node_token(AGENT_TOKEN, "node-b"), "node-b", path, nonce, 200, b"{}"
        )
    # A caller without this node's credential gets no signature (for a nonce of its choosing) to reuse.
    assert (guess.status_code, wrong_node.status_code) == (401, 421)
    assert ANSWER_HEADER not in guess.headers and ANSWER_HEADER not in wrong_node.headers


def test_node_a_agent_standing_in_node_b_place_is_refused_by_the_server(tmp_path: Path, echo: Echo) -> None:
    """Whatever answers at node-b's address with node-a's credential (node-a's own agent, or a thief's copy of
    it) is not node-b's agent: the server refuses its answers, signed or not."""
    settings = agent_settings(
        tmp_path, node_name="node-a", agent_token=None, agent_node_token=node_token(AGENT_TOKEN, "node-a")
    )
    service = AgentService(settings, registry=registry_with(echo), memory=InMemoryMemory())
    ctx = StepContext(
        run_id=3,
        step_index=0,
        playbook="pb",
        target="node-b",
        alert=alert_ref({"alertname": "Hot", "labels": {"Hostname": "node-b"}}),
        deadline=time.monotonic() + 10,
        memory=InMemoryMemory(),
    )
    with serve_agent(service, settings) as url:
        remote = AgentRunner("node-b", StaticAgents({"node-b": url}), AGENT_TOKEN, retry_wait_max=0.01)
        with pytest.raises(ActionError, match="refused an answer that is not the agent's") as refused:
            remote.plan(echo, {"word": "x"}, ctx)
    assert not isinstance(refused.value, RetryableActionError)
    assert echo.calls == []
