"""k8s.* steps through the real engine, executor threads and SQLite store, against the test API server.

- the storm: 100 node alerts at once on a 50-node cluster, two executors (separate stores, as two
  gunicorn workers) with 3 threads each -> exactly the cap (min(10% of 50, 3) = 3) cordoned, every
  other alert recorded (refused with the breaker's state, or a no-op on a node already held);
- faults: a 30% failure rate of mixed faults (5xx, resets, time-outs before and after the change)
  on every request while cordon -> taint -> drain runs on 8 nodes: every run ends recorded and no
  change is made twice;
- reset and the stale horizon, through ingest (decisions) and execution (queued runs);
- the operator's side: GET /breaker, POST /breaker/reset, the remediate_breaker_open gauge, and
  `remediate breaker status|reset`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.actions.log import LogAction
from remediate.breaker import BreakerOpen, CircuitBreaker, limits_from_settings
from remediate.cli import main
from remediate.config.settings import ExecutorSettings, Settings
from remediate.config.values import Sink, to_sinks
from remediate.executor.agent_calls import StaticAgents
from remediate.executor.dispatch import Dispatch
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.kube import CORDONED_BY_RUN, OWNER, KubeClient
from remediate.metrics import exposition
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.runs import FINAL_RUN_STATUSES
from remediate.server import build_services, create_app
from remediate.store import HistoryQuery, Store
from tests.conftest import alert_payload, notification_payload
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.kube import kube_actions_on
from tests.support.store_json import history_json_of, run_json_of
from tests.support.waiting import wait_until

CORDON_ONLY = """
name: xid-cordon
match: {alertname: GPUXidCritical}
target: node
cooldown: 0s
steps:
  - action: k8s.cordon
    retries: 2
    timeout: 30s
on_resolved:
  - action: k8s.uncordon
"""

QUARANTINE = """
name: xid-quarantine
match: {alertname: GPUXidCritical}
target: node
cooldown: 0s
steps:
  - action: k8s.cordon
    retries: 4
    timeout: 60s
  - action: k8s.taint
    with: {key: remediate.io/gpu-xid, value: "{{ labels.xid }}"}
    retries: 4
    timeout: 60s
  - action: k8s.drain
    with: {timeout: 20, pdb_retry_interval: 0.05}
    retries: 4
    timeout: 60s
