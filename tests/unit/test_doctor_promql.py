"""The doctor's PromQL reading: the series an expression reads and which of them it can do without (`or`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.doctor.promql import PromqlSyntaxError, parse, series_names
from remediate.doctor.rules import read_rules, rule_files

SHIPPED_RULES = Path(__file__).resolve().parents[2] / "alertmanager" / "rules"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("max by (UUID, gpu) (DCGM_FI_DEV_GPU_TEMP) > 85", ["DCGM_FI_DEV_GPU_TEMP"]),
        ("max by (UUID) (rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m])) / 1e6 > 0.1", ["DCGM_FI_DEV_THERMAL_VIOLATION"]),
        ("sum(rate(x_total[5m])) by (job) / on(job) group_left(node) up offset 1h", ["x_total", "up"]),
        ('{__name__="job:loss:avg5m", job="a"} and without (x) rate(b[1m:10s])', ["job:loss:avg5m", "b"]),
        ('label_replace(a{l="or b"}, "dst", "$1", "src", "(.*)")  # c or d', ["a"]),
        ("max(DCGM_FI_DEV_GPU_TEMP{UUID={{ labels.UUID | promql_string }}}) < 80", ["DCGM_FI_DEV_GPU_TEMP"]),
        ('absent(up{job="remediate"}) or sum(up{job="remediate"}) == 0', ["up"]),
        ('sum(count_values("v", build_info)) > bool 1', ["build_info"]),
        ("vector(1) + time()", []),
    ],
)
def test_the_series_an_expression_reads(expr: str, names: list[str]) -> None:
    assert sorted(series_names(expr)) == sorted(names)


@pytest.mark.parametrize(
    ("expr", "present", "has_data"),
    [
        ("(A or B) > 85", {"B"}, True),
        ("(A or B) > 85", {"A"}, True),
        ("(A or B) > 85", set(), False),
        ("max by (x) (A) > 1 or max by (x) (B / 1e6) > 1", {"B"}, True),
        ("A and B", {"A"}, False),
        ("A / on(x) group_left B or C", {"C"}, True),
        ("A / on(x) group_left B or C", {"A"}, False),
        ("sum(increase(A[5m])) or vector(0)", set(), False),  # vector(0) supplies no series' data
        ("rate((A or B)[5m:]) * on(n) C", {"B", "C"}, True),
        ("rate((A or B)[5m:]) * on(n) C", {"B"}, False),
    ],
)
def test_or_needs_either_side_everything_else_needs_every_side(expr: str, present: set[str], has_data: bool) -> None:
    assert parse(expr).satisfied(lambda name: name in present) is has_data


@pytest.mark.parametrize("expr", ['a{l="x}', "sum(a", "a)", "a[5m"])
def test_an_expression_it_cannot_read_is_an_error(expr: str) -> None:
    with pytest.raises(PromqlSyntaxError):
        parse(expr)


def test_every_shipped_rule_reads_at_least_one_series() -> None:
    rules = read_rules(rule_files(SHIPPED_RULES))
    assert len(rules) >= 20
    assert [rule.name for rule in rules if not series_names(rule.expr)] == []
    # The GPU rules read the normalised layer (dcgm.rules.yml), which reads both exporter generations.
    assert series_names(next(r.expr for r in rules if r.name == "GPUTemperatureHigh")) == ["gpu:temp_celsius"]
    (recorded,) = [r for r in rules if r.name == "gpu:temp_celsius"]
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"} <= set(series_names(recorded.expr))


def test_a_name_regex_of_plain_names_reads_as_their_or() -> None:
    query = 'max({__name__=~"OLD_TEMP|NEW_TEMP", UUID={{ labels.UUID | promql_string }}, gpu!="7"}) < 80'
    needs = parse(query)
    assert needs.names() == ['OLD_TEMP{gpu!="7"}', 'NEW_TEMP{gpu!="7"}']
    assert needs.satisfied(lambda series: series.startswith("NEW_TEMP"))
    assert needs.satisfied(lambda series: series.startswith("OLD_TEMP"))
    assert not needs.satisfied(lambda series: False)
    # A regex that is not a list of names says nothing the doctor can ask about.
    assert parse('{__name__=~"DCGM_.*"}').names() == []


@pytest.mark.parametrize(
    ("expr", "selectors"),
    [
        ('max by (job) (up{job=~".*remediate.*"}) == 0', ['up{job=~".*remediate.*"}']),
        ("max(DCGM_FI_DEV_GPU_TEMP{UUID={{ labels.UUID | promql_string }}}) < 80", ["DCGM_FI_DEV_GPU_TEMP"]),
        ('x{UUID={{ labels.UUID }}, gpu!="7"}', ['x{gpu!="7"}']),
        ('{__name__="foo", a="b,c"} or bar{}', ['foo{a="b,c"}', "bar"]),
    ],
)
def test_the_selectors_asked_keep_their_matchers_but_not_a_templates(expr: str, selectors: list[str]) -> None:
    assert parse(expr).names() == selectors
