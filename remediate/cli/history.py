"""The audit and control commands, against the database or a server (--server):
`remediate history` (and `history prune`, the database only), `show`, `approve`, `pause` and `resume`."""

from __future__ import annotations

import functools
import json
import time
from contextlib import closing
from typing import Any

import click

from remediate.cli._common import (
    CliError,
    _client,
    _open_store,
    _settings,
    _short,
    _table,
    _when,
    by_option,
    client_options,
    common_options,
    handle_errors,
    print_json,
    print_outcome,
    wait_for_outcome,
)
from remediate.cli._group import main
from remediate.errors import ConfigError
from remediate.runs import RunStatus


@main.group(invoke_without_command=True)
@client_options
@click.option("--playbook", help="Only this playbook.")
@click.option("--alertname", help="Only this alert name.")
@click.option("--target", "--node", "target", help="Only this target (node).")
@click.option("--status", help="Only this status (succeeded, failed, queued, cooldown, duplicate, ...).")
@click.option("--since", help="A duration back from now (1h, 7d), an RFC 3339 time or UNIX seconds.")
@click.option("--until", help="A duration back from now (1h, 7d), an RFC 3339 time or UNIX seconds.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", help="next_cursor of a previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--wide", is_flag=True, help="Print each REASON whole (else cut at 60 characters).")
@click.pass_context
@handle_errors
def history(ctx: click.Context, as_json: bool, wide: bool, **params: Any) -> None:
    """Show the audit history, newest first (from the database, or a server with --server).

    `remediate history prune` deletes old history from the database.
    """
    if ctx.invoked_subcommand is not None:
        return
    filters = {
        k: params[k]
        for k in ("playbook", "alertname", "target", "status", "since", "until", "limit", "cursor")
        if params.get(k) is not None
    }
    if params.get("server"):
        page = _client(params).history(filters)
    else:
        from remediate.history.api import history_json
        from remediate.server.queries import history_query

        store = _open_store(params)
        try:
            # The parser of GET /history: the same filters, durations (--since 1h) included.
            entries, cursor = store.history.page(history_query({k: str(v) for k, v in filters.items()}))
        except ValueError as exc:  # a bad filter or cursor, named
            raise ConfigError(str(exc)) from exc
        page = history_json(entries, cursor)
    if print_json(page, as_json):
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
                _reason(e) if wide else _short(_reason(e)),
            ]
            for e in page["entries"]
        ],
        ["ID", "TIME", "ALERT", "PLAYBOOK", "TARGET", "STATUS", "RUN", "REASON"],
    )
    if page.get("next_cursor"):
        click.echo(f"more: --cursor {page['next_cursor']}")


