"""`remediate playbooks list` and `remediate playbooks validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from remediate.cli._common import (
    FILE,
    CliError,
    _settings,
    _table,
    common_options,
    handle_errors,
    print_json,
)
from remediate.cli._group import main


@main.group()
def playbooks() -> None:
    """List and validate playbooks."""


@playbooks.command("list")
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def playbooks_list(as_json: bool, **params: Any) -> None:
    """List the playbooks of the playbook directory."""
    from remediate.actions import default_registry
    from remediate.playbooks.loading import load_playbooks

    settings = _settings(params)
    loaded = load_playbooks(settings.engine.playbooks, default_registry(settings))
    rows = [
        {
            "name": p.name,
            "alertnames": list(p.alertnames),
            "matchers": [str(m) for m in p.matchers],
            "mode": p.mode.value,
            "cooldown_seconds": p.cooldown.total_seconds(),
            "max_attempts": p.max_attempts,
            "steps": [s.action for s in p.steps],
            "on_resolved": [s.action for s in p.on_resolved],
            "escalate": [
                {"name": r.name, "holds_for_seconds": r.holds_for.total_seconds(), "steps": [s.action for s in r.steps]}
                for r in p.rungs
            ],
            "left_out": [{"where": s.where, "name": s.name, "action": s.action} for s in p.left_out],
            "file": p.source,
        }
        for p in loaded.playbooks
    ]
    if print_json(rows, as_json):
        return
    _table(
        [
            [
                r["name"],
                ",".join(r["alertnames"]),
                r["mode"],
                " -> ".join(r["steps"]) or _ladder_cell(r["escalate"]),
                " -> ".join(r["on_resolved"]) or "-",
            ]
            for r in rows
        ],
        ["NAME", "ALERTS", "MODE", "STEPS", "ON RESOLVED"],
    )


@playbooks.command("validate")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--config", type=FILE, help="YAML config file.")
@click.option(
    "--playbooks", "playbooks_option", type=click.Path(path_type=Path), help="Playbook directory (as serve takes it)."
)
@click.option(
    "--schedulers",
    help="Load as a server with this `schedulers` setting does (kubernetes, slurm, kubernetes,slurm or none; "
    "default: the configured one): the steps of another scheduler are listed as left out.",
)
@handle_errors
def playbooks_validate(
    directory: Path | None, config: Path | None, playbooks_option: Path | None, schedulers: str | None
) -> None:
    """Validate every playbook in DIRECTORY or --playbooks (default: the configured playbook directory).

    Every step is checked, whatever scheduler it acts on; those of a scheduler the server does not run are
    then listed as `left out` (they do not load there)."""
    from remediate.actions import default_registry
    from remediate.config.schedulers import describe
    from remediate.playbooks.loading import load_directory

    if directory is not None and playbooks_option is not None and directory != playbooks_option:
        raise CliError(f"two playbook directories: {directory} and --playbooks {playbooks_option}; give one")
    settings = _settings({"config": config}, schedulers=schedulers)
    directory = directory or playbooks_option or settings.engine.playbooks
    loaded, errors = load_directory(directory, default_registry(settings))
    click.echo(f"schedulers: {describe(settings.engine.schedulers)}")
    for playbook in loaded:
        click.echo(f"ok      {playbook.source} ({playbook.name})")
        for step in playbook.left_out:
            click.echo(f"  left out {step.describe()}")
        for warning in playbook.warnings():
            click.echo(f"warning {playbook.source} ({playbook.name}): {warning}", err=True)
    for error in errors:
        click.echo(f"error   {error}", err=True)
    if errors:
        raise SystemExit(1)
    if not loaded:
        click.echo(f"error   no playbooks (*.yaml, *.yml) in {directory}", err=True)
        raise SystemExit(1)
    click.echo(f"{len(loaded)} playbooks valid")


def _ladder_cell(rungs: list[dict[str, Any]]) -> str:
    """A ladder's rungs in the STEPS column: `1. cap-power | 2. lock-clocks`."""
    return " | ".join(f"{number}. {rung['name']}" for number, rung in enumerate(rungs, start=1))
