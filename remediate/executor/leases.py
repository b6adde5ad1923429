"""Leases: the runs an executor holds, their heartbeat, the takeover of runs whose owner is gone, and the
hand-back of runs the store failed under.

Ownership: each claim increments the run's claim generation and every progress write checks
it (RunLease); an executor that finds its claim gone (it stalled and another took the run
over) raises ClaimLostError, logs it and writes nothing more, runs no further step. Recovery
takes at once a run whose owner died on this host, and any other (an owner alive here but stalled,
SIGSTOPped or unable to write, or one of another host or replica: `replica_name`) only when its
heartbeat has not changed for `stale_after` seconds (the `lease` setting) of this process's monotonic
clock (no wall clock is compared across processes), and then only if the heartbeat is still the one it
watched (RunQueue.requeue_claims): no run stays `running` without a live heartbeat. The owner renews
its leases from a thread of its own (`Executor._heartbeat` -> `Leases.renew`, every
`heartbeat_interval(lease)`), so a step longer than the lease keeps its run.

When the store fails under a run (any StoreUnavailable: locked, unreachable, disk full, read-only, ...),
its executor stops executing it and hands it back once the store takes writes again (`Leases.hand_back`):
a step whose action ran to its end is recorded with that end (a POST that was sent stays sent, and the
run goes on from the next step); a step whose outcome is unknown is `interrupted` and says why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from remediate.errors import StoreUnavailable
from remediate.runs import ClaimedRun, RunningClaim, StepEnd
from remediate.store import Store

log = logging.getLogger("remediate.executor")

STORE_FAILED = "the store failed under its executor (its outcome is unknown)"
"""Why a step in flight is `interrupted` when its run is handed back after a store outage."""
STORE_RETRY_MAX_S = 10.0
"""The longest wait between the executor's tries while the store is unavailable (a database restart, a fail-over)."""
REUSED_PID_SLACK = 5.0
"""Seconds a process may seem to have started after its own claim (coarse clocks) before its pid counts as reused."""


def heartbeat_interval(lease: float) -> float:
    """Seconds between heartbeats for `lease`: a quarter of it (four renewals per lease, so one slow
    database write never loses it), at least 0.5 s apart and at most 5 s."""
    return max(0.5, min(5.0, lease / 4))


