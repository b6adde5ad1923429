"""End to end: an AlertManager HA pair -> two `remediate serve` replicas on one PostgreSQL.

What runs, all real processes as deployed: two clustered AlertManager 0.25 (gossip on, both sending),
two `remediate serve` (gunicorn) replicas with distinct `replica_name`s on one PostgreSQL 15 database
(the `pg_url` fixture), and between them a stand-in for the Kubernetes Service (tests/support/service.py):
AlertManager has one webhook URL, the Service's, as in a real deployment, and the Service spreads the
requests over the replicas in turn, so the two copies of a notification the pair sends land on different
replicas. (Giving each AlertManager two webhook_configs, one per pod, would make every replica receive
every notification too, but no deployment addresses pods by name, and a dead pod's URL would stay in
AlertManager's config.) Notification steps post to a WebhookRecorder, the drain goes to the test
Kubernetes API server: what was done is counted on the outside, not only in remediate's history.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediate.executor.leases import heartbeat_interval
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.realsystems import AlertManager, WebhookRecorder, free_port
from tests.support.server import WAIT, RemediateServer, write_playbook
from tests.support.service import ServiceProxy
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

LEASE = 3.0
"""The replicas' `lease` (seconds): short, so that a takeover comes within the test's time."""
NODE = "gpu-node-03"
DELETION_SECONDS = 3.0
"""How long an evicted pod takes to terminate: the drain step waits for it, and is killed meanwhile."""

StartServer = Callable[..., RemediateServer]
StartAlertManager = Callable[..., AlertManager]


def _playbooks(directory: Path, recorder: WebhookRecorder) -> None:
    write_playbook(
        directory,
        "occurrences",
        f"""\
name: occurrences
match:
  alertname: E2EReplicas
target: node
cooldown: 0s
steps:
  - name: notify-firing
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "FIRING {{{{ labels.Hostname }}}}"
    retries: 0
on_resolved:
  - name: notify-resolved
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "RESOLVED {{{{ labels.Hostname }}}}"
    retries: 0
""",
    )
    write_playbook(
        directory,
        "takeover",
        f"""\
name: takeover
match:
  alertname: E2ETakeover
target: node
cooldown: 0s
steps:
  - name: announce
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "draining {{{{ labels.Hostname }}}}"
    retries: 0
  - name: drain
    action: k8s.drain
    with:
      timeout: 60
      pdb_retry_interval: 0.2
  - name: done
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "drained {{{{ labels.Hostname }}}}"
    retries: 0
