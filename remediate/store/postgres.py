"""PostgreSQL: what differs from the server-database defaults of `dialect.Dialect`.

Several replicas share one database here, so whatever must happen once across them (creating the
schema, upgrading it) is serialised with a transaction-scoped advisory lock: it is released by the
commit or rollback, and by PostgreSQL itself when the holder's connection dies.
The pool is bounded (`pool_size` + `max_overflow` per process) so that replicas x processes cannot
exhaust the server's max_connections; a connection that died with a restart of the server is
replaced on checkout (pre-ping) instead of failing the next request.
"""

from __future__ import annotations

import zlib

import sqlalchemy as sa

from remediate.store.dialect import Dialect

POOL_SIZE = 5
MAX_OVERFLOW = 5
CONNECT_TIMEOUT = 5
"""Seconds to wait for a connection to the server before the request fails (503), not a hang."""


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock, from a name (the same in every process)."""
    return zlib.crc32(name.encode()) - 2**31


class PostgresDialect(Dialect):
    @staticmethod
    def create_engine(url: str, busy_timeout: float) -> sa.Engine:
        return sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_size=POOL_SIZE,
            max_overflow=MAX_OVERFLOW,
            pool_timeout=busy_timeout,
            connect_args={"connect_timeout": CONNECT_TIMEOUT},
        )

    def lock_schema(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(advisory_key("remediate.schema"))))
