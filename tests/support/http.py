"""Helpers of the HTTP and CLI tests: real payloads, playbook texts, and a real app on a SQLite file
(or, where a test parametrizes `make_server` with "postgresql", a real PostgreSQL database).

`build_server(directory, ...)` builds one Flask app through
`create_app(settings, services=build_services(settings))` with its store and playbooks in
`directory`. No executor thread is started: a test that wants runs executed calls
`server.drain()` (the executor, in the test's thread), so "queued" after a webhook proves that
nothing ran inside the request. The fixtures around it (`make_server`, `server`) end this module.
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from remediate.config.settings import Settings
from remediate.server import Services, build_services, create_app
from tests.support.waiting import scaled

TOKEN = "write-token-0123456789"
"""The `token` setting: a webhook-only token (its default token_roles)."""
OPERATOR_TOKEN = "operator-token-5647382910"
READ_TOKEN = "read-token-9876543210"
PAYLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "payloads"
TABLES = ("notifications", "alerts", "decisions", "runs", "steps")

LOG_XID = """\
name: log-xid
description: Log GPU XID errors.
match:
  alertname: GpuXidError
  labels: ['severity="critical"']
target: node
cooldown: 0s
steps:
  - action: log
    with:
      message: "XID on GPU {{ labels.gpu }} since {{ startsAt }}"
on_resolved:
  - action: log
    with:
      message: "{{ alertname }} resolved"
"""

LOG_DISK = """\
name: log-disk
match:
  alertname: NodeFilesystemAlmostOutOfSpace
target: node
steps:
  - action: log
    with: {message: "disk almost full on {{ labels.instance }}", level: warning}
"""

APPROVE_XID = """\
name: approve-xid
match:
  alertname: GpuXidError
mode: approve
target: node
steps:
  - action: log
    with: {message: "approved fix for GPU {{ labels.gpu }}"}
"""


def notify_playbook(url: str) -> str:
    return f"""\
name: notify-xid
match:
  alertname: GpuXidError
target: node
steps:
  - action: notify.webhook
    with:
      url: {url}
      message: "GPU {{{{ labels.gpu }}}} reported XID errors"
    retries: 0
    timeout: 10s
