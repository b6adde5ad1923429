"""The engine: a notification -> matched playbooks -> rendered steps -> guards -> committed runs.

`Engine.ingest` is evaluate -> judge -> record. `Engine.evaluate` is pure (match,
render, validate) and serves the dry-run CLI too; `Engine.judge` hands the
evaluated pairs to the named stages of remediate.judging.stages; the record is the raw
notification, every alert and every decision, and the accepted runs with their
steps, in ONE write transaction: a notification is stored whole or not at all.
Nothing is executed here; the executor picks the committed runs up (`on_queued`
wakes it).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from remediate.actions.base import ActionRegistry
from remediate.actions.templating import render_params, render_session
from remediate.config.promotion import Promotion
from remediate.config.rollout import (
    Mode,
    NodeWave,
    PromotionAsk,
    Rollout,
    StaticWaves,
    WaveMode,
    WaveSource,
    most_cautious,
    promotion_ask,
    run_wave,
    wave_mode,
)
from remediate.config.settings import EngineSettings
from remediate.errors import ParamsError, PayloadError, StoreConflict
from remediate.intake.alertref import node_label
from remediate.intake.alerts import Alert, Notification, format_timestamp, parse_notification
from remediate.judging import stages as judging
from remediate.judging.evaluation import Evaluation, RenderedStep, RungRender
from remediate.judging.ladder import climbed
from remediate.judging.stages import (
    AlertEvaluations,
    Judged,
    climbs,
    dedupe_key,
    occurrence,
)
from remediate.judging.truncation import Truncation, truncation
from remediate.playbooks.model import Playbook, PlaybookSet, StepSpec
from remediate.runs import Decision, LadderState, RunStatus, StepStatus
from remediate.store import EmptyGuardReader, GuardReads, IngestWriter, Store
from remediate.store.ladders import guard_lock_name

log = logging.getLogger("remediate.engine")

INGEST_ATTEMPTS = 3
"""Times a notification's transaction is tried when another writer stored one of its runs first
(StoreConflict). The guard locks make that rare (replicas running different playbook versions);
each try judges again and sees more of what the others committed."""


@dataclass(frozen=True)
class DecisionRecord:
    alertname: str
    fingerprint: str
    playbook: str | None
    target: str | None
    decision: Decision
    reason: str
    run_id: int | None = None
    promotion: Promotion | None = None
    """Its rollout wave's promotion as judged (remediate.config.promotion); None where none was asked."""


@dataclass
class IngestResult:
    notification_id: int
    status: str
    alerts: int
    alert_statuses: dict[str, int]
    decisions: list[DecisionRecord] = field(default_factory=list)
    truncated_alerts: int = 0
    """Alerts of the group AlertManager left out (max_alerts): never seen here."""
    notification_reason: str = ""
    """Why AlertManager sent it (0.32+, remediate.intake.reason); "" when it did not say."""

    @property
    def runs_queued(self) -> int:
        return sum(1 for d in self.decisions if d.decision is Decision.ACCEPTED)

    def decision_counts(self) -> dict[str, int]:
        return dict(Counter(d.decision.value for d in self.decisions))

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


