"""A PostgreSQL server that goes away and comes back (a restart, a crash, a fail-over) under a running remediate.

Each test stops and starts a real PostgreSQL 15 of this module's own (`own_postgres`): requests during the
outage are answered 503 with the JSON error (AlertManager retries), /readyz is unready, the executor waits
and retries, and everything works again once the server is back, without restarting remediate.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest

from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.log import LogAction
from remediate.actions.schema import ParamSchema
from remediate.config.settings import ExecutorSettings
from remediate.errors import ActionError, StoreRefused, StoreUnreachable
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import HistoryQuery, Store
from tests.support.http import MakeServer, alert, notification
from tests.support.postgres import PostgresCluster
from tests.support.processes import REMEDIATE
from tests.support.server import RemediateServer
from tests.support.stores import step_details
from tests.support.waiting import scaled, wait_until

T0 = 1_767_225_600.0


@pytest.fixture
def outage_url(own_postgres: PostgresCluster) -> Iterator[str]:
    """A fresh database on the module's own cluster, its URL carrying a password (trust auth ignores it)."""
    url = own_postgres.database().replace("remediate@", "remediate:s3cret@")
    yield url
    if not own_postgres.running:  # a failed test may leave it stopped: the next test needs it
        own_postgres.resume()
    own_postgres.drop(url)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_the_store_is_unreachable_while_the_server_is_down_and_works_again_after(
    own_postgres: PostgresCluster, outage_url: str, mode: str
) -> None:
    """fast: every session is ended (a restart, a fail-over); immediate: the server crashes."""
    store = Store.open(outage_url)
    try:
        store.pause.set(True, by="alice", reason="before", now=T0)  # connections pooled before the outage
        with own_postgres.down(mode=mode):
            db = store.database
            for attempt in (db.schema_version, db.probe_write, lambda: store.history.page(HistoryQuery())):
                with pytest.raises(StoreUnreachable) as caught:
                    attempt()
                message = str(caught.value)
                assert "\n" not in message and "s3cret" not in message
                assert message.startswith("the database postgresql+psycopg://remediate:***@127.0.0.1:")
                assert "cannot be reached" in message
            with pytest.raises(StoreUnreachable):
                store.pause.set(False, by="bob", reason="during", now=T0 + 1)
        # The same Store, no reopening: the pool's dead connections are replaced on checkout.
        store.database.schema_version()
        assert store.pause.state().by == "alice"
        store.pause.set(False, by="bob", reason="after", now=T0 + 2)
        assert store.pause.state().by == "bob"
    finally:
        store.close()


def test_a_transaction_cut_by_a_restart_is_unreachable_and_rolled_back(
    own_postgres: PostgresCluster, outage_url: str
) -> None:
    store = Store.open(outage_url)
    try:
        cut = pytest.raises(StoreUnreachable, match="terminating connection due to administrator command")
        with cut, store.write() as conn:
            store.pause.set(True, by="alice", reason="", now=T0)  # its own transaction: committed
            conn.exec_driver_sql("UPDATE meta SET value = value")
            own_postgres.restart()
            conn.exec_driver_sql("UPDATE meta SET value = 'lost' WHERE key = 'schema_version'")
        assert store.database.schema_version() > 0  # the cut transaction wrote nothing
        assert store.pause.state().paused
    finally:
        store.close()


# --------------------------------------------------------------------------- the HTTP server


