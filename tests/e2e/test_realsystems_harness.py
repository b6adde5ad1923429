"""Self-test of tests/support/realsystems.py against the real AlertManager and Prometheus.

If these fail, every integration test built on the harness is suspect, so
they check the harness end to end: what AlertManager 0.25 really sends to a
webhook, and that a Prometheus rule fires through it within a few seconds.
Skipped where the Debian binaries are not installed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.realsystems import (
    AlertManager,
    MetricsEndpoint,
    Prometheus,
    RecordedRequest,
    WebhookRecorder,
    check_rules,
    parse_timestamp,
)

BINARIES = ["prometheus-alertmanager", "amtool", "prometheus", "promtool"]

# No skip when the binaries are missing: scripts/test installs them, and a missing one must fail loudly.
pytestmark = [pytest.mark.integration]

TOKEN = "harness-token"


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    with WebhookRecorder() as rec:
        yield rec


def _group(request: RecordedRequest, alertname: str, status: str) -> bool:
    body = request.json
    return (
        isinstance(body, dict)
        and body.get("groupLabels", {}).get("alertname") == alertname
        and body.get("status") == status
    )


def test_alertmanager_sends_firing_then_resolved_with_bearer_token(tmp_path: Path, recorder: WebhookRecorder) -> None:
    labels = {"alertname": "HarnessSelfTest", "gpu": "3", "Hostname": "node-a"}
    with AlertManager(tmp_path / "am", recorder.url, token=TOKEN) as am:
        fired = time.monotonic()
        am.fire(labels, {"summary": "harness"})
        first = recorder.wait_for(lambda r: _group(r, "HarnessSelfTest", "firing"), timeout=5)
        print(f"\nAlertManager fire -> webhook: {first.received_at - fired:.2f} s")

        assert len(recorder.requests) == 1
        assert first.method == "POST"
        assert first.path == "/webhook"
        assert first.header("Authorization") == f"Bearer {TOKEN}"
        assert (first.header("Content-Type") or "").startswith("application/json")
        assert (first.header("User-Agent") or "").startswith("Alertmanager/")
        body = first.json
        assert body["version"] == "4"
        assert body["status"] == "firing"
        assert body["receiver"] == "remediate"
        [alert] = body["alerts"]
        assert alert["status"] == "firing"
        assert alert["labels"] == labels
        assert alert["annotations"] == {"summary": "harness"}
        assert re.fullmatch(r"[0-9a-f]{16}", alert["fingerprint"])
        assert alert["endsAt"] == "0001-01-01T00:00:00Z"
        starts_at = parse_timestamp(alert["startsAt"])

        seen = len(recorder.requests)
        resolved_at = time.monotonic()
        am.resolve(labels)
        resolved = recorder.wait_for(lambda r: _group(r, "HarnessSelfTest", "resolved"), timeout=5, after=seen)
        print(f"AlertManager resolve -> webhook: {resolved.received_at - resolved_at:.2f} s")
        [gone] = resolved.json["alerts"]
        assert gone["status"] == "resolved"
        assert gone["fingerprint"] == alert["fingerprint"]
        assert parse_timestamp(gone["startsAt"]) == starts_at
        assert parse_timestamp(gone["endsAt"]) >= starts_at
        assert len(recorder.requests) == 2  # no repeat of the unchanged firing group
        assert resolved.json["externalURL"].rstrip("/") == am.url
        assert am.alerts() == []


def test_prometheus_rule_reaches_webhook_through_alertmanager(tmp_path: Path, recorder: WebhookRecorder) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        """\
groups:
  - name: harness
    rules:
      - alert: TestHot
        expr: test_temperature > 80
        for: 0s
        labels:
          severity: warning
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is hot"
"""
    )
    check_rules([rules])
    series = {"gpu": "0", "Hostname": "node-a"}
    with (
        MetricsEndpoint() as metrics,
        AlertManager(tmp_path / "am", recorder.url, token=TOKEN) as am,
        Prometheus(
            tmp_path / "prom",
            scrape_targets=[metrics.target],
            rule_files=[rules],
            alertmanager_url=am.url,
        ) as prom,
    ):
        metrics.set("test_temperature", 40, series)
        prom.wait_until_scraping(timeout=30)
        assert recorder.requests == []

        heated = time.monotonic()
        metrics.set("test_temperature", 90, series)
        hot = recorder.wait_for(lambda r: _group(r, "TestHot", "firing"), timeout=30)
        print(f"\nPrometheus gauge -> webhook (new group): {hot.received_at - heated:.2f} s")

        [alert] = hot.json["alerts"]
        assert alert["labels"]["Hostname"] == "node-a"
        assert alert["labels"]["gpu"] == "0"
        assert alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["summary"] == "GPU 0 on node-a is hot"
        assert alert["generatorURL"].startswith(prom.url)
        assert prom.query('test_temperature{Hostname="node-a"}')[0]["value"][1] == "90"
