"""End to end: escalation ladders with the real Prometheus and AlertManager.

A dcgm-exporter-like gauge toggled by the test -> a real Prometheus rule -> a real AlertManager ->
`remediate serve` (gunicorn): an alert that keeps re-firing climbs the ladder rung by rung, one that
stays resolved resets it, a restart of the server in the middle keeps the rung, and a GPU that stays hot
climbs while AlertManager re-sends the same occurrence. Two replicas on one PostgreSQL agree on the
rung. The rungs are `log` steps: what is checked is which rung ran when, and why.

Run with `pytest -s` to see the ladder's /history (the JSON the issue's closing note shows).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, check_rules
from tests.support.server import WAIT, RemediateServer, notification, write_playbook
from tests.support.service import ServiceProxy
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

RULES = """\
groups:
  - name: gpu
    rules:
      - alert: GPUTemperatureHigh
        expr: DCGM_FI_DEV_GPU_TEMP > 85
        for: 0s
        labels:
          severity: warning
"""
SERIES = {"gpu": "0", "UUID": "GPU-abc", "Hostname": "node-a"}

StartServer = Callable[..., RemediateServer]
StartAlertManager = Callable[..., AlertManager]


def ladder_playbook(
    directory: Path, *, holds_for: str, reset_after: str, alertname: str = "GPUTemperatureHigh"
) -> None:
    rung = """\
  - name: {name}
    holds_for: {holds_for}
    steps: [{{action: log, with: {{message: "{name} {{{{ labels.Hostname }}}}"}}}}]
    on_resolved: [{{action: log, with: {{message: "undo {name}"}}}}]
"""
    rungs = "".join(rung.format(name=name, holds_for=holds_for) for name in ("cap-power", "lock-clocks", "cordon"))
    write_playbook(
        directory,
        "hot",
        f"""\
name: hot
match: {{alertname: {alertname}}}
target: node
guard_by: [UUID]
reset_after: {reset_after}
escalate:
{rungs}on_resolved: [{{action: log, with: {{message: "notify"}}}}]
""",
    )


def ladder_runs(server: RemediateServer, alertname: str = "GPUTemperatureHigh") -> list[dict[str, Any]]:
    """The ladder's runs, oldest first: (phase, rung, status, reason) as /history shows them."""
    return [
        {"phase": e["run"]["phase"], "rung": e["rung"], "status": e["status"], "reason": e["reason"]}
        for e in server.runs(alertname=alertname)
    ]


def wait_for_runs(server: RemediateServer, count: int, alertname: str = "GPUTemperatureHigh") -> list[dict[str, Any]]:
    """Wait until the ladder has `count` runs, all of them finished; return them."""

    def done() -> list[dict[str, Any]] | None:
        runs = ladder_runs(server, alertname)
        finished = len(runs) >= count and all(r["status"] in ("succeeded", "failed") for r in runs)
        return runs if finished else None

    found: list[dict[str, Any]] = wait_until(done, WAIT, interval=0.1, message=f"{count} finished ladder runs")
    return found


@contextmanager
def gpu_metrics(tmp_path: Path, am: AlertManager) -> Iterator[tuple[MetricsEndpoint, Prometheus]]:
    rules = tmp_path / "gpu-rules.yml"
    rules.write_text(RULES)
    check_rules([rules])
    with (
        MetricsEndpoint() as metrics,
        Prometheus(
            tmp_path / "prometheus", scrape_targets=[metrics.target], rule_files=[rules], alertmanager_url=am.url
        ) as prom,  # fmt: skip
    ):
        metrics.set("DCGM_FI_DEV_GPU_TEMP", 60, SERIES)
        prom.wait_until_scraping(timeout=30)
        yield metrics, prom


def print_history(server: RemediateServer, title: str) -> None:
    """The ladder's /history entries, oldest first, trimmed to what the closing note shows."""
    keys = ("id", "time", "alert_status", "playbook", "target", "decision", "reason", "status", "run_id", "rung")
    entries = [{k: e[k] for k in keys} for e in reversed(server.history(playbook="hot"))]
    print(f"\n--- {title}: GET /history?playbook=hot (oldest first)\n{json.dumps(entries, indent=1)}")


