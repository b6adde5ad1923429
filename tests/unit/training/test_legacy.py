"""The previous release's spellings of the training library still work, each with a DeprecationWarning naming the
new one: names imported from `remediate.training`, TrainingControl's old keywords, its public inbox/outbox/job_file.

pytest turns warnings into errors (pyproject.toml), so every old spelling here runs under `pytest.deprecated_call`;
a shim that stopped warning, or warned for the new spellings, fails."""

from __future__ import annotations

import importlib
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import remediate.training
import remediate.training.inbox as inbox_module
from remediate.training import CommandContext, ControlOptions, TrainingControl
from remediate.training.protocol import APPLIED, Ack
from tests.support.training import JOB, FakeOptimizer, deliver, wait_for_ack

MOVED = [
    ("PROTOCOL_VERSION", "remediate.training.protocol"),
    ("RESTART_EXIT_CODE", "remediate.training.protocol"),
    ("Ack", "remediate.training.protocol"),
    ("Command", "remediate.training.protocol"),
    ("ProtocolError", "remediate.training.protocol"),
    ("Registration", "remediate.training.protocol"),
    ("select_checkpoint", "remediate.training.protocol"),
    ("JobPaths", "remediate.training.files"),
    ("CheckpointIndex", "remediate.training.checkpoints"),
    ("CheckpointStore", "remediate.training.handle"),
    ("Handler", "remediate.training.handlers"),
]


def test_the_package_exports_what_a_job_constructs_calls_and_gets_back() -> None:
    assert sorted(remediate.training.__all__) == [
        "CallableCheckpoints",
        "CheckpointInfo",
        "CommandContext",
        "CommandRejected",
        "ControlOptions",
        "JobNameInUse",
        "RestartRequested",
        "TorchCheckpoints",
        "TrainingControl",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the job-facing names never warn
        for name in remediate.training.__all__:
            assert getattr(remediate.training, name).__name__ == name
    assert not {name for name, _ in MOVED} & set(dir(remediate.training))


@pytest.mark.parametrize(("name", "module"), MOVED, ids=[name for name, _ in MOVED])
def test_a_name_the_package_no_longer_exports_still_resolves_with_a_warning(name: str, module: str) -> None:
    with pytest.deprecated_call(match=f"importing {name} from remediate.training is deprecated.*from {module}$"):
        value = getattr(remediate.training, name)
    assert value is getattr(importlib.import_module(module), name)
    # ... and again on the next access: the old name is never cached in the package's namespace.
    with pytest.deprecated_call():
        exec(f"from remediate.training import {name}", {})  # noqa: S102  the statement a job's source holds


def test_the_warning_of_an_old_import_points_at_the_importing_line() -> None:
    with pytest.deprecated_call() as record:
        from remediate.training import Ack as OldAck  # type: ignore[attr-defined]
    assert OldAck is Ack
    assert {Path(w.filename) for w in record} == {Path(__file__)}


def test_a_name_that_never_existed_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'TrainingClient'"):
        _ = remediate.training.TrainingClient


def settle(control: TrainingControl, step: int) -> None:
    """Poll past the inbox's racy window (inbox.RACY_NS) so that the command just delivered is seen."""
    time.sleep(inbox_module.RACY_NS / 1e9 + 0.01)
    control.poll(step)
    control.poll(step)


def test_the_old_keywords_map_to_control_options_and_handlers_to_add_handler(root: Path) -> None:
    acks: list[Ack] = []
    notes: list[int] = []

    def note(ctx: CommandContext) -> None:
        notes.append(ctx.step)

    with pytest.deprecated_call(match=r"pass options=ControlOptions\(wake_signal=\.\.\., heartbeat_interval=") as rec:
        control = TrainingControl(
            JOB,
            root=root,
            optimizer=FakeOptimizer(1e-3),
            wake_signal=None,
            heartbeat_interval=7.0,
            sync_every=3,
            on_ack=acks.append,
            framework="custom",
            handlers={"note": note},
        )
    assert "call control.add_handler(kind, handler) for each" in str(rec[0].message)
    assert Path(rec[0].filename) == Path(__file__)  # the job's own line, not the library's
    assert control.options == ControlOptions(
        wake_signal=None, heartbeat_interval=7.0, sync_every=3, on_ack=acks.append, framework="custom"
    )
    with control:
        registration = control.paths.read_registration()
        assert (registration.heartbeat_s, registration.framework, registration.wake_signal) == (7.0, "custom", None)
        assert "note" in (registration.commands or {})
        command = deliver(root, JOB, "note")
        settle(control, 5)
        assert wait_for_ack(root, JOB, command.id).status == APPLIED
    assert notes == [5]
    assert [ack.id for ack in acks] == [command.id]  # the old on_ack= was wired


def test_an_old_keyword_wins_over_the_same_field_of_the_options_given(root: Path) -> None:
    with pytest.deprecated_call(match="heartbeat_interval"):
        control = TrainingControl(
            JOB, root=root, options=ControlOptions(wake_signal=None, heartbeat_interval=1.0), heartbeat_interval=9.0
        )
    assert (control.options.heartbeat_interval, control.options.wake_signal) == (9.0, None)


def test_the_new_form_warns_nothing_and_an_unknown_keyword_is_a_type_error(root: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        control = TrainingControl(JOB, root=root, options=ControlOptions(wake_signal=signal.SIGUSR2))
        control.add_handler("note", lambda ctx: None)
    assert control.options.wake_signal == signal.SIGUSR2 and "note" in control.kinds
    with pytest.raises(TypeError, match="unexpected keyword argument 'heartbeat'"):
        TrainingControl(JOB, root=root, heartbeat=3.0)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [("sync_every", 0, "at least 1"), ("sync_every_s", -1.0, ">= 0"), ("sync_every_s", float("inf"), ">= 0")],
)
def test_options_refuse_an_exchange_spacing_that_cannot_work(field: str, value: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ControlOptions(**{field: value})


def test_the_inbox_outbox_and_job_file_are_private_and_the_old_names_warn(root: Path) -> None:
    control = TrainingControl(JOB, root=root, options=ControlOptions(wake_signal=None)).register()
    try:
        with pytest.deprecated_call(match="TrainingControl.inbox is internal"):
            inbox = control.inbox
        assert inbox is control._inbox and inbox.paths == control.paths  # the very inbox the control polls
        with pytest.deprecated_call(match="TrainingControl.outbox is internal"):
            assert control.outbox.acks is control.acks
        with pytest.deprecated_call(match="TrainingControl.job_file is internal") as record:
            assert control.job_file.paths == control.paths
        assert Path(record[0].filename) == Path(__file__)
    finally:
        control.close()
