"""The shipped gpu-degraded ladder at a test site, driven through a real `remediate serve` as AlertManager drives
it: the agent's GPUPcieDowntrained alert, the shipped playbook with only holds_for (1h) and the cooldown (30m)
shrunk, and the ladder's three moments (rung 1 on the first firing, rung 2 once the re-sent alert has held, the
resolve). Each scheduler's e2e test (tests/e2e/test_kube_degraded.py, tests/e2e/test_slurm_degraded.py) brings
the scheduler's own settings and asserts what the scheduler shows; what is the same for both lives here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import alert_payload, notification_payload
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer
from tests.support.shipped import shipped_playbook
from tests.support.waiting import wait_until

PLAYBOOK = "gpu-degraded"
HOLDS_FOR = "2s"
"""Rung 1's holds_for, shrunk from the shipped 1h: long enough that the first firing stays on rung 1."""

FINISHED = ("succeeded", "failed")


def downtrained(node: str, status: str = "firing") -> dict[str, Any]:
    """GPUPcieDowntrained on GPU 1 of `node` (x8 of x16), with the labels and annotations the agent sends."""
    labels = {"severity": "warning", "source": "nvml", "node": node, "UUID": "GPU-5151", "gpu": "1"}
    notes = {
        "summary": f"GPU 1 (GPU-5151) on {node}: PCIe link downtrained: pcie width x8 < max x16",
        "evidence": "pcie width x8 < max x16",
        "pcie_width": "x8 of x16",
        "pcie_gen": "5 of 5",
        "utilization": "0%",
    }
    return alert_payload(
        "GPUPcieDowntrained", status=status, labels=labels, annotations=notes, starts_at="2026-12-03T10:00:00Z"
    )


def shrunk_playbooks(directory: Path) -> Path:
    """`directory`, made, holding only the shipped gpu-degraded: cooldown 0s (the resolve's undo runs at once)
    and rung 1 held for HOLDS_FOR; its steps and messages as shipped."""
    playbook = shipped_playbook(PLAYBOOK)
    playbook["cooldown"] = "0s"
    playbook["escalate"][0]["holds_for"] = HOLDS_FOR
    directory.mkdir()
    (directory / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    return directory


@dataclass(frozen=True)
class DegradedLadder:
    """The ladder of one node's downtrained link on a started server; each move returns the history entry of the
    run it made (`settled` waits for that run to finish and returns its detail)."""

    server: RemediateServer
    node: str

    def _post(self, status: str) -> None:
        self.server.post_webhook(notification_payload(downtrained(self.node, status))).raise_for_status()

    def fire(self) -> dict[str, Any]:
        """The first firing: the run it made."""
        self._post("firing")
        return self.server.wait_for_run(playbook=PLAYBOOK)

    def climb(self) -> dict[str, Any]:
        """The alert re-sent while it fires, as AlertManager does, until a run is on rung 2: that run."""

        def climbed() -> dict[str, Any] | None:
            self._post("firing")
            return next((e for e in self.server.runs(playbook=PLAYBOOK) if e["rung"] == 2), None)

        entry: dict[str, Any] = wait_until(climbed, 30, interval=0.5)
        return entry

    def resolve(self) -> dict[str, Any]:
        """The resolve: the run of the playbook's undo."""
        self._post("resolved")
        return self.server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook=PLAYBOOK)

    def settled(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The detail of `entry`'s run once it has succeeded or failed."""
        return self.server.wait_for_run_status(entry["run_id"], *FINISHED)


def start_ladder(
    start_server: Callable[..., RemediateServer],
    tmp_path: Path,
    recorder: WebhookRecorder,
    node: str,
    scheduler_env: dict[str, str],
) -> DegradedLadder:
    """A server running only the shrunk gpu-degraded (tmp_path/degraded), its `oncall` sink posting to
    `recorder`, with the scheduler's settings `scheduler_env`; the ladder of `node` on it."""
    server = start_server(
        playbooks=shrunk_playbooks(tmp_path / "degraded"),
        env={**scheduler_env, "REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": recorder.url}})},
    )
    return DegradedLadder(server, node)
