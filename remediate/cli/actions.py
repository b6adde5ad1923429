"""`remediate actions`: the reference of the actions playbook steps can call."""

from __future__ import annotations

from pathlib import Path

import click

from remediate.cli._common import (
    FILE,
    _settings,
    _table,
    handle_errors,
    print_json,
)
from remediate.cli._group import main


@main.command("actions")
@click.option("--config", type=FILE, help="YAML config file.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the reference of docs/playbooks.md.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def actions(config: Path | None, as_markdown: bool, as_json: bool) -> None:
    """List the actions playbook steps can call: where they run and their params."""
    from remediate.actions import default_registry
    from remediate.actions.reference import markdown, reference

    registry = default_registry(_settings({"config": config}))
    if as_markdown:
        click.echo(markdown(registry), nl=False)
        return
    entries = reference(registry)
    if print_json(entries, as_json):
        return
    _table(
        [[e["name"], e["where"], ", ".join(p["name"] for p in e["params"]) or "-"] for e in entries],
        ["ACTION", "WHERE", "PARAMS"],
    )
