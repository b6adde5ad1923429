"""Which runner a step gets (executor.dispatch, .runners), calls to a real agent on loopback (.agent_calls),
finding agents in Kubernetes."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import requests
import yaml
from kubernetes import client as k8s

from remediate.actions.base import InMemoryMemory, StepContext
from remediate.actions.log import LogAction
from remediate.agent.service import AgentService
from remediate.agentwire.auth import ANSWER_HEADER, new_nonce, node_token, sign, sign_answer
from remediate.agentwire.protocol import EXECUTE, PERMANENT, STEP_PATHS, AgentNotFound, StepRequest, classify
from remediate.config.settings import Settings
from remediate.errors import ActionError, AmbiguousActionError, ConfigError, RetryableActionError
from remediate.executor.agent_calls import AGENT_CALL_ERRORS, AgentRunner, ChainedAgents, StaticAgents
from remediate.executor.dispatch import Dispatch
from remediate.executor.runners import LocalRunner, WrongHostError, stamped
from remediate.intake.alerts import alert_ref
from remediate.kube.agents import KubernetesAgents
from tests.support.agent import AGENT_TOKEN, Echo, agent_settings, registry_with, serve_agent
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.realsystems import free_port

ECHO = Echo()


class IdempotentEcho(Echo):
    idempotent: ClassVar[bool] = True


IDEMPOTENT_ECHO = IdempotentEcho()


def ctx(target: str = "node-b", seconds: float = 10.0) -> StepContext:
    import time

    return StepContext(
        run_id=3,
        step_index=1,
        playbook="pb",
        target=target,
        alert=alert_ref({"alertname": "Hot", "labels": {"Hostname": target}}),
        deadline=time.monotonic() + seconds,
        memory=InMemoryMemory(),
    )


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[str, Echo]]:
    echo = Echo()
    settings = agent_settings(tmp_path)
    service = AgentService(settings, registry=registry_with(echo), memory=InMemoryMemory())
    with serve_agent(service, settings) as url:
        yield url, echo


def runner(url_or_directory: Any, token: str | None = AGENT_TOKEN, **kwargs: Any) -> AgentRunner:
    directory = StaticAgents({"node-b": url_or_directory}) if isinstance(url_or_directory, str) else url_or_directory
    kwargs.setdefault("retry_wait_max", 0.01)
    return AgentRunner("node-b", directory, token, **kwargs)


# --------------------------------------------------------------------------- dispatch


def test_without_agents_this_hosts_node_steps_run_here_and_say_so() -> None:
    dispatch = Dispatch.from_settings(Settings.of(node_name="gpu-host", node_aliases=("gpu-host.example",)))

    assert not dispatch.uses_agents
    node = dispatch.runner_for(ECHO, "gpu-host")
    assert isinstance(node, LocalRunner)
    assert node.ran_on == "gpu-host (server)"
    assert stamped(node, {"x": 1}) == {"x": 1, "ran_on": "gpu-host (server)"}
    assert isinstance(dispatch.runner_for(ECHO, "gpu-host.example"), LocalRunner)
    cluster = dispatch.runner_for(LogAction(), "node-b")
    assert cluster.ran_on is None
    assert stamped(cluster, {"x": 1}) == {"x": 1}  # cluster steps are recorded as before, for any target


def test_without_agents_a_node_step_for_another_node_is_refused_naming_node_name() -> None:
    """Finding 13: on a single host a node step for another node ran here, on the wrong machine."""
    dispatch = Dispatch.from_settings(Settings.of(node_name="gpu-host"))
    echo = Echo()

    refused = dispatch.runner_for(echo, "node-b")

    for call in (refused.plan, refused.execute):
        with pytest.raises(WrongHostError, match=r"node 'node-b' is not this host \(node_name 'gpu-host'") as error:
            call(echo, {"word": "x"}, ctx())
        assert "node_aliases" in str(error.value) and "agent_selector" in str(error.value)
    assert echo.calls == []


def test_without_agents_or_node_name_only_this_machines_own_name_runs_here() -> None:
    dispatch = Dispatch.from_settings(Settings())
    echo = Echo()

    assert isinstance(dispatch.runner_for(echo, socket.gethostname()), LocalRunner)
    refused = dispatch.runner_for(echo, "node-b")
    with pytest.raises(
        WrongHostError, match=r"Set node_name \(REMEDIATE_NODE_NAME\) to the name alerts give this host"
    ):
        refused.plan(echo, {"word": "x"}, ctx())
    assert echo.calls == []


def test_with_agents_node_steps_for_other_nodes_go_to_their_agent_and_this_nodes_stay_here() -> None:
    settings = Settings.of(
        node_name="node-a", agents=(("node-b", "http://10.0.0.7:9096"),), agent_token="agent-token-0123456789"
    )
    dispatch = Dispatch.from_settings(settings)

    assert dispatch.uses_agents
    assert isinstance(dispatch.runner_for(ECHO, "node-a"), LocalRunner)
    remote = dispatch.runner_for(ECHO, "node-b")
    assert isinstance(remote, AgentRunner)
    assert remote.node == "node-b"
    assert isinstance(dispatch.runner_for(LogAction(), "node-b"), LocalRunner)


def test_agents_without_an_agent_token_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no agent token"):
        Dispatch.from_settings(Settings.of(agents=(("node-b", "http://x:1"),)))
    with pytest.raises(ConfigError, match="no agent token"):
        Dispatch.from_settings(Settings.of(agent_selector="app=agent"))
    assert Dispatch.from_settings(Settings.of(agents=(("node-b", "http://x:1"),), insecure_no_auth=True)).uses_agents


def test_static_map_and_discovery_are_chained_in_that_order() -> None:
    settings = Settings.of(
        agents=(("node-b", "http://x:1"),), agent_selector="app=agent", agent_token="agent-token-0123456789"
    )
    directory = Dispatch.from_settings(settings).directory
    assert isinstance(directory, ChainedAgents)
    assert [type(d) for d in directory.directories] == [StaticAgents, KubernetesAgents]


# --------------------------------------------------------------------------- calling a real agent


def test_plan_and_execute_travel_to_the_agent_with_the_steps_context(agent: tuple[str, Echo]) -> None:
    url, echo = agent
    remote = runner(url)

    plan = remote.plan(ECHO, {"word": "hi"}, ctx())
    result = remote.execute(ECHO, {"word": "hi"}, ctx())

    assert plan == {"would_echo": "hi", "remembered": None}
    assert result == {"echoed": "hi", "run_id": 3, "alertname": "Hot"}
    assert remote.ran_on == f"node-b (agent {url})"
    assert stamped(remote, result)["ran_on"] == f"node-b (agent {url})"
    assert [c[0] for c in echo.calls] == ["plan", "execute"]
    assert 9 < echo.calls[1][2].remaining() <= 10  # the step's remaining time went along


def assert_permanent(error: BaseException) -> None:
    """`error` fails its step at once: the executor retries only a RetryableActionError, and the agent reports
    anything else as `permanent` (agent_protocol.classify), so a retry can never repeat what it did."""
    assert not isinstance(error, RetryableActionError), f"retryable: {error!r}"
    assert classify(error)[0] == PERMANENT, error


def test_errors_of_the_agent_keep_their_class_and_say_where(agent: tuple[str, Echo]) -> None:
    url, _ = agent
    with pytest.raises(RetryableActionError, match=rf"device busy \(on agent {url} of node node-b\)"):
        runner(url).execute(ECHO, {"word": "x", "fail": "retryable"}, ctx())
    with pytest.raises(ActionError, match="permission denied") as permanent:
        runner(url).execute(ECHO, {"word": "x", "fail": "permanent"}, ctx())
    assert_permanent(permanent.value)


def test_a_wrong_token_and_a_wrong_node_are_permanent(agent: tuple[str, Echo]) -> None:
    url, echo = agent
    with pytest.raises(ActionError, match="agent credential: wrong signature for node 'node-b'") as wrong_token:
        runner(url, token="nope").execute(ECHO, {"word": "x"}, ctx())
    assert not isinstance(wrong_token.value, RetryableActionError)
    assert_permanent(wrong_token.value)
    # The runner sends the step for the node it signs for; a request signed for node-b naming node-c is a forgery.
    request = StepRequest(action=ECHO.name, params={"word": "x"}, run_id=1, step_index=0, playbook="p",
                          target="node-c", alert={}, timeout=5.0).encode()  # fmt: skip
    path = STEP_PATHS[EXECUTE]
    signature = sign(node_token(AGENT_TOKEN, "node-b"), "node-b", "POST", path, request, nonce=new_nonce())
    answer = requests.post(f"{url}{path}", data=request, timeout=5,
                           headers={"Content-Type": "application/json", "Authorization": signature})  # fmt: skip
    assert answer.status_code == 403
    assert "signed for node 'node-b' but its step targets 'node-c'" in answer.json()["message"]
    assert echo.calls == []


def test_the_step_is_sent_for_the_name_the_agent_is_known_by(agent: tuple[str, Echo]) -> None:
    url, echo = agent
    dispatch = Dispatch(directory=StaticAgents({"node-b": url}), token=AGENT_TOKEN)
    # dcgm-exporter's Hostname is often the host's full name; the agents map (and the agent) use its short name.
    full = "node-b.cluster.example"
    runner_of_full = dispatch.runner_for(ECHO, full)
    result = runner_of_full.execute(ECHO, {"word": "x"}, ctx(target=full))
    assert result["echoed"] == "x" and len(echo.calls) == 1
    assert runner_of_full.ran_on == f"node-b (agent {url})"
    assert echo.calls[0][2].target == "node-b"  # the step on the agent is for the agent's own name
    with pytest.raises(ActionError) as unknown:
        dispatch.runner_for(ECHO, "node-q.cluster.example").execute(ECHO, {"word": "x"}, ctx("node-q.cluster.example"))
    assert str(unknown.value) == (
        "no agent configured for node 'node-q.cluster.example' (the agents map knows: node-b); "
        "nor for its other names 'node-q'"
    )


def test_an_unreachable_agent_is_retried_a_bounded_number_of_times_then_retryable() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    with pytest.raises(RetryableActionError, match=r"agent of node node-b unreachable \(3 tries\).*127\.0\.0\.1"):
        runner(url, retries=2).execute(ECHO, {"word": "x"}, ctx())


def test_a_node_missing_from_the_static_map_fails_permanently_at_once() -> None:
    with pytest.raises(
        ActionError, match=r"no agent configured for node 'node-b' \(the agents map knows: node-z\)"
    ) as e:
        runner(StaticAgents({"node-z": "http://x:1"})).execute(ECHO, {"word": "x"}, ctx())
    assert not isinstance(e.value, RetryableActionError)


PROXY = "proxy"
"""A script entry's signer: nobody signs the answer (what a proxy in front of the agent sends)."""


