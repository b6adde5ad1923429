"""End to end: the real AlertManager 0.25 posting to the real ``remediate serve`` (gunicorn, 2 workers).

Every assertion reads what remediate recorded the way an operator would:
``GET /history`` and ``GET /runs/<id>`` with the bearer token (plus ``/metrics``
and ``remediate history --json`` where a count is cross-checked). Steps are
``log`` and ``notify.webhook`` to a WebhookRecorder, so what the executor did is
visible from the outside as well.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.realsystems import AlertManager, WebhookRecorder, free_port
from tests.support.server import WAIT, RemediateServer, scrape_metric, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

StartServer = Callable[..., RemediateServer]
StartAlertManager = Callable[..., AlertManager]


def _playbook(alertname: str, recorder: WebhookRecorder, *, on_resolved: bool = True) -> str:
    text = f"""\
name: {alertname.lower()}
description: end-to-end test playbook for {alertname}
match:
  alertname: {alertname}
  labels: ['severity=~"warning|critical"']
mode: enforce
target: node
cooldown: 0s
steps:
  - name: log-firing
    action: log
    with:
      message: "firing {{{{ labels.alertname }}}} on {{{{ labels.Hostname }}}}"
  - name: notify-firing
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "FIRING {{{{ labels.alertname }}}} gpu {{{{ labels.gpu }}}} on {{{{ labels.Hostname }}}}"
    retries: 0
"""
    if on_resolved:
        text += f"""\
on_resolved:
  - name: log-resolved
    action: log
    with:
      message: "resolved {{{{ labels.alertname }}}} on {{{{ labels.Hostname }}}}"
  - name: notify-resolved
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "RESOLVED {{{{ labels.alertname }}}} gpu {{{{ labels.gpu }}}} on {{{{ labels.Hostname }}}}"
    retries: 0
