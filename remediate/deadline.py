"""Run one call with a deadline: what the executor (a step here) and the node agent (a step there) share.

Python cannot stop a thread: a call that overruns keeps running in the background, so actions watch
`StepContext.remaining()` themselves; this only stops the waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from remediate.errors import ActionError


class StepTimeout(ActionError):
    """The step did not finish before its deadline."""


def call_with_deadline(function: Callable[[], Any], seconds: float) -> Any:
    """Run `function` in a helper thread; raise StepTimeout if it is not done within `seconds`."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = function()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="remediate-step", daemon=True)
    thread.start()
    thread.join(max(seconds, 0.0))
    if thread.is_alive():
        raise StepTimeout(f"timed out after {seconds:.1f}s (the action may still be finishing in the background)")
    if "error" in box:
        raise box["error"]
    return box.get("value")
