"""A throwaway PostgreSQL cluster for the tests (fixtures `postgres`, one per session, and `pg_url`, an empty
database per test): initdb in a temp dir, a free port, removed afterwards.

Debian's `postgresql` package (scripts/test installs it as root) puts the server in
/usr/lib/postgresql/<major>/bin, off PATH. PostgreSQL refuses to run as root: as root the cluster
runs as the `postgres` user the package creates (its directory is handed to that user).
Durability is switched off (fsync, synchronous_commit, full_page_writes): a test cluster that
loses its data in a power cut loses nothing of value, and each commit costs no disk flush.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from remediate.store import Store
from tests.support.waiting import scaled

INSTALL_HINT = "install Debian's postgresql package (scripts/test does, as root)"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, or the throwaway cluster did not start."""


def server_bindir() -> Path:
    """The newest installed server's bin directory (initdb, pg_ctl, postgres)."""
    found = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/postgres")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise PostgresUnavailable(f"no PostgreSQL server binaries (initdb, postgres): {INSTALL_HINT}")


PORT_ATTEMPTS = 5
"""Ports tried when starting a cluster whose port another process took first."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresCluster:
    """One running cluster; `database()` hands out a fresh, empty database per test."""

    root: Path
    port: int
    bindir: Path
    user: str | None
    """The OS user the server runs as (None: this process's user)."""
    crash_safe: bool = False
    """Commit synchronously, so that a crash (`pause(mode="immediate")`) loses no committed transaction;
    without it, the last fraction of a second of commits is lost in a crash (never in a clean stop)."""
    _names: Iterator[int] = field(default_factory=itertools.count)
    _emptied: list[str] = field(default_factory=list)
    """Store databases emptied after their test, for the next one (`store_database`, `recycle`)."""

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=scaled(120),
            check=False,
        )

    @classmethod
    def start(cls, *, crash_safe: bool = False) -> PostgresCluster:
        bindir = server_bindir()
        root = Path(tempfile.mkdtemp(prefix="remediate-pg-"))
        user = None
        if os.geteuid() == 0:
            user = "postgres"
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                shutil.rmtree(root, ignore_errors=True)
                raise PostgresUnavailable(f"running as root needs the postgres user: {INSTALL_HINT}") from None
            os.chown(root, entry.pw_uid, entry.pw_gid)
        cluster = cls(root, _free_port(), bindir, user, crash_safe)
        try:
            cluster._init_and_start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _init_and_start(self) -> None:
        done = self._run("initdb", "-D", str(self.datadir), "-U", "remediate", "--auth=trust", "-E", "UTF8",
                         "--no-instructions", "--locale=C")  # fmt: skip
        if done.returncode:
            raise PostgresUnavailable(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        # The free port was free when asked for; another process (a test's server in another xdist worker)
        # may bind it before PostgreSQL does: then another port, a few times.
        for attempt in range(PORT_ATTEMPTS):
            (self.root / "server.log").unlink(missing_ok=True)  # this attempt's log only
            try:
                self.resume()
                return
            except PostgresUnavailable as exc:
                if "Address already in use" not in str(exc) or attempt == PORT_ATTEMPTS - 1:
                    raise
                self.port = _free_port()

    def resume(self) -> None:
        """Start the server (again) on its data directory, same port: what a restarted or failed-over
        database looks like to remediate."""
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
            f"-c fsync=off -c synchronous_commit={'on' if self.crash_safe else 'off'} -c full_page_writes=off "
            "-c max_connections=200"
        )
        # -l: the server's output goes to the log, not to our pipe (which would then never reach EOF).
        done = self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "server.log"),
                         "-o", options, "-w", "-t", "60", "start")  # fmt: skip
        if done.returncode:
            server_log = self.root / "server.log"
            log = server_log.read_text(errors="replace")[-2000:] if server_log.exists() else ""
            raise PostgresUnavailable(f"the test PostgreSQL did not start: {done.stderr.strip()} {log}")

    def pause(self, *, mode: str = "fast") -> None:
        """Stop the server, keeping its data (`resume()` starts it again): fast ends every session, as
        an administrator's restart or a fail-over does; immediate is a crash."""
        done = self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")
        if done.returncode:
            raise PostgresUnavailable(f"stop failed: {done.stderr.strip()}")

    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://remediate@127.0.0.1:{self.port}/{database}"

    def database(self, template: str = "template1") -> str:
        """A new database, a copy of `template` (empty by default); its SQLAlchemy URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as conn:
            # FILE_COPY copies the template's files (a checkpoint, cheap without fsync): ~45 ms here against
            # ~115 ms for PostgreSQL 15's default WAL_LOG, which writes every block through the WAL.
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY file_copy')
        return self.url(name)

    def schema_template(self) -> str:
        """The name of a database holding remediate's current schema and nothing else, created on first use:
        `database(template=...)` copies it, ~4 times cheaper than creating the schema in every test's database."""
        name = "remediate_schema"
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}" STRATEGY file_copy')
                Store.open(self.url(name)).close()  # the store creates its own schema: the path under test
        return name

    def store_database(self) -> str:
        """A database holding the current schema and no rows: one a finished test left (emptied by
        `recycle`), else a new copy of `schema_template()`."""
        return self._emptied.pop() if self._emptied else self.database(template=self.schema_template())

    def recycle(self, url: str) -> None:
        """Empty a `store_database()` for the next test, or drop it where that is not certain to work.

        TRUNCATE of every table (ids restarted) and the schema version put back costs ~25 ms against
        ~140 ms for DROP and CREATE under this machine's load: over the ~160 PostgreSQL tests, ~20 s.
        A database whose schema is not the template's (a test added a trigger, dropped a column), or that
        someone still locks, is dropped."""
        template = self.url(self.schema_template(), driver="postgresql")
        try:
            with psycopg.connect(template) as conn:
                wanted = _schema_objects(conn)
                version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
                if _schema_objects(conn) != wanted or version is None:
                    raise psycopg.Error("not the template's schema")
                conn.execute("SET lock_timeout = '2s'")
                names = ", ".join(f'"{name}"' for name in _tables(wanted))
                conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")  # type: ignore[arg-type]
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s)", version)
        except psycopg.Error:
            self.drop(url)
            return
        self._emptied.append(url)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @property
    def running(self) -> bool:
        return (self.datadir / "postmaster.pid").exists()

    @contextlib.contextmanager
    def down(self, *, mode: str = "fast") -> Iterator[None]:
        """The server is stopped inside the block and started again after it, whatever the block raised."""
        self.pause(mode=mode)
        try:
            yield
        finally:
            self.resume()

    def restart(self, *, mode: str = "fast") -> None:
        self.pause(mode=mode)
        self.resume()

    def stop(self) -> None:
        if (self.datadir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL cluster for this module's tests; a failure (not a skip) without one."""
    try:
        cluster = PostgresCluster.start()
    except PostgresUnavailable as exc:
        pytest.fail(f"these tests need a real PostgreSQL: {exc}")
    yield cluster
    cluster.stop()


_SCHEMA_OBJECTS = """
    SELECT 'relation', c.relkind::text || ' ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public'
    UNION ALL SELECT 'column', table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' '
           || coalesce(column_default, '') FROM information_schema.columns WHERE table_schema = 'public'
    UNION ALL SELECT 'trigger', tgname FROM pg_trigger WHERE NOT tgisinternal
    UNION ALL SELECT 'function', p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'public'
"""


def _schema_objects(conn: psycopg.Connection[Any]) -> set[tuple[str, str]]:
    """Tables, indexes, sequences, columns, triggers and functions: what a test could have changed."""
    return {(row[0], row[1]) for row in conn.execute(_SCHEMA_OBJECTS)}  # type: ignore[arg-type]


def _tables(objects: set[tuple[str, str]]) -> list[str]:
    return sorted(name[2:] for kind, name in objects if kind == "relation" and name.startswith("r "))


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresCluster]:
    """A cluster of this module's own, which its tests may stop and start (`down()`, `pause()`/`resume()`)
    without disturbing the session's cluster and the databases other tests hold there."""
    try:
        cluster = PostgresCluster.start(crash_safe=True)  # its tests crash it
    except PostgresUnavailable as exc:
        pytest.fail(f"these tests need a real PostgreSQL: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_store_url(postgres: PostgresCluster) -> Iterator[str]:
    """A PostgreSQL database holding the current schema and no rows (what Store.open would create)."""
    url = postgres.store_database()
    yield url
    postgres.recycle(url)


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> Iterator[str]:
    """A new, empty PostgreSQL database (postgresql+psycopg://...)."""
    url = postgres.database()
    yield url
    postgres.drop(url)
