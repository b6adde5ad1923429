"""PostgreSQL: what differs from the server-database defaults of `dialect.Dialect`.

Several replicas share one database here, so whatever must happen once across them (creating the
schema, upgrading it) is serialised with a transaction-scoped advisory lock: it is released by the
commit or rollback, and by PostgreSQL itself when the holder's connection dies.
Ingest transactions that judge the same guard keys (a playbook and its target) take transaction-scoped
advisory locks on them first (`lock_guards`): READ COMMITTED then shows each one what the other
committed, so a duplicate is judged `duplicate` and a second alert for the target `cooldown`.
The pool is bounded (settings `database_pool_size` + `database_max_overflow` per process) so that
replicas x processes cannot exhaust the server's max_connections; a connection that died with a restart
of the server is replaced on checkout (pre-ping) instead of failing the next request.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from remediate.errors import StoreBusy, StoreRefused, StoreUnreachable
from remediate.store.dialect import DEFAULT_POOL, Dialect, PoolLimits

CONNECT_TIMEOUT = 5
"""Seconds to wait for a connection to the server before the request fails (503), not a hang."""
UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03")
"""SQLSTATEs that mean the server, not the statement, failed: connection exceptions (class 08),
admin shutdown (a restart, a fail-over), crash shutdown, cannot connect now (starting up)."""
REFUSED_STATES = ("53", "58", "40001", "40P01", "25006", "57014")
"""SQLSTATEs that mean the server refused the transaction for a reason that may pass, not for its statements:
insufficient resources (class 53: disk full, out of memory, too many connections), system errors (class 58:
I/O), serialization failure, deadlock detected, a read-only transaction (a standby after a fail-over), and a
statement cancelled (statement_timeout, or an administrator)."""


MAX_GUARD_LOCKS = 64
"""Guard keys one ingest transaction locks one by one; a notification touching more takes the whole
ingest lock instead (every advisory lock held takes a slot of the server's shared lock table, sized
max_locks_per_transaction x max_connections: a storm of thousands of alerts in one notification must
not exhaust it)."""

_BOUND_WAITS = sa.text("SELECT set_config('lock_timeout', :timeout, true)")
_LOCK_EACH = sa.text("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k").bindparams(
    sa.bindparam("keys", type_=sa.ARRAY(sa.BigInteger))
)


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock, from a name (the same in every process)."""
    return zlib.crc32(name.encode()) - 2**31


_INGEST_KEY = advisory_key("remediate.ingest")


class PostgresDialect(Dialect):
    @staticmethod
    def create_engine(
        url: str, busy_timeout: float, pool: PoolLimits = DEFAULT_POOL, *, commit_checkpoints: bool = True
    ) -> sa.Engine:
        # `commit_checkpoints` is SQLite's: PostgreSQL's checkpoints are its own server's business.
        return sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_size=pool.size,
            max_overflow=pool.max_overflow,
            pool_timeout=busy_timeout,
            connect_args={"connect_timeout": CONNECT_TIMEOUT},
        )

    def lock_guards(self, conn: sa.Connection, names: Iterable[str]) -> None:
        """pg_advisory_xact_lock on each guard key, in sorted order so that two notifications sharing
        keys never wait for each other in a cycle; released by the commit or rollback.

        Two levels: every ingest holds the ingest lock shared, and its guard keys exclusive; one with
        more than MAX_GUARD_LOCKS keys holds the ingest lock exclusive instead (it waits for, and holds
        off, every other ingest). A hash collision between two keys only makes two unrelated
        notifications wait for each other.
        """
        keys = sorted({advisory_key(f"remediate.guard\x1f{name}") for name in names})
        if not keys:
            return
        # A replica whose transaction hangs (its connection alive, its process stuck) must not hold the
        # webhook past store_busy_timeout: the wait ends as StoreBusy (503, AlertManager retries).
        conn.execute(_BOUND_WAITS, {"timeout": f"{max(1, int(self.busy_timeout * 1000))}ms"})
        if len(keys) > MAX_GUARD_LOCKS:
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_INGEST_KEY)))
            return
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock_shared(_INGEST_KEY)))
        # unnest yields the array in order: the locks are taken in the sorted order.
        conn.execute(_LOCK_EACH, {"keys": keys}).all()

    def busy(self, exc: sa.exc.OperationalError) -> StoreBusy | None:
        """lock_timeout (SQLSTATE 55P03) ran out: a lock stayed taken for the store's busy timeout."""
        if getattr(exc.orig, "sqlstate", None) == "55P03":
            return StoreBusy(f"a lock of the database stayed taken for {self.busy_timeout:g}s")
        return None

    def unreachable(self, exc: sa.exc.DBAPIError) -> StoreUnreachable | None:
        # psycopg raises a connection that could not be made (refused, timed out, DNS) as an
        # OperationalError without a SQLSTATE: no server ever answered.
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if (sqlstate is None and isinstance(exc, sa.exc.OperationalError)) or (
            sqlstate is not None and sqlstate.startswith(UNREACHABLE_STATES)
        ):
            return StoreUnreachable(self.message(exc, "cannot be reached"))
        return super().unreachable(exc)

    def refused(self, exc: sa.exc.DBAPIError) -> StoreRefused | None:
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if sqlstate is not None and sqlstate.startswith(REFUSED_STATES):
            return StoreRefused(self.message(exc, "refused the transaction"))
        return None

    keeps_statistics = True

    def refresh_statistics(self, conn: sa.Connection, tables: Sequence[str]) -> None:
        # Statistics taken while the tables were small (autovacuum lags a burst of inserts) make the
        # planner nest loops over what it thinks are empty tables: a prune's correlated checks then ran
        # for minutes on 3,000 runs. ANALYZE samples at most 30,000 rows per table (milliseconds to a
        # second), once per prune; a role that does not own a table gets a warning, not an error.
        quoted = ", ".join(conn.dialect.identifier_preparer.quote(name) for name in tables)
        conn.exec_driver_sql(f"ANALYZE {quoted}")

    def lock_schema(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(advisory_key("remediate.store.schema"))))
