"""Judging one notification's alerts: small named stages over one (alert, playbook) pair.

`judge` is the engine's judging step (evaluate -> judge -> record, remediate.judging.engine.Engine.ingest).
It reads the store's facts for the whole notification once (`NotificationFacts.gather`), then walks
every evaluated pair, firing alerts first, through its stages in order:

1. `rung`: a ladder's firing alert is put on the rung `judging.ladder.choose_rung` picks, at least the one its
   name starts at (`judging.ladder.start_at_choice`), or a repeat offender's
   (`judging.ladder.repeat_offender_choice`) (its steps, mode, key); `promote`: a wave a rollout may
   promote takes its mode from the store's evidence (`judging.promotions`);
2. `dedupe`: the run already recorded for this occurrence, or the failed one it runs again instead of;
3. `undo`: a resolved alert's firing run(s), and for a ladder the on_resolved of every rung that acted;
4. the guards (`judging.guards.STAGES`: dedupe, already resolved, something to undo, superseded, pause,
   breaker, cooldown, attempt cap), pure, over the `judging.guards.GuardFacts` the stages above gathered;
5. `FINISH`: what an accepted verdict still becomes (rejected: its params did not render; a ladder with
   nothing to undo) and the notes its reason takes (runs again; the rung and why; the rollout wave);
6. `NotificationFacts.record`: what the next pairs of the same notification see (the keys taken,
   the runs counted, where the ladder stands).

Nothing here writes: the engine stores the verdicts, runs and ladders in the ingest transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from remediate.breaker import BreakerState
from remediate.config.promotion import Promotion
from remediate.config.rollout import Mode
from remediate.intake.alerts import Alert
from remediate.judging.evaluation import Evaluation, RenderedStep
from remediate.judging.guards import ATTEMPT_WINDOW, NOTHING_TO_UNDO, GuardFacts, Verdict
from remediate.judging.guards import judge as guard_verdict
from remediate.judging.ladder import (
    RungChoice,
    choose_rung,
    climbed,
    repeat_offender_choice,
    resolved,
    start_at_choice,
)
from remediate.judging.promotions import Promotions
from remediate.playbooks.model import Playbook
from remediate.runs import Decision, LadderState, RunStatus
from remediate.store import GuardReads, PauseState


@dataclass(frozen=True)
class Judged:
    """The guards' verdict on one (alert, playbook) pair, or on an alert no playbook matched."""

    index: int
    alert: Alert
    evaluation: Evaluation | None
    verdict: Verdict
    firing_run: tuple[int, str] | None = None
    """For a resolved alert: (id, status) of the firing run of the same occurrence."""
    supersedes: int | None = None
    """The run of the same occurrence that failed for a transient reason before changing anything: this
    delivery runs again instead of being a duplicate (the old run stays in history, `superseded_by`)."""
    rung_choice: RungChoice | None = None
    """A ladder's firing alert: the rung picked and why (remediate.judging.ladder.choose_rung)."""
    ladder_before: LadderState | None = None
    """A ladder's firing alert: where the ladder stood when it was judged."""
    ladder_resolved: LadderState | None = None
    """A ladder's resolved alert of the occurrence its last rung ran for: the ladder to write (resolved_at)."""
    ladder_runs: tuple[tuple[int, int, str], ...] = ()
    """A ladder's resolved alert: (rung, run id, status) of every rung run of its occurrence."""
    promotion: Promotion | None = None
    """Its wave's promotion as judged, with the evidence (remediate.judging.promotions); None: none asked."""

    @property
    def rung(self) -> int | None:
        return self.evaluation.rung if self.evaluation is not None else None

    @property
    def rung_reason(self) -> str:
        return self.rung_choice.reason if self.rung_choice is not None else ""

    @property
    def creates_run(self) -> bool:
        return self.evaluation is not None and self.verdict.decision in (Decision.ACCEPTED, Decision.REJECTED)

    @property
    def playbook_name(self) -> str | None:
        return self.evaluation.playbook.name if self.evaluation else None

    @property
    def target(self) -> str | None:
        return self.evaluation.target if self.evaluation else None

    @property
    def phase(self) -> str:
        return self.alert.status


AlertEvaluations = tuple[int, Alert, list[Evaluation]]
"""(index of the alert in its notification, the alert, its evaluations: one per matching playbook)."""