@dataclass(eq=False, kw_only=True)
class Engine:
    store: Store | None
    playbooks: PlaybookSet
    registry: ActionRegistry
    settings: EngineSettings = field(default_factory=EngineSettings)
    """Its section of the settings: the server's mode (dry-run: every run only plans), a step's default timeout."""
    on_queued: Callable[[], None] | None = None
    breaker_stale_horizon: float = 900.0
    waves: WaveSource | None = None
    """Where a staged rollout reads nodes' waves (remediate.judging.waves.NodeWaves); None: `rollout_nodes` alone."""

    # ------------------------------------------------------------------ pure part

    def evaluate(self, alert: Alert) -> list[Evaluation]:
        """The alert's evaluation by every playbook it matches, its steps rendered from its own values."""
        return [self._evaluate_one(alert, playbook) for playbook in self.playbooks.matching(alert)]

    def _evaluate_one(self, alert: Alert, playbook: Playbook) -> Evaluation:
        placed = self._placed(alert, playbook)
        wave = None if placed is None else wave_mode(*placed)
        ask = None if placed is None else promotion_ask(*placed)
        target = playbook.target.resolve(alert)
        base = {
            "alert": alert,
            "playbook": playbook,
            "phase": alert.status,
            "target": target,
            "guard_key": playbook.guard_key(alert, target),
            "mode": self._mode(playbook.mode, wave),
            "dedupe_key": dedupe_key(alert, playbook.name),
            "wave": None if wave is None else wave.note,
            "wave_name": None if placed is None else run_wave(placed[1]),
            "promotion": ask,
            "promoted_mode": self._promoted(playbook.mode, ask),
        }
        render = partial(self._render, alert=alert, target=target, context=alert.template_context())
        prefix = "on_resolved" if alert.status == "resolved" else "steps"
        # A ladder's firing steps are its rungs' (below); its resolved ones end with the playbook's on_resolved.
        specs = playbook.on_resolved if alert.status == "resolved" else playbook.steps
        steps, error = render(specs, prefix)
        rungs = tuple(
            RungRender(
                *render(rung.on_resolved if alert.status == "resolved" else rung.steps, f"escalate[{index}].{prefix}"),
                self._mode(rung.mode or playbook.mode, wave),
                self._promoted(rung.mode or playbook.mode, ask),
            )
            for index, rung in enumerate(playbook.rungs)
        )
        return Evaluation(**base, steps=steps, error=error, rungs=rungs)

    def _placed(self, alert: Alert, playbook: Playbook) -> tuple[Rollout, NodeWave] | None:
        """The rollout of a firing alert's node (the playbook's, else the server's) and the node's wave in it;
        None: no rollout, or a resolved alert (an undo puts back what its firing run did, whichever wave
        its node is in now)."""
        rollout = playbook.rollout or self.settings.rollout
        if rollout is None or alert.status != "firing":
            return None
        found = node_label(alert.labels, playbook.target.labels) if playbook.target.constant is None else None
        waves = self.waves or StaticWaves(dict(self.settings.rollout_nodes))
        return rollout, waves.of(rollout, found[1] if found else None)

    def _promoted(self, mode: Mode, ask: PromotionAsk | None) -> Mode | None:
        """The run's mode if judging finds its wave promoted (the wave's part then enforce); None: it cannot be."""
        return None if ask is None else self._mode(mode, WaveMode(Mode.ENFORCE, ""))

    def waves_of(self, node: str) -> list[str]:
        """The node's wave now under each rollout in force (the server's, then each playbook's own), for the
        node page: `server: node gpu-07 in wave 1 (label remediate.io/wave=1): enforce`."""
        waves = self.waves or StaticWaves(dict(self.settings.rollout_nodes))
        rollouts = [("server", self.settings.rollout)]
        rollouts += [(f"playbook {p.name}", p.rollout) for p in self.playbooks.playbooks if p.rollout is not None]
        return [f"{who}: {wave_mode(r, waves.of(r, node)).note}" for who, r in rollouts if r is not None]

    def _mode(self, mode: Mode, wave: WaveMode | None) -> Mode:
        """A run's mode: the most cautious of the playbook's (rung's), the node's wave's and the server's."""
        server = Mode.DRY_RUN if self.settings.mode == "dry-run" else Mode.ENFORCE
        return most_cautious(mode, server, *(() if wave is None else (wave.mode,)))

    def _render(
        self, specs: Sequence[StepSpec], prefix: str, *, alert: Alert, target: str, context: Mapping[str, Any]
    ) -> tuple[tuple[RenderedStep, ...], str | None]:
        """Steps rendered and validated for an alert (`context`: its template context), or () and why the first
        failing one failed. A `run_on` step's node is resolved here, once: the run's steps keep it."""
        rendered = []
        for index, spec in enumerate(specs):
            action = self.registry.get(spec.action)
            try:
                params = action.validate(render_params(spec.params, context, keep=action.schema.late))
                action.schema.check_templated(spec.params, params)
            except ParamsError as exc:
                return (), f"{prefix}[{index}] {spec.name} ({spec.action}): {exc}"
            timeout = spec.timeout or self.settings.step_timeout
            rendered.append(RenderedStep(spec, action.where.value, params, timeout, spec.node(alert, target)))
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
        """Guard evaluated alerts (from `evaluate_all`) against the store's facts as `reader` sees them:
        the stages of remediate.judging.stages over every (alert, playbook) pair."""
        return judging.judge(reader, evaluations, now, stale_horizon=self.breaker_stale_horizon, gated=self._gated)

    def reads_nodes(self, section: str = "kube") -> bool:
        """Does a playbook run a step the circuit breaker caps of the family `section` names ("kube": k8s.cordon,
        taint, drain; "slurm": slurm.drain)? Those read that scheduler's nodes through its node cache, which
        the executor then starts with itself."""
        return any(
            spec.action in self.registry
            and self.registry.get(spec.action).breaker_gated
            and self.registry.get(spec.action).settings_section == section
            for playbook in self.playbooks.playbooks
            for spec in playbook.every_step()
        )

    def _gated(self, ev: Evaluation) -> bool:
        """Does this phase of the playbook change the cluster in a way the circuit breaker caps?
        For a ladder, the steps of the rung it runs decide."""
        specs = ev.playbook.rungs[ev.rung - 1].steps if ev.rung is not None else ev.playbook.steps_for(ev.phase)
        return any(spec.action in self.registry and self.registry.get(spec.action).breaker_gated for spec in specs)

    def preview(self, notification: Notification, *, now: float) -> list[Judged]:
        """What ingest would decide now, reading the store only (dry-run)."""
        if self.store is None:
            return self.judge_all(EmptyGuardReader(), notification.alerts, now)
        with self.store.ingest.reader() as reader:
            return self.judge_all(reader, notification.alerts, now)

    def ingest(self, notification: Notification, *, raw: str, received_at: float) -> IngestResult:
        """evaluate -> judge -> record: the notification, its verdicts and its runs in ONE write transaction."""
        if self.store is None:
            raise RuntimeError("an engine without a store can only preview")
        # Match/render/validate reads nothing from the store: outside the write transaction, which
        # serialises all writers. The guards' reads stay inside it (judge).
        evaluations = self.evaluate_all(notification.alerts)
        cut = truncation(notification)
        for attempt in range(1, INGEST_ATTEMPTS + 1):
            try:
                with self.store.ingest.writer() as w:
                    # First, before any guard read: a replica judging the same keys now waits for this
                    # commit, or this transaction for its (READ COMMITTED then shows its runs to the reads).
                    w.lock_guards(_guard_names(evaluations))
                    notification_id, alert_ids = _record_notification(w, notification, raw, received_at)
                    judged = self.judge(w, evaluations, received_at)
                    run_ids = _record_verdicts(w, notification_id, alert_ids, judged, received_at)
                    if cut is not None:
                        w.insert_decisions([truncation_row(notification_id, alert_ids[0], cut, received_at)])
                break
            except StoreConflict as exc:
                if attempt == INGEST_ATTEMPTS:
                    raise
                # Not a failure: a replica stored the same delivery at the same moment. Judged again,
                # its runs are this notification's duplicates.
                log.info("ingest: %s; judging the notification again (try %d)", exc, attempt + 1)
        result = _result(notification, notification_id, judged, run_ids, cut)
        if cut is not None:
            # After the commit: the line says what the history now holds (notification N).
            log.warning("notification %d: %s", notification_id, cut.note)
        if result.runs_queued and self.on_queued is not None:
            self.on_queued()
        return result


