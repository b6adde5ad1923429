"""Statements of the hot paths, compiled once per database and run on the driver's own cursor on SQLite.

A webhook's ingest runs about ten small statements in its one transaction. Through SQLAlchemy's
`Connection.execute` each costs 0.1-0.2 ms of Python (execution context, events, result objects), more
than SQLite needs to run it. `Prepared` compiles its Core statement once per SQLAlchemy dialect and,
on SQLite, hands the SQL text and the parameters straight to the sqlite3 cursor of the connection the
transaction is on (same connection, same transaction). On any other database it goes through
`Connection.execute`, so the pool's disconnect handling stays what it is (bench/ingest.py).

The answer is a list of named tuples (by column name, like SQLAlchemy's rows), with the driver's values
(SQLite gives booleans as 0/1). `many` runs a statement once per row of parameters (a batch's writes,
`store.queue`).
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import sqlalchemy as sa


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    """The bind parameters in the order of the SQL's `?` marks (an expanding one stands for its list)."""
    defaults: Mapping[str, Any]
    """Values bound in the statement itself (constants such as a status in a WHERE clause)."""
    expanding: frozenset[str]
    """Parameters that take a list (`IN (...)`): their `?` marks are written per call."""


class Prepared:
    """One Core statement of a hot path (see the module doc); run it with `rows(conn, params)`."""

    def __init__(self, statement: sa.Executable) -> None:
        self.statement = statement
        self._sqlite: _Compiled | None = None

    def rows(self, conn: sa.Connection, params: Mapping[str, Any] | None = None) -> list[Any]:
        """Run the statement with `params` (bind parameter name -> value; a list for an expanding one)."""
        if conn.dialect.name != "sqlite":
            result = conn.execute(self.statement, dict(params or {}))
            return list(result) if result.returns_rows else []
        compiled = self._sqlite or self._compile(conn.dialect)
        given = {**compiled.defaults, **(params or {})}
        sql = compiled.sql
        values: list[Any] = []
        for name in compiled.names:
            if name in compiled.expanding:
                items = list(given[name])
                sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * len(items)) or "NULL", 1)
                values.extend(items)
            else:
                values.append(given[name])
        return sqlite_rows(conn, sql, values)

    def many(self, conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row of parameters (executemany), e.g. a batch's updates or inserts."""
        if not rows:
            return
        if conn.dialect.name != "sqlite":
            conn.execute(self.statement, [dict(row) for row in rows])
            return
        compiled = self._sqlite or self._compile(conn.dialect)
        defaults, names = compiled.defaults, compiled.names
        values = [tuple(row[n] if n in row else defaults[n] for n in names) for row in rows]
        sqlite_many(conn, compiled.sql, values)

    def first(self, conn: sa.Connection, params: Mapping[str, Any] | None = None) -> Any:
        found = self.rows(conn, params)
        return found[0] if found else None

    def _compile(self, dialect: sa.Dialect) -> _Compiled:
        compiled = self.statement.compile(dialect=dialect)
        assert compiled.positional, "SQLite's driver takes positional (?) parameters"
        binds = compiled.binds
        self._sqlite = _Compiled(
            compiled.string,
            tuple(compiled.positiontup or ()),
            {
                name: bind.value.value if isinstance(bind.value, Enum) else bind.value
                for name, bind in binds.items()
                if bind.value is not None or not bind.required
            },
            frozenset(name for name, bind in binds.items() if bind.expanding),
        )
        return self._sqlite


_ROW_TYPES: dict[tuple[str, ...], type] = {}


def _row_type(names: tuple[str, ...]) -> type:
    """A named tuple of these column names (cached: a hot statement makes the same one every time)."""
    row_type = _ROW_TYPES.get(names)
    if row_type is None:
        row_type = _ROW_TYPES[names] = collections.namedtuple("Row", names, rename=True)  # type: ignore[misc]
    return row_type


_ROW_TYPE_BY_SQL: dict[str, type | None] = {}
"""The row type of a statement's text (None: no rows), so a hot statement skips `cursor.description`."""
_ROW_TYPE_BY_SQL_MAX = 2048  # texts: the hot statements, and their IN (...) lists of each length


def sqlite_rows(conn: sa.Connection, sql: str, values: Sequence[Any]) -> list[Any]:
    """Run `sql` on the SQLite driver's cursor of `conn` (its transaction); rows as named tuples (by column
    name, like SQLAlchemy's rows), [] for a statement without rows. Driver errors as SQLAlchemy's."""
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(sql, values)
        if sql in _ROW_TYPE_BY_SQL:
            row_type = _ROW_TYPE_BY_SQL[sql]
        else:
            description = cursor.description
            row_type = None if description is None else _row_type(tuple(column[0] for column in description))
            if len(_ROW_TYPE_BY_SQL) < _ROW_TYPE_BY_SQL_MAX:
                _ROW_TYPE_BY_SQL[sql] = row_type
        if row_type is None:
            return []
        return [row_type._make(row) for row in cursor.fetchall()]
    except sqlite3.Error as exc:
        # The store's callers handle SQLAlchemy's exceptions ("database is locked" is StoreBusy).
        raise sa.exc.DBAPIError.instance(sql, values, exc, sqlite3.Error) from exc
    finally:
        cursor.close()


def sqlite_many(conn: sa.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """`executemany` of `sql` on the SQLite driver's cursor of `conn` (its transaction)."""
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.executemany(sql, rows)
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc
    finally:
        cursor.close()
