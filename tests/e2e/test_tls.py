"""HTTPS for `remediate serve` (tls_cert_file, tls_key_file): the real server process with a certificate made
here by openssl, and the agent's enrollment command verifying it with the CA file, as the chart's init
container does with `tls.enabled`. Without TLS the agent credential crosses the pod network in clear text.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from remediate.agentwire.auth import node_token
from tests.support.agent import AGENT_TOKEN
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.processes import run_remediate
from tests.support.server import RemediateServer
from tests.support.waiting import scaled

NS, DAEMONSET, AUDIENCE = "remediate", "rel-remediate-agent", "remediate-agent"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=scaled(30))


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """A CA and a server certificate it signed for 127.0.0.1 and localhost (what a Service name is in a cluster)."""
    where = tmp_path / "tls"
    where.mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test CA", cwd=where)
    openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=localhost", cwd=where)
    (where / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "tls.crt", "-days", "2", "-extfile", "san.cnf", cwd=where,
    )  # fmt: skip
    return where


class HttpsServer(RemediateServer):
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@pytest.fixture
def https_server(
    tmp_path: Path, certificates: Path, kube_api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HttpsServer]:
    kube_api.add_node("node-a")
    kube_api.add_daemonset(NS, DAEMONSET)
    kube_api.add_pod(NS, f"{DAEMONSET}-a", "node-a", owner="DaemonSet", owner_name=DAEMONSET, service_account="agent")
    (tmp_path / "playbooks").mkdir()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certificates / "ca.crt"))  # this test's own requests verify
    server = HttpsServer(
        tmp_path / "server",
        tmp_path / "playbooks",
        env={
            "REMEDIATE_TLS_CERT_FILE": str(certificates / "tls.crt"),
            "REMEDIATE_TLS_KEY_FILE": str(certificates / "tls.key"),
            "REMEDIATE_AGENT_SELECTOR": "app.kubernetes.io/component=agent",
            "REMEDIATE_AGENT_NAMESPACE": NS,
            "REMEDIATE_AGENT_DAEMONSET": DAEMONSET,
            "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
            "REMEDIATE_KUBECONFIG": str(kubeconfig),
            # Far longer than the test waits for an answer: a connection that held a thread would hold it.
            "REMEDIATE_REQUEST_TIMEOUT": f"{scaled(60):.0f}s",
        },
    )
    server.start()
    yield server
    server.stop()


def enroll(server: HttpsServer, token: Path, output: Path, *ca: str) -> subprocess.CompletedProcess[str]:
    """The chart's init container: `remediate agent-credential` as a process, without this test's CA bundle."""
    args = ["agent-credential", "node-a", "--server", server.url, "--service-account-token-file", str(token)]
    return run_remediate(*args, *ca, "--output", str(output), "--wait", "0", env={"REQUESTS_CA_BUNDLE": ""})


def test_the_agent_gets_its_credential_over_https_verified_with_the_ca_file(
    https_server: HttpsServer, certificates: Path, kube_api: FakeKubeAPI, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(kube_api.issue_token(NS, f"{DAEMONSET}-a", audiences=(AUDIENCE,)))

    done = enroll(https_server, token, tmp_path / "credential", "--ca-file", str(certificates / "ca.crt"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "credential").read_text().strip() == node_token(AGENT_TOKEN, "node-a")

    # Without the CA, the certificate does not verify: the token is never sent, and it says why at once.
    refused = enroll(https_server, token, tmp_path / "nothing")
    assert refused.returncode != 0 and not (tmp_path / "nothing").exists()
    assert "certificate does not verify with the system's CAs" in refused.stdout + refused.stderr


def test_plain_http_and_stalled_handshakes_hold_nothing_up(https_server: HttpsServer) -> None:
    # Plain HTTP on the HTTPS port gets no answer, and the connection is closed.
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{https_server.port}/readyz", timeout=scaled(5))
    # Clients that start a handshake and stop (the 5-byte head of a TLS record) hold no thread: more of them
    # than the server has threads (2 workers x 4), and an HTTPS request is still answered at once.
    stalled = [socket.create_connection(("127.0.0.1", https_server.port), timeout=scaled(5)) for _ in range(12)]
    try:
        for each in stalled:
            each.sendall(b"\x16\x03\x01\x02\x00")
        answer = requests.get(f"{https_server.url}/readyz", timeout=scaled(3))
        assert answer.status_code == 200
    finally:
        for each in stalled:
            each.close()
    assert https_server.running
