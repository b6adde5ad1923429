"""`remediate db copy` on real databases: a SQLite history written by the real engine and executor
(shipped playbooks, AlertManager 0.25 payloads), copied to a real PostgreSQL 15 (a throwaway cluster,
tests/support/postgres.py), back to SQLite, and SQLite to SQLite; then read through the Store.

PostgreSQL missing fails these tests (never skips): scripts/test installs it."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import Result

from remediate.actions import default_registry
from remediate.breaker import Claim
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import HistoryQuery, LoginThrottle, Store
from remediate.store import copy as dbcopy
from remediate.store import schema as t
from tests.support.agent import Echo
from tests.support.cli import assert_one_line_error, sqlite_dump
from tests.support.cli import run_cli as cli
from tests.support.postgres import PostgresCluster
from tests.support.processes import run_remediate
from tests.support.realsystems import free_port
from tests.support.store_json import history_json_of, run_json_of
from tests.support.stores import table_counts

REPO = Path(__file__).resolve().parents[2]
PAYLOADS = REPO / "tests" / "fixtures" / "payloads"
T0 = 1_795_000_000.0


def payload(name: str, host: str | None = None) -> bytes:
    """A payload of tests/fixtures/payloads, its alert moved to `host` (a new fingerprint) if given.

    The resolved one gets the firing one's startsAt: the same alert occurrence, so on_resolved runs."""
    data = json.loads((PAYLOADS / name).read_text(encoding="utf-8"))
    firing = json.loads((PAYLOADS / "am-0.25-firing.json").read_text(encoding="utf-8"))
    for alert in data["alerts"]:
        alert["startsAt"] = firing["alerts"][0]["startsAt"]
        if host is not None:
            alert["labels"]["Hostname"] = host
            alert["fingerprint"] = hashlib.sha256(host.encode()).hexdigest()[:16]
    return json.dumps(data).encode()


def engine_on(store: Store) -> tuple[Engine, Executor]:
    """The engine and executor of a server on `store`, with a playbook that logs the fixtures' alert on firing
    and on resolve (the shipped playbooks reach out: webhooks, cordons)."""
    registry = default_registry()
    registry.register(Echo())  # a node action that runs here: its `run_on` step stores a node (steps.node)
    playbook = parse_playbook(LOG_XID, registry)
    engine = Engine(store=store, playbooks=PlaybookSet([playbook]), registry=registry)
    return engine, Executor(store=store, registry=registry, retry_wait_max=0.01)


def fill(store: Store, hosts: tuple[str, ...] = ("node-a", "node-b", "node-c")) -> None:
    """A history as the server writes it: notifications, alerts, decisions, runs executed to their end
    with steps and attempts, a duplicate, resolved runs, the pause and breaker meta rows, breaker
    claims (one released), action memory."""
    engine, executor = engine_on(store)
    at = T0
    for host in hosts:
        engine.ingest_body(payload("am-0.25-firing.json", host), received_at=at)
        engine.ingest_body(payload("am-0.25-firing.json", host), received_at=at + 1)  # AlertManager's retry
        at += 10
    engine.ingest_body(payload("am-0.25-firing.json"), received_at=at)  # no Hostname: the alert is the target
    executor.drain()
    for host in hosts[:2]:
        engine.ingest_body(payload("am-0.25-resolved.json", host), received_at=at + 60)
    executor.drain()
    store.pause.set(True, by="tester", reason="copy test", now=at + 100)
    store.pause.set(False, by="tester", reason="", now=at + 101)
    with store.breaker.ledger() as ledger:
        ledger.save_state({"open": False, "since": at})
        for node in hosts[:2]:
            ledger.add_claim(Claim(node=node, kind="cordon", run_id=1, claimed_at=at + 120))
        ledger.release(hosts[0], now=at + 130, reason="uncordoned")
    store.memory.remember("gpu:node-a:3:power", {"watts": 300}, run_id=1)
    # Where two escalation ladders stand (composite primary key), as a ladder playbook leaves them: on
    # the first two hosts a later occurrence climbs rung 1, and the first stays hot past holds_for: rung 2.
    ladder = Engine(store=store, playbooks=PlaybookSet([parse_playbook(LADDER, default_registry())]),
                    registry=default_registry())  # fmt: skip
    for host in hosts[:2]:
        ladder.ingest_body(later_occurrence(host), received_at=at + 140)
    ladder.ingest_body(later_occurrence(hosts[0]), received_at=at + 240)
    executor.drain()
    # The web pages' state: a session ended by its logout, and a client's failed logins.
    store.ui_sessions.end("Zq3-logged-out-session", expires_at=at + 12 * 3600, now=at + 250)
    store.ui_sessions.record_login_failure("192.0.2.7", throttle=LoginThrottle(), now=at + 260)