def dedupe_key(alert: Alert, playbook: str, status: str | None = None) -> str:
    """Identity of one alert occurrence for one playbook (AlertManager re-sends groups; HA pairs send twice)."""
    parts = (alert.fingerprint, alert.starts_at_text, status or alert.status, playbook)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


# ------------------------------------------------------------------ the notification's context


@dataclass
class NotificationFacts:
    """The judging context of one notification: the store's facts, read once for all its alerts, and
    what the pairs judged before the current one took (their runs count for the ones after)."""

    reader: GuardReads
    now: float
    stale_horizon: float
    gated: Callable[[Evaluation], bool]
    """Does the pair's phase (or rung) change the cluster in a way the circuit breaker caps?"""
    existing: Mapping[str, tuple[int, str]]
    """dedupe key -> (run id, status) of every run this notification's pairs may meet."""
    rerunnable: Mapping[int, str]
    """Failed runs that changed nothing (run id -> why they failed): a new delivery runs again."""
    order: _OrderFacts
    pause: PauseState
    breaker: BreakerState | None
    history: dict[tuple[str, str, int | None], tuple[float | None, int]] = field(default_factory=dict)
    """(playbook, guard key, rung or None for all) -> (last run at, runs in the attempt window)."""
    ladders: dict[tuple[str, str], LadderState | None] = field(default_factory=dict)
    acted: dict[tuple[str, str], int] = field(default_factory=dict)
    """(playbook, target) -> its runs that acted within the playbook's repeat_offender window."""
    promotions: Promotions | None = None
    """The rollout promotions judged for this notification (read once each)."""
    seen_keys: set[str] = field(default_factory=set)
    """Dedupe keys a run of this notification took."""
    acting_here: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    """(playbook, guard key, fingerprint) -> startsAt of the enforced firing runs accepted here."""

    @classmethod
    def gather(
        cls,
        reader: GuardReads,
        evaluations: Sequence[AlertEvaluations],
        now: float,
        *,
        stale_horizon: float,
        gated: Callable[[Evaluation], bool],
    ) -> NotificationFacts:
        keys = [k for _, _, evs in evaluations for e in evs for k in _own_keys(e)]
        firing_keys = [k for _, _, evs in evaluations for e in evs if e.phase == "resolved" for k in _firing_keys(e)]
        existing = reader.existing_runs(keys + firing_keys)
        rerunnable = reader.rerunnable_runs(
            existing[k][0] for k in keys if k in existing and existing[k][1] == RunStatus.FAILED
        )
        order = _OrderFacts.gather(reader, evaluations)
        pause = reader.pause_state()
        breaker_row = reader.breaker_state()
        breaker = BreakerState.from_dict(breaker_row) if breaker_row is not None else None
        return cls(reader, now, stale_horizon, gated, existing, rerunnable, order, pause, breaker)

    def ladder(self, key: tuple[str, str]) -> LadderState | None:
        """Where a ladder stands: as stored, or as an earlier pair of this notification left it."""
        if key not in self.ladders:
            self.ladders[key] = self.reader.ladder(*key)
        return self.ladders[key]

    def acted_runs(self, playbook: Playbook, target: str) -> int:
        """The runs of `playbook` on `target` that acted within its repeat_offender window (read once)."""
        assert playbook.repeat_offender is not None
        key = (playbook.name, target)
        if key not in self.acted:
            since = self.now - playbook.repeat_offender.within.total_seconds()
            self.acted[key] = self.reader.acted_runs(playbook.name, target, since)
        return self.acted[key]

    def target_history(self, key: tuple[str, str, int | None]) -> tuple[float | None, int]:
        """(last run at, runs in the attempt window) of a (playbook, guard key[, rung]), with this
        notification's accepted runs."""
        if key not in self.history:
            playbook, guard_key, rung = key
            since = self.now - ATTEMPT_WINDOW.total_seconds()
            self.history[key] = self.reader.target_history(playbook, guard_key, since, rung)
        return self.history[key]

    def record(self, pair: Pair, verdict: Verdict) -> Judged:
        """The pair's verdict, and what the pairs after it in this notification see of it."""
        ev, alert, now = pair.ev, pair.alert, self.now
        key = (ev.playbook.name, ev.guard_key)
        creates_run = verdict.decision in (Decision.ACCEPTED, Decision.REJECTED)
        supersedes = pair.supersedes if creates_run else None
        if creates_run:
            self.seen_keys.add(ev.dedupe_key)
            if ev.phase == "firing" and verdict.accepted:
                self.history[(*key, None)] = (now, pair.runs_in_window + 1)
                if ev.rung is not None:
                    self.history[(*key, ev.rung)] = (now, pair.rung_runs_in_window + 1)
                if ev.mode is Mode.ENFORCE:
                    self.acting_here.setdefault((*key, alert.fingerprint), []).append(alert.starts_at_text)
        ladder_resolved = None
        if climbs(ev, verdict, pair.choice):
            # Later alerts of this notification climb from here (the run id is known once stored).
            self.ladders[key] = climbed(
                pair.ladder_before,
                playbook=key[0],
                guard_key=key[1],
                target=ev.target,
                choice=pair.choice,
                run_id=0,
                occurrence=occurrence(alert),
                now=now,
            )
        elif _resolves(pair.ladder_before, ev) and verdict.decision is not Decision.DUPLICATE:
            assert pair.ladder_before is not None
            ladder_resolved = self.ladders[key] = resolved(pair.ladder_before, now)
        return Judged(
            pair.index,
            alert,
            ev,
            verdict,
            pair.firing,
            supersedes,
            rung_choice=pair.choice,
            ladder_before=pair.ladder_before,
            ladder_resolved=ladder_resolved,
            ladder_runs=pair.ladder_runs,
            promotion=pair.promotion,
        )


