"""Judging a staged rollout's promotion: a firing run of a wave that may be promoted (Evaluation.promotion)
takes its mode from the evidence the store holds now (remediate.config.promotion, remediate.store.wave_evidence).

One read per (playbook, version, wave) per notification, inside its ingest transaction (`Promotions`): the
runs of a notification are judged at one instant, and no run ends between its pairs. A person's relabel
still wins: the wave is the one the node's label (feature, partition) names when the run is judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from remediate.config.promotion import Promotion, WaveEvidence, judge
from remediate.judging.evaluation import Evaluation
from remediate.store import GuardReads


@dataclass
class Promotions:
    """The promotions judged for one notification, read once each."""

    reader: GuardReads
    now: float
    _evidence: dict[tuple[str, str, str], WaveEvidence] = field(default_factory=dict)

    def judged(self, ev: Evaluation) -> tuple[Evaluation, Promotion | None]:
        """The evaluation with its mode and wave note as the evidence makes them, and the promotion judged;
        as it was (and None) when its wave cannot be promoted."""
        ask, version = ev.promotion, ev.playbook.version
        if ask is None or ev.phase != "firing" or not version or ev.promoted_mode is None:
            return ev, None
        key = (ev.playbook.name, version, ask.previous)
        if key not in self._evidence:
            self._evidence[key] = self.reader.wave_evidence(
                *key, since=self.now - ask.rule.within, after=ask.rule.after, undoes=ev.playbook.undoes
            )
        found = judge(ask.rule, ask.wave, ask.previous, version, ask.configured.value, self._evidence[key])
        mode = ev.promoted_mode if found.promoted else ev.mode
        # The wave's own note says its mode as written ("...: approve"); the promotion's says what it became.
        written = f"{ev.wave} as written; " if ev.wave and found.promoted else f"{ev.wave}; " if ev.wave else ""
        return replace(ev, mode=mode, wave=f"{written}{found.note}"), found
