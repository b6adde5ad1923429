"""remediate.store.pause: the pause flag, who set it and why."""

from __future__ import annotations

from remediate.store import Store
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0

pytestmark = EVERY_DATABASE


def test_pause_state_is_off_until_set_and_remembers_who_and_why(store: Store) -> None:
    assert not store.pause_state().paused

    store.set_paused(True, by="alice", reason="maintenance", now=T0)
    state = store.pause_state()
    assert (state.paused, state.by, state.reason, state.since) == (True, "alice", "maintenance", T0)

    store.set_paused(False, by="bob", reason="", now=T0 + 5)
    state = store.pause_state()
    assert (state.paused, state.by, state.since) == (False, "bob", T0 + 5)
