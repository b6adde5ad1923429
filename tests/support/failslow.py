"""The shipped fail-slow parts as the end-to-end tests run them (tests/e2e/test_straggler.py on Kubernetes,
tests/e2e/test_slurm_failslow.py on Slurm): the shipped TrainingStragglerRank rule and training-fail-slow playbook
with only their times shrunk, so that a ladder of hours runs in a minute; expressions, labels, annotations, steps,
params and templates as shipped; and the Prometheus, and the waits on the playbook's runs, that both tests share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.support.realsystems import AlertManager, Prometheus, check_rules, free_port
from tests.support.rules import rules_of
from tests.support.server import RemediateServer
from tests.support.shipped import shipped_playbook
from tests.support.waiting import wait_until

PLAYBOOK = "training-fail-slow"


def fast_straggler_rule(directory: Path) -> Path:
    """The shipped TrainingStragglerRank with a 10 s rate window, `for: 8s`, `keep_firing_for: 4s`, written to
    `directory`; its path."""
    (rule,) = [r for r in rules_of("training-failslow") if r["alert"] == "TrainingStragglerRank"]
    assert rule["expr"].count("[2m]") == 4 and (rule["for"], rule["keep_firing_for"]) == ("5m", "5m")
    rule = {**rule, "expr": rule["expr"].replace("[2m]", "[10s]"), "for": "8s", "keep_firing_for": "4s"}
    path = directory / "training-failslow.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "failslow", "rules": [rule]}]}, sort_keys=False))
    check_rules([path])
    return path


def fast_failslow_playbook(directory: Path, *, holds_for: tuple[str, str, str] = ("12s", "60s", "120s")) -> None:
    """The shipped playbook written to `directory` with its times shrunk: the rungs' holds_for 30m/1h/12h ->
    `holds_for`, cooldown 10m -> 3s, the undo check 10 s of a 10 s window, polled every second (90 s to give
    up)."""
    playbook = shipped_playbook(PLAYBOOK)
    assert [r["holds_for"] for r in playbook["escalate"]] == ["30m", "1h", "12h"]
    playbook.update(cooldown="3s", reset_after="5m")
    for rung, holds in zip(playbook["escalate"], holds_for, strict=True):
        rung["holds_for"] = holds
    check = playbook["escalate"][1]["on_resolved"][0]
    assert check["action"] == "check.prometheus" and check["with"]["query"].count("[5m]") == 4
    check["with"].update(query=check["with"]["query"].replace("[5m]", "[10s]"), poll="1s", timeout="90s")
    check["with"]["for"] = "10s"
    check["timeout"] = "95s"
    (directory / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))


@contextlib.contextmanager
def alerting(
    directory: Path,
    server: RemediateServer,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
    *,
    repeat_interval: str,
) -> Iterator[tuple[Prometheus, list[int]]]:
    """`server` started behind an AlertManager (re-sending every `repeat_interval`) and a Prometheus in
    `directory`/prometheus that scrapes the job's two ranks and evaluates the fast TrainingStragglerRank; yields
    that Prometheus and the two ports the ranks are to export on. The caller stops the server."""
    watch_log("remediate", server)
    alertmanager = start_alertmanager(
        server.webhook_url, group_wait="1s", group_interval="1s", repeat_interval=repeat_interval
    )
    ports = [free_port(), free_port()]
    with Prometheus(
        directory / "prometheus",
        scrape_targets=[f"127.0.0.1:{port}" for port in ports],
        rule_files=[fast_straggler_rule(directory)],
        alertmanager_url=alertmanager.url,
        scrape_interval="2s",  # docs/training-protocol.md: a 1 s scrape on a busy node leaves stale markers
    ) as prometheus:
        watch_log("prometheus", prometheus)
        server.extra_env["REMEDIATE_PROMETHEUS_URL"] = prometheus.url
        server.start()
        yield prometheus, ports


def finished_runs(server: RemediateServer, count: int) -> list[dict[str, Any]]:
    """The playbook's first `count` runs once all have finished."""

    def done() -> list[dict[str, Any]] | None:
        runs = server.runs(playbook=PLAYBOOK)[:count]
        return runs if len(runs) == count and all(r["status"] in ("succeeded", "failed") for r in runs) else None

    found: list[dict[str, Any]] = wait_until(done, 120, interval=0.2, message=f"{count} finished {PLAYBOOK} runs")
    return found


def finished_at(run: dict[str, Any]) -> dict[str, float]:
    """When each step of a run finished (its last attempt)."""
    return {s["name"]: s["attempts"][-1]["finished_at"] for s in run["steps"] if s["attempts"]}
