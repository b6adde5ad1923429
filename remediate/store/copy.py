"""`remediate db copy`: every table of one remediate database into an empty one (SQLite <-> PostgreSQL).

Who calls it: the `db copy` command (cli/db.py), to move a history from the SQLite file of one
replica to the PostgreSQL database of several (docs/install.md), or back.

The source is only read, never written: a SQLite file is opened read-only (`mode=ro`), PostgreSQL in
a read-only REPEATABLE READ transaction, and every table is read in that one transaction, so the copy
is one consistent snapshot even if something still writes. Its schema must be this remediate's version
exactly: an older one is refused rather than upgraded here (that would write to the source), a newer
one is refused because this code does not know its columns.

The target is written in ONE transaction: the tables are created from `schema.metadata`, every table
is copied in foreign-key order, in batches of primary-key order (memory stays bounded by one batch),
ids kept (into SQLite, a decision's time is raised to the newest one before it: `store.decision_time`),
and on PostgreSQL every serial sequence is set past the largest copied id (else the next
insert would collide with a copied row). A copy that fails, or is interrupted, leaves the target as it
was: running it again is the way to resume. The target must hold no remediate rows (a schema that a
server created and never used counts as empty).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from remediate.errors import ConfigError, DatabaseCopyError, StoreUnavailable
from remediate.store import Store, decision_time
from remediate.store import schema as t
from remediate.store.database import shown_url as shown
from remediate.store.shown_url import hide_in_text
from remediate.store.source_guard import (
    QUERY_TIME_LIMIT_S,
    check_plain_tables,
    guarded_sqlite,
    json_column,
    time_limited,
)

DEFAULT_BATCH_SIZE = 1000
"""Rows read and inserted per statement: memory stays bounded by one batch of the widest table."""

_BACKENDS = ("sqlite", "postgresql")
JSON_COLUMNS = {t.alerts.name: ("labels", "annotations")}
"""The source's columns that remediate writes as JSON objects and reads back (replay, the history): checked."""


@dataclass(frozen=True)
class TableCopy:
    """One copied table: its name and how many rows it holds (would hold, in a dry run)."""

    table: str
    rows: int


@dataclass(frozen=True)
class CopyReport:
    source: str
    """The source URL as shown to the user (password hidden)."""
    target: str
    tables: tuple[TableCopy, ...]
    dry_run: bool

    @property
    def rows(self) -> int:
        return sum(table.rows for table in self.tables)


def copy_database(
    source_url: str,
    target_url: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: Callable[[TableCopy], None] = lambda _table: None,
) -> CopyReport:
    """Copy every remediate table of `source_url` into the empty database `target_url`.

    `progress` is called once per table when it is done. A dry run checks both sides the same way
    and counts the rows it would copy, writing nothing (not even a new SQLite target file).
    DatabaseCopyError when either side is refused or fails; ConfigError for an unusable URL.
    """
    if batch_size < 1:
        raise ConfigError("the batch size must be at least 1")
    target_backend = _backend(target_url)
    if target_backend == "sqlite":
        _sqlite_file(sa.make_url(target_url))  # refuses an in-memory target before the source is read
    source_engine = _open_source(source_url)
    try:
        if _same_database(source_engine.url, sa.make_url(target_url)):
            raise DatabaseCopyError(f"the source and the target are the same database: {shown(target_url)}")
        with _failures("source", source_url), _snapshot(source_engine) as source, time_limited(QUERY_TIME_LIMIT_S):
            _check_source(source)
            if dry_run:
                tables = _dry_run(source, target_url, target_backend, progress)
            else:
                tables = _copy(source, target_url, batch_size, progress)
    finally:
        source_engine.dispose()
    return CopyReport(shown(source_url), shown(target_url), tables, dry_run)


# ---------------------------------------------------------------------------------------- the source


def _backend(url: str) -> str:
    try:
        backend = sa.make_url(url).get_backend_name()
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"cannot use database URL {shown(url)!r}: {hide_in_text(str(exc))}") from exc
    if backend not in _BACKENDS:
        raise ConfigError(f"cannot use database URL {shown(url)!r}: db copy copies between SQLite and PostgreSQL")
    return backend


def _sqlite_file(url: sa.URL) -> Path:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("uri"):
        raise ConfigError(f"cannot use database URL {shown(url)!r}: give the path of a SQLite file")
    return Path(database)


