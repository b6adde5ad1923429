"""An agent pod gets its own node's credential, and nothing else, for its projected ServiceAccount token.

The server (a real app on a SQLite file) asks the test Kubernetes API server (real HTTP, the official client)
who a token is (TokenReview), then reads the pod: tokens are issued by that API server as the kubelet would
project them into a pod.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server as make_wsgi_server

from remediate.agentwire.auth import node_token
from remediate.agentwire.protocol import CREDENTIAL_PATH
from tests.support.agent import AGENT_TOKEN
from tests.support.fake_apiserver import API_AUDIENCE, FakeKubeAPI
from tests.support.helm import NAMESPACE, Helm, chart_rbac
from tests.support.http import OPERATOR_TOKEN, MakeServer, Server
from tests.support.waiting import scaled

# The chart's names (tests.support.helm renders release `rel` into namespace NAMESPACE), so that its RBAC applies.
NS, DAEMONSET, ACCOUNT, AUDIENCE = NAMESPACE, "rel-remediate-agent", "rel-remediate-agent", "remediate-agent"


@pytest.fixture
def cluster(kube_api: FakeKubeAPI) -> FakeKubeAPI:
    kube_api.add_daemonset(NS, DAEMONSET)
    for node in ("node-a", "node-b"):
        kube_api.add_node(node)
        kube_api.add_pod(
            NS, f"{DAEMONSET}-{node[-1]}", node, owner="DaemonSet", owner_name=DAEMONSET, service_account=ACCOUNT
        )
    return kube_api


@pytest.fixture
def server(make_server: MakeServer, cluster: FakeKubeAPI, kubeconfig: Path) -> Server:
    return make_server(
        agent_selector="app.kubernetes.io/component=agent",
        agent_namespace=NS,
        agent_daemonset=DAEMONSET,
        agent_service_account=ACCOUNT,
        agent_token=AGENT_TOKEN,
        kubeconfig=kubeconfig,
        workers=1,  # this one process has all of agent_enroll_rate (20/s): only the per-address bounds show
    )


def ask(server: Server, token: str | None, *, address: str = "127.0.0.1") -> tuple[int, dict[str, str]]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    response = server.client.post(CREDENTIAL_PATH, headers=headers, environ_base={"REMOTE_ADDR": address})
    return response.status_code, response.json


def test_an_agent_pod_gets_the_credential_of_its_own_node_only(server: Server, cluster: FakeKubeAPI) -> None:
    token_a = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))
    token_b = cluster.issue_token(NS, f"{DAEMONSET}-b", audiences=(AUDIENCE,))

    assert ask(server, token_a) == (200, {"node": "node-a", "credential": node_token(AGENT_TOKEN, "node-a")})
    assert ask(server, token_b) == (200, {"node": "node-b", "credential": node_token(AGENT_TOKEN, "node-b")})
    # Whoever presents node-a's token (root on node-a reads it from the pod's volume) gets node-a's, never node-b's.
    assert node_token(AGENT_TOKEN, "node-a") != node_token(AGENT_TOKEN, "node-b")


def test_tokens_that_are_not_a_live_agent_pods_get_nothing(server: Server, cluster: FakeKubeAPI) -> None:
    # The API server's own audience (an automounted token): not for us.
    api_token = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(API_AUDIENCE,))
    # A pod of the namespace that is not the DaemonSet's, with the agents' labels and account copied.
    cluster.add_pod(NS, "impostor", "node-b", owner="ReplicaSet", owner_name="x", service_account=ACCOUNT)
    impostor = cluster.issue_token(NS, "impostor", audiences=(AUDIENCE,))
    # Another account's pod, even one a DaemonSet controls.
    cluster.add_pod(NS, "other-ds-pod", "node-b", owner="DaemonSet", owner_name=DAEMONSET, service_account="other")
    other_account = cluster.issue_token(NS, "other-ds-pod", audiences=(AUDIENCE,))
    # Another namespace.
    cluster.add_pod("elsewhere", "agent", "node-b", owner="DaemonSet", owner_name=DAEMONSET, service_account=ACCOUNT)
    elsewhere = cluster.issue_token("elsewhere", "agent", audiences=(AUDIENCE,))
    # The token of an agent pod that is gone (taken before the pod was deleted), and an expired one.
    cluster.add_pod(NS, f"{DAEMONSET}-old", "node-b", owner="DaemonSet", owner_name=DAEMONSET, service_account=ACCOUNT)
    gone = cluster.issue_token(NS, f"{DAEMONSET}-old", audiences=(AUDIENCE,))
    del cluster.pods[(NS, f"{DAEMONSET}-old")]
    expired = cluster.issue_token(NS, f"{DAEMONSET}-b", audiences=(AUDIENCE,), expires_in=-1)

    answers = {
        name: ask(server, token)
        for name, token in {
            "none": None,
            "made up": "fake-sa-token.0123",
            "api audience": api_token,
            "impostor": impostor,
            "other account": other_account,
            "elsewhere": elsewhere,
            "gone": gone,
            "expired": expired,
        }.items()
    }

    assert {name: status for name, (status, _) in answers.items()} == {
        "none": 401,
        "made up": 401,
        "api audience": 401,
        "impostor": 403,
        "other account": 403,
        "elsewhere": 403,
        "gone": 401,
        "expired": 401,
    }
    assert all("credential" not in body for _, body in answers.values())
    assert "is invalid for the target audiences" in answers["api audience"][1]["message"]
    assert "controlled by ReplicaSet x, not DaemonSet rel-remediate-agent" in answers["impostor"][1]["message"]
    assert "service account 'other' is not the agents'" in answers["other account"][1]["message"]
    assert f"not a service account of namespace {NS!r}" in answers["elsewhere"][1]["message"]
    assert "has been invalidated" in answers["gone"][1]["message"]
    assert "expired" in answers["expired"][1]["message"]


def test_the_servers_own_bearer_tokens_are_no_agent_credential_request(server: Server) -> None:
    status, body = ask(server, OPERATOR_TOKEN)

    assert status == 401 and "credential" not in body


def test_an_unreachable_api_is_a_503_the_agent_retries(server: Server, cluster: FakeKubeAPI) -> None:
    token = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))
    cluster.inject("status", method="POST", path=r"/apis/authentication\.k8s\.io/v1/tokenreviews", status=503, times=1)

    assert ask(server, token)[0] == 503
    assert ask(server, token)[0] == 200


def test_without_kubernetes_discovery_no_credential_is_handed_out(make_server: MakeServer) -> None:
    server = make_server(agents=(("node-a", "http://10.0.0.5:9096"),), agent_token=AGENT_TOKEN)

    status, body = ask(server, "anything")

    assert status == 404 and "hands out no agent credentials" in body["message"]


@pytest.fixture
def server_url(server: Server) -> Iterator[str]:
    """The server's app on a loopback port, for the CLI's real HTTP calls."""
    http = make_wsgi_server("127.0.0.1", 0, server.app, threaded=True)
    thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_port}"
    http.shutdown()
    thread.join(5)


def fetch(node: str, server_url: str, token: str, tmp_path: Path, *, wait: float = 0) -> tuple[int, str, Path]:
    """`remediate agent-credential NODE --server ...` as the chart's init container runs it."""
    from click.testing import CliRunner

    from remediate.cli import main

    token_file, output = tmp_path / "token", tmp_path / f"credential-{node}"
    token_file.write_text(token)
    args = ["agent-credential", node, "--server", server_url, "--service-account-token-file", str(token_file)]
    result = CliRunner().invoke(main, [*args, "--output", str(output), "--wait", str(wait)])
    return result.exit_code, result.output, output