def test_the_webhook_and_readyz_answer_503_during_an_outage_and_recover_by_themselves(
    own_postgres: PostgresCluster, outage_url: str, make_server: MakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(database_url=outage_url)
    assert server.webhook(notification(alert("before", Hostname="node-a"))).status_code == 200
    assert server.get("/readyz", token=None).status_code == 200

    with own_postgres.down(), caplog.at_level(logging.ERROR):
        refused = server.webhook(notification(alert("during", Hostname="node-b")))
        unready = server.get("/readyz", token=None)
        reads = [server.get("/history"), server.get("/runs/1"), server.get("/pause"), server.post("/pause")]

    for response in (refused, unready, *reads):
        assert response.status_code == 503, (response.request.path, response.get_json())
        assert response.get_json()["error"] == "store_unavailable"
        assert "cannot be reached" in response.get_json()["message"]
    assert "AlertManager will retry" in refused.get_json()["message"]
    assert "Traceback" not in caplog.text and "s3cret" not in caplog.text

    # AlertManager's retry, after the database is back: stored once, run once.
    again = server.webhook(notification(alert("during", Hostname="node-b")))
    assert again.status_code == 200, again.get_json()
    assert again.get_json()["decisions"] == {"accepted": 1}
    assert server.get("/readyz", token=None).status_code == 200
    assert server.drain() == 2
    assert sorted((e["target"], e["status"]) for e in server.history()["entries"]) == [
        ("node-a", "succeeded"),
        ("node-b", "succeeded"),
    ]
    assert server.counts()["runs"] == 2


# --------------------------------------------------------------------------- the executor


class PullsThePlug(Action):
    """Acts, then the database goes down before the executor can record that it did."""

    name: ClassVar[str] = "test.pulls_the_plug"
    idempotent: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema({})
    cluster: PostgresCluster
    executions: list[int]

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would": "act"}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.executions.append(ctx.run_id)
        if len(self.executions) == 1:
            self.cluster.pause()
        return {"call": len(self.executions)}


class PullsThePlugOnce(PullsThePlug):
    name: ClassVar[str] = "test.pulls_the_plug_once"
    idempotent: ClassVar[bool] = False


class PullsThePlugAndFails(PullsThePlugOnce):
    """Fails after the database went down: its end (a failure) cannot be recorded until the database is back."""

    name: ClassVar[str] = "test.pulls_the_plug_and_fails"

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        super().execute(params, ctx)
        raise ActionError("the target said no")


def _queue(store: Store, registry: ActionRegistry, action: str) -> int:
    spec = {"name": "pb", "match": {"alertname": "GpuXidError"}, "steps": [{"action": action, "with": {}}]}
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(spec, registry)]), registry=registry)
    payload = notification(alert("f1", Hostname="node-a"))
    (decision,) = engine.ingest_body(json.dumps(payload).encode(), received_at=T0).decisions
    assert decision.run_id is not None
    return decision.run_id


@pytest.mark.parametrize(
    ("kind", "status", "step_status", "attempt"),
    [
        # The action ran to its end: that end is recorded once the database is back (it
        # used to be `interrupted`, run again if idempotent, or failed "interrupted by an executor stop").
        (PullsThePlug, "succeeded", "succeeded", "succeeded"),
        (PullsThePlugOnce, "succeeded", "succeeded", "succeeded"),
        # It failed: its attempt's end is the step's, kept and recorded once the database is back too (the
        # last attempt closes with its step; it used to be `interrupted`, its own end's write lost).
        (PullsThePlugAndFails, "failed", "failed", "failed"),
    ],
)
def test_a_run_whose_write_failed_in_an_outage_is_neither_lost_nor_doubled(
    own_postgres: PostgresCluster,
    outage_url: str,
    caplog: pytest.LogCaptureFixture,
    kind: type[PullsThePlug],
    status: str,
    step_status: str,
    attempt: str,
) -> None:
    action = kind()
    action.cluster, action.executions = own_postgres, []
    registry = ActionRegistry([LogAction(), action])
    store = Store.open(outage_url, busy_timeout=2.0)
    executor = Executor(
        store=store, registry=registry, settings=ExecutorSettings(threads=1, poll_interval=0.05, lease=600)
    )
    try:
        run_id = _queue(store, registry, action.name)
        with caplog.at_level(logging.WARNING, logger="remediate.executor"):
            executor.start()
            wait_until(lambda: "the store is unavailable" in caplog.text, 15, message="the executor saw the outage")
            assert not own_postgres.running
            own_postgres.resume()
            wait_until(lambda: _status(store, run_id) in ("succeeded", "failed"), 30, message="the run finished")
        assert _status(store, run_id) == status, (store.history.run_detail(run_id).error, step_details(store, run_id))
        assert len(action.executions) == 1
        (step,) = step_details(store, run_id)
        assert step["status"] == step_status
        assert [a["outcome"] for a in step["attempts"]] == [attempt]
        if status == "failed":
            assert "the target said no" in store.history.run_detail(run_id).error
            assert step["error"] == "the target said no"
        # One line per outage (and one when it is over), not a traceback per poll.
        assert caplog.text.count("the store is unavailable") == 1
        assert "Traceback" not in caplog.text
        assert "the store answers again" in caplog.text
    finally:
        executor.stop(timeout=scaled(5))
        store.close()