LOG_XID = {
    "name": "log-xid",
    "match": {"alertname": "GpuXidError", "labels": ['severity=~"critical|warning"']},
    "cooldown": "0s",
    "steps": [
        {"action": "log", "with": {"message": "{{ labels.alertname }} on {{ labels.Hostname | default('') }}"}},
        {"action": "test.echo", "with": {"word": "copied"}, "run_on": {"labels": ["pod"]}},
    ],
    "on_resolved": [{"action": "log", "with": {"message": "{{ labels.alertname }} resolved"}}],
}

LADDER = {
    "name": "xid-ladder",
    "match": {"alertname": "GpuXidError"},
    "escalate": [
        {"name": "note", "holds_for": "1m", "steps": [{"action": "log", "with": {"message": "rung 1"}}]},
        {"name": "again", "holds_for": "1m", "steps": [{"action": "log", "with": {"message": "rung 2"}}]},
    ],
}


def later_occurrence(host: str) -> bytes:
    """The firing payload on `host`, as a new occurrence (a later startsAt than the one resolved above)."""
    data = json.loads(payload("am-0.25-firing.json", host))
    for alert in data["alerts"]:
        alert["startsAt"] = "2026-11-21T06:00:00Z"
    return json.dumps(data).encode()


def sqlite_store(path: Path, hosts: tuple[str, ...] = ("node-a", "node-b", "node-c")) -> str:
    url = f"sqlite:///{path}"
    store = Store.open(url)
    try:
        fill(store, hosts)
    finally:
        store.close()
    return url


def every_row(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of every remediate table, in primary-key order."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return {
                table.name: [
                    dict(row) for row in conn.execute(sa.select(table).order_by(*table.primary_key.columns)).mappings()
                ]
                for table in t.metadata.sorted_tables
            }
    finally:
        engine.dispose()


def views(url: str) -> dict[str, Any]:
    """What the CLI and the HTTP API show of a database: history, every run's detail, counts."""
    store = Store.open(url)
    try:
        entries, _cursor = history_json_of(store, HistoryQuery(limit=1000))
        run_ids = sorted({e["run_id"] for e in entries if e.get("run_id")})
        return {
            "history": entries,
            "runs": [run_json_of(store, run_id) for run_id in run_ids],
            "counts": table_counts(store),
            "pause": store.pause.state(),
            "breaker": store.breaker.state(),
            "schema_version": store.database.schema_version(),
        }
    finally:
        store.close()