# ------------------------------------------------------------------ one pair's stages


@dataclass(slots=True)
class Pair:
    """One (alert, playbook) pair being judged: what its stages found so far."""

    index: int
    alert: Alert
    ev: Evaluation
    ladder_before: LadderState | None = None
    choice: RungChoice | None = None
    ladder_runs: tuple[tuple[int, int, str], ...] = ()
    duplicate_of: int | None = None
    supersedes: int | None = None
    firing: tuple[int, str] | None = None
    runs_in_window: int = 0
    rung_runs_in_window: int = 0
    promotion: Promotion | None = None


def judge(
    reader: GuardReads,
    evaluations: Sequence[AlertEvaluations],
    now: float,
    *,
    stale_horizon: float,
    gated: Callable[[Evaluation], bool],
) -> list[Judged]:
    """Every evaluated pair's verdict (in the notification's order), against the facts `reader` sees."""
    facts = NotificationFacts.gather(reader, evaluations, now, stale_horizon=stale_horizon, gated=gated)
    judged: list[Judged] = []
    # Firing alerts first: a resolved alert of this notification then sees the firing runs accepted in it.
    for index, alert, evs in sorted(evaluations, key=lambda item: item[1].status != "firing"):
        if not evs:
            judged.append(Judged(index, alert, None, Verdict(Decision.UNMATCHED, "no playbook matches this alert")))
        for ev in evs:
            judged.append(judge_pair(facts, Pair(index, alert, ev)))
    judged.sort(key=lambda j: j.index)  # back in the notification's order (stable: playbooks keep theirs)
    return judged


def judge_pair(facts: NotificationFacts, pair: Pair) -> Judged:
    """One pair through its stages: gather (rung, dedupe, undo), the guards, finish, record."""
    for gather in GATHER:
        gather(facts, pair)
    verdict = guard_verdict(pair.ev.playbook, pair.ev.phase, pair.ev.guard_key, guard_facts(facts, pair), facts.now)
    for finish in FINISH:
        verdict = finish(facts, pair, verdict)
    return facts.record(pair, verdict)


def rung(facts: NotificationFacts, pair: Pair) -> None:
    """A ladder playbook: where it stands; a firing alert goes on the rung picked for it now (a repeat
    offender's straight to the rung its playbook names)."""
    ev = pair.ev
    if not ev.playbook.is_ladder:
        return
    pair.ladder_before = facts.ladder((ev.playbook.name, ev.guard_key))
    if ev.phase == "firing":
        seen = occurrence(pair.alert)
        pair.choice = start_at_choice(
            ev.playbook, choose_rung(ev.playbook, pair.ladder_before, seen, facts.now), pair.alert.name
        )
        if ev.playbook.repeat_offender is not None:
            acted = facts.acted_runs(ev.playbook, ev.target)
            pair.choice = repeat_offender_choice(
                ev.playbook, pair.choice, pair.ladder_before, seen, acted=acted, target=ev.target
            )
        pair.ev = _on_rung(ev, pair.choice.rung)