class _Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next (status, body, delay[, signer]) of the server's script. The answer is
    signed as node-b's agent signs it, except 502/503/504 (a proxy's) or as `signer` says: PROXY (unsigned),
    or (node named, credential, nonce) where None keeps the request's own."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server: Any = self.server
        entry = server.script.pop(0) if server.script else (200, b'{"result": {"ok": true}}', 0)
        status, body, delay = entry[:3]
        signer = entry[3] if len(entry) > 3 else (PROXY if status in (502, 503, 504) else ("node-b", None, None))
        server.seen += 1
        if delay:
            import time

            time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if signer != PROXY:
            node, credential, nonce = signer
            request_nonce = re.search(r'nonce="([^"]*)"', self.headers.get("Authorization", ""))
            self.send_header(
                ANSWER_HEADER,
                sign_answer(
                    credential or node_token(AGENT_TOKEN, "node-b"),
                    node,
                    self.path,
                    nonce or (request_nonce.group(1) if request_nonce else ""),
                    status,
                    body,
                ),
            )
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.script, server.seen = [], 0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_proxy_error_without_an_agent_answer_is_retried(scripted: Any) -> None:
    scripted.script = [(503, b"upstream down", 0), (502, b"", 0)]
    url = f"http://127.0.0.1:{scripted.server_port}"

    assert runner(url).execute(IDEMPOTENT_ECHO, {"word": "x"}, ctx()) == {"ok": True}
    assert scripted.seen == 3


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_proxy_5xx_on_the_execute_of_an_action_that_is_not_idempotent_is_not_sent_again(
    scripted: Any, status: int
) -> None:
    """A proxy may have passed the request on before failing (a bare 503 as much as a 502): the step may have
    run."""
    scripted.script = [(status, b"", 0), (200, b'{"result": {"ok": true}}', 0)]
    url = f"http://127.0.0.1:{scripted.server_port}"

    with pytest.raises(AmbiguousActionError, match=f"HTTP {status} from a proxy .*; the step may have run"):
        runner(url).execute(ECHO, {"word": "x"}, ctx())
    assert scripted.seen == 1


