"""`k8s.cordon`, `k8s.uncordon`, `k8s.taint`, `k8s.untaint`, `k8s.drain`: take a node out of service, and back.

The node comes from the step's `node` param or, by default, from the alert's labels in
the configured order (kube_node_labels: node, kubernetes_node, Hostname, hostname,
instance without its port); it must be a DNS-1123 name and exist, or the step fails
before anything changes.

Safety, in order of importance:

- Cordon, taint and drain claim the node from the circuit breaker first
  (`StepContext.breaker`, remediate.breaker): past the cap the step fails with
  `breaker open: ...` and nothing changes. Uncordon and untaint are never refused.
- Remediate only undoes its own changes. What it did is written on the node, in
  remediate.io/ annotations, by the same write that makes the change (see
  remediate.kube.model). A node someone else cordoned or tainted is left alone, and
  the result says so.
- Writes are conditional on the resourceVersion just read (a 409 means someone else
  wrote in between: re-read and decide again), so taints of others are never lost
  even though a strategic-merge patch replaces the whole `spec.taints` list.
- No change is made twice: every decision starts from a fresh read (a retry after a
  lost answer finds the change already there), events have names derived from the run
  and step (a second create is a 409, i.e. done), and evicting a pod that is already
  terminating changes nothing. All five actions are therefore idempotent.
- Transient API errors (5xx, timeouts, resets, throttling) are retried a few times per
  call with tenacity; if they persist the step fails retryable and the executor
  retries the whole step. Other 4xx fail at once with the API's message.

Every change gets an events.k8s.io/v1 Event on the node (`kubectl describe node`
shows it): timezone-aware eventTime, regarding the node with its uid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from remediate.actions.base import Action, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.alerts import parse_timestamp
from remediate.errors import ActionError, PayloadError, RetryableActionError
from remediate.kube import (
    CORDONED_AT,
    CORDONED_BY_RUN,
    CORDONED_FOR_ALERT,
    TAINT_EFFECTS,
    TAINTS,
    DrainOptions,
    EventSpec,
    KubeClient,
    KubeConflict,
    KubeError,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    NodeInfo,
    NodeNameError,
    NodeRef,
    PodInfo,
    Taint,
    check_node_name,
    check_taint_key,
    check_taint_value,
    classify_pod,
    pdb_forecast,
    resolve_node_name,
)

log = logging.getLogger("remediate.actions.kubernetes")

T = TypeVar("T")
ClientProvider = Callable[[], KubeClient]
NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname", "instance")
REPORTING_CONTROLLER = "remediate.io/remediate"


@dataclass(frozen=True)
class KubeOptions:
    """How the k8s.* actions behave; built from Settings by `default_registry`."""

    node_labels: tuple[str, ...] = NODE_LABELS
    node_selector: str | None = None
    """Label selector of the nodes the breaker's fraction counts (None: all nodes)."""
    reporting_instance: str = socket.gethostname()
    api_attempts: int = 4
    """Attempts per API call on transient errors (5xx, timeouts, resets, throttling)."""
    api_retry_wait: float = 0.2
    """First wait between those attempts (doubling, at most 2 s)."""
    conflict_attempts: int = 8
    """Read-modify-write rounds when the node keeps changing (409) before the step gives up (retryable)."""


def _iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_node(value: str) -> str | None:
    return check_node_name(value)


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be greater than 0"


def _not_negative(value: int) -> str | None:
    return None if value >= 0 else "must be 0 or more"


NODE_PARAM = Param(
    str,
    check=_check_node,
    doc="node name; default: the first of the alert's labels node, kubernetes_node, Hostname, hostname, instance",
)
NOTE_PARAM = Param(str, default="", doc="free text added to the Kubernetes Event's note")
SCOPE_PARAM = Param(
    str,
    default="alert",
    choices=("alert", "any"),
    doc="alert: undo only what was done for this same alert; any: undo any change remediate made",
)