"""


def load_payload(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / name).read_text(encoding="utf-8"))


def real_firing() -> dict[str, Any]:
    """The firing notification AlertManager 0.25 really sent (fresh copy)."""
    return load_payload("am-0.25-firing.json")


def real_resolved() -> dict[str, Any]:
    return load_payload("am-0.25-resolved.json")


def alert(
    fingerprint: str,
    *,
    alertname: str = "GpuXidError",
    status: str = "firing",
    starts_at: str = "2026-11-21T05:40:14.652668659Z",
    **labels: str,
) -> dict[str, Any]:
    """One alert shaped like the real one, with its own identity and labels."""
    raw = copy.deepcopy(real_firing()["alerts"][0])
    raw["labels"] = {**raw["labels"], "alertname": alertname, **labels}
    raw["fingerprint"] = fingerprint
    raw["status"] = status
    raw["startsAt"] = starts_at
    if status == "resolved":
        raw["endsAt"] = "2026-11-21T06:00:00Z"
    return raw


def notification(*alerts: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    """The real notification envelope around the given alerts."""
    body = real_firing()
    body["alerts"] = list(alerts)
    body["status"] = status or ("firing" if any(a["status"] == "firing" for a in alerts) else "resolved")
    return body


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass
class Server:
    """One app, its services and a test client."""

    app: Flask
    client: FlaskClient
    services: Services
    db_path: Path
    """The SQLite file (absent when the server runs on PostgreSQL)."""
    database_url: str

    @property
    def store(self) -> Any:
        return self.services.store

    def webhook(self, payload: Any, *, token: str | None = TOKEN, **kwargs: Any) -> TestResponse:
        """POST a payload (dict/list: JSON-encoded; str/bytes: sent as is) as AlertManager does."""
        data = payload if isinstance(payload, str | bytes) else json.dumps(payload)
        kwargs.setdefault("content_type", "application/json")
        return self.client.post("/webhook", data=data, headers=bearer(token), **kwargs)

    def get(self, path: str, *, token: str | None = OPERATOR_TOKEN, **kwargs: Any) -> TestResponse:
        return self.client.get(path, headers=bearer(token), **kwargs)

    def post(self, path: str, *, token: str | None = OPERATOR_TOKEN, **kwargs: Any) -> TestResponse:
        return self.client.post(path, headers=bearer(token), **kwargs)

    def counts(self) -> dict[str, int]:
        """Rows per table, read through a separate connection (works when a table is gone)."""
        engine = sa.create_engine(self.database_url, poolclass=sa.NullPool)
        try:
            with engine.connect() as conn:
                present = set(sa.inspect(conn).get_table_names())
                return {
                    table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()  # noqa: S608 - fixed
                    for table in TABLES
                    if table in present
                }
        finally:
            engine.dispose()

    def drain(self) -> int:
        return self.services.executor.drain(timeout=scaled(30))

    def history(self, **params: Any) -> dict[str, Any]:
        response = self.get("/history", query_string=params)
        assert response.status_code == 200, response.get_json()
        return response.get_json()

    def close(self) -> None:
        self.services.executor.stop(timeout=scaled(5))
        self.store.close()


def drop_table(db_path: Path, table: str) -> None:
    """Break the store the way a bad migration or an operator would: from another connection."""
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    finally:
        conn.close()


def build_server(
    directory: Path, *, playbooks: Mapping[str, str] | None = None, database_url: str | None = None, **settings: Any
) -> Server:
    """A server whose playbooks (default: log-xid) and SQLite file (unless `database_url`) live in `directory`."""
    playbook_dir = directory / "playbooks"
    playbook_dir.mkdir(parents=True)
    for name, text in (playbooks if playbooks is not None else {"log-xid.yaml": LOG_XID}).items():
        (playbook_dir / name).write_text(text, encoding="utf-8")
    db_path = directory / "remediate.db"
    database_url = database_url or f"sqlite:///{db_path}"
    values: dict[str, Any] = {
        "token": TOKEN,
        "operator_token": OPERATOR_TOKEN,
        "read_token": READ_TOKEN,
        "playbooks": playbook_dir,
        "database_url": database_url,
        "executor_threads": 0,
        **settings,
    }
    config = Settings.of(**values)
    services = build_services(config)
    app = create_app(config, services=services)
    return Server(app, app.test_client(), services, db_path, database_url)


MakeServer = Callable[..., Server]


ON_EVERY_DATABASE = pytest.mark.parametrize("make_server", ("sqlite", "postgresql"), indirect=True)
"""Run an HTTP test on a SQLite file and on a real PostgreSQL database (each server its own database)."""


@pytest.fixture
def make_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeServer]:
    """make_server(playbooks={"a.yaml": text}, **Settings fields) -> Server; all closed afterwards.

    On a SQLite file unless the test parametrizes this fixture with "postgresql" (`@ON_EVERY_DATABASE`)."""
    built: list[Server] = []
    databases: list[str] = []
    postgres = request.getfixturevalue("postgres") if getattr(request, "param", "sqlite") == "postgresql" else None

    def make(**kwargs: Any) -> Server:
        if postgres is not None and "database_url" not in kwargs:
            databases.append(postgres.store_database())
            kwargs["database_url"] = databases[-1]
        server = build_server(tmp_path / f"server-{len(built)}", **kwargs)
        built.append(server)
        return server

    yield make
    for server in built:
        server.close()
    if postgres is not None:
        for url in databases:
            postgres.recycle(url)


@pytest.fixture
def server(make_server: MakeServer) -> Server:
    """A server with the log-xid playbook, a write token and a read token."""
    return make_server()