def _record_notification(
    w: IngestWriter, notification: Notification, raw: str, received_at: float
) -> tuple[int, list[int]]:
    """The notification and its alerts: (notification id, alert ids in the notification's order)."""
    notification_id = w.insert_notification(
        received_at=received_at,
        receiver=notification.receiver,
        status=notification.status,
        group_key=notification.group_key,
        alert_count=len(notification.alerts),
        raw=raw,
        notification_reason=notification.notification_reason,
        truncated_alerts=notification.truncated_alerts,
    )
    return notification_id, w.insert_alerts([_alert_row(notification_id, a) for a in notification.alerts])


def _record_verdicts(
    w: IngestWriter, notification_id: int, alert_ids: Sequence[int], judged: Sequence[Judged], received_at: float
) -> dict[int, int]:
    """The accepted runs with their steps, the cancelled approvals, the ladders and every decision:
    run id by id() of the Judged that created it."""
    with_runs = [j for j in judged if j.creates_run]
    priority = queue_priority(len(alert_ids))  # a storm's runs after a single alert's
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
            decision_row(notification_id, alert_ids[j.index], j, run_ids.get(id(j)), statuses.get(id(j)), received_at)
            for j in judged
        ],
    )
    return run_ids


def _result(
    notification: Notification,
    notification_id: int,
    judged: Sequence[Judged],
    run_ids: Mapping[int, int],
    cut: Truncation | None = None,
) -> IngestResult:
    statuses_count = dict(Counter(alert.status for alert in notification.alerts))
    records = [
        DecisionRecord(
            j.alert.name,
            j.alert.fingerprint,
            j.playbook_name,
            j.target,
            j.verdict.decision,
            j.verdict.reason,
            run_ids.get(id(j)),
            j.promotion,
        )
        for j in judged
    ]
    if cut is not None:
        records.append(DecisionRecord(cut.alertname, cut.fingerprint, None, None, Decision.TRUNCATED, cut.note))
    return IngestResult(
        notification_id,
        notification.status,
        len(notification.alerts),
        statuses_count,
        records,
        truncated_alerts=notification.truncated_alerts,
        notification_reason=notification.notification_reason,
    )