def test_an_alert_that_keeps_re_firing_climbs_rung_by_rung_survives_a_restart_and_resets_when_quiet(
    tmp_path: Path,
    playbooks_dir: Path,
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
) -> None:
    # holds_for: the re-fire must come within it of the resolve (Prometheus + AlertManager take ~2-3 s);
    # reset_after: the quiet the test waits for at the end.
    ladder_playbook(playbooks_dir, holds_for="8s", reset_after="9s")
    server = start_server()
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    with gpu_metrics(tmp_path, am) as (metrics, _):

        def heat(count: int) -> list[dict[str, Any]]:
            metrics.set("DCGM_FI_DEV_GPU_TEMP", 90, SERIES)
            return wait_for_runs(server, count)

        def cool(count: int) -> list[dict[str, Any]]:
            metrics.set("DCGM_FI_DEV_GPU_TEMP", 60, SERIES)
            return wait_for_runs(server, count)

        heat(1)
        cool(2)
        heat(3)
        # A restart while the alert fires: the ladder (rung 2) is in the database, not in the process.
        server.restart()
        cool(4)
        runs = heat(5)
        cool(6)
        quiet_since = time.time()
        wait_until(lambda: time.time() - quiet_since > 9.5, 15, interval=0.2, message="quiet")
        runs = heat(7)
        cool(8)
    print_history(server, "climbing, a restart, and a reset")

    assert [(r["phase"], r["rung"]) for r in runs] == [
        ("firing", 1), ("resolved", None), ("firing", 2), ("resolved", None), ("firing", 3), ("resolved", None),
        ("firing", 1),
    ]  # fmt: skip
    assert all(r["status"] == "succeeded" for r in runs)
    first, undo1, second, undo2, third, undo3, again = runs
    assert first["reason"].endswith("; rung 1 of 3 (cap-power): first rung")
    assert "; rung 2 of 3 (lock-clocks): re-fired " in second["reason"]
    assert "after rung 1 resolved (holds_for 8s)" in second["reason"]
    assert "; rung 3 of 3 (cordon): re-fired " in third["reason"]
    assert "after rung 2 resolved (holds_for 8s)" in third["reason"]
    # Each resolve undoes the rung of its own occurrence, then the playbook's notification.
    assert [u["reason"].rsplit("; ", 1)[1] for u in (undo1, undo2, undo3)] == [
        "undoes rungs 1", "undoes rungs 2", "undoes rungs 3",
    ]  # fmt: skip
    assert "; rung 1 of 3 (cap-power): ladder reset: quiet " in again["reason"]
    assert "after rung 3 resolved (reset_after 9s)" in again["reason"]
    firing = [e for e in server.runs(alertname="GPUTemperatureHigh") if e["run"]["phase"] == "firing"]
    third_run = server.run(firing[2]["run_id"])
    assert third_run["ladder"]["rung"] == 3 and third_run["ladder"]["name"] == "cordon"
    assert [s["params"]["message"] for s in third_run["steps"]] == ["cordon node-a"]
    (ladder,) = server.get("/ladders", target="node-a")["ladders"]
    assert (ladder["guard_key"], ladder["rung"], ladder["of"]) == ("node-a/GPU-abc", 1, 3)
    assert ladder["resolved_at"] is not None
    assert [step["rung"] for step in ladder["climb"]] == [1]  # the climb since the reset


