"""A real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright for Python.

Playwright's own browser downloads are never used (no `playwright install`): the browser is the
distribution's package, which scripts/test installs, launched offline with everything that would
reach the network turned off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.waiting import scaled

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # the tests run as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_MS = round(scaled(15_000))  # how long Playwright waits for the page: a bound, so scaled


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One headless Chromium per test module (a launch costs about a second)."""
    assert CHROMIUM.exists(), "Debian's chromium package is missing (scripts/test installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_page(chromium: Browser) -> Iterator[Page]:
    """A fresh browser context (its own cookies) and page for one test."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
