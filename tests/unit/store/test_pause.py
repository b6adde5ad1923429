"""remediate.store.pause: the pause flag, who set it and why."""

from __future__ import annotations

import pytest

from remediate.errors import AlreadyPaused
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0

pytestmark = EVERY_DATABASE


def test_pause_state_is_off_until_set_and_remembers_who_and_why(store: Store) -> None:
    assert not store.pause.state().paused

    store.pause.set(True, by="alice", reason="maintenance", now=T0)
    state = store.pause.state()
    assert (state.paused, state.by, state.reason, state.since) == (True, "alice", "maintenance", T0)

    store.pause.set(False, by="bob", reason="", now=T0 + 5)
    state = store.pause.state()
    assert (state.paused, state.by, state.since) == (False, "bob", T0 + 5)


def test_a_pause_over_a_pause_is_refused_unless_it_replaces_on_purpose(store: Store) -> None:
    """A second pause silently replaced who paused and why."""
    store.pause.set(True, by="alice", reason="maintenance", now=T0)

    with pytest.raises(AlreadyPaused, match="already paused by alice: maintenance") as refused:
        store.pause.set(True, by="bob", reason="driver upgrade", now=T0 + 5, replace=False)
    assert (refused.value.by, refused.value.reason, refused.value.since) == ("alice", "maintenance", T0)
    state = store.pause.state()
    assert (state.by, state.reason, state.since) == ("alice", "maintenance", T0)

    store.pause.set(True, by="bob", reason="driver upgrade", now=T0 + 5, replace=True)
    assert (store.pause.state().by, store.pause.state().reason) == ("bob", "driver upgrade")
    # Not paused: a pause needs no replacing.
    store.pause.set(False, by="bob", reason="", now=T0 + 6)
    assert store.pause.set(True, by="carol", reason="", now=T0 + 7, replace=False).by == "carol"