@pytest.mark.parametrize("token", [AGENT_TOKEN, None], ids=["signed", "no-auth"])
def test_an_unsigned_retryable_looking_503_on_a_not_idempotent_execute_is_not_sent_again(
    scripted: Any, token: str | None
) -> None:
    """A 503 whose body looks like the agent's retryable error but that the agent did not sign is no answer of
    the agent; without authentication, a bare 503 is still no proof that nothing ran."""
    body = b'{"error": "x", "error_class": "retryable", "message": "try again"}' if token else b"busy"
    scripted.script = [(503, body, 0, PROXY), (200, b'{"result": {"ok": true}}', 0)]
    url = f"http://127.0.0.1:{scripted.server_port}"

    with pytest.raises(AmbiguousActionError, match="the step may have run"):
        runner(url, token=token).execute(ECHO, {"word": "x"}, ctx())
    assert scripted.seen == 1


def test_without_authentication_a_500_outside_the_protocol_on_a_not_idempotent_execute_may_have_run(
    scripted: Any,
) -> None:
    """With authentication off every answer is unsigned: a 500 that is no agent error (a sidecar's HTML page)
    says nothing about whether the step ran."""
    scripted.script = [(500, b"<html>Internal Server Error</html>", 0, PROXY)]
    url = f"http://127.0.0.1:{scripted.server_port}"

    with pytest.raises(AmbiguousActionError, match=r"HTTP 500 outside the protocol .*the step may have run"):
        runner(url, token=None).execute(ECHO, {"word": "x"}, ctx())
    with pytest.raises(ActionError, match="unexpected answer: HTTP 500") as plan:  # a plan changes nothing
        scripted.script = [(500, b"<html>Internal Server Error</html>", 0, PROXY)]
        runner(url, token=None).plan(ECHO, {"word": "x"}, ctx())
    assert not isinstance(plan.value, AmbiguousActionError)