class _KubeAction(Action):
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = True
    verb: ClassVar[str] = ""

    def __init__(self, client: ClientProvider, options: KubeOptions | None = None) -> None:
        self._client_provider = client
        self.options = options or KubeOptions()

    @property
    def client(self) -> KubeClient:
        return self._client_provider()

    # ------------------------------------------------------------------ API calls

    def _api(self, ctx: StepContext, what: Callable[[KubeClient], T], *, throttled: bool = True) -> T:
        """One API call, retried on transient errors (and on 429 throttling unless `throttled` is False)."""
        kinds: tuple[type[Exception], ...] = (KubeUnavailable, KubeTooManyRequests) if throttled else (KubeUnavailable,)
        retrying = Retrying(
            stop=stop_after_attempt(self.options.api_attempts) | stop_after_delay(max(0.0, ctx.remaining() - 0.5)),
            wait=wait_exponential(multiplier=self.options.api_retry_wait, min=self.options.api_retry_wait, max=2.0),
            retry=retry_if_exception_type(kinds),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return what(self.client)
        raise KubeUnavailable("no attempt was made (the step's deadline has passed)")  # pragma: no cover

    def _node_ref(self, params: Mapping[str, Any], ctx: StepContext) -> NodeRef:
        labels = ctx.alert.get("labels") or {}
        try:
            return resolve_node_name(labels, self.options.node_labels, params.get("node"))
        except NodeNameError as exc:
            raise ActionError(str(exc)) from exc

    def _read_node(self, ref: NodeRef, ctx: StepContext) -> NodeInfo:
        try:
            return self._api(ctx, lambda c: c.get_node(ref.name))
        except KubeNotFound as exc:
            raise ActionError(f"node {ref.name!r} (from {ref.source}) does not exist in the cluster") from exc

    def _cluster_view(self, ctx: StepContext) -> tuple[int, set[str]]:
        """(nodes the breaker's fraction counts, nodes holding remediate's marks now)."""
        nodes = self._api(ctx, lambda c: c.list_nodes())
        held = {n.name for n in nodes if n.held_by_remediate}
        if self.options.node_selector:
            selector = self.options.node_selector
            return len(self._api(ctx, lambda c: c.list_nodes(selector))), held
        return len(nodes), held

    def _acquire(self, node: str, kind: str, ctx: StepContext) -> dict[str, Any]:
        if ctx.breaker is None:
            raise ActionError(f"no circuit breaker available: refusing to {kind} node {node} without one")
        cluster_nodes, held = self._cluster_view(ctx)
        return ctx.breaker.acquire(
            node,
            kind=kind,
            run_id=ctx.run_id,
            cluster_nodes=cluster_nodes,
            held_in_cluster=held,
            alert_started_at=_alert_started_at(ctx),
        )

    def _release(self, node: NodeInfo, ctx: StepContext) -> bool:
        if ctx.breaker is None or node.held_by_remediate:
            return False
        return ctx.breaker.release(node.name, run_id=ctx.run_id, reason=f"{self.name} by run {ctx.run_id}") > 0

    def _breaker_preview(self, node: str, ctx: StepContext) -> dict[str, Any]:
        """The breaker's state for a plan, and whether a change of `node` would be refused now. Reads only."""
        if ctx.breaker is None:
            return {"state": "unknown", "note": "no circuit breaker here (no store): execute would refuse"}
        cluster_nodes, held_in_cluster = self._cluster_view(ctx)
        status = ctx.breaker.status(cluster_nodes)
        held = set(status["held_nodes"]) | held_in_cluster
        recent = set(status["recent_nodes"])
        cap = status["cap"] if status["cap"] is not None else 0
        if status["open"]:
            verdict = "refused: the breaker is open"
        elif node in held:
            verdict = "allowed: the node already counts as held by remediate"
        elif len(held | {node}) > cap or len(recent | {node}) > cap:
            counts = f"{len(held | {node})} held / {len(recent | {node})} recent > cap {cap}"
            verdict = f"refused: it would trip the breaker ({counts})"
        else:
            verdict = f"allowed: {len(held | {node})} of at most {cap} nodes held"
        return {
            "state": status["state"],
            "would_be": verdict,
            "held_nodes": sorted(held),
            "recent_nodes": sorted(recent),
            "cap": cap,
            "cap_rule": status["cap_rule"],
            "cluster_nodes": cluster_nodes,
            "reason": status["reason"] or None,
            "reset_at": status["reset_at"],
            "alert_started_at": _alert_started_at(ctx),
        }

    # ------------------------------------------------------------------ events

    def _event(
        self,
        ctx: StepContext,
        node: NodeInfo,
        *,
        verb: str,
        reason: str,
        type_: str,
        note: str,
        change: str | None = None,
    ) -> dict[str, Any]:
        """Record a change on the node as an Event; a failure to record is reported, never undoes the change.

        `change` names the change within the run (default: this step's verb): the same change announced
        again (a retried step, drain's cordon after a cordon step) finds its event there (409) instead
        of adding a second one.
        """
        spec = EventSpec(
            name=_event_name(node.name, ctx.run_id, change or f"{ctx.step_index}.{verb}"),
            node=node.name,
            node_uid=node.uid,
            action=verb.capitalize(),
            reason=reason,
            type=type_,
            note=f"{note} [remediate run {ctx.run_id}, playbook {ctx.playbook}]",
            time=datetime.now(UTC),
            reporting_controller=REPORTING_CONTROLLER,
            reporting_instance=self.options.reporting_instance,
        )
        try:
            self._api(ctx, lambda c: c.create_event(spec))
        except KubeConflict:
            return {"name": spec.name, "reason": reason, "created": "earlier (an earlier attempt of this step)"}
        except (KubeError, KubeUnavailable) as exc:
            log.warning("could not record event %s on node %s: %s", reason, node.name, exc)
            return {"name": spec.name, "reason": reason, "error": str(exc)}
        return {"name": spec.name, "reason": reason, "created": True}

    # ------------------------------------------------------------------ shared: cordon

    def _cordon(self, ref: NodeRef, ctx: StepContext, *, kind: str, note: str) -> dict[str, Any]:
        breaker: dict[str, Any] | None = None
        for _ in range(self.options.conflict_attempts):
            node = self._read_node(ref, ctx)
            if node.unschedulable:
                if node.cordoned_by_run == ctx.run_id:
                    # An earlier attempt of this run cordoned it (its answer was lost): finish, do not redo.
                    event = self._event(
                        ctx,
                        node,
                        verb="cordon",
                        reason="RemediateCordoned",
                        type_="Warning",
                        note=_cordon_note(note),
                        change="cordon",
                    )
                    return {"outcome": "cordoned", "node": node.name, "event": event, "breaker": breaker}
                if node.cordoned_by_run is not None:
                    return {
                        "outcome": "already_cordoned_by_remediate",
                        "node": node.name,
                        "cordoned_by_run": node.cordoned_by_run,
                        "reason": f"run {node.cordoned_by_run} cordoned it already; nothing to do",
                    }
                return {
                    "outcome": "left_alone",
                    "node": node.name,
                    "reason": "already cordoned by someone else (no remediate.io/cordoned-by-run annotation): "
                    "left as it is, and remediate will not uncordon it",
                }
            if breaker is None:
                breaker = self._acquire(node.name, kind, ctx)
            patch = {
                "metadata": {
                    "resourceVersion": node.resource_version,
                    "annotations": {
                        CORDONED_BY_RUN: str(ctx.run_id),
                        CORDONED_FOR_ALERT: str(ctx.alert.get("fingerprint", "")),
                        CORDONED_AT: _iso_now(),
                    },
                },
                "spec": {"unschedulable": True},
            }
            try:
                updated = self._api(ctx, lambda c, n=node.name, p=patch: c.patch_node(n, p))
            except KubeConflict:
                continue
            event = self._event(
                ctx,
                updated,
                verb="cordon",
                reason="RemediateCordoned",
                type_="Warning",
                note=_cordon_note(note),
                change="cordon",
            )
            return {"outcome": "cordoned", "node": node.name, "event": event, "breaker": breaker}
        raise _kept_changing(ref.name, self.options.conflict_attempts)


class CordonAction(_KubeAction):
    name: ClassVar[str] = "k8s.cordon"
    description: ClassVar[str] = "Mark a node unschedulable, recording that remediate did it (circuit breaker)."
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema({"node": NODE_PARAM, "note": NOTE_PARAM})

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        node = self._read_node(ref, ctx)
        if not node.unschedulable:
            would = "cordon the node and annotate it with this run"
        elif node.cordoned_by_run is not None:
            would = f"nothing: run {node.cordoned_by_run} of remediate cordoned it already"
        else:
            would = "nothing: someone else cordoned it (remediate will not uncordon it)"
        return {
            "node": ref.name,
            "from": ref.source,
            "found": True,
            "current": node.summary(),
            "would": would,
            "breaker": self._breaker_preview(ref.name, ctx),
        }

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return self._cordon(self._node_ref(params, ctx), ctx, kind="cordon", note=params.get("note", ""))


class UncordonAction(_KubeAction):
    name: ClassVar[str] = "k8s.uncordon"
    description: ClassVar[str] = "Make a node schedulable again, only if remediate cordoned it. Never refused."
    schema: ClassVar[ParamSchema] = ParamSchema({"node": NODE_PARAM, "note": NOTE_PARAM, "scope": SCOPE_PARAM})

    def _decide(self, node: NodeInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[bool, str]:
        if not node.unschedulable:
            return False, "not cordoned: nothing to undo"
        if node.cordoned_by_run is None:
            return False, (
                "left alone: cordoned by someone else (no remediate.io/cordoned-by-run annotation), "
                "remediate only undoes its own cordon"
            )
        alert = str(ctx.alert.get("fingerprint", ""))
        if params["scope"] == "alert" and node.cordoned_for_alert and node.cordoned_for_alert != alert:
            return False, (
                f"left alone: run {node.cordoned_by_run} cordoned it for another alert "
                f"({node.cordoned_for_alert}); that alert's resolution uncordons it (scope: any would now)"
            )
        return True, f"uncordon: run {node.cordoned_by_run} of remediate cordoned it"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        node = self._read_node(ref, ctx)
        _, why = self._decide(node, params, ctx)
        return {"node": ref.name, "from": ref.source, "found": True, "current": node.summary(), "would": why}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        for _ in range(self.options.conflict_attempts):
            node = self._read_node(ref, ctx)
            undo, why = self._decide(node, params, ctx)
            if not undo:
                stale_marks = not node.unschedulable and any(k in node.annotations for k in (CORDONED_BY_RUN,))
                if stale_marks:
                    # Someone uncordoned it by hand: drop remediate's leftover marks (no event: nothing changes).
                    cleanup = _drop_cordon_marks(node)
                    try:
                        node = self._api(ctx, lambda c, p=cleanup: c.patch_node(ref.name, p))
                    except KubeConflict:
                        continue
                released = self._release(node, ctx)
                return {"outcome": "left_alone", "node": ref.name, "reason": why, "breaker_released": released}
            patch = _uncordon_patch(node)
            try:
                updated = self._api(ctx, lambda c, p=patch: c.patch_node(ref.name, p))
            except KubeConflict:
                continue
            event = self._event(
                ctx,
                updated,
                verb="uncordon",
                change="uncordon",
                reason="RemediateUncordoned",
                type_="Normal",
                note=f"uncordoned by remediate (it cordoned the node in run {node.cordoned_by_run}). "
                + params.get("note", ""),
            )
            return {
                "outcome": "uncordoned",
                "node": ref.name,
                "cordoned_by_run": node.cordoned_by_run,
                "event": event,
                "breaker_released": self._release(updated, ctx),
            }
        raise _kept_changing(ref.name, self.options.conflict_attempts)


def _uncordon_patch(node: NodeInfo) -> dict[str, Any]:
    patch = _drop_cordon_marks(node)
    patch["spec"] = {"unschedulable": None}
    return patch


def _drop_cordon_marks(node: NodeInfo) -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": node.resource_version,
            "annotations": {CORDONED_BY_RUN: None, CORDONED_FOR_ALERT: None, CORDONED_AT: None},
        }
    }


