"""Staged rollout in the web pages: the run page shows a run's effective mode and its node's wave (the decision's
reason), the node page the node's wave now under each rollout in force."""

from __future__ import annotations

import html

from remediate.config.values import to_rollout
from tests.integration.test_ui_pages import log_in, text
from tests.support.http import READ_TOKEN, MakeServer, alert, notification

ROLLOUT = to_rollout({"label": "remediate.io/wave", "waves": {"1": "enforce"}, "default": "dry-run"})


def test_the_run_page_and_the_node_page_show_the_wave_and_its_mode(make_server: MakeServer) -> None:
    server = make_server(rollout=ROLLOUT, rollout_nodes=(("node-a", "1"),))
    server.webhook(notification(alert("aaaa000000000001", instance="node-a:9400", gpu="0")))
    server.webhook(notification(alert("bbbb000000000001", instance="node-b:9400", gpu="0")))
    ids = {e["target"]: e["run_id"] for e in server.history()["entries"]}
    log_in(server, READ_TOKEN)

    run_a = html.unescape(text(server.client.get(f"/ui/runs/{ids['node-a']}")))
    run_b = html.unescape(text(server.client.get(f"/ui/runs/{ids['node-b']}")))
    node_b = html.unescape(text(server.client.get("/ui/nodes/node-b")))

    assert "mode enforce)" in run_a
    assert "node node-a in wave 1 (rollout_nodes): enforce" in run_a
    assert "mode dry-run)" in run_b
    assert "node node-b in no wave (not in rollout_nodes; no Kubernetes cluster configured): dry-run" in run_b
    assert (
        '<dt>rollout</dt><dd class="node-wave">server: node node-b in no wave '
        "(not in rollout_nodes; no Kubernetes cluster configured): dry-run</dd>"
    ) in node_b
    assert "node node-b in no wave" in node_b.split('id="timeline"')[1]  # the decision, in the timeline