def tables_of(url: str) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        return sorted(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def assert_copy_error(result: Result, *words: str) -> None:
    """The error as one line, after the progress of the tables done so far (if any)."""
    assert_one_line_error(result, *words, progress=r"\w+: \d+ rows (copied|to copy)")


# --------------------------------------------------------------------------- SQLite -> PostgreSQL


def test_a_sqlite_history_copied_to_postgresql_reads_the_same_and_takes_new_alerts(tmp_path: Path, pg_url: str) -> None:
    source = sqlite_store(tmp_path / "remediate.db")
    before = views(source)
    file_before = sqlite_dump(tmp_path / "remediate.db")

    result = cli("db", "copy", "--from", source, "--to", pg_url)

    assert result.exit_code == 0, result.output
    assert every_row(pg_url) == every_row(source)
    assert views(pg_url) == before
    assert sqlite_dump(tmp_path / "remediate.db") == file_before
    rows = every_row(source)
    assert all(rows[table.name] for table in t.metadata.sorted_tables)
    assert {row["key"] for row in rows["meta"]} == {"schema_version", "pause", "breaker"}
    assert {(r["phase"], r["status"]) for r in rows["runs"]} == {("firing", "succeeded"), ("resolved", "succeeded")}
    assert "duplicate" in {d["decision"] for d in rows["decisions"]}
    assert {r["node"] for r in rows["steps"]} == {None, "trainer-0"}  # a `run_on` step's node is copied too
    total = sum(len(table_rows) for table_rows in rows.values())
    for table in t.metadata.sorted_tables:
        assert f"{table.name}: {len(rows[table.name])} rows copied" in result.stderr
    assert result.stdout.strip() == (
        f"copied {total} rows in {len(t.metadata.tables)} tables from {source} to {pg_url}"
    )

    # The sequences moved past the copied ids: the server on the copy records and runs new alerts.
    target = Store.open(pg_url)
    try:
        engine, executor = engine_on(target)
        engine.ingest_body(payload("am-0.25-firing.json", "node-z"), received_at=T0 + 1000)
        assert executor.drain() == 1
        with target.breaker.ledger() as ledger:
            ledger.add_claim(Claim(node="node-z", kind="cordon", run_id=1, claimed_at=T0 + 1001))
    finally:
        target.close()
    after = every_row(pg_url)
    for name in ("notifications", "alerts", "decisions", "runs", "steps", "attempts", "breaker_claims"):
        old_ids = [row["id"] for row in rows[name]]
        new = after[name][len(rows[name]) :]
        assert new, name
        assert min(row["id"] for row in new) == max(old_ids) + 1, name
    (new_run,) = [r for r in after["runs"] if r["target"] == "node-z"]
    assert new_run["status"] == "succeeded"


def test_the_libpq_url_form_works_from_a_real_process(tmp_path: Path, postgres: PostgresCluster, pg_url: str) -> None:
    source = sqlite_store(tmp_path / "remediate.db", hosts=("node-a",))
    libpq_url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    done = run_remediate("db", "copy", "--from", source, "--to", libpq_url, cwd=tmp_path, timeout=120)

    assert done.returncode == 0, done.stderr
    rows = every_row(source)
    assert f"runs: {len(rows['runs'])} rows copied" in done.stderr
    assert done.stdout.startswith(f"copied {sum(len(r) for r in rows.values())} rows in ")
    assert every_row(pg_url) == rows


# --------------------------------------------------------------------------- the other directions


def test_postgresql_copied_back_to_sqlite_is_the_same_history(tmp_path: Path, pg_url: str) -> None:
    source = sqlite_store(tmp_path / "first.db")
    assert cli("db", "copy", "--from", source, "--to", pg_url).exit_code == 0
    back = f"sqlite:///{tmp_path / 'back.db'}"

    result = cli("db", "copy", "--from", pg_url, "--to", back)

    assert result.exit_code == 0, result.output
    assert every_row(back) == every_row(source)
    assert views(back) == views(source)
    assert oct((tmp_path / "back.db").stat().st_mode & 0o777) == "0o600"


def test_decisions_out_of_time_order_on_postgresql_are_stamped_in_order_into_sqlite(
    tmp_path: Path, pg_url: str
) -> None:
    """On PostgreSQL a later decision id can carry an earlier time (replicas commit out of sequence
    order). SQLite's history reads since/until as id ranges, so the copy raises each time to the newest
    one before it, across batches; every other column and row is copied as it was."""
    source = sqlite_store(tmp_path / "first.db")
    assert cli("db", "copy", "--from", source, "--to", pg_url).exit_code == 0
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # the 2nd decision took its id after a notification received 2 s later
        second = conn.execute(sa.text("SELECT id, created_at FROM decisions ORDER BY id OFFSET 1 LIMIT 1")).one()
        conn.execute(
            sa.text("UPDATE decisions SET created_at = :at WHERE id = :id"),
            {"at": second.created_at - 2, "id": second.id},
        )
    engine.dispose()
    original = every_row(pg_url)["decisions"]
    back = f"sqlite:///{tmp_path / 'back.db'}"

    result = cli("db", "copy", "--batch-size", "2", "--from", pg_url, "--to", back)

    assert result.exit_code == 0, result.output
    copied = every_row(back)["decisions"]
    newest = [max(d["created_at"] for d in original[: i + 1]) for i in range(len(original))]
    assert [d["created_at"] for d in copied] == newest
    assert copied[1]["created_at"] == original[0]["created_at"] != original[1]["created_at"]
    assert [{**d, "created_at": None} for d in copied] == [{**d, "created_at": None} for d in original]
    store = Store.open(back)
    try:
        for since in (None, *newest):
            entries, _ = store.history.page(
                HistoryQuery(since=since, until=None if since is None else since + 5, limit=100)
            )
            assert [e.id for e in entries] == [
                d["id"] for d in reversed(copied) if since is None or since <= d["created_at"] < since + 5
            ]
    finally:
        store.close()


def test_postgresql_to_postgresql_moves_the_sequences_too(
    tmp_path: Path, postgres: PostgresCluster, pg_url: str
) -> None:
    source = sqlite_store(tmp_path / "first.db", hosts=("node-a", "node-b"))
    assert cli("db", "copy", "--from", source, "--to", pg_url).exit_code == 0
    second = postgres.database()
    try:
        result = cli("db", "copy", "--from", pg_url, "--to", second)

        assert result.exit_code == 0, result.output
        assert every_row(second) == every_row(pg_url)
        store = Store.open(second)
        try:
            engine, _executor = engine_on(store)
            engine.ingest_body(payload("am-0.25-firing.json", "node-z"), received_at=T0 + 1000)
        finally:
            store.close()
        runs = every_row(second)["runs"]
        assert (runs[-1]["target"], runs[-1]["id"]) == ("node-z", runs[-2]["id"] + 1)
    finally:
        postgres.drop(second)


@pytest.mark.parametrize(
    ("table", "batch_size", "copied_rows", "order", "after"),
    [
        (t.notifications, 2, 12, "notifications.id", "notifications.id >"),
        (t.ladders, 1, 2, "ladders.playbook, ladders.guard_key", "(ladders.playbook, ladders.guard_key) >"),
    ],
    ids=["id", "composite-key"],
)
def test_rows_are_read_in_batches_of_primary_key_order(
    tmp_path: Path, table: sa.Table, batch_size: int, copied_rows: int, order: str, after: str
) -> None:
    source = sqlite_store(tmp_path / "a.db")
    target = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    reads: list[str] = []
    engine = sa.create_engine(source, poolclass=sa.pool.NullPool)
    sa.event.listen(engine, "before_cursor_execute", lambda *args: reads.append(args[2]))
    try:
        with engine.connect() as conn, target.write() as out:
            t.metadata.create_all(out)
            copied = dbcopy._copy_table(table, conn, out, batch_size=batch_size)
    finally:
        engine.dispose()
        target.close()

    assert copied == copied_rows
    # batch_size rows at a time: the reads that return rows and 1 that finds none, each after the last key read.
    assert len(reads) == copied_rows // batch_size + 1
    assert all(f"ORDER BY {order}" in sql and "LIMIT" in sql for sql in reads)
    assert all(after in sql for sql in reads[1:])
    assert every_row(f"sqlite:///{tmp_path / 'b.db'}")[table.name] == every_row(source)[table.name]


def test_sqlite_to_sqlite_in_small_batches_keeps_every_row_and_id(tmp_path: Path) -> None:
    source = sqlite_store(tmp_path / "a.db")
    target = f"sqlite:///{tmp_path / 'b.db'}"

    result = cli("db", "copy", "--from", source, "--to", target, "--batch-size", "2")

    assert result.exit_code == 0, result.output
    assert every_row(target) == every_row(source)
    assert views(target) == views(source)
    store = Store.open(target)
    try:
        engine, _executor = engine_on(store)
        engine.ingest_body(payload("am-0.25-firing.json", "node-z"), received_at=T0 + 1000)
    finally:
        store.close()
    runs = every_row(target)["runs"]
    assert runs[-1]["target"] == "node-z"
    assert runs[-1]["id"] == runs[-2]["id"] + 1


def test_a_target_whose_schema_a_server_created_but_never_used_counts_as_empty(tmp_path: Path) -> None:
    source = sqlite_store(tmp_path / "a.db", hosts=("node-a",))
    target = f"sqlite:///{tmp_path / 'b.db'}"
    Store.open(target).close()  # what `remediate serve` on the new database does before the copy

    result = cli("db", "copy", "--from", source, "--to", target)

    assert result.exit_code == 0, result.output
    assert every_row(target) == every_row(source)


# --------------------------------------------------------------------------- dry run


def test_dry_run_counts_and_writes_nothing(tmp_path: Path, pg_url: str) -> None:
    source = sqlite_store(tmp_path / "a.db", hosts=("node-a",))
    rows = every_row(source)
    new_sqlite = tmp_path / "never.db"

    to_pg = cli("db", "copy", "--dry-run", "--from", source, "--to", pg_url)
    to_sqlite = cli("db", "copy", "--dry-run", "--from", source, "--to", f"sqlite:///{new_sqlite}")

    for result in (to_pg, to_sqlite):
        assert result.exit_code == 0, result.output
        assert f"runs: {len(rows['runs'])} rows to copy" in result.stderr
        assert result.stdout.startswith(f"would copy {sum(len(r) for r in rows.values())} rows in ")
    assert tables_of(pg_url) == []
    assert not new_sqlite.exists()


# --------------------------------------------------------------------------- refused, one line, nothing written


def test_a_target_with_rows_is_refused_and_left_as_it_was(tmp_path: Path, pg_url: str) -> None:
    first = sqlite_store(tmp_path / "a.db", hosts=("node-a",))
    second = sqlite_store(tmp_path / "b.db", hosts=("node-b", "node-c"))
    assert cli("db", "copy", "--from", first, "--to", pg_url).exit_code == 0
    before = every_row(pg_url)

    result = cli("db", "copy", "--from", second, "--to", pg_url)
    dry = cli("db", "copy", "--dry-run", "--from", second, "--to", pg_url)

    assert_copy_error(result, "already holds remediate rows", f"runs: {len(before['runs'])},", "empty")
    assert_copy_error(dry, "already holds remediate rows")
    assert every_row(pg_url) == before


def test_a_copy_that_fails_half_way_leaves_the_target_empty(tmp_path: Path, pg_url: str) -> None:
    source = sqlite_store(tmp_path / "a.db")
    # SQLite keeps a value longer than its VARCHAR(64); PostgreSQL refuses it, after several tables went in.
    conn = sqlite3.connect(tmp_path / "a.db")
    with conn:
        conn.execute("UPDATE runs SET dedupe_key = ? WHERE id = (SELECT MAX(id) FROM runs)", ("k" * 80,))
    conn.close()

    result = cli("db", "copy", "--from", source, "--to", pg_url, "--batch-size", "1")

    assert_copy_error(result, "target database", "value too long", "the target is as it was")
    assert "notifications: 12 rows copied" in result.stderr  # copied before runs failed, then rolled back
    assert tables_of(pg_url) == []
    assert cli("db", "copy", "--from", source, "--to", f"sqlite:///{tmp_path / 'ok.db'}").exit_code == 0


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    source = sqlite_store(tmp_path / "a.db", hosts=("node-a",))
    port = free_port()  # closed again: nothing listens there

    nowhere = f"postgresql://remediate:secret@127.0.0.1:{port}/app"

    as_target = cli("db", "copy", "--from", source, "--to", nowhere)
    as_target_dry = cli("db", "copy", "--dry-run", "--from", source, "--to", nowhere)
    as_source = cli("db", "copy", "--from", nowhere, "--to", f"sqlite:///{tmp_path / 'b.db'}")

    assert_copy_error(as_target, "the target database", f"127.0.0.1:{port}/app", "failed", "Connection refused")
    assert_copy_error(as_target_dry, "the target database", "Connection refused")
    assert_copy_error(as_source, "the source database", "Connection refused")
    assert all("secret" not in result.stderr for result in (as_target, as_target_dry, as_source))
    assert not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("nonsense", ("cannot use database URL", "nonsense")),
        ("mysql://root@localhost/remediate", ("between SQLite and PostgreSQL",)),
        ("sqlite://", ("path of a SQLite file",)),
    ],
)
def test_an_unusable_url_is_one_line(tmp_path: Path, url: str, words: tuple[str, ...]) -> None:
    source = sqlite_store(tmp_path / "a.db", hosts=("node-a",))

    as_target = cli("db", "copy", "--from", source, "--to", url)
    as_source = cli("db", "copy", "--from", url, "--to", f"sqlite:///{tmp_path / 'b.db'}")

    assert_copy_error(as_target, *words)
    assert_copy_error(as_source, *words)
    assert not (tmp_path / "b.db").exists()


