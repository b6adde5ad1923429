"""`log`: records a message in the server's log and in the step's result, at the level asked; changes nothing else."""

from __future__ import annotations

import logging

import pytest

from remediate.actions import default_registry
from remediate.actions.base import StepContext, Where
from remediate.actions.log import LogAction
from remediate.errors import ParamsError
from remediate.intake.alertref import AlertRef


def context(logger: logging.Logger) -> StepContext:
    return StepContext(run_id=7, step_index=0, playbook="try-it", target="node-a", alert=AlertRef(), logger=logger)


def test_the_registry_finds_log_as_an_idempotent_cluster_action() -> None:
    action = default_registry().get("log")

    assert isinstance(action, LogAction)
    assert (action.where, action.idempotent) == (Where.CLUSTER, True)


def test_the_message_is_required_and_the_level_defaults_to_info() -> None:
    action = LogAction()

    assert action.validate({"message": "hello"}) == {"message": "hello", "level": "info"}
    with pytest.raises(ParamsError, match="message"):
        action.validate({})


def test_a_level_that_is_not_a_log_level_is_refused() -> None:
    with pytest.raises(ParamsError, match="level"):
        LogAction().validate({"message": "hello", "level": "loud"})


def test_the_plan_says_what_would_be_logged_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    action = LogAction()
    params = action.validate({"message": "drain node-a next", "level": "warning"})

    with caplog.at_level(logging.DEBUG, logger="test.log-action"):
        plan = action.plan(params, context(logging.getLogger("test.log-action")))

    assert plan == {"would_log": "drain node-a next", "level": "warning"}
    assert caplog.records == []


@pytest.mark.parametrize(("level", "number"), [("debug", logging.DEBUG), ("error", logging.ERROR)])
def test_execute_logs_at_the_level_asked_naming_the_run_and_playbook(
    caplog: pytest.LogCaptureFixture, level: str, number: int
) -> None:
    action = LogAction()
    params = action.validate({"message": "xid 79 on gpu 3", "level": level})

    with caplog.at_level(logging.DEBUG, logger="test.log-action"):
        result = action.execute(params, context(logging.getLogger("test.log-action")))

    assert result == {"logged": "xid 79 on gpu 3", "level": level}
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("test.log-action", number, "run 7 playbook try-it: xid 79 on gpu 3")
    ]