class Leases:
    """The runs one executor has in hand (claimed, or read at the head and about to be), what recovery saw
    of everyone's claims, and the runs (with their unrecorded step ends) to hand back after a store outage.

    Shared by the executor's threads: the runs in hand, abandoned and unrecorded are read and written under
    `_lock`; what recovery saw only by the thread that recovers (at start, then housekeeping's)."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._lock = threading.Lock()
        self._active: set[int] = set()
        self._observed: dict[int, tuple[tuple[str, int, float | None], float]] = {}
        """run id -> (its owner, claim and heartbeat as last seen, time.monotonic() when first seen so)."""
        self._abandoned: dict[int, RunningClaim] = {}
        """Runs this executor stopped executing because the store failed under them (see `abandon`)."""
        self._unrecorded: dict[int, StepEnd] = {}
        """run id -> the end of its step whose action ran but whose end the store failed to record: written
        when the run is handed back (`hand_back`)."""

    # ------------------------------------------------------------------ the runs in hand

    def in_hand(self) -> set[int]:
        with self._lock:
            return set(self._active)

    def take(self, run_id: int) -> None:
        with self._lock:
            self._active.add(run_id)

    def release(self, run_id: int) -> None:
        """The run is no longer in hand; an unrecorded step end goes with it unless the run was abandoned."""
        with self._lock:
            self._active.discard(run_id)
            if run_id not in self._abandoned:
                self._unrecorded.pop(run_id, None)

    def renew(self, worker: str) -> None:
        """Move the heartbeat of every run in hand (one write). StoreUnavailable: the leases lapse if it lasts."""
        self.store.leases.heartbeat(sorted(self.in_hand()), worker, self.clock())

    # ------------------------------------------------------------------ recovery

    def recover(self, worker: str, stale_after: float) -> list[int]:
        """Requeue the runs whose owner is gone (see the module doc); returns their ids.

        This executor's own runs the store failed under are handed back first (`hand_back`), with the ends
        their steps really had: their heartbeat stood still through the outage, but their executor did not
        stop, and taking them over as if it had would drop those ends (a sent POST would be sent again)."""
        self.hand_back()
        claims = self.stale_claims(self.store.leases.running_claims(), worker, stale_after)
        recovered = self.store.leases.requeue_claims(claims, now=self.clock())
        if recovered:
            log.warning("recovered %d runs left running by a stopped executor: %s", len(recovered), recovered)
        return recovered

    def stale_claims(self, claims: list[RunningClaim], worker: str, stale_after: float) -> list[RunningClaim]:
        """The claims whose owner is gone: dead on this host, or silent for `stale_after` (see the module doc)."""
        now = time.monotonic()
        observed: dict[int, tuple[tuple[str, int, float | None], float]] = {}
        stale = []
        with self._lock:
            own = self._active | set(self._abandoned)  # abandoned: handed back by `hand_back`, not taken over
        for claim in claims:
            if claim.claimed_by == worker and claim.id in own:
                continue
            if _owner_dead(claim.claimed_by, claim.heartbeat_at):
                stale.append(claim)
                continue
            # Alive here or elsewhere: an owner that renewed nothing for the lease (stalled, SIGSTOPped, its
            # writes failing) loses its run; its lease checks then stop it writing (ClaimLostError).
            seen = (claim.claimed_by, claim.generation, claim.heartbeat_at)
            previous = self._observed.get(claim.id)
            since = previous[1] if previous is not None and previous[0] == seen else now
            observed[claim.id] = (seen, since)
            if now - since >= stale_after:
                stale.append(claim)
        self._observed = observed
        return stale

    # ------------------------------------------------------------------ the hand-back after a store outage

    def abandon(self, run: ClaimedRun) -> None:
        """The store failed under `run`: whether its failed write committed (the claim among them) is unknown.
        It is handed back as crash recovery would (its in-flight step `interrupted`, re-run only if
        idempotent) once the store answers, only if still in this claim; never continued from a guess, never
        left running in this live process's name."""
        with self._lock:
            lease = run.lease
            self._abandoned[run.id] = RunningClaim(run.id, lease.worker, lease.generation, None)

    @contextmanager
    def kept_if_unrecorded(self, run: ClaimedRun, end: StepEnd) -> Iterator[None]:
        """Around the write of a step's end after its action ran: if the store fails under it, the end is kept
        and written when the run is handed back (`hand_back`), not lost with the run's claim."""
        try:
            yield
        except StoreUnavailable:
            with self._lock:
                self._unrecorded[run.id] = end
            raise

    def hand_back(self) -> None:
        """Requeue the runs abandoned when the store failed, each only if still in the claim it was left in."""
        with self._lock:
            claims = list(self._abandoned.values())
            ends = {c.id: self._unrecorded[c.id] for c in claims if c.id in self._unrecorded}
        if not claims:
            return
        requeued = self.store.leases.requeue_claims(claims, now=self.clock(), own=True, ends=ends, why=STORE_FAILED)
        with self._lock:
            for claim in claims:
                self._abandoned.pop(claim.id, None)
                self._unrecorded.pop(claim.id, None)
        for run_id in requeued:
            if run_id in ends:
                log.warning("run %s: the end of its step %s, which the store failed to record, is recorded now: %s",
                            run_id, ends[run_id].step_id, ends[run_id].status)  # fmt: skip
        if requeued:
            log.warning("requeued %d run(s) interrupted by the store's outage: %s", len(requeued), requeued)


class StoreOutage:
    """Logs an outage of the store once when it starts and once when it ends, not at every retry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, exc: StoreUnavailable) -> None:
        with self._lock:
            first, self._since = self._since is None, self._since or time.monotonic()
        if first:
            log.warning(
                "the store is unavailable; the executor retries (every %gs at most): %s", STORE_RETRY_MAX_S, exc
            )

    def over(self) -> None:
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning("the store answers again after %.1fs", time.monotonic() - since)


def _owner_dead(claimed_by: str, claimed_at: float | None) -> bool:
    """Whether the owner is a process of this host that is gone (a zombie counts as gone: a killed worker stays
    one until it is reaped, and a server restarted right after a crash would otherwise see its old workers'
    pids "alive" and leave their runs `running` until the heartbeat goes stale).

    `claimed_at` (the claim's heartbeat, never earlier than the claim): a process that started after it
    holds a reused pid (a restarted container numbers its processes the same way) and the owner is dead.
    """
    host, _, pid = claimed_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # elsewhere: only its silence tells
    if int(pid) != os.getpid():
        with contextlib.suppress(PermissionError):
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return True
    try:
        # "pid (comm) state ...": comm may contain spaces and parentheses, the state follows the last ")";
        # after it, index 0 is field 3 (state) and index 19 field 22, the start time in clock ticks since boot.
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        started = int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return fields[0] == "Z" or (claimed_at is not None and started > claimed_at + REUSED_PID_SLACK)
