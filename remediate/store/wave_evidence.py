"""A staged rollout's evidence: one wave's firing runs of one playbook version in a window, and how each ended.

The engine's judging reads it (GuardReader.wave_evidence, inside the ingest transaction) when it judges a
run of a wave that may be promoted (remediate.config.promotion): one query, newest first, a range scan of
ix_runs_wave (playbook, playbook_version, wave, phase, created_at), each run's undo found by
ix_runs_after_run and its breaker claims by ix_breaker_claims_run. Not cached: every judgement sees the runs
that ended just before it.

A run counts when it ran enforced (a dry-run or waiting run proves nothing) and ended:
- verified: it succeeded and, where its playbook undoes (`on_resolved`), its undo succeeded too (a
  `check.prometheus` verify in the undo passed, the node went back);
- failed: it failed, its undo failed, or a person undid it by hand (the breaker released its claim because
  remediate's marks were gone from the node, remediate.runs.UNDONE_BY_HAND);
- neither yet: it succeeded and its undo has not ended (the alert is still firing).
"""

from __future__ import annotations

import sqlalchemy as sa

from remediate.config.promotion import MAX_AFTER, WaveEvidence
from remediate.runs import UNDONE_BY_HAND, RunStatus
from remediate.store import schema as t

_FIRING = t.runs.alias("firing")
_UNDO = t.runs.alias("undo")
_UNDO_STATUS = (
    sa.select(_UNDO.c.status)
    .where(_UNDO.c.after_run_id == _FIRING.c.id, _UNDO.c.phase == "resolved")
    .order_by(_UNDO.c.id.desc())
    .limit(1)
    .scalar_subquery()
)
_BY_HAND = (
    sa.select(sa.func.min(t.breaker_claims.c.released_at))
    .where(t.breaker_claims.c.run_id == _FIRING.c.id, t.breaker_claims.c.released_reason == UNDONE_BY_HAND)
    .scalar_subquery()
)
_RUNS = (
    sa.select(_FIRING.c.id, _FIRING.c.status, _FIRING.c.created_at, _FIRING.c.finished_at, _UNDO_STATUS, _BY_HAND)
    .where(
        _FIRING.c.playbook == sa.bindparam("p_playbook"),
        _FIRING.c.playbook_version == sa.bindparam("p_version"),
        _FIRING.c.wave == sa.bindparam("p_wave"),
        _FIRING.c.phase == "firing",
        _FIRING.c.created_at >= sa.bindparam("p_since"),
        _FIRING.c.mode == "enforce",
        _FIRING.c.status.in_((RunStatus.SUCCEEDED.value, RunStatus.FAILED.value)),
    )
    .order_by(_FIRING.c.created_at.desc(), _FIRING.c.id.desc())
    .limit(sa.bindparam("p_limit", type_=sa.Integer))
)
READ_LIMIT = 4 * MAX_AFTER
"""Runs read at most (4 x `after` + 100, up to this): `after` verified ones, and those between them whose undo
has not ended. More of those than that counts fewer verified runs: the wave stays as written (cautious)."""


def wave_evidence(
    conn: sa.Connection, playbook: str, version: str, wave: str, *, since: float, after: int, undoes: bool
) -> WaveEvidence:
    """The runs of `wave` since `since`, newest first, verified since its last failure (at most `after`).
    `undoes`: the playbook has an undo, which must succeed for a run to be verified."""
    limit = min(READ_LIMIT, 4 * after + 100)
    params = {"p_playbook": playbook, "p_version": version, "p_wave": wave, "p_since": since, "p_limit": limit}
    verified, first_at = 0, None
    # Iterated, not fetched whole: the newest runs usually decide, and the rest of the window is never read.
    with conn.execute(_RUNS, params) as result:
        for run_id, status, created_at, finished_at, undo_status, by_hand in result:
            how = _failure(status, undo_status, by_hand)
            if how:
                return WaveEvidence(verified, first_at, run_id, by_hand or finished_at or created_at, how)
            if status == RunStatus.SUCCEEDED and (not undoes or undo_status == RunStatus.SUCCEEDED):
                verified, first_at = verified + 1, created_at
                if verified >= after:
                    break
    return WaveEvidence(verified, first_at)


def _failure(status: str, undo_status: str | None, by_hand: float | None) -> str:
    if status == RunStatus.FAILED:
        return "failed"
    if by_hand is not None:
        return "was undone by hand"
    if undo_status == RunStatus.FAILED:
        return "failed its verify (undo)"
    return ""
