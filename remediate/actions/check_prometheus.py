"""`check.prometheus`: pass only once a PromQL condition has held for a while (e.g. before an undo).

A step of this action asks the Prometheus HTTP API of the `prometheus_url` setting (never a label)
whether `query` has held for `for`, and waits for that up to `timeout`, asking again every `poll`.
It changes nothing; a check that does not pass fails its step, so the steps after it (an uncordon,
a clock unlock in `on_resolved`) do not run, unless they are marked `always`.

What "holds" means, exactly:

- at one instant, the query holds when Prometheus' instant evaluation of it returns at least one
  sample and every sample's value is a number other than 0 (NaN counts as not holding). A
  comparison without `bool` (`DCGM_FI_DEV_GPU_TEMP{...} < 80`) returns nothing while false, so it
  does not hold; `up{...} == 1` holds while the target is up; an empty answer (no such series) never holds.
- it has held for `for` when it held at every evaluation instant from now - `for` to now, one
  every `poll` (one `query_range` request over that window: Prometheus' own history counts, so a
  node healthy for the last ten minutes passes at once). A dip shorter than `poll` that falls
  between two instants is not seen: set `poll` to the scrape interval for the finest resolution.
- `for: 0s` is a single instant query.

Label values templated into `query` must go through the `promql_string` filter (`{Hostname={{
labels.Hostname | promql_string }}}`), which writes them as PromQL string literals: the loader
refuses a `query` that prints any value without it (or `int`/`float`), so a label cannot change
what the query means.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.schema import Param, ParamSchema, duration_within
from remediate.actions.templating import unescaped_outputs
from remediate.config.durations import format_duration, parse_duration
from remediate.errors import ActionError
from remediate.outbound.lazyhttp import SessionSlot

if TYPE_CHECKING:
    import requests

SAFE_FILTERS = frozenset({"promql_string", "int", "float"})
MAX_FOR_S = 7 * 86400.0
MAX_TIMEOUT_S = 7 * 86400.0
MAX_POINTS = 10_000
"""Evaluation instants of one query_range request (Prometheus refuses more than 11,000): a long `for`
gets a coarser step than `poll`."""
HTTP_TIMEOUT_S = 10.0
DEADLINE_MARGIN_S = 0.5


class PrometheusUnset(ActionError):
    """The `prometheus_url` setting is not set: there is nothing to ask."""


class PrometheusQueryError(ActionError):
    """Prometheus refused the query (bad PromQL, a string result): asking again cannot help."""


class PrometheusUnavailable(ActionError):
    """Prometheus could not be asked (connection, 5xx, time-out): the check asks again until its timeout."""


def _query_template(source: str) -> str | None:
    unsafe = unescaped_outputs(source, SAFE_FILTERS)
    if unsafe:
        return (
            f"prints {', '.join(unsafe)} into PromQL without escaping: write label values as "
            "`{{ labels.NAME | promql_string }}` (a quoted PromQL string literal)"
        )
    return None


def _duration(default: str, high_s: float, doc: str, *, low_s: float = 0) -> Param:
    """A duration param, written in the playbook (a label must not stretch or shorten the wait)."""
    return Param(str, default=default, static=True, check=duration_within(low_s, high_s), doc=doc)


@dataclass(frozen=True)
class Evaluation:
    """What Prometheus said about the query over the window [at - for, at]."""

    at: float
    """UNIX time of the last evaluation instant."""
    held: bool
    """True when the query held at every instant of the window."""
    holds_now: bool
    holds_since: float | None
    """The first instant of the unbroken run of holding instants that ends now (the window's start when
    it held throughout: it may hold for longer); None when it does not hold now."""
    current: list[dict[str, Any]] = field(default_factory=list)
    """The samples at the last instant: [{"metric": {...}, "value": float}]."""

    def as_json(self, for_s: float) -> dict[str, Any]:
        held_for = None if self.holds_since is None else round(self.at - self.holds_since, 3)
        return {
            "holds_now": self.holds_now,
            "held": self.held,
            "holds_since": _rfc3339(self.holds_since) if self.holds_since is not None else None,
            "held_for_seconds": held_for,
            "held_for_at_least": self.held and for_s > 0,
            "current": self.current,
            "evaluated_at": _rfc3339(self.at),
        }


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _truthy(value: str) -> bool:
    try:
        number = float(value)
    except ValueError:
        return False
    return not math.isnan(number) and number != 0


class PrometheusCheckAction(Action):
    name: ClassVar[str] = "check.prometheus"
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = True
    description: ClassVar[str] = (
        "Pass once a PromQL query has held (a non-empty result, every value non-zero) for `for`, waiting up to "
        "`timeout`; fail otherwise, so the steps after it (an uncordon, an unlock) do not run."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "query": Param(
                str,
                required=True,
                check=lambda value: None if value.strip() else "must not be empty",
                template_check=_query_template,
                doc="PromQL; label values only as `{{ labels.NAME | promql_string }}` (escaped string literals)",
            ),
            "for": _duration(
                "0s", MAX_FOR_S, "how long the query must have held without a break (0s: now); at most 7d"
            ),
            "timeout": _duration(
                "5m", MAX_TIMEOUT_S, "how long to wait for that before failing (also bounded by the step's own timeout)"
            ),
            "poll": _duration(
                "15s",
                300,
                "how often to ask again, and the resolution of the window (1s to 5m; the scrape interval is best)",
                low_s=1,
            ),
        }
    )

    session = SessionSlot()
    settings_section: ClassVar[str] = "prometheus"

    def __init__(
        self,
        url: str | None,
        *,
        token_file: Path | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url
        self.token_file = token_file
        self.session = session

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        return cls(deps.settings.url, token_file=deps.settings.bearer_token_file)

    # ------------------------------------------------------------------ the action

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        for_s, _timeout_s, poll_s = _seconds(params)
        plan: dict[str, Any] = {
            "query": params["query"],
            "prometheus_url": self._base(),
            "for": params["for"],
            "timeout": params["timeout"],
            "poll": params["poll"],
        }
        try:
            evaluation = self.evaluate(params["query"], for_s, poll_s, timeout=min(HTTP_TIMEOUT_S, ctx.remaining()))
        except PrometheusUnavailable as exc:
            # A plan reads what it can: the step itself asks again until its timeout.
            return {
                **plan,
                "error": str(exc),
                "would": f"ask again every {params['poll']} for up to {params['timeout']}",
            }
        plan.update(evaluation.as_json(for_s))
        plan["would"] = (
            "pass now"
            if evaluation.held
            else f"wait up to {params['timeout']} for the query to hold for {params['for']} "
            f"(asking every {params['poll']})"
        )
        return plan

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        for_s, timeout_s, poll_s = _seconds(params)
        self._base()
        started = time.monotonic()
        deadline = started + min(timeout_s, max(0.0, ctx.remaining() - DEADLINE_MARGIN_S))
        evaluation: Evaluation | None = None
        unavailable: PrometheusUnavailable | None = None
        asked = 0
        while True:
            asked += 1
            try:
                evaluation = self.evaluate(
                    params["query"], for_s, poll_s, timeout=max(0.1, min(HTTP_TIMEOUT_S, deadline - time.monotonic()))
                )
                unavailable = None
            except PrometheusUnavailable as exc:
                unavailable = exc
            if evaluation is not None and unavailable is None and evaluation.held:
                return {
                    "passed": True,
                    "query": params["query"],
                    "for": params["for"],
                    "waited_seconds": round(time.monotonic() - started, 3),
                    "queries": asked,
                    **evaluation.as_json(for_s),
                }
            if ctx.stopping.is_set():
                raise ActionError(f"stopped before the query held for {params['for']} (the server is stopping)")
            if time.monotonic() + poll_s > deadline:
                break
            ctx.stopping.wait(poll_s)
        waited = format_duration(time.monotonic() - started)
        if unavailable is not None:
            raise ActionError(f"check failed: Prometheus could not be asked for {waited}: {unavailable}")
        assert evaluation is not None
        if evaluation.holds_since is None:
            state = "it does not hold now" + ("" if evaluation.current else " (the query returns no sample)")
        else:
            state = f"it has held only since {_rfc3339(evaluation.holds_since)}"
        raise ActionError(
            f"check failed: {params['query']} did not hold for {params['for']} within {waited} ({state}; "
            f"current: {_summary(evaluation.current)})"
        )

    # ------------------------------------------------------------------ Prometheus

    def evaluate(self, query: str, for_s: float, poll_s: float, *, timeout: float) -> Evaluation:
        """Ask Prometheus about [now - for_s, now]: one instant query when for_s is 0, else one query_range."""
        now = time.time()
        if for_s <= 0:
            data = self._get("/api/v1/query", {"query": query, "time": f"{now:.3f}"}, timeout)
            current = _instant_samples(data)
            holds = bool(current) and all(_truthy(s["value"]) for s in current)
            return Evaluation(
                at=now, held=holds, holds_now=holds, holds_since=now if holds else None, current=_numbers(current)
            )
        # Whole milliseconds (Prometheus' resolution), the last instant now: the window covers at least
        # `for`, and no float rounding can drop its last instant.
        step_ms = max(round(poll_s * 1000), math.ceil(for_s * 1000 / MAX_POINTS))
        count = math.ceil(for_s * 1000 / step_ms) + 1
        end_ms = int(now * 1000)
        start_ms = end_ms - (count - 1) * step_ms
        instants = [(start_ms + k * step_ms) / 1000 for k in range(count)]
        data = self._get(
            "/api/v1/query_range",
            {"query": query, "start": _ms(start_ms), "end": _ms(end_ms), "step": _ms(step_ms)},
            timeout,
        )
        # The samples at each instant; an instant no series has a sample at is an empty answer there.
        at_instant: list[list[dict[str, Any]]] = [[] for _ in instants]
        for series in _matrix(data):
            for ts, value in series.get("values", []):
                index = round((float(ts) * 1000 - start_ms) / step_ms)
                if 0 <= index < count:
                    at_instant[index].append({"metric": series.get("metric", {}), "value": value})
        holding = [bool(samples) and all(_truthy(s["value"]) for s in samples) for samples in at_instant]
        since = None
        for instant, holds in zip(reversed(instants), reversed(holding), strict=True):
            if not holds:
                break
            since = instant
        return Evaluation(
            at=instants[-1],
            held=all(holding),
            holds_now=holding[-1],
            holds_since=since,
            current=_numbers(at_instant[-1]),
        )

    def _base(self) -> str:
        if not self.url:
            raise PrometheusUnset(
                "check.prometheus needs the prometheus_url setting (REMEDIATE_PROMETHEUS_URL, e.g. "
                "http://prometheus:9090): it is not set"
            )
        return self.url

    def _headers(self) -> dict[str, str]:
        if self.token_file is None:
            return {}
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ActionError(f"cannot read prometheus_bearer_token_file {self.token_file}: {exc.strerror}") from None
        if not token:
            raise ActionError(f"prometheus_bearer_token_file {self.token_file} is empty")
        return {"Authorization": f"Bearer {token}"}

    def _get(self, path: str, query: dict[str, str], timeout: float) -> dict[str, Any]:
        import requests  # here, not at the top: see remediate.outbound.lazyhttp

        url = f"{self._base()}{path}"
        try:
            response = self.session.get(
                url, params=query, headers=self._headers(), timeout=timeout, allow_redirects=False
            )
        except requests.RequestException as exc:
            raise PrometheusUnavailable(f"GET {url} failed: {exc.__class__.__name__}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code in (400, 422) and isinstance(body, dict):
            raise PrometheusQueryError(f"Prometheus refused the query: {body.get('errorType')}: {body.get('error')}")
        if response.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusUnavailable(f"GET {url} answered {response.status_code}: {response.text[:200]}")
        data = body.get("data")
        if not isinstance(data, dict):
            raise PrometheusUnavailable(f"GET {url} answered without data")
        return data


def _seconds(params: Mapping[str, Any]) -> tuple[float, float, float]:
    return tuple(parse_duration(params[key]).total_seconds() for key in ("for", "timeout", "poll"))  # type: ignore[return-value]


def _ms(milliseconds: int) -> str:
    return f"{milliseconds // 1000}.{milliseconds % 1000:03d}"


def _instant_samples(data: dict[str, Any]) -> list[dict[str, Any]]:
    kind, result = data.get("resultType"), data.get("result")
    if kind == "vector":
        return [{"metric": s.get("metric", {}), "value": s["value"][1]} for s in result or []]
    if kind == "scalar":
        return [{"metric": {}, "value": result[1]}]
    raise PrometheusQueryError(f"the query must return an instant vector or a scalar, not a {kind}")


def _matrix(data: dict[str, Any]) -> list[dict[str, Any]]:
    if data.get("resultType") != "matrix":
        raise PrometheusQueryError(
            f"the query must return an instant vector or a scalar, not a {data.get('resultType')}"
        )
    return list(data.get("result") or [])


def _numbers(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for sample in samples:
        try:
            value: float | str = float(sample["value"])
        except ValueError:
            value = str(sample["value"])
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)  # NaN/Inf are not JSON
        out.append({"metric": dict(sample["metric"]), "value": value})
    return out


def _summary(samples: list[dict[str, Any]], limit: int = 5) -> str:
    if not samples:
        return "no sample"
    shown = [
        "{" + ",".join(f"{k}={v!r}" for k, v in sorted(s["metric"].items())) + f"}} {s['value']}"
        for s in samples[:limit]
    ]
    more = f" and {len(samples) - limit} more" if len(samples) > limit else ""
    return "; ".join(shown) + more
