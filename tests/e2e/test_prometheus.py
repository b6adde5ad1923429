"""End to end from a metric: dcgm-exporter-like gauge -> real Prometheus rule -> real AlertManager -> remediate.

Measures the latency from the moment the gauge crosses the rule's threshold to
the moment remediate's executor starts the run (``started_at`` of ``GET
/runs/<id>``), prints it (``pytest -s``) and writes a parseable line
``LATENCY rule_to_run_seconds=...`` to stdout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, WebhookRecorder, check_rules
from tests.support.server import RemediateServer, write_playbook

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
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is at {{ $value }} C"
"""

SERIES = {"gpu": "0", "UUID": "GPU-abc", "Hostname": "node-a", "modelName": "NVIDIA H100 80GB HBM3"}


def test_gpu_temperature_rule_becomes_a_run(
    tmp_path: Path,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    start_server: Callable[..., RemediateServer],
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
) -> None:
    rules = tmp_path / "gpu-rules.yml"
    rules.write_text(RULES)
    check_rules([rules])
    write_playbook(
        playbooks_dir,
        "gpu-overheat",
        f"""\
name: gpu-overheat
match:
  alertname: GPUTemperatureHigh
  labels: ['severity=~"warning|critical"']
target: node
cooldown: 15m
steps:
  - name: tell-oncall
    action: notify.webhook
    with:
      url: {recorder.url}
      message: >-
        GPU {{{{ labels.gpu }}}} ({{{{ labels.UUID }}}}) on {{{{ labels.Hostname }}}}:
        {{{{ annotations.summary }}}}
    retries: 0
""",
    )
    server = start_server()
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    with (
        MetricsEndpoint() as metrics,
        Prometheus(
            tmp_path / "prometheus",
            scrape_targets=[metrics.target],
            rule_files=[rules],
            alertmanager_url=am.url,
        ) as prom,
    ):
        watch_log("prometheus", prom)
        metrics.set("DCGM_FI_DEV_GPU_TEMP", 60, SERIES)
        prom.wait_until_scraping(timeout=30)
        assert server.history() == []

        heated = time.time()
        metrics.set("DCGM_FI_DEV_GPU_TEMP", 90, SERIES)
        entry = server.wait_for_run(status="succeeded", alertname="GPUTemperatureHigh", target="node-a")

    detail = server.run(entry["run_id"])
    rule_to_webhook = entry["time"] - heated
    rule_to_run = detail["started_at"] - heated
    rule_to_done = detail["finished_at"] - heated
    print(
        f"\nPrometheus gauge -> remediate: webhook stored after {rule_to_webhook:.2f} s, "
        f"run started after {rule_to_run:.2f} s, finished after {rule_to_done:.2f} s"
    )
    print(f"LATENCY rule_to_run_seconds={rule_to_run:.3f}")

    assert entry["decision"] == "accepted"
    assert entry["playbook"] == "gpu-overheat"
    assert entry["target"] == "node-a"
    assert detail["target"] == "node-a"
    assert detail["phase"] == "firing"
    labels = detail["alert"]["labels"]
    assert {k: labels[k] for k in SERIES} == SERIES
    assert labels["alertname"] == "GPUTemperatureHigh"
    assert labels["severity"] == "warning"
    assert labels["job"] == "test"
    assert detail["alert"]["annotations"]["summary"] == "GPU 0 on node-a is at 90 C"
    assert detail["alert"]["generatorURL"].startswith(prom.url)
    [step] = detail["steps"]
    assert step["status"] == "succeeded"
    assert step["result"]["message"] == "GPU 0 (GPU-abc) on node-a: GPU 0 on node-a is at 90 C"  # as sent
    [posted] = recorder.requests
    assert posted.json["run_id"] == detail["id"]
    assert posted.json["alert"]["labels"]["UUID"] == "GPU-abc"
    assert 0 < rule_to_run < 20
