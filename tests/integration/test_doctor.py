"""`remediate doctor` against a real Prometheus 2.42 and a real AlertManager 0.25 (tests/support/realsystems.py):
a working set-up (exit 0, every check OK) and a broken one (exit 2, each failure named with its fix).

The exporter is a dcgm-exporter 4.9+ as far as Prometheus can tell: it publishes DCGM_FI_DEV_GPU_TEMP_CELSIUS,
not the legacy DCGM_FI_DEV_GPU_TEMP. The working set-up's rule and verify query read both generations; the
broken one's read only the legacy name, as the rules did before they were written for both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.config.values import Sink
from tests.support.cli import run_cli
from tests.support.http import READ_TOKEN, TOKEN, MakeServer, Server
from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, WebhookRecorder, free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_environment")]

SHIPPED_PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "gpu-overheat.yaml"
BOTH_GENERATIONS = "(DCGM_FI_DEV_GPU_TEMP or DCGM_FI_DEV_GPU_TEMP_CELSIUS)"
WEBHOOK_TOKEN = "w" * 32
OPERATOR_TOKEN = "o" * 32
BIND_PORT = free_port()
"""The port the (not running) server would bind: AlertManager's webhook URL names it."""


def rule_file(path: Path, series: str) -> Path:
    rule = {
        "alert": "GPUTemperatureHigh",
        "expr": f"max by (UUID, gpu, Hostname, hostname) ({series}) > 85",
        "for": "2m",
        "labels": {"severity": "warning"},
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "gpu.rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "gpu", "rules": [rule]}]}))
    return path


SHIPPED_QUERY = (
    'max({__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS", UUID={{ labels.UUID | promql_string }}}) < 80'
)
LEGACY_QUERY = "max(DCGM_FI_DEV_GPU_TEMP{UUID={{ labels.UUID | promql_string }}}) < 80"


def playbook_dir(path: Path, *, both_generations: bool) -> Path:
    """The shipped gpu-overheat ladder (its verify query reads both generations); without them, its query as it
    read before it was written for both."""
    text = SHIPPED_PLAYBOOK.read_text()
    assert SHIPPED_QUERY in text
    if not both_generations:
        text = text.replace(SHIPPED_QUERY, LEGACY_QUERY)
    path.mkdir(parents=True, exist_ok=True)
    (path / "gpu-overheat.yaml").write_text(text)
    return path


@pytest.fixture(scope="module")
def metrics() -> Iterator[MetricsEndpoint]:
    with MetricsEndpoint() as endpoint:
        endpoint.set("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 61, {"UUID": "GPU-1", "gpu": "0", "hostname": "gpu-1"})
        yield endpoint


@pytest.fixture(scope="module")
def alertmanagers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, AlertManager]]:
    """`good`: routes to this server every 30m (the ladder's holds_for); `slow`: every 4h."""
    url = f"http://127.0.0.1:{BIND_PORT}/webhook"
    with (
        AlertManager(tmp_path_factory.mktemp("am-good"), url, token=WEBHOOK_TOKEN, repeat_interval="30m") as good,
        AlertManager(tmp_path_factory.mktemp("am-slow"), url, token=WEBHOOK_TOKEN, repeat_interval="4h") as slow,
    ):
        yield {"good": good, "slow": slow}


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, metrics: MetricsEndpoint, alertmanagers: dict[str, AlertManager]
) -> Iterator[Prometheus]:
    # It evaluates the working set-up's rule: doctor warns of a rule Prometheus does not evaluate.
    rules = rule_file(tmp_path_factory.mktemp("prometheus-rules"), BOTH_GENERATIONS)
    with Prometheus(
        tmp_path_factory.mktemp("prometheus"),
        scrape_targets=[metrics.target],
        rule_files=[rules / "gpu.rules.yml"],
        alertmanager_url=alertmanagers["good"].url,
    ) as server:
        wait_until(lambda: server.query("DCGM_FI_DEV_GPU_TEMP_CELSIUS"), 30, message="no scrape yet")
        yield server


def config(tmp_path: Path, **settings: Any) -> Path:
    path = tmp_path / "remediate.yaml"
    base = {"schedulers": "none", "bind": f"127.0.0.1:{BIND_PORT}", "webhook_token": WEBHOOK_TOKEN}
    path.write_text(yaml.safe_dump({**base, **settings}))
    return path