@history.command("prune")
@common_options
@click.option("--server", metavar="URL", help="Refused: prune works on the database (--database-url).")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="DURATION",
    help="Delete finished history older than this (e.g. 90d); at least 1d and the longest playbook cooldown.",
)
@click.option("--dry-run", is_flag=True, help="Delete nothing; print what would be deleted.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=500,
    show_default=True,
    help="Runs, decisions or notifications per write transaction (ingest waits for at most one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def prune(ctx: click.Context, older_than: str, dry_run: bool, batch_size: int, as_json: bool, **params: Any) -> None:
    """Delete old notifications, decisions that made no run, and finished runs (with their steps and
    attempts) from the database, in small batches; runs queued, running or awaiting approval are never
    deleted. A server with `retention` set does this by itself every hour."""
    # $REMEDIATE_SERVER (set for the other commands) is no reason to refuse: only a --server given here.
    given_to_history = ctx.parent is not None and ctx.parent.get_parameter_source("server") in (
        click.core.ParameterSource.COMMANDLINE,
    )
    if params.get("server") or given_to_history:
        raise CliError(
            "history prune works on the database, not through a server: pass --database-url (or let the "
            "server's `retention` setting prune)"
        )
    for key in ("config", "playbooks", "database_url"):  # given before `prune`, on `history`
        if params.get(key) is None and ctx.parent is not None:
            params[key] = ctx.parent.params.get(key)
    seconds = _prune_age(older_than, params)
    with closing(_open_store(params)) as store:
        report = store.retention.prune(seconds, now=time.time(), batch_size=batch_size, dry_run=dry_run)
    if print_json({"dry_run": dry_run, "older_than_seconds": seconds, **report.counts()}, as_json):
        return
    click.echo(f"{'would delete' if dry_run else 'deleted'} history older than {older_than}:")
    _table([[name, count] for name, count in report.counts().items()], ["TABLE", "ROWS"])


def _prune_age(older_than: str, params: dict[str, Any]) -> float:
    """--older-than in seconds: at least a day, and at least the longest cooldown of the playbooks (when
    their directory is here): the guards read back runs that old."""
    from remediate.config.durations import format_duration, parse_duration
    from remediate.config.settings import MIN_RETENTION

    try:
        seconds = parse_duration(older_than).total_seconds()
    except ValueError as exc:
        raise CliError(f"--older-than: {exc}") from None
    if seconds < MIN_RETENTION:
        raise CliError("--older-than must be at least 1d (max_attempts counts the runs of the last 24 h)")
    directory = _settings(params).engine.playbooks
    if directory.is_dir():
        from remediate.actions import default_registry
        from remediate.playbooks.loading import load_playbooks

        for playbook in load_playbooks(directory, default_registry()).playbooks:
            if playbook.cooldown.total_seconds() > seconds:
                raise CliError(
                    f"--older-than {older_than} is shorter than the cooldown of playbook {playbook.name!r} "
                    f"({format_duration(playbook.cooldown)}): its guard reads back runs that old"
                )
    return seconds


def _reason(entry: dict[str, Any]) -> str:
    """What to show as the entry's reason: a failed run's error says more than why it was accepted; AlertManager's
    own reason for the notification first where it gave one (0.32+: a re-send reads as one)."""
    run = entry.get("run") or {}
    said = f"[AlertManager: {entry['notification_reason']}] " if entry.get("notification_reason") else ""
    if entry.get("status") == RunStatus.FAILED and run.get("error"):
        return said + str(run["error"])
    return said + str(entry["reason"])


@main.command()
@client_options
@click.argument("run_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def show(run_id: int, as_json: bool, **params: Any) -> None:
    """Show one run: its alert, decision, steps, plans, results and attempts."""
    if params.get("server"):
        detail = _client(params).run(run_id)
    else:
        from remediate.history.api import run_json

        detail = run_json(_open_store(params).history.run_detail(run_id))
    if print_json(detail, as_json):
        return
    click.echo(
        f"run {detail['id']}: {detail['playbook']} on {detail['target']} ({detail['phase']}, "
        f"{detail['mode']}) -> {detail['status']}"
    )
    if detail.get("error"):
        click.echo(f"error: {detail['error']}")
    click.echo(f"alert: {json.dumps(detail['alert']['labels'], sort_keys=True)}")
    for step in detail["steps"]:
        on = f" on {step['node']}" if step.get("node") else ""  # a `run_on` step's own node
        click.echo(f"  step {step['index']} {step['name']} [{step['action']}]{on} {step['status']}")
        for key in ("plan", "result", "error"):
            if step.get(key) is not None:
                click.echo(f"    {key}: {json.dumps(step[key], default=str)}")


@main.command()
@client_options
@click.argument("run_id", type=int)
@by_option("approves")
@click.option("--wait", is_flag=True, help="Wait for the run to finish; print its outcome (exit 5 if it failed).")
@click.option(
    "--timeout", default="10m", show_default=True, metavar="DURATION", help="How long --wait waits (then exit 6)."
)
@handle_errors
def approve(run_id: int, by: str, wait: bool, timeout: str, **params: Any) -> None:
    """Approve a run that waits in awaiting_approval; with --wait, wait for its outcome."""
    from remediate.config.durations import parse_duration

    try:
        patience = parse_duration(timeout).total_seconds()
    except ValueError as exc:
        raise CliError(f"--timeout: {exc}") from None
    if params.get("server"):
        client = _client(params)
        client.approve(run_id, by)
        read = functools.partial(client.run, run_id)
    else:
        store = _open_store(params)
        store.queue.approve(run_id, by=by, now=time.time())
        read = functools.partial(_run_of_store, store, run_id)
    click.echo(f"run {run_id} approved by {by}; it is queued")
    if wait:
        print_outcome(wait_for_outcome(read, run_id, patience))


def _run_of_store(store: Any, run_id: int) -> dict[str, Any]:
    from remediate.history.api import run_json

    return run_json(store.history.run_detail(run_id))


@main.command()
@client_options
@click.option("--reason", default="", help="Why (recorded with every refused alert).")
@by_option("pauses")
@click.option("--force", is_flag=True, help="Replace who paused and why when remediation is paused already.")
@handle_errors
def pause(reason: str, by: str, force: bool, **params: Any) -> None:
    """Pause remediation: new alerts are recorded but no run starts.

    Over an existing pause it is refused (exit 4) saying who paused and why, unless --force replaces them."""
    if params.get("server"):
        _client(params).pause(reason, by, force=force)
    else:
        _open_store(params).pause.set(True, by=by, reason=reason, now=time.time(), replace=force)
    click.echo("remediation paused" + (f": {reason}" if reason else ""))


@main.command()
@client_options
@by_option("resumes")
@handle_errors
def resume(by: str, **params: Any) -> None:
    """Resume remediation after `remediate pause`.

    When remediation is not paused nothing is recorded: it says so and exits 4 (refused: the pause is not in a
    state that allows it)."""
    if params.get("server"):
        _client(params).resume(by)
    else:
        _open_store(params).pause.set(False, by=by, reason="", now=time.time(), replace=False)
    click.echo("remediation resumed")
