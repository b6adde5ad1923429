"""POST /webhook, issue 15: render errors of any kind, `all` from a label, and alerts out of order.

Each test goes through the real app (Flask test client, SQLite file, the shipped action registry):
what AlertManager would see, and what the store then holds.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.http.support import Server, alert, notification

# `{{ 1/0 }}` raises ZeroDivisionError, `int` of a label that is no number raises nothing (jinja's
# filter returns 0), but `labels.gpu + 1` (str + int) raises TypeError inside the sandbox.
BROKEN_TEMPLATES = """\
name: broken
match:
  alertname: GpuXidError
target: node
steps:
  - action: log
    with:
      message: "{{ 1 / (labels.gpu | int) }}"
"""


def test_any_render_error_rejects_that_run_and_the_other_alerts_are_stored_normally(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"broken.yaml": BROKEN_TEMPLATES})
    payload = notification(alert("aa01", gpu="0"), alert("aa02", gpu="4"))

    response = server.webhook(payload)

    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert body["decisions"] == {"rejected": 1, "accepted": 1}
    rejected, accepted = (server.get(f"/runs/{run}").get_json() for run in body["runs"])
    assert rejected["status"] == "rejected"
    assert "ZeroDivisionError" in rejected["error"]
    assert "steps[0]" in rejected["error"]
    assert rejected["steps"] == []
    assert accepted["status"] == "queued"
    assert accepted["steps"][0]["params"]["message"] == "0.25"
    assert server.counts()["alerts"] == 2