# --------------------------------------------------------------------------- taints


def _check_key(value: str) -> str | None:
    return check_taint_key(value)


def _check_value(value: str) -> str | None:
    return check_taint_value(value)


class TaintAction(_KubeAction):
    name: ClassVar[str] = "k8s.taint"
    description: ClassVar[str] = "Add a taint to a node without losing others (read-modify-write, circuit breaker)."
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "node": NODE_PARAM,
            "key": Param(str, required=True, static=True, check=_check_key, doc="taint key, e.g. remediate.io/gpu-xid"),
            "value": Param(str, default="", check=_check_value, doc="taint value (may come from the alert)"),
            "effect": Param(str, default="NoSchedule", static=True, choices=TAINT_EFFECTS),
            "note": NOTE_PARAM,
        }
    )

    def _decide(self, node: NodeInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[str, str]:
        """(add | done | already | left_alone, why)."""
        wanted = Taint(params["key"], params["effect"], params.get("value") or None)
        record = node.owned_taints().get(wanted.id)
        present = next((t for t in node.taints if t.id == wanted.id), None)
        if present is None:
            return "add", f"add {wanted.describe()}"
        if record is None:
            return "left_alone", (
                f"left alone: {present.describe()} is already on the node, put there by someone else "
                "(remediate will not remove it)"
            )
        if record.get("run") == ctx.run_id:
            return "done", f"{present.describe()} added by this run (an earlier attempt)"
        return "already", f"{present.describe()} already added by remediate run {record.get('run')}; nothing to do"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        node = self._read_node(ref, ctx)
        _, why = self._decide(node, params, ctx)
        return {
            "node": ref.name,
            "from": ref.source,
            "found": True,
            "current": node.summary(),
            "would": why,
            "breaker": self._breaker_preview(ref.name, ctx),
        }

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        wanted = Taint(
            params["key"],
            params["effect"],
            params.get("value") or None,
            _iso_now() if params["effect"] == "NoExecute" else None,
        )
        note = f"taint {wanted.describe()} added by remediate. {params.get('note', '')}".strip()
        change = f"taint.{_digest(wanted.id)}"
        breaker: dict[str, Any] | None = None
        for _ in range(self.options.conflict_attempts):
            node = self._read_node(ref, ctx)
            what, why = self._decide(node, params, ctx)
            if what == "done":
                event = self._event(
                    ctx, node, verb="taint", reason="RemediateTainted", type_="Warning", note=note, change=change
                )
                return {"outcome": "tainted", "node": ref.name, "taint": wanted.describe(), "event": event}
            if what in ("already", "left_alone"):
                outcome = "already_tainted_by_remediate" if what == "already" else "left_alone"
                return {"outcome": outcome, "node": ref.name, "reason": why}
            if breaker is None:
                breaker = self._acquire(node.name, "taint", ctx)
            records = node.owned_taints()
            records[wanted.id] = {
                "run": ctx.run_id,
                "alert": str(ctx.alert.get("fingerprint", "")),
                "value": wanted.value,
                "at": _iso_now(),
            }
            patch = {
                "metadata": {
                    "resourceVersion": node.resource_version,
                    "annotations": {TAINTS: json.dumps(records, sort_keys=True)},
                },
                # A strategic-merge patch replaces the whole list: write every taint the node had, plus ours.
                "spec": {"taints": [t.to_api() for t in node.taints] + [wanted.to_api()]},
            }
            try:
                updated = self._api(ctx, lambda c, p=patch: c.patch_node(ref.name, p))
            except KubeConflict:
                continue
            event = self._event(
                ctx, updated, verb="taint", reason="RemediateTainted", type_="Warning", note=note, change=change
            )
            return {
                "outcome": "tainted",
                "node": ref.name,
                "taint": wanted.describe(),
                "taints_now": [t.describe() for t in updated.taints],
                "event": event,
                "breaker": breaker,
            }
        raise _kept_changing(ref.name, self.options.conflict_attempts)


class UntaintAction(_KubeAction):
    name: ClassVar[str] = "k8s.untaint"
    description: ClassVar[str] = "Remove taints remediate added (never others'). Never refused by the breaker."
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "node": NODE_PARAM,
            "key": Param(str, required=True, static=True, check=_check_key),
            "effect": Param(str, static=True, choices=TAINT_EFFECTS, doc="default: every effect of `key`"),
            "note": NOTE_PARAM,
            "scope": SCOPE_PARAM,
        }
    )

    def _split(self, node: NodeInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[list[Taint], list[str]]:
        """(taints of ours to remove, why each other matching taint stays)."""
        owned = node.owned_taints()
        alert = str(ctx.alert.get("fingerprint", ""))
        ours, kept = [], []
        for taint in node.taints:
            if taint.key != params["key"] or (params.get("effect") and taint.effect != params["effect"]):
                continue
            record = owned.get(taint.id)
            if record is None:
                kept.append(f"{taint.describe()}: put there by someone else")
            elif params["scope"] == "alert" and record.get("alert") and record.get("alert") != alert:
                kept.append(f"{taint.describe()}: added by run {record.get('run')} for another alert")
            else:
                ours.append(taint)
        return ours, kept

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        node = self._read_node(ref, ctx)
        ours, kept = self._split(node, params, ctx)
        return {
            "node": ref.name,
            "from": ref.source,
            "found": True,
            "current": node.summary(),
            "would_remove": [t.describe() for t in ours],
            "would_keep": kept,
        }

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        for _ in range(self.options.conflict_attempts):
            node = self._read_node(ref, ctx)
            ours, kept = self._split(node, params, ctx)
            if not ours:
                return {
                    "outcome": "left_alone" if kept else "not_tainted",
                    "node": ref.name,
                    "kept": kept,
                    "breaker_released": self._release(node, ctx),
                }
            gone = {t.id for t in ours}
            records = {k: v for k, v in node.owned_taints().items() if k not in gone}
            patch = {
                "metadata": {
                    "resourceVersion": node.resource_version,
                    "annotations": {TAINTS: json.dumps(records, sort_keys=True) if records else None},
                },
                "spec": {"taints": [t.to_api() for t in node.taints if t.id not in gone]},
            }
            try:
                updated = self._api(ctx, lambda c, p=patch: c.patch_node(ref.name, p))
            except KubeConflict:
                continue
            removed = [t.describe() for t in ours]
            event = self._event(
                ctx,
                updated,
                verb="untaint",
                change=f"untaint.{_digest(*sorted(gone))}",
                reason="RemediateUntainted",
                type_="Normal",
                note=f"removed {', '.join(removed)} (added by remediate). {params.get('note', '')}".strip(),
            )
            return {
                "outcome": "untainted",
                "node": ref.name,
                "removed": removed,
                "kept": kept,
                "event": event,
                "breaker_released": self._release(updated, ctx),
            }
        raise _kept_changing(ref.name, self.options.conflict_attempts)


# --------------------------------------------------------------------------- drain


class DrainAction(_KubeAction):
    name: ClassVar[str] = "k8s.drain"
    description: ClassVar[str] = "Cordon a node and evict its pods like kubectl drain, honouring PodDisruptionBudgets."
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "node": NODE_PARAM,
            "grace_period_seconds": Param(int, check=_not_negative, doc="eviction grace period; default: the pod's"),
            "timeout": Param(float, default=300.0, check=_positive, doc="seconds to evict and wait for the pods"),
            "pdb_retry_interval": Param(
                float, default=5.0, check=_positive, doc="first wait before evicting a pod a PDB blocked (doubles)"
            ),
            "force": Param(bool, default=False, doc="also evict pods no controller manages"),
            "delete_emptydir_data": Param(bool, default=False, doc="also evict pods with emptyDir volumes"),
            "cordon": Param(bool, default=True, doc="cordon the node first (kubectl drain does)"),
            "wait_for_delete": Param(bool, default=True, doc="wait until evicted pods are gone or replaced"),
            "allow_incomplete": Param(
                bool, default=False, doc="succeed even if pods are still blocked or terminating at the timeout"
            ),
            "note": NOTE_PARAM,
        }
    )

    def _pods(self, node: str, params: Mapping[str, Any], ctx: StepContext) -> list[Any]:
        options = DrainOptions(force=params["force"], delete_emptydir_data=params["delete_emptydir_data"])
        pods = self._api(ctx, lambda c: c.pods_on_node(node))
        return [classify_pod(p, options) for p in sorted(pods, key=lambda p: p.ref)]

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self._node_ref(params, ctx)
        node = self._read_node(ref, ctx)
        verdicts = self._pods(node.name, params, ctx)
        evict = [v.pod for v in verdicts if v.action == "evict"]
        pdb_error = None
        try:
            pdbs = self._api(ctx, lambda c: c.list_pdbs())
        except (KubeError, KubeUnavailable) as exc:
            # Only the forecast needs them (execute learns of PDBs from the evictions' 429s): say so, go on.
            pdbs, pdb_error = [], f"cannot read PodDisruptionBudgets, so blocking ones are not forecast: {exc}"
        forecast = pdb_forecast(evict, pdbs)
        blocking = sorted({p for f in forecast.values() if f["blocked_by"] for p in f["pdbs"]})
        notes = [pdb_error] if pdb_error else []
        return {
            "node": ref.name,
            "from": ref.source,
            "found": True,
            "current": node.summary(),
            "would_cordon": params["cordon"] and not node.unschedulable,
            "would_evict": [{"pod": p.ref, **forecast[p.ref]} for p in evict],
            "would_skip": [v.to_dict() for v in verdicts if v.action == "skip"],
            "refused": [v.to_dict() for v in verdicts if v.action == "refuse"],
            "pdbs_that_would_block": blocking,
            "breaker": self._breaker_preview(ref.name, ctx),
            "notes": notes,
        }

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        started = time.monotonic()
        deadline = min(started + params["timeout"], time.monotonic() + max(0.0, ctx.remaining() - 1.0))
        ref = self._node_ref(params, ctx)
        result: dict[str, Any] = {"node": ref.name}
        if params["cordon"]:
            result["cordon"] = self._cordon(ref, ctx, kind="drain", note=params.get("note", ""))
        node = self._read_node(ref, ctx)
        result["breaker"] = self._acquire(node.name, "drain", ctx)
        verdicts = self._pods(node.name, params, ctx)
        skipped = [v.to_dict() for v in verdicts if v.action == "skip"]
        refused = [v.to_dict() for v in verdicts if v.action == "refuse"]
        if refused:
            raise ActionError(
                f"drain of {node.name} refused before evicting anything, as kubectl drain would: "
                + "; ".join(f"{r['pod']} {r['reason']}" for r in refused)
                + (f" (node cordoned: {result['cordon']['outcome']})" if "cordon" in result else "")
            )
        pending: dict[str, PodInfo] = {v.pod.ref: v.pod for v in verdicts if v.action == "evict"}
        evicted: dict[str, PodInfo] = {}
        already_gone: list[str] = []
        blocked: dict[str, str] = {}
        wait = params["pdb_retry_interval"]
        grace = params.get("grace_period_seconds")
        while pending:
            for pod_ref, pod in list(pending.items()):
                try:
                    self._api(ctx, lambda c, p=pod: c.evict_pod(p.namespace, p.name, grace), throttled=False)
                except KubeNotFound:
                    already_gone.append(pod_ref)
                except KubeTooManyRequests as exc:
                    blocked[pod_ref] = _blocked_reason(exc)
                    continue
                except KubeUnavailable as exc:
                    # e.g. "more than one PodDisruptionBudget" (500): keep trying until the timeout.
                    blocked[pod_ref] = str(exc)
                    continue
                except KubeError as exc:
                    left = {**blocked, **{p: "not tried" for p in pending}}
                    raise ActionError(
                        f"drain of {node.name}: eviction of {pod_ref} failed: {exc}. "
                        + _drain_summary(evicted, already_gone, skipped, left)
                    ) from exc
                else:
                    evicted[pod_ref] = pod
                pending.pop(pod_ref)
                blocked.pop(pod_ref, None)
            if not pending or time.monotonic() + wait > deadline:
                break
            time.sleep(wait)
            wait = min(wait * 2, max(params["pdb_retry_interval"], 30.0))
        terminating = self._wait_gone(evicted, deadline, ctx) if params["wait_for_delete"] else []
        complete = not pending and not terminating
        result.update(
            evicted=[{"pod": r, "uid": p.uid} for r, p in evicted.items()],
            already_gone=already_gone,
            skipped=skipped,
            blocked=[{"pod": r, "reason": blocked.get(r, "not evicted before the timeout")} for r in pending],
            still_terminating=terminating,
            complete=complete,
            seconds=round(time.monotonic() - started, 3),
        )
        summary = _drain_summary(evicted, already_gone, skipped, {r: blocked.get(r, "") for r in pending})
        if terminating:
            summary += f"; still terminating: {', '.join(terminating)}"
        result["event"] = self._event(
            ctx,
            node,
            verb="drain",
            reason="RemediateDrained" if complete else "RemediateDrainIncomplete",
            type_="Warning",
            note=f"drained by remediate: {summary}. {params.get('note', '')}".strip(),
        )
        if not complete and not params["allow_incomplete"]:
            raise ActionError(
                f"drain of {node.name} incomplete after {params['timeout']:g}s: {summary} "
                "(the node stays cordoned; set allow_incomplete: true to accept this)"
            )
        return result

    def _wait_gone(self, evicted: Mapping[str, PodInfo], deadline: float, ctx: StepContext) -> list[str]:
        """Wait until each evicted pod is gone (404) or replaced (same name, new UID); return those that are not."""
        waiting = dict(evicted)
        pause = 0.05
        while waiting:
            for pod_ref, pod in list(waiting.items()):
                try:
                    current = self._api(ctx, lambda c, p=pod: c.get_pod(p.namespace, p.name))
                except KubeNotFound:
                    waiting.pop(pod_ref)
                    continue
                except KubeUnavailable:
                    continue
                if current.uid != pod.uid:
                    waiting.pop(pod_ref)
            if not waiting or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        return sorted(waiting)