""",
    )


@dataclass
class Deployment:
    replicas: dict[str, RemediateServer]
    service: ServiceProxy
    alertmanagers: tuple[AlertManager, AlertManager]
    kube: FakeKubeAPI
    recorder: WebhookRecorder

    def any_replica(self) -> RemediateServer:
        return next(r for r in self.replicas.values() if r.running)

    def fire(self, labels: dict[str, str], starts: datetime) -> None:
        """As Prometheus does: every alert to each AlertManager of the pair, the same startsAt, at once."""
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda am: am.fire(labels, starts_at=starts), self.alertmanagers))

    def resolve(self, labels: dict[str, str], starts: datetime) -> None:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda am: am.resolve(labels, starts_at=starts), self.alertmanagers))

    def messages(self, text: str) -> list[str]:
        return [m for r in self.recorder.requests if text in (m := (r.json or {}).get("message", ""))]


@pytest.fixture
def deployment(
    pg_url: str,  # first: its database is dropped only after the replicas have stopped
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    tmp_path: Path,
    default_chart_rbac: ChartRbac,
) -> Iterator[Deployment]:
    _playbooks(playbooks_dir, recorder)
    with FakeKubeAPI(deletion_seconds=DELETION_SECONDS) as kube:
        kube.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)  # the chart's RBAC, or 403
        cluster(kube, 20)  # the breaker's cap: 2 of 20 nodes
        kube.add_pod("ml", "trainer-0", NODE, labels={"app": "trainer"})
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        replicas = {
            name: start_server(
                name=name,
                workers=1,
                database_url=pg_url,
                env={
                    "REMEDIATE_REPLICA_NAME": name,
                    "REMEDIATE_LEASE": f"{LEASE:g}s",
                    "REMEDIATE_KUBECONFIG": str(kubeconfig),
                    "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
                },
            )
            for name in ("replica-a", "replica-b")
        }
        with ServiceProxy([r.url for r in replicas.values()]) as service:
            port_a, port_b = free_port(), free_port()
            # peer-timeout 0s: neither peer waits to see whether the other already notified, so both deliver
            # each notification at the same moment (at-least-once at its worst, as in test_alertmanager.py).
            gossip = ["--cluster.settle-timeout=1s", "--cluster.peer-timeout=0s", "--cluster.gossip-interval=50ms"]
            pair = tuple(
                start_alertmanager(
                    f"{service.url}/webhook",
                    name=f"alertmanager-{name}",
                    cluster_port=port,
                    cluster_peers=[f"127.0.0.1:{peer}"],
                    extra_args=gossip,
                )
                for name, port, peer in (("a", port_a, port_b), ("b", port_b, port_a))
            )
            wait_until(
                lambda: all(am.cluster_members() == 2 for am in pair), WAIT, interval=0.1, message="no HA cluster"
            )
            yield Deployment(replicas, service, (pair[0], pair[1]), kube, recorder)


def _runs(server: RemediateServer, alertname: str) -> list[dict[str, Any]]:
    return [server.run(e["run_id"]) for e in server.runs(alertname=alertname)]


def test_an_ha_pair_through_two_replicas_makes_one_run_per_alert_occurrence_and_resolves_each_once(
    deployment: Deployment,
) -> None:
    hosts = ("node-1", "node-2", "node-3")
    labels = {host: {"alertname": "E2EReplicas", "Hostname": host} for host in hosts}
    starts = datetime.now(UTC)
    for host in hosts:
        deployment.fire(labels[host], starts)
    server = deployment.any_replica()

    def all_fired() -> list[dict[str, Any]] | None:
        runs = _runs(server, "E2EReplicas")
        done = [r for r in runs if r["phase"] == "firing" and r["status"] == "succeeded"]
        return runs if len(done) == len(hosts) and len(deployment.messages("FIRING")) == len(hosts) else None

    wait_until(all_fired, WAIT, interval=0.1, message="one succeeded run per firing alert")
    for host in hosts:
        deployment.resolve(labels[host], starts)

    def all_resolved() -> list[dict[str, Any]] | None:
        runs = _runs(server, "E2EReplicas")
        done = [r for r in runs if r["phase"] == "resolved" and r["status"] == "succeeded"]
        return runs if len(done) == len(hosts) and len(deployment.messages("RESOLVED")) == len(hosts) else None

    runs = wait_until(all_resolved, WAIT, interval=0.1, message="one succeeded on_resolved run per alert")
    # Both AlertManagers kept sending (gossip on, each delivers), through the Service to both replicas.
    entries = server.history(alertname="E2EReplicas")
    assert deployment.service.backends_that_answered() == {r.url for r in deployment.replicas.values()}
    assert Counter(e["decision"] for e in entries)["accepted"] == 2 * len(hosts)
    assert Counter(e["decision"] for e in entries)["duplicate"] >= len(hosts)  # the pair's second copies
    assert {e["decision"] for e in entries} == {"accepted", "duplicate"}

    # Exactly one run per alert occurrence, and each alert's on_resolved once.
    assert Counter((r["target"], r["phase"]) for r in runs) == {
        (h, p): 1 for h in hosts for p in ("firing", "resolved")
    }
    assert Counter(deployment.messages("FIRING")) == {f"FIRING {h}": 1 for h in hosts}
    assert Counter(deployment.messages("RESOLVED")) == {f"RESOLVED {h}": 1 for h in hosts}
    # Every run names the one replica that ran it (whichever executor claimed it first).
    assert all(len(r["ran_on"]) == 1 for r in runs)
    assert {r["ran_on"][0].split(":")[0] for r in runs} <= {"replica-a", "replica-b"}
    # The history is the same whichever replica is asked: one database. The pair's re-sends may record more
    # duplicates between the two reads: compare what both reads cover.
    seen_a = [e["id"] for e in deployment.replicas["replica-a"].history(alertname="E2EReplicas")]
    seen_b = [e["id"] for e in deployment.replicas["replica-b"].history(alertname="E2EReplicas")]
    low, high = max(min(seen_a), min(seen_b)), min(max(seen_a), max(seen_b))
    assert [i for i in seen_a if low <= i <= high] == [i for i in seen_b if low <= i <= high]
    assert high - low >= 2 * len(hosts)  # the runs' decisions at least


def test_a_replica_killed_during_a_multi_step_run_is_taken_over_after_its_lease_and_nothing_runs_twice(
    deployment: Deployment,
) -> None:
    labels = {"alertname": "E2ETakeover", "Hostname": NODE}
    deployment.fire(labels, datetime.now(UTC))
    server = deployment.any_replica()
    entry = server.wait_for_run(alertname="E2ETakeover")
    run_id = entry["run_id"]

    def draining() -> dict[str, Any] | None:
        run = server.run(run_id)
        drain = run["steps"][1]
        return run if drain["status"] == "running" and drain["attempts"] else None

    run = wait_until(draining, WAIT, interval=0.02, message="the drain step never started")
    owner = run["steps"][1]["attempts"][0]["ran_on"]
    victim = deployment.replicas[owner.split(":")[0]]
    (survivor,) = (r for r in deployment.replicas.values() if r is not victim)
    killed_at = time.time()
    victim.kill()  # SIGKILL to its whole process group: master, web worker, executor

    done = survivor.wait_for_run_status(run_id, "succeeded", "failed", timeout=WAIT + 2 * LEASE)

    assert done["status"] == "succeeded", done["error"]
    announce, drain, finish = done["steps"]
    taker = drain["attempts"][-1]["ran_on"]
    assert taker.split(":")[0] == survivor.workdir.name and taker != owner
    # The history shows both replicas: who ran what, attempt by attempt.
    assert done["ran_on"] == [owner, taker]
    assert [(a["outcome"], a["ran_on"]) for a in announce["attempts"]] == [("succeeded", owner)]
    # The drain was in flight: interrupted on the dead replica, run again (k8s.drain is idempotent) by the other.
    assert [(a["outcome"], a["ran_on"]) for a in drain["attempts"]] == [("interrupted", owner), ("succeeded", taker)]
    assert [(a["outcome"], a["ran_on"]) for a in finish["attempts"]] == [("succeeded", taker)]
    # Nothing twice on the outside: one announcement, one "drained", the node cordoned once.
    assert deployment.messages("draining") == [f"draining {NODE}"]
    assert deployment.messages("drained") == [f"drained {NODE}"]
    assert len(deployment.kube.changes_of("cordon", NODE)) == 1
    assert deployment.kube.node(NODE)["spec"]["unschedulable"] is True
    # One run for the alert, though both AlertManagers delivered it.
    assert [e["run_id"] for e in survivor.runs(alertname="E2ETakeover")] == [run_id]

    # Takeover: from the kill to the other replica's first write on the run, its recovery closing the dead
    # owner's attempt as interrupted (and requeueing the run, which its executor claims at once); then the
    # drain starts again once planned anew.
    takeover = drain["attempts"][0]["finished_at"] - killed_at
    resumed = drain["attempts"][-1]["started_at"] - killed_at
    print(f"\nkill -9, lease {LEASE:g} s: taken over after {takeover:.2f} s, the drain resumed after {resumed:.2f} s")
    # Never before the lease ran out (less the heartbeat interval the last renewal may precede the kill by),
    # and within 1.5 x the lease (recovery looks every lease/4) plus a slow CI machine's slack.
    assert LEASE - heartbeat_interval(LEASE) <= takeover <= 1.5 * LEASE + 2.0, takeover
    assert takeover <= resumed
