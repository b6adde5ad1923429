"""Which GPU and which XID: the alert xid.rules.yml's promtool tests expect (its summary read from the node's
DCGM_FI_DEV_XID_ERRORS series: each GPU's index, UUID, XID and what it means) reaches on-call in the shipped
gpu-xid-quarantine playbook's message, stays with the run, and the UI's search finds the run by the GPU's UUID."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from remediate.config.values import Sink
from tests.integration.test_ui_pages import log_in, text
from tests.support.http import OPERATOR_TOKEN, Server, notification
from tests.support.realsystems import WebhookRecorder
from tests.support.rules import ROOT, expected_alerts

pytestmark = pytest.mark.usefixtures("clean_environment")

UUID = "GPU-2f6e8a52-1b1c-5c0e-9d33-7a4f0b6c1d23"
NAMED = f"GPU 3 ({UUID}) XID 79 (the GPU has fallen off the bus)"


def test_the_xid_page_names_the_gpu_and_the_xid_and_the_search_finds_the_run_by_its_uuid(
    make_server: Callable[..., Server],
) -> None:
    alertname, labels, annotations = next(a for a in expected_alerts("xid") if a[1].get("hostname") == "node-a")
    assert annotations["summary"] == f"1 GPU(s) on node-a reported a serious XID error: {NAMED}"
    playbook = (ROOT / "playbooks" / "gpu-xid-quarantine.yaml").read_text(encoding="utf-8")
    with WebhookRecorder() as oncall:
        server = make_server(playbooks={"gpu-xid-quarantine.yaml": playbook},
                             sinks=(Sink("oncall", "webhook", url=oncall.url),))  # fmt: skip
        payload = notification({"fingerprint": "a1a1a1a1a1a1a1a1", "status": "firing", "labels": {
            "alertname": alertname, **labels}, "annotations": annotations, "startsAt": "2026-11-21T05:40:14Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": ""})  # fmt: skip
        (run_id,) = server.webhook(payload).get_json()["runs"]
        server.drain()
        posted = oncall.wait_for(lambda r: r.json is not None)
    # No cluster here: the cordon fails, and on-call is told which GPU and which XID all the same.
    assert NAMED in str(posted.json), posted.json
    run = server.get(f"/runs/{run_id}").get_json()
    assert NAMED in run["alert"]["annotations"]["summary"]
    notify = next(s for s in run["steps"] if s["name"] == "notify")
    assert NAMED in str(notify["result"])

    log_in(server, OPERATOR_TOKEN)
    assert NAMED in text(server.client.get(f"/ui/runs/{run_id}"))
    found = text(server.client.get(f"/ui/?q={UUID.upper()}"))
    assert f'href="/ui/runs/{run_id}"' in found
    assert f'href="/ui/runs/{run_id}"' not in text(server.client.get("/ui/?q=GPU-ffffffff"))
