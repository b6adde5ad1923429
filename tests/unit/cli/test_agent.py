"""`remediate agent` and `agent-credential`: a missing token is one clear line; a node gets only its own credential."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from remediate.config.settings import load_settings


@pytest.mark.parametrize(
    ("token", "bind", "message"),
    [
        ("", "127.0.0.1:9096", "no agent token configured"),
        ("t" * 32, "127.0.0.1:{used}", "cannot listen at agent_bind '127.0.0.1:{used}': [Errno 98]"),
        ("t" * 32, "127.0.0.1", "cannot listen at agent_bind '127.0.0.1'"),
    ],
)
def test_remediate_agent_that_cannot_start_says_why_in_one_line_and_exit_code_2(
    tmp_path: Path, token: str, bind: str, message: str
) -> None:
    from click.testing import CliRunner

    from remediate.cli import main

    with socket.create_server(("127.0.0.1", 0)) as taken:
        used = taken.getsockname()[1]
        args = [
            "agent",
            "--node-name",
            "node-b",
            "--state-file",
            str(tmp_path / "a.db"),
            "--bind",
            bind.format(used=used),
        ]
        result = CliRunner().invoke(main, args, env={"REMEDIATE_AGENT_TOKEN": token})

    assert result.exit_code == 2, result.output
    assert message.format(used=used) in result.output
    assert "Traceback" not in result.output


def test_agent_credential_writes_only_this_nodes_credential_as_the_chart_init_container_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from remediate.agentwire.auth import node_token
    from remediate.cli import main

    for name in ("REMEDIATE_AGENT_TOKEN", "REMEDIATE_AGENT_TOKEN_FILE", "REMEDIATE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    master = tmp_path / "agent-token"
    master.write_text("the-master-secret\n")
    output = tmp_path / "node-credential"

    done = CliRunner().invoke(main, ["agent-credential", "gpu-7", "--token-file", str(master), "--output", str(output)])

    assert done.exit_code == 0, done.output
    assert output.read_text().strip() == node_token("the-master-secret", "gpu-7")
    assert output.read_text().strip() != node_token("the-master-secret", "gpu-8")
    assert "the-master-secret" not in output.read_text()
    assert output.stat().st_mode & 0o777 == 0o600
    agent = load_settings(env={"REMEDIATE_AGENT_NODE_TOKEN_FILE": str(output)})
    assert agent.agent.resolved_node_token() == node_token("the-master-secret", "gpu-7")
    assert "the-master-secret" not in repr(agent)
