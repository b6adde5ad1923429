"""The engine: a notification -> matched playbooks -> rendered steps -> guards -> committed runs.

`Engine.evaluate` is pure (match, render, validate) and serves the dry-run CLI
too. `Engine.ingest` records the raw notification, every alert and every
decision, and the accepted runs with their steps, in ONE write transaction: a
notification is stored whole or not at all. Nothing is executed here; the
executor picks the committed runs up (`on_queued` wakes it).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson

from remediate.actions.base import ActionRegistry
from remediate.alerts import Alert, Notification, format_timestamp, parse_notification
from remediate.breaker import BreakerState
from remediate.errors import ParamsError, PayloadError, StoreConflict
from remediate.guards import ATTEMPT_WINDOW, NOTHING_TO_UNDO, GuardFacts, Verdict, judge
from remediate.ladder import RungChoice, choose_rung, climbed, resolved
from remediate.playbooks import Mode, Playbook, PlaybookSet, StepSpec
from remediate.runs import Decision, LadderState, RunStatus, decision_row, queue_priority, run_row, step_rows
from remediate.store import EmptyGuardReader, GuardReads, IngestWriter, Store
from remediate.store.ladders import guard_lock_name
from remediate.templating import render_params, render_session

log = logging.getLogger("remediate.engine")

INGEST_ATTEMPTS = 3
"""Times a notification's transaction is tried when another writer stored one of its runs first
(StoreConflict). The guard locks make that rare (replicas running different playbook versions);
each try judges again and sees more of what the others committed."""


@dataclass(frozen=True)
class RenderedStep:
    spec: StepSpec
    where: str
    params: Mapping[str, Any]
    timeout: float


@dataclass(frozen=True)
class RungRender:
    """One rung of a ladder playbook, rendered for an alert: its steps for the alert's phase (`steps` when
    firing, its `on_resolved` when resolved), or why they did not render; and the mode it runs in."""

    steps: tuple[RenderedStep, ...]
    error: str | None
    mode: Mode


@dataclass(frozen=True)
class Evaluation:
    """One (alert, playbook) pair before the guards: rendered steps or the reason they failed."""

    alert: Alert
    playbook: Playbook
    phase: str
    target: str
    guard_key: str
    """What cooldown and max_attempts count per (the target, narrowed by the playbook's guard_by)."""
    mode: Mode
    dedupe_key: str
    steps: tuple[RenderedStep, ...] = ()
    error: str | None = None
    rungs: tuple[RungRender, ...] = ()
    """A ladder playbook's every rung, rendered (judge picks one; a rung not picked may fail to render)."""
    rung: int | None = None
    """The rung (1-based) judge picked for a ladder's firing alert; `steps`/`error`/`mode` are then its."""

    @property
    def awaits_approval(self) -> bool:
        """An approve-mode playbook's firing run waits for a person; its undo (resolved) does not."""
        return self.mode is Mode.APPROVE and self.phase == "firing"


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
    """A ladder's firing alert: the rung picked and why (remediate.ladder.choose_rung)."""
    ladder_before: LadderState | None = None
    """A ladder's firing alert: where the ladder stood when it was judged."""
    ladder_resolved: LadderState | None = None
    """A ladder's resolved alert of the occurrence its last rung ran for: the ladder to write (resolved_at)."""
    ladder_runs: tuple[tuple[int, int, str], ...] = ()
    """A ladder's resolved alert: (rung, run id, status) of every rung run of its occurrence."""

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


@dataclass(frozen=True)
class DecisionRecord:
    alertname: str
    fingerprint: str
    playbook: str | None
    target: str | None
    decision: Decision
    reason: str
    run_id: int | None = None


@dataclass
class IngestResult:
    notification_id: int
    status: str
    alerts: int
    alert_statuses: dict[str, int]
    decisions: list[DecisionRecord] = field(default_factory=list)

    @property
    def runs_queued(self) -> int:
        return sum(1 for d in self.decisions if d.decision is Decision.ACCEPTED)

    def decision_counts(self) -> dict[str, int]:
        counts: dict[Decision, int] = {}
        for record in self.decisions:
            counts[record.decision] = counts.get(record.decision, 0) + 1
        return {decision.value: count for decision, count in counts.items()}

    def summary(self) -> dict[str, Any]:
        return {
            "notification_id": self.notification_id,
            "alerts": self.alerts,
            "decisions": self.decision_counts(),
            "runs": [d.run_id for d in self.decisions if d.run_id is not None][:100],
        }

    def summary_json(self) -> bytes:
        """`summary()` as the webhook answers it: the bytes of Flask's jsonify (sorted keys, compact, a newline
        at the end; numbers and ASCII names only), without Flask's JSON provider per request."""
        return orjson.dumps(self.summary(), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def dedupe_key(alert: Alert, playbook: str, status: str | None = None) -> str:
    """Identity of one alert occurrence for one playbook (AlertManager re-sends groups; HA pairs send twice)."""
    parts = (alert.fingerprint, alert.starts_at_text, status or alert.status, playbook)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


class Engine:
    def __init__(
        self,
        *,
        store: Store | None,
        playbooks: PlaybookSet,
        registry: ActionRegistry,
        server_mode: str = "enforce",
        default_step_timeout: float = 300.0,
        on_queued: Callable[[], None] | None = None,
        breaker_stale_horizon: float = 900.0,
    ) -> None:
        self.store = store
        self.playbooks = playbooks
        self.registry = registry
        self.server_mode = server_mode
        self.default_step_timeout = default_step_timeout
        self.on_queued = on_queued
        self.breaker_stale_horizon = breaker_stale_horizon
        self._gated_by_phase: dict[tuple[int, str, int | None], tuple[Playbook, bool]] = {}

    # ------------------------------------------------------------------ pure part

    def evaluate(self, alert: Alert) -> list[Evaluation]:
        """The alert's evaluation by every playbook it matches, its steps rendered from its own values."""
        return [self._evaluate_one(alert, playbook) for playbook in self.playbooks.matching(alert)]

    def _evaluate_one(self, alert: Alert, playbook: Playbook) -> Evaluation:
        mode = Mode.DRY_RUN if self.server_mode == "dry-run" else playbook.mode
        target = playbook.target.resolve(alert)
        base = {
            "alert": alert,
            "playbook": playbook,
            "phase": alert.status,
            "target": target,
            "guard_key": playbook.guard_key(alert, target),
            "mode": mode,
            "dedupe_key": dedupe_key(alert, playbook.name),
        }
        context = alert.template_context()
        prefix = "on_resolved" if alert.status == "resolved" else "steps"
        # A ladder's firing steps are its rungs' (below); its resolved ones end with the playbook's on_resolved.
        specs = playbook.on_resolved if alert.status == "resolved" else playbook.steps
        steps, error = self._render(specs, prefix, context)
        rungs = tuple(
            RungRender(
                *self._render(
                    rung.on_resolved if alert.status == "resolved" else rung.steps,
                    f"escalate[{index}].{prefix}",
                    context,
                ),
                Mode.DRY_RUN if self.server_mode == "dry-run" else (rung.mode or playbook.mode),
            )
            for index, rung in enumerate(playbook.rungs)
        )
        return Evaluation(**base, steps=steps, error=error, rungs=rungs)

    def _render(
        self, specs: Sequence[StepSpec], prefix: str, context: Mapping[str, Any]
    ) -> tuple[tuple[RenderedStep, ...], str | None]:
        """Steps rendered and validated for an alert, or () and why the first failing one failed."""
        rendered = []
        for index, spec in enumerate(specs):
            action = self.registry.get(spec.action)
            try:
                params = action.validate(render_params(spec.params, context, keep=action.schema.late))
                action.schema.check_templated(spec.params, params)
            except ParamsError as exc:
                return (), f"{prefix}[{index}] {spec.name} ({spec.action}): {exc}"
            rendered.append(RenderedStep(spec, action.where.value, params, spec.timeout or self.default_step_timeout))
        return tuple(rendered), None

    # ------------------------------------------------------------------ ingest

    def ingest_body(self, body: bytes, *, received_at: float) -> IngestResult:
        """Decode, validate and ingest a webhook body. Raises PayloadError before anything is stored."""
        # Decode first, strictly: json.loads(bytes) would also take UTF-16/32 and encoded lone
        # surrogates, which the raw copy stored below cannot hold (RFC 8259: JSON on the wire is UTF-8).
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PayloadError("", f"body is not UTF-8 text: {exc}") from exc
        try:
            data = _decode_json(text)
        except (ValueError, RecursionError) as exc:
            # ValueError: JSONDecodeError, and integers over Python's 4300-digit limit;
            # RecursionError: arrays/objects nested thousands deep.
            raise PayloadError("", f"body is not valid JSON: {str(exc)[:200]}") from exc
        notification = parse_notification(data)
        return self.ingest(notification, raw=text, received_at=received_at)

    def evaluate_all(self, alerts: Sequence[Alert]) -> list[AlertEvaluations]:
        """Match and render every alert (pure: ingest does it before its write transaction)."""
        # A template refused for going over a render limit is refused at once for the other alerts.
        with render_session():
            return [(index, alert, self.evaluate(alert)) for index, alert in enumerate(alerts)]

    def judge_all(self, reader: GuardReads, alerts: Sequence[Alert], now: float) -> list[Judged]:
        """Match, render and guard every alert, against the store's facts as `reader` sees them."""
        return self.judge(reader, self.evaluate_all(alerts), now)

    def judge(self, reader: GuardReads, evaluations: Sequence[AlertEvaluations], now: float) -> list[Judged]:
        """Guard evaluated alerts (from `evaluate_all`) against the store's facts as `reader` sees them."""
        keys = [k for _, _, evs in evaluations for e in evs for k in _own_keys(e)]
        firing_keys = [k for _, _, evs in evaluations for e in evs if e.phase == "resolved" for k in _firing_keys(e)]
        existing = reader.existing_runs(keys + firing_keys)
        rerunnable = reader.rerunnable_runs(
            existing[k][0] for k in keys if k in existing and existing[k][1] == RunStatus.FAILED
        )
        order = _OrderFacts.gather(reader, evaluations)
        acting_here: dict[tuple[str, str, str], list[str]] = {}
        pause = reader.pause_state()
        breaker_row = reader.breaker_state()
        breaker = BreakerState.from_dict(breaker_row) if breaker_row is not None else None
        window_start = now - ATTEMPT_WINDOW.total_seconds()
        history: dict[tuple[str, str, int | None], tuple[float | None, int]] = {}
        ladders: dict[tuple[str, str], LadderState | None] = {}
        seen_keys: set[str] = set()
        judged: list[Judged] = []
        # Firing alerts first: a resolved alert of this notification then sees the firing runs accepted in it.
        for index, alert, evs in sorted(evaluations, key=lambda item: item[1].status != "firing"):
            if not evs:
                judged.append(Judged(index, alert, None, Verdict(Decision.UNMATCHED, "no playbook matches this alert")))
                continue
            for ev in evs:
                key = (ev.playbook.name, ev.guard_key)
                ladder_before: LadderState | None = None
                choice: RungChoice | None = None
                ladder_runs: tuple[tuple[int, int, str], ...] = ()
                if ev.playbook.is_ladder:
                    if key not in ladders:
                        ladders[key] = reader.ladder(*key)
                    ladder_before = ladders[key]
                if ev.playbook.is_ladder and ev.phase == "firing":
                    choice = choose_rung(ev.playbook, ladder_before, _occurrence(alert), now)
                    ev = _on_rung(ev, choice.rung)
                duplicate = existing.get(ev.dedupe_key)
                supersedes = None
                if duplicate is not None and duplicate[0] in rerunnable and ev.dedupe_key not in seen_keys:
                    supersedes, duplicate = duplicate[0], None
                firing = existing.get(dedupe_key(alert, ev.playbook.name, "firing")) if ev.phase == "resolved" else None
                if ev.playbook.is_ladder and ev.phase == "resolved":
                    ladder_runs = tuple(
                        (rung, *existing[k]) for rung, k in enumerate(_firing_keys(ev), start=1) if k in existing
                    )
                    ev, firing = _undo_of(ev, ladder_runs)
                all_rungs, this_rung = (*key, None), (*key, ev.rung)
                if ev.phase == "firing" and all_rungs not in history:
                    history[all_rungs] = reader.target_history(ev.playbook.name, ev.guard_key, window_start)
                if ev.phase == "firing" and ev.rung is not None and this_rung not in history:
                    history[this_rung] = reader.target_history(*key, window_start, ev.rung)
                last, count = history.get(all_rungs, (None, 0))
                rung_count = history.get(this_rung, (None, 0))[1] if ev.rung is not None else 0
                facts = GuardFacts(
                    duplicate_of=duplicate[0] if duplicate else (0 if ev.dedupe_key in seen_keys else None),
                    paused=pause.paused,
                    paused_by=pause.by,
                    paused_reason=pause.reason,
                    last_run_at=last,
                    runs_in_window=count,
                    firing_run=firing[0] if firing is not None else None,
                    firing_run_status=firing[1] if firing is not None else None,
                    gated=self._gated(ev),
                    breaker=breaker,
                    alert_started_at=alert.starts_at.timestamp(),
                    stale_horizon=self.breaker_stale_horizon,
                    already_resolved=ev.phase == "firing" and _occurrence(alert) in order.resolved,
                    superseded_by=_newer_active_run(reader, ev, firing, order, acting_here),
                    rung=ev.rung,
                    rung_runs_in_window=rung_count,
                )
                verdict = judge(ev.playbook, ev.phase, ev.guard_key, facts, now)
                if verdict.accepted and ev.error is not None:
                    verdict = Verdict(Decision.REJECTED, ev.error)
                if verdict.accepted and ev.playbook.is_ladder and ev.phase == "resolved" and not ev.steps:
                    ran = ", ".join(str(rung) for rung, _, _ in ladder_runs)
                    verdict = Verdict(
                        Decision.NOTHING_ON_RESOLVED, f"the rungs that ran ({ran}) have no on_resolved steps"
                    )
                if supersedes is not None and verdict.accepted:
                    verdict = Verdict(
                        verdict.decision,
                        f"{verdict.reason}; runs again: run {supersedes} failed before changing anything "
                        f"({rerunnable[supersedes]})",
                    )
                verdict = _with_ladder(verdict, ev, choice, ladder_runs)
                if verdict.decision not in (Decision.ACCEPTED, Decision.REJECTED):
                    supersedes = None
                if verdict.decision in (Decision.ACCEPTED, Decision.REJECTED):
                    seen_keys.add(ev.dedupe_key)
                    if ev.phase == "firing" and verdict.accepted:
                        history[all_rungs] = (now, count + 1)
                        if ev.rung is not None:
                            history[this_rung] = (now, rung_count + 1)
                        if ev.mode is Mode.ENFORCE:
                            acting_here.setdefault((*key, alert.fingerprint), []).append(_occurrence(alert)[1])
                ladder_resolved = None
                if _climbs(ev, verdict, choice):
                    # Later alerts of this notification climb from here (the run id is known once stored).
                    ladders[key] = climbed(
                        ladder_before,
                        playbook=key[0],
                        guard_key=key[1],
                        target=ev.target,
                        choice=choice,
                        run_id=0,
                        occurrence=_occurrence(alert),
                        now=now,
                    )
                elif _resolves(ladder_before, ev) and verdict.decision is not Decision.DUPLICATE:
                    assert ladder_before is not None
                    ladder_resolved = ladders[key] = resolved(ladder_before, now)
                judged.append(
                    Judged(
                        index,
                        alert,
                        ev,
                        verdict,
                        firing,
                        supersedes,
                        rung_choice=choice,
                        ladder_before=ladder_before,
                        ladder_resolved=ladder_resolved,
                        ladder_runs=ladder_runs,
                    )
                )
        judged.sort(key=lambda j: j.index)  # back in the notification's order (stable: playbooks keep theirs)
        return judged

    def _gated(self, ev: Evaluation) -> bool:
        """Does this phase of the playbook change the cluster in a way the circuit breaker caps?
        For a ladder, the steps of the rung it runs decide."""
        key = (id(ev.playbook), ev.phase, ev.rung)
        known = self._gated_by_phase.get(key)
        if known is None or known[0] is not ev.playbook:
            # The playbook is kept with the answer: its id() is not reused while it is held here.
            known = self._gated_by_phase[key] = (ev.playbook, self._steps_gated(ev))
        return known[1]

    def _steps_gated(self, ev: Evaluation) -> bool:
        if ev.rung is not None:
            specs: Sequence[StepSpec] = ev.playbook.rungs[ev.rung - 1].steps
        else:
            specs = ev.playbook.steps_for(ev.phase)
        return any(spec.action in self.registry and self.registry.get(spec.action).breaker_gated for spec in specs)

    def preview(self, notification: Notification, *, now: float) -> list[Judged]:
        """What ingest would decide now, reading the store only (dry-run)."""
        if self.store is None:
            return self.judge_all(EmptyGuardReader(), notification.alerts, now)
        with self.store.guard_reader() as reader:
            return self.judge_all(reader, notification.alerts, now)

    def ingest(self, notification: Notification, *, raw: str, received_at: float) -> IngestResult:
        if self.store is None:
            raise RuntimeError("an engine without a store can only preview")
        # Match/render/validate reads nothing from the store: outside the write transaction, which
        # serialises all writers. The guards' reads stay inside it (judge).
        evaluations = self.evaluate_all(notification.alerts)
        for attempt in range(1, INGEST_ATTEMPTS + 1):
            try:
                notification_id, judged, run_ids = self._store_judged(notification, evaluations, raw, received_at)
                break
            except StoreConflict as exc:
                if attempt == INGEST_ATTEMPTS:
                    raise
                # Not a failure: a replica stored the same delivery at the same moment. Judged again,
                # its runs are this notification's duplicates.
                log.info("ingest: %s; judging the notification again (try %d)", exc, attempt + 1)
        statuses_count: dict[str, int] = {}
        for alert in notification.alerts:
            statuses_count[alert.status] = statuses_count.get(alert.status, 0) + 1
        records = [
            DecisionRecord(
                j.alert.name,
                j.alert.fingerprint,
                j.playbook_name,
                j.target,
                j.verdict.decision,
                j.verdict.reason,
                run_ids.get(id(j)),
            )
            for j in judged
        ]
        result = IngestResult(notification_id, notification.status, len(notification.alerts), statuses_count, records)
        if result.runs_queued and self.on_queued is not None:
            self.on_queued()
        return result

    def _store_judged(
        self, notification: Notification, evaluations: Sequence[AlertEvaluations], raw: str, received_at: float
    ) -> tuple[int, list[Judged], dict[int, int]]:
        """The notification, its alerts, the guards' verdicts and the accepted runs in ONE write transaction:
        (notification id, the verdicts, run id by id() of the Judged that created it)."""
        assert self.store is not None
        with self.store.writer() as w:
            # First, before any guard read: a replica judging the same keys now waits for this commit,
            # or this transaction for its (READ COMMITTED then shows its runs to the reads below).
            w.lock_guards(_guard_names(evaluations))
            notification_id = w.insert_notification(
                received_at=received_at,
                receiver=notification.receiver,
                status=notification.status,
                group_key=notification.group_key,
                alert_count=len(notification.alerts),
                raw=raw,
            )
            alert_ids = w.insert_alerts([_alert_row(notification_id, a) for a in notification.alerts])
            judged = self.judge(w, evaluations, received_at)
            with_runs = [j for j in judged if j.creates_run]
            priority = queue_priority(len(notification.alerts))  # a storm's runs after a single alert's
            run_rows = [run_row(j, alert_ids[j.index], received_at, priority=priority) for j in with_runs]
            for j in with_runs:
                if j.supersedes is not None:
                    w.release_dedupe_key(j.supersedes)
            # Judged values are unique objects: key the new run ids by identity.
            run_ids = dict(zip(map(id, with_runs), w.insert_runs(run_rows), strict=True))
            for j in with_runs:
                if j.supersedes is not None:
                    w.mark_superseded(j.supersedes, run_ids[id(j)], received_at)
            statuses = {id(j): row["status"] for j, row in zip(with_runs, run_rows, strict=True)}
            params_json: dict[int, str] = {}
            w.insert_steps([row for j in with_runs for row in step_rows(run_ids[id(j)], j.evaluation, params_json)])
            for j in judged:
                # Whatever the verdict (no_firing_run, nothing_on_resolved, paused, ...): the alert is over.
                waiting = {run for _, run, status in j.ladder_runs if status == RunStatus.AWAITING_APPROVAL}
                if j.phase == "resolved" and j.firing_run and j.firing_run[1] == RunStatus.AWAITING_APPROVAL:
                    waiting.add(j.firing_run[0])
                for run in sorted(waiting) if j.phase == "resolved" else ():
                    w.cancel_awaiting(run, "the alert resolved before the run was approved", received_at)
            _write_ladders(w, judged, run_ids, received_at)
            w.insert_decisions(
                [
                    decision_row(
                        notification_id,
                        alert_ids[j.index],
                        j,
                        run_ids.get(id(j)),
                        statuses.get(id(j)),
                        received_at,
                    )
                    for j in judged
                ],
            )
        return notification_id, judged, run_ids


def _write_ladders(w: IngestWriter, judged: Sequence[Judged], run_ids: Mapping[int, int], now: float) -> None:
    """Where the ladders stand after this notification: a rung climbed (with its run), or the occurrence
    of the last rung resolved. In the order judge saw them (firing first), in the ingest transaction."""
    written: dict[tuple[str, str], LadderState] = {}
    for j in sorted(judged, key=lambda item: item.phase != "firing"):
        ev = j.evaluation
        if ev is None:
            continue
        key = (ev.playbook.name, ev.guard_key)
        if _climbs(ev, j.verdict, j.rung_choice) and id(j) in run_ids:
            state = climbed(
                written.get(key, j.ladder_before),
                playbook=key[0],
                guard_key=key[1],
                target=ev.target,
                choice=j.rung_choice,
                run_id=run_ids[id(j)],
                occurrence=_occurrence(j.alert),
                now=now,
            )
        elif j.ladder_resolved is not None:
            state = j.ladder_resolved
        else:
            continue
        w.save_ladder(state)
        written[key] = state


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


def _climbs(ev: Evaluation, verdict: Verdict, choice: RungChoice | None) -> bool:
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
        and (state.fingerprint, state.starts_at) == _occurrence(ev.alert)
    )


def _with_ladder(
    verdict: Verdict, ev: Evaluation, choice: RungChoice | None, ladder_runs: Sequence[tuple[int, int, str]]
) -> Verdict:
    """The verdict's reason with the ladder's part: which rung and why, or which rungs are undone."""
    if choice is not None and ev.rung is not None:
        name = ev.playbook.rungs[ev.rung - 1].name
        of = len(ev.playbook.rungs)
        shadow = "; shadow (dry-run): the ladder does not move" if ev.mode is Mode.DRY_RUN and verdict.accepted else ""
        return Verdict(verdict.decision, f"{verdict.reason}; rung {ev.rung} of {of} ({name}): {choice.reason}{shadow}")
    if ev.playbook.is_ladder and ev.phase == "resolved" and ladder_runs and verdict.accepted:
        undone = [rung for rung, _, status in sorted(ladder_runs, reverse=True) if status not in NOTHING_TO_UNDO]
        return Verdict(verdict.decision, f"{verdict.reason}; undoes rungs {', '.join(map(str, undone))}")
    return verdict


def _guard_names(evaluations: Sequence[AlertEvaluations]) -> list[str]:
    """The guard keys a notification's verdicts depend on, as lock names: (playbook, guard key) of every
    evaluation. It covers the dedupe keys too: an alert occurrence and a playbook give one guard key (while
    the replicas load the same playbooks; where they differ, the unique dedupe key and StoreConflict hold)."""
    return [guard_lock_name(ev.playbook.name, ev.guard_key) for _, _, evs in evaluations for ev in evs]


def _occurrence(alert: Alert) -> tuple[str, str]:
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
        resolved = {_occurrence(a) for _, a, _ in evaluations if a.status == "resolved"}
        fired_pairs = {_occurrence(a) for _, a, _ in evaluations if a.status == "firing"}
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
    fingerprint, started = _occurrence(ev.alert)
    later = {
        ts
        for ts in order.fired.get(fingerprint, ())
        if _parse_stored(ts) > _parse_stored(started) and (fingerprint, ts) not in order.resolved
    }
    if not later:  # the usual case: no query
        return None
    here = [0 for ts in acting_here.get((ev.playbook.name, ev.guard_key, fingerprint), []) if ts in later]
    stored = [run for run, ts in reader.active_firing_runs(ev.playbook.name, ev.guard_key, fingerprint) if ts in later]
    active = stored + here
    return max(active) if active else None


def _parse_stored(timestamp: str) -> datetime:
    """A startsAt as format_timestamp wrote it (RFC 3339, UTC, at most 6 fraction digits)."""
    return datetime.fromisoformat(timestamp)


def _alert_row(notification_id: int, alert: Alert) -> dict[str, Any]:
    return {
        "notification_id": notification_id,
        "fingerprint": alert.fingerprint,
        "alertname": alert.name,
        "status": alert.status,
        "starts_at": alert.starts_at_text,
        "ends_at": format_timestamp(alert.ends_at) if alert.ends_at else None,
        "labels": _json_object(alert.labels),
        "annotations": _json_object(alert.annotations),
        "generator_url": alert.generator_url,
    }


def _decode_json(text: str) -> Any:
    """A webhook body's JSON: orjson's (a 10,000-alert body in a fifth of json's time), or, for what orjson
    refuses but json reads (lone surrogate escapes, integers over 64 bits, NaN), json's, so every body
    is read, and refused, as before."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _json_object(strings: Mapping[str, str]) -> str:
    """Labels or annotations (str -> str) as stored: JSON with sorted keys."""
    return orjson.dumps(dict(strings), option=orjson.OPT_SORT_KEYS).decode()
