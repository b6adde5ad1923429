"""Several replicas on one database: exactly once, and every guard exact, across them.

A "replica" here is what a `remediate serve` replica holds: its own `Store.open(url)` (its own pool of
connections) and its own Engine, on the same database. Threads released by one barrier make them take
the same notification, or notifications for the same target, at the same instant; the duplicate storm
also runs in separate processes (multiprocessing 'spawn'), as replicas are. PostgreSQL is the real
server of tests/support/postgres.py; on SQLite (two Store objects on one file) all must hold too.

What is checked: the same delivery taken by 2-4 replicas at once is one run and `duplicate` decisions,
never an error (also over the lock budget); new alerts beside ones another replica is storing get
their runs; firing and resolved of one occurrence on two replicas at once never leave a fix without
its undo; two alerts for one target at once are one run and one `cooldown`; max_attempts counts
across replicas; a storm over three replicas never claims more nodes than the breaker's cap (the
ledger alone, and the whole path: engine, executor, k8s.cordon against the test API server); two
approvals at once: one wins, the other gets RunStateError. And the belt under the braces: with the
guard locks taken away, a run another replica committed first is judged again as `duplicate`
(StoreConflict), never a 503.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.breaker import BreakerLimits, BreakerOpen, CircuitBreaker, limits_from_settings
from remediate.config.settings import ExecutorSettings, Settings
from remediate.errors import RunStateError
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine, IngestResult
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.runs import Decision
from remediate.store import Store
from remediate.store.postgres import MAX_GUARD_LOCKS, PostgresDialect
from tests.conftest import alert_payload, notification_payload
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.stores import rows
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

T0 = 1_767_225_600.0
ALERTS = 40
STORM = {
    "name": "storm",
    "match": {"alertname": ["Storm", "StormToo"]},
    "cooldown": "0s",
    "steps": [{"action": "log", "with": {"message": "storm on {{ labels.node }}"}}],
}

CORDON = {
    "name": "xid-cordon",
    "match": {"alertname": "GPUXidCritical"},
    "target": "node",
    "cooldown": "0s",
    "steps": [{"action": "k8s.cordon", "retries": 2, "timeout": "30s"}],
}

Replicas = Callable[..., list[Engine]]


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of one database the replicas share: a fresh PostgreSQL database, or one SQLite file."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'shared.db'}"


@pytest.fixture
def pg_database(pg_url: str) -> str:
    return pg_url


def _replicas(url: str) -> Iterator[Replicas]:
    stores: list[Store] = []

    def build(count: int, *playbooks: Mapping[str, Any]) -> list[Engine]:
        registry = default_registry()
        engines = []
        for _ in range(count):
            store = Store.open(url)
            stores.append(store)
            parsed = PlaybookSet(parse_playbook(dict(p), registry, source=f"{p['name']}.yaml") for p in playbooks)
            engines.append(Engine(store=store, playbooks=parsed, registry=registry))
        return engines

    yield build
    for store in stores:
        store.close()


@pytest.fixture
def replicas(database: str) -> Iterator[Replicas]:
    """replicas(count, *playbooks): `count` engines, each on its own Store of the shared database."""
    yield from _replicas(database)


@pytest.fixture
def pg_replicas(pg_database: str) -> Iterator[Replicas]:
    """replicas(count, *playbooks) on PostgreSQL only (what only a server database can show)."""
    yield from _replicas(pg_database)


def deliver(engine: Engine, alerts: Sequence[dict[str, Any]], at: float = T0) -> IngestResult:
    return engine.ingest_body(json.dumps(notification_payload(*alerts)).encode(), received_at=at)


def at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads released together; each one's result, or the exception it raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except Exception as exc:  # reported to the test, which asserts there are none
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def storm_alert(index: int, *, starts_at: str = "2026-01-01T00:00:00Z", name: str = "Storm") -> dict[str, Any]:
    return alert_payload(name, labels={"node": f"node-{index}"}, starts_at=starts_at)


def errors_of(results: Sequence[Any]) -> list[Exception]:
    return [r for r in results if isinstance(r, Exception)]


def decisions_of(results: Sequence[Any]) -> Counter[str]:
    return Counter(d.decision.value for r in results for d in r.decisions)


def runs_per_alert(store: Store) -> Counter[tuple[str, str]]:
    """(fingerprint, startsAt) -> runs recorded for that alert occurrence."""
    alerts = {a.id: (a.fingerprint, a.starts_at) for a in rows(store, "alerts")}
    return Counter(alerts[r.alert_id] for r in rows(store, "runs"))


# ---------------------------------------------------------------------- duplicates


@pytest.mark.parametrize("count", [2, 4])
def test_the_same_delivery_at_once_on_replicas_is_one_run_per_alert_and_duplicates(
    replicas: Replicas, count: int
) -> None:
    engines = replicas(count, STORM)
    rounds = 3
    results: list[Any] = []
    for round_ in range(rounds):
        starts_at = f"2026-01-01T0{round_}:00:00Z"  # a new occurrence of every alert each round
        for index in range(ALERTS):
            alert = storm_alert(index, starts_at=starts_at)
            results += at_once([lambda e=e, a=alert: deliver(e, [a]) for e in engines])

    assert errors_of(results) == []
    assert decisions_of(results) == {"accepted": ALERTS * rounds, "duplicate": ALERTS * rounds * (count - 1)}
    per_alert = runs_per_alert(engines[0].store)  # type: ignore[arg-type]
    assert len(per_alert) == ALERTS * rounds and set(per_alert.values()) == {1}


def test_new_alerts_beside_ones_another_replica_is_storing_get_their_runs(replicas: Replicas) -> None:
    first, second = replicas(2, STORM)
    for round_ in range(5):
        starts_at = f"2026-01-01T0{round_}:00:00Z"
        # 0-9 and 5-14: the overlap is being stored by the other replica at that instant.
        one = [storm_alert(i, starts_at=starts_at) for i in range(10)]
        two = [storm_alert(i, starts_at=starts_at) for i in range(5, 15)]
        results = at_once([lambda one=one: deliver(first, one), lambda two=two: deliver(second, two)])

        assert errors_of(results) == []
        assert decisions_of(results) == {"accepted": 15, "duplicate": 5}
        for result, only_here in zip(results, (range(5), range(10, 15)), strict=True):
            accepted = {d.fingerprint for d in result.decisions if d.decision is Decision.ACCEPTED}
            assert {storm_alert(i)["fingerprint"] for i in only_here} <= accepted
    per_alert = runs_per_alert(first.store)  # type: ignore[arg-type]
    assert len(per_alert) == 15 * 5 and set(per_alert.values()) == {1}


def test_notifications_over_the_lock_budget_are_exactly_once_too(replicas: Replicas) -> None:
    """More guard keys than MAX_GUARD_LOCKS: the whole ingest lock instead, against replicas taking the
    same notification, and one-alert deliveries of some of its alerts, at the same instant."""
    engines = replicas(4, STORM)
    many = [storm_alert(i) for i in range(MAX_GUARD_LOCKS + 6)]
    results = at_once(
        [
            lambda: deliver(engines[0], many),
            lambda: deliver(engines[1], many),
            lambda: deliver(engines[2], many[:1]),
            lambda: deliver(engines[3], many[-1:]),
        ]
    )

    assert errors_of(results) == []
    assert decisions_of(results) == {"accepted": len(many), "duplicate": len(many) + 2}
    per_alert = runs_per_alert(engines[0].store)  # type: ignore[arg-type]
    assert len(per_alert) == len(many) and set(per_alert.values()) == {1}


def test_a_duplicate_storm_over_replica_processes_is_one_run_per_alert(pg_database: str) -> None:
    """Replicas are processes: three of them ('spawn') take the same 40 deliveries, each released at once."""
    context = multiprocessing.get_context("spawn")
    processes = 3
    barrier = context.Barrier(processes)
    answers = context.Queue()
    workers = [
        context.Process(target=_replica_process, args=(pg_database, barrier, answers), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [answers.get(timeout=scaled(120)) for _ in workers]
    for worker in workers:
        worker.join(30)

    assert [o["errors"] for o in outcomes] == [[]] * processes
    decisions = sum((Counter(o["decisions"]) for o in outcomes), Counter())
    assert decisions == {"accepted": ALERTS, "duplicate": ALERTS * (processes - 1)}
    store = Store.open(pg_database)
    try:
        per_alert = runs_per_alert(store)
    finally:
        store.close()
    assert len(per_alert) == ALERTS and set(per_alert.values()) == {1}


def _replica_process(url: str, barrier: Any, answers: Any) -> None:
    """One replica process: the storm's 40 deliveries, each after the barrier releases all replicas."""
    registry = default_registry()
    store = Store.open(url)
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(STORM, registry)]), registry=registry)
    decisions: Counter[str] = Counter()
    errors: list[str] = []
    for index in range(ALERTS):
        barrier.wait(timeout=scaled(60))
        try:
            decisions.update(d.decision.value for d in deliver(engine, [storm_alert(index)]).decisions)
        except Exception as exc:  # reported to the test
            errors.append(repr(exc))
    store.close()
    answers.put({"decisions": dict(decisions), "errors": errors})


