"""The node agent's and the dispatch's settings: the agents map in YAML and env form, floors, tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.config import Settings, load_settings
from remediate.errors import ConfigError


def test_the_agents_map_comes_from_the_config_file_as_a_mapping(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("agents:\n  node-b: http://10.0.0.7:9096/\n  node-a: http://10.0.0.5:9096\n")

    settings = load_settings(config_file=config, env={})

    assert settings.agent_map() == {"node-a": "http://10.0.0.5:9096", "node-b": "http://10.0.0.7:9096"}
    assert settings.agents == (("node-a", "http://10.0.0.5:9096"), ("node-b", "http://10.0.0.7:9096"))


def test_the_agents_map_and_aliases_come_from_the_environment_as_comma_separated_pairs() -> None:
    settings = load_settings(
        env={
            "REMEDIATE_AGENTS": "node-a=http://10.0.0.5:9096, node-b=https://agent-b.example:443",
            "REMEDIATE_NODE_ALIASES": "node-b.example, 10.0.0.7",
            "REMEDIATE_NODE_NAME": "node-b",
        }
    )

    assert settings.agent_map() == {"node-a": "http://10.0.0.5:9096", "node-b": "https://agent-b.example:443"}
    assert settings.node_aliases == ("node-b.example", "10.0.0.7")
    assert settings.node_name == "node-b"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REMEDIATE_AGENTS": "node-a"}, "expected node=URL"),
        ({"REMEDIATE_AGENTS": "node-a=10.0.0.5:9096"}, "must be http(s)://host:port"),
        ({"REMEDIATE_AGENTS": "=http://x:1"}, "a node name is empty"),
        ({"REMEDIATE_GPU_POWER_FLOOR_WATTS": "-5"}, "must be a positive number"),
        ({"REMEDIATE_GPU_POWER_FLOOR_PERCENT": "150"}, "at most 100"),
        ({"REMEDIATE_AGENT_PORT": "-1"}, "must not be negative"),
        ({"REMEDIATE_AGENT_CONNECT_TIMEOUT": "soon"}, "agent_connect_timeout"),
    ],
)
def test_bad_agent_settings_are_one_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(env=env)


def test_defaults_keep_everything_on_this_host() -> None:
    settings = Settings()
    assert settings.agents == ()
    assert settings.agent_selector is None
    assert settings.node_name is None
    assert settings.agent_bind == "127.0.0.1:9096"
    assert settings.gpu_power_floor_watts is None


def test_the_agent_token_may_come_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "agent-token"
    token.write_text("s3cret\n")
    assert load_settings(env={"REMEDIATE_AGENT_TOKEN_FILE": str(token)}).resolved_agent_token() == "s3cret"
    assert "s3cret" not in repr(load_settings(env={"REMEDIATE_AGENT_TOKEN": "s3cret"}))


def test_remediate_agent_without_a_token_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from remediate.cli import main

    result = CliRunner().invoke(
        main,
        ["agent", "--node-name", "node-b", "--state-file", str(tmp_path / "a.db")],
        env={"REMEDIATE_AGENT_TOKEN": ""},
    )

    assert result.exit_code == 2
    assert "no agent token configured" in result.output
    assert "Traceback" not in result.output


def test_remediate_actions_lists_where_each_action_runs() -> None:
    from click.testing import CliRunner

    from remediate.cli import main

    result = CliRunner().invoke(main, ["actions"])

    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split()[1] for line in result.output.splitlines()[1:]}
    assert lines["gpu.set_power_limit"] == "node"
    assert lines["log"] == "cluster"


def test_agent_credential_writes_only_this_nodes_credential_as_the_chart_init_container_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from remediate.agentauth import node_token
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
    assert agent.resolved_agent_node_token() == node_token("the-master-secret", "gpu-7")
    assert "the-master-secret" not in repr(agent)
