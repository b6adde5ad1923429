"""/readyz tests what /webhook needs: a write, not only a read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from remediate.store import Store
from tests.support.http import Server, alert, notification


def test_a_database_that_can_be_read_but_not_written_is_not_ready(
    tmp_path: Path, make_server: Callable[..., Server]
) -> None:
    db = tmp_path / "ro.db"
    Store.open(f"sqlite:///{db}").close()
    # SQLite's read-only open: every read works, every write fails (as on a read-only file or mount).
    server = make_server(database_url=f"sqlite:///file:{db}?mode=ro&uri=true")
    assert server.get("/history").status_code == 200

    ready = server.get("/readyz", token=None)
    assert ready.status_code == 503, ready.get_json()
    assert "readonly" in ready.get_json()["message"]
    assert server.webhook(notification(alert("f1"))).status_code == 503  # what /readyz foretold