def _status(store: Store, run_id: int) -> str:
    return store.history.run_detail(run_id).status


# --------------------------------------------------------------------------- the database refuses writes

DISK_FULL_TABLES = ("runs", "steps", "attempts", "decisions", "alerts")
"""Every table a webhook or a run's progress writes: while the fault is on, none takes a row."""


def _inject_disk_full(url: str) -> None:
    """Every write to the store's tables fails as a full disk does (SQLSTATE 53100), until `_clear_disk_full`."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END $$"
        )
        for table in DISK_FULL_TABLES:
            conn.execute(
                f"CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION disk_full()"
            )


def _clear_disk_full(url: str, tries: int = 10) -> None:
    # The DROP locks the tables one after another while the executor's retries write to them: PostgreSQL may
    # choose it as a deadlock's victim (seen once under load). The fault is cleared once one DROP goes through.
    for attempt in range(1, tries + 1):
        try:
            with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True) as conn:
                conn.execute("DROP FUNCTION disk_full() CASCADE")
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == tries:
                raise


class FillsTheDisk(Action):
    """Sends its change (a POST, say), then the database's disk fills before the executor records it."""

    name: ClassVar[str] = "test.fills_the_disk"
    idempotent: ClassVar[bool] = False
    schema: ClassVar[ParamSchema] = ParamSchema({})
    url: str
    executions: list[int]

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would": "send"}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.executions.append(ctx.run_id)
        if len(self.executions) == 1:
            _inject_disk_full(self.url)
        return {"sent": ctx.run_id}