def _write_ladders(w: IngestWriter, judged: Sequence[Judged], run_ids: Mapping[int, int], now: float) -> None:
    """Where the ladders stand after this notification: a rung climbed (with its run), or the occurrence
    of the last rung resolved. In the order judge saw them (firing first), in the ingest transaction."""
    written: dict[tuple[str, str], LadderState] = {}
    for j in sorted(judged, key=lambda item: item.phase != "firing"):
        ev = j.evaluation
        if ev is None:
            continue
        key = (ev.playbook.name, ev.guard_key)
        if climbs(ev, j.verdict, j.rung_choice) and id(j) in run_ids:
            state = climbed(
                written.get(key, j.ladder_before),
                playbook=key[0],
                guard_key=key[1],
                target=ev.target,
                choice=j.rung_choice,
                run_id=run_ids[id(j)],
                occurrence=occurrence(j.alert),
                now=now,
            )
        elif j.ladder_resolved is not None:
            state = j.ladder_resolved
        else:
            continue
        w.save_ladder(state)
        written[key] = state


# ------------------------------------------------------------------ the rows of a judged notification


def initial_status(accepted: bool, awaits_approval: bool) -> RunStatus:
    """A new run's status: rejected runs end at once, approve-mode firing runs wait for a person."""
    if not accepted:
        return RunStatus.REJECTED
    return RunStatus.AWAITING_APPROVAL if awaits_approval else RunStatus.QUEUED


def queue_priority(alert_count: int) -> int:
    """The queue priority of the runs of a notification of `alert_count` alerts: lower is claimed first.

    One per order of magnitude (1-9 alerts: 0, 10-99: 1, 100-999: 2, 1,000 and more: 3), so a fresh
    alert's run is claimed before the backlog of a storm, and runs of similar notifications keep their
    arrival order (ties go by run id).
    """
    return min(3, len(str(max(1, alert_count))) - 1)


