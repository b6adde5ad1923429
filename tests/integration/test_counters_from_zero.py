"""The counters whose label values are known are on /metrics at 0 before anything happened, and a reload's new
playbook gets its zeros; the reload gauges say 1 after a start or an applied reload and 0 after a refused one,
the time of the last success kept. One process serving alone here (create_app); the real `remediate serve`, its
master and workers in multiprocess mode: tests/e2e/test_counters_restart.py."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from remediate.executor.agent_calls import AGENT_CALL_ERRORS
from remediate.runs import Decision
from remediate.store.database import WRITE_ERROR_KINDS
from tests.support.http import LOG_XID, Server

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: Server) -> Samples:
    answer = server.get("/metrics", token=None)
    assert answer.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.get_data(as_text=True))
        for sample in family.samples
    }


def labelled(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for (sample, labels), value in samples.items() if sample == name}


def test_known_label_values_are_exported_at_zero_from_the_start(make_server: Callable[..., Server]) -> None:
    before = time.time()
    server = make_server(playbooks={"log-xid.yaml": LOG_XID})

    samples = scrape(server)

    runs = {(dict(k)["playbook"], dict(k)["status"]): v for (n, k), v in samples.items()
            if n == "remediate_runs_finished_total"}  # fmt: skip
    assert runs == {("log-xid", "succeeded"): 0, ("log-xid", "failed"): 0, ("log-xid", "planned"): 0}
    steps = {(dict(k)["action"], dict(k)["outcome"]): v for (n, k), v in samples.items()
             if n == "remediate_steps_total"}  # fmt: skip
    assert steps == {("log", "succeeded"): 0, ("log", "failed"): 0}
    assert labelled(samples, "remediate_agent_call_errors_total", "reason") == dict.fromkeys(AGENT_CALL_ERRORS, 0)
    kinds = labelled(samples, "remediate_store_write_errors_total", "kind")
    assert kinds == dict.fromkeys(WRITE_ERROR_KINDS.values(), 0)
    assert labelled(samples, "remediate_approval_announcements_total", "outcome") == {"sent": 0, "failed": 0}
    assert labelled(samples, "remediate_decisions_total", "decision") == {d.value: 0 for d in Decision}
    assert labelled(samples, "remediate_notifications_received_total", "status") == {"firing": 0, "resolved": 0}
    assert labelled(samples, "remediate_grafana_annotations_total", "outcome") == {}  # no grafana_url: none posted
    assert samples[("remediate_config_last_reload_successful", frozenset())] == 1
    assert before <= samples[("remediate_config_last_reload_success_timestamp_seconds", frozenset())] <= time.time()


def test_a_reload_adds_the_zeros_of_its_playbooks_and_a_refused_one_says_0(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"log-xid.yaml": LOG_XID})
    directory = server.services.settings.engine.playbooks
    started = scrape(server)[("remediate_config_last_reload_success_timestamp_seconds", frozenset())]

    (directory / "bad.yaml").write_text("name: bad\nmatch: {alertname: X}\nsteps: []\nmode: sometimes\n")
    assert server.post("/-/reload").status_code == 422
    refused = scrape(server)

    assert refused[("remediate_config_last_reload_successful", frozenset())] == 0
    assert refused[("remediate_config_last_reload_success_timestamp_seconds", frozenset())] == started

    (directory / "bad.yaml").unlink()
    (directory / "more.yaml").write_text(LOG_XID.replace("name: log-xid", "name: more"), encoding="utf-8")
    assert server.post("/-/reload").status_code == 200
    applied = scrape(server)

    assert applied[("remediate_config_last_reload_successful", frozenset())] == 1
    assert applied[("remediate_config_last_reload_success_timestamp_seconds", frozenset())] >= started
    assert applied[("remediate_runs_finished_total", frozenset({("status", "failed"), ("playbook", "more")}))] == 0
