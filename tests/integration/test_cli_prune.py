"""`remediate history prune`: through click's CliRunner on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from remediate.store import Store
from remediate.store import schema as t
from tests.support.cli import assert_one_line_error
from tests.support.cli import run_cli as cli
from tests.support.retention import fill

DAY = 86400.0


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'remediate.db'}"


@pytest.fixture
def old_history(database_url: str) -> Iterator[Store]:
    """40 runs finished 100 days ago, 3 finished yesterday, with all their rows."""
    store = Store.open(database_url)
    fill(store, 40, time.time() - 100 * DAY)
    fill(store, 3, time.time() - DAY, first=40)
    yield store
    store.close()


def runs(store: Store) -> int:
    with store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar_one())


def args(store: Store, tmp_path: Path) -> list[str]:
    # An empty playbook directory: no cooldown to respect.
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    url = store.database.engine.url.render_as_string(hide_password=False)
    return ["--database-url", url, "--playbooks", str(tmp_path / "playbooks")]


def test_prune_dry_run_counts_and_deletes_nothing_then_prune_deletes_the_same(
    old_history: Store, tmp_path: Path
) -> None:
    dry = cli("history", "prune", "--older-than", "90d", "--dry-run", *args(old_history, tmp_path))

    assert dry.exit_code == 0, dry.output
    assert runs(old_history) == 43
    header, *rows = dry.stdout.splitlines()
    assert header == "would delete history older than 90d:"
    counted = {row.split()[0]: int(row.split()[1]) for row in rows[1:]}
    assert counted == {
        "notifications": 40,
        "alerts": 40,
        "decisions": 40,
        "runs": 40,
        "steps": 40,
        "attempts": 40,
        "breaker_claims": 0,
    }

    real = cli("history", "prune", "--older-than", "90d", "--batch-size", "7", "--json", *args(old_history, tmp_path))

    assert real.exit_code == 0, real.output
    assert json.loads(real.stdout) == {"dry_run": False, "older_than_seconds": 90 * DAY, **counted}
    assert runs(old_history) == 3
    again = cli("history", "prune", "--older-than", "90d", "--json", *args(old_history, tmp_path))
    assert json.loads(again.stdout)["runs"] == 0


def test_the_database_options_may_also_come_before_prune(old_history: Store, tmp_path: Path) -> None:
    result = cli("history", *args(old_history, tmp_path), "prune", "--older-than", "90d")

    assert result.exit_code == 0, result.output
    assert runs(old_history) == 3


COOLDOWN_30D = """\
name: slow
match: {alertname: GpuXidError}
target: node
cooldown: 30d
steps:
  - action: log
    with: {message: hi}
"""


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--older-than", "90d", "--server", "http://127.0.0.1:9"], ["works on the database", "--database-url"]),
        (["--older-than", "12h"], ["--older-than must be at least 1d"]),
        (["--older-than", "soon"], ["--older-than: not a duration"]),
        (["--older-than", "7d", "--playbooks", "{slow}"], ["shorter than the cooldown of playbook 'slow' (30d)"]),
    ],
)
def test_prune_refusals_are_one_line_errors_and_delete_nothing(
    tmp_path: Path, extra: list[str], words: list[str]
) -> None:
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "slow.yaml").write_text(COOLDOWN_30D)
    url = f"sqlite:///{tmp_path / 'remediate.db'}"
    store = Store.open(url)
    fill(store, 5, time.time() - 100 * DAY)
    empty = tmp_path / "empty"
    empty.mkdir()

    given = [a.format(slow=slow) for a in extra]
    playbooks = [] if "--playbooks" in given else ["--playbooks", str(empty)]
    result = cli("history", "prune", "--database-url", url, *playbooks, *given)

    assert_one_line_error(result, *words)
    assert runs(store) == 5
    store.close()


def test_prune_refuses_a_server_given_to_history(tmp_path: Path) -> None:
    result = cli("history", "--server", "http://127.0.0.1:9", "prune", "--older-than", "90d")

    assert_one_line_error(result, "works on the database")


def test_prune_of_a_database_that_does_not_exist_says_so(tmp_path: Path) -> None:
    result = cli("history", "prune", "--older-than", "90d", "--database-url", f"sqlite:///{tmp_path / 'none.db'}")

    assert_one_line_error(result, "no database at")


def test_prune_ignores_a_server_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'remediate.db'}"
    store = Store.open(url)
    fill(store, 5, time.time() - 100 * DAY)
    (tmp_path / "playbooks").mkdir()

    result = cli(
        "history",
        "prune",
        "--older-than",
        "90d",
        "--database-url",
        url,
        "--playbooks",
        str(tmp_path / "playbooks"),
        env={"REMEDIATE_SERVER": "http://127.0.0.1:9"},
    )

    assert result.exit_code == 0, result.output
    assert runs(store) == 0
    store.close()
