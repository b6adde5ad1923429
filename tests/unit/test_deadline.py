"""remediate.deadline: one call with a deadline, shared by the executor and the node agent."""

from __future__ import annotations

import threading
import time

import pytest

from remediate.deadline import StepTimeout, call_with_deadline
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
    assert done.wait(2)  # Python cannot stop the thread: the call still ends


def test_a_deadline_already_past_does_not_wait() -> None:
    started = time.monotonic()
    with pytest.raises(StepTimeout):
        call_with_deadline(lambda: time.sleep(0.3), -1.0)
    assert time.monotonic() - started < 0.2
