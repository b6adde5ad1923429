"""remediate.store.breaker_rows: one node's breaker claims, newest first, for the node page."""

from __future__ import annotations

from remediate.breaker import Claim
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0

pytestmark = EVERY_DATABASE


def test_claims_of_a_node_are_its_own_newest_first_with_their_release(store: Store) -> None:
    with store.breaker.ledger() as ledger:
        for i, node in enumerate(("node-a", "node-b", "node-a")):
            ledger.add_claim(Claim(node=node, kind="cordon", run_id=i + 1, claimed_at=T0 + i))
        ledger.release("node-b", now=T0 + 10, reason="uncordoned")

    claims = store.breaker.claims_of("node-a")
    assert [(c.run_id, c.claimed_at, c.released_at) for c in claims] == [(3, T0 + 2, None), (1, T0, None)]
    (released,) = store.breaker.claims_of("node-b")
    assert (released.kind, released.released_at, released.released_reason) == ("cordon", T0 + 10, "uncordoned")
    assert [c.run_id for c in store.breaker.claims_of("node-a", limit=1)] == [3]
    assert store.breaker.claims_of("node-z") == []
