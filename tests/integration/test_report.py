"""The reliability report through the server and the CLI: GET /report, `remediate report`, /metrics gauges."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from remediate.breaker import Claim
from remediate.store import schema as t
from tests.support.cli import run_cli as cli
from tests.support.http import LOG_XID, ON_EVERY_DATABASE, OPERATOR_TOKEN, READ_TOKEN, Server, alert, notification

pytestmark = pytest.mark.usefixtures("clean_environment")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def metric_samples(server: Server) -> Samples:
    response = server.get("/metrics", token=None)
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
    }


def week_of_incidents(make_server: Callable[..., Server], **settings: Any) -> tuple[Server, list[int]]:
    """node-a: two XID occurrences fixed on rungs 1 and 2 (job llama); node-b: one without a ladder, held."""
    server = make_server(playbooks={"xid.yaml": LOG_XID}, **settings)
    now = time.time()
    server.webhook(
        notification(
            alert("x-a1", Hostname="node-a", training_job="llama", starts_at=rfc3339(now - 7200)),
            alert("x-b1", Hostname="node-b", starts_at=rfc3339(now - 600)),
        )
    )
    server.webhook(notification(alert("x-a2", Hostname="node-a", training_job="llama", starts_at=rfc3339(now - 60))))
    server.webhook(notification(alert("w-1", alertname="Watchdog", starts_at=rfc3339(now - 30))))
    server.drain()
    run_ids = sorted(e["run_id"] for e in server.history()["entries"] if e.get("run_id"))
    assert len(run_ids) == 3
    first, second, on_b = run_ids
    with server.store.write() as conn:  # what a ladder writes (nothing on this branch does yet)
        conn.execute(sa.update(t.runs).where(t.runs.c.id == first).values(rung=1))
        conn.execute(sa.update(t.runs).where(t.runs.c.id == second).values(rung=2))
    with server.store.breaker.ledger() as ledger:
        ledger.add_claim(Claim("node-b", "cordon", on_b, now - 300, None))
    return server, run_ids


@ON_EVERY_DATABASE
def test_get_report_gives_the_figures_per_node_job_and_rung(make_server: Callable[..., Server]) -> None:
    server, _ = week_of_incidents(make_server)

    response = server.get("/report", token=READ_TOKEN)

    assert response.status_code == 200
    report = response.get_json()
    assert report["window_seconds"] == 7 * 86400
    assert {k: v for k, v in report["totals"].items() if k != "mttr_seconds"} == {
        "incidents": 4,
        "remediations": 3,
        "succeeded": 3,
        "failed": 0,
        "nodes_held": 1,
    }
    assert report["by_rung"] == [
        {"rung": 1, "remediations": 1, "succeeded": 1, "failed": 0},
        {"rung": 2, "remediations": 1, "succeeded": 1, "failed": 0},
        {"rung": None, "remediations": 1, "succeeded": 1, "failed": 0},
    ]
    nodes = {n["node"]: n for n in report["nodes"]}
    assert set(nodes) == {"node-a", "node-b", "-"}
    assert nodes["node-a"]["incidents"] == 2
    assert 7140 - 5 <= nodes["node-a"]["mtbi_seconds"] <= 7140 + 5  # startsAt now-7200 and now-60
    assert 3600 <= nodes["node-a"]["mttr_seconds"] <= 3700  # (~7200 + ~60) / 2
    assert (nodes["node-b"]["held"], nodes["node-a"]["held"]) == (True, False)
    assert [(j["job"], j["incidents"], j["remediations"]) for j in report["jobs"]] == [("llama", 2, 2)]
    # The Watchdog matched nothing: an incident without a node.
    assert nodes["-"]["remediations"] == 0


def test_get_report_takes_since_as_a_duration_or_a_time_and_refuses_nonsense(
    make_server: Callable[..., Server],
) -> None:
    server, _ = week_of_incidents(make_server)

    recent = server.get("/report?since=5m", token=READ_TOKEN).get_json()
    bad = server.get("/report?since=yesterday", token=READ_TOKEN)
    backwards = server.get(f"/report?since={time.time() + 60:.0f}", token=READ_TOKEN)
    unknown = server.get("/report?node=a", token=READ_TOKEN)

    assert recent["window_seconds"] == 300
    assert recent["totals"]["incidents"] == 4, "every alert was received within the last 5 minutes"
    assert (bad.status_code, bad.get_json()["error"]) == (400, "invalid_query")
    assert "since must be a duration back from now (1h, 7d), an RFC 3339 time" in bad.get_json()["message"]
    assert backwards.status_code == 400
    assert unknown.status_code == 400
    assert server.get("/report", token=None).status_code == 401


def test_remediate_report_json_from_the_database_and_over_http_is_the_api_answer(
    make_server: Callable[..., Server],
    serve: Callable[[Server], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, _ = week_of_incidents(make_server)
    window = ["--since", f"{time.time() - 86400:.0f}", "--until", f"{time.time() + 60:.0f}"]
    api = server.get(f"/report?since={window[1]}&until={window[3]}", token=READ_TOKEN).get_json()
    url = serve(server)
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)

    from_db = cli("report", "--json", *window, "--database-url", server.database_url)
    over_http = cli("report", "--json", *window, "--server", url)

    assert from_db.exit_code == 0, from_db.output
    assert over_http.exit_code == 0, over_http.output
    assert json.loads(from_db.stdout) == api
    assert json.loads(over_http.stdout) == api


def test_remediate_report_prints_readable_tables(make_server: Callable[..., Server]) -> None:
    server, _ = week_of_incidents(make_server)

    result = cli("report", "--database-url", server.database_url)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].startswith("incidents 4, remediations 3 (3 succeeded, 0 failed), mean time to remediate ")
    assert lines[1].endswith("nodes held now 1")
    rung_rows = lines[lines.index("by rung:") + 1 : lines.index("by rung:") + 5]
    assert [row.split() for row in rung_rows] == [
        ["RUNG", "REMEDIATIONS", "SUCCEEDED", "FAILED"],
        ["1", "1", "1", "0"],
        ["2", "1", "1", "0"],
        ["-", "1", "1", "0"],
    ]
    node_lines = lines[lines.index("by node:") + 2 : lines.index("by job:")]
    node_rows = {row.split()[0]: row.split() for row in node_lines if row.strip()}
    assert node_rows["node-a"][1:3] == ["2", "2"]
    assert node_rows["node-a"][5] in ("1h59m", "1h58m")  # MTBI ~7140 s
    assert node_rows["node-b"][6] == "since"
    assert lines[lines.index("by job:") + 2].split()[:3] == ["llama", "2", "2"]
    bad = cli("report", "--since", "soon", "--database-url", server.database_url)
    assert bad.exit_code == 2
    assert "since must be a duration" in bad.stderr


def test_metrics_export_the_figures_and_reuse_them_for_report_cache_seconds(
    make_server: Callable[..., Server],
) -> None:
    server, _ = week_of_incidents(make_server, report_cache=3600)

    samples = metric_samples(server)
    server.webhook(notification(alert("x-c1", Hostname="node-c", starts_at=rfc3339(time.time() - 10))))
    cached = metric_samples(server)

    assert samples[("remediate_report_window_seconds", ())] == 7 * 86400
    assert samples[("remediate_report_incidents", (("node", "node-a"),))] == 2
    assert samples[("remediate_report_incidents", (("node", "node-b"),))] == 1
    assert samples[("remediate_report_job_incidents", (("training_job", "llama"),))] == 2
    assert samples[("remediate_report_remediations", (("outcome", "succeeded"), ("rung", "1")))] == 1
    assert samples[("remediate_report_remediations", (("outcome", "succeeded"), ("rung", "-")))] == 1
    assert samples[("remediate_report_node_remediations", (("node", "node-a"), ("outcome", "succeeded")))] == 2
    assert samples[("remediate_report_job_remediations", (("outcome", "failed"), ("training_job", "llama")))] == 0
    assert 3600 <= samples[("remediate_report_node_mttr_seconds", (("node", "node-a"),))] <= 3700
    assert 3600 <= samples[("remediate_report_job_mttr_seconds", (("training_job", "llama"),))] <= 3700
    assert samples[("remediate_report_mttr_seconds", ())] > 0
    assert 7135 <= samples[("remediate_report_node_mtbi_seconds", (("node", "node-a"),))] <= 7145
    assert samples[("remediate_nodes_held", ())] == 1
    assert samples[("remediate_node_held", (("kind", "cordon"), ("node", "node-b")))] == 1
    # Within report_cache the figures are the ones already computed: node-c's alert is not there yet.
    assert ("remediate_report_incidents", (("node", "node-c"),)) not in cached
    assert cached[("remediate_report_incidents", (("node", "node-a"),))] == 2


def test_metrics_read_the_store_again_once_the_cache_is_older_than_report_cache(
    make_server: Callable[..., Server],
) -> None:
    server, _ = week_of_incidents(make_server, report_cache=0)

    metric_samples(server)
    server.webhook(notification(alert("x-c1", Hostname="node-c", starts_at=rfc3339(time.time() - 10))))
    fresh = metric_samples(server)

    assert fresh[("remediate_report_incidents", (("node", "node-c"),))] == 1


def test_report_window_0_keeps_the_reliability_gauges_off_metrics(make_server: Callable[..., Server]) -> None:
    server, _ = week_of_incidents(make_server, report_window=0)

    samples = metric_samples(server)

    assert not [name for name, _ in samples if name.startswith("remediate_report_") or "held" in name]
    assert ("remediate_paused", ()) in samples
    assert server.get("/report", token=READ_TOKEN).get_json()["totals"]["incidents"] == 4
