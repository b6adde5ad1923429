"""The loop's side of a rollback: the batches it asked to drop, and the step the loop continues from.

A rollback applied while the loop skips (inside `TrainingControl.skip_batch`) moves the step the
next `poll` returns: the loop's counter went on from the old step, so it is rebased on the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Skips:
    """Batches a rollback or a skip_batches command asked the loop to drop."""

    left: int = 0
    skipped: int = 0
    """How many batches have been dropped so far."""
    rebase: tuple[int, int] | None = None
    """(step, new step) of a rollback applied while skipping: the next poll continues from there."""

    def request(self, batches: int) -> None:
        self.left += max(0, int(batches))

    def take(self) -> bool:
        """Count one batch down; False when none is left to skip."""
        if self.left <= 0:
            return False
        self.left -= 1
        self.skipped += 1
        return True

    def moved(self, before: int, after: int) -> None:
        """A rollback applied while skipping moved the loop from step `before` to `after`."""
        self.rebase = (self.rebase[0] if self.rebase else before, after)

    def continued(self, step: int) -> int:
        """The step the loop's `step` stands for, once a rollback applied while skipping is counted in."""
        if self.rebase is None:
            return step
        before, after = self.rebase
        self.rebase = None
        return after + (step - before)


def loss_value(loss: Any) -> float | None:
    """A loss (a float or a 0-dim tensor) as a float; converted only when a checkpoint needs it."""
    if loss is None:
        return None
    if hasattr(loss, "detach"):
        loss = loss.detach()
    if hasattr(loss, "item"):
        loss = loss.item()
    return float(loss)