def _open_source(url: str, time_limit: float = QUERY_TIME_LIMIT_S) -> sa.Engine:
    backend = _backend(url)
    parsed = sa.make_url(url)
    if backend == "sqlite":
        path = _sqlite_file(parsed)
        if not path.is_file():
            raise DatabaseCopyError(f"no database at {path}")
        # mode=ro: SQLite itself refuses every write to the file, whatever this code does; a file from
        # elsewhere runs nothing of its schema, and no query runs past the limit (remediate.store.source_guard).
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        connect, on_execute = guarded_sqlite(uri, time_limit)
        engine = sa.create_engine(f"sqlite:///{path}", creator=connect, poolclass=sa.pool.NullPool)
        sa.event.listen(engine, "before_cursor_execute", on_execute)
        return engine
    try:
        engine = sa.create_engine(
            url,
            poolclass=sa.pool.NullPool,
            # The server refuses every write in this session: the source cannot be changed by mistake.
            connect_args={
                "options": f"-c default_transaction_read_only=on -c statement_timeout={int(time_limit * 1000)}"
            },
        )
    except ImportError as exc:
        raise ConfigError(f"cannot use database URL {shown(url)!r}: {exc}") from exc
    return engine.execution_options(isolation_level="REPEATABLE READ")


def _same_database(source: sa.URL, target: sa.URL) -> bool:
    if source.get_backend_name() == "sqlite" and target.get_backend_name() == "sqlite":
        try:
            return Path(source.database or "").resolve() == _sqlite_file(target).resolve()
        except ConfigError:
            return False
    keys = ("host", "port", "database")
    return source.get_backend_name() == target.get_backend_name() and all(
        getattr(source, key) == getattr(target, key) for key in keys
    )


@contextmanager
def _snapshot(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One read transaction over the whole copy: every table as of the same moment."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN")
        yield conn
        conn.rollback()


def _schema_version(conn: sa.Connection) -> int | None:
    if not sa.inspect(conn).has_table(t.meta.name):
        return None
    value = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar_one_or_none()
    return None if value is None else int(value)


def _check_source(conn: sa.Connection) -> None:
    check_plain_tables(conn, [table.name for table in t.metadata.sorted_tables])
    version = _schema_version(conn)
    if version is None:
        raise DatabaseCopyError("the source is not a remediate database (it has no schema version)")
    if version > t.SCHEMA_VERSION:
        raise DatabaseCopyError(
            f"the source has schema version {version}, newer than this remediate ({t.SCHEMA_VERSION}): "
            "copy it with the remediate version that wrote it"
        )
    if version < t.SCHEMA_VERSION:
        # Upgrading here would write to the source, which a copy never does; the server's own upgrade
        # on start is the tested path (the source stays a working database for the older version too).
        raise DatabaseCopyError(
            f"the source has schema version {version}, older than this remediate ({t.SCHEMA_VERSION}): "
            "upgrade it first by starting this remediate on it once (e.g. `remediate history --database-url "
            "<source>`), then copy"
        )


# ---------------------------------------------------------------------------------------- the target


def _copy(
    source: sa.Connection, target_url: str, batch_size: int, progress: Callable[[TableCopy], None]
) -> tuple[TableCopy, ...]:
    # One transaction (SQLite: BEGIN IMMEDIATE): all or nothing.
    with (
        _failures("target", target_url),
        closing(Store.open(target_url, upgrade=False)) as store,
        store.write() as target,
    ):
        _clear_unused_schema(target)
        t.metadata.create_all(target, checkfirst=True)
        done = []
        # Into SQLite the history's time filters are id ranges: decisions from PostgreSQL (where a
        # later id can carry an earlier time) are stamped as an ingest stamps them.
        stamp_times = store.database.dialect.decision_time_follows_id
        for table in t.metadata.sorted_tables:
            stamp = stamp_times and table is t.decisions
            done.append(TableCopy(table.name, _copy_table(table, source, target, batch_size, stamp=stamp)))
            progress(done[-1])
        if target.dialect.name == "postgresql":
            _reset_sequences(target)
        return tuple(done)