"""


@dataclass
class Rig:
    store: Store
    engine: Engine
    executors: list[Executor]
    registry: ActionRegistry
    settings: Settings

    def ingest(self, *alerts: dict[str, Any], at: float | None = None) -> Any:
        body = json.dumps(notification_payload(*alerts)).encode()
        return self.engine.ingest_body(body, received_at=time.time() if at is None else at)

    def start(self) -> None:
        for executor in self.executors:
            executor.start()

    def wait_idle(self, timeout: float = 40.0) -> None:
        def idle() -> bool:
            depth = self.store.queue.queue_depth()
            return depth["queued"] == 0 and depth["running"] == 0

        wait_until(idle, timeout, message=f"runs still queued/running: {self.store.queue.queue_depth()}")

    def entries(self) -> list[dict[str, Any]]:
        entries, cursor = history_json_of(self.store, HistoryQuery(limit=1000))
        assert cursor is None
        return entries

    def runs(self) -> list[dict[str, Any]]:
        return [run_json_of(self.store, e["run_id"]) for e in self.entries() if e["run_id"] is not None]

    @property
    def breaker(self) -> CircuitBreaker:
        return self.executors[0].breaker


@pytest.fixture
def make_rig(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    built: list[tuple[Rig, list[Store]]] = []
    clients: list[KubeClient] = []

    def make(
        playbook: str,
        *,
        executors: int = 1,
        threads: int = 3,
        fast: bool = False,
        request_timeout: float = 0.5,
        dispatch: Dispatch | None = None,
        **settings_fields: Any,
    ) -> Rig:
        settings = Settings.of(kubeconfig=kubeconfig, kube_request_timeout=request_timeout, **settings_fields)
        if fast:  # the k8s.* actions with short waits between API retries (fault tests)
            client = KubeClient(kubeconfig=kubeconfig, request_timeout=request_timeout)
            clients.append(client)
            registry = ActionRegistry([LogAction(), *kube_actions_on(client).values()])
        else:  # exactly what the server builds
            registry = default_registry(settings)
            clients.append(registry.get("k8s.cordon").client)  # type: ignore[attr-defined]
        url = f"sqlite:///{tmp_path / 'r.db'}"
        stores = [Store.open(url) for _ in range(executors)]
        limits = limits_from_settings(settings.kube.breaker)
        runners = [
            Executor(
                store=s,
                registry=registry,
                retry_wait_max=0.05,
                breaker=CircuitBreaker(s.breaker.ledger, s.breaker.view, limits=limits),
                settings=ExecutorSettings(threads=threads, poll_interval=0.02),
                dispatch=dispatch,
            )
            for s in stores
        ]
        parsed = PlaybookSet([parse_playbook(yaml.safe_load(playbook), registry, source="pb.yaml")])
        engine = Engine(
            store=stores[0],
            playbooks=parsed,
            registry=registry,
            on_queued=lambda: [r.wake() for r in runners],
            breaker_stale_horizon=settings.kube.breaker.stale_horizon,
        )
        rig = Rig(stores[0], engine, runners, registry, settings)
        built.append((rig, stores))
        return rig

    yield make
    for rig, stores in built:
        for executor in rig.executors:
            executor.stop()
        for store in stores:
            store.close()
    for client in clients:
        client.close()


def xid_alert(
    node: str, *, gpu: str = "0", xid: str = "79", status: str = "firing", starts_at: str | None = None
) -> dict[str, Any]:
    return alert_payload(
        "GPUXidCritical",
        status=status,
        labels={"Hostname": node, "gpu": gpu, "xid": xid, "severity": "critical"},
        starts_at=starts_at or _iso(datetime.now(UTC) - timedelta(seconds=30)),
    )


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- the storm


def test_a_storm_of_100_node_alerts_on_50_nodes_cordons_at_most_the_cap_and_records_the_rest(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    nodes = cluster(kube_api, 50)
    rig = make_rig(CORDON_ONLY, executors=2, threads=3)
    alerts = [xid_alert(node, gpu=str(gpu)) for gpu in (0, 1) for node in nodes]
    batches = [alerts[i : i + 25] for i in range(0, 100, 25)]
    rig.start()
    start = threading.Barrier(len(batches))

    def send(batch: list[dict[str, Any]]) -> None:
        start.wait()
        rig.ingest(*batch)

    senders = [threading.Thread(target=send, args=(b,)) for b in batches]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    rig.wait_idle()

    cordoned = sorted(n for n in nodes if kube_api.node(n)["spec"].get("unschedulable"))
    assert len(cordoned) == 3  # min(10% of 50 nodes, 3)
    assert len(kube_api.changes_of("cordon")) == 3
    assert all(CORDONED_BY_RUN in kube_api.node(n)["metadata"]["annotations"] for n in cordoned)

    entries = rig.entries()
    assert len(entries) == 100  # every alert has a decision
    by_outcome: dict[str, int] = {}
    for entry in entries:
        if entry["run_id"] is None:
            assert entry["decision"] == "breaker_open", entry
            assert entry["reason"].startswith("breaker open since")
            key = "refused at ingest"
        else:
            run = run_json_of(rig.store, entry["run_id"])
            assert run["status"] in ("succeeded", "failed")
            step = run["steps"][0]
            if run["status"] == "failed":
                assert step["error"].startswith("breaker open: refused to cordon node "), step["error"]
                assert "cap 3 of 50 nodes" in step["error"]
                key = "refused"
            else:
                assert step["result"]["node"] in cordoned
                key = step["result"]["outcome"]
        by_outcome[key] = by_outcome.get(key, 0) + 1
    assert by_outcome["cordoned"] == 3
    assert by_outcome.get("already_cordoned_by_remediate", 0) <= 3  # the second GPU of a cordoned node
    assert by_outcome.get("refused", 0) + by_outcome.get("refused at ingest", 0) >= 94
    status = rig.breaker.status()
    assert status["open"] is True
    assert status["held_nodes"] == cordoned
    assert status["refused"] == by_outcome.get("refused", 0)
    assert b"remediate_breaker_open 1.0" in _metrics(rig.store)


def _metrics(store: Store) -> bytes:
    from prometheus_client import CollectorRegistry

    return exposition(CollectorRegistry(), store)


# --------------------------------------------------------------------------- faults


def test_with_30_percent_of_requests_failing_every_run_ends_recorded_and_nothing_is_done_twice(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    nodes = cluster(kube_api, 8)
    for node in nodes:
        for index in range(3):
            kube_api.add_pod("ml", f"{node}-train-{index}", node, labels={"app": "train"})
        kube_api.add_pod("kube-system", f"dcgm-{node}", node, owner="DaemonSet", owner_name="dcgm")
    rig = make_rig(
        QUARANTINE, threads=4, fast=True, request_timeout=0.25, breaker_max_fraction=1.0, breaker_max_nodes=100
    )
    fault = kube_api.inject("mixed", rate=0.3, delay=0.4)
    rig.ingest(*[xid_alert(node) for node in nodes])
    rig.start()
    rig.wait_idle(timeout=50)
    kube_api.clear_faults()

    requests = len(kube_api.requests)
    assert requests > 150 and 0.2 < fault.fired / requests < 0.4, (fault.fired, requests)

    runs = rig.runs()
    assert len(runs) == 8
    for run in runs:
        assert run["status"] in FINAL_RUN_STATUSES
        if run["status"] == "failed":
            assert run["error"], run
        for step in run["steps"]:
            assert step["status"] in ("succeeded", "failed", "skipped"), step
            if step["status"] == "failed":
                assert step["error"]
    # No change was made twice, whatever was retried.
    for node in nodes:
        assert len(kube_api.changes_of("cordon", node)) <= 1
        assert len(kube_api.changes_of("taint+", node)) <= 1
        reasons = [e["reason"] for e in kube_api.events_about(node)]
        assert len(reasons) == len(set(reasons)), reasons
    evicted = [c.target for c in kube_api.changes_of("evict")]
    assert len(evicted) == len(set(evicted))
    assert kube_api.changes_of("uncordon") == [] and kube_api.changes_of("taint-") == []
    # What the history says matches the cluster.
    succeeded = [r for r in runs if r["status"] == "succeeded"]
    assert succeeded, "with retries most runs get through"
    for run in succeeded:
        node = run["target"]
        state = kube_api.node(node)
        assert state["spec"]["unschedulable"] is True
        assert state["metadata"]["annotations"][CORDONED_BY_RUN] == str(run["id"])
        assert any(t["key"] == "remediate.io/gpu-xid" for t in state["spec"]["taints"])
        left = [p for (ns, name), p in kube_api.pods.items() if p["spec"].get("nodeName") == node]
        assert [p["metadata"]["name"] for p in left] == [f"dcgm-{node}"]
        # Recording an event is best effort: one whose every attempt met a fault is named in the step's result.
        # An attempt whose answer was lost (the injected delay outlasts the client's timeout) may still have
        # been recorded by the API server while its retry met a fault: then it is both recorded and named as
        # not recorded (remediate cannot know). Never missing without being named, never recorded twice.
        recorded = [e["reason"] for e in kube_api.events_about(node)]
        reported_missing = [
            step["result"]["event"]["reason"]
            for step in run["steps"]
            if "error" in ((step.get("result") or {}).get("event") or {})
        ]
        expected = {"RemediateCordoned", "RemediateDrained", "RemediateTainted"}
        assert set(recorded) | set(reported_missing) == expected, (recorded, reported_missing)
        assert len(recorded) == len(set(recorded)) and set(recorded) <= expected, recorded
    for node in nodes:  # a node is never cordoned without remediate's mark
        state = kube_api.node(node)
        if state["spec"].get("unschedulable"):
            assert CORDONED_BY_RUN in state["metadata"]["annotations"]


# --------------------------------------------------------------------------- reset and stale


def test_after_a_reset_old_alerts_are_stale_at_ingest_and_at_execution_and_new_ones_run(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    cluster(kube_api, 10)
    rig = make_rig(CORDON_ONLY, breaker_max_nodes=1, breaker_stale_horizon=600)
    two_hours_ago = _iso(datetime.now(UTC) - timedelta(hours=2))

    # An old alert accepted while the breaker is closed; its run waits in the queue (no executor yet).
    old = xid_alert("gpu-node-05", starts_at=two_hours_ago)
    assert rig.ingest(old).decisions[0].decision.value == "accepted"
    # Other workers trip the breaker meanwhile.
    rig.breaker.acquire("gpu-node-00", kind="cordon", run_id=9001, cluster_nodes=10)
    with pytest.raises(BreakerOpen):
        rig.breaker.acquire("gpu-node-01", kind="cordon", run_id=9002, cluster_nodes=10)

    # While open: new firing alerts of breaker-gated playbooks are refused at ingest, with the state...
    refused = rig.ingest(xid_alert("gpu-node-02"))
    assert refused.decisions[0].decision.value == "breaker_open"
    assert "would make 2 nodes held by remediate" in refused.decisions[0].reason
    # ... and undo (on_resolved) never is.
    assert rig.ingest({**old, "status": "resolved", "endsAt": _iso(datetime.now(UTC))}).decisions[0].decision.value == (
        "accepted"
    )

    rig.breaker.release("gpu-node-00", run_id=9003)
    assert rig.breaker.reset(by="oncall", reason="checked: one bad GPU")["open"] is False

    stale = rig.ingest(xid_alert("gpu-node-06", starts_at=two_hours_ago))
    assert stale.decisions[0].decision.value == "stale"
    assert "older than the stale horizon 10m" in stale.decisions[0].reason
    assert rig.ingest(xid_alert("gpu-node-03")).decisions[0].decision.value == "accepted"

    rig.start()
    rig.wait_idle()
    runs = {(r["target"], r["phase"]): r for r in rig.runs()}
    old_run = runs[("gpu-node-05", "firing")]
    assert old_run["status"] == "failed"  # queued before the reset, older than the horizon
    assert old_run["steps"][0]["error"].startswith("stale: the alert started at")
    assert runs[("gpu-node-05", "resolved")]["status"] == "succeeded"  # nothing to uncordon: left alone
    assert runs[("gpu-node-05", "resolved")]["steps"][0]["result"]["outcome"] == "left_alone"
    assert runs[("gpu-node-03", "firing")]["status"] == "succeeded"
    assert kube_api.node("gpu-node-03")["spec"]["unschedulable"] is True
    assert [c.target for c in kube_api.changes_of("cordon")] == ["gpu-node-03"]
    kinds = {e["decision"] for e in rig.entries()}
    assert {"accepted", "breaker_open", "stale"} <= kinds


# --------------------------------------------------------------------------- HTTP, metrics, CLI


def test_the_breaker_over_http_status_reset_auth_and_gauge(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    cluster(kube_api, 4)
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "pb.yaml").write_text(CORDON_ONLY)
    settings = Settings.of(
        token="w-token-0123456789ab",
        operator_token="o-token-0123456789ab",
        read_token="r-token-0123456789ab",
        playbooks=playbooks,
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        kubeconfig=kubeconfig,
        kube_request_timeout=0.5,
        breaker_max_nodes=1,
        breaker_max_fraction=1.0,
    )
    services = build_services(settings)
    client = create_app(settings, services=services).test_client()
    write, read = {"Authorization": "Bearer w-token-0123456789ab"}, {"Authorization": "Bearer r-token-0123456789ab"}
    operator = {"Authorization": "Bearer o-token-0123456789ab"}
    try:
        assert client.get("/breaker").status_code == 401
        closed = client.get("/breaker", headers=read).get_json()
        assert closed["open"] is False and closed["limits"]["max_nodes"] == 1

        for node in ("gpu-node-00", "gpu-node-01"):
            body = notification_payload(xid_alert(node))
            assert client.post("/webhook", json=body, headers=write).status_code == 200
            services.executor.drain()
        opened = client.get("/breaker", headers=read).get_json()
        assert opened["open"] is True and opened["tripped_node"] == "gpu-node-01"
        assert opened["held_nodes"] == ["gpu-node-00"] and opened["cap"] == 1
        assert b"remediate_breaker_open 1.0" in client.get("/metrics").data

        assert client.post("/breaker/reset", json={"by": "x"}, headers=read).status_code == 403
        assert client.post("/breaker/reset", json={"by": "x"}, headers=write).status_code == 403
        reset = client.post("/breaker/reset", json={"by": "alice", "reason": "ok"}, headers=operator).get_json()
        assert reset["open"] is False and reset["reset_reason"] == "ok"
        assert reset["reset_by"] == "operator (note: alice)"
        assert b"remediate_breaker_open 0.0" in client.get("/metrics").data
        history = client.get("/history", headers=read).get_json()["entries"]
        failed = [e for e in history if e["status"] == "failed"]
        assert failed and failed[0]["run"]["error"].startswith("step 0 ")
        assert "breaker open: refused to cordon node gpu-node-01" in failed[0]["run"]["error"]
    finally:
        services.executor.registry.get("k8s.cordon").client.close()  # type: ignore[attr-defined]
        services.store.close()


def test_remediate_breaker_status_and_reset_on_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REMEDIATE_CONFIG", "REMEDIATE_TOKEN", "REMEDIATE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = Store.open(url)
    breaker = CircuitBreaker(
        store.breaker.ledger, store.breaker.view, limits=limits_from_settings(Settings().kube.breaker)
    )
    for index in range(3):
        breaker.acquire(f"gpu-{index}", kind="cordon", run_id=index + 1, cluster_nodes=50)
    with pytest.raises(BreakerOpen):
        breaker.acquire("gpu-3", kind="cordon", run_id=4, cluster_nodes=50)
    store.close()
    runner = CliRunner()

    status = runner.invoke(main, ["breaker", "status", "--database-url", url], catch_exceptions=False)
    assert status.exit_code == 0, status.output
    assert "breaker: OPEN since" in status.output
    assert "held by remediate now (3): gpu-0, gpu-1, gpu-2" in status.output
    assert "cap: 3 = min(10% of 50 nodes = 5, max_nodes 3)" in status.output

    reset = runner.invoke(
        main,
        ["breaker", "reset", "--database-url", url, "--by", "bob", "--reason", "false alarm"],
        catch_exceptions=False,
    )
    assert reset.exit_code == 0, reset.output
    assert "circuit breaker reset by bob: false alarm" in reset.output
    as_json = runner.invoke(main, ["breaker", "status", "--database-url", url, "--json"], catch_exceptions=False)
    data = json.loads(as_json.output)
    assert data["open"] is False and data["reset_by"] == "bob"

    missing = runner.invoke(main, ["breaker", "status", "--database-url", f"sqlite:///{tmp_path / 'none.db'}"])
    assert missing.exit_code == 2 and "no database at" in missing.output


# --------------------------------------------------------------------------- transient plan errors


def _cordon_runs(rig: Rig) -> list[dict[str, Any]]:
    return sorted(rig.runs(), key=lambda run: run["id"])


def test_a_quarantine_run_makes_the_same_api_requests_on_20_and_on_400_nodes_and_no_node_list(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """The breaker's counts come from the node cache: once it is warm, cordon -> taint -> drain LIST no nodes,
    and what the run asks the API server (by verb and resource) does not grow with the cluster."""
    first = cluster(kube_api, 20)
    rig = make_rig(QUARANTINE, breaker_max_nodes=100, breaker_max_fraction=1.0)
    rig.start()
    rig.ingest(xid_alert(first[0]))  # warms the cache (its one LIST)
    rig.wait_idle()
    costs = []
    for size, node in ((20, first[1]), (400, None)):
        if node is None:
            node = cluster(kube_api, 380, prefix="big")[-1]
            wait_until(lambda n=node: n in rig.registry.get("k8s.cordon").client.node_cache().nodes(), 10)  # type: ignore[attr-defined]
        before = list(kube_api.verbs)
        rig.ingest(xid_alert(node))
        rig.wait_idle()
        made = kube_api.verbs[len(before) :]
        costs.append(sorted((verb, resource) for verb, resource in made if verb != "watch"))
        assert kube_api.node(node)["spec"].get("unschedulable") is True, size

    assert ("list", "nodes") not in costs[0] + costs[1]
    assert costs[0] == costs[1]
    assert kube_api.request_count(verb="list", resource="nodes") == 1


def test_an_api_blip_shorter_than_the_step_retries_during_the_plan_still_cordons(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """Finding 14: 503s on `GET nodes/X` past the client's own attempts failed the plan at once (attempts: [])."""
    (node,) = cluster(kube_api, 1)
    rig = make_rig(CORDON_ONLY, fast=True)  # retries: 2 -> up to 3 plan tries of 4 API attempts each
    fault = kube_api.inject("status", method="GET", path=f"/api/v1/nodes/{node}$", status=503, times=6)

    rig.ingest(xid_alert(node))
    rig.start()
    rig.wait_idle()

    (run,) = _cordon_runs(rig)
    assert run["status"] == "succeeded", run
    assert fault.fired == 6
    assert kube_api.node(node)["spec"]["unschedulable"] is True
    assert [a["outcome"] for a in run["steps"][0]["attempts"]] == ["succeeded"]