def test_a_run_another_replica_committed_first_is_judged_again_as_a_duplicate(
    pg_replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the guard locks (replicas loading different playbooks would lock different keys), the
    unique dedupe key still holds: the loser's transaction fails as StoreConflict and the engine judges
    the notification again, which now sees the winner's run. Forced here, not left to chance: the second
    replica commits the same delivery while the first is between its guard reads and its insert."""
    monkeypatch.setattr(PostgresDialect, "lock_guards", lambda self, conn, names: None)
    first, second = pg_replicas(2, STORM)
    alerts = [storm_alert(0), storm_alert(1)]
    judged = first.judge
    meddled: list[IngestResult] = []

    def judge_then_let_the_other_replica_commit(*args: Any, **kwargs: Any) -> Any:
        verdicts = judged(*args, **kwargs)
        if not meddled:
            meddled.append(deliver(second, alerts))
        return verdicts

    monkeypatch.setattr(first, "judge", judge_then_let_the_other_replica_commit)
    result = deliver(first, [*alerts, storm_alert(2)])

    assert [d.decision.value for d in meddled[0].decisions] == ["accepted", "accepted"]
    assert [d.decision.value for d in result.decisions] == ["duplicate", "duplicate", "accepted"]
    assert len(rows(first.store, "notifications")) == 2  # type: ignore[arg-type]  # the first try rolled back
    per_alert = runs_per_alert(first.store)  # type: ignore[arg-type]
    assert len(per_alert) == 3 and set(per_alert.values()) == {1}


def test_without_guard_locks_a_duplicate_storm_is_still_answered_and_run_once(
    pg_replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PostgresDialect, "lock_guards", lambda self, conn, names: None)
    engines = pg_replicas(4, STORM)
    results: list[Any] = []
    for index in range(ALERTS):
        alert = storm_alert(index)
        results += at_once([lambda e=e, a=alert: deliver(e, [a]) for e in engines])

    assert errors_of(results) == []
    assert decisions_of(results) == {"accepted": ALERTS, "duplicate": ALERTS * 3}


def test_firing_and_resolved_of_one_occurrence_at_once_on_two_replicas_never_leave_a_fix_without_undo(
    replicas: Replicas,
) -> None:
    """AlertManager HA pairs deliver out of order. Whichever replica commits first, the outcome is one of
    the two a single server gives: fired then undone (accepted, accepted), or resolved first and the fix
    never started (no_firing_run, already_resolved) — never a fix accepted whose resolved was lost."""
    first, second = replicas(2, {**STORM, "on_resolved": [{"action": "log", "with": {"message": "undo"}}]})
    outcomes: Counter[tuple[str, str]] = Counter()
    for index in range(20):
        firing = storm_alert(index)
        resolved = {**firing, "status": "resolved"}
        results = at_once([lambda f=firing: deliver(first, [f]), lambda r=resolved: deliver(second, [r])])
        assert errors_of(results) == []
        outcomes[(results[0].decisions[0].decision.value, results[1].decisions[0].decision.value)] += 1

    assert set(outcomes) <= {("accepted", "accepted"), ("already_resolved", "no_firing_run")}, outcomes


# ---------------------------------------------------------------------- cooldown and max_attempts


def test_two_alerts_for_one_target_at_once_on_two_replicas_are_one_run_and_one_cooldown(replicas: Replicas) -> None:
    first, second = replicas(2, {**STORM, "cooldown": "1h"})
    for index in range(20):
        results = at_once(
            [
                lambda i=index: deliver(first, [storm_alert(i)]),
                lambda i=index: deliver(second, [storm_alert(i, name="StormToo")]),  # another alert, same node
            ]
        )
        assert errors_of(results) == []
        assert sorted(d.decision.value for r in results for d in r.decisions) == ["accepted", "cooldown"]
    assert len(rows(first.store, "runs")) == 20  # type: ignore[arg-type]


def test_max_attempts_counts_the_runs_of_every_replica(replicas: Replicas) -> None:
    engines = replicas(3, {**STORM, "max_attempts": 2, "match": {"alertname": ["Storm", "StormToo", "Storm3"]}})
    names = ("Storm", "StormToo", "Storm3")
    for index in range(10):
        results = at_once(
            [
                lambda e=e, n=n, i=index: deliver(e, [storm_alert(i, name=n)])
                for e, n in zip(engines, names, strict=True)
            ]
        )
        assert errors_of(results) == []
        assert sorted(d.decision.value for r in results for d in r.decisions) == [
            "accepted",
            "accepted",
            "attempt_cap",
        ]


# ---------------------------------------------------------------------- the breaker's node claims


def test_a_claim_storm_over_three_replicas_never_holds_more_nodes_than_the_cap(database: str) -> None:
    stores = [Store.open(database) for _ in range(3)]
    limits = BreakerLimits(max_nodes=3, max_fraction=1.0)
    try:
        breakers = [CircuitBreaker(s.breaker.ledger, s.breaker.view, limits=limits) for s in stores]
        calls = [
            lambda b=breakers[node % 3], n=node: b.acquire(f"node-{n}", kind="cordon", run_id=n + 1, cluster_nodes=100)
            for node in range(30)
        ]
        results = at_once(calls)

        refused = [r for r in results if isinstance(r, BreakerOpen)]
        assert [r for r in results if isinstance(r, Exception) and not isinstance(r, BreakerOpen)] == []
        assert (len(results) - len(refused), len(refused)) == (3, 27)
        assert len(rows(stores[0], "breaker_claims", released_at=None)) == 3
        assert breakers[1].state().open
    finally:
        for store in stores:
            store.close()


def test_a_node_storm_over_three_replicas_cordons_no_more_nodes_than_the_cap(
    database: str, kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """The whole path: 100 node alerts (50 nodes x 2 GPUs) in four notifications delivered at once over
    three replicas, each with its engine and its executor (3 threads) and breaker on its own store, the
    k8s.cordon action against the test API server: exactly the cap, min(10% of 50, 3) = 3, cordoned."""
    nodes = cluster(kube_api, 50)
    settings = Settings.of(kubeconfig=kubeconfig, kube_request_timeout=0.5)
    registry = default_registry(settings)
    limits = limits_from_settings(settings.kube.breaker)
    playbooks = PlaybookSet([parse_playbook(CORDON, registry, source="cordon.yaml")])
    stores = [Store.open(database) for _ in range(3)]
    executors = [
        Executor(
            store=store,
            registry=registry,
            retry_wait_max=0.05,
            breaker=CircuitBreaker(store.breaker.ledger, store.breaker.view, limits=limits),
            settings=ExecutorSettings(threads=3, poll_interval=0.02),
        )
        for store in stores
    ]
    engines = [
        Engine(store=store, playbooks=playbooks, registry=registry, on_queued=executor.wake)
        for store, executor in zip(stores, executors, strict=True)
    ]
    started = _iso(datetime.now(UTC) - timedelta(seconds=30))
    alerts = [
        alert_payload("GPUXidCritical", labels={"Hostname": node, "gpu": gpu}, starts_at=started)
        for gpu in ("0", "1")
        for node in nodes
    ]
    try:
        for executor in executors:
            executor.start()
        batches = [alerts[i : i + 25] for i in range(0, 100, 25)]
        results = at_once(
            [lambda e=engines[i % 3], b=batch: deliver(e, b, at=time.time()) for i, batch in enumerate(batches)]
        )
        assert errors_of(results) == []
        wait_until(
            lambda: stores[0].queue.queue_depth()["queued"] == stores[0].queue.queue_depth()["running"] == 0,
            40,
            message="runs still queued or running",
        )
    finally:
        for executor in executors:
            executor.stop()
        registry.get("k8s.cordon").client.close()  # type: ignore[attr-defined]

    try:
        cordoned = sorted(n for n in nodes if kube_api.node(n)["spec"].get("unschedulable"))
        assert len(cordoned) == 3
        assert len(kube_api.changes_of("cordon")) == 3
        assert len(rows(stores[0], "breaker_claims", released_at=None)) == 3
        assert len(rows(stores[0], "decisions")) == 100  # every alert recorded: run, refused or held
        assert {r.status for r in rows(stores[0], "runs")} <= {"succeeded", "failed"}
    finally:
        for store in stores:
            store.close()


# ---------------------------------------------------------------------- approval


def test_two_approvals_at_once_on_two_replicas_one_wins(replicas: Replicas) -> None:
    first, second = replicas(2, {**STORM, "mode": "approve"})
    result = deliver(first, [storm_alert(i) for i in range(10)])
    run_ids = [d.run_id for d in result.decisions]
    stores: list[Store] = [first.store, second.store]  # type: ignore[list-item]
    for run_id in run_ids:
        assert run_id is not None
        results = at_once(
            [
                lambda s=s, r=run_id, who=who: s.queue.approve(r, by=who, now=T0 + 1)
                for s, who in zip(stores, "ab", strict=True)
            ]
        )
        refused = [r for r in results if isinstance(r, RunStateError)]
        assert len(refused) == 1 and "is queued, not awaiting approval" in str(refused[0])
        (run,) = rows(stores[0], "runs", id=run_id)
        winner = "ab"[results.index(None)]
        assert (run.status, run.approved_by) == ("queued", winner)
