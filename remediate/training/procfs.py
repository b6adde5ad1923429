"""What the kernel says about a process (/proc), and this process's own identity: both sides of the protocol
use it to tell a live job from a reused pid and to name the job's pod. Standard library only."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path


def identity_from_env(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(pod, namespace) of this process as Kubernetes names it: $POD_NAME (downward API), else $HOSTNAME,
    else the host name (a pod's host name is its name); and $POD_NAMESPACE."""
    env = os.environ if env is None else env
    pod = env.get("POD_NAME") or env.get("HOSTNAME") or this_host()
    return pod, env.get("POD_NAMESPACE") or None


def pid_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or None where unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def process_cgroup(pid: int) -> str | None:
    """The cgroup lines of a process (/proc/<pid>/cgroup, as the reader's cgroup namespace shows them), or None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return text.strip()[:4096] or None


def pod_uid_of(cgroup: str | None) -> str | None:
    """The Kubernetes pod UID in a cgroup path (kubelet's ``kubepods...pod<uid>...``), or None outside a pod.

    Read by the agent from /proc (host cgroup namespace), it is the kernel's word, not the job's.
    """
    found = _POD_UID.search(cgroup or "")
    return found.group(1).replace("_", "-") if found else None


def pid_uid(pid: int) -> int | None:
    """The real uid of a process (from /proc/<pid>/status), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def this_host() -> str:
    return socket.gethostname()