def test_the_init_containers_command_writes_the_credential_of_its_own_node(
    server_url: str, cluster: FakeKubeAPI, tmp_path: Path
) -> None:
    token_a = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))

    code, said, output = fetch("node-a", server_url, token_a, tmp_path)
    assert code == 0, said
    assert output.read_text().strip() == node_token(AGENT_TOKEN, "node-a")
    assert output.stat().st_mode & 0o777 == 0o600

    # node-a's token cannot be passed off as node-b's: the server names the token's node, the command refuses.
    code, said, output = fetch("node-b", server_url, token_a, tmp_path)
    assert code != 0 and "gives the credential of node 'node-a', not 'node-b'" in said
    assert not output.exists()

    wrong_audience = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(API_AUDIENCE,))
    code, said, _ = fetch("node-a", server_url, wrong_audience, tmp_path)
    assert code != 0 and "refused this pod an agent credential" in said and "HTTP 401" in said


def test_a_token_whose_audience_the_api_server_did_not_confirm_gets_nothing(
    server: Server, cluster: FakeKubeAPI
) -> None:
    """An API server that reviews without audiences (one before 1.13, an audience-unaware authenticator) says
    `authenticated` for any pod's token, the automounted one meant for the API server included, and lists no
    audiences: nobody checked that the token was meant for us."""
    ours = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))
    for_the_api = cluster.issue_token(NS, f"{DAEMONSET}-b", audiences=(API_AUDIENCE,))
    cluster.audience_unaware = True

    answers = [ask(server, ours), ask(server, for_the_api)]

    assert [status for status, _ in answers] == [401, 401]
    assert all("credential" not in body for _, body in answers)
    assert (
        "did not confirm that the token is for audience 'remediate-agent' (status.audiences: none)"
        in (answers[0][1]["message"])
    )


