"""The node page's "Re-admission gate" in a real headless Chromium against the real `remediate serve` (gunicorn,
its executor) running gpu.health on the simulated GPU file: node-a failed its gate (GPU 1 counted volatile
double-bit ECC errors), node-b passed its soak round after round, 127.0.0.1's gate is still soaking, a node
never gated says so in one line, and on a phone's 390 px nothing scrolls sideways. No dcgmi on this host: the
diag is reported skipped, not failed. The pages are photographed into the test's tmp dir (and into
REMEDIATE_UI_SCREENSHOTS=<dir>, as test_ui_operate_browser does).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from remediate.gpu import SimulatedBackend
from tests.e2e.test_ui_browser import READ_TOKEN, WEBHOOK_TOKEN, _log_in
from tests.e2e.test_ui_operate_browser import PHONE, _no_sideways_scroll
from tests.support.gpu import HEALTHY
from tests.support.server import RemediateServer, notification, write_playbook

pytestmark = [pytest.mark.integration]

GATE = """\
name: gpu-gate
match: {alertname: NodeBackFromRepair}
target: node
cooldown: 0s
steps:
  - name: gate
    action: gpu.health
    with: {soak: 2s, every: 1s, diag: 1}
    timeout: 60s
"""

LONG_GATE = """\
name: gpu-gate-long
match: {alertname: NodeSoaking}
target: node
steps:
  - name: gate
    action: gpu.health
    with: {soak: 10m, every: 1m}
    timeout: 15m
"""


def _fire(server: RemediateServer, alertname: str, node: str, fingerprint: str) -> int:
    body = notification(alertname, {"node": node}, fingerprint=fingerprint)
    assert server.post_webhook(body, token=WEBHOOK_TOKEN).status_code == 200
    entry = server.wait_for_run(lambda e: e["target"] == node, alertname=alertname)
    return int(entry["run_id"])


def test_the_node_page_shows_a_failed_and_a_passed_gate_a_running_one_and_a_node_never_gated(
    start_server: Callable[..., RemediateServer],
    playbooks_dir: Path,
    browser_page: Page,
    chromium: Browser,
    tmp_path: Path,
) -> None:
    gpus = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2))
    for gpu in gpus.devices():
        gpus.update_device(gpu.uuid, health=HEALTHY)
    bad = gpus.devices()[1].uuid
    gpus.update_device(bad, health={**HEALTHY, "ecc_dbe_volatile": 2})
    write_playbook(playbooks_dir, "gpu-gate", GATE)
    write_playbook(playbooks_dir, "gpu-gate-long", LONG_GATE)
    empty_bin = tmp_path / "no-dcgm"
    empty_bin.mkdir()
    server = start_server(
        env={
            "REMEDIATE_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "REMEDIATE_READ_TOKEN": READ_TOKEN,
            "REMEDIATE_GPU_BACKEND": "simulated",
            "REMEDIATE_GPU_SIMULATOR_FILE": str(gpus.path),
            # One host plays the three nodes (no agents); dcgmi is absent whatever this host has installed.
            "REMEDIATE_NODE_NAME": "node-a",
            "REMEDIATE_NODE_ALIASES": "node-b,127.0.0.1",
            "PATH": str(empty_bin),
        }
    )
    failed = _fire(server, "NodeBackFromRepair", "node-a", "aaaaaaaaaaaaaaa1")
    server.wait_for_run_status(failed, "failed")
    gpus.update_device(bad, health=HEALTHY)
    passed = _fire(server, "NodeBackFromRepair", "node-b", "bbbbbbbbbbbbbbb2")
    server.wait_for_run_status(passed, "succeeded")
    soaking = _fire(server, "NodeSoaking", "127.0.0.1", "ccccccccccccccc3")
    server.wait_for_run_status(soaking, "running")
    page = browser_page
    _log_in(page, server, READ_TOKEN)

    page.goto(f"{server.url}/ui/nodes/node-a")
    gate = page.locator("#gate .gate-run")
    assert gate.get_attribute("data-run") == str(failed)
    assert gate.locator(".gate-outcome").inner_text() == f"FAILED: GPU 1 ({bad}): ecc_dbe_volatile: 2 > 0"
    assert gate.locator("h3 .status").inner_text() == "failed"
    fail_rows = gate.locator("table.gate-checks tr.v-fail")
    assert fail_rows.count() == 1
    assert fail_rows.locator("td").all_inner_texts() == ["ecc_dbe_volatile", "fail", "ecc_dbe_volatile: 2 > 0"]
    good = gpus.devices()[0].uuid
    assert gate.locator("table.gate-checks td.gpu").all_inner_texts() == [f"GPU 0 ({good})", f"GPU 1 ({bad})"]
    assert gate.locator("table.gate-checks tr.check").count() == 16  # 2 GPUs x 8 checks
    assert gate.locator(".gate-diag").inner_text() == "skipped: not run: the NVML checks failed first"
    assert gate.locator("table.gate-soak tr.round").all_inner_texts()[0].split("\t")[:2] == ["+0s", "fail"]
    _photo(page, tmp_path, "ui-node-gate-failed.png")
    gate.locator("h3 a").click()
    page.wait_for_url(f"**/ui/runs/{failed}")

    page.goto(f"{server.url}/ui/nodes/node-b")
    gate = page.locator("#gate .gate-run")
    assert gate.get_attribute("data-run") == str(passed)
    assert gate.locator(".gate-outcome").inner_text() == "passed"
    rounds = [row.split("\t")[:2] for row in gate.locator("table.gate-soak tr.round").all_inner_texts()]
    assert rounds == [["+0s", "ok"], ["+1s", "ok"], ["+2s", "ok"]]
    assert gate.locator(".gate-soak-note").inner_text() == "3 of 3 rounds over 2s, every 1s"
    assert gate.locator(".gate-diag").inner_text() == "skipped: DCGM not installed (no dcgmi on this node's PATH)"
    assert gate.locator("table.gate-checks tr.v-fail").count() == 0
    _photo(page, tmp_path, "ui-node-gate-passed.png")

    page.goto(f"{server.url}/ui/nodes/127.0.0.1")
    gate = page.locator("#gate .gate-run")
    assert gate.locator(".gate-outcome").inner_text() == "running: round 1 of 11"
    assert gate.locator("h3 .status").inner_text() == "running"

    page.goto(f"{server.url}/ui/nodes/node-never-gated")
    assert page.locator("#never-gated").inner_text() == "node-never-gated has never been through the re-admission gate."
    assert page.locator("#gate .gate-run").count() == 0

    # On a phone the GPU x check table reflows like the history: nothing scrolls sideways.
    phone = chromium.new_context(viewport=PHONE, is_mobile=True, device_scale_factor=2)
    try:
        mobile = phone.new_page()
        _log_in(mobile, server, READ_TOKEN)
        mobile.goto(f"{server.url}/ui/nodes/node-a")
        _no_sideways_scroll(mobile)
        assert "ecc_dbe_volatile: 2 > 0" in mobile.locator("#gate .gate-outcome").inner_text()
        _photo(mobile, tmp_path, "ui-phone-node-gate.png")
    finally:
        phone.close()


def _photo(page: Page, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    if os.environ.get("REMEDIATE_UI_SCREENSHOTS"):
        shutil.copyfile(path, Path(os.environ["REMEDIATE_UI_SCREENSHOTS"]) / name)
