"""Upgrading an old database gives exactly the schema of a fresh install, on SQLite and on PostgreSQL."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.store import Store, schema
from tests.support.postgres import PostgresCluster
from tests.support.store_json import run_json_of
from tests.support.stores import DATABASES, start_attempt


def _schema_of(url: str) -> dict[str, object]:
    """Tables, columns, keys and indexes as the database itself reports them (sa.inspect: either backend)."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        shape: dict[str, object] = {}
        for table in sorted(inspector.get_table_names()):
            columns = sorted((c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table))
            indexes = sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in inspector.get_indexes(table)
            )
            uniques = sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(table))
            keys = sorted(
                (tuple(f["constrained_columns"]), f["referred_table"]) for f in inspector.get_foreign_keys(table)
            )
            primary = tuple(inspector.get_pk_constraint(table)["constrained_columns"])
            shape[table] = {"columns": columns, "indexes": indexes, "unique": uniques, "fk": keys, "pk": primary}
        return shape
    finally:
        engine.dispose()


NewDatabase = Callable[[], str]


@pytest.fixture(params=DATABASES)
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> NewDatabase:
    """new_database() -> the URL of another empty database of the test's kind (SQLite file, PostgreSQL database)."""
    names = itertools.count()
    if request.param == "sqlite":
        return lambda: f"sqlite:///{tmp_path / f'db{next(names)}.db'}"
    postgres: PostgresCluster = request.getfixturevalue("postgres")

    def make() -> str:
        url = postgres.database()
        request.addfinalizer(lambda: postgres.drop(url))
        return url

    return make


# Tables added after version 1, by the version that added them.
LATER_TABLES = {"action_memory": 2, "breaker_claims": 3, "ladders": 8, "ui_sessions_ended": 10, "ui_login_failures": 10}


def _make_version(url: str, version: int) -> None:
    engine = sa.create_engine(url)
    tables = [t for name, t in schema.metadata.tables.items() if LATER_TABLES.get(name, 1) <= version]
    with engine.begin() as conn:
        schema.metadata.create_all(conn, tables=tables)
        if version < 4:
            # runs before version 4: no guard_key, cooldowns counted per target
            conn.execute(sa.text("DROP INDEX ix_runs_guard_key"))
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN guard_key"))
            conn.execute(sa.text("CREATE INDEX ix_runs_guard ON runs (playbook, target, phase, created_at)"))
        if version < 5:
            # before version 5: no claim generation (ownership of a run), no rerunnable runs, no `always` steps,
            # no index of steps by status and finish time
            conn.execute(sa.text("DROP INDEX ix_steps_status_finished"))
            for table, column in (
                ("runs", "claim_generation"),
                ("runs", "rerunnable"),
                ("runs", "superseded_by"),
                ("steps", "always"),
            ):
                conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        if version < 6:
            # before version 6: attempts did not record the executor that ran them
            conn.execute(sa.text("ALTER TABLE attempts DROP COLUMN worker"))
        if version < 7:
            # before version 7: pruning's references (decisions and runs by alert and notification) had no index
            for index in ("ix_decisions_notification", "ix_decisions_alert", "ix_runs_alert"):
                conn.execute(sa.text(f"DROP INDEX {index}"))
        if version < 8:
            # before version 8: no escalation ladders (no rung on runs, no ladders table)
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN rung"))
            conn.execute(sa.text("ALTER TABLE steps DROP COLUMN continue_on_error"))
        if version < 9:
            # before version 9: runs awaiting approval were not announced in chat
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN announced_at"))
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN announce_error"))
            # before version 9: the queue was claimed in id order (no runs.priority, no ix_runs_queue)
            conn.execute(sa.text("DROP INDEX ix_runs_queue"))
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN priority"))
            # before version 9: no index of decisions by target and status, the status index without
            # the playbook and alertname
            conn.execute(sa.text("DROP INDEX ix_decisions_target_status"))
            conn.execute(sa.text("DROP INDEX ix_decisions_status"))
            conn.execute(sa.text("CREATE INDEX ix_decisions_status ON decisions (status, id)"))
        if version < 11:
            # before version 11: no index of a playbook's runs by target (repeat offenders)
            conn.execute(sa.text("DROP INDEX ix_runs_target"))
        if version < 12:
            # before version 12: every node step ran on its run's target (no `run_on`, no steps.node)
            conn.execute(sa.text("ALTER TABLE steps DROP COLUMN node"))
        if version < 13:
            # before version 13: no index of decisions by two filters of the history (target and playbook, ...)
            for index in (
                "ix_decisions_target_playbook",
                "ix_decisions_target_alertname",
                "ix_decisions_playbook_alertname",
            ):
                conn.execute(sa.text(f"DROP INDEX {index}"))
        if version < 14:
            # before version 14: AlertManager's notification_reason and truncatedAlerts were only in `raw`
            conn.execute(sa.text("ALTER TABLE notifications DROP COLUMN notification_reason"))
            conn.execute(sa.text("ALTER TABLE notifications DROP COLUMN truncated_alerts"))
        if version < 15:
            # before version 15: runs did not record their playbook's version nor their node's rollout wave, and
            # neither a run's undo nor its breaker claims were indexed by the run
            for index in ("ix_runs_wave", "ix_runs_after_run", "ix_breaker_claims_run"):
                conn.execute(sa.text(f"DROP INDEX IF EXISTS {index}"))  # no breaker_claims before version 3
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN playbook_version"))
            conn.execute(sa.text("ALTER TABLE runs DROP COLUMN wave"))
        conn.execute(sa.insert(schema.meta).values(key="schema_version", value=str(version)))
        conn.execute(sa.insert(schema.meta).values(key="pause", value='{"paused": true, "by": "old"}'))
    engine.dispose()