def test_a_pod_that_names_the_agent_daemonset_with_another_uid_gets_nothing(
    server: Server, cluster: FakeKubeAPI
) -> None:
    """Whoever may create pods in the namespace can write any ownerReference: the name and kind of the agent
    DaemonSet, and a UID of their choosing. Only the DaemonSet's own UID counts."""
    cluster.add_node("gpu-9")
    cluster.add_pod(
        NS,
        f"{DAEMONSET}-forged",
        "gpu-9",
        owner="DaemonSet",
        owner_name=DAEMONSET,
        owner_uid=str(uuid.uuid4()),
        service_account=ACCOUNT,
    )
    forged = cluster.issue_token(NS, f"{DAEMONSET}-forged", audiences=(AUDIENCE,))
    genuine = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))

    status, body = ask(server, forged)

    assert status == 403 and "credential" not in body
    assert f"names DaemonSet {DAEMONSET} with UID" in body["message"] and "not one of its pods" in body["message"]
    assert ask(server, genuine)[0] == 200
    # The DaemonSet deleted and made again under its name: the pods of the old one are no agents of it.
    del cluster.daemonsets[(NS, DAEMONSET)]
    assert (
        "which does not exist"
        in ask(server, cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,)))[1]["message"]
    )
    cluster.add_daemonset(NS, DAEMONSET)
    assert ask(server, cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,)))[0] == 403


def test_a_terminating_agent_pod_gets_nothing(server: Server, cluster: FakeKubeAPI) -> None:
    """A deleted pod's token stays valid through its grace period (the API server accepts it): the server
    does not hand a pod on its way out a credential."""
    token = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))
    cluster.start_deletion(NS, f"{DAEMONSET}-a", seconds=scaled(60))

    status, body = ask(server, token)

    assert status == 403 and "credential" not in body
    assert "is terminating" in body["message"]


def test_a_server_that_may_not_review_tokens_says_so_and_the_agent_stops_asking(
    server_url: str, server: Server, cluster: FakeKubeAPI, helm: Helm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The chart's RBAC, enforced by the API server, without the binding that grants `create tokenreviews`:
    every agent is refused whatever its token, so it is the server's set-up, not a wait-and-see 503."""
    rbac = chart_rbac(helm)
    without = [o for o in rbac.objects if o["metadata"]["name"] != "rel-remediate-agent-credentials"]
    assert len(without) == len(rbac.objects) - 2  # the ClusterRole and its binding
    cluster.authorize_as(without, rbac.service_account)
    token = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))

    with caplog.at_level(logging.ERROR, logger="remediate.server"):
        status, body = ask(server, token)
    assert status == 500 and body["error"] == "enrollment_broken"
    assert 'cannot create resource "tokenreviews"' in body["message"]
    assert "its ServiceAccount needs create tokenreviews" in body["message"]
    assert any("cannot hand out agent credentials" in r.getMessage() for r in caplog.records)

    # The init container's command gives up at once, saying where to look (it would wait out --wait on a 503).
    started = time.monotonic()
    code, said, output = fetch("node-a", server_url, token, tmp_path, wait=scaled(10))
    assert code != 0 and "fix the server, not this pod" in said and "HTTP 500" in said
    assert "waiting for the server" not in said and not output.exists()
    assert time.monotonic() - started < scaled(10)

    # With the chart's whole RBAC (tokenreviews, the pod, the agent DaemonSet by name) the same token works.
    cluster.authorize_as(rbac.objects, rbac.service_account)
    assert ask(server, token) == (200, {"node": "node-a", "credential": node_token(AGENT_TOKEN, "node-a")})


