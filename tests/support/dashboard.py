"""The shipped Grafana dashboard (docs/dashboards/remediate.json) as the tests read it: its PromQL, with
Grafana's variables substituted the way Grafana would, and the metric names it uses."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "dashboards" / "remediate.json"
CHART_DASHBOARD = ROOT / "helm" / "remediate" / "dashboards" / "remediate.json"

# What Grafana puts in place of its variables: the intervals it computes, and a multi-value variable
# with "All" selected as its allValue (.*), which these regex matchers (=~) take.
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "${job}": ".*",
    "$job": ".*",
    "${instance}": ".*",
    "$instance": ".*",
}
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\)$")
# A metric name in a selector: an identifier right before `{` (every query of the dashboard selects
# with the job/instance matchers, so every metric is written so).
_SELECTOR_NAME = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Query:
    panel: str
    expr: str  # as written in the dashboard

    @property
    def promql(self) -> str:
        return substitute(self.expr)


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def substitute(expr: str) -> str:
    # Longest first: $__rate_interval before $__interval, ${job} before $job.
    for variable in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace(variable, SUBSTITUTIONS[variable])
    assert "$" not in expr, f"a variable Grafana would substitute is left in {expr!r}"
    return expr


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def queries(dashboard: dict[str, Any]) -> list[Query]:
    return [Query(p["title"], t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]


def variable_selectors(dashboard: dict[str, Any]) -> list[str]:
    """The series selectors of the query variables (`label_values(selector, label)`), substituted."""
    selectors = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = _LABEL_VALUES.match(variable["query"]["query"])
        assert match, f"variable {variable['name']}: not a label_values() query: {variable['query']}"
        selectors.append(substitute(match["selector"]))
    return selectors


def metric_names(expr: str) -> set[str]:
    return set(_SELECTOR_NAME.findall(expr))


def exported(name: str, families: set[str]) -> bool:
    """`name` is a series of one of these metric families (a histogram's buckets, sum and count included)."""
    if name in families:
        return True
    return any(name.endswith(suffix) and name.removesuffix(suffix) in families for suffix in HISTOGRAM_SUFFIXES)
