"""`remediate report`: the reliability figures of a window, per node and per job (the database, or --server)."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Any

import click

from remediate.cli._common import _client, _open_store, _settings, _table, client_options, handle_errors, print_json
from remediate.cli._group import main
from remediate.config.durations import format_duration
from remediate.errors import ConfigError


@main.command()
@client_options
@click.option("--since", default="7d", show_default=True, help="A duration back from --until (7d, 24h) or a time.")
@click.option("--until", help="A duration back from now (1h), an RFC 3339 time or UNIX seconds (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the shape of GET /report, docs/report.md).")
@handle_errors
def report(since: str, until: str | None, as_json: bool, **params: Any) -> None:
    """Show incidents, remediations by rung, mean time to remediate, mean time between incidents and the
    nodes held, per node and per training job: what a platform team shows its users each week."""
    filters = {"since": since, **({"until": until} if until else {})}
    if params.get("server"):
        figures = _client(params).report(filters)
    else:
        from remediate.actions import default_registry
        from remediate.playbooks.loading import load_directory
        from remediate.server.queries import report_query

        settings = _settings(params)
        # The repeat offenders are counted by the playbooks' rules: those that load (as `ladder status`).
        playbooks, _ = load_directory(settings.engine.playbooks, default_registry(settings))
        try:
            query = report_query(filters, settings.report.job_labels, now=time.time(), playbooks=playbooks)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        with closing(_open_store(params)) as store:
            figures = store.history.report(query).as_json()
    if print_json(figures, as_json):
        return
    print_report(figures)


def print_report(figures: dict[str, Any]) -> None:
    totals = figures["totals"]
    click.echo(f"reliability from {figures['since']} to {figures['until']}")
    click.echo(
        f"incidents {totals['incidents']}, remediations {totals['remediations']} "
        f"({totals['succeeded']} succeeded, {totals['failed']} failed), "
        f"mean time to remediate {_duration(totals['mttr_seconds'])}, nodes held now {totals['nodes_held']}"
    )
    click.echo("\nby rung:")
    _table(
        [[r["rung"] or "-", r["remediations"], r["succeeded"], r["failed"]] for r in figures["by_rung"]],
        ["RUNG", "REMEDIATIONS", "SUCCEEDED", "FAILED"],
    )
    click.echo("\nby node:")
    _table(
        [
            [
                n["node"],
                n["incidents"],
                n["remediations"],
                n["failed"],
                _duration(n["mttr_seconds"]),
                _duration(n["mtbi_seconds"]),
                f"since {n['held_since']}" if n["held"] else "-",
            ]
            for n in figures["nodes"]
        ],
        ["NODE", "INCIDENTS", "REMEDIATIONS", "FAILED", "MTTR", "MTBI", "HELD"],
    )
    click.echo("\nby job:")
    _table(
        [
            [j["job"], j["incidents"], j["remediations"], j["failed"], _duration(j["mttr_seconds"])]
            for j in figures["jobs"]
        ],
        ["JOB", "INCIDENTS", "REMEDIATIONS", "FAILED", "MTTR"],
    )
    click.echo("\nrepeat offenders:")
    _table(
        [
            [
                o["target"],
                o["playbook"],
                f"{o['runs']} in {format_duration(o['window_seconds'])}",
                o["last_run_at"],
                o["then"],
            ]
            for o in figures.get("repeat_offenders", [])
        ],
        ["TARGET", "PLAYBOOK", "RUNS", "LAST RUN", "STRAIGHT TO"],
    )


def _duration(seconds: float | None) -> str:
    """1h02m, 4m10s, 35s: a person reads these in a weekly report, not seconds."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