def test_an_unexpected_answer_is_a_permanent_error(scripted: Any) -> None:
    scripted.script = [(200, b'{"something": 1}', 0)]
    url = f"http://127.0.0.1:{scripted.server_port}"
    with pytest.raises(ActionError, match="unexpected answer: HTTP 200") as error:
        runner(url).execute(ECHO, {"word": "x"}, ctx())
    assert_permanent(error.value)
    assert scripted.seen == 1


NODE_A = node_token(AGENT_TOKEN, "node-a")
"""What node-a's agent holds: taken from node-a, it must not answer for node-b."""


@pytest.mark.parametrize(
    "signer, why",
    [
        (PROXY, "the answer is not signed"),
        (("node-b", NODE_A, None), "wrong answer signature for node 'node-b'"),
        (("node-a", NODE_A, None), "the answer is signed for node 'node-a', not 'node-b'"),
        (
            ("node-b", None, "0" * 32),
            "the answer is signed for another request",
        ),  # an old answer of node-b's agent, replayed
    ],
    ids=["unsigned", "node-a-credential", "node-a-as-itself", "replayed-answer"],
)
def test_an_answer_not_signed_by_the_nodes_agent_for_this_request_is_refused(
    scripted: Any, signer: Any, why: str
) -> None:
    """Whoever answers in place of node-b's agent (on the path, or holding node-a's credential) is not
    believed: not a result, not an error class; an execute that must not run twice is left for a person."""
    url = f"http://127.0.0.1:{scripted.server_port}"
    forged_success = (200, b'{"result": {"ok": true}}', 0, signer)
    forged_retryable = (503, b'{"error": "x", "error_class": "retryable", "message": "try again"}', 0, signer)

    scripted.script = [forged_success]
    with pytest.raises(ActionError, match=re.escape(f"refused an answer that is not the agent's ({why}")) as plan:
        runner(url).plan(ECHO, {"word": "x"}, ctx())
    assert not isinstance(plan.value, RetryableActionError)
    scripted.script = [forged_success]
    with pytest.raises(AmbiguousActionError, match=r"not the agent's.*the step may have run there"):
        runner(url).execute(ECHO, {"word": "x"}, ctx())
    if signer != PROXY:  # a proxy's bare 503 is retried (above), a signed-but-wrong one is not
        scripted.script = [forged_retryable]
        with pytest.raises(ActionError, match="not the agent's") as retry:
            runner(url).execute(IDEMPOTENT_ECHO, {"word": "x"}, ctx())
        assert not isinstance(retry.value, RetryableActionError)
    assert scripted.seen == 2 + (signer != PROXY)


def test_the_answer_of_the_nodes_agent_is_signed_and_believed(scripted: Any) -> None:
    scripted.script = [(200, b'{"result": {"ok": 1}}', 0)]

    assert runner(f"http://127.0.0.1:{scripted.server_port}").execute(ECHO, {"word": "x"}, ctx()) == {"ok": 1}


