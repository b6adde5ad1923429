"""A wave promoted, then demoted, by evidence: through the webhook, the engine, the store (SQLite and PostgreSQL),
the executor (`drain`) and GET /history.

Wave 1 enforces, wave 2 is configured `approve` and promotes after 2 wave-1 runs of the same playbook version
that succeeded and whose undo succeeded. The firing step posts to a receiver the test answers 200 or 500: a
500 is a real failed run, which demotes wave 2 again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.http import ON_EVERY_DATABASE, MakeServer, Server, alert, notification
from tests.support.realsystems import WebhookRecorder

NODES = {"w1-a": "1", "w1-b": "1", "w1-c": "1", "w2-a": "2", "w2-b": "2", "w2-c": "2"}


def fix_xid(url: str) -> str:
    return f"""\
name: fix-xid
match:
  alertname: GpuXidError
target: node
cooldown: 0s
rollout:
  label: remediate.io/wave
  waves: {{"1": enforce, "2": approve}}
  promote: {{after: 2, within: 7d}}
steps:
  - action: notify.webhook
    with:
      url: {url}
      message: "fixing GPU {{{{ labels.gpu }}}}"
    retries: 0
    timeout: 10s
on_resolved:
  - action: log
    with: {{message: "{{{{ alertname }}}} resolved"}}
"""


@pytest.fixture
def receiver() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/hook") as recorder:
        yield recorder


def _send(server: Server, node: str, status: str = "firing") -> dict[str, Any]:
    body = server.webhook(notification(alert(f"fp-{node}", status=status, Hostname=node))).get_json()
    assert body is not None
    return body


def _run(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    (run_id,) = body["runs"]
    run = server.get(f"/runs/{run_id}").get_json()
    assert run is not None
    return dict(run)


def _reason(server: Server, node: str) -> str:
    (entry, *_) = server.history(target=node)["entries"]
    return str(entry["reason"])


@ON_EVERY_DATABASE
def test_wave_2_is_promoted_by_wave_1_s_verified_runs_then_demoted_by_a_failure(
    make_server: MakeServer, receiver: WebhookRecorder
) -> None:
    server = make_server(playbooks={"fix-xid.yaml": fix_xid(receiver.url)}, rollout_nodes=NODES)

    _send(server, "w2-a")  # no evidence yet: wave 2 runs as configured, waiting for a person
    assert "wave 2 approve (not promoted: 0 of 2 wave-1 runs of version" in _reason(server, "w2-a")

    for node in ("w1-a", "w1-b"):
        _send(server, node)
    assert server.drain() == 2
    _send(server, "w2-b")  # succeeded, but their undo (the verify) has not run: not evidence yet
    assert "not promoted: 0 of 2" in _reason(server, "w2-b")
    for node in ("w1-a", "w1-b"):
        _send(server, node, "resolved")
    server.drain()

    promoted = _run(server, _send(server, "w2-c"))
    assert "wave 2 enforcing: 2 of 2 wave-1 runs of version" in _reason(server, "w2-c")
    assert (promoted["mode"], promoted["status"]) == ("enforce", "queued")
    assert promoted["wave"] == "2" and len(promoted["playbook_version"]) == 64

    receiver.status = 500
    failing = _send(server, "w1-c")
    server.drain()
    failed = _run(server, failing)
    assert failed["status"] == "failed"
    server.drain()
    demoted = _run(server, server.webhook(notification(alert("fp-w2-a-again", Hostname="w2-a"))).get_json())
    assert f"wave 2 approve (demoted: run {failed['id']} of wave 1 failed at " in _reason(server, "w2-a")
    assert (demoted["mode"], demoted["status"]) == ("approve", "awaiting_approval")

    entries = server.history(playbook="fix-xid")["entries"]
    print("\n/history (newest first):")
    for entry in entries:
        print(f"  {entry['target']:5} {entry['alert_status']:8} {entry['decision']:9} {entry['reason']}")
