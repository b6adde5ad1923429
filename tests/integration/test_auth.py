"""Split tokens (webhook, operator, read, named tokens) and the recorded principal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.config.settings import Settings
from remediate.errors import ConfigError
from tests.support.http import APPROVE_XID, OPERATOR_TOKEN, READ_TOKEN, TOKEN, Server, real_firing

WEBHOOK_TOKEN = "alertmanager-only-token-1234"
ALICE_TOKEN = "alice-operator-token-abcdef"
AUDITOR_TOKEN = "auditor-read-token-abcdef12"


def test_the_webhook_token_may_post_the_webhook_and_nothing_else(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"approve.yaml": APPROVE_XID}, webhook_token=WEBHOOK_TOKEN)

    accepted = server.webhook(real_firing(), token=WEBHOOK_TOKEN)
    run_id = accepted.get_json()["runs"][0]

    assert accepted.status_code == 200
    assert server.post(f"/runs/{run_id}/approve", token=WEBHOOK_TOKEN).status_code == 403
    assert server.post("/pause", token=WEBHOOK_TOKEN).status_code == 403
    assert server.post("/breaker/reset", token=WEBHOOK_TOKEN).status_code == 403
    assert server.get(f"/runs/{run_id}", token=WEBHOOK_TOKEN).status_code == 403
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"


@pytest.mark.parametrize("token", [OPERATOR_TOKEN, READ_TOKEN])
def test_the_operator_and_read_tokens_cannot_post_the_webhook(server: Server, token: str) -> None:
    before = server.counts()

    response = server.webhook(real_firing(), token=token)

    # A known token without the webhook role: 403 (401 is for a missing or unknown token).
    assert (response.status_code, response.get_json()["error"]) == (403, "forbidden")
    assert server.counts() == before


def test_a_named_token_from_the_tokens_file_is_the_recorded_approver_not_the_body(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"alice: {ALICE_TOKEN}\nauditor: {{token: {AUDITOR_TOKEN}, roles: [read]}}\n", encoding="utf-8")
    server = make_server(playbooks={"approve.yaml": APPROVE_XID}, tokens_file=tokens)
    run_id = server.webhook(real_firing()).get_json()["runs"][0]

    assert server.post(f"/runs/{run_id}/approve", json={"by": "bob"}, token=AUDITOR_TOKEN).status_code == 403
    approved = server.post(f"/runs/{run_id}/approve", json={"by": "bob"}, token=ALICE_TOKEN)

    assert approved.status_code == 200
    # "bob" is what the body claims; "alice" is who holds the token.
    assert approved.get_json()["approved_by"] == "alice (note: bob)"
    assert server.get(f"/runs/{run_id}", token=AUDITOR_TOKEN).get_json()["approved_by"] == "alice (note: bob)"


def test_the_old_single_token_is_webhook_only_unless_token_roles_says_more(
    make_server: Callable[..., Server],
) -> None:
    default = make_server(playbooks={"approve.yaml": APPROVE_XID}, operator_token=None)
    compatible = make_server(
        playbooks={"approve.yaml": APPROVE_XID}, operator_token=None, token_roles=("webhook", "operator")
    )
    for server in (default, compatible):
        assert server.webhook(real_firing(), token=TOKEN).status_code == 200

    assert default.post("/runs/1/approve", token=TOKEN).status_code == 403
    approved = compatible.post("/runs/1/approve", token=TOKEN)
    assert approved.status_code == 200
    assert approved.get_json()["approved_by"] == "token"


def test_a_server_with_only_a_read_token_refuses_to_start(tmp_path: Path) -> None:
    from remediate.config.settings import check_server_credentials

    with pytest.raises(ConfigError, match="no token configured"):
        check_server_credentials(Settings.of(read_token=READ_TOKEN).auth)


def test_two_roles_sharing_one_token_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="are the same"):
        Settings.of(webhook_token=WEBHOOK_TOKEN, operator_token=WEBHOOK_TOKEN).auth.credentials()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alice: short\n", "at least 16"),
        (f"alice: {{token: {ALICE_TOKEN}, roles: [admin]}}\n", "roles"),
        ("- a list\n", "mapping"),
    ],
)
def test_a_bad_tokens_file_is_a_config_error_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(text, encoding="utf-8")

    with pytest.raises(ConfigError, match=message):
        Settings.of(tokens_file=tokens).auth.credentials()


@pytest.mark.parametrize("name", ["token", "webhook", "operator", "read", "Operator"])
def test_a_tokens_file_entry_may_not_take_a_fixed_principals_name(tmp_path: Path, name: str) -> None:
    """`operator: {token, roles: [read]}` beside operator_token made two principals of one
    name; the pages looked roles up by name and showed the read-only one operator buttons."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"{name}: {{token: {AUDITOR_TOKEN}, roles: [read]}}\n", encoding="utf-8")

    with pytest.raises(ConfigError, match=rf"tokens_file .*'{name}'.* reserved"):
        Settings.of(operator_token=OPERATOR_TOKEN, tokens_file=tokens).auth.credentials()
    with pytest.raises(ConfigError, match="reserved"):  # configured or not: the name means that setting
        Settings.of(tokens_file=tokens).auth.credentials()


def test_a_name_given_twice_in_the_tokens_file_is_a_config_error(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"alice: {ALICE_TOKEN}\nalice: {{token: {AUDITOR_TOKEN}, roles: [read]}}\n", encoding="utf-8")

    with pytest.raises(ConfigError, match="'alice' is given twice"):
        Settings.of(tokens_file=tokens).auth.credentials()


def test_a_long_note_is_cut_to_the_column_but_the_principal_stays(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"approve.yaml": APPROVE_XID})
    run_id = server.webhook(real_firing()).get_json()["runs"][0]

    approved = server.post(f"/runs/{run_id}/approve", json={"by": "x" * 400}).get_json()["approved_by"]

    assert approved.startswith("operator (note: xxx") and len(approved) == 255
