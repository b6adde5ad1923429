"""check.prometheus against a real Prometheus scraping a gauge the test sets (tests.support.realsystems)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry, StepContext
from remediate.actions.check_prometheus import PrometheusCheckAction, PrometheusQueryError, PrometheusUnset
from remediate.actions.templating import render_params
from remediate.config.settings import Settings
from remediate.errors import ActionError, PlaybookError
from remediate.executor.loop import Executor
from remediate.intake.alerts import alert_ref
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.realsystems import MetricsEndpoint, Prometheus, free_port
from tests.support.store_json import run_json_of
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

INJECTION = 'node-a"} or vector(1) #'
QUERY = "check_gpu_healthy{Hostname={{ labels.Hostname | promql_string }}} == 1"


@pytest.fixture(scope="module")
def metrics() -> Iterator[MetricsEndpoint]:
    with MetricsEndpoint() as endpoint:
        endpoint.set("check_gpu_healthy", 0, {"Hostname": "warm-up"})
        yield endpoint


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, metrics: MetricsEndpoint) -> Iterator[Prometheus]:
    # No AlertManager here: nothing alerts, the action only reads. The URL names a port nothing listens on.
    with Prometheus(
        tmp_path_factory.mktemp("prometheus"),
        scrape_targets=[metrics.target],
        rule_files=[],
        alertmanager_url=f"http://127.0.0.1:{free_port()}",
    ) as server:
        wait_until(lambda: server.query('check_gpu_healthy{Hostname="warm-up"}'), 30, message="no scrape yet")
        yield server


@pytest.fixture
def action(prom: Prometheus) -> Iterator[PrometheusCheckAction]:
    with requests.Session() as session:
        yield PrometheusCheckAction(prom.url, session=session)


def context(host: str = "node-a", deadline: float = float("inf")) -> StepContext:
    alert = {
        "labels": {"alertname": "GPUTemperatureHigh", "Hostname": host},
        "annotations": {},
        "status": "resolved",
        "fingerprint": "c5801e9cde93e74f",
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "",
        "generatorURL": "http://prometheus/graph",
    }
    return StepContext(
        run_id=3, step_index=0, playbook="gpu-overheat", target=host, alert=alert_ref(alert), deadline=deadline
    )


def rendered(action: PrometheusCheckAction, host: str, **extra: Any) -> dict[str, Any]:
    """The step's params as the engine makes them: the template rendered from the alert's labels, validated."""
    params = render_params({"query": QUERY, **extra}, {"labels": {"Hostname": host}})
    return action.validate(params)


def healthy_from_now(prom: Prometheus, metrics: MetricsEndpoint, host: str) -> float:
    """Set the host's gauge to 1 and wait for Prometheus to have scraped it; returns when it was set."""
    set_at = time.time()
    metrics.set("check_gpu_healthy", 1, {"Hostname": host})
    wait_until(lambda: prom.query(f'check_gpu_healthy{{Hostname="{host}"}} == 1'), 10, message="no scrape")
    return set_at


def test_passes_only_once_the_query_has_held_for_the_whole_window(
    prom: Prometheus, metrics: MetricsEndpoint, action: PrometheusCheckAction
) -> None:
    set_at = healthy_from_now(prom, metrics, "node-pass")

    result = action.execute(rendered(action, "node-pass", **{"for": "3s", "poll": "1s", "timeout": "20s"}), context())
    passed_at = time.time()

    assert result["passed"] is True
    assert passed_at - set_at >= 3.0, "passed before the query had held for `for`"
    assert result["queries"] >= 2, "the series was new: the first answer cannot have covered 3 s"
    assert result["query"] == 'check_gpu_healthy{Hostname="node-pass"} == 1'
    assert result["held"] is True
    assert [s["metric"]["Hostname"] for s in result["current"]] == ["node-pass"]
    assert result["current"][0]["value"] == 1.0
    assert result["held_for_seconds"] >= 3.0


