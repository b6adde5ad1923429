"""The store's tables (SQLAlchemy Core) and the versioned upgrade path, used by `remediate/store/`.

Times are UNIX seconds as floats (portable, indexable, cheap to compare). JSON
documents are text. Every table is append-mostly: nothing is ever deleted.

Upgrading: `SCHEMA_VERSION` is the version this code writes. `MIGRATIONS[n]`
takes a database from version n-1 to n; a fresh database is created at the
latest version directly. Both paths must give the same schema (tested).
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

SCHEMA_VERSION = 15

metadata = sa.MetaData()

meta = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

notifications = sa.Table(
    "notifications",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("received_at", sa.Float, nullable=False),
    sa.Column("receiver", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("group_key", sa.Text, nullable=False),
    sa.Column("alert_count", sa.Integer, nullable=False),
    sa.Column("raw", sa.Text, nullable=False),
    # Version 14, AlertManager's own words on the delivery (also in `raw`, which the history does not parse):
    # why it sent it (0.32+: "repeat interval elapsed", ...; NULL: not said), and how many alerts of the group
    # its receiver's max_alerts left out (they were never seen here).
    sa.Column("notification_reason", sa.String(64), nullable=True),
    sa.Column("truncated_alerts", sa.Integer, nullable=False, server_default=sa.text("0")),
)

alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("notification_id", sa.Integer, sa.ForeignKey("notifications.id"), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("alertname", sa.String(255), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("starts_at", sa.String(40), nullable=False),
    sa.Column("ends_at", sa.String(40), nullable=True),
    sa.Column("labels", sa.Text, nullable=False),
    sa.Column("annotations", sa.Text, nullable=False),
    sa.Column("generator_url", sa.Text, nullable=False),
    sa.Index("ix_alerts_notification", "notification_id"),
    sa.Index("ix_alerts_fingerprint", "fingerprint", "starts_at"),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dedupe_key", sa.String(64), nullable=False, unique=True),
    sa.Column("playbook", sa.String(128), nullable=False),
    sa.Column("alertname", sa.String(255), nullable=False),
    sa.Column("target", sa.String(255), nullable=False),
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("alert_id", sa.Integer, sa.ForeignKey("alerts.id"), nullable=False),
    # A resolved run waits until the firing run of the same alert occurrence has finished.
    sa.Column("after_run_id", sa.Integer, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("claimed_by", sa.String(255), nullable=True),
    sa.Column("heartbeat_at", sa.Float, nullable=True),
    sa.Column("approved_by", sa.String(255), nullable=True),
    sa.Column("approved_at", sa.Float, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    # What cooldown and max_attempts count per: the target, or the target plus the playbook's
    # `guard_by` labels (e.g. one GPU of a node). Nullable only because version 3 lacked it.
    sa.Column("guard_key", sa.String(255), nullable=True),
    # Incremented by every claim: a write of the run's progress names the generation it claimed, so an
    # executor that lost its claim (stalled, then recovered by another) cannot write over the new owner.
    sa.Column("claim_generation", sa.Integer, nullable=False, server_default="0"),
    # The run failed for a transient reason before any step executed: the next delivery of the same
    # occurrence may run it again (a new run that supersedes this one, recorded in `superseded_by`).
    sa.Column("rerunnable", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("superseded_by", sa.Integer, nullable=True),
    # The escalation ladder's rung (1 = the gentlest) this run ran; NULL for a playbook without `escalate`.
    sa.Column("rung", sa.Integer, nullable=True),
    # The chat message saying that a run awaits approval (remediate.executor.announce): when the announcer took the
    # run (NULL: not announced, or nothing to announce), and what went wrong (NULL once sent).
    sa.Column("announced_at", sa.Float, nullable=True),
    sa.Column("announce_error", sa.Text, nullable=True),
    # The queue's order: lower first, then by id (remediate.judging.engine.queue_priority: a small notification's
    # runs before a storm's backlog). Set at ingest, never changed.
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    # Version 15, what a staged rollout's promotion counts (remediate.store.wave_evidence): the content hash of
    # the playbook as loaded when the run was judged (Playbook.version), and the one wave its node was in
    # (NULL: no rollout, no wave, or a node in two waves). NULL on runs stored before.
    sa.Column("playbook_version", sa.String(64), nullable=True),
    sa.Column("wave", sa.String(64), nullable=True),
    sa.Index("ix_runs_status", "status", "id"),
    sa.Index("ix_runs_queue", "status", "priority", "id"),
    sa.Index("ix_runs_guard_key", "playbook", "guard_key", "phase", "created_at"),
    sa.Index("ix_runs_alert", "alert_id"),
    # Repeat offenders: a playbook's runs on one target (node or GPU) in a window (store.repeat_offenders).
    sa.Index("ix_runs_target", "playbook", "target", "phase", "created_at"),
    # A wave's runs of one playbook version in a window: one range scan per promotion judgement (version 15).
    sa.Index("ix_runs_wave", "playbook", "playbook_version", "wave", "phase", "created_at"),
    # ... and each of those runs' undo (the resolved run after it): did its verify pass (version 15)?
    sa.Index("ix_runs_after_run", "after_run_id"),
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("idx", sa.Integer, nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("action", sa.String(128), nullable=False),
    sa.Column("where", sa.String(16), nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("timeout", sa.Float, nullable=False),
    sa.Column("retries", sa.Integer, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("plan", sa.Text, nullable=True),
    sa.Column("result", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    # The step runs even when an earlier step failed (e.g. a notification); the run stays failed.
    sa.Column("always", sa.Boolean, nullable=False, server_default=sa.false()),
    # The step's failure is recorded but neither fails the run nor skips the steps after it (best effort).
    sa.Column("continue_on_error", sa.Boolean, nullable=False, server_default=sa.false()),
    # The node a `run_on` step runs on, resolved from the alert when the run was created; NULL: the run's
    # target (every other step, and every step stored before version 12).
    sa.Column("node", sa.String(255), nullable=True),
    sa.UniqueConstraint("run_id", "idx", name="uq_steps_run_idx"),
    # Reconciliation looks for recently failed steps whose outcome may still come (Store.queue.pending_outcomes).
    sa.Index("ix_steps_status_finished", "status", "finished_at"),
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("step_id", sa.Integer, sa.ForeignKey("steps.id"), nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("outcome", sa.String(32), nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    # Who ran it: the executor's `<replica>:<pid>` (a run taken over after a replica died shows both).
    # Nullable: attempts recorded before version 6 do not know.
    sa.Column("worker", sa.String(255), nullable=True),
    sa.Index("ix_attempts_step", "step_id", "number"),
)

# One row per (alert, playbook) decision, or per alert when nothing matched: the audit history.
# `status` is the run's status while a run exists, else the decision itself, so that one
# indexed column answers "show me what failed / what was refused".
decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("notification_id", sa.Integer, sa.ForeignKey("notifications.id"), nullable=False),
    sa.Column("alert_id", sa.Integer, sa.ForeignKey("alerts.id"), nullable=False),
    sa.Column("alertname", sa.String(255), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("alert_status", sa.String(16), nullable=False),
    sa.Column("playbook", sa.String(128), nullable=True),
    sa.Column("target", sa.String(255), nullable=True),
    sa.Column("decision", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=True),
    sa.Index("ix_decisions_playbook", "playbook", "id"),
    sa.Index("ix_decisions_alertname", "alertname", "id"),
    sa.Index("ix_decisions_target", "target", "id"),
    # A target's failed (refused, ...) decisions: SQLite, without statistics, walked every failed decision
    # of every target through ix_decisions_status instead (~40 ms on 1M runs; version 9).
    sa.Index("ix_decisions_target_status", "target", "status", "id"),
    # With the playbook and alertname (version 9): `status` + `playbook` (or `alertname`) walks this index
    # alone, without reading each failed decision's row for its playbook (a rare playbook: thousands).
    # No more writes than before: a run's status change rewrites this index's entry either way.
    sa.Index("ix_decisions_status", "status", "id", "playbook", "alertname"),
    # Two filters of the history at once, neither of them the status (version 13): each pair's page is one
    # seek. With one (column, id) index per filter, SQLite (no statistics) walked one filter's index and
    # read every row for the other: a busy playbook's decisions for a quiet node's (120-280k VM steps,
    # 30-800 ms on 1M runs; bench/history.py). A status with another filter walks ix_decisions_status or
    # ix_decisions_target_status above, reading the index alone.
    sa.Index("ix_decisions_target_playbook", "target", "playbook", "id"),
    sa.Index("ix_decisions_target_alertname", "target", "alertname", "id"),
    sa.Index("ix_decisions_playbook_alertname", "playbook", "alertname", "id"),
    sa.Index("ix_decisions_created", "created_at"),
    sa.Index("ix_decisions_run", "run_id"),
    # Pruning deletes alerts and notifications: their references are found by index, not by a table scan.
    sa.Index("ix_decisions_notification", "notification_id"),
    sa.Index("ix_decisions_alert", "alert_id"),
)

# What actions remember between runs (e.g. the power limit a GPU had before remediate lowered it).
action_memory = sa.Table(
    "action_memory",
    metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("run_id", sa.Integer, nullable=True),
    sa.Column("updated_at", sa.Float, nullable=False),
)


# The circuit breaker's claims: one row per (node, run) that cordoned, tainted or drained a node; a node
# counts as held while it has an unreleased claim. The breaker's own state is the meta row `breaker`.
breaker_claims = sa.Table(
    "breaker_claims",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("run_id", sa.Integer, nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
    sa.Column("released_at", sa.Float, nullable=True),
    sa.Column("released_reason", sa.Text, nullable=True),
    sa.Index("ix_breaker_claims_open", "released_at", "node"),
    sa.Index("ix_breaker_claims_time", "claimed_at"),
    # A run's claims: was what it did undone by hand (version 15, remediate.store.wave_evidence)?
    sa.Index("ix_breaker_claims_run", "run_id"),
)


# Where each escalation ladder stands: one row per (playbook, guard key), rewritten in the same write
# transaction as the run of the rung it records, so that a restart or another replica climbs from there.
ladders = sa.Table(
    "ladders",
    metadata,
    sa.Column("playbook", sa.String(128), primary_key=True),
    sa.Column("guard_key", sa.String(255), primary_key=True),
    sa.Column("target", sa.String(255), nullable=False),
    # The rung (1-based) that ran last, its run, and the alert occurrence it ran for.
    sa.Column("rung", sa.Integer, nullable=False),
    sa.Column("run_id", sa.Integer, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("starts_at", sa.String(40), nullable=False),
    sa.Column("climbed_at", sa.Float, nullable=False),
    # When that occurrence was reported resolved (the rung's `holds_for` counts from here), else NULL.
    sa.Column("resolved_at", sa.Float, nullable=True),
    sa.Column("reason", sa.Text, nullable=False),
    # JSON list of the rungs run since the ladder last reset: [{"rung", "run", "at", "reason"}, ...].
    sa.Column("climb", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Index("ix_ladders_target", "target"),
)


# The web pages' sessions ended by their logout (remediate.store.ui_sessions): a signed cookie stays valid
# until it expires, so every worker and replica must be able to tell that its session was ended. A row
# is kept until the session would have expired by itself (`expires_at`), then deleted.
ui_sessions_ended = sa.Table(
    "ui_sessions_ended",
    metadata,
    sa.Column("sid", sa.String(64), primary_key=True),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Index("ix_ui_sessions_ended_expires", "expires_at"),
)

# Failed logins of the web pages per client address within the current window (the login throttle):
# one row per address that failed lately, deleted once its window is over.
ui_login_failures = sa.Table(
    "ui_login_failures",
    metadata,
    sa.Column("client", sa.String(64), primary_key=True),
    sa.Column("since", sa.Float, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Index("ix_ui_login_failures_since", "since"),
)


def _v9_monotonic_decision_time(conn: sa.Connection) -> None:
    """SQLite: make `decisions.created_at` never decrease with the id, as every ingest now stamps it
    (store.decision_time): a row earlier than a row before it takes that row's time (the running max by
    id). Rows were out of order by at most the receive-time skew between workers (milliseconds), so no
    time moves by more. PostgreSQL keeps its times: its history does not rely on the order."""
    if conn.dialect.name != "sqlite":
        return
    newest: float | None = None
    moved: list[dict[str, float | int]] = []
    rows = conn.execute(sa.text("SELECT id, created_at FROM decisions ORDER BY id")).yield_per(10_000)
    for row_id, at in rows:
        if newest is not None and at < newest:
            moved.append({"p_id": row_id, "p_at": newest})
        else:
            newest = at
    if moved:
        conn.execute(sa.text("UPDATE decisions SET created_at = :p_at WHERE id = :p_id"), moved)


Step = str | sa.Table | Callable[[sa.Connection], None]
"""One change of a migration: an SQL statement, a table to create, or a function of the connection."""


def _steps(*steps: Step) -> Callable[[sa.Connection], None]:
    def upgrade(conn: sa.Connection) -> None:
        for step in steps:
            if isinstance(step, str):
                conn.execute(sa.text(step))
            elif isinstance(step, sa.Table):
                step.create(conn)
            else:
                step(conn)

    return upgrade


# version -> function(connection) upgrading from version-1. Version 1 is the first schema.
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {
    2: _steps(action_memory),
    3: _steps(breaker_claims),
    4: _steps(
        "ALTER TABLE runs ADD COLUMN guard_key VARCHAR(255)",
        "UPDATE runs SET guard_key = target",
        "DROP INDEX ix_runs_guard",
        "CREATE INDEX ix_runs_guard_key ON runs (playbook, guard_key, phase, created_at)",
    ),
    5: _steps(
        "ALTER TABLE runs ADD COLUMN claim_generation INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN rerunnable BOOLEAN NOT NULL DEFAULT false",
        "ALTER TABLE runs ADD COLUMN superseded_by INTEGER",
        "ALTER TABLE steps ADD COLUMN always BOOLEAN NOT NULL DEFAULT false",
        "CREATE INDEX ix_steps_status_finished ON steps (status, finished_at)",
    ),
    6: _steps("ALTER TABLE attempts ADD COLUMN worker VARCHAR(255)"),
    7: _steps(
        "CREATE INDEX ix_decisions_notification ON decisions (notification_id)",
        "CREATE INDEX ix_decisions_alert ON decisions (alert_id)",
        "CREATE INDEX ix_runs_alert ON runs (alert_id)",
    ),
    8: _steps(
        "ALTER TABLE runs ADD COLUMN rung INTEGER",
        "ALTER TABLE steps ADD COLUMN continue_on_error BOOLEAN NOT NULL DEFAULT false",
        ladders,
    ),
    # Version 9: announcing runs that await approval, the queue's priorities, monotonic decision times.
    9: _steps(
        # Runs awaiting approval before the upgrade are announced once after it: the on-call hears of them.
        "ALTER TABLE runs ADD COLUMN announced_at FLOAT",
        "ALTER TABLE runs ADD COLUMN announce_error TEXT",
        # Runs queued before the upgrade get priority 0: they are claimed first, as they would have been.
        "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX ix_runs_queue ON runs (status, priority, id)",
        _v9_monotonic_decision_time,
        "CREATE INDEX ix_decisions_target_status ON decisions (target, status, id)",
        "DROP INDEX ix_decisions_status",
        "CREATE INDEX ix_decisions_status ON decisions (status, id, playbook, alertname)",
    ),
    # Version 10: the web pages' ended sessions and failed logins.
    10: _steps(ui_sessions_ended, ui_login_failures),
    # Version 11: a playbook's runs per target, one index seek.
    11: _steps("CREATE INDEX ix_runs_target ON runs (playbook, target, phase, created_at)"),
    # Version 12: the node a step ran on.
    12: _steps("ALTER TABLE steps ADD COLUMN node VARCHAR(255)"),
    # Version 13: the history's pairs of filters, each one index seek.
    13: _steps(
        "CREATE INDEX ix_decisions_target_playbook ON decisions (target, playbook, id)",
        "CREATE INDEX ix_decisions_target_alertname ON decisions (target, alertname, id)",
        "CREATE INDEX ix_decisions_playbook_alertname ON decisions (playbook, alertname, id)",
    ),
    # Version 14: AlertManager's notification_reason and truncatedAlerts of each notification.
    14: _steps(
        "ALTER TABLE notifications ADD COLUMN notification_reason VARCHAR(64)",
        "ALTER TABLE notifications ADD COLUMN truncated_alerts INTEGER NOT NULL DEFAULT 0",
    ),
    # Version 15: the playbook version and rollout wave of each run (a wave's promotion on evidence).
    15: _steps(
        "ALTER TABLE runs ADD COLUMN playbook_version VARCHAR(64)",
        "ALTER TABLE runs ADD COLUMN wave VARCHAR(64)",
        "CREATE INDEX ix_runs_wave ON runs (playbook, playbook_version, wave, phase, created_at)",
        "CREATE INDEX ix_runs_after_run ON runs (after_run_id)",
        # IF NOT EXISTS: a database older than version 3 got the table, with this index, from its migration 3.
        "CREATE INDEX IF NOT EXISTS ix_breaker_claims_run ON breaker_claims (run_id)",
    ),
}