# --------------------------------------------------------------------------- helpers


def _alert_started_at(ctx: StepContext) -> float | None:
    value = ctx.alert.get("startsAt")
    if not value:
        return None
    try:
        return parse_timestamp(str(value), "startsAt").timestamp()
    except PayloadError:
        return None


def _event_name(node: str, run_id: int, change: str) -> str:
    """Deterministic per (node, run, change): a retried create is a 409, not a second event."""
    suffix = f".remediate.{run_id}.{change}"
    return node[: 253 - len(suffix)].rstrip(".-") + suffix


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:10]


def _cordon_note(note: str) -> str:
    return f"cordoned by remediate. {note}".strip()


def _kept_changing(node: str, attempts: int) -> RetryableActionError:
    return RetryableActionError(
        f"node {node} changed between every read and write ({attempts} conflicts in a row, 409): "
        "gave up for now; a retry of the step starts again from a fresh read"
    )


def _blocked_reason(exc: KubeTooManyRequests) -> str:
    status = exc.status
    causes = [str(c.get("message", "")) for c in (status.causes if status else ()) if c.get("message")]
    return "; ".join(causes) or (status.message if status else str(exc))


def _drain_summary(
    evicted: Mapping[str, Any], gone: list[str], skipped: list[dict[str, Any]], blocked: Mapping[str, str]
) -> str:
    parts = [f"evicted {len(evicted)}" + (f" ({', '.join(evicted)})" if evicted else "")]
    if gone:
        parts.append(f"already gone {len(gone)} ({', '.join(gone)})")
    parts.append(f"skipped {len(skipped)}" + (f" ({', '.join(s['pod'] for s in skipped)})" if skipped else ""))
    if blocked:
        parts.append("blocked " + "; ".join(f"{p}: {why}" if why else p for p, why in blocked.items()))
    return ", ".join(parts)


def kube_actions(client: ClientProvider, options: KubeOptions | None = None) -> list[Action]:
    return [cls(client, options) for cls in (CordonAction, UncordonAction, TaintAction, UntaintAction, DrainAction)]