def test_runs_whose_writes_a_full_disk_refused_finish_once_the_fault_clears(
    outage_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Live: 3 runs still `running` 45 s after an injected disk-full (53100) cleared, claimed by the live
    executor, with a traceback per poll. Every store error class now hands the runs back; the step that ran is
    recorded as it ended once the database takes writes again, and is never sent twice."""
    action = FillsTheDisk()
    action.url, action.executions = outage_url, []
    registry = ActionRegistry([LogAction(), action])
    store = Store.open(outage_url, busy_timeout=2.0)
    runs = [_queue_for(store, registry, action.name, f"node-{i}") for i in range(3)]
    executor = Executor(
        store=store, registry=registry, settings=ExecutorSettings(threads=1, poll_interval=0.05, lease=600)
    )
    try:
        with caplog.at_level(logging.WARNING, logger="remediate.executor"):
            executor.start()
            wait_until(lambda: "the store is unavailable" in caplog.text, 15, message="the executor saw the fault")
            assert "refused the transaction: could not extend file: No space left on device" in caplog.text
            with pytest.raises(StoreRefused, match="No space left on device"):  # a webhook would answer 503
                _queue_for(store, registry, action.name, "node-late")
            assert [_status(store, r) for r in runs] == ["running", "queued", "queued"]
            _clear_disk_full(outage_url)
            wait_until(lambda: all(_status(store, r) in ("succeeded", "failed") for r in runs), 30,
                       message="the runs finished")  # fmt: skip
        assert [_status(store, r) for r in runs] == ["succeeded"] * 3, [store.history.run_detail(r).error for r in runs]
        assert sorted(action.executions) == sorted(runs)  # each sent once
        first = step_details(store, runs[0])[0]
        assert (first["status"], first["result"]) == ("succeeded", {"sent": runs[0]})
        assert [a["outcome"] for a in first["attempts"]] == ["succeeded"]
        assert "Traceback" not in caplog.text and "executor loop error" not in caplog.text
        assert "the store answers again" in caplog.text
    finally:
        executor.stop(timeout=scaled(5))
        store.close()


def _queue_for(store: Store, registry: ActionRegistry, action: str, node: str) -> int:
    spec = {"name": "pb", "match": {"alertname": "GpuXidError"}, "steps": [{"action": action, "with": {}}]}
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(spec, registry)]), registry=registry)
    payload = notification(alert(f"f-{node}", Hostname=node))
    (decision,) = engine.ingest_body(json.dumps(payload).encode(), received_at=T0).decisions
    assert decision.run_id is not None, decision.reason
    return decision.run_id


# --------------------------------------------------------------------------- start-up


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+psycopg://remediate:s3cret@127.0.0.1:{port}/nosuchdb", 'database "nosuchdb" does not exist'),
        ("postgresql+psycopg://remediate:s3cret@127.0.0.1:{closed}/remediate", "Connection refused"),
        ("postgresql+nosuchdriver://remediate:s3cret@127.0.0.1:{port}/x", "cannot use database URL"),
        # libpq takes the password (and the client key's passphrase) as query parameters too
        ("postgresql+psycopg://remediate@127.0.0.1:{port}/nosuchdb?password=s3cret", "?password=***"),
        ("postgresql+psycopg://remediate@127.0.0.1:{closed}/remediate?sslpassword=s3cret", "sslpassword=***"),
        ("postgresql+nosuchdriver://remediate@127.0.0.1:{port}/x?Password=s3cret&a=b", "Password=***&a=b"),
        ("postgresql+psycopg://remediate:s3cret@127.0.0.1:notaport/remediate?password=s3cret", "remediate:***@"),
    ],
)
def test_serve_with_a_database_it_cannot_use_prints_one_line_and_exits(
    own_postgres: PostgresCluster, url: str, says: str, tmp_path: Path
) -> None:
    (tmp_path / "playbooks").mkdir()
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    database_url = url.format(port=own_postgres.port, closed=closed)
    result = subprocess.run(
        [str(REMEDIATE), "serve", "--playbooks", "playbooks", "--database-url", database_url],
        cwd=tmp_path,
        env={**os.environ, "REMEDIATE_TOKEN": "a-token-of-twenty-chars-or-more"},
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # one line, never a traceback
    assert says in result.stderr
    assert "s3cret" not in result.stderr + result.stdout


def test_the_start_up_block_hides_a_password_given_as_a_query_parameter(outage_url: str, tmp_path: Path) -> None:
    url = outage_url.replace("remediate:s3cret@", "remediate@") + "?password=s3cret-in-query&sslmode=disable"
    (tmp_path / "playbooks").mkdir()
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, database_url=url).start()
    server.stop()
    # What the server wrote: not the test's own header line, which names the command it ran
    log = "\n".join(line for line in server.log_path.read_text().splitlines() if not line.startswith("--- start"))

    assert "s3cret" not in log, log
    [store_line] = [line for line in log.splitlines() if "INFO remediate.serve: store: " in line]
    assert "@127.0.0.1:" in store_line and "?password=***&sslmode=disable;" in store_line, store_line


def test_each_server_process_opens_at_most_the_pool_the_settings_allow(
    outage_url: str, make_server: MakeServer
) -> None:
    server = make_server(database_url=outage_url, database_pool_size=2, database_max_overflow=1)
    pool = server.store.database.engine.pool

    assert (pool.size(), pool._max_overflow) == (2, 1)  # SQLAlchemy's QueuePool keeps no public getter