def test_a_missing_source_file_or_the_same_database_is_refused(tmp_path: Path) -> None:
    source = sqlite_store(tmp_path / "a.db", hosts=("node-a",))

    missing = cli("db", "copy", "--from", f"sqlite:///{tmp_path / 'nope.db'}", "--to", f"sqlite:///{tmp_path / 'b.db'}")
    same = cli("db", "copy", "--from", source, "--to", f"sqlite:///{tmp_path / '.' / 'a.db'}")

    assert_copy_error(missing, "no database at", "nope.db")
    assert_copy_error(same, "the same database")
    assert not (tmp_path / "nope.db").exists()
    assert not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(
    ("version", "words"),
    [
        (t.SCHEMA_VERSION + 1, ("newer than this remediate", "version that wrote it")),
        (t.SCHEMA_VERSION - 1, ("older than this remediate", "upgrade it first")),
    ],
)
def test_a_source_of_another_schema_version_is_refused_and_not_upgraded(
    tmp_path: Path, pg_url: str, version: int, words: tuple[str, ...]
) -> None:
    path = tmp_path / "a.db"
    source = sqlite_store(path, hosts=("node-a",))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.close()
    before = sqlite_dump(path)

    result = cli("db", "copy", "--from", source, "--to", pg_url)

    assert_copy_error(result, f"schema version {version}", *words)
    assert sqlite_dump(path) == before
    assert tables_of(pg_url) == []


