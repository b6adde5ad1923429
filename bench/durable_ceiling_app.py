"""The durable ceiling: a Flask handler that parses the webhook JSON, stores one row per alert (its JSON) in ONE
transaction, and answers 200. The unavoidable work of a receiver that must not lose an alert once it said 200.

Run under gunicorn with the same settings as `remediate serve` (sync workers), with the database in
$BENCH_CEILING_DATABASE_URL (bench/_common.py `durable_ceiling_server` creates the table first):

- `sqlite:///PATH`: the sqlite3 module with remediate's pragmas (remediate/store/sqlite.py: journal_mode=WAL,
  synchronous=NORMAL, foreign_keys=ON, busy_timeout), then `BEGIN IMMEDIATE` (writers queue on SQLite's own
  lock, as remediate's do), one `executemany`, `COMMIT`;
- `postgresql://...` (or `postgresql+psycopg://`): psycopg 3, the driver remediate uses, one connection per
  worker process, one transaction, one `executemany` (psycopg pipelines it).

No auth, no validation, no matching, no SQLAlchemy: whatever remediate does on top of this is its own cost.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any

from flask import Flask, jsonify, request

TABLE = "ceiling_alerts"
BUSY_TIMEOUT_S = 30.0
DATABASE_URL = os.environ.get("BENCH_CEILING_DATABASE_URL", "")

app = Flask("durable-ceiling")
_local = threading.local()  # one connection per thread of each worker process, opened after the fork


class _Sqlite:
    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "foreign_keys=ON",
            f"busy_timeout={int(BUSY_TIMEOUT_S * 1000)}",
        ):
            self.conn.execute(f"PRAGMA {pragma}")

    def store(self, rows: list[tuple[str]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(f"INSERT INTO {TABLE} (body) VALUES (?)", rows)  # noqa: S608 - fixed name
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")


class _Postgres:
    def __init__(self, url: str) -> None:
        import psycopg  # only the PostgreSQL ceiling needs it (the `postgres` extra)

        self.conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1))

    def store(self, rows: list[tuple[str]]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {TABLE} (body) VALUES (%s)", rows)  # noqa: S608 - fixed name


def _database() -> _Sqlite | _Postgres:
    db = getattr(_local, "db", None)
    if db is None:
        if DATABASE_URL.startswith("sqlite:///"):
            db = _Sqlite(DATABASE_URL.removeprefix("sqlite:///"))
        elif DATABASE_URL.startswith("postgresql"):
            db = _Postgres(DATABASE_URL)
        else:
            raise RuntimeError(
                f"BENCH_CEILING_DATABASE_URL must be sqlite:///PATH or postgresql://...: {DATABASE_URL!r}"
            )
        _local.db = db
    return db


@app.post("/webhook")
def webhook() -> Any:
    data = json.loads(request.get_data(cache=False))
    alerts = data.get("alerts", [])
    _database().store([(json.dumps(alert),) for alert in alerts])
    return jsonify({"alerts": len(alerts)})


@app.get("/healthz")
def healthz() -> Any:
    return jsonify({"status": "ok"})