def doctor(config_file: Path) -> tuple[int, str, dict[str, Any]]:
    """Exit code, the text output and the --json output of `remediate doctor`."""
    text = run_cli("doctor", "--config", config_file)
    as_json = run_cli("doctor", "--config", config_file, "--json")
    assert text.exit_code == as_json.exit_code, text.output + as_json.output
    return text.exit_code, text.output, json.loads(as_json.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def test_a_working_set_up_is_all_ok(
    tmp_path: Path, prometheus: Prometheus, alertmanagers: dict[str, AlertManager]
) -> None:
    with WebhookRecorder() as sink:
        code, output, report = doctor(
            config(
                tmp_path,
                operator_token=OPERATOR_TOKEN,
                playbooks=str(playbook_dir(tmp_path / "playbooks", both_generations=True)),
                rule_files=str(rule_file(tmp_path / "rules", BOTH_GENERATIONS)),
                prometheus_url=prometheus.url,
                alertmanager_url=alertmanagers["good"].url,
                sinks={"oncall": {"type": "webhook", "url": sink.url}},
            )
        )
        print(output)
        assert sink.requests == [], "a check must never notify: nothing is POSTed to a sink"
    assert code == 0, output
    assert report["status"] == "OK"
    checks = by_name(report)
    rule = checks["series: rule GPUTemperatureHigh (gpu.rules.yml)"]
    assert "DCGM_FI_DEV_GPU_TEMP_CELSIUS [dcgm-exporter >= 4.9 (DCGM 4.7 field names)] fresh" in rule["detail"]
    assert "DCGM_FI_DEV_GPU_TEMP [dcgm-exporter <= 4.8" in rule["detail"] and "absent" in rule["detail"]
    assert rule["detail"].endswith("data from dcgm-exporter >= 4.9 (DCGM 4.7 field names)")
    assert checks["series: playbook gpu-overheat step cool-for-10m"]["status"] == "OK"
    routed = checks["routing: GPUTemperatureHigh (playbook gpu-overheat)"]
    assert routed["detail"] == "route -> remediate, repeat_interval 30m <= holds_for 30m"
    assert checks["sinks: oncall"]["status"] == "OK"
    assert {check["family"] for check in report["checks"]} == {"tokens", "series", "routing", "sinks"}


def test_a_broken_set_up_names_each_failure_and_its_fix(
    tmp_path: Path, prometheus: Prometheus, alertmanagers: dict[str, AlertManager]
) -> None:
    code, output, report = doctor(
        config(
            tmp_path,
            playbooks=str(playbook_dir(tmp_path / "playbooks", both_generations=False)),
            rule_files=str(rule_file(tmp_path / "rules", "DCGM_FI_DEV_GPU_TEMP")),
            prometheus_url=prometheus.url,
            alertmanager_url=alertmanagers["slow"].url,
            sinks={"oncall": {"type": "webhook", "url": f"http://127.0.0.1:{free_port()}/hook"}},
        )
    )
    print(output)
    assert code == 2, output
    assert report["status"] == "FAIL"
    checks = by_name(report)
    rule = checks["series: rule GPUTemperatureHigh (gpu.rules.yml)"]
    assert rule["status"] == "FAIL"
    assert "4.9+ exports DCGM_FI_DEV_GPU_TEMP_CELSIUS" in rule["detail"]
    assert rule["fix"] == (
        "Prometheus has DCGM_FI_DEV_GPU_TEMP_CELSIUS: the exporter is 4.9+; "
        "read both generations (DCGM_FI_DEV_GPU_TEMP or DCGM_FI_DEV_GPU_TEMP_CELSIUS)"
    )
    assert checks["series: playbook gpu-overheat step cool-for-10m"]["status"] == "FAIL"
    routed = checks["routing: GPUTemperatureHigh (playbook gpu-overheat)"]
    assert routed["status"] == "WARN"
    assert "4h instead of holds_for 30m" in routed["detail"]
    assert routed["fix"] == "set repeat_interval: 30m (or less) on route"
    assert checks["sinks: oncall"]["status"] == "FAIL"
    assert checks["sinks: oncall"]["detail"].endswith("/hook: Connection refused")
    assert checks["tokens: operator"]["status"] == "WARN"
    # The text output has the same checks, each failure followed by its fix.
    assert "FAIL  series: rule GPUTemperatureHigh (gpu.rules.yml): " in output
    assert "      fix: Prometheus has DCGM_FI_DEV_GPU_TEMP_CELSIUS" in output
    assert output.rstrip().endswith("doctor: 2 OK, 2 WARN, 3 FAIL")


def test_an_alertmanager_that_sends_elsewhere_fails(
    tmp_path: Path, prometheus: Prometheus, alertmanagers: dict[str, AlertManager]
) -> None:
    # The same AlertManager, read by a server that binds another port: its receiver does not point here.
    code, output, report = doctor(
        config(
            tmp_path,
            bind=f"127.0.0.1:{free_port()}",
            operator_token=OPERATOR_TOKEN,
            playbooks=str(playbook_dir(tmp_path / "playbooks", both_generations=True)),
            alertmanager_url=alertmanagers["good"].url,
        )
    )
    assert code == 2, output
    receiver = by_name(report)["routing: receiver"]
    assert receiver["status"] == "FAIL"
    assert f"remediate: http://127.0.0.1:{BIND_PORT}/webhook" in receiver["detail"]


def test_an_unreachable_prometheus_and_alertmanager_fail(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    code, output, report = doctor(
        config(
            tmp_path,
            operator_token=OPERATOR_TOKEN,
            playbooks=str(playbook_dir(tmp_path / "playbooks", both_generations=True)),
            prometheus_url=closed,
            alertmanager_url=closed,
        )
    )
    assert code == 2, output
    checks = by_name(report)
    assert checks["series: prometheus"]["status"] == "FAIL"
    assert checks["series: prometheus"]["detail"].startswith("does not answer: GET")
    assert checks["routing: alertmanager"]["status"] == "FAIL"


def test_get_doctor_answers_the_same_checks_for_the_playbooks_the_server_holds(
    tmp_path: Path, make_server: MakeServer, prometheus: Prometheus, alertmanagers: dict[str, AlertManager]
) -> None:
    playbooks = playbook_dir(tmp_path / "playbooks", both_generations=True)
    with WebhookRecorder() as sink:
        server = make_server(
            playbooks={"gpu-overheat.yaml": (playbooks / "gpu-overheat.yaml").read_text()},
            schedulers=(),
            bind=f"127.0.0.1:{BIND_PORT}",
            rule_files=rule_file(tmp_path / "rules", BOTH_GENERATIONS),
            prometheus_url=prometheus.url,
            alertmanager_url=alertmanagers["good"].url,
            sinks=(Sink("oncall", "webhook", url=sink.url),),
        )
        answer = server.get("/doctor", token=READ_TOKEN)
        assert sink.requests == []
    assert answer.status_code == 200
    body = answer.get_json()
    assert body["status"] == "OK", body
    assert [c["name"] for c in body["checks"]] == [
        "tokens: webhook",
        "tokens: operator",
        "series: rule GPUTemperatureHigh (gpu.rules.yml)",
        "series: playbook gpu-overheat step cool-for-10m",
        "routing: receiver",
        "routing: GPUTemperatureHigh (playbook gpu-overheat)",
        "sinks: oncall",
    ]
    assert server.get("/doctor", token=None).status_code == 401
    assert server.get("/doctor", token=TOKEN).status_code == 403  # the webhook-only token


def test_doctor_server_prints_what_the_running_server_answers(
    tmp_path: Path, make_server: MakeServer, serve: Callable[[Server], str], prometheus: Prometheus
) -> None:
    # The server's own settings: a rule on the legacy name only, and no AlertManager to read.
    server = make_server(
        playbooks={},
        schedulers=(),
        rule_files=rule_file(tmp_path / "rules", "DCGM_FI_DEV_GPU_TEMP"),
        prometheus_url=prometheus.url,
    )
    token_file = tmp_path / "read-token"
    token_file.write_text(READ_TOKEN)

    result = run_cli("doctor", "--server", serve(server), "--token-file", token_file)

    assert result.exit_code == 2, result.output
    lines = result.stdout.splitlines()
    assert "FAIL  series: rule GPUTemperatureHigh (gpu.rules.yml): reads DCGM_FI_DEV_GPU_TEMP" in "\n".join(lines)
    assert "WARN  routing: alertmanager: alertmanager_url is not set: routes not checked" in lines
    assert lines[-1] == "doctor: 2 OK, 1 WARN, 1 FAIL"  # the two OK: the webhook and operator tokens


def test_a_selector_whose_matchers_match_nothing_fails_though_the_metric_exists(
    tmp_path: Path, prometheus: Prometheus
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    groups = [{"name": "up", "rules": [
        {"alert": "ScrapedJobDown", "expr": 'max(up{job="test"}) == 0'},  # the job realsystems.Prometheus scrapes
        {"alert": "OtherJobDown", "expr": 'max(up{job="no-such-job"}) == 0'},
    ]}]  # fmt: skip
    (rules / "up.rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    code, output, report = doctor(
        config(tmp_path, operator_token=OPERATOR_TOKEN, playbooks=str(playbooks), rule_files=str(rules),
               prometheus_url=prometheus.url)
    )  # fmt: skip
    checks = by_name(report)
    # Neither rule is in a file this Prometheus loads: the one with data warns, the one without fails.
    scraped = checks["series: rule ScrapedJobDown (up.rules.yml)"]
    assert scraped["status"] == "WARN"
    assert scraped["detail"] == "reads up fresh; but Prometheus evaluates no rule of this name (/api/v1/rules)"
    other = checks["series: rule OtherJobDown (up.rules.yml)"]
    assert other["status"] == "FAIL"
    assert other["detail"] == (
        'reads up fresh, but none matches {job="no-such-job"}: no data, it never holds; '
        "Prometheus evaluates no rule of this name (/api/v1/rules)"
    )
    assert code == 2, output