def test_a_run_that_failed_transiently_before_changing_anything_runs_again_on_the_next_delivery(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """Finding 14: past the retry budget the run fails; AlertManager's re-send used to be a `duplicate`."""
    (node,) = cluster(kube_api, 1)
    rig = make_rig(CORDON_ONLY.replace("cooldown: 0s", "cooldown: 30m"), fast=True)
    fault = kube_api.inject("status", method="GET", path=f"/api/v1/nodes/{node}$", status=503, times=12)
    alert = xid_alert(node)

    rig.ingest(alert)
    rig.start()
    rig.wait_idle()
    (failed,) = _cordon_runs(rig)
    assert failed["status"] == "failed"
    assert fault.fired == 12
    assert "plan failed" in failed["error"] and "503" in failed["error"] and "(3 tries)" in failed["error"]
    assert failed["steps"][0]["attempts"] == []
    assert failed["rerunnable"] is True
    assert not kube_api.node(node)["spec"].get("unschedulable")

    again = rig.ingest(alert)  # the same occurrence, re-sent by AlertManager (repeat_interval)
    (decision,) = again.decisions
    assert decision.decision.value == "accepted", decision.reason
    assert f"runs again: run {failed['id']} failed before changing anything" in decision.reason
    rig.wait_idle()

    old, new = _cordon_runs(rig)
    assert (old["id"], old["status"], old["superseded_by"]) == (failed["id"], "failed", new["id"])
    assert new["status"] == "succeeded", new
    assert kube_api.node(node)["spec"]["unschedulable"] is True
    # A third delivery is a duplicate of the run that succeeded.
    (third,) = rig.ingest(alert).decisions
    assert third.decision.value == "duplicate"
    assert str(new["id"]) in third.reason


# --------------------------------------------------------------------------- notify anyway


def oncall_sink(url: str, breakfix: str | None = None) -> tuple[Sink, ...]:
    """The `oncall` sink the shipped playbooks notify (no URL in them), posting to `url`; with
    `breakfix`, the sink the quarantine ladder's last rung hands the node to."""
    sinks = {"oncall": {"type": "webhook", "url": url}}
    if breakfix:
        sinks["breakfix"] = {"type": "webhook", "url": breakfix}
    return to_sinks(sinks)


def test_the_shipped_quarantine_playbook_still_notifies_when_the_drain_is_refused(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """Finding 15: a drain refused before evicting (a pod with emptyDir data) failed the run, and the
    notify step after it never ran."""
    from tests.support.realsystems import WebhookRecorder

    (node,) = cluster(kube_api, 1)
    kube_api.add_pod("ml", "scratch-job-0", node, emptydir=True)
    shipped = (Path(__file__).resolve().parents[2] / "playbooks" / "gpu-xid-quarantine.yaml").read_text()
    with WebhookRecorder(path="/remediate-events") as recorder:
        rig = make_rig(shipped, sinks=oncall_sink(recorder.url))
        rig.ingest(xid_alert(node))
        rig.start()
        rig.wait_idle()

        (run,) = _cordon_runs(rig)
        steps = {step["name"]: step for step in run["steps"]}
        assert run["status"] == "failed"
        assert run["error"].startswith("step 3 drain (k8s.drain)")
        assert [steps[name]["status"] for name in ("checkpoint-jobs", "cordon", "taint", "drain", "notify")] == [
            "succeeded",  # no training job on the node: nothing to checkpoint
            "succeeded",
            "succeeded",
            "failed",
            "succeeded",
        ]
        assert steps["notify"]["always"] is True
        (posted,) = recorder.requests
        assert posted.json["run_id"] == run["id"]
        assert kube_api.pod("ml", "scratch-job-0") is not None  # refused: nothing evicted


def test_a_run_that_failed_in_an_api_outage_but_paged_on_call_is_not_run_again_by_the_next_delivery(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """The shipped quarantine in an API outage, its node's agent unreachable too: the checkpoint and the
    cordon fail at plan before anything changed, but the `always` notify step pages on-call. Such a run was
    still marked rerunnable, so every re-delivery of the alert ran the ladder again and paged again."""
    from tests.support.realsystems import WebhookRecorder, free_port

    (node,) = cluster(kube_api, 1)
    outage = kube_api.inject("status", path=f"/api/v1/nodes/{node}$", status=503)
    shipped = (Path(__file__).resolve().parents[2] / "playbooks" / "gpu-xid-quarantine.yaml").read_text()
    agents = StaticAgents({node: f"http://127.0.0.1:{free_port()}"})  # nobody there
    alert = xid_alert(node)
    with WebhookRecorder(path="/remediate-events") as recorder:
        dispatch = Dispatch(directory=agents, node_name="server", token="t" * 32, retries=0, retry_wait_max=0.01)
        rig = make_rig(shipped, sinks=oncall_sink(recorder.url), dispatch=dispatch)
        rig.ingest(alert)
        rig.start()
        rig.wait_idle()
        (run,) = _cordon_runs(rig)
        steps = {step["name"]: step for step in run["steps"]}
        assert run["status"] == "failed", run
        assert [steps[name]["attempts"] for name in ("checkpoint-jobs", "cordon")] == [[], []]  # nothing changed...
        assert "unreachable" in steps["checkpoint-jobs"]["error"] and "503" in steps["cordon"]["error"]
        assert steps["notify"]["status"] == "succeeded"  # ...but on-call was paged
        assert outage.fired > 0 and len(recorder.requests) == 1
        assert run["rerunnable"] is False

        (again,) = rig.ingest(alert).decisions  # AlertManager re-sends the same occurrence
        rig.wait_idle()
        assert again.decision.value == "duplicate", again.reason
        assert [r["id"] for r in _cordon_runs(rig)] == [run["id"]]
        assert len(recorder.requests) == 1  # not paged a second time


def test_without_the_oncall_sink_the_overheat_rungs_cordon_still_happens_and_only_its_notify_step_fails(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """The shipped gpu-overheat's last rung (checkpoint, cordon, notify) with no `sinks` set: the
    notify step comes last, so the cordon is done; the step fails naming sinks.oncall and posts nothing,
    which fails the run (its rungs 1 and 2 have no notify step: the power cap never depends on a sink)."""
    (node,) = cluster(kube_api, 1)
    shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks" / "gpu-overheat.yaml").read_text())
    assert [len([s for s in rung["steps"] if s["action"] == "notify"]) for rung in shipped["escalate"]] == [0, 0, 1]
    (rung,) = [rung for rung in shipped["escalate"] if rung["name"] == "cordon-and-notify"]
    playbook = {"name": "overheat-rung-3", "match": shipped["match"], "target": "node", "steps": rung["steps"]}
    rig = make_rig(yaml.safe_dump(playbook))
    alert = alert_payload(
        "GPUTemperatureHigh", labels={"Hostname": node, "gpu": "3", "UUID": "GPU-3", "severity": "warning"}
    )

    rig.ingest(alert)
    rig.start()
    rig.wait_idle()

    (run,) = rig.runs()
    steps = {step["name"]: step for step in run["steps"]}
    assert (steps["cordon"]["status"], steps["notify"]["status"], run["status"]) == ("succeeded", "failed", "failed")
    assert kube_api.node(node)["spec"]["unschedulable"] is True
    assert steps["notify"]["error"].startswith("sink 'oncall' is not configured: set sinks.oncall")


def test_the_shipped_quarantine_message_says_the_cordon_failed_and_links_the_run(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """The cordon failed (RBAC), and the `always: true` notify still posted
    "Quarantined ... Cordoned, tainted ... and drained", with no step status and no link to the run."""
    from tests.support.realsystems import WebhookRecorder

    (node,) = cluster(kube_api, 1)
    kube_api.inject("status", method="PATCH", path=f"/api/v1/nodes/{node}$", status=403)
    shipped = (Path(__file__).resolve().parents[2] / "playbooks" / "gpu-xid-quarantine.yaml").read_text()
    with WebhookRecorder(path="/remediate-events") as recorder:
        rig = make_rig(
            shipped,
            sinks=oncall_sink(recorder.url),
            public_url="https://remediate.example.com",
        )
        rig.ingest(xid_alert(node))
        rig.start()
        rig.wait_idle()

        (run,) = _cordon_runs(rig)
        steps = {step["name"]: step for step in run["steps"]}
        assert (run["status"], steps["cordon"]["status"], steps["notify"]["status"]) == (
            "failed",
            "failed",
            "succeeded",
        )
        assert kube_api.node(node)["spec"].get("unschedulable") is None  # the node was never cordoned
        (posted,) = recorder.requests
        body = posted.json
        link = f"https://remediate.example.com/ui/runs/{run['id']}"
        message = body["message"]
        assert message.startswith(f"NOT quarantined {node}: ")
        assert "Cordoned" not in message and "drained" not in message
        assert "cordon failed (" in message and "403" in message
        assert message.endswith(link)
        assert body["run_url"] == link
        by_name = {step["name"]: step for step in body["steps"]}
        assert [by_name[n]["status"] for n in ("checkpoint-jobs", "cordon", "taint", "drain")] == [
            "succeeded",
            "failed",
            steps["taint"]["status"],
            steps["drain"]["status"],
        ]
        assert "403" in by_name["cordon"]["error"]


# --------------------------------------------------------------------------- the shipped quarantine ladder


def test_the_shipped_quarantine_ladder_drains_then_resets_the_gpus_then_keeps_the_node_out(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig], tmp_path: Path
) -> None:
    """An XID that stays reported: AlertManager re-sends the same occurrence; an hour after each rung the
    next one runs (drain -> reset every GPU of the drained node -> keep out + ticket); the resolve undoes
    the drain's cordon and taint."""
    from remediate.gpu.simulator import SimulatedBackend
    from tests.support.realsystems import WebhookRecorder

    (node,) = cluster(kube_api, 1)
    gpus = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2))
    shipped = (Path(__file__).resolve().parents[2] / "playbooks" / "gpu-xid-quarantine.yaml").read_text()
    alert = xid_alert(node)
    now = time.time()
    with WebhookRecorder(path="/remediate-events") as recorder:
        rig = make_rig(
            shipped,
            sinks=oncall_sink(recorder.url, breakfix=recorder.url),
            gpu_backend="simulated",
            gpu_simulator_file=gpus.path,
        )
        rig.start()

        rig.ingest(alert, at=now)
        rig.wait_idle()
        early = rig.ingest(alert, at=now + 600)  # re-sent within holds_for: a duplicate of rung 1
        for device in gpus.devices():  # the drain moved the training pods away: no process is left
            gpus.update_device(device.uuid, processes=[])
        rig.ingest(alert, at=now + 3600 + 1)
        rig.wait_idle()
        rig.ingest(alert, at=now + 7200 + 2)
        rig.wait_idle()
        rig.ingest({**alert, "status": "resolved", "endsAt": _iso(datetime.now(UTC))}, at=now + 7300)
        rig.wait_idle()

        firing = sorted((r for r in rig.runs() if r["phase"] == "firing"), key=lambda r: r["id"])
        (undo,) = [r for r in rig.runs() if r["phase"] == "resolved"]
        assert [d.decision.value for d in early.decisions if d.playbook == "gpu-xid-quarantine"] == ["duplicate"]
        assert [(r["rung"], r["ladder"]["name"], r["status"]) for r in firing] == [
            (1, "drain", "succeeded"),
            (2, "reset-gpus", "succeeded"),
            (3, "keep-out", "succeeded"),
        ]
        assert all("still firing" in r["ladder"]["why"] for r in firing[1:])
        reset = {s["name"]: s for s in firing[1]["steps"]}["reset-gpus"]
        assert reset["status"] == "succeeded"
        assert [gpus.reset_count(g.uuid) for g in gpus.devices()] == [1, 1]
        # Undone only on evidence (proven-healthy: every GPU the node reported reports again for 10 minutes in
        # Prometheus); with no prometheus_url there is none: the node stays out and on-call is told why.
        undone = {s["name"]: s for s in undo["steps"]}
        gate = ["gate", "k8s-burnin"]  # the soak and the burn-in
        assert list(undone) == ["proven-healthy", *gate, "untaint", "uncordon", "handoff", "notify-resolved"], undone
        assert undone["proven-healthy"]["status"] == "failed" and "prometheus_url" in undone["proven-healthy"]["error"]
        assert [undone[n]["status"] for n in (*gate, "untaint", "uncordon", "handoff", "notify-resolved")] == [
            "skipped",
            "skipped",
            "skipped",
            "skipped",
            "succeeded",  # `always`, acting only after a failed gate: this one never ran
            "succeeded",
        ], undone
        assert undone["handoff"]["result"]["outcome"] == "not_needed"
        assert kube_api.node(node)["spec"]["unschedulable"] is True
        assert "The node stays out: its GPUs did not all report again" in recorder.requests[-1].json["message"]
        messages = [r.json["message"] for r in recorder.requests]
        assert [m.split(":")[0] for m in messages[:1]] == [f"Quarantined {node}"]
        (ticket,) = [m for m in messages if m.startswith("TICKET:")]
        assert "It is out of service and handed to breakfix (Kubernetes: remediate.io/owner" in ticket
        # The last rung handed the node to breakfix, with the evidence; the resolve's undo of
        # remediate's own cordon and taint still ran on the owned node.
        keep_out = {s["name"]: s for s in firing[2]["steps"]}
        assert [s["name"] for s in firing[2]["steps"]] == ["cordon", "handoff", "notify"]
        assert keep_out["handoff"]["result"]["outcome"] == "handed_off"
        (handed,) = [r.json for r in recorder.requests if "remove its remediate.io/owner" in r.json["message"]]
        assert handed["run_id"] == firing[2]["id"] and handed["alert"]["labels"]["Hostname"] == node
        assert kube_api.node(node)["metadata"]["annotations"][OWNER] == "breakfix"


def test_without_the_breakfix_sink_the_last_rung_cordons_then_its_handoff_fails_and_on_call_is_told(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig]
) -> None:
    """The shipped quarantine ladder's last rung with no `breakfix` sink: the cordon before the
    hand-off is done, the hand-off fails naming sinks.breakfix and marks nothing, the ticket still goes out."""
    from tests.support.realsystems import WebhookRecorder

    (node,) = cluster(kube_api, 1)
    shipped = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "playbooks" / "gpu-xid-quarantine.yaml").read_text()
    )
    (rung,) = [rung for rung in shipped["escalate"] if rung["name"] == "keep-out"]
    assert rung is shipped["escalate"][-1]
    playbook = {"name": "xid-rung-3", "match": shipped["match"], "target": "node", "steps": rung["steps"]}
    with WebhookRecorder(path="/remediate-events") as recorder:
        rig = make_rig(yaml.safe_dump(playbook), sinks=oncall_sink(recorder.url))
        rig.ingest(xid_alert(node))
        rig.start()
        rig.wait_idle()

        (run,) = rig.runs()
        steps = {step["name"]: step for step in run["steps"]}
        assert [steps[n]["status"] for n in ("cordon", "handoff", "notify")] == ["succeeded", "failed", "succeeded"]
        assert run["status"] == "failed"
        assert steps["handoff"]["error"].startswith("sink 'breakfix' is not configured: set sinks.breakfix")
        assert kube_api.node(node)["spec"]["unschedulable"] is True
        assert OWNER not in kube_api.node(node)["metadata"]["annotations"]
        (ticket,) = [r.json["message"] for r in recorder.requests]
        assert "It is out of service but NOT handed to breakfix" in ticket
