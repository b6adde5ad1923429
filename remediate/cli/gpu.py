"""`remediate gpu status`: this node's GPUs."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli._common import (
    FILE,
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
