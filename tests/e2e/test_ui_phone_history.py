"""The history page on a phone (390 px, Chromium's mobile emulation) against the real `remediate serve`: the
table reflows, each entry a block of labelled lines, so every cell (the status, the run link, why) is on screen
without scrolling sideways, neither the page nor the table (a table that only scrolled in its own box hid the
status and the run behind a sideways swipe)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.e2e.test_ui_browser import OPERATOR_TOKEN, WEBHOOK_TOKEN, _log_in, _serve
from tests.support.server import RemediateServer, notification

pytestmark = [pytest.mark.integration]

PHONE = {"width": 390, "height": 844}


def test_on_a_phone_every_history_cell_is_on_screen_without_scrolling_sideways(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path, chromium: Browser
) -> None:
    server = _serve(start_server, playbooks_dir)
    for index, node in enumerate(("gpu-node-07.cluster-a.example.internal", "gpu-node-08")):
        body = notification("NodeFilesystemAlmostOutOfSpace", {"node": node}, fingerprint=f"{index:016x}")
        assert server.post_webhook(body, token=WEBHOOK_TOKEN).status_code == 200
    phone = chromium.new_context(viewport=PHONE, is_mobile=True, device_scale_factor=2)
    try:
        page = phone.new_page()
        _log_in(page, server, OPERATOR_TOKEN)
        page.wait_for_selector("table.history tr.entry")

        sideways = page.evaluate(
            """() => {
                const table = document.querySelector('table.history');
                return {page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                        table: table.scrollWidth - table.clientWidth};
            }"""
        )
        assert sideways == {"page": 0, "table": 0}, sideways
        cells = page.locator("table.history tr.entry td")
        assert cells.count() == 2 * 8
        for i in range(cells.count()):
            box = cells.nth(i).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (i, box)
        # Each value says what it is (the column heads are off screen, for screen readers only).
        first = page.locator("table.history tr.entry").first
        status = first.locator("td[data-label=status]")
        label = status.evaluate("td => getComputedStyle(td, '::before').content")
        assert label == '"status: "', label
        assert first.locator("a.run-link").is_visible()
    finally:
        phone.close()
