"""POST /webhook: render errors of any kind, `all` from a label, and alerts out of order.

Each test goes through the real app (Flask test client, SQLite file, the shipped action registry):
what AlertManager would see, and what the store then holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediate.gpu.simulator import SimulatedBackend
from tests.support.http import Server, alert, notification

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


# --------------------------------------------------------------------------- finding 10: a label names one GPU

SHIPPED = Path(__file__).resolve().parents[2] / "playbooks"
DEFAULT_MW = 700_000  # SimulatedBackend.write_example: every GPU at its 700 W default

CAPPED_PER_GPU = """\
name: capped
match:
  alertname: GPUTemperatureHigh
target: node
guard_by: [UUID]
max_attempts: 2
steps:
  - action: gpu.set_power_limit
    with: {gpu: "{{ labels.UUID }}", reduce_by_percent: 20}
"""


def _gpu_server(
    make_server: Callable[..., Server], tmp_path: Path, playbooks: dict[str, str]
) -> tuple[Server, SimulatedBackend]:
    gpus = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml"))
    server = make_server(playbooks=playbooks, gpu_backend="simulated", gpu_simulator_file=gpus.path, node_name="node-a")
    return server, gpus


def _hot(fingerprint: str, uuid: str, starts_at: str = "2026-11-21T05:40:14Z") -> dict[str, Any]:
    return alert(
        fingerprint,
        alertname="GPUTemperatureHigh",
        starts_at=starts_at,
        severity="warning",
        UUID=uuid,
        Hostname="node-a",
    )


def test_a_uuid_label_all_is_rejected_and_no_gpu_changes(make_server: Callable[..., Server], tmp_path: Path) -> None:
    overheat = (SHIPPED / "gpu-overheat.yaml").read_text(encoding="utf-8")
    server, gpus = _gpu_server(make_server, tmp_path, {"gpu-overheat.yaml": overheat})

    body = server.webhook(notification(_hot("bb01", "all"))).get_json()

    assert body["decisions"] == {"rejected": 1}
    run = server.get(f"/runs/{body['runs'][0]}").get_json()
    assert run["status"] == "rejected"
    assert "names every GPU of the node" in run["error"]
    assert "steps[0] lower-power-limit (gpu.set_power_limit)" in run["error"]
    assert run["steps"] == []
    assert server.drain() == 0
    assert {g.power_limit_mw for g in gpus.devices()} == {DEFAULT_MW}


def test_spellings_of_one_gpu_uuid_share_max_attempts(make_server: Callable[..., Server], tmp_path: Path) -> None:
    server, gpus = _gpu_server(make_server, tmp_path, {"capped.yaml": CAPPED_PER_GPU})
    uuid = gpus.devices()[3].uuid
    spellings = [uuid, uuid.upper(), uuid.lower(), "gpu" + uuid[3:].upper(), "Gpu" + uuid[3:]]
    assert len(set(spellings)) == 5

    decisions = [
        server.webhook(notification(_hot(f"cc0{i}", spelling))).get_json()["decisions"]
        for i, spelling in enumerate(spellings)
    ]

    assert decisions == [{"accepted": 1}] * 2 + [{"attempt_cap": 1}] * 3
    assert server.drain() == 2
    assert gpus.device(uuid).power_limit_mw == 448_000  # 700 W cut by 20% twice: the two accepted runs acted, no others


# --------------------------------------------------------------------------- finding 20: alerts out of order

S1 = "2026-11-21T05:40:14Z"
S2 = "2026-11-21T07:00:00Z"  # a newer occurrence of the same alert: same fingerprint, later startsAt


def _runs(server: Server) -> list[dict[str, Any]]:
    return [entry for entry in server.history(limit=100)["entries"] if entry["run_id"] is not None]


def test_a_firing_that_arrives_after_its_resolved_starts_nothing(server: Server) -> None:
    early = server.webhook(notification(alert("dd01", status="resolved", starts_at=S1))).get_json()

    late = server.webhook(notification(alert("dd01", starts_at=S1))).get_json()

    assert early["decisions"] == {"no_firing_run": 1}
    assert late["decisions"] == {"already_resolved": 1}
    assert late["runs"] == []
    assert server.drain() == 0
    newest = server.history(limit=1)["entries"][0]
    assert (newest["decision"], newest["alert_status"]) == ("already_resolved", "firing")


def test_firing_and_resolved_of_one_occurrence_in_one_notification_start_nothing_in_either_order(
    server: Server,
) -> None:
    for fingerprint, statuses in (("dd02", ["resolved", "firing"]), ("dd03", ["firing", "resolved"])):
        payload = notification(*(alert(fingerprint, status=status, starts_at=S1) for status in statuses))

        body = server.webhook(payload).get_json()

        assert body["decisions"] == {"already_resolved": 1, "no_firing_run": 1}, statuses
        assert body["runs"] == []
    assert server.counts()["runs"] == 0


def test_a_late_resolved_of_an_older_occurrence_leaves_the_newer_one_alone(server: Server) -> None:
    s1 = server.webhook(notification(alert("dd04", starts_at=S1))).get_json()["runs"][0]
    s2 = server.webhook(notification(alert("dd04", starts_at=S2))).get_json()["runs"][0]
    assert server.drain() == 2

    late = server.webhook(notification(alert("dd04", status="resolved", starts_at=S1))).get_json()

    assert late["decisions"] == {"superseded": 1}
    assert late["runs"] == []
    assert server.drain() == 0
    reason = server.history(limit=1)["entries"][0]["reason"]
    assert "newer occurrence of this alert on" in reason and f"firing run {s2}" in reason
    # The newer occurrence's resolved runs on_resolved after its own firing run, as usual.
    body = server.webhook(notification(alert("dd04", status="resolved", starts_at=S2))).get_json()
    assert body["decisions"] == {"accepted": 1}
    assert server.drain() == 1
    undo = server.get(f"/runs/{body['runs'][0]}").get_json()
    assert (undo["phase"], undo["status"]) == ("resolved", "succeeded")
    assert [(r["run_id"], r["alert_status"]) for r in _runs(server)] == [
        (body["runs"][0], "resolved"),
        (s2, "firing"),
        (s1, "firing"),
    ]