def promote(facts: NotificationFacts, pair: Pair) -> None:
    """A firing run of a wave that may be promoted: its mode as the wave before it's evidence makes it."""
    if pair.ev.promotion is None:
        return
    if facts.promotions is None:
        facts.promotions = Promotions(facts.reader, facts.now)
    pair.ev, pair.promotion = facts.promotions.judged(pair.ev)


def dedupe(facts: NotificationFacts, pair: Pair) -> None:
    """The run recorded for this occurrence (0: earlier in this notification), unless it failed before
    changing anything: then this delivery runs again instead (`supersedes`)."""
    key = pair.ev.dedupe_key
    duplicate = facts.existing.get(key)
    if duplicate is not None and duplicate[0] in facts.rerunnable and key not in facts.seen_keys:
        pair.supersedes, duplicate = duplicate[0], None
    pair.duplicate_of = duplicate[0] if duplicate else (0 if key in facts.seen_keys else None)


def undo(facts: NotificationFacts, pair: Pair) -> None:
    """A resolved alert: the firing run it undoes; a ladder's, every rung run of its occurrence."""
    ev = pair.ev
    if ev.phase != "resolved":
        return
    pair.firing = facts.existing.get(dedupe_key(pair.alert, ev.playbook.name, "firing"))
    if ev.playbook.is_ladder:
        pair.ladder_runs = tuple(
            (rung, *facts.existing[k]) for rung, k in enumerate(_firing_keys(ev), start=1) if k in facts.existing
        )
        pair.ev, pair.firing = _undo_of(ev, pair.ladder_runs)


def window(facts: NotificationFacts, pair: Pair) -> None:
    """A firing alert: the last run and the runs in the attempt window (of the rung too), for cooldown and cap."""
    ev = pair.ev
    if ev.phase != "firing":
        return
    pair.runs_in_window = facts.target_history((ev.playbook.name, ev.guard_key, None))[1]
    if ev.rung is not None:
        pair.rung_runs_in_window = facts.target_history((ev.playbook.name, ev.guard_key, ev.rung))[1]


GATHER: tuple[Callable[[NotificationFacts, Pair], None], ...] = (rung, promote, dedupe, undo, window)
"""The stages that find a pair's facts, in order (a rung changes the dedupe key and the mode a promotion
starts from; the undo the firing run)."""


def guard_facts(facts: NotificationFacts, pair: Pair) -> GuardFacts:
    """What the guards (remediate.judging.guards) judge the pair from."""
    ev, alert = pair.ev, pair.alert
    last = facts.history.get((ev.playbook.name, ev.guard_key, None), (None, 0))[0]
    return GuardFacts(
        duplicate_of=pair.duplicate_of,
        paused=facts.pause.paused,
        paused_by=facts.pause.by,
        paused_reason=facts.pause.reason,
        last_run_at=last,
        runs_in_window=pair.runs_in_window,
        firing_run=pair.firing[0] if pair.firing is not None else None,
        firing_run_status=pair.firing[1] if pair.firing is not None else None,
        gated=facts.gated(ev),
        breaker=facts.breaker,
        alert_started_at=alert.starts_at.timestamp(),
        stale_horizon=facts.stale_horizon,
        already_resolved=ev.phase == "firing" and occurrence(alert) in facts.order.resolved,
        superseded_by=_newer_active_run(facts.reader, ev, pair.firing, facts.order, facts.acting_here),
        rung=ev.rung,
        rung_runs_in_window=pair.rung_runs_in_window,
    )


def rendered(facts: NotificationFacts, pair: Pair, verdict: Verdict) -> Verdict:
    """An accepted pair whose params did not render is a rejected run (its error recorded)."""
    if verdict.accepted and pair.ev.error is not None:
        return Verdict(Decision.REJECTED, pair.ev.error)
    return verdict


def ladder_undo(facts: NotificationFacts, pair: Pair, verdict: Verdict) -> Verdict:
    """A ladder's resolved alert whose rungs that ran have no on_resolved has nothing to run."""
    ev = pair.ev
    if verdict.accepted and ev.playbook.is_ladder and ev.phase == "resolved" and not ev.steps:
        ran = ", ".join(str(rung) for rung, _, _ in pair.ladder_runs)
        return Verdict(Decision.NOTHING_ON_RESOLVED, f"the rungs that ran ({ran}) have no on_resolved steps")
    return verdict