def test_a_gpu_that_stays_hot_climbs_while_alertmanager_re_sends_the_same_occurrence(
    tmp_path: Path,
    playbooks_dir: Path,
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
) -> None:
    """The alert never resolves, so AlertManager never sends a new occurrence: it re-sends the same one every
    repeat_interval, and each re-send `holds_for` after the last rung ran climbs one rung."""
    ladder_playbook(playbooks_dir, holds_for="3s", reset_after="1h")
    server = start_server()
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s", repeat_interval="1s")
    with gpu_metrics(tmp_path, am) as (metrics, _):
        metrics.set("DCGM_FI_DEV_GPU_TEMP", 90, SERIES)
        wait_for_runs(server, 3)
        metrics.set("DCGM_FI_DEV_GPU_TEMP", 60, SERIES)
        runs = wait_for_runs(server, 4)
    print_history(server, "a GPU that stays hot")

    assert [(r["phase"], r["rung"]) for r in runs] == [("firing", 1), ("firing", 2), ("firing", 3), ("resolved", None)]
    assert "rung 2 of 3 (lock-clocks): still firing " in runs[1]["reason"]
    assert "after rung 1 ran (holds_for 3s)" in runs[1]["reason"]
    assert "rung 3 of 3 (cordon): still firing " in runs[2]["reason"]
    # The re-sends in between were duplicates of the rung the ladder was on.
    decisions = [e["decision"] for e in server.history(playbook="hot") if e["alert_status"] == "firing"]
    assert decisions.count("accepted") == 3 and decisions.count("duplicate") >= 1
    undo = server.run(server.runs(alertname="GPUTemperatureHigh")[-1]["run_id"])
    # One resolve undoes every rung that ran for the occurrence, the top one first, then the notification.
    assert [s["params"]["message"] for s in undo["steps"]] == ["undo cordon", "undo lock-clocks", "undo cap-power",
                                                               "notify"]  # fmt: skip


def test_two_replicas_on_postgresql_agree_on_the_rung(
    pg_url: str,  # first: its database is dropped only after the replicas have stopped
    playbooks_dir: Path,
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
) -> None:
    ladder_playbook(playbooks_dir, holds_for="30s", reset_after="1h", alertname="E2ELadder")
    replicas = [
        start_server(name=name, workers=1, database_url=pg_url, env={"REMEDIATE_REPLICA_NAME": name})
        for name in ("replica-a", "replica-b")
    ]
    labels = {"alertname": "E2ELadder", "Hostname": "node-a", "UUID": "GPU-abc"}
    with ServiceProxy([r.url for r in replicas]) as service:
        am = start_alertmanager(f"{service.url}/webhook", group_wait="1s", group_interval="1s")
        # Two occurrences through AlertManager and the Service: each notification lands on the next replica.
        for number in (1, 2):
            starts = datetime.now(UTC)
            am.fire(labels, starts_at=starts)
            wait_for_runs(replicas[0], 2 * number - 1, "E2ELadder")
            am.resolve(labels, starts_at=starts)
            wait_for_runs(replicas[1], 2 * number, "E2ELadder")
        answered = {backend for path, backend, _ in service.served if path == "/webhook"}

    # The third occurrence reaches both replicas at the same moment (an HA pair's two copies): one of them
    # climbs to rung 3, the other sees that run and records a duplicate.
    payload = notification("E2ELadder", {k: v for k, v in labels.items() if k != "alertname"},
                           starts_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"))  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda replica: replica.post_webhook(payload), replicas))
    assert [a.status_code for a in answers] == [200, 200]
    assert sorted(json.dumps(a.json()["decisions"]) for a in answers) == ['{"accepted": 1}', '{"duplicate": 1}']

    runs = wait_for_runs(replicas[0], 5, "E2ELadder")
    assert answered == {r.url for r in replicas}
    assert [(r["phase"], r["rung"]) for r in runs] == [
        ("firing", 1), ("resolved", None), ("firing", 2), ("resolved", None), ("firing", 3),
    ]  # fmt: skip
    views = [r.get("/ladders", playbook="hot")["ladders"] for r in replicas]
    assert views[0] == views[1]
    (ladder,) = views[0]
    assert (ladder["rung"], ladder["name"], [c["rung"] for c in ladder["climb"]]) == (3, "cordon", [1, 2, 3])
    assert ladder_runs(replicas[0], "E2ELadder") == ladder_runs(replicas[1], "E2ELadder")
    assert requests.get(f"{replicas[1].url}/ladders", timeout=scaled(5)).status_code == 401
