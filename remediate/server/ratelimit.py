"""Bounds on what requests nobody has authenticated yet may cost: a token bucket per client address, a limit on
all of them together in any window of time, and the answers given to secrets that were refused, remembered for a
while (by the secret's SHA-256, never the secret).

In-memory, per process: each HTTP worker has its own, so a client may get `workers` times the figures it is
given. Thread-safe (a worker's threads share one). Both are bounded in size: the least recently used key goes
first, so a client that sends from many addresses or many made-up secrets costs memory up to the bound only.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    """One bucket per key (a client address) of `capacity` tokens, refilled at `per_second`: a burst of
    `capacity` requests, then one every 1/`per_second` seconds."""

    def __init__(
        self,
        *,
        capacity: float,
        per_second: float,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1 or per_second <= 0 or max_keys < 1:
            raise ValueError("capacity >= 1, per_second > 0 and max_keys >= 1")
        self.capacity, self.per_second, self.max_keys = float(capacity), float(per_second), max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one token of `key`'s bucket: 0.0 when taken, else the seconds until one is there (none taken)."""
        now = self._clock()
        with self._lock:
            bucket = self._buckets.pop(key, None) or _Bucket(self.capacity, now)
            bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.at) * self.per_second)
            bucket.at = now
            self._buckets[key] = bucket  # the most recently used goes last
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0.0
            return (1 - bucket.tokens) / self.per_second


class WindowLimit:
    """At most `limit` pieces of work in any `window` seconds, however the window is placed, counting each from
    the moment it is taken until it has ended: one more is taken only while fewer than `limit` are in flight or
    ended less than `window` ago. Counting to the end (not only the start) is what bounds what another service
    sees: a call taken at t reaches it somewhere before it ends, so `limit` calls apart are at least `window`
    apart where they arrive, however their latencies vary. Unlike a token bucket (which lets its capacity plus
    a second's refill through in one second), a burst of `limit` at once is allowed and no second ever holds
    more. Every `take` that returns 0.0 must be followed by `done` when the work has ended."""

    def __init__(self, *, limit: int, window: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1 or window <= 0:
            raise ValueError("limit >= 1 and window > 0")
        self.limit, self.window = limit, window
        self._clock = clock
        self._in_flight = 0
        self._ended: deque[float] = deque()
        """When the last pieces of work ended, oldest first (only those less than `window` ago count)."""
        self._lock = threading.Lock()

    def take(self) -> float:
        """0.0 when taken, else the seconds until one may be (none taken): the oldest ended piece's remaining
        time in the window, or the whole window while all `limit` are in flight."""
        now = self._clock()
        with self._lock:
            while self._ended and self._ended[0] + self.window <= now:
                self._ended.popleft()
            if self._in_flight + len(self._ended) >= self.limit:
                return self._ended[0] + self.window - now if self._ended else self.window
            self._in_flight += 1
            return 0.0

    def done(self) -> None:
        """The work of one successful `take` has ended: it counts for `window` seconds more."""
        with self._lock:
            if self._in_flight < 1:
                raise RuntimeError("done() without a take() it ends")
            self._in_flight -= 1
            self._ended.append(self._clock())


class RecentRefusals(Generic[V]):
    """What was answered to a refused secret, kept `ttl` seconds under the secret's SHA-256: the same secret
    sent again gets the same answer without asking anyone again."""

    def __init__(self, *, ttl: float, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0 or max_entries < 1:
            raise ValueError("ttl > 0 and max_entries >= 1")
        self.ttl, self.max_entries = ttl, max_entries
        self._clock = clock
        self._answers: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(secret: str) -> str:
        return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, secret: str) -> V | None:
        key, now = self._key(secret), self._clock()
        with self._lock:
            found = self._answers.get(key)
            if found is None:
                return None
            if found[0] <= now:
                del self._answers[key]
                return None
            return found[1]

    def put(self, secret: str, answer: V) -> None:
        key, now = self._key(secret), self._clock()
        with self._lock:
            self._answers.pop(key, None)
            self._answers[key] = (now + self.ttl, answer)
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)
