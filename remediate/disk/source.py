"""Where `disk.cleanup` gets its policies: the node's policies file, read lazily and re-read when it changes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from remediate.disk.policy import PolicyError, PolicySet, load_policies


class NoPoliciesConfigured(PolicyError):
    """No cleanup policies file is configured on this node."""


class PolicySource:
    """Loads the policies file on first use and again whenever its inode, size or mtime changes.

    A file that stops loading keeps failing the steps that need it (with the loader's error) until
    it is fixed; nothing falls back to an older version of a file the operator has changed.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._policies: PolicySet | None = None

    def __call__(self) -> PolicySet:
        if self.path is None:
            raise NoPoliciesConfigured(
                "no cleanup policies are configured on this node: set cleanup_policies_file "
                "(REMEDIATE_CLEANUP_POLICIES_FILE) to a policies file"
            )
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise PolicyError(f"cannot read it: {exc.strerror or exc}", file=str(self.path)) from exc
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if self._policies is None or stamp != self._stamp:
                self._policies = None
                self._policies = load_policies(self.path)
                self._stamp = stamp
            return self._policies
