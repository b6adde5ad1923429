"""remediate.server.ui.gates: the banner's reads; a store that cannot be read leaves the banner out, not a 500."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from remediate.breaker import BreakerState
from remediate.errors import StoreBusy
from remediate.server.ui.gates import Gates, read_gates
from remediate.store import PauseState


class _Unreadable:
    def state(self) -> Any:
        raise StoreBusy("database is locked")


def test_the_banner_shows_for_a_pause_or_an_open_breaker_only() -> None:
    assert not Gates(PauseState(False), BreakerState()).shown
    assert Gates(PauseState(True, "alice", "maintenance", 1.0), BreakerState()).shown
    assert Gates(PauseState(False), BreakerState(open=True)).shown


def test_a_store_that_cannot_be_read_leaves_the_banner_out() -> None:
    store: Any = SimpleNamespace(pause=_Unreadable())
    breaker: Any = _Unreadable()
    gates = read_gates(store, breaker)
    assert gates == Gates(None, None) and not gates.shown
