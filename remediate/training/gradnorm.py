"""The global gradient norm as `StepMetrics` exports it (`training_grad_norm`), at no GPU sync per step.

Most jobs already compute the norm to clip (`torch.nn.utils.clip_grad_norm_` returns the total norm before
clipping, as a tensor on the gradients' device). Reading it with `.item()` every step would stall the CPU until
the GPU has finished the step, every step: the kernel queue drains and the next step's launches wait. So a tensor
is never read when it is given: the largest norm of the steps since the last read is kept on the device
(`torch.maximum`, one tiny kernel, no sync) and read at most once every `sync_every_s` seconds (default 5 s, a
fraction of any scrape interval). A job whose steps last longer than that reads once a step, which costs nothing
against such a step; a fast job reads once every `sync_every_s / step time` steps. A float (a norm the job has
already read, Hugging Face's logged `grad_norm`) costs nothing and is kept the same way.

The gauge holds the largest norm of the steps between two reads, not the last one: a spike between two reads is
never lost. NaN and Inf are exported as they are (a NaN step makes the read NaN: the spike rule ignores it, the
loss rules see what follows).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

DEFAULT_SYNC_EVERY_S = 5.0


class GradNormError(ValueError):
    """The value given as a gradient norm is not one number (a tensor of more than one element, a string)."""


def _scalar(value: Any) -> Any:
    """`value` as something `_larger` takes: a float, or a detached one-element tensor (never read here)."""
    if hasattr(value, "detach"):
        if value.numel() != 1:  # metadata only, no sync
            raise GradNormError(f"grad_norm: one number is needed, got a tensor of shape {tuple(value.shape)}")
        return value.detach().reshape(())
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GradNormError(f"grad_norm: a number or a one-element tensor is needed, got {type(value).__name__}")
    return float(value)


def _larger(kept: Any, value: Any) -> Any:
    """The larger of two norms, NaN if either is NaN; on the device when either is a tensor (no sync)."""
    kept_tensor, value_tensor = hasattr(kept, "detach"), hasattr(value, "detach")
    if kept_tensor and value_tensor:
        torch = sys.modules["torch"]
        return torch.maximum(kept, value.to(kept.device))
    if kept_tensor:
        return kept.clamp(min=value) if not math.isnan(value) else kept.new_tensor(math.nan)
    if value_tensor:
        return value.clamp(min=kept) if not math.isnan(kept) else value.new_tensor(math.nan)
    if math.isnan(kept) or math.isnan(value):
        return math.nan
    return max(kept, value)


def read(value: Any) -> float:
    """The kept norm as a float: the one GPU sync, for a tensor."""
    return float(value.item()) if hasattr(value, "detach") else float(value)


class GradNormExport:
    """Keeps the largest norm since the last read and sets the gauge `gauge()` returns to it at most once every
    `sync_every_s` seconds of `clock`."""

    def __init__(
        self, gauge: Callable[[], Any], *, clock: Callable[[], float], sync_every_s: float = DEFAULT_SYNC_EVERY_S
    ) -> None:
        if not sync_every_s >= 0:
            raise GradNormError(f"grad_norm_sync_every_s: must be 0 or more, got {sync_every_s}")
        self._gauge = gauge
        self._clock = clock
        self._every = sync_every_s
        self._kept: Any = None
        self._read_at = -math.inf  # the first norm is read at once: the series exists from the first step
        self.reads = 0
        """How many times a norm was read (for a tensor: GPU syncs)."""

    def observe(self, value: Any) -> None:
        norm = _scalar(value)
        self._kept = norm if self._kept is None else _larger(self._kept, norm)
        now = self._clock()
        if now - self._read_at >= self._every:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Read the kept norm into the gauge now (at the end of training, or before a checkpoint's pause)."""
        if self._kept is None:
            return
        self._gauge().set(read(self._kept))
        self.reads += 1
        self._kept = None
        self._read_at = self._clock() if now is None else now
