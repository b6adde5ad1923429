"""The optional wake-up signal of a waiting job: a handler that only sets a flag and writes a byte to a pipe.

Commands are applied by `TrainingControl.poll`, between steps, in the thread that trains — never inside
a signal handler. The pipe lets `TrainingControl.wait` sleep until the signal arrives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from remediate.training.protocol import WAKE_SIGNALS

log = logging.getLogger("remediate.training")


class WakeUp:
    """The wake-up signal's handler and pipe; `on_wake` (no arguments) runs inside the handler: keep it a flag."""

    def __init__(self, wake_signal: int | None, on_wake: Callable[[], None]) -> None:
        if wake_signal is not None and signal.Signals(wake_signal).name not in WAKE_SIGNALS:
            raise ValueError(f"wake_signal must be one of {', '.join(WAKE_SIGNALS)} or None")
        self.signal = wake_signal
        self.installed = False
        self._on_wake = on_wake
        self._read: int | None = None
        self._write: int | None = None
        self._previous: Any = None

    @property
    def name(self) -> str | None:
        """The signal's name as job.json announces it; None while no handler is installed."""
        return signal.Signals(self.signal).name if self.installed and self.signal is not None else None

    def install(self) -> None:
        """Only from the main thread, and only if nothing handles that signal yet."""
        if self.signal is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(self.signal) not in (signal.SIG_DFL, None):
            log.warning(
                "remediate: %s already has a handler; not installing the wake-up handler",
                signal.Signals(self.signal).name,
            )
            return
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous = signal.signal(self.signal, self.on_signal)
        self.installed = True

    def uninstall(self) -> None:
        if self.installed and self.signal is not None:
            with contextlib.suppress(ValueError):  # not the main thread
                signal.signal(self.signal, self._previous or signal.SIG_DFL)
            self.installed = False
        for fd in (self._read, self._write):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._read = self._write = None

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag and a byte: commands are applied by poll(), between steps, in the training thread.
        self._on_wake()
        if self._write is not None:
            with contextlib.suppress(OSError):
                os.write(self._write, b"\0")

    def sleep(self, seconds: float) -> None:
        """Sleep up to `seconds`, less when the signal arrives."""
        if self._read is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self._read], [], [], seconds)
        if ready:
            with contextlib.suppress(OSError):
                os.read(self._read, 4096)
