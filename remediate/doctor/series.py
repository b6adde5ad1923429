"""Series checks: does the configured Prometheus hold every series the rules and the playbooks' check.prometheus
queries read, and is it fresh? One check per rule or query, naming each series, its state and, for a DCGM
name, the dcgm-exporter generation it suggests. An expression over both generations (`a or b`) is OK when
either side has data, and says which one has."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from remediate.doctor import dcgm
from remediate.doctor.model import Check, Status, fail, ok, warn
from remediate.doctor.probe import Probe, ProbeError
from remediate.doctor.promql import PromqlSyntaxError, matchers_of, name_of, parse, series_names
from remediate.doctor.rules import Rule

FAMILY = "series"
SEEN_WINDOW = "1d"
"""A series with no current sample but one within this is stale (it was there: an exporter down, a target gone)."""
SEEN_STEP = "5m"
"""The subquery step of that look back: a sample per series every 5m, not every scrape. `last_over_time(x[1d])`
reads every sample of a day (80,000 GPU series x 5,760 scrapes is over Prometheus' default 50M query.max-samples);
at 5m steps, the lookback's own length, it is 288 per series, and an exporter that ran for 5 minutes is seen."""


class State(enum.Enum):
    FRESH = "fresh"
    STALE = f"stale: no current sample, seen within {SEEN_WINDOW}"
    ABSENT = f"absent: no sample in {SEEN_WINDOW}"


@dataclass(frozen=True)
class Expression:
    """An expression to check and where it comes from."""

    name: str
    expr: str
    recorded_here: bool = False
    rule: str | None = None
    """The rule's name (alert or record); None for a playbook's query."""


class SeriesStates:
    """The state of each series name, asked of Prometheus once per name."""

    def __init__(self, probe: Probe, prometheus_url: str) -> None:
        self._probe = probe
        self._url = prometheus_url.rstrip("/")
        self._known: dict[str, State] = {}

    def state(self, name: str) -> State:
        if name not in self._known:
            self._known[name] = self._ask(name)
        return self._known[name]

    def _ask(self, name: str) -> State:
        # A selector of a rule file or a playbook as written (its template matchers left out), never an alert's.
        # Fresh is what a rule sees now: an instant selection (a sample within the 5m lookback, not marked stale
        # as a target that went away is), one sample per series.
        queries = (
            (f"count({name})", State.FRESH),
            (f"count(last_over_time({name}[{SEEN_WINDOW}:{SEEN_STEP}]))", State.STALE),
        )
        for query, state in queries:
            body = self._probe.get_json(f"{self._url}/api/v1/query", params={"query": query})
            if (body.get("data") or {}).get("result"):
                return state
        return State.ABSENT

    def evaluated_rules(self) -> set[str]:
        """The names of the rules Prometheus evaluates (`/api/v1/rules`: alerting and recording)."""
        body = self._probe.get_json(f"{self._url}/api/v1/rules")
        groups = (body.get("data") or {}).get("groups") or []
        return {str(rule.get("name")) for group in groups for rule in group.get("rules") or []}

    def reachable(self) -> str | None:
        """None when Prometheus answers a query; else why not."""
        try:
            self._probe.get_json(f"{self._url}/api/v1/query", params={"query": "vector(1)"})
        except ProbeError as exc:
            return str(exc)
        return None


def expressions(rules: Iterable[Rule], queries: Iterable[tuple[str, str]]) -> list[Expression]:
    """The rules' expressions, then the playbooks' check.prometheus queries ((name, query) pairs)."""
    rules = list(rules)
    recorded = {rule.name for rule in rules if not rule.alert}
    count = Counter((rule.name, rule.file) for rule in rules)
    seen: Counter[tuple[str, str]] = Counter()
    found = []
    for rule in rules:
        seen[(rule.name, rule.file)] += 1
        # Two rules of one name in a file (a disk rule per threshold): each its own check, told apart by its place.
        nth = f", #{seen[(rule.name, rule.file)]}" if count[(rule.name, rule.file)] > 1 else ""
        found.append(Expression(f"rule {rule.name} ({rule.file}{nth})", rule.expr, rule=rule.name))
    found.extend(Expression(name, query) for name, query in queries)
    return [replace(e, recorded_here=bool(recorded & set(series_names_or_empty(e.expr)))) for e in found]


def series_names_or_empty(expr: str) -> list[str]:
    try:
        return series_names(expr)
    except PromqlSyntaxError:
        return []


def check_expression(expression: Expression, states: SeriesStates) -> Check:
    name = f"series: {expression.name}"
    try:
        needs = parse(expression.expr)
    except PromqlSyntaxError as exc:
        return fail(FAMILY, name, f"cannot read the expression: {exc}", "fix the PromQL (promtool check rules)")
    names = needs.names()
    if not names:
        return ok(FAMILY, name, "reads no series")
    try:
        seen = {series: states.state(series) for series in names}
    except ProbeError as exc:
        return fail(FAMILY, name, f"cannot ask Prometheus: {exc}", "make prometheus_url answer /api/v1/query")
    reads = "; ".join(dict.fromkeys(_describe(series, state, states) for series, state in seen.items()))
    fresh = _present(seen, {State.FRESH})
    generations = sorted({g for series in fresh for g in [dcgm.generation(name_of(series))] if g})
    present = f"; data from {', '.join(generations)}" if generations else ""
    if needs.satisfied(lambda series: series in fresh):
        return ok(FAMILY, name, f"reads {reads}{present}")
    if needs.satisfied(lambda series: series in _present(seen, {State.FRESH, State.STALE})):
        return warn(
            FAMILY, name, f"reads {reads}", "its exporter stopped answering: check the scrape target (up == 0?)"
        )
    return fail(FAMILY, name, f"reads {reads}: no data, it never holds", _fix(seen, states, expression.recorded_here))


def _present(seen: dict[str, State], states: set[State]) -> set[str]:
    return {series for series, state in seen.items() if state in states}


def _describe(series: str, state: State, states: SeriesStates) -> str:
    """One series as the check shows it: its name (and generation), its state; the matchers only when they are
    why nothing is found (the metric itself has fresh samples)."""
    name, matchers = name_of(series), matchers_of(series)
    if state is not State.FRESH and matchers and states.state(name) is State.FRESH:
        return f"{dcgm.describe(name)} fresh, but none matches {{{_short(matchers)}}}"
    return f"{dcgm.describe(name)} {state.value}"


def _short(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _fix(seen: dict[str, State], states: SeriesStates, recorded_here: bool) -> str:
    absent = [name_of(series) for series, state in seen.items() if state is not State.FRESH]
    names = {name_of(series) for series in seen}
    for series in absent:
        other = dcgm.LEGACY_TO_CANONICAL.get(series)
        if other is not None and other not in names and states.state(other) is State.FRESH:
            return f"Prometheus has {other}: the exporter is 4.9+; read both generations ({series} or {other})"
        if other is not None:
            return f"read both generations ({series} or {other}), and check dcgm-exporter is scraped"
    if any(dcgm.generation(series) for series in absent):
        return "enable the field in dcgm-exporter's counters file (-f) and check the exporter is scraped"
    if recorded_here:
        return "load the recording rules it reads (Prometheus rule_files, or the chart's PrometheusRule)"
    if any(states.state(series) is State.FRESH for series in absent):
        return "check the selector's matchers against the labels the exporter gives (or the exporter's version)"
    return f"make Prometheus scrape the exporter of {absent[0]} (a scrape config or ServiceMonitor)"


def check_series(
    states: SeriesStates | None, expressions_: Iterable[Expression], *, needed: bool, why_none: str
) -> list[Check]:
    """Every expression's check; one check instead when there is no Prometheus to ask."""
    expressions_ = list(expressions_)
    if states is None:
        check = fail if needed else warn
        return [check(FAMILY, "series: prometheus", why_none, "set prometheus_url to the Prometheus the rules run in")]
    if (problem := states.reachable()) is not None:
        return [fail(FAMILY, "series: prometheus", f"does not answer: {problem}", "check prometheus_url and its token")]
    try:
        evaluated = states.evaluated_rules()
    except ProbeError:
        evaluated = None  # a Prometheus that answers queries but not /api/v1/rules: the series are still checked
    return [_evaluated(check_expression(expression, states), expression, evaluated) for expression in expressions_]


def _evaluated(check: Check, expression: Expression, evaluated: set[str] | None) -> Check:
    """A rule's check, warned (or its failure told) when Prometheus does not evaluate a rule of that name: its
    series may be fresh, but nothing fires from a file Prometheus did not load."""
    if expression.rule is None or evaluated is None or expression.rule in evaluated:
        return check
    why = "Prometheus evaluates no rule of this name (/api/v1/rules)"
    if check.status is Status.FAIL:
        return replace(check, detail=f"{check.detail}; {why}")
    fix = "load the rule file in Prometheus (rule_files, or the chart's PrometheusRule) and check its reload"
    return warn(FAMILY, check.name, f"{check.detail}; but {why}", fix)
