"""Run one call with a deadline: what the executor (a step here) and the node agent (a step there) share.

Python cannot stop a thread: a call that overruns keeps running in the background, so actions watch
`StepContext.remaining()` themselves; this only stops the waiting.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from remediate.errors import ActionError


class StepTimeout(ActionError):
    """The step did not finish before its deadline."""


def call_with_deadline(function: Callable[[], Any], seconds: float) -> Any:
    """Run `function` in a helper thread; raise StepTimeout if it is not done within `seconds`."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
        try:
            # A fresh context, as a new thread has: nothing a helper's earlier call set is seen.
            box["value"] = contextvars.Context().run(function)
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    _helpers.run(call)
    if not done.wait(max(seconds, 0.0)):
        raise StepTimeout(f"timed out after {seconds:.1f}s (the action may still be finishing in the background)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class _Helpers:
    """The helper threads: a call goes to an idle one, else to a new one, which then waits for the next call.

    Starting a thread per call cost more CPU than a `log` step's action, and every step's start waited for the new
    thread to run (docs/benchmarks.md, "the first-step p99 and CPU per alert"). An overrunning call
    keeps its thread until it ends, as before. (`list.pop` and `append` are atomic: no lock.) Not
    concurrent.futures.ThreadPoolExecutor: its threads are joined at interpreter exit, so one overrunning call
    would hold up the exit of the executor or the agent, and its bound would queue calls behind overruns."""

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        # A forked child has none of its parent's threads: their inboxes are forgotten there.
        os.register_at_fork(after_in_child=self._idle.clear)

    def run(self, call: Callable[[], None]) -> None:
        try:
            inbox = self._idle.pop()
        except IndexError:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="remediate-step", daemon=True).start()
        inbox.put(call)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            inbox.get()()
            self._idle.append(inbox)


_helpers = _Helpers()
