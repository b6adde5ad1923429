"""remediate.actions.deadline: one call with a deadline, shared by the executor and the node agent."""

from __future__ import annotations

import contextvars
import os
import threading
import time

import pytest

from remediate.actions.deadline import StepTimeout, call_with_deadline
from remediate.errors import ActionError


def test_the_value_comes_back_when_the_call_finishes_in_time() -> None:
    assert call_with_deadline(lambda: 42, 1.0) == 42


def test_the_calls_own_error_comes_back_unchanged() -> None:
    def fail() -> None:
        raise ActionError("no GPU 9")

    with pytest.raises(ActionError, match="no GPU 9") as failure:
        call_with_deadline(fail, 1.0)
    assert not isinstance(failure.value, StepTimeout)


def test_an_overrunning_call_stops_the_wait_at_the_deadline_and_finishes_in_the_background() -> None:
    done = threading.Event()

    def slow() -> None:
        time.sleep(0.5)
        done.set()

    started = time.monotonic()
    with pytest.raises(StepTimeout, match=r"timed out after 0\.1s"):
        call_with_deadline(slow, 0.1)
    assert time.monotonic() - started < 0.4
    assert call_with_deadline(lambda: 7, 1.0) == 7  # its helper is busy: the next call gets another
    assert done.wait(2)  # Python cannot stop the thread: the call still ends


def test_a_deadline_already_past_does_not_wait() -> None:
    started = time.monotonic()
    with pytest.raises(StepTimeout):
        call_with_deadline(lambda: time.sleep(0.3), -1.0)
    assert time.monotonic() - started < 0.2


def test_calls_reuse_an_idle_helper_thread_instead_of_starting_one_each() -> None:
    """A thread started per call cost more CPU than a `log` step (two per step: its plan and its attempt)."""
    first = call_with_deadline(threading.current_thread, 1.0)
    second = call_with_deadline(threading.current_thread, 1.0)

    assert first is second
    assert first is not threading.current_thread()


def test_a_call_sees_a_fresh_context_whatever_the_helper_ran_before() -> None:
    setting: contextvars.ContextVar[str] = contextvars.ContextVar("setting", default="unset")

    call_with_deadline(lambda: setting.set("left by an earlier call"), 1.0)

    assert call_with_deadline(setting.get, 1.0) == "unset"


def test_a_forked_child_runs_its_calls_on_helpers_of_its_own() -> None:
    call_with_deadline(lambda: None, 1.0)  # the parent has an idle helper, which the child does not inherit
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os._exit(0 if call_with_deadline(lambda: 5, 2.0) == 5 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