def runs_again(facts: NotificationFacts, pair: Pair, verdict: Verdict) -> Verdict:
    if pair.supersedes is not None and verdict.accepted:
        return Verdict(
            verdict.decision,
            f"{verdict.reason}; runs again: run {pair.supersedes} failed before changing anything "
            f"({facts.rerunnable[pair.supersedes]})",
        )
    return verdict


def ladder_note(facts: NotificationFacts, pair: Pair, verdict: Verdict) -> Verdict:
    """The verdict's reason with the ladder's part: which rung and why, or which rungs are undone."""
    ev, choice = pair.ev, pair.choice
    if choice is not None and ev.rung is not None:
        name = ev.playbook.rungs[ev.rung - 1].name
        of = len(ev.playbook.rungs)
        shadow = "; shadow (dry-run): the ladder does not move" if ev.mode is Mode.DRY_RUN and verdict.accepted else ""
        return Verdict(verdict.decision, f"{verdict.reason}; rung {ev.rung} of {of} ({name}): {choice.reason}{shadow}")
    if ev.playbook.is_ladder and ev.phase == "resolved" and pair.ladder_runs and verdict.accepted:
        undone = [rung for rung, _, status in sorted(pair.ladder_runs, reverse=True) if status not in NOTHING_TO_UNDO]
        return Verdict(verdict.decision, f"{verdict.reason}; undoes rungs {', '.join(map(str, undone))}")
    return verdict


def wave_note(facts: NotificationFacts, pair: Pair, verdict: Verdict) -> Verdict:
    """The verdict's reason with the rollout's part: the node's wave, where it was read, and its mode."""
    if pair.ev.wave is None:
        return verdict
    return Verdict(verdict.decision, f"{verdict.reason}; {pair.ev.wave}")


FINISH: tuple[Callable[[NotificationFacts, Pair, Verdict], Verdict], ...] = (
    rendered,
    ladder_undo,
    runs_again,
    ladder_note,
    wave_note,
)
"""What the guards' verdict becomes, in order: a refusal stays, an accepted pair may still be rejected."""


# ------------------------------------------------------------------ keys, rungs and order


def rung_dedupe_key(alert: Alert, playbook: str, rung: int) -> str:
    """The dedupe key of a ladder's firing run on `rung`: one run per (occurrence, rung). Rung 1 keeps the
    key of a playbook without a ladder; a retry or an HA pair delivering the same thing twice is still
    a duplicate, while the same occurrence still firing after `holds_for` can climb to the next rung."""
    return dedupe_key(alert, playbook, "firing" if rung == 1 else f"firing/rung-{rung}")


def _own_keys(ev: Evaluation) -> list[str]:
    """The dedupe keys a judged evaluation may take: a ladder's firing alert one per rung."""
    if ev.playbook.is_ladder and ev.phase == "firing":
        return _firing_keys(ev)
    return [ev.dedupe_key]


def _firing_keys(ev: Evaluation) -> list[str]:
    """The dedupe keys of the firing runs of an evaluation's occurrence: one, or one per rung of a ladder."""
    rungs = len(ev.playbook.rungs) or 1
    return [rung_dedupe_key(ev.alert, ev.playbook.name, rung) for rung in range(1, rungs + 1)]


def _on_rung(ev: Evaluation, rung: int) -> Evaluation:
    """A ladder's firing evaluation as the run of one rung: that rung's steps, mode and dedupe key."""
    render = ev.rungs[rung - 1]
    return replace(
        ev,
        steps=render.steps,
        error=render.error,
        mode=render.mode,
        promoted_mode=render.promoted_mode,
        dedupe_key=rung_dedupe_key(ev.alert, ev.playbook.name, rung),
        rung=rung,
    )


