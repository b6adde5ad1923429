"""The banner every page shows while something stops remediation: the pause (who, why, since) or the
open breaker (why, since, which run tripped it). Read on every page a logged-in viewer sees (two meta
rows of the store), so nobody acts on a page without knowing that nothing new runs."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from remediate.breaker import BreakerState, CircuitBreaker
from remediate.errors import StoreUnavailable
from remediate.store import PauseState, Store

log = logging.getLogger("remediate.ui")


@dataclass(frozen=True)
class Gates:
    """What the banner says; both None when the store cannot be read (the page itself says why)."""

    pause: PauseState | None
    breaker: BreakerState | None

    @property
    def shown(self) -> bool:
        return bool((self.pause and self.pause.paused) or (self.breaker and self.breaker.open))


def read_gates(store: Store, breaker: CircuitBreaker) -> Gates:
    try:
        return Gates(store.pause.state(), breaker.state())
    except StoreUnavailable as exc:  # an error page of a store outage must still render
        log.warning("the banner could not read the pause and the breaker: %s", exc)
        return Gates(None, None)
