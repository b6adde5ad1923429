"""End to end across "nodes" on loopback: a real AlertManager 0.25 -> the real ``remediate serve`` (gunicorn)
-> two real ``remediate agent`` processes standing for node-a and node-b.

Each agent has its own simulated GPUs (the same example file written twice: identical UUIDs, so a step
that reached the wrong node would visibly change the wrong file), its own scratch disk directory under
its own cleanup policy, and its own state file. The server has no GPUs and no policies of its own: it
finds the agents in the static ``agents`` map (REMEDIATE_AGENTS) and sends them node steps signed with
each node's own credential, derived from the master agent token: node-a's agent has the master (the
compatible set-up), node-b's only its own credential, printed by ``remediate agent-credential node-b``.
What happened is read back as an operator would: ``/history`` and ``/runs/<id>`` (which
record where each step ran), and the devices and directories of each "node".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from remediate.gpu.simulator import SimulatedBackend
from tests.support.realsystems import AlertManager, free_port, wait_until
from tests.support.server import HasLogTail, RemediateServer

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
AGENT_TOKEN = "e2e-agent-token-4242"
DEFAULT_MW, LOWERED_MW = 700_000, 560_000
OLD = time.time() - 3 * 86400

SCRATCH_PLAYBOOK = """\
name: scratch-full
match:
  alertname: ScratchAlmostFull
target: node
cooldown: 0s
steps:
  - name: cleanup
    action: disk.cleanup
    with: {mountpoint: "{{ labels.mountpoint }}", free_bytes: 1000TiB, max_files: 100}
    timeout: 30s
"""


class NodeAgent:
    """``remediate agent`` for one "node", as a subprocess with its own GPUs, scratch disk and state."""

    def __init__(
        self, workdir: Path, node: str, *, own_credential: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.workdir = workdir
        self.node = node
        self.own_credential = own_credential
        self.extra_env = dict(env or {})
        """More of the agent's environment (e.g. REMEDIATE_TRAINING_CONTROL_ROOT)."""
        self.port = free_port()
        self.log_path = workdir / "agent.log"
        workdir.mkdir(parents=True)
        self.gpus = SimulatedBackend(SimulatedBackend.write_example(workdir / "gpus.yaml", count=4))
        self.scratch = workdir / "scratch"
        self.scratch.mkdir()
        for index in range(3):
            path = self.scratch / f"old-{index}.tmp"
            path.write_bytes(b"x" * 1000)
            os.utime(path, (OLD, OLD))
        (self.scratch / "keep.lock").write_text("never deleted: excluded")
        self.policies = workdir / "policies.yaml"
        policy = {
            "name": "scratch",
            "mountpoint": "/scratch",
            "roots": [str(self.scratch)],
            "patterns": ["*.tmp"],
            "exclude": ["*.lock"],
            "min_age": "1d",
        }
        self.policies.write_text(yaml.safe_dump({"policies": [policy]}))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> NodeAgent:
        command = [
            sys.executable,
            "-m",
            "remediate",
            "agent",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--node-name",
            self.node,
            "--gpu-backend",
            "simulated",
            "--gpu-simulator-file",
            str(self.gpus.path),
            "--policies-file",
            str(self.policies),
            "--state-file",
            str(self.workdir / "state" / "agent.db"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
        env.update(PYTHONUNBUFFERED="1", **self.extra_env)
        if self.own_credential:
            credential = self.workdir / "node-credential"
            credential.write_text(agent_credential(self.node))
            env.update(REMEDIATE_AGENT_NODE_TOKEN_FILE=str(credential))
        else:
            env.update(REMEDIATE_AGENT_TOKEN=AGENT_TOKEN)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=env, start_new_session=True
            )

        def ready() -> bool:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AssertionError(f"agent {self.node} exited rc={self._proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{self.url}/readyz", timeout=1).status_code == 200
            return False

        wait_until(ready, 30, interval=0.05, message=f"agent {self.node} not ready")
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=5)
        self._proc = None

    @property
    def pid(self) -> int:
        """The gunicorn master's pid (what kubelet signals: the container's main process)."""
        assert self._proc is not None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no log yet)"

    def limits(self) -> dict[int, int]:
        return {g.index: g.power_limit_mw for g in self.gpus.devices()}

    def scratch_files(self) -> list[str]:
        return sorted(p.name for p in self.scratch.iterdir())


