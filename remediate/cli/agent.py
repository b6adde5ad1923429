"""`remediate agent`: the node agent that plans and executes node-local steps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from remediate.cli._common import (
    _settings,
    gpu_options,
    handle_errors,
)
from remediate.cli._group import main


@main.command()
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file.")
@gpu_options
@click.option("--bind", "agent_bind", help="host:port to listen on [127.0.0.1:9096].")
@click.option(
    "--token-file",
    "agent_token_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding the master agent token (or set $REMEDIATE_AGENT_TOKEN); prefer --node-token-file.",
)
@click.option(
    "--node-token-file",
    "agent_node_token_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding this node's own credential (`remediate agent-credential NODE`; or $REMEDIATE_AGENT_NODE_TOKEN).",
)
@click.option("--node-name", help="This node's name: the only target it runs steps for [the host name].")
@click.option(
    "--state-file",
    "agent_state_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="SQLite file of what node actions remember [./remediate-agent.db].",
)
@click.option(
    "--policies-file",
    "cleanup_policies_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="This node's cleanup policies file (disk.cleanup).",
)
@click.option("--power-floor-watts", "gpu_power_floor_watts", type=float, help="Refuse GPU power limits below this.")
@click.option("--threads", "agent_threads", type=click.IntRange(1, 256), help="Steps it runs at once [8].")
@click.option(
    "--insecure-no-auth", is_flag=True, default=None, help="Serve without a token. Only for local experiments."
)
@handle_errors
def agent(**params: Any) -> None:
    """Run the node agent: plans and executes node-local steps (gpu.*, disk.*, training.*) sent by the
    server for this node, within this node's own limits."""
    settings = _settings(
        params,
        **{
            key: params[key]
            for key in (
                "agent_bind",
                "agent_token_file",
                "agent_node_token_file",
                "node_name",
                "agent_state_file",
                "cleanup_policies_file",
                "gpu_power_floor_watts",
                "agent_threads",
                "insecure_no_auth",
            )
        },
    )
    from remediate.serving import run_agent

    run_agent(settings)


@main.command("agent-credential")
@click.argument("node")
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file.")
@click.option(
    "--token-file",
    "agent_token_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding the master agent token the server has (or set $REMEDIATE_AGENT_TOKEN).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the credential to this file (mode 0600) instead of printing it.",
)
@handle_errors
def agent_credential(node: str, output: Path | None, **params: Any) -> None:
    """Print NODE's own agent credential, derived from the master agent token: give it to that node's
    agent only (agent_node_token_file); it signs nothing for any other node."""
    from remediate.agentauth import node_token
    from remediate.errors import ConfigError

    settings = _settings(params, agent_token_file=params["agent_token_file"])
    master = settings.resolved_agent_token()
    if not master:
        raise ConfigError("no master agent token: set REMEDIATE_AGENT_TOKEN or --token-file")
    if output is None:
        click.echo(node_token(master, node))
        return
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(node_token(master, node) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
    click.echo(f"wrote the agent credential of node {node} to {output}")