"""
    return text


def _labels(alertname: str) -> dict[str, str]:
    return {"alertname": alertname, "severity": "critical", "Hostname": "node-a", "gpu": "3"}


def _am_deliveries(am: AlertManager) -> int:
    """Webhook POSTs this AlertManager made that were answered 2xx (its own metrics)."""
    url = f"{am.url}/metrics"
    sent = scrape_metric(url, "alertmanager_notification_requests_total", integration="webhook")
    failed = scrape_metric(url, "alertmanager_notification_requests_failed_total", integration="webhook")
    return int(sent - failed)


def test_firing_then_resolved_runs_steps_then_on_resolved_steps(
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
) -> None:
    alertname = "E2EFireResolve"
    write_playbook(playbooks_dir, "fire-resolve", _playbook(alertname, recorder))
    server = start_server()
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s", send_resolved=True)
    labels = _labels(alertname)

    am.fire(labels, {"summary": "GPU 3 is hot"})
    firing = server.wait_for_run(status="succeeded", alertname=alertname)
    assert firing["decision"] == "accepted"
    assert firing["alert_status"] == "firing"
    assert firing["playbook"] == "e2efireresolve"
    assert firing["target"] == "node-a"
    fired = server.run(firing["run_id"])
    assert fired["phase"] == "firing"
    assert fired["status"] == "succeeded"
    assert fired["alert"]["labels"] == labels
    assert [(s["name"], s["action"], s["status"]) for s in fired["steps"]] == [
        ("log-firing", "log", "succeeded"),
        ("notify-firing", "notify.webhook", "succeeded"),
    ]
    assert fired["steps"][0]["result"] == {"logged": f"firing {alertname} on node-a", "level": "info"}
    assert fired["steps"][1]["result"]["status_code"] == 200
    assert [a["outcome"] for a in fired["steps"][1]["attempts"]] == ["succeeded"]

    am.resolve(labels)
    resolved = server.wait_for_run(
        lambda e: e["run"]["phase"] == "resolved", status="succeeded", alertname=alertname, timeout=WAIT
    )
    assert resolved["decision"] == "accepted"
    assert resolved["alert_status"] == "resolved"
    after = server.run(resolved["run_id"])
    assert after["phase"] == "resolved"
    # The on_resolved steps, not the firing ones again.
    assert [(s["name"], s["action"], s["status"]) for s in after["steps"]] == [
        ("log-resolved", "log", "succeeded"),
        ("notify-resolved", "notify.webhook", "succeeded"),
    ]
    assert after["steps"][1]["result"]["message"] == f"RESOLVED {alertname} gpu 3 on node-a"  # as sent
    # Same occurrence of the same alert, and it ran only after the firing run had finished.
    assert after["alert"]["fingerprint"] == fired["alert"]["fingerprint"]
    assert after["alert"]["startsAt"] == fired["alert"]["startsAt"]
    assert after["alert"]["status"] == "resolved"
    assert after["started_at"] >= fired["finished_at"]

    # Two runs, nothing else but duplicates of them.
    entries = server.history(alertname=alertname)
    assert [e["run_id"] for e in server.runs(alertname=alertname)] == [fired["id"], after["id"]]
    assert {e["decision"] for e in entries if e["run_id"] is None} <= {"duplicate"}

    # The webhook saw the two summaries, firing first.
    bodies = [r.json for r in recorder.requests]
    assert [b["message"] for b in bodies] == [
        f"FIRING {alertname} gpu 3 on node-a",
        f"RESOLVED {alertname} gpu 3 on node-a",
    ]
    assert [b["run_id"] for b in bodies] == [fired["id"], after["id"]]
    assert [b["alert"]["status"] for b in bodies] == ["firing", "resolved"]
    assert all(b["target"] == "node-a" and b["alert"]["labels"] == labels for b in bodies)


def test_resent_group_makes_exactly_one_run(
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
) -> None:
    alertname = "E2EResent"
    write_playbook(playbooks_dir, "resent", _playbook(alertname, recorder, on_resolved=False))
    server = start_server()
    # repeat_interval below group_interval: AlertManager re-sends the unchanged group at every
    # group_interval flush (with both at 1s it only re-sends every 2 s).
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="500ms", repeat_interval="400ms")
    am.fire(_labels(alertname))

    run = server.wait_for_run(status="succeeded", alertname=alertname)
    wait_until(
        lambda: len(server.history(alertname=alertname)) >= 6,
        WAIT,
        interval=0.1,
        message="AlertManager did not re-send the group",
    )
    am.stop()
    delivered = len(recorder.requests)  # notify.webhook POSTs (from remediate, not from AlertManager)
    time.sleep(scaled(0.3))  # a request AlertManager had in flight when it stopped

    entries = server.history(alertname=alertname)
    n = len(entries)
    assert n >= 6
    assert Counter(e["decision"] for e in entries) == {"accepted": 1, "duplicate": n - 1}
    [only] = server.runs(alertname=alertname)
    assert only["run_id"] == run["run_id"]
    for entry in entries:
        if entry["decision"] == "duplicate":
            assert f"already recorded as run {run['run_id']}" in entry["reason"]
            assert entry["run_id"] is None
    # One notification stored per delivery, seen the same way by /metrics and by the CLI.
    assert server.metric("remediate_notifications_received_total", status="firing") == n
    assert server.metric("remediate_decisions_total", decision="duplicate") == n - 1
    assert [e["id"] for e in server.cli_history(alertname=alertname)] == [e["id"] for e in entries]
    # ... and the step ran once.
    assert delivered == len(recorder.requests) == 1
    assert server.run(run["run_id"])["steps"][1]["attempts"][0]["outcome"] == "succeeded"


def test_ha_pair_sending_the_same_alert_makes_exactly_one_run(
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
) -> None:
    alertname = "E2EHighAvailability"
    write_playbook(playbooks_dir, "ha", _playbook(alertname, recorder, on_resolved=False))
    server = start_server()
    port_a, port_b = free_port(), free_port()
    # peer-timeout 0s: neither peer waits to see whether the other already notified, so both
    # deliver the same notification at the same moment (the at-least-once case at its worst).
    gossip = ["--cluster.settle-timeout=1s", "--cluster.peer-timeout=0s", "--cluster.gossip-interval=50ms"]
    a = start_alertmanager(
        server.webhook_url,
        name="alertmanager-a",
        cluster_port=port_a,
        cluster_peers=[f"127.0.0.1:{port_b}"],
        extra_args=gossip,
    )
    b = start_alertmanager(
        server.webhook_url,
        name="alertmanager-b",
        cluster_port=port_b,
        cluster_peers=[f"127.0.0.1:{port_a}"],
        extra_args=gossip,
    )
    wait_until(
        lambda: a.cluster_members() == 2 and b.cluster_members() == 2, WAIT, interval=0.1, message="no HA cluster"
    )

    # Prometheus sends every alert to each AlertManager of the pair, with the same startsAt.
    labels = _labels(alertname)
    starts = datetime.now(UTC)
    # At the same moment, so that both group_wait timers run out together and neither peer has
    # gossiped its "notified" record before the other delivers.
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda am: am.fire(labels, starts_at=starts), (a, b)))

    run = server.wait_for_run(status="succeeded", alertname=alertname)

    def each_delivered() -> tuple[int, int] | None:
        counts = (_am_deliveries(a), _am_deliveries(b))
        return counts if all(counts) else None

    both = wait_until(
        each_delivered,
        WAIT,
        interval=0.1,
        message="both AlertManagers should have delivered",
    )

    def recorded_deliveries() -> int | None:
        sent = _am_deliveries(a) + _am_deliveries(b)
        return sent if sent == len(server.history(alertname=alertname)) else None

    sent = wait_until(
        recorded_deliveries,
        WAIT,
        interval=0.1,
        message="every delivery should be one history entry",
    )
    print(f"\nHA pair deliveries: {both[0]} + {both[1]}")

    entries = server.history(alertname=alertname)
    assert sent >= 2
    assert Counter(e["decision"] for e in entries) == {"accepted": 1, "duplicate": sent - 1}
    [only] = server.runs(alertname=alertname)
    assert only["run_id"] == run["run_id"]
    assert server.run(run["run_id"])["status"] == "succeeded"
    assert len(recorder.requests) == 1


def test_wrong_token_is_refused_and_nothing_is_recorded(
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
) -> None:
    alertname = "E2EWrongToken"
    write_playbook(playbooks_dir, "wrong-token", _playbook(alertname, recorder, on_resolved=False))
    server = start_server()
    am = start_alertmanager(server.webhook_url, token="not-the-right-token")
    am.fire(_labels(alertname))

    # AlertManager re-sends a 4xx'd notification every group_interval: the refusals add up.
    wait_until(
        lambda: server.metric("remediate_webhook_rejected_total", code="401") >= 2,
        WAIT,
        interval=0.1,
        message="the server should have refused AlertManager's POSTs with 401",
    )
    wait_until(
        lambda: "unexpected status code 401" in am.log_tail(200),
        WAIT,
        interval=0.1,
        message="AlertManager's log should show the 401",
    )
    assert server.history() == []
    assert server.cli_history() == []
    assert server.metric("remediate_notifications_received_total") == 0
    assert recorder.requests == []


def test_alert_fired_while_the_server_is_down_is_delivered_once_after_restart(
    start_server: StartServer,
    start_alertmanager: StartAlertManager,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
) -> None:
    alertname = "E2EServerDown"
    write_playbook(playbooks_dir, "server-down", _playbook(alertname, recorder, on_resolved=False))
    server = start_server()
    am = start_alertmanager(server.webhook_url)
    server.stop()

    fired = time.monotonic()
    am.fire(_labels(alertname))

    def failed_posts() -> float:
        return scrape_metric(f"{am.url}/metrics", "alertmanager_notification_requests_failed_total")

    wait_until(lambda: failed_posts() >= 1, WAIT, interval=0.1, message="AlertManager should fail to deliver")
    time.sleep(max(0.0, 3.0 - (time.monotonic() - fired)))
    failed_while_down = failed_posts()
    assert not server.running

    server.start()
    run = server.wait_for_run(status="succeeded", alertname=alertname)
    restarted = time.monotonic()
    print(f"\nfailed POSTs while down: {failed_while_down:g}; delivered {restarted - fired:.1f} s after firing")

    # Nothing lost, nothing doubled. AlertManager sends a group until one POST of it is answered 2xx (a POST
    # its deadline cut short counts failed and is sent again at the next flush); after that first 2xx it sends
    # nothing more for repeat_interval (1h). So once its own metrics show that 2xx, every POST it will make is made.
    wait_until(
        lambda: _am_deliveries(am) >= 1,
        WAIT,
        interval=0.1,
        message="AlertManager should count a delivered POST",
    )
    entries = server.history(alertname=alertname)
    assert [e["decision"] for e in entries if e["decision"] != "duplicate"] == ["accepted"]
    [only] = server.runs(alertname=alertname)
    assert only["run_id"] == run["run_id"]
    # Every POST AlertManager saw answered 2xx is recorded; a record beyond those is a POST its own deadline cut
    # short after the server had stored it (seen on a loaded host when the restart took > 10 s): AlertManager
    # counts it failed and sends again, and the server records the repeat as a duplicate.
    cut_short = am.log_tail(400).count("context deadline exceeded")
    assert _am_deliveries(am) <= len(entries) <= _am_deliveries(am) + cut_short
    assert len(recorder.requests) == 1
    detail: dict[str, Any] = server.run(run["run_id"])
    assert detail["alert"]["labels"]["alertname"] == alertname
    assert detail["target"] == "node-a"
