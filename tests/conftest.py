"""Shared fixtures: a real SQLite store in tmp_path, the shipped action registry, payload builders."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.config.settings import EngineSettings
from remediate.judging.engine import Engine, IngestResult
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.support.stores import store_backend

# The fixtures of each domain live in tests/support/; pytest only honours pytest_plugins in the root conftest.
# A plugin is listed before the plugins that import it (cli imports http), so that pytest rewrites its asserts.
pytest_plugins = [
    "tests.support.browser",
    "tests.support.http",
    "tests.support.cli",
    "tests.support.disk",
    "tests.support.gpu",
    "tests.support.helm",
    "tests.support.image",
    "tests.support.steps",
    "tests.support.kube",
    "tests.support.postgres",
    "tests.support.server",
    "tests.support.slurm",
]

# A property test asserts what a case does, not how fast: hypothesis's per-case deadline (200 ms) failed a passing
# case on a loaded CI host whose first call took 488 ms. Speed is bench/'s business.
settings.register_profile("remediate", deadline=None)
settings.load_profile("remediate")

STARTS_AT = "2026-01-01T00:00:00Z"

# One firing alert as templates and actions see it (Alert.template_context, a step's alert).
XID_CONTEXT = {
    "labels": {"alertname": "GpuXidError", "Hostname": "node-a", "gpu": "3"},
    "annotations": {"summary": "GPU 3 Xid error"},
    "status": "firing",
    "alertname": "GpuXidError",
    "fingerprint": "c5801e9cde93e74f",
    "startsAt": "2026-01-01T00:00:00Z",
    "endsAt": "",
    "generatorURL": "http://prometheus/graph",
}


def alert_payload(
    alertname: str = "GpuXidError",
    *,
    status: str = "firing",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    starts_at: str = STARTS_AT,
    ends_at: str = "0001-01-01T00:00:00Z",
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """One alert as AlertManager v4 sends it; the fingerprint is derived from the labels unless given."""
    all_labels = {"alertname": alertname, **(labels or {})}
    if fingerprint is None:
        text = ",".join(f"{k}={v}" for k, v in sorted(all_labels.items()))
        fingerprint = hashlib.sha256(text.encode()).hexdigest()[:16]
    return {
        "status": status,
        "labels": all_labels,
        "annotations": annotations or {},
        "startsAt": starts_at,
        "endsAt": ends_at if status == "firing" else "2026-01-01T01:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }


def notification_payload(*alerts: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    """A v4 notification holding `alerts` (status: firing when any alert fires)."""
    if status is None:
        status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {
        "version": "4",
        "groupKey": '{}:{alertname="test"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "remediate",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


@pytest.fixture
def registry() -> ActionRegistry:
    return default_registry()


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """The URL of the test's database: a SQLite file in tmp_path, or a fresh PostgreSQL database where the
    `store` fixture is parametrized "postgresql" (so that a test opening a second Store sees the same one)."""
    if store_backend(request) == "postgresql":
        return str(request.getfixturevalue("pg_store_url"))
    return f"sqlite:///{tmp_path / 'remediate.db'}"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty directory under tmp_path for a test to work in (a cleanup policy's root, a training control root)."""
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A fresh store on a real SQLite file, or on a real PostgreSQL database where a test is parametrized
    over both (tests.support.stores: `@EVERY_DATABASE`)."""
    opened = Store.open(db_url)
    yield opened
    opened.close()


@pytest.fixture
def make_engine(store: Store, registry: ActionRegistry) -> Callable[..., Engine]:
    """Engine(*playbook mappings, **EngineSettings fields (mode, step_timeout), **Engine kwargs) on the `store`
    fixture."""
    sections = {f.name for f in dataclasses.fields(EngineSettings)}

    def build(*playbooks: Mapping[str, Any], **kwargs: Any) -> Engine:
        parsed = PlaybookSet(parse_playbook(dict(p), registry, source=f"{p['name']}.yaml") for p in playbooks)
        settings = EngineSettings(**{k: kwargs.pop(k) for k in sections & set(kwargs)})
        return Engine(store=store, playbooks=parsed, registry=registry, settings=settings, **kwargs)

    return build


def ingest_alerts(engine: Engine, *alerts: dict[str, Any], at: float) -> IngestResult:
    """One notification of `alerts` through Engine.ingest_body, received at `at`."""
    return engine.ingest_body(json.dumps(notification_payload(*alerts)).encode(), received_at=at)
