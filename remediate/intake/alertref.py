"""The alert as a step sees it: `AlertRef`, a small frozen value on `StepContext.alert`.

Actions need a handful of the alert's facts (its labels name the node or the job, its fingerprint and
start identify the occurrence, notify.webhook forwards the rest). They get them here, already read, so
no action imports intake (remediate.intake.alerts) to rebuild the alert: the executor, the agent and the dry
run build the value with `remediate.intake.alerts.alert_ref`, which parses startsAt once.

On the wire (the agent's step request) and in templates the alert is the mapping `as_mapping` returns:
the AlertManager spelling (startsAt, endsAt, generatorURL), unchanged from before the value existed.

`node_label` reads the node an alert names (its first label of an order; `instance` without its port): the
playbook's target and the node of a k8s.* step are both found this way.

Pure: this module imports nothing of remediate, so actions, runners, kube and intake can all use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class AlertRef:
    """One alert's facts, read-only. `AlertRef()` is "no alert" (CLI plans, tests of label-free actions)."""

    alertname: str = ""
    status: str = ""
    fingerprint: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: float | None = None
    """startsAt as epoch seconds; None when absent or not an RFC 3339 time (Go's zero time is negative)."""
    starts_at_text: str = ""
    """startsAt exactly as AlertManager sent it: fingerprint + this text identify one occurrence, and
    re-formatting the parsed time would lose the nanoseconds."""
    ends_at_text: str = ""
    generator_url: str = ""

    def __post_init__(self) -> None:
        # Read-only copies: an action cannot change the alert another step (or the caller) sees.
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))

    def as_mapping(self) -> dict[str, Any]:
        """The template-context / agent-wire shape (fresh dicts)."""
        return {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "status": self.status,
            "alertname": self.alertname,
            "fingerprint": self.fingerprint,
            "startsAt": self.starts_at_text,
            "endsAt": self.ends_at_text,
            "generatorURL": self.generator_url,
        }


def node_label(labels: Mapping[str, str], order: Iterable[str]) -> tuple[str, str] | None:
    """The first label of `order` that `labels` has, as (label, value); `instance` loses its port. None: none."""
    for label in order:
        value = labels.get(label, "")
        if value:
            return label, strip_port(value) if label == "instance" else value
    return None


def strip_port(instance: str) -> str:
    """`node-1:9100` -> `node-1`; `[::1]:9100` -> `::1`; anything else unchanged."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else instance