def test_every_table_added_later_has_a_migration() -> None:
    assert set(LATER_TABLES.values()) <= set(schema.MIGRATIONS)
    assert max(schema.MIGRATIONS) == schema.SCHEMA_VERSION


@pytest.mark.parametrize("version", [1, 2])
def test_a_version_1_or_2_database_is_upgraded_to_the_schema_of_a_fresh_one_with_an_empty_breaker(
    new_database: NewDatabase, version: int
) -> None:
    old, fresh = new_database(), new_database()
    _make_version(old, version)
    store = Store.open(old)
    Store.open(fresh).close()
    assert store.database.schema_version() == schema.SCHEMA_VERSION
    with store.breaker.ledger() as ledger:
        assert ledger.open_claims() == []
    assert store.breaker.state() is None
    store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_an_upgrade_keeps_the_data_that_was_there(new_database: NewDatabase) -> None:
    old = new_database()
    _make_version(old, 1)
    store = Store.open(old)
    assert store.pause.state().paused is True
    assert store.pause.state().by == "old"
    store.memory.remember("gpu.power_limit/GPU-1", {"original_mw": 700000}, run_id=1)
    assert store.memory.recall("gpu.power_limit/GPU-1") == {"original_mw": 700000}
    store.close()


# What every old database below holds: notification 1 and its alert 1 (statements then add runs, steps...).
NOTIFICATION_AND_ALERT = (
    "INSERT INTO notifications (id, received_at, receiver, status, group_key, alert_count, raw) "
    "VALUES (1, 1, 'r', 'firing', 'g', 1, '{}')",
    "INSERT INTO alerts (id, notification_id, fingerprint, alertname, status, starts_at, labels, "
    "annotations, generator_url) VALUES (1, 1, 'f', 'A', 'firing', 's', '{}', '{}', '')",
)
RUN = (
    "INSERT INTO runs (id, dedupe_key, playbook, alertname, target, phase, mode, status, alert_id, "
    "created_at, updated_at, guard_key) VALUES (:id, :key, 'p', 'A', 'node-a', 'firing', :mode, :status, 1, 1, 1, "
    "'node-a')"
)


def _run(run_id: int = 1, mode: str = "enforce", status: str = "queued") -> tuple[str, dict[str, Any]]:
    return RUN, {"id": run_id, "key": f"k{run_id}", "mode": mode, "status": status}


def _old_and_fresh(new_database: NewDatabase, version: int, *statements: str | tuple[str, Any]) -> tuple[str, str]:
    """A database of `version` holding NOTIFICATION_AND_ALERT then `statements` (SQL or (SQL, parameters)), and
    a fresh database the store created, whose schema the upgraded one must equal."""
    old, fresh = new_database(), new_database()
    _make_version(old, version)
    engine = sa.create_engine(old)
    with engine.begin() as conn:
        for statement in (*NOTIFICATION_AND_ALERT, *statements):
            sql, parameters = (statement, None) if isinstance(statement, str) else statement
            conn.execute(sa.text(sql), parameters)
    engine.dispose()
    Store.open(fresh).close()
    return old, fresh