def test_an_older_source_copies_once_upgraded_as_the_refusal_says(tmp_path: Path, pg_url: str) -> None:
    path = tmp_path / "a.db"
    source = sqlite_store(path, hosts=("node-a", "node-b"))
    # Back to a real version 14 file: without what migration 15 adds (each run's playbook version and rollout
    # wave, and the indexes of a run's undo and breaker claims by run).
    conn = sqlite3.connect(path)
    with conn:
        for index in ("ix_runs_wave", "ix_runs_after_run", "ix_breaker_claims_run"):
            conn.execute(f"DROP INDEX {index}")
        for column in ("playbook_version", "wave"):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        conn.execute("UPDATE meta SET value = '14' WHERE key = 'schema_version'")
    conn.close()
    assert t.SCHEMA_VERSION == 15, "make this file a version SCHEMA_VERSION-1 one"

    refused = cli("db", "copy", "--from", source, "--to", pg_url)
    upgraded = cli("history", "--database-url", source)
    copied = cli("db", "copy", "--from", source, "--to", pg_url)

    assert_copy_error(refused, "older than this remediate", "remediate history --database-url")
    assert upgraded.exit_code == 0, upgraded.output
    assert copied.exit_code == 0, copied.output
    assert every_row(pg_url) == every_row(source)
    assert views(pg_url) == views(source)


def test_a_file_that_is_not_a_remediate_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    with conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    conn.close()

    result = cli("db", "copy", "--from", f"sqlite:///{other}", "--to", f"sqlite:///{tmp_path / 'b.db'}")

    assert_copy_error(result, "not a remediate database")
