"""The audit and control commands, against the database or a server (--server):
`remediate history`, `show`, `approve`, `pause` and `resume`."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import click

from remediate.cli._common import (
    _client,
    _open_store,
    _short,
    _table,
    _when,
    client_options,
    common_options,
    handle_errors,
)
from remediate.cli._group import main
from remediate.errors import ConfigError
from remediate.runs import RunStatus


@main.command()
@common_options
@client_options
@click.option("--playbook", help="Only this playbook.")
@click.option("--alertname", help="Only this alert name.")
@click.option("--target", "--node", "target", help="Only this target (node).")
@click.option("--status", help="Only this status (succeeded, failed, queued, cooldown, duplicate, ...).")
@click.option("--since", help="RFC 3339 time or UNIX seconds.")
@click.option("--until", help="RFC 3339 time or UNIX seconds.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", help="next_cursor of a previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def history(as_json: bool, **params: Any) -> None:
    """Show the audit history, newest first (from the database, or a server with --server)."""
    filters = {
        k: params[k]
        for k in ("playbook", "alertname", "target", "status", "since", "until", "limit", "cursor")
        if params.get(k) is not None
    }
    if params.get("server"):
        page = _client(params).history(filters)
    else:
        from remediate.history_api import history_json
        from remediate.server import parse_time_arg
        from remediate.store import HistoryQuery

        store = _open_store(params)
        try:
            query = HistoryQuery(
                **{
                    **{k: v for k, v in filters.items() if k not in ("since", "until")},
                    "since": parse_time_arg(filters.get("since"), "since"),
                    "until": parse_time_arg(filters.get("until"), "until"),
                }
            )
            entries, cursor = store.history(query)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        page = history_json(entries, cursor)
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    _table(
        [
            [
                e["id"],
                _when(e["time"]),
                e["alertname"],
                e.get("playbook") or "-",
                e.get("target") or "-",
                e["status"],
                e.get("run_id") or "-",
                _short(_reason(e)),
            ]
            for e in page["entries"]
        ],
        ["ID", "TIME", "ALERT", "PLAYBOOK", "TARGET", "STATUS", "RUN", "REASON"],
    )
    if page.get("next_cursor"):
        click.echo(f"more: --cursor {page['next_cursor']}")


def _reason(entry: dict[str, Any]) -> str:
    """What to show as the entry's reason: a failed run's error says more than why it was accepted."""
    run = entry.get("run") or {}
    if entry.get("status") == RunStatus.FAILED and run.get("error"):
        return str(run["error"])
    return str(entry["reason"])


@main.command()
@common_options
@client_options
@click.argument("run_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def show(run_id: int, as_json: bool, **params: Any) -> None:
    """Show one run: its alert, decision, steps, plans, results and attempts."""
    if params.get("server"):
        detail = _client(params).run(run_id)
    else:
        from remediate.history_api import run_json

        detail = run_json(_open_store(params).run_detail(run_id))
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    click.echo(
        f"run {detail['id']}: {detail['playbook']} on {detail['target']} ({detail['phase']}, "
        f"{detail['mode']}) -> {detail['status']}"
    )
    if detail.get("error"):
        click.echo(f"error: {detail['error']}")
    click.echo(f"alert: {detail['alert']['labels']}")
    for step in detail["steps"]:
        click.echo(f"  step {step['index']} {step['name']} [{step['action']}] {step['status']}")
        for key in ("plan", "result", "error"):
            if step.get(key) is not None:
                click.echo(f"    {key}: {json.dumps(step[key], default=str)}")


@main.command()
@common_options
@client_options
@click.argument("run_id", type=int)
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who approves (recorded).")
@handle_errors
def approve(run_id: int, by: str, **params: Any) -> None:
    """Approve a run that waits in awaiting_approval."""
    if params.get("server"):
        _client(params).approve(run_id, by)
    else:
        _open_store(params).approve(run_id, by=by, now=time.time())
    click.echo(f"run {run_id} approved by {by}; it is queued")


@main.command()
@common_options
@client_options
@click.option("--reason", default="", help="Why (recorded with every refused alert).")
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who pauses (recorded).")
@handle_errors
def pause(reason: str, by: str, **params: Any) -> None:
    """Pause remediation: new alerts are recorded but no run starts."""
    if params.get("server"):
        _client(params).pause(reason, by)
    else:
        _open_store(params).set_paused(True, by=by, reason=reason, now=time.time())
    click.echo("remediation paused" + (f": {reason}" if reason else ""))


@main.command()
@common_options
@client_options
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who resumes (recorded).")
@handle_errors
def resume(by: str, **params: Any) -> None:
    """Resume remediation after `remediate pause`."""
    if params.get("server"):
        _client(params).resume(by)
    else:
        _open_store(params).set_paused(False, by=by, reason="", now=time.time())
    click.echo("remediation resumed")
