"""The store: audit history and durable run queue, on SQLAlchemy Core (SQLite by default).

Who calls it: the engine (ingest, inside one write transaction per notification), the executor (claim
runs, record steps and attempts, recover after a crash), the HTTP server and the CLI (history, run
details, approve, pause), the agent (its action memory). One concept per module, each an object that
`Store` (facade.py) holds and callers use directly (`store.queue`, `store.leases`, `store.ingest`,
`store.history`, ...); the map of the modules is docs/architecture.md's tree, which a test keeps true.
schema.py is its tables; copy.py and source_guard.py read another database (`db copy`, replay) as data.

May import: remediate.errors, runs, config and sqlitefile; never a stage above it (judging, executor, actions),
HTTP or the breaker's logic (pyproject.toml's `store` contract).
"""

from __future__ import annotations

from remediate.store.checkpoints import WalCheckpointer
from remediate.store.database import Database, dialect_for
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT, Dialect, PoolLimits
from remediate.store.facade import Store
from remediate.store.gate_history import GateRun, GateStep
from remediate.store.history import (
    AlertDetail,
    AttemptDetail,
    DecisionSummary,
    HistoryEntry,
    HistoryQuery,
    RunDetail,
    RunSummary,
    StepDetail,
    decode_cursor,
    encode_cursor,
)
from remediate.store.ingest import EmptyGuardReader, IngestWriter
from remediate.store.interface import GuardReads
from remediate.store.leases import EXECUTOR_STOPPED
from remediate.store.pause import PauseState
from remediate.store.postgres import PostgresDialect
from remediate.store.queue import worker_identity
from remediate.store.repeat_offenders import RepeatRule
from remediate.store.report import Report, ReportQuery
from remediate.store.retention import Pruner
from remediate.store.sqlite import SqliteDialect
from remediate.store.ui_sessions import LoginThrottle

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "EXECUTOR_STOPPED",
    "AlertDetail",
    "AttemptDetail",
    "Database",
    "DecisionSummary",
    "Dialect",
    "EmptyGuardReader",
    "GateRun",
    "GateStep",
    "GuardReads",
    "HistoryEntry",
    "HistoryQuery",
    "IngestWriter",
    "LoginThrottle",
    "PauseState",
    "PoolLimits",
    "PostgresDialect",
    "Pruner",
    "RepeatRule",
    "Report",
    "ReportQuery",
    "RunDetail",
    "RunSummary",
    "SqliteDialect",
    "StepDetail",
    "Store",
    "WalCheckpointer",
    "decode_cursor",
    "dialect_for",
    "encode_cursor",
    "worker_identity",
]