def _undo_of(ev: Evaluation, ladder_runs: Sequence[tuple[int, int, str]]) -> tuple[Evaluation, tuple[int, str] | None]:
    """A ladder's resolved evaluation as its undo run: the on_resolved of every rung that ran and acted,
    in reverse rung order, then the playbook's on_resolved. With the firing run it comes after (the
    highest rung that acted, else the highest that ran), which the guards judge it by."""
    acted = sorted((run for run in ladder_runs if run[2] not in NOTHING_TO_UNDO), reverse=True)
    steps: list[RenderedStep] = []
    error = None
    for rung, _, _ in acted:
        render = ev.rungs[rung - 1]
        error = error or render.error
        steps.extend(render.steps)
    steps.extend(ev.steps)
    error = error or ev.error
    last = acted[0] if acted else (max(ladder_runs) if ladder_runs else None)
    firing = (last[1], last[2]) if last is not None else None
    return replace(ev, steps=tuple(steps) if error is None else (), error=error), firing


def climbs(ev: Evaluation, verdict: Verdict, choice: RungChoice | None) -> bool:
    """Does this accepted firing run move its ladder? Not a shadow (dry-run) run: a week of shadow mode
    must leave the real ladder where it was, so the first enforced incident starts on the gentle rungs.
    The shadow run records the rung an enforced run would have taken now (docs/playbooks.md)."""
    return (
        ev.playbook.is_ladder
        and ev.phase == "firing"
        and verdict.accepted
        and choice is not None
        and ev.mode is not Mode.DRY_RUN
    )


def _resolves(state: LadderState | None, ev: Evaluation) -> bool:
    """Is this resolved alert the end of the occurrence its ladder's last rung ran for (first report)?"""
    return (
        state is not None
        and ev.phase == "resolved"
        and state.rung >= 1
        and state.resolved_at is None
        and (state.fingerprint, state.starts_at) == occurrence(ev.alert)
    )


def occurrence(alert: Alert) -> tuple[str, str]:
    """One alert occurrence: its fingerprint and startsAt (as stored in the alerts table)."""
    return alert.fingerprint, alert.starts_at_text


@dataclass(frozen=True)
class _OrderFacts:
    """What was reported about the occurrences of this notification's alerts, earlier (the store) or in
    this same notification: AlertManager HA pairs and retries deliver firing and resolved out of order."""

    resolved: set[tuple[str, str]]
    """(fingerprint, startsAt) reported resolved, for every fingerprint of the notification."""
    fired: dict[str, set[str]]
    """fingerprint -> startsAt of its occurrences reported firing, for the resolved alerts' fingerprints."""

    @classmethod
    def gather(cls, reader: GuardReads, evaluations: Sequence[AlertEvaluations]) -> _OrderFacts:
        matched = [alert for _, alert, evs in evaluations if evs]
        resolved = {occurrence(a) for _, a, _ in evaluations if a.status == "resolved"}
        fired_pairs = {occurrence(a) for _, a, _ in evaluations if a.status == "firing"}
        if matched:
            resolved |= reader.reported_occurrences({a.fingerprint for a in matched}, "resolved")
        ending = {a.fingerprint for a in matched if a.status == "resolved"}
        if ending:
            fired_pairs |= reader.reported_occurrences(ending, "firing")
        fired: dict[str, set[str]] = {}
        for fingerprint, started in fired_pairs:
            fired.setdefault(fingerprint, set()).add(started)
        return cls(resolved, fired)


def _newer_active_run(
    reader: GuardReads,
    ev: Evaluation,
    firing: tuple[int, str] | None,
    order: _OrderFacts,
    acting_here: Mapping[tuple[str, str, str], list[str]],
) -> int | None:
    """For a resolved alert whose firing run acted: a firing run of a NEWER occurrence of the same alert
    (same fingerprint, playbook and guard key, later startsAt) that acted and has not resolved; 0 when it
    was accepted earlier in this notification. Its steps still need what this undo would take away."""
    if ev.phase != "resolved" or firing is None or firing[1] in NOTHING_TO_UNDO or not ev.playbook.undoes:
        return None
    fingerprint, started = occurrence(ev.alert)
    later = {
        ts
        for ts in order.fired.get(fingerprint, ())
        if datetime.fromisoformat(ts) > datetime.fromisoformat(started) and (fingerprint, ts) not in order.resolved
    }
    if not later:  # the usual case: no query
        return None
    here = [0 for ts in acting_here.get((ev.playbook.name, ev.guard_key, fingerprint), []) if ts in later]
    stored = [run for run, ts in reader.active_firing_runs(ev.playbook.name, ev.guard_key, fingerprint) if ts in later]
    active = stored + here
    return max(active) if active else None