def test_refused_tokens_and_floods_cost_the_api_server_a_bounded_number_of_reviews(
    server: Server, cluster: FakeKubeAPI
) -> None:
    """Anyone reaching the port may ask; each question is a TokenReview. The same refused token is answered from
    memory, and one address gets a burst of 10 reviews, then one every 3 s (429 with Retry-After)."""
    reviews = r"/apis/authentication\.k8s\.io/v1/tokenreviews"
    answers = [ask(server, "fake-sa-token.stolen-or-made-up", address="10.0.0.66") for _ in range(20)]
    assert {status for status, _ in answers} == {401}
    assert cluster.count("POST", reviews) == 1

    started = time.monotonic()
    flood = [ask(server, f"fake-sa-token.guess-{n}", address="10.0.0.99") for n in range(30)]
    elapsed = time.monotonic() - started
    statuses = [status for status, _ in flood]
    reviewed = cluster.count("POST", reviews) - 1
    assert 10 <= reviewed <= 10 + int(elapsed / 3) + 1, (reviewed, elapsed)
    assert statuses[:10] == [401] * 10 and statuses.count(429) == 30 - reviewed
    response = server.client.post(
        CREDENTIAL_PATH, headers={"Authorization": "Bearer another-guess"}, environ_base={"REMOTE_ADDR": "10.0.0.99"}
    )
    assert response.status_code == 429 and 1 <= int(response.headers["Retry-After"]) <= 3

    # Other addresses are not held up: an agent pod gets its credential.
    token_a = cluster.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,))
    assert ask(server, token_a, address="10.0.0.7")[0] == 200


def test_all_addresses_together_get_the_servers_token_review_rate_and_no_more(
    make_server: MakeServer, cluster: FakeKubeAPI, kubeconfig: Path
) -> None:
    """A DaemonSet rollout: many agent pods, each from its own address, ask at once. The API server sees
    agent_enroll_rate TokenReviews per second (shared by the HTTP workers), the others a 429 with Retry-After."""
    server = make_server(
        agent_selector="app.kubernetes.io/component=agent",
        agent_namespace=NS,
        agent_daemonset=DAEMONSET,
        agent_service_account=ACCOUNT,
        agent_token=AGENT_TOKEN,
        kubeconfig=kubeconfig,
        agent_enroll_rate=4,
        workers=2,  # this worker's share: 2 in any second
    )
    reviews = r"/apis/authentication\.k8s\.io/v1/tokenreviews"
    for n in range(12):
        cluster.add_pod(
            NS, f"{DAEMONSET}-r{n}", "node-a", owner="DaemonSet", owner_name=DAEMONSET, service_account=ACCOUNT
        )
    tokens = [cluster.issue_token(NS, f"{DAEMONSET}-r{n}", audiences=(AUDIENCE,)) for n in range(12)]

    started = time.monotonic()
    answers = [
        server.client.post(
            CREDENTIAL_PATH, headers={"Authorization": f"Bearer {token}"}, environ_base={"REMOTE_ADDR": f"10.1.0.{n}"}
        )
        for n, token in enumerate(tokens)
    ]
    elapsed = time.monotonic() - started
    statuses = [answer.status_code for answer in answers]
    reviewed = cluster.count("POST", reviews)
    assert 2 <= reviewed <= 2 * (1 + int(elapsed)), (reviewed, elapsed)
    assert statuses[:2] == [200, 200] and statuses.count(200) == reviewed and statuses.count(429) == 12 - reviewed
    refused = [answer for answer in answers if answer.status_code == 429]
    assert {answer.headers["Retry-After"] for answer in refused} == {"1"}
    assert all("ask again" in answer.json["message"] for answer in refused)

    # A second later the bucket has refilled: a refused agent that honours Retry-After gets its credential.
    time.sleep(1.0)
    again = server.client.post(
        CREDENTIAL_PATH, headers={"Authorization": f"Bearer {tokens[-1]}"}, environ_base={"REMOTE_ADDR": "10.1.0.11"}
    )
    assert again.status_code == 200 and again.json["node"] == "node-a"
