"""The self-alerts' runbook_url lead somewhere that exists: the server serves docs/runbooks.md as GET /runbooks
(no token: static docs) with a section id per self-alert, and the chart points every self-alert's runbook_url
there (<public_url>/runbooks#<alert>), or at prometheusRule.runbookUrl; the shipped rule file keeps the
repository's docs/runbooks.md (tests/e2e/test_self_alerts.py checks its anchors). Each rendered link is
followed: its page answers 200 and holds the element its #anchor names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.test_self_alerts import SELF_ALERTS
from tests.support.helm import Helm, by_kind
from tests.support.http import Server

pytestmark = [pytest.mark.integration]

PUBLIC_URL = "https://remediate.example.com"


def _runbook_urls(objects: list[dict[str, Any]]) -> dict[str, str]:
    rules = [r for group in by_kind(objects, "PrometheusRule")["spec"]["groups"] for r in group["rules"]]
    return {r["alert"]: r["annotations"]["runbook_url"] for r in rules if r.get("alert") in SELF_ALERTS}


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_the_server_serves_the_runbooks_without_a_token_with_a_section_per_self_alert(server: Server) -> None:
    page = server.client.get("/runbooks")  # no Authorization header

    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert {alert.lower() for alert in SELF_ALERTS} <= _ids(html)
    assert "<strong>What to do.</strong>" in html
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]


def test_with_a_public_url_the_chart_points_each_runbook_url_at_the_servers_page_and_its_anchor_exists(
    helm: Helm, server: Server
) -> None:
    values = {"kubePrometheusStack": {"release": "kps"}, "server": {"config": {"public_url": PUBLIC_URL + "/"}}}
    urls = _runbook_urls(helm.objects(values))

    assert set(urls) == SELF_ALERTS
    ids = _ids(server.client.get("/runbooks").get_data(as_text=True))
    for alert, url in urls.items():
        assert url == f"{PUBLIC_URL}/runbooks#{alert.lower()}", url
        parts = urlsplit(url)
        assert server.client.get(parts.path).status_code == 200 and parts.fragment in ids, url


def test_prometheus_rule_runbook_url_wins_and_without_either_the_repositorys_docs_stay(helm: Helm) -> None:
    own = "https://git.example.com/ops/remediate/blob/main/docs/runbooks.md"
    values = {"kubePrometheusStack": {"release": "kps"}, "prometheusRule": {"runbookUrl": own}}
    values["server"] = {"config": {"public_url": PUBLIC_URL}}
    assert _runbook_urls(helm.objects(values)) == {a: f"{own}#{a.lower()}" for a in SELF_ALERTS}

    shipped = _runbook_urls(helm.objects({"kubePrometheusStack": {"release": "kps"}}))
    assert shipped == {
        a: f"https://github.com/example/remediate/blob/main/docs/runbooks.md#{a.lower()}" for a in SELF_ALERTS
    }


def test_the_packaged_runbooks_are_the_docs(tmp_path: Path) -> None:
    from importlib import resources

    packaged = resources.files("remediate.server.ui").joinpath("docs/runbooks.md").read_text(encoding="utf-8")
    assert packaged == (Path(__file__).resolve().parents[2] / "docs" / "runbooks.md").read_text(encoding="utf-8")