def run_row(judged: Judged, alert_id: int, now: float, *, priority: int = 0) -> dict[str, Any]:
    """The runs row of a judged pair that creates a run (accepted or rejected); `priority`: queue_priority."""
    ev = judged.evaluation
    if ev is None:
        raise ValueError("an alert no playbook matched creates no run")
    accepted = judged.verdict.accepted
    status = initial_status(accepted, ev.awaits_approval)
    return {
        "dedupe_key": ev.dedupe_key,
        "playbook": ev.playbook.name,
        "alertname": ev.alert.name,
        "target": ev.target,
        "guard_key": ev.guard_key,
        "phase": ev.phase,
        "mode": ev.mode.value,
        "status": status,
        "alert_id": alert_id,
        "after_run_id": judged.firing_run[0] if judged.firing_run else None,
        "created_at": now,
        "updated_at": now,
        "finished_at": now if status is RunStatus.REJECTED else None,
        "error": None if accepted else judged.verdict.reason,
        "rung": judged.rung,
        "priority": priority,
        "playbook_version": ev.playbook.version or None,
        "wave": ev.wave_name,
    }


def step_rows(run_id: int, ev: Evaluation | None, params_json: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The steps rows of a new run, all pending; none when its params did not render.

    `params_json`: the JSON of the steps already written in this transaction, by id() of their rendered
    step (the alerts of a notification whose templates read the same values share one, Engine._render)."""
    if ev is None or ev.error is not None:
        return []
    return [
        {
            "run_id": run_id,
            "idx": index,
            "name": step.spec.name,
            "action": step.spec.action,
            "where": step.where,
            "params": _params_json(step, params_json),
            "timeout": step.timeout,
            "retries": step.spec.retries,
            "always": step.spec.always,
            "continue_on_error": step.spec.continue_on_error,
            "node": step.node,
            "status": StepStatus.PENDING,
        }
        for index, step in enumerate(ev.steps)
    ]


def _params_json(step: RenderedStep, known: dict[int, str] | None) -> str:
    if known is None:
        return json.dumps(step.params, sort_keys=True, default=str)
    # Keyed by id(): the rendered steps stay alive (held by their evaluations) while `known` is used.
    text = known.get(id(step))
    if text is None:
        text = known[id(step)] = json.dumps(step.params, sort_keys=True, default=str)
    return text


def decision_row(
    notification_id: int, alert_id: int, judged: Judged, run_id: int | None, run_status: str | None, now: float
) -> dict[str, Any]:
    """The decisions row of every judged pair: its status is its run's, or the decision when no run was made."""
    return {
        "created_at": now,
        "notification_id": notification_id,
        "alert_id": alert_id,
        "alertname": judged.alert.name,
        "fingerprint": judged.alert.fingerprint,
        "alert_status": judged.alert.status,
        "playbook": judged.playbook_name,
        "target": judged.target,
        "decision": judged.verdict.decision.value,
        "reason": judged.verdict.reason,
        "status": run_status or judged.verdict.decision.value,
        "run_id": run_id,
    }


def truncation_row(notification_id: int, alert_id: int, cut: Truncation, now: float) -> dict[str, Any]:
    """The decisions row saying AlertManager left alerts of the notification out (with its first alert)."""
    return {
        "created_at": now,
        "notification_id": notification_id,
        "alert_id": alert_id,
        "alertname": cut.alertname,
        "fingerprint": cut.fingerprint,
        "alert_status": cut.status,
        "playbook": None,
        "target": None,
        "decision": Decision.TRUNCATED.value,
        "reason": cut.note,
        "status": Decision.TRUNCATED.value,
        "run_id": None,
    }


def _guard_names(evaluations: Sequence[AlertEvaluations]) -> list[str]:
    """The guard keys a notification's verdicts depend on, as lock names: (playbook, guard key) of every
    evaluation. It covers the dedupe keys too: an alert occurrence and a playbook give one guard key (while
    the replicas load the same playbooks; where they differ, the unique dedupe key and StoreConflict hold)."""
    return [guard_lock_name(ev.playbook.name, ev.guard_key) for _, _, evs in evaluations for ev in evs]


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
