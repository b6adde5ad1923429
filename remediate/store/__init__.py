"""The store: audit history and durable run queue, on SQLAlchemy Core (SQLite by default).

Who calls it: the engine (ingest, inside one write transaction per notification), the executor (claim
runs, record steps and attempts, recover after a crash), the HTTP server and the CLI (history, run
details, approve, pause), the agent (its action memory). One concept per module:

  facade.py       Store: the object everyone holds: the database's doors, and one object per concept below
                  (store.queue, store.leases, store.ingest, store.history, ...), which callers use directly
  database.py     Database: engine, write()/read() transactions, schema upgrades, health checks
  dialect.py      Dialect: what differs between databases (a server database's behaviour by default)
  sqlite.py       SQLite: engine and pragmas, BEGIN IMMEDIATE and its busy timeout, file modes and identity
  postgres.py     PostgreSQL: bounded pool, connect timeout, advisory locks (schema; guard keys across replicas)
  ingest.py       GuardReader / IngestWriter: the engine's reads and typed inserts in one transaction
  queue.py        RunQueue: the head and its claim, a run's progress under its lease, approval, queue depth
  leases.py       Leases: heartbeats, the lease check, recovery (requeue runs whose executor died or handed back)
  writes.py       a RunWrite's statements and the lease check, in the caller's transaction
  announcements.py Announcements: take a run awaiting approval to announce in chat (once), its outcome
  pause.py        the pause flag
  history.py      HistoryQuery, cursors, typed history rows (the JSON shapes are remediate.history_api's)
  breaker_rows.py the circuit breaker's rows
  report.py       ReportQuery / Report: the reliability figures of a window (remediate report, /report, /metrics)
  retention.py    prune: old history deleted in bounded batches (PruneReport); Pruner, the server's periodic prune
  memory.py       StoreMemory (action memory; the agent's state file is remediate.agent_state)
  ui_sessions.py  the web pages' sessions ended by logout and the login throttle's counts (LoginThrottle)
  rows.py         what they share: JSON text columns, MAX_ID, the alert a step sees
  interface.py    GuardReads: the guards' facts, read from the database (GuardReader) or from none (EmptyGuardReader)
"""

from __future__ import annotations

from remediate.agent_state import MemoryStore  # the agent's state file, without SQLAlchemy: kept importable here
from remediate.store.announcements import Announcements, AwaitingRun
from remediate.store.breaker_rows import BreakerLedger, BreakerRows
from remediate.store.checkpoints import WalCheckpointer
from remediate.store.database import Database, dialect_for
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT, Dialect, PoolLimits
from remediate.store.facade import Store
from remediate.store.history import (
    AlertDetail,
    AttemptDetail,
    DecisionSummary,
    History,
    HistoryEntry,
    HistoryQuery,
    RunDetail,
    RunSummary,
    StepDetail,
    decode_cursor,
    encode_cursor,
)
from remediate.store.ingest import EmptyGuardReader, GuardReader, Ingest, IngestWriter
from remediate.store.interface import GuardReads
from remediate.store.ladders import Ladders
from remediate.store.leases import EXECUTOR_STOPPED, Leases
from remediate.store.memory import StoreMemory
from remediate.store.pause import Pause, PauseState
from remediate.store.postgres import PostgresDialect
from remediate.store.queue import RunQueue, worker_identity
from remediate.store.report import Report, ReportQuery
from remediate.store.retention import Pruner, PruneReport, Retention
from remediate.store.rows import MAX_ID, dumps
from remediate.store.sqlite import SqliteDialect
from remediate.store.ui_sessions import LoginThrottle, UiSessions

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "EXECUTOR_STOPPED",
    "MAX_ID",
    "AlertDetail",
    "Announcements",
    "AttemptDetail",
    "AwaitingRun",
    "BreakerLedger",
    "BreakerRows",
    "Database",
    "DecisionSummary",
    "Dialect",
    "EmptyGuardReader",
    "GuardReader",
    "GuardReads",
    "History",
    "HistoryEntry",
    "HistoryQuery",
    "Ingest",
    "IngestWriter",
    "Ladders",
    "Leases",
    "LoginThrottle",
    "MemoryStore",
    "Pause",
    "PauseState",
    "PoolLimits",
    "PostgresDialect",
    "PruneReport",
    "Pruner",
    "Report",
    "ReportQuery",
    "Retention",
    "RunDetail",
    "RunQueue",
    "RunSummary",
    "SqliteDialect",
    "StepDetail",
    "Store",
    "StoreMemory",
    "UiSessions",
    "WalCheckpointer",
    "decode_cursor",
    "dialect_for",
    "dumps",
    "encode_cursor",
    "worker_identity",
]
