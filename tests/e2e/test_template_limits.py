"""A template rendered inside POST /webhook cannot take the server's memory or time.

`'x' * 10**9` and nested 100k loops in a step's params are refused within the render limits
(remediate.actions.templating: MAX_RENDER_CHARS, RENDER_SECONDS): the alert's run is `rejected` with the reason,
the webhook answers 200 within the client's timeout, and no process of the real server grows anywhere
near the gigabyte the template asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.actions.templating import MAX_RENDER_CHARS, RENDER_SECONDS
from tests.support.server import RemediateServer, notification, write_playbook

pytestmark = [pytest.mark.integration]

TEMPLATES = {
    # Each reads the alert's gpu label, so each alert renders its own (no render shared between them).
    "huge-string": "{{ labels.gpu }}{{ 'x' * 10**9 }}",
    "nested-loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ labels.gpu }}",
}
ALERTS = 20
ANSWER_WITHIN = 5.0  # the behaviour under test ("answers at once"): not scaled by REMEDIATE_TEST_TIME_SCALE
"""Alerts of one notification, each of another GPU: a refused template is refused once, not 20 times."""
PEAK_RSS_BYTES = 512 * 1024 * 1024
"""Far below the 1 GB `'x' * 10**9` would take, far above a worker's ~100 MB."""


def playbook(template: str) -> str:
    return f"""\
name: costly-template
match:
  alertname: E2ECostlyTemplate
target: node
guard_by: [gpu]
cooldown: 0s
steps:
  - action: log
    with:
      message: "{template}"
"""


def peak_rss(pid: int) -> int:
    """The most memory (VmHWM) process `pid` has held, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def process_tree(root: int) -> list[int]:
    """`root` and every process below it (gunicorn's master, its workers, the executor process)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text.rpartition(")")[2].split()[1])
    tree = [root]
    for pid in tree:
        tree += [child for child, parent in parents.items() if parent == pid]
    return tree


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_a_template_over_the_render_limits_is_a_rejected_run_and_the_webhook_answers_at_once(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path, kind: str
) -> None:
    # The client's timeout is the bound: 10 render deadlines; each alert alone would take 20 of them.
    assert ANSWER_WITHIN <= 10 * RENDER_SECONDS < ALERTS * RENDER_SECONDS
    write_playbook(playbooks_dir, "costly", playbook(TEMPLATES[kind]))
    server = start_server()
    payload = notification("E2ECostlyTemplate", {"Hostname": "node-a", "gpu": "0"})
    first = payload["alerts"][0]
    payload["alerts"] = [
        copy.deepcopy(first) | {"labels": first["labels"] | {"gpu": str(n)}, "fingerprint": f"{n:016x}"}
        for n in range(ALERTS)
    ]

    response = server.post_webhook(payload, timeout=ANSWER_WITHIN)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["decisions"] == {"rejected": ALERTS} and len(body["runs"]) == ALERTS
    assert {server.run(run_id)["status"] for run_id in body["runs"]} == {"rejected"}
    entries = server.history(alertname="E2ECostlyTemplate")
    assert len(entries) == ALERTS and {e["decision"] for e in entries} == {"rejected"}
    reasons = {e["reason"] for e in entries}
    expected = "took longer than" if kind == "nested-loops" else f"over {MAX_RENDER_CHARS:,} characters"
    assert all("refused to render" in reason and expected in reason for reason in reasons), reasons
    assert any("for an earlier alert of this notification" in reason for reason in reasons), reasons
    assert server.get("/readyz") is not None
    peaks = {pid: peak_rss(pid) for pid in process_tree(server.pid)}
    assert max(peaks.values()) < PEAK_RSS_BYTES, peaks
