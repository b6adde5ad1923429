"""`remediate gpu status`: this node's GPUs; `remediate gpu simulate init`: an example simulated GPU file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from remediate.cli._common import (
    FILE,
    CliError,
    _settings,
    _table,
    gpu_options,
    handle_errors,
    print_json,
)
from remediate.cli._group import main


@main.group()
def gpu() -> None:
    """Look at this node's GPUs."""


@gpu.command("status")
@click.option("--config", type=FILE, help="YAML config file.")
@gpu_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per GPU).")
@handle_errors
def gpu_status(as_json: bool, **params: Any) -> None:
    """Show every GPU of this node: power usage, limit, default, constraints, temperature, processes."""
    from remediate.gpu import open_backend

    settings = _settings(params)
    gpus = open_backend(settings.gpu.backend, simulator_file=settings.gpu.simulator_file).devices()
    if print_json([g.to_dict() for g in gpus], as_json):
        return
    _table(
        [
            [
                g.index,
                g.uuid,
                g.name,
                _watts(g.power_usage_mw),
                _watts(g.power_limit_mw),
                _watts(g.default_limit_mw),
                f"{_watts(g.min_limit_mw)}-{_watts(g.max_limit_mw)}",
                "-" if g.temperature_c is None else f"{g.temperature_c} C",
                ",".join(str(p.pid) for p in g.processes) or "-",
            ]
            for g in gpus
        ],
        ["INDEX", "UUID", "NAME", "POWER W", "LIMIT W", "DEFAULT W", "MIN-MAX W", "TEMP", "PROCESSES"],
    )


def _watts(milliwatts: int | None) -> str:
    return "-" if milliwatts is None else f"{milliwatts / 1000:g}"


@gpu.group()
def simulate() -> None:
    """The simulated GPU backend (--gpu-backend simulated): its device file."""


@simulate.command("init")
@click.argument("file", type=FILE)
@click.option("--preset", default="h100x8", show_default=True, help="The node to write: h100x8 or a100x4.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@handle_errors
def simulate_init(file: Path, preset: str, force: bool) -> None:
    """Write FILE: a documented example device file of the simulated GPU backend (YAML; JSON if FILE ends in .json).

    Load it with --gpu-backend simulated --gpu-simulator-file FILE (serve, agent, dry-run, gpu status).
    """
    from remediate.gpu import simfile

    if preset not in simfile.PRESETS:
        raise CliError(f"unknown --preset {preset!r}: expected one of {', '.join(simfile.PRESETS)}")
    if file.exists() and not force:
        raise CliError(f"{file} exists: pass --force to overwrite it")
    node = simfile.PRESETS[preset]
    try:
        if file.suffix.lower() == ".json":  # JSON has no comments: docs/gpu.md explains the fields
            simfile.write_atomically(file, simfile.example(node.count, as_root=True, model=node.model))
        else:
            file.write_text(simfile.example_text(preset), encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {file}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {file}: {node.count} x {node.model.name} (preset {preset})")
    click.echo(f"try: remediate gpu status --gpu-backend simulated --gpu-simulator-file {file}")
