"""The engine of the store's tests: playbooks `xid` and `disk` (support.PLAYBOOK, support.OTHER) on the store."""

from __future__ import annotations

import pytest

from remediate.judging.engine import Engine
from tests.unit.store.support import OTHER, PLAYBOOK, MakeEngine


@pytest.fixture
def engine(make_engine: MakeEngine) -> Engine:
    return make_engine(PLAYBOOK, OTHER)
