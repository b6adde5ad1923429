"""The job's side of the command channel: noticing, claiming and reading commands, at most once.

`changed` costs one ``os.stat`` of the inbox directory when nothing changed (its mtime, size and
inode are compared with the last scan); the inbox is only listed when they differ, shortly after a
change (mtime granularity), after a wake-up signal, and once per heartbeat as a safety net.

A command is claimed by renaming it out of the inbox into ``taken/``, and its id is appended to
``applied.log`` (fsynced) before anything is changed: a command is applied at most once, even when
the job restarts in between (`recover_taken` then acknowledges it as failed, "interrupted").
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

from remediate.training.files import JobPaths, read_json
from remediate.training.outbox import Outbox, unlink
from remediate.training.protocol import FAILED, Command, ProtocolError, check_command_id

log = logging.getLogger("remediate.training")

RACY_NS = 50_000_000
"""A directory whose mtime is this close to the scan is listed again at the next poll: a change in the same
clock tick as the scan would leave the mtime as it was (file times advance in coarse ticks)."""
IO_WARNING_EVERY_S = 60.0

Claimed = tuple[str, float, "Command | Exception"]
"""A command file the job took from its inbox: (id, when, the command or why it is not one)."""


class Inbox:
    """One job's inbox and applied.log, as rank 0 reads them."""

    def __init__(self, paths: JobPaths) -> None:
        self.paths = paths
        self.dirty = True
        """Look (list the inbox) at the next poll whatever its stat says."""
        self.seen: tuple[int, int, int] | None = None
        """(mtime_ns, size, inode) of the inbox at the last scan."""
        self.applied: set[str] = set()
        self._where = str(paths.inbox)  # os.stat of a str: the cheapest call the common poll makes
        self._next_io_warning = 0.0

    def mark_dirty(self) -> None:
        """List the inbox at the next poll (also called inside the wake-up signal's handler: only a flag)."""
        self.dirty = True

    def changed(self) -> bool:
        """Whether the inbox may hold something new (without reading it)."""
        if self.dirty:
            return True
        try:
            info = os.stat(self._where)
        except OSError:
            return True  # let collect report it
        return (info.st_mtime_ns, info.st_size, info.st_ino) != self.seen

    def collect(self) -> list[Claimed]:
        """Claim every command file in the inbox (rename into taken/) and read it; oldest command first.

        A control directory that cannot be read (removed, unmounted) is reported and recreated if possible;
        it never stops training.
        """
        claimed: list[Claimed] = []
        try:
            self._claim_into(claimed)
        except OSError as exc:
            self.io_trouble("reading the inbox", exc)
        # Oldest first: a rollback and the lr cut issued after it must not swap (the rollback would undo the cut).
        claimed.sort(key=lambda c: (c[2].created_at if isinstance(c[2], Command) else 0.0, c[0]))
        return claimed

    def io_trouble(self, doing: str, exc: OSError) -> None:
        self.dirty = True  # look again at the next poll
        now = time.monotonic()
        if now >= self._next_io_warning:
            self._next_io_warning = now + IO_WARNING_EVERY_S
            log.warning("remediate: %s of %s failed (%s); training goes on", doing, self.paths.dir, exc)
        with contextlib.suppress(OSError):
            self.paths.create()

    def _claim_into(self, claimed: list[Claimed]) -> None:
        before = os.stat(self._where)
        scanned_at = time.time_ns()
        try:
            names = os.listdir(self._where)
        except FileNotFoundError:
            names = []
        self.seen = (before.st_mtime_ns, before.st_size, before.st_ino)
        self.dirty = scanned_at - before.st_mtime_ns < RACY_NS
        for command_id in _command_ids(names, "inbox"):
            name = f"{command_id}.json"
            try:
                os.rename(self.paths.inbox / name, self.paths.taken / name)
            except FileNotFoundError:
                continue  # withdrawn by remediate a moment ago
            claimed.append(self._read_claimed(command_id, time.time()))

    def release(self, claimed: list[Claimed]) -> None:
        """Put commands claimed but never started back into the inbox (none of them is in applied.log)."""
        for command_id, _, _ in claimed:
            with contextlib.suppress(OSError):
                os.rename(self.paths.taken_command(command_id), self.paths.command(command_id))

    def _read_claimed(self, command_id: str, received: float) -> Claimed:
        try:
            command = Command.from_dict(read_json(self.paths.taken_command(command_id)))
            if command.id != command_id:
                raise ProtocolError(f"file {command_id}.json holds command id {command.id!r}")
        except (ProtocolError, FileNotFoundError) as exc:
            return command_id, received, exc
        return command_id, received, command

    # ------------------------------------------------------------------ at most once

    def read_applied(self) -> None:
        try:
            text = self.paths.applied.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            text = ""
        self.applied = {line.strip() for line in text.splitlines() if line.strip()}

    def record_applied(self, command_id: str) -> None:
        """Append the id to applied.log and fsync it, before the command changes anything."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.paths.applied, flags, 0o644)
        try:
            os.write(fd, f"{command_id}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self.applied.add(command_id)

    def recover_taken(self, outbox: Outbox) -> None:
        """Commands a previous run of this job claimed: finish what can be finished, never apply twice."""
        try:
            names = os.listdir(self.paths.taken)
        except FileNotFoundError:
            return
        for command_id in _command_ids(names, None):
            taken = self.paths.taken_command(command_id)
            if command_id not in self.applied:
                # Claimed but never started: back to the inbox, to be judged again (it may have expired).
                with contextlib.suppress(OSError):
                    os.rename(taken, self.paths.command(command_id))
                continue
            if self.paths.ack(command_id).exists():
                unlink(taken)
                continue
            kind = ""
            with contextlib.suppress(Exception):
                kind = str(read_json(taken).get("kind", ""))
            outbox.answer(
                command_id,
                kind,
                FAILED,
                "interrupted: the job stopped while applying this command; it is not applied again (at most once)",
                time.time(),
                None,
            )


def _command_ids(names: list[str], warn_in: str | None) -> list[str]:
    """The command ids of the ``<id>.json`` files among `names`, sorted; other names are passed over
    (with a warning naming `warn_in` when it is set)."""
    ids = []
    for name in sorted(names):
        if name.startswith(".") or not name.endswith(".json"):
            continue
        try:
            ids.append(check_command_id(name[: -len(".json")]))
        except ProtocolError:
            if warn_in:
                log.warning("remediate: ignoring %s in the %s: not a command file name", name, warn_in)
    return ids
