"""`Store`: the one object the engine, executor, HTTP server and CLI hold, whatever the database.

It opens, upgrades, checks and closes the database, and is the one door every transaction passes
(`write()`, `read()`). Everything else is an object of its concept, held as an attribute: callers use
`store.queue`, `store.ingest`, `store.history`, ... directly. It knows nothing about Flask, playbooks or
actions: it stores what it is given.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa

from remediate.store.announcements import Announcements
from remediate.store.breaker_rows import BreakerLedger
from remediate.store.database import Database
from remediate.store.history import History
from remediate.store.ingest import Ingest
from remediate.store.ladders import Ladders
from remediate.store.leases import Leases
from remediate.store.memory import StoreMemory
from remediate.store.pause import Pause
from remediate.store.queue import RunQueue
from remediate.store.retention import Retention
from remediate.store.ui_sessions import UiSessions


class Store:
    """The audit history and the durable run queue of one database."""

    def __init__(self, database: Database) -> None:
        """On an opened Database (`Store.open`)."""
        self.database = database
        dialect = database.dialect
        # The concept objects open their transactions through this object's write()/read(): every
        # transaction of the store passes one door, whichever object opens it.
        self.queue = RunQueue(self)
        self.leases = Leases(self)
        self.announcements = Announcements(self, self.queue)
        self.ingest = Ingest(self, dialect)
        self.history = History(self, dialect)
        self.pause = Pause(self)
        self.breaker = BreakerLedger(self, dialect)
        self.ladders = Ladders(self, dialect)
        self.memory = StoreMemory(self)
        self.ui_sessions = UiSessions(self)
        self.retention = Retention(self, self.database)

    @classmethod
    def open(cls, url: str, **options: Any) -> Store:
        """Open (and by default create or upgrade) the database: `Database.open` with its options."""
        return cls(Database.open(url, **options))

    def write(self) -> AbstractContextManager[sa.Connection]:
        """One write transaction; see Database.write."""
        return self.database.write()

    def read(self) -> AbstractContextManager[sa.Connection]:
        """One connection to read on."""
        return self.database.read()

    def close(self) -> None:
        self.database.close()