def _dry_run(
    source: sa.Connection, target_url: str, backend: str, progress: Callable[[TableCopy], None]
) -> tuple[TableCopy, ...]:
    if backend != "sqlite" or _sqlite_file(sa.make_url(target_url)).exists():
        with (
            _failures("target", target_url),
            closing(Store.open(target_url, upgrade=False)) as store,
            store.read() as target,
        ):
            _filled_tables(target)
    done = []
    for table in t.metadata.sorted_tables:
        done.append(TableCopy(table.name, _count(source, table)))
        progress(done[-1])
    return tuple(done)


def _count(conn: sa.Connection, table: sa.Table, *where: Any) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one())


def _filled_tables(conn: sa.Connection) -> list[sa.Table]:
    """The remediate tables present in the target; DatabaseCopyError if any holds a row.

    The schema_version meta row alone does not count: a server started on the new database before
    the copy creates the schema and that row, and nothing else.
    """
    inspector = sa.inspect(conn)
    present = [table for table in t.metadata.sorted_tables if inspector.has_table(table.name)]
    filled = []
    for table in present:
        where = [t.meta.c.key != "schema_version"] if table is t.meta else []
        rows = _count(conn, table, *where)
        if rows:
            filled.append(f"{table.name}: {rows}")
    if filled:
        raise DatabaseCopyError(
            f"the target already holds remediate rows ({', '.join(filled)}): db copy only fills an empty "
            "database; give a new one"
        )
    if t.meta in present:
        version = _schema_version(conn)
        if version is not None and version != t.SCHEMA_VERSION:
            raise DatabaseCopyError(
                f"the target has the (empty) schema of version {version}, not {t.SCHEMA_VERSION}: give a new database"
            )
    return present


def _clear_unused_schema(conn: sa.Connection) -> None:
    """Refuse a target with rows; drop the schema_version row of an unused schema (the copy brings its own)."""
    if t.meta in _filled_tables(conn):
        conn.execute(sa.delete(t.meta))


def _copy_table(
    table: sa.Table, source: sa.Connection, target: sa.Connection, batch_size: int, *, stamp: bool = False
) -> int:
    """Copy `table` in batches of primary-key order (keyset pagination: each read starts after the last key;
    a composite key, e.g. the ladders' (playbook, guard key), compares as a row value).

    `stamp` (decisions into SQLite): each row's created_at raised to the newest one before it in id
    order (decision_time.stamp), by at most the longest ingest transaction of the source's replicas."""
    keys = list(table.primary_key.columns)
    copied = 0
    last: tuple[Any, ...] | None = None
    while True:
        query = sa.select(table).order_by(*keys).limit(batch_size)
        if last is not None:
            query = query.where(keys[0] > last[0] if len(keys) == 1 else sa.tuple_(*keys) > sa.tuple_(*last))
        rows = [dict(row) for row in source.execute(query).mappings()]
        if not rows:
            return copied
        for column in JSON_COLUMNS.get(table.name, ()):  # a broken row would fail every reader of the target
            for row in rows:
                json_column(row[column], table.name, column, row[keys[0].name])
        target.execute(sa.insert(table), decision_time.stamp(target, rows) if stamp else rows)
        copied += len(rows)
        last = tuple(rows[-1][key.name] for key in keys)


def _reset_sequences(conn: sa.Connection) -> None:
    """Set each serial sequence past the largest copied id: the copied rows kept their ids, the
    sequences did not move, and the next insert would otherwise take id 1 again."""
    for table in t.metadata.sorted_tables:
        column = table.autoincrement_column
        if column is None:
            continue
        largest = sa.select(sa.func.max(column)).scalar_subquery()
        conn.execute(
            sa.select(
                sa.func.setval(
                    sa.func.pg_get_serial_sequence(table.name, column.name),
                    sa.func.coalesce(largest, 0) + 1,
                    False,
                )
            )
        )


@contextmanager
def _failures(side: str, url: str) -> Iterator[None]:
    """A database error on one side, as one line naming that side (psycopg's messages span lines).

    Whatever the target's transaction wrote is rolled back by then: the message says so, since the
    progress lines before it name tables as copied."""
    try:
        yield
    except (sa.exc.DBAPIError, StoreUnavailable) as exc:
        # The store names an unreachable server itself (StoreUnreachable); here the side is named instead.
        driver_error = exc.orig if isinstance(exc, sa.exc.DBAPIError) else getattr(exc.__cause__, "orig", exc)
        message = " ".join(str(driver_error).split())
        raise DatabaseCopyError(
            f"the {side} database {shown(url)} failed: {message} (the target is as it was)"
        ) from exc
