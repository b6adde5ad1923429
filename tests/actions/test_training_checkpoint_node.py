"""training.checkpoint_node: every live job of the node checkpoints before a drain; none is fine; the wait is bounded.

Real protocol, as in test_training.py: the action writes command files into each job's inbox
and waits for the acknowledgements the real client (TrainingControl) writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.actions import default_registry
from remediate.actions.training_checkpoint_node import TrainingCheckpointNodeAction
from remediate.config.settings import load_settings
from remediate.errors import ActionError, PartialFailure
from remediate.training.files import JobPaths, atomic_write_json
from tests.support.training import LABELS, LiveJob, ctx_for


@pytest.fixture
def jobs() -> Iterator[list[LiveJob]]:
    started: list[LiveJob] = []
    yield started
    for job in started:
        job.stop()


def test_every_live_job_of_the_node_checkpoints_and_a_closed_one_is_skipped(root: Path, jobs: list[LiveJob]) -> None:
    for name in ("trainer-a", "trainer-b"):
        jobs.append(LiveJob(root, name).start())
    closed = LiveJob(root, "finished-job").register()
    closed.control.close()
    action = TrainingCheckpointNodeAction(root, LABELS)
    params = action.validate({"timeout": 5})

    plan = action.plan(params, ctx_for({"Hostname": "node-a"}))
    result = action.execute(params, ctx_for({"Hostname": "node-a"}))

    assert plan["would_checkpoint"] == ["trainer-a", "trainer-b"] and plan["can_act"] is True
    assert plan["skipped"] == []  # a closed job left no directory behind: nothing to list
    assert [r["job"] for r in result["checkpointed"]] == ["trainer-a", "trainer-b"]
    assert all(r["status"] == "applied" and r["kind"] == "checkpoint" for r in result["checkpointed"])
    assert result["failed"] == [] and result["skipped"] == []
    assert result["outcomes"] == {"trainer-a": "checkpointed", "trainer-b": "checkpointed"}
    assert not JobPaths(root, "finished-job").dir.exists()  # nothing sent to a job that is gone


def test_a_node_without_any_training_job_has_nothing_to_checkpoint(root: Path) -> None:
    action = TrainingCheckpointNodeAction(root / "absent", LABELS)
    params = action.validate({})

    plan = action.plan(params, ctx_for({}))
    result = action.execute(params, ctx_for({}))

    assert plan["would_checkpoint"] == [] and "nothing to checkpoint" in plan["note"]
    assert result["checkpointed"] == [] and "nothing to checkpoint" in result["note"]


def test_a_job_that_does_not_answer_fails_the_step_within_the_timeout_unless_best_effort(root: Path) -> None:
    LiveJob(root, "stuck").register()  # registered and alive, but not polling: it never answers
    action = TrainingCheckpointNodeAction(root, LABELS)

    started = time.monotonic()
    with pytest.raises(
        ActionError, match=r"1 of 1 training job\(s\) on this node did not checkpoint \(0 did\): stuck timed_out: "
    ):
        action.execute(action.validate({"timeout": 0.5}), ctx_for({}))
    strict_s = time.monotonic() - started
    result = action.execute(action.validate({"timeout": 0.5, "best_effort": True}), ctx_for({}, step_index=1))

    assert strict_s < 3
    assert result["checkpointed"] == [] and [f["job"] for f in result["failed"]] == ["stuck"]
    assert "no acknowledgement" in result["failed"][0]["error"]
    assert result["failed"][0]["outcome"] == "timed_out" and result["outcomes"] == {"stuck": "timed_out"}


def _silent_for(root: Path, job: str, seconds: float) -> None:
    """Make job.json say the job last polled `seconds` ago (a job that stopped polling rewrites nothing)."""
    paths = JobPaths(root, job)
    data = json.loads(paths.registration.read_text())
    data["last_poll_at"] = time.time() - seconds
    atomic_write_json(paths.registration, data, tmp_dir=paths.tmp)


@pytest.mark.parametrize("silent_s", [25.0, 35.0, 4000.0])
def test_a_hung_job_whose_process_runs_is_asked_and_timed_out_however_long_it_has_been_silent(
    root: Path, silent_s: float
) -> None:
    """At 25 s of silence the hung job was waited on, past 30 s merely listed skipped
    (and the strict step succeeded). Its process runs (this test's): one rule, whatever the silence."""
    LiveJob(root, "hung").register()
    _silent_for(root, "hung", silent_s)
    action = TrainingCheckpointNodeAction(root, LABELS)
    params = action.validate({"timeout": 0.5})

    assert action.plan(params, ctx_for({}))["would_checkpoint"] == ["hung"]
    with pytest.raises(PartialFailure, match=r"hung timed_out: no acknowledgement") as failure:
        action.execute(params, ctx_for({}))
    assert failure.value.result["outcomes"] == {"hung": "timed_out"}
    result = action.execute(action.validate({"timeout": 0.5, "best_effort": True}), ctx_for({}, step_index=1))
    assert result["outcomes"] == {"hung": "timed_out"} and result["skipped"] == []


def test_an_abandoned_registration_of_a_process_not_seen_here_is_skipped(root: Path) -> None:
    LiveJob(root, "crashed-pod").register()
    paths = JobPaths(root, "crashed-pod")
    data = json.loads(paths.registration.read_text())
    data.update(host="another-pod", last_poll_at=time.time() - 7200)  # its pid cannot be checked from here
    atomic_write_json(paths.registration, data, tmp_dir=paths.tmp)
    action = TrainingCheckpointNodeAction(root, LABELS)

    result = action.execute(action.validate({"timeout": 0.5}), ctx_for({}))

    assert result["outcomes"] == {"crashed-pod": "skipped"}
    assert result["skipped"][0]["why"].startswith("abandoned: last poll 7200 s ago")


def test_the_action_is_registered_with_the_training_control_root_setting(tmp_path: Path) -> None:
    settings = load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(tmp_path)})
    action = default_registry(settings).get("training.checkpoint_node")
    assert isinstance(action, TrainingCheckpointNodeAction) and action.root == tmp_path
    assert action.where.value == "node"


def test_the_result_names_each_jobs_outcome(root: Path, jobs: list[LiveJob]) -> None:
    jobs.append(LiveJob(root, "saves").start())
    refuses = LiveJob(root, "refuses")
    refuses.control.checkpoints = None  # it cannot checkpoint: it answers rejected
    jobs.append(refuses.start())
    LiveJob(root, "silent").register()  # alive, never polls
    action = TrainingCheckpointNodeAction(root, LABELS)

    result = action.execute(action.validate({"timeout": 1, "best_effort": True}), ctx_for({}))

    assert result["outcomes"] == {"refuses": "rejected", "saves": "checkpointed", "silent": "timed_out"}
    assert [(f["job"], f["outcome"]) for f in result["failed"]] == [("refuses", "rejected"), ("silent", "timed_out")]