def test_an_agent_that_takes_the_request_but_never_answers_is_not_retried(scripted: Any) -> None:
    scripted.script = [(200, b'{"result": {}}', 2.0)]
    remote = runner(f"http://127.0.0.1:{scripted.server_port}")
    remote.answer_slack = 0.2  # the agent gets the step's remaining time (at least 0.5 s) plus this to answer

    with pytest.raises(ActionError, match=r"did not answer within 0\.7s; the step may have run") as error:
        remote.execute(ECHO, {"word": "x"}, ctx(seconds=0.3))
    assert not isinstance(error.value, RetryableActionError)
    assert scripted.seen == 1


def test_each_agent_call_that_got_no_answer_is_reported_with_its_reason(scripted: Any, agent: tuple[str, Echo]) -> None:
    reasons: list[str] = []
    scripted_url = f"http://127.0.0.1:{scripted.server_port}"
    calls = [
        (f"http://127.0.0.1:{free_port()}", [], ECHO),  # nobody there: unreachable, after its retries
        (scripted_url, [(502, b"", 0)], ECHO),  # a proxy failed a step that must not run twice: ambiguous
        (scripted_url, [(200, b'{"something": 1}', 0)], ECHO),  # not the protocol: bad_answer
    ]
    for url, script, action in calls:
        scripted.script = script
        with pytest.raises(ActionError):
            runner(url, retries=1, on_call_error=reasons.append).execute(action, {"word": "x"}, ctx())
    # The agent answered: the action's own failure is the step's, not a failed call.
    with pytest.raises(ActionError, match="permission denied") as permanent:
        runner(agent[0], on_call_error=reasons.append).execute(ECHO, {"word": "x", "fail": "permanent"}, ctx())
    assert_permanent(permanent.value)

    assert reasons == ["unreachable", "ambiguous", "bad_answer"]
    assert set(reasons) == set(AGENT_CALL_ERRORS)


# --------------------------------------------------------------------------- Kubernetes discovery


