"""`remediate replay` counts only what really happened on the recorded side, and shows what each step would
do differently: a history recorded by the real engine and executor (the test API server, the simulated GPUs),
replayed through the real command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_intake import _gpu_server, _hot
from tests.integration.test_kube_runs import CORDON_ONLY, Rig, make_rig, xid_alert
from tests.support.cli import run_cli as cli
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.http import Server, notification

pytestmark = [pytest.mark.usefixtures("clean_environment")]
__all__ = ["make_rig"]  # the fixture, used by name

WINDOW = ("--since", "1h")

POWER_CAP = """\
name: cap
match: {alertname: GPUTemperatureHigh}
target: node
guard_by: [UUID]
steps:
  - name: lower-power-limit
    action: gpu.set_power_limit
    with: {gpu: "{{ labels.UUID }}", percent_of_default: 80, min_watts: 200}
"""


def replay(db_url: str, playbooks: Path, *extra: str) -> tuple[dict[str, Any], str]:
    as_json = cli("replay", "--database-url", db_url, "--playbooks", playbooks, *WINDOW, "--json", *extra)
    text = cli("replay", "--database-url", db_url, "--playbooks", playbooks, *WINDOW, *extra)
    assert as_json.exit_code == 0, as_json.output
    assert text.exit_code == 0, text.output
    return json.loads(as_json.stdout), text.stdout


def directory(root: Path, name: str, text: str) -> Path:
    found = root / name
    found.mkdir()
    (found / "pb.yaml").write_text(text, encoding="utf-8")
    return found


def test_a_cordon_the_breaker_refused_is_not_counted_as_recorded(
    kube_api: FakeKubeAPI, make_rig: Callable[..., Rig], tmp_path: Path
) -> None:
    """10 nodes: a cap of 1. gpu-node-01's cordon was refused by the breaker (its step failed): replaying the
    same playbook must not report it "removed", as if it had been cordoned and no longer would be."""
    nodes = cluster(kube_api, 10)
    rig = make_rig(CORDON_ONLY)
    rig.start()
    for node in nodes[:2]:
        rig.ingest(xid_alert(node))
        rig.wait_idle()
    statuses = [run["status"] for run in rig.runs()]
    assert sorted(statuses) == ["failed", "succeeded"]
    assert [n for n in nodes if kube_api.node(n)["spec"].get("unschedulable")] == [nodes[0]]

    report, text = replay(f"sqlite:///{tmp_path / 'r.db'}", directory(tmp_path, "same", CORDON_ONLY),
                          "--cluster-nodes", "10")  # fmt: skip
    assert report["cordoned"] == {"recorded": [nodes[0]], "replayed": [nodes[0]], "added": [], "removed": []}
    assert "added -; removed -" in text


def test_a_changed_power_cap_shows_the_params_and_the_watts_each_step_would_set_instead(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    server, gpus = _gpu_server(make_server, tmp_path, {"cap.yaml": POWER_CAP})
    uuid = gpus.devices()[0].uuid
    server.webhook(notification(_hot("ee01", uuid)))
    assert server.drain() == 1
    assert gpus.device(uuid).power_limit_mw == 560_000

    same, same_text = replay(server.database_url, directory(tmp_path, "same", POWER_CAP))
    assert (same["differs"], same["steps"], same["changed_steps"]) == (False, [], 0)
    assert "nothing would change" in same_text

    lower = POWER_CAP.replace("percent_of_default: 80", "percent_of_default: 60")
    report, text = replay(server.database_url, directory(tmp_path, "lower", lower))
    assert report["differs"] is True and report["changed_decisions"] == 0 and report["changed_steps"] == 1
    (run,) = report["steps"]
    (step,) = run["steps"]
    assert (step["step"], step["action"], step["change"]) == ("lower-power-limit", "gpu.set_power_limit", "params")
    assert step["params"] == {"percent_of_default": {"recorded": 80.0, "replayed": 60.0}}
    assert step["plan"] == "700 W -> 420 W instead of 560 W on 1 GPU"
    assert (
        "lower-power-limit (gpu.set_power_limit): percent_of_default 80.0 -> 60.0; "
        "would set 700 W -> 420 W instead of 560 W on 1 GPU" in text
    )
    assert "0 decisions, 0 ladder rungs and 1 steps differ" in text
