"""Verify before undo, end to end: gauge -> real Prometheus rule -> real AlertManager -> `remediate serve`,
whose `on_resolved` undo waits in a `check.prometheus` step until the node has been cool for `for`.

node-a cools below the check's threshold after it resolved: the undo runs, and not before the query
held for 3 s. node-b stays just under the alert's threshold but above the check's: its check fails
after its timeout and the undo after it never runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, check_rules
from tests.support.server import RemediateServer, write_playbook

pytestmark = [pytest.mark.integration]

RULES = """\
groups:
  - name: gpu
    rules:
      - alert: GPUTemperatureHigh
        expr: e2e_gpu_temp > 85
        for: 0s
"""

PLAYBOOK = """\
name: gpu-cool-down
match:
  alertname: GPUTemperatureHigh
target: node
cooldown: 0s
steps:
  - name: cap
    action: log
    with:
      message: "hot on {{ labels.Hostname }}"
on_resolved:
  - name: cool-for-3s
    action: check.prometheus
    timeout: 60s
    with:
      query: max(e2e_gpu_temp{Hostname={{ labels.Hostname | promql_string }}}) < 80
      for: 3s
      poll: 1s
      timeout: 8s
  - name: undo
    action: log
    with:
      message: "uncordon {{ labels.Hostname }}"
"""


def resolved_run(server: RemediateServer, node: str) -> dict[str, Any]:
    return server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", target=node, timeout=30)


def test_the_undo_waits_until_the_query_held_for_its_duration_and_never_runs_when_it_does_not(
    tmp_path: Path,
    playbooks_dir: Path,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES)
    check_rules([rules])
    write_playbook(playbooks_dir, "gpu-cool-down", PLAYBOOK)
    # The server's URL is known before it starts; Prometheus' only once it runs: build, then start last.
    server = RemediateServer(tmp_path / "remediate", playbooks_dir)
    watch_log("remediate", server)
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    with (
        MetricsEndpoint() as metrics,
        Prometheus(
            tmp_path / "prometheus", scrape_targets=[metrics.target], rule_files=[rules], alertmanager_url=am.url
        ) as prom,
    ):
        watch_log("prometheus", prom)
        server.extra_env["REMEDIATE_PROMETHEUS_URL"] = prom.url
        server.start()
        try:
            for node in ("node-a", "node-b"):
                metrics.set("e2e_gpu_temp", 90, {"Hostname": node})
            prom.wait_until_scraping(timeout=30)
            for node in ("node-a", "node-b"):
                server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", target=node)

            # Resolved for the alert (< 85), not yet cool enough for the check (< 80).
            for node in ("node-a", "node-b"):
                metrics.set("e2e_gpu_temp", 82, {"Hostname": node})
            waiting = server.wait_for_run_status(resolved_run(server, "node-a")["run_id"], "running", timeout=30)
            assert waiting["steps"][1]["status"] == "pending", "the undo must wait for the check"
            cooled = time.time()
            metrics.set("e2e_gpu_temp", 70, {"Hostname": "node-a"})

            node_a = server.wait_for_run_status(waiting["id"], "succeeded", "failed", timeout=30)
            node_b = server.wait_for_run_status(resolved_run(server, "node-b")["run_id"], "succeeded", "failed")
        finally:
            server.stop()

    check, undo = node_a["steps"]
    assert node_a["status"] == "succeeded", node_a
    assert (check["status"], undo["status"]) == ("succeeded", "succeeded")
    assert check["params"]["query"] == 'max(e2e_gpu_temp{Hostname="node-a"}) < 80'
    assert check["result"]["passed"] is True
    assert undo["started_at"] - cooled >= 3.0, "the undo ran before the node had been cool for 3 s"
    assert check["plan"]["holds_now"] is False, "planned while still warm"

    check_b, undo_b = node_b["steps"]
    assert node_b["status"] == "failed"
    assert check_b["status"] == "failed"
    assert "did not hold for 3s" in check_b["error"]
    assert undo_b["status"] == "skipped"
