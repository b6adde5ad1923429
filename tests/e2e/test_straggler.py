"""End to end: a straggling rank climbs the shipped fail-slow ladder and the job restarts without its node.

The parts are real: `torchrun --nproc_per_node 2 --max-restarts 1` of tests/support/jobs/torchrun_job.py (gloo, CPU;
each rank exports StepMetrics on its own port), Prometheus scraping both ranks and evaluating the shipped
TrainingStragglerRank rule, AlertManager, `remediate serve` (gunicorn) running the shipped training-fail-slow
playbook, a `remediate agent` for each of the job's nodes, and the test Kubernetes API server (real HTTP, the
chart's RBAC) holding the nodes. The job is multi-node as deployed with node-local control roots: rank 0 on
node-b registers in node-b's control root, and node-a's (the slow rank's) holds no job, so the restart must run
on node-b's agent (the rule's `control_node`, the step's `run_on`) while the cordon names node-a.

Only the times shrink, so that a ladder of hours runs in a minute: the rule's rate window, `for` and
`keep_firing_for`, the playbook's holds_for, cooldown and the undo check's window (tests/support/failslow.py
rewrites the shipped files and nothing else). AlertManager re-sends the still-firing alert every 4 s: the shipped
routing re-sends it within the rung's holds_for too (alertmanager/alertmanager.yml).

On one machine a restarted job cannot move, so the job plays the scheduler: rank 1 runs on node-a (the slow node:
its steps take 0.1 s more once the job has trained a while) and, once restarted, on node-c (the job's `--nodes`).
What is checked: rung 1 tells on-call with the evidence; the still-firing alert climbs to rung 2, which
cordons and taints node-a (not node-b or node-c) and restarts the job; both ranks resume the checkpoint the
restart saved, the alert resolves, the undo waits until Prometheus shows the job even again and
lets node-a back in; both ranks end with equal weights. `pytest -s` prints the timeline (the closing note's).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.failslow import (
    PLAYBOOK,
    alerting,
    fast_failslow_playbook,
    fast_straggler_rule,
    finished_at,
    finished_runs,
)
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.helm import ChartRbac
from tests.support.realsystems import AlertManager, Prometheus, WebhookRecorder, parse_timestamp
from tests.support.rules import rules_of
from tests.support.server import AGENT_TOKEN, NodeAgent, RemediateServer
from tests.support.torchrun import Torchrun
from tests.support.training import require

pytestmark = [pytest.mark.integration]

require("torch")

ROOT = Path(__file__).resolve().parents[2]
JOB = "llm-straggler"
SLOW, HEALTHY, SPARE = "node-a", "node-b", "node-c"
TAINT = {"key": "remediate.io/training-slow", "value": "straggler", "effect": "NoSchedule"}


@pytest.fixture
def kube_api(default_chart_rbac: ChartRbac) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        for node in (SLOW, HEALTHY, SPARE):
            api.add_node(node)
        yield api


def _taints(kube_api: FakeKubeAPI, node: str) -> list[dict[str, str]]:
    return [{k: t[k] for k in TAINT} for t in kube_api.node(node)["spec"].get("taints") or []]


def _node_changes(kube_api: FakeKubeAPI) -> list[tuple[str, str]]:
    return [(c.kind, c.target) for c in kube_api.changes if c.kind in ("cordon", "uncordon", "taint+", "taint-")]


def _runs(server: RemediateServer) -> list[dict[str, Any]]:
    return server.runs(playbook=PLAYBOOK)


def test_a_straggling_rank_climbs_the_ladder_and_the_job_restarts_from_its_checkpoint_without_the_slow_node(
    tmp_path: Path,
    playbooks_dir: Path,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
) -> None:
    with contextlib.ExitStack() as stack:  # the agents stop whatever happens
        timeline = _run_the_job_and_the_ladder(tmp_path, playbooks_dir, kube_api, recorder, start_alertmanager,
                                               watch_log, stack)  # fmt: skip
    _print_timeline(timeline)


def _run_the_job_and_the_ladder(
    tmp_path: Path,
    playbooks_dir: Path,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
    stack: contextlib.ExitStack,
) -> dict[str, float]:
    fast_failslow_playbook(playbooks_dir)
    roots = {node: tmp_path / f"control-{node}" for node in (SLOW, HEALTHY)}
    agents = {node: NodeAgent(tmp_path / f"agent-{node}", node, env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(root)})
              for node, root in roots.items()}  # fmt: skip
    for node, agent in agents.items():
        roots[node].mkdir()
        watch_log(f"agent {node}", agent)
        stack.callback(agent.stop)
        agent.start()
    sink = {"type": "webhook", "url": recorder.url}
    server = RemediateServer(
        tmp_path / "remediate",
        playbooks_dir,
        env={
            "REMEDIATE_KUBECONFIG": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
            "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
            "REMEDIATE_SINKS": json.dumps({"oncall": sink, "breakfix": sink}),
            "REMEDIATE_AGENTS": ",".join(f"{node}={agent.url}" for node, agent in agents.items()),
            "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
        },
    )
    with alerting(tmp_path, server, start_alertmanager, watch_log, repeat_interval="4s") as (prom, ports):
        job = Torchrun(tmp_path, roots[HEALTHY], "job", "--metrics-ports", ",".join(map(str, ports)),
                       "--nodes", f"{HEALTHY},{SLOW};{HEALTHY},{SPARE}", "--slow-node", SLOW, "--slow-seconds", "0.1",
                       "--slow-after", "12", "--batch-seconds", "0.05", "--checkpoint-every", "20",
                       "--stop-after", "99", "--after-restart", "1000000", "--stop-file", str(tmp_path / "stop"),
                       max_restarts=1, job=JOB)  # fmt: skip
        watch_log("torchrun", job)
        try:
            timeline = _climb_restart_and_undo(server, prom, kube_api, recorder, job)
            (tmp_path / "stop").touch()
            job.finish(60)
        finally:
            job.stop()
            server.stop()
    assert not any(roots[SLOW].iterdir()), "node-a's control root holds no job: rank 0 registered on node-b"
    return timeline


def _climb_restart_and_undo(
    server: RemediateServer, prom: Prometheus, kube_api: FakeKubeAPI, recorder: WebhookRecorder, job: Torchrun
) -> dict[str, float]:
    first = job.wait_for(0, "registered", timeout=60)[0]
    prom.wait_until_scraping(timeout=60)
    (slowed,) = job.wait_for(1, "slowed", timeout=60)
    assert slowed["node"] == SLOW and not job.events(0, "slowed")

    # Rung 1: on-call hears the evidence; the node and the job are left alone.
    runs = finished_runs(server, 1)
    (notify,) = runs
    assert (notify["rung"], notify["status"], notify["target"]) == (1, "succeeded", SLOW), notify
    rung1 = server.run(notify["run_id"])
    labels = rung1["alert"]["labels"]
    assert (labels["training_job"], labels["rank"], labels["node"]) == (JOB, "1", SLOW), labels
    assert labels["control_node"] == HEALTHY, labels  # rank 0's node
    ratio = float(rung1["alert"]["annotations"]["ratio"].rstrip("x"))
    assert ratio > 1.2, rung1["alert"]["annotations"]  # 0.15 s against a median of ~0.1 s: ~1.5x
    (pending,) = [a for a in prom.alerts() if a["labels"]["alertname"] == "TrainingStragglerRank"]
    assert pending["state"] == "firing" and pending["labels"]["node"] == SLOW
    (told,) = [json.dumps(r.json) for r in recorder.requests]
    for evidence in (JOB, "rank 1", f"node {SLOW}", rung1["alert"]["annotations"]["ratio"], "since"):
        assert evidence in told, told
    assert not kube_api.node(SLOW)["spec"].get("unschedulable")
    assert job.proc.poll() is None and not job.events(0, "resumed")

    # Rung 2, once the alert still fires holds_for after rung 1: keep node-a out, restart from a checkpoint.
    runs = finished_runs(server, 2)
    climbed = runs[1]
    assert (climbed["rung"], climbed["status"]) == (2, "succeeded"), climbed
    assert "after rung 1" in climbed["reason"], climbed["reason"]  # still firing (or, after a lost scrape, again)
    rung2 = server.run(climbed["run_id"])
    steps = {s["name"]: s for s in rung2["steps"]}
    assert list(steps) == ["cordon", "taint", "restart", "notify"]
    assert all(s["status"] == "succeeded" for s in steps.values()), rung2["steps"]
    assert _node_changes(kube_api)[:2] == [("cordon", SLOW), ("taint+", SLOW)]
    restart = steps["restart"]["result"]
    assert restart["applied_by_pid"] == first["pid"] and restart["exit_code"] == 75
    assert steps["restart"]["node"] == HEALTHY and restart["ran_on"].startswith(f"{HEALTHY} (agent ")
    assert climbed["target"] == SLOW  # the ladder, its cooldown and repeat offences stay the slow node's
    saved = restart["checkpoint"]["step"]

    # torchrun starts the job again: both ranks resume that checkpoint, rank 1 now on node-c.
    zero, one = (job.wait_for(rank, "resumed", timeout=90)[0] for rank in (0, 1))
    assert zero["restarts"] == one["restarts"] == 1
    assert zero["step"] == one["step"] == saved and zero["checksum"] == one["checksum"]

    # The alert resolves; the undo checks the job's step times first, then lets node-a back in.
    runs = finished_runs(server, 3)
    undo = runs[2]
    assert undo["run"]["phase"] == "resolved" and undo["status"] == "succeeded", undo
    rung2_undo = server.run(undo["run_id"])
    check = rung2_undo["steps"][0]
    assert check["name"] == "job-fast-for-10m" and check["result"]["passed"] is True, check
    assert [s["name"] for s in rung2_undo["steps"]] == ["job-fast-for-10m", "untaint", "uncordon"]
    assert _node_changes(kube_api) == [
        ("cordon", SLOW), ("taint+", SLOW), ("taint-", SLOW), ("uncordon", SLOW)
    ]  # fmt: skip
    for node in (SLOW, HEALTHY, SPARE):
        assert not kube_api.node(node)["spec"].get("unschedulable") and not _taints(kube_api, node)
    assert len(_runs(server)) == 3, _runs(server)  # no rung 3: the job left the slow node

    times = finished_at(rung2)
    return {
        "slowdown began (rank 1 on node-a)": slowed["t"],
        "rule true in Prometheus (pending; ratio > 1.2 over its 10 s window)": parse_timestamp(
            pending["activeAt"]
        ).timestamp(),
        "alert received from AlertManager, rung 1 accepted (for 8 s, group_wait 1 s)": notify["time"],
        "rung 1: on-call notified": finished_at(rung1)["notify"],
        "rung 2 accepted (still firing)": climbed["time"],
        "rung 2: node-a cordoned": times["cordon"],
        "rung 2: node-a tainted": times["taint"],
        "rung 2: restart acknowledged (checkpoint saved; every rank exits 75)": times["restart"],
        "job resumed from the checkpoint (both ranks)": max(zero["t"], one["t"]),
        "alert resolved, undo accepted": undo["time"],
        "undo: Prometheus shows the job even for 10 s": finished_at(rung2_undo)["job-fast-for-10m"],
        "undo: node-a untainted and uncordoned": finished_at(rung2_undo)["uncordon"],
    }


def _print_timeline(timeline: dict[str, float]) -> None:
    start = timeline.pop("slowdown began (rank 1 on node-a)")
    lines = [f"  {t - start:7.1f} s  {what}" for what, t in timeline.items()]
    print("\nfail-slow timeline (seconds after the slowdown began; rule window 10 s, for 8 s; holds_for 12 s):")
    print("\n".join(lines))


def test_the_fast_copies_keep_the_shipped_expressions(tmp_path: Path, playbooks_dir: Path) -> None:
    """What the end-to-end test runs differs from the shipped rule and playbook in their times only."""
    shipped = yaml.safe_load((ROOT / "playbooks" / f"{PLAYBOOK}.yaml").read_text())
    fast_failslow_playbook(playbooks_dir)
    fast = yaml.safe_load((playbooks_dir / f"{PLAYBOOK}.yaml").read_text())
    assert [r["steps"] for r in fast["escalate"]] == [r["steps"] for r in shipped["escalate"]]
    assert fast["match"] == shipped["match"] and fast["target"] == shipped["target"]
    query = fast["escalate"][1]["on_resolved"][0]["with"]["query"]
    assert query == shipped["escalate"][1]["on_resolved"][0]["with"]["query"].replace("[5m]", "[10s]")
    (rule,) = yaml.safe_load(fast_straggler_rule(tmp_path).read_text())["groups"][0]["rules"]
    (original,) = [r for r in rules_of("training-failslow") if r["alert"] == "TrainingStragglerRank"]
    assert rule["expr"] == original["expr"].replace("[2m]", "[10s]") and rule["labels"] == original["labels"]
    assert rule["annotations"] == original["annotations"]