def agent_credential(node: str) -> str:
    """`remediate agent-credential NODE` as an operator runs it, with the master token in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env.update(REMEDIATE_AGENT_TOKEN=AGENT_TOKEN)
    done = subprocess.run(
        [sys.executable, "-m", "remediate", "agent-credential", node],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def nodes(tmp_path: Path, watch_log: Callable[[str, HasLogTail], None]) -> Iterator[dict[str, NodeAgent]]:
    agents = {
        "node-a": NodeAgent(tmp_path / "node-a", "node-a"),
        "node-b": NodeAgent(tmp_path / "node-b", "node-b", own_credential=True),
    }
    try:
        for name, agent in agents.items():
            watch_log(f"agent {name}", agent)
            agent.start()
        yield agents
    finally:
        for agent in agents.values():
            agent.stop()


@pytest.fixture
def server(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path, nodes: dict[str, NodeAgent]
) -> RemediateServer:
    shutil.copy(ROOT / "playbooks" / "gpu-overheat.yaml", playbooks_dir)
    (playbooks_dir / "scratch-full.yaml").write_text(SCRATCH_PLAYBOOK)
    agents = ",".join(f"{name}={agent.url}" for name, agent in nodes.items())
    # The server itself has no GPUs (nvml without a driver) and no cleanup policies: node steps can only
    # succeed on the agents.
    return start_server(env={"REMEDIATE_AGENTS": agents, "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN})


def _hot(gpus: SimulatedBackend, index: int, node: str) -> dict[str, str]:
    gpu = gpus.devices()[index]
    return {
        "alertname": "GPUTemperatureHigh",
        "severity": "warning",
        "UUID": gpu.uuid,
        "gpu": str(gpu.index),
        "Hostname": node,
    }


def _steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


def test_each_node_step_runs_on_the_agent_of_its_node_and_the_history_says_where(
    server: RemediateServer, start_alertmanager: Callable[..., AlertManager], nodes: dict[str, NodeAgent]
) -> None:
    node_a, node_b = nodes["node-a"], nodes["node-b"]
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")

    # 1. A hot GPU on node-b: node-b's GPU 2 is lowered, node-a's identical GPU 2 is not.
    labels = _hot(node_b.gpus, 2, "node-b")
    am.fire(labels, {"summary": "GPU 2 on node-b is at 91 C"})
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook="gpu-overheat")
    assert entry["target"] == "node-b"
    fired = server.run(entry["run_id"])
    lower = _steps(fired)["lower-power-limit"]
    assert lower["where"] == "node"
    assert lower["plan"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert lower["result"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert lower["result"]["backend"] == "simulated"
    assert lower["result"]["gpus"][0]["new_w"] == LOWERED_MW / 1000
    assert "ran_on" not in _steps(fired)["log-lowered"]["result"]  # a cluster step: on the server
    assert node_b.limits() == {0: DEFAULT_MW, 1: DEFAULT_MW, 2: LOWERED_MW, 3: DEFAULT_MW}
    assert set(node_a.limits().values()) == {DEFAULT_MW}

    # 2. A full scratch disk on node-a: node-a's old files go, node-b's stay.
    am.fire({"alertname": "ScratchAlmostFull", "Hostname": "node-a", "mountpoint": "/scratch"})
    entry = server.wait_for_run(status="succeeded", playbook="scratch-full")
    assert entry["target"] == "node-a"
    cleanup = _steps(server.run(entry["run_id"]))["cleanup"]
    assert cleanup["result"]["ran_on"] == f"node-a (agent {node_a.url})"
    assert node_a.scratch_files() == ["keep.lock"]
    assert node_b.scratch_files() == ["keep.lock", "old-0.tmp", "old-1.tmp", "old-2.tmp"]

    # 3. The server restarts (its database stays); the alert resolves: node-b's agent remembered the
    #    original limit in its own state file and restores it.
    server.restart()
    am.resolve(labels)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="succeeded", playbook="gpu-overheat")
    restore = _steps(server.run(entry["run_id"]))["restore-power-limit"]
    assert restore["result"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert restore["result"]["gpus"][0]["reason"] == f"restoring 700 W replaced by run {fired['id']}"
    assert set(node_b.limits().values()) == {DEFAULT_MW}

    # /history shows each run's node; `remediate history` on the database says the same.
    history = server.history()
    assert {(e["playbook"], e["target"]) for e in history if e["run_id"]} == {
        ("gpu-overheat", "node-b"),
        ("scratch-full", "node-a"),
    }
    assert {e["target"] for e in server.cli_history(playbook="scratch-full") if e["run_id"]} == {"node-a"}

    # node-b's agent logged every call with its run, step, action, params and caller.
    run_b = min(e["run_id"] for e in history if e["target"] == "node-b" and e["run_id"])  # the firing run
    assert f"call execute run {run_b} step 0 playbook gpu-overheat action gpu.set_power_limit target node-b" in (
        node_b.log_path.read_text()
    )
    # node-a's credential (all node-a's agent would leak) cannot command node-b: not even at full power.
    from remediate.agentauth import sign

    body = (
        b'{"action": "gpu.set_power_limit", "params": {"gpu": "all", "watts": 1}, "context": {"run_id": 1, '
        b'"step_index": 0, "playbook": "x", "target": "node-b", "alert": {}, "timeout": 10}}'
    )
    forged = requests.post(
        f"{node_b.url}/v1/steps/execute",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": sign(agent_credential("node-a"), "node-b", "POST", "/v1/steps/execute", body),
        },
        timeout=10,
    )
    assert forged.status_code == 401
    assert set(node_b.limits().values()) == {DEFAULT_MW}

    # 4. A node that has no agent: the step fails with that reason, and nothing runs anywhere else.
    am.fire(_hot(node_a.gpus, 0, "node-c"))
    entry = server.wait_for_run(status="failed", playbook="gpu-overheat")
    assert entry["target"] == "node-c"
    step = _steps(server.run(entry["run_id"]))["lower-power-limit"]
    assert step["status"] == "failed"
    assert "no agent configured for node 'node-c' (the agents map knows: node-a, node-b)" in step["error"]
    assert set(node_a.limits().values()) == set(node_b.limits().values()) == {DEFAULT_MW}