def pod(
    name: str,
    ip: str | None,
    *,
    phase: str = "Running",
    ready: bool = True,
    created: int = 0,
    deleting: bool = False,
    owner: tuple[str, str] | None = ("DaemonSet", "rel-remediate-agent"),
) -> k8s.V1Pod:
    owners = [k8s.V1OwnerReference(api_version="apps/v1", kind=owner[0], name=owner[1], uid="u", controller=True)]
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name=name,
            owner_references=owners if owner else None,
            creation_timestamp=datetime.fromtimestamp(1_700_000_000 + created, UTC),
            deletion_timestamp=datetime.now(UTC) if deleting else None,
        ),
        status=k8s.V1PodStatus(
            phase=phase,
            pod_ip=ip,
            conditions=[k8s.V1PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


class FakeCoreV1:
    def __init__(self, *pods: k8s.V1Pod) -> None:
        self.pods = list(pods)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.error: Exception | None = None

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> k8s.V1PodList:
        self.calls.append((namespace, kwargs))
        if self.error:
            raise self.error
        return k8s.V1PodList(items=self.pods)


def test_discovery_asks_for_the_agent_pods_on_the_node_and_takes_the_newest_ready_one() -> None:
    api = FakeCoreV1(
        pod("agent-old", "10.1.0.4", created=0),
        pod("agent-new", "10.1.0.9", created=60),
        pod("agent-starting", "10.1.0.5", created=120, ready=False),
        pod("agent-leaving", "10.1.0.6", created=180, deleting=True),
        pod("agent-pending", None, phase="Pending", created=240),
    )
    agents = KubernetesAgents("app.kubernetes.io/component=agent", "remediate", 9096, api=api)

    assert agents.url_for("node-b") == "http://10.1.0.9:9096"
    ((namespace, kwargs),) = api.calls
    assert namespace == "remediate"
    assert kwargs["label_selector"] == "app.kubernetes.io/component=agent"
    assert kwargs["field_selector"] == "spec.nodeName=node-b"


def test_discovery_caches_answers_and_forgets_them_on_request() -> None:
    now = [0.0]
    api = FakeCoreV1(pod("agent", "fd00::7"))
    agents = KubernetesAgents("a=b", "ns", 9096, api=api, ttl=30, clock=lambda: now[0])

    assert agents.url_for("node-b") == "http://[fd00::7]:9096"
    assert agents.url_for("node-b") == "http://[fd00::7]:9096"
    assert len(api.calls) == 1
    agents.forget("node-b")
    agents.url_for("node-b")
    now[0] = 31
    agents.url_for("node-b")
    assert len(api.calls) == 3


def test_no_ready_agent_pod_or_an_api_error_is_retryable() -> None:
    agents = KubernetesAgents("a=b", "ns", 9096, api=FakeCoreV1(pod("agent-x", "10.0.0.1", ready=False)))
    with pytest.raises(AgentNotFound, match=r"no Ready agent pod on node 'node-b' .*agent-x \(Running\)") as none:
        agents.url_for("node-b")
    assert none.value.retryable

    api = FakeCoreV1()
    api.error = k8s.ApiException(status=500, reason="etcd is sad")
    with pytest.raises(AgentNotFound, match="cannot list agent pods on node 'node-b'") as broken:
        KubernetesAgents("a=b", "ns", 9096, api=api).url_for("node-b")
    assert broken.value.retryable


def test_a_step_for_a_node_without_an_agent_pod_is_retried_then_fails_retryable() -> None:
    api = FakeCoreV1()
    remote = runner(KubernetesAgents("a=b", "ns", 9096, api=api), retries=1)

    with pytest.raises(RetryableActionError, match=r"unreachable \(2 tries\): no Ready agent pod on node 'node-b'"):
        remote.plan(ECHO, {"word": "x"}, ctx())
    assert len(api.calls) == 2
    assert remote.ran_on == "node-b (agent not found)"


@pytest.mark.parametrize("node", ["node-b,metadata.name=agent-x", "node-b\n", "../node-b", "Node_B"])
def test_discovery_refuses_a_target_that_is_not_a_node_name_without_asking_the_api(node: str) -> None:
    api = FakeCoreV1(pod("agent", "10.0.0.1"))
    agents = KubernetesAgents("a=b", "ns", 9096, api=api)

    with pytest.raises(AgentNotFound, match="not a valid node name") as refused:
        agents.url_for(node)

    assert not refused.value.retryable
    assert api.calls == []


# --------------------------------------------------------------------------- discovery on a real API server


def _ready_agent_pod(api: FakeKubeAPI, name: str, node: str, ip: str) -> None:
    api.add_pod("remediate", name, node, owner="DaemonSet", labels={"app.kubernetes.io/component": "agent"})
    with api.lock:  # the kubelet's part: the pod runs, has an IP and is Ready
        api.pods[("remediate", name)]["status"] = {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        }


def test_discovery_uses_the_configured_kubeconfig_and_context_not_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 15: discovery built its client from $KUBECONFIG / ~/.kube/config whatever the settings said."""
    with FakeKubeAPI() as api:
        _ready_agent_pod(api, "agent-b", "node-b", "10.1.0.9")
        # The configured file's current context points at a dead port: only `kube_context` reaches the API.
        kubeconfig = yaml.safe_load(api.write_kubeconfig(tmp_path / "lab.kubeconfig", context="lab").read_text())
        kubeconfig["clusters"].append({"name": "gone", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}})
        kubeconfig["contexts"].append({"name": "gone", "context": {"cluster": "gone", "user": "remediate"}})
        kubeconfig["current-context"] = "gone"
        (tmp_path / "lab.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        # The default kubeconfig names another cluster that does not answer: it must not be read.
        wrong = tmp_path / "default.kubeconfig"
        wrong.write_text(
            yaml.safe_dump(
                {**kubeconfig, "contexts": kubeconfig["contexts"][1:], "clusters": kubeconfig["clusters"][1:]}
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(wrong))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        settings = Settings.of(
            agent_selector="app.kubernetes.io/component=agent",
            agent_namespace="remediate",
            agent_token="agent-token-0123456789",
            kubeconfig=tmp_path / "lab.kubeconfig",
            kube_context="lab",
        )

        directory = Dispatch.from_settings(settings).directory

        assert directory is not None
        assert directory.url_for("node-b") == "http://10.1.0.9:9096"
        assert api.count("GET", r"/api/v1/namespaces/remediate/pods") == 1


def test_discovery_with_an_unusable_configured_kubeconfig_says_which_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.kubeconfig"
    agents = KubernetesAgents("a=b", "ns", 9096, kubeconfig=missing)

    with pytest.raises(AgentNotFound, match=r"nowhere\.kubeconfig") as refused:
        agents.url_for("node-b")
    assert not refused.value.retryable
