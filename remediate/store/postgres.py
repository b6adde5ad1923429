"""PostgreSQL: what differs from the server-database defaults of `dialect.Dialect`.

Several replicas share one database here, so whatever must happen once across them (creating the
schema, upgrading it) is serialised with a transaction-scoped advisory lock: it is released by the
commit or rollback, and by PostgreSQL itself when the holder's connection dies.
The pool is bounded (settings `database_pool_size` + `database_max_overflow` per process) so that
replicas x processes cannot exhaust the server's max_connections; a connection that died with a
restart of the server is replaced on checkout (pre-ping) instead of failing the next request.
"""

from __future__ import annotations

import zlib

import sqlalchemy as sa

from remediate.errors import StoreUnreachable
from remediate.store.dialect import DEFAULT_POOL, Dialect, PoolLimits

CONNECT_TIMEOUT = 5
"""Seconds to wait for a connection to the server before the request fails (503), not a hang."""
UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03")
"""SQLSTATEs that mean the server, not the statement, failed: connection exceptions (class 08),
admin shutdown (a restart, a fail-over), crash shutdown, cannot connect now (starting up)."""


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock, from a name (the same in every process)."""
    return zlib.crc32(name.encode()) - 2**31


class PostgresDialect(Dialect):
    @staticmethod
    def create_engine(url: str, busy_timeout: float, pool: PoolLimits = DEFAULT_POOL) -> sa.Engine:
        return sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_size=pool.size,
            max_overflow=pool.max_overflow,
            pool_timeout=busy_timeout,
            connect_args={"connect_timeout": CONNECT_TIMEOUT},
        )

    def unreachable(self, exc: sa.exc.DBAPIError) -> StoreUnreachable | None:
        # psycopg raises a connection that could not be made (refused, timed out, DNS) as an
        # OperationalError without a SQLSTATE: no server ever answered.
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if (sqlstate is None and isinstance(exc, sa.exc.OperationalError)) or (
            sqlstate is not None and sqlstate.startswith(UNREACHABLE_STATES)
        ):
            return StoreUnreachable(self.unreachable_message(exc))
        return super().unreachable(exc)

    def lock_schema(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(advisory_key("remediate.schema"))))