def test_fails_when_the_condition_breaks_within_the_window(
    prom: Prometheus, metrics: MetricsEndpoint, action: PrometheusCheckAction
) -> None:
    healthy_from_now(prom, metrics, "node-flaky")
    breaks = threading.Timer(1.5, metrics.set, ("check_gpu_healthy", 0, {"Hostname": "node-flaky"}))
    breaks.start()
    try:
        with pytest.raises(ActionError, match=r"did not hold for 3s within .*it does not hold now") as info:
            action.execute(rendered(action, "node-flaky", **{"for": "3s", "poll": "1s", "timeout": "5s"}), context())
    finally:
        breaks.cancel()

    assert "current: no sample" in str(info.value), "`== 1` filters the 0 out: the answer is empty"


def test_a_label_cannot_change_what_the_query_means(
    prom: Prometheus, metrics: MetricsEndpoint, action: PrometheusCheckAction
) -> None:
    metrics.set("check_gpu_healthy", 0, {"Hostname": "node-a"})
    wait_until(lambda: prom.query('check_gpu_healthy{Hostname="node-a"} == 0'), 10, message="no scrape")
    # The attack is real: pasted raw, the label's text turns the query into `... or vector(1)`, always true.
    raw = QUERY.replace("{{ labels.Hostname | promql_string }}", '"' + INJECTION + '"')
    assert prom.query(raw), "the unescaped query would have passed"

    params = rendered(action, INJECTION, **{"for": "0s", "poll": "1s", "timeout": "2s"})

    assert params["query"] == 'check_gpu_healthy{Hostname="node-a\\"} or vector(1) #"} == 1'
    with pytest.raises(ActionError, match="does not hold now"):
        action.execute(params, context(INJECTION))
    plan = action.plan(params, context(INJECTION))
    assert (plan["holds_now"], plan["current"]) == (False, [])


def test_the_playbook_loader_refuses_a_query_that_prints_a_label_unescaped(registry: ActionRegistry) -> None:
    def playbook(query: str) -> dict[str, Any]:
        return {
            "name": "verify",
            "match": {"alertname": "GPUTemperatureHigh"},
            "target": "node",
            "steps": [{"action": "check.prometheus", "with": {"query": query, "for": "10m", "timeout": "15m"}}],
        }

    with pytest.raises(PlaybookError, match=r"labels\.Hostname into PromQL without escaping.*promql_string"):
        parse_playbook(playbook('up{Hostname="{{ labels.Hostname }}"} == 1'), registry, source="verify.yaml")
    with pytest.raises(PlaybookError, match="without escaping"):
        parse_playbook(playbook("up{Hostname={{ labels.Hostname | lower }}} == 1"), registry, source="verify.yaml")

    parsed = parse_playbook(playbook(QUERY), registry, source="verify.yaml")
    assert parsed.steps[0].params["query"] == QUERY