def _read(url: str, sql: str) -> list[Any]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(sql)).all()
    engine.dispose()
    return list(rows)


def test_a_version_3_database_gets_guard_keys_equal_to_the_targets_of_its_runs(new_database: NewDatabase) -> None:
    old, fresh = _old_and_fresh(
        new_database,
        3,
        "INSERT INTO runs (dedupe_key, playbook, alertname, target, phase, mode, status, alert_id, created_at, "
        "updated_at) VALUES ('k', 'p', 'A', 'node-a', 'firing', 'enforce', 'succeeded', 1, 1, 1)",
    )
    store = Store.open(old)
    with store.read() as conn:
        assert conn.execute(sa.text("SELECT guard_key FROM runs")).scalar_one() == "node-a"
    store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_4_database_gets_claim_generations_and_always_flags_with_safe_defaults(
    new_database: NewDatabase,
) -> None:
    old, fresh = _old_and_fresh(
        new_database,
        4,
        _run(),
        'INSERT INTO steps (run_id, idx, name, action, "where", params, timeout, retries, status) '
        "VALUES (1, 0, 's', 'log', 'cluster', '{}', 1, 0, 'pending')",
    )
    store = Store.open(old)
    claimed = store.queue.claim("host:1", 2.0)
    assert claimed is not None
    assert claimed.generation == 1  # counted from the column's default
    (step,) = store.queue.steps_of(1)
    assert step.always is False
    detail = run_json_of(store, 1)
    assert (detail["rerunnable"], detail["superseded_by"]) == (False, None)
    store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_5_database_gets_attempt_workers_old_attempts_unknown_new_ones_recorded(
    new_database: NewDatabase,
) -> None:
    """`attempts.worker` (who ran it, `ran_on` in the API) is added empty; attempts recorded
    before say nothing, those after name their executor."""
    old, fresh = _old_and_fresh(
        new_database,
        5,
        _run(),
        (
            'INSERT INTO steps (id, run_id, idx, name, action, "where", params, timeout, retries, status, '
            "attempts) VALUES (:id, 1, :idx, 's', 'log', 'cluster', '{}', 1, 0, 'pending', :attempts)",
            [{"id": 1, "idx": 0, "attempts": 1}, {"id": 2, "idx": 1, "attempts": 0}],
        ),
        "INSERT INTO attempts (step_id, number, started_at) VALUES (1, 1, 1.5)",
    )
    store = Store.open(old)
    claimed = store.queue.claim("replica-b:42", 2.0)
    assert claimed is not None
    start_attempt(store, claimed.lease, 2, 1, 3.0)
    detail = run_json_of(store, 1)
    assert [a["ran_on"] for s in detail["steps"] for a in s["attempts"]] == [None, "replica-b:42"]
    assert detail["ran_on"] == ["replica-b:42"]
    store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_7_database_gets_ladders_its_old_runs_ran_no_rung(new_database: NewDatabase) -> None:
    """`runs.rung` is added empty (no run before escalation ladders ran a rung) and the
    `ladders` table starts empty: every ladder starts at its first rung."""
    old, fresh = _old_and_fresh(new_database, 7, _run())
    Store.open(old).close()
    assert _read(old, "SELECT id, rung FROM runs") == [(1, None)]
    assert _read(old, "SELECT count(*) FROM ladders") == [(0,)]
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_8_database_gets_announcements_its_waiting_runs_still_to_announce(new_database: NewDatabase) -> None:
    """`runs.announced_at` and `announce_error` are added empty: a run that awaited approval before
    the upgrade, with a chat step, is announced once after it (the on-call hears of it); none is marked sent."""
    old, fresh = _old_and_fresh(
        new_database,
        8,
        _run(mode="approve", status="awaiting_approval"),
        'INSERT INTO steps (id, run_id, idx, name, action, "where", params, timeout, retries, status) '
        "VALUES (1, 1, 0, 'tell', 'notify.slack', 'cluster', '{\"url\": \"http://chat/x\"}', 10, 0, 'pending')",
    )
    store = Store.open(old)
    try:
        with store.read() as conn:
            assert conn.execute(sa.text("SELECT id, announced_at, announce_error FROM runs")).all() == [(1, None, None)]
        taken = store.announcements.take(5.0, ["notify.slack"])
        assert taken is not None and (taken.id, [s.action for s in taken.steps]) == (1, ["notify.slack"])
    finally:
        store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_8_database_gets_queue_priorities_its_queued_runs_keep_their_order(new_database: NewDatabase) -> None:
    """`runs.priority` is added as 0 (the highest) for every run there was, so the runs queued before
    the upgrade are claimed first and in their old (id) order; `ix_runs_queue` orders the claim."""
    old, fresh = _old_and_fresh(new_database, 8, _run(1), _run(2))
    store = Store.open(old)
    with store.read() as conn:
        assert conn.execute(sa.text("SELECT id, priority FROM runs ORDER BY id")).all() == [(1, 0), (2, 0)]
    assert [store.queue.claim("w:1", 2.0).id, store.queue.claim("w:1", 2.0).id] == [1, 2]  # type: ignore[union-attr]
    store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_8_database_gets_decision_times_that_never_decrease_with_the_id(
    new_database: NewDatabase, request: pytest.FixtureRequest
) -> None:
    """Before version 9 two workers could store decisions out of receive-time order (the time
    was taken before the write lock). On SQLite the upgrade gives each row the running max of the times
    by id (the history's time filters become id ranges); PostgreSQL, which does not rely on the order,
    keeps every time. Either way the index of decisions by (target, status) is added, and the status
    index gets the playbook and alertname (compared through sa.inspect with a fresh schema)."""
    times = [10.0, 10.004, 10.002, 10.003, 10.01, 9.5, 10.01, 11.0]  # two rows late, by 2 ms and 510 ms
    old, fresh = _old_and_fresh(
        new_database,
        8,
        (
            "INSERT INTO decisions (id, created_at, notification_id, alert_id, alertname, fingerprint, "
            "alert_status, decision, reason, status) VALUES (:id, :at, 1, 1, 'A', 'f', 'firing', "
            "'unmatched', 'no playbook', 'unmatched')",
            [{"id": i + 1, "at": at} for i, at in enumerate(times)],
        ),
    )
    Store.open(old).close()
    stored = [at for (at,) in _read(old, "SELECT created_at FROM decisions ORDER BY id")]
    if request.node.callspec.params["new_database"] == "sqlite":
        assert stored == [10.0, 10.004, 10.004, 10.004, 10.01, 10.01, 10.01, 11.0]
    else:
        assert stored == times
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_11_database_gets_step_nodes_its_old_steps_run_on_their_targets(new_database: NewDatabase) -> None:
    """`steps.node` (where a `run_on` step runs) is added empty: a step stored before runs, as it
    always did, on its run's target; the run's detail says so (node null)."""
    old, fresh = _old_and_fresh(
        new_database,
        11,
        _run(),
        'INSERT INTO steps (run_id, idx, name, action, "where", params, timeout, retries, status) '
        "VALUES (1, 0, 's', 'gpu.reset', 'node', '{}', 1, 0, 'pending')",
    )
    store = Store.open(old)
    try:
        (step,) = store.queue.steps_of(1)
        assert step.node is None
        assert step.node_of(store.queue.claim("host:1", 2.0)) == "node-a"  # type: ignore[arg-type]
        assert run_json_of(store, 1)["steps"][0]["node"] is None
    finally:
        store.close()
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_13_database_gets_notification_reasons_its_old_notifications_say_none(
    new_database: NewDatabase,
) -> None:
    """`notifications.notification_reason` is added empty (AlertManager's reason was only in `raw`) and
    `truncated_alerts` at 0: nothing was known to be dropped."""
    old, fresh = _old_and_fresh(new_database, 13)
    store = Store.open(old)
    store.close()
    rows = _read(old, "SELECT notification_reason, truncated_alerts FROM notifications")
    assert [tuple(r) for r in rows] == [(None, 0)]
    assert _schema_of(old) == _schema_of(fresh)


def test_a_version_14_database_gets_playbook_versions_and_waves_its_old_runs_count_for_no_promotion(
    new_database: NewDatabase,
) -> None:
    """`runs.playbook_version` and `runs.wave` are added empty: a run stored before names no version, so no
    promotion counts it (a promotion counts the runs of one version), and the wave index is there."""
    old, fresh = _old_and_fresh(new_database, 14, _run())
    store = Store.open(old)
    store.close()
    rows = _read(old, "SELECT playbook_version, wave FROM runs")
    assert [tuple(r) for r in rows] == [(None, None)]
    assert _schema_of(old) == _schema_of(fresh)
