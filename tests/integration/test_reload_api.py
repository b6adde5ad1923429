"""POST /-/reload where one process serves alone (create_app without `remediate serve`): the operator role;
an invalid file answers 422 naming it and keeps the running set; a valid set applies to the next alert.
(The real server, its master and workers: tests/e2e/test_reload.py.)"""

from __future__ import annotations

from collections.abc import Callable

from tests.support.http import LOG_XID, READ_TOKEN, TOKEN, Server, real_firing


def test_reload_needs_the_operator_role_and_keeps_the_set_when_a_file_is_invalid(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={})
    directory = server.services.settings.engine.playbooks

    assert server.post("/-/reload", token=None).status_code == 401
    assert server.post("/-/reload", token=READ_TOKEN).status_code == 403

    (directory / "log-xid.yaml").write_text(LOG_XID, encoding="utf-8")
    (directory / "bad.yaml").write_text("name: bad\nmatch: {alertname: X}\nsteps: []\nmode: sometimes\n")
    refused = server.post("/-/reload")

    assert refused.status_code == 422, refused.get_json()
    assert refused.get_json()["file"] == str(directory / "bad.yaml")
    assert server.webhook(real_firing()).get_json()["runs"] == []  # still no playbook

    (directory / "bad.yaml").unlink()
    applied = server.post("/-/reload")

    assert applied.get_json() == {"reloaded": True, "count": 1, "playbooks": ["log-xid"], "sinks": []}
    assert len(server.webhook(real_firing(), token=TOKEN).get_json()["runs"]) == 1


def test_a_reload_the_server_did_not_apply_answers_503_and_changes_nothing(make_server: Callable[..., Server]) -> None:
    """In `remediate serve` the master applies it (reads the files again); when it did not in time: 503."""
    server = make_server()
    server.services.reload = lambda _live: False
    directory = server.services.settings.engine.playbooks
    (directory / "more.yaml").write_text(LOG_XID.replace("name: log-xid", "name: more"), encoding="utf-8")

    answer = server.post("/-/reload")

    assert (answer.status_code, answer.get_json()["error"]) == (503, "reload_not_applied")
    assert len(server.services.engine.playbooks) == 1