def test_plan_shows_the_rendered_query_its_current_result_and_since_when_it_holds(
    prom: Prometheus, metrics: MetricsEndpoint, action: PrometheusCheckAction
) -> None:
    set_at = healthy_from_now(prom, metrics, "node-plan")

    plan = action.plan(rendered(action, "node-plan", **{"for": "1h", "poll": "1s"}), context())

    assert plan["query"] == 'check_gpu_healthy{Hostname="node-plan"} == 1'
    assert plan["prometheus_url"] == prom.url
    assert plan["holds_now"] is True
    assert plan["held"] is False, "the series is seconds old, not an hour"
    assert [s["metric"]["Hostname"] for s in plan["current"]] == ["node-plan"]
    holds_since = time.mktime(time.strptime(plan["holds_since"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert set_at - 2 <= holds_since <= time.time()
    assert plan["would"].startswith("wait up to 5m")


def test_a_query_prometheus_refuses_fails_at_once(action: PrometheusCheckAction) -> None:
    started = time.monotonic()
    with pytest.raises(PrometheusQueryError, match="bad_data"):
        action.execute(action.validate({"query": "up{", "timeout": "30s"}), context())
    assert time.monotonic() - started < 5


def test_without_the_prometheus_url_setting_the_step_fails_saying_so() -> None:
    action = PrometheusCheckAction(None)
    params = action.validate({"query": "up == 1"})

    with pytest.raises(PrometheusUnset, match="prometheus_url setting"):
        action.execute(params, context())
    with pytest.raises(PrometheusUnset, match="REMEDIATE_PROMETHEUS_URL"):
        action.plan(params, context())


def test_an_unreachable_prometheus_fails_after_the_timeout_naming_it() -> None:
    action = PrometheusCheckAction(f"http://127.0.0.1:{free_port()}")

    with pytest.raises(ActionError, match="Prometheus could not be asked"):
        action.execute(action.validate({"query": "up == 1", "timeout": "2s", "poll": "1s"}), context())


def test_the_bearer_token_file_is_sent(tmp_path: Path) -> None:
    seen: list[str | None] = []

    class Session(requests.Session):
        def get(self, url: str | bytes, **kwargs: Any) -> requests.Response:  # type: ignore[override]
            seen.append(kwargs["headers"].get("Authorization"))
            raise requests.ConnectionError("refused")

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    action = PrometheusCheckAction("http://prometheus:9090", token_file=token, session=Session())
    with pytest.raises(ActionError):
        action.execute(action.validate({"query": "up", "timeout": "1s"}), context())
    assert seen and set(seen) == {"Bearer s3cret"}


@pytest.fixture
def registry(prom: Prometheus) -> ActionRegistry:
    return default_registry(Settings.of(prometheus_url=prom.url))


def test_a_check_that_fails_keeps_the_undo_after_it_from_running(
    prom: Prometheus,
    metrics: MetricsEndpoint,
    store: Store,
    make_engine: Callable[..., Engine],
) -> None:
    metrics.set("check_gpu_healthy", 0, {"Hostname": "node-hot"})
    wait_until(lambda: prom.query('check_gpu_healthy{Hostname="node-hot"} == 0'), 10, message="no scrape")
    engine = make_engine(
        {
            "name": "verify-then-undo",
            "match": {"alertname": "GPUTemperatureHigh"},
            "target": "node",
            "steps": [
                {"name": "healthy", "action": "check.prometheus", "with": {"query": QUERY, "timeout": "2s"}},
                {"name": "undo", "action": "log", "with": {"message": "uncordon would run here"}},
                {"name": "tell", "action": "log", "with": {"message": "told"}, "always": True},
            ],
        }
    )
    (decision,) = ingest_alerts(
        engine, alert_payload("GPUTemperatureHigh", labels={"Hostname": "node-hot"}), at=time.time()
    ).decisions
    Executor(store=store, registry=engine.registry, retry_wait_max=0.01).drain()

    detail = run_json_of(store, decision.run_id)
    assert detail["status"] == "failed"
    assert [(s["name"], s["status"]) for s in detail["steps"]] == [
        ("healthy", "failed"),
        ("undo", "skipped"),
        ("tell", "succeeded"),
    ]
    assert 'check_gpu_healthy{Hostname="node-hot"} == 1 did not hold' in detail["steps"][0]["error"]
    assert detail["steps"][0]["plan"]["query"] == 'check_gpu_healthy{Hostname="node-hot"} == 1'


def test_a_dip_inside_the_window_breaks_it_and_holds_since_starts_after_it(
    prom: Prometheus, metrics: MetricsEndpoint, action: PrometheusCheckAction
) -> None:
    healthy_from_now(prom, metrics, "node-dip")
    metrics.set("check_gpu_healthy", 0, {"Hostname": "node-dip"})
    wait_until(lambda: not prom.query('check_gpu_healthy{Hostname="node-dip"} == 1'), 10, message="no scrape")
    recovered = time.time()
    metrics.set("check_gpu_healthy", 1, {"Hostname": "node-dip"})
    wait_until(lambda: prom.query('check_gpu_healthy{Hostname="node-dip"} == 1'), 10, message="no scrape")

    evaluation = action.evaluate('check_gpu_healthy{Hostname="node-dip"} == 1', 30.0, 1.0, timeout=scaled(5))

    assert (evaluation.holds_now, evaluation.held) == (True, False)
    assert evaluation.holds_since is not None
    assert recovered - 1.0 <= evaluation.holds_since <= evaluation.at
    assert evaluation.at <= time.time()
