"""The audit and control commands, against the database or a server (--server):
`remediate history` (and `history prune`, the database only), `show`, `approve`, `pause` and `resume`;
`ladder status`/`ladder reset` (escalation ladders, per target) and `breaker status`/`breaker reset`
(the circuit breaker of cluster actions)."""

from __future__ import annotations

import json
import time
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
@click.option("--since", help="RFC 3339 time or UNIX seconds.")
@click.option("--until", help="RFC 3339 time or UNIX seconds.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", help="next_cursor of a previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def history(ctx: click.Context, as_json: bool, **params: Any) -> None:
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
        from remediate.history_api import history_json
        from remediate.server.queries import parse_time_arg
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
            entries, cursor = store.history.page(query)
        except ValueError as exc:
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
                _short(_reason(e)),
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
    store = _open_store(params)
    try:
        report = store.retention.prune(seconds, now=time.time(), batch_size=batch_size, dry_run=dry_run)
    finally:
        store.close()
    if print_json({"dry_run": dry_run, "older_than_seconds": seconds, **report.counts()}, as_json):
        return
    click.echo(f"{'would delete' if dry_run else 'deleted'} history older than {older_than}:")
    _table([[name, count] for name, count in report.counts().items()], ["TABLE", "ROWS"])


def _prune_age(older_than: str, params: dict[str, Any]) -> float:
    """--older-than in seconds: at least a day, and at least the longest cooldown of the playbooks (when
    their directory is here): the guards read back runs that old."""
    from remediate.config import MIN_RETENTION
    from remediate.durations import format_duration, parse_duration

    try:
        seconds = parse_duration(older_than).total_seconds()
    except ValueError as exc:
        raise CliError(f"--older-than: {exc}") from None
    if seconds < MIN_RETENTION:
        raise CliError("--older-than must be at least 1d (max_attempts counts the runs of the last 24 h)")
    directory = _settings(params).playbooks
    if directory.is_dir():
        from remediate.actions import default_registry
        from remediate.playbooks import load_playbooks

        for playbook in load_playbooks(directory, default_registry()).playbooks:
            if playbook.cooldown.total_seconds() > seconds:
                raise CliError(
                    f"--older-than {older_than} is shorter than the cooldown of playbook {playbook.name!r} "
                    f"({format_duration(playbook.cooldown)}): its guard reads back runs that old"
                )
    return seconds


def _reason(entry: dict[str, Any]) -> str:
    """What to show as the entry's reason: a failed run's error says more than why it was accepted."""
    run = entry.get("run") or {}
    if entry.get("status") == RunStatus.FAILED and run.get("error"):
        return str(run["error"])
    return str(entry["reason"])


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
        from remediate.history_api import run_json

        detail = run_json(_open_store(params).history.run_detail(run_id))
    if print_json(detail, as_json):
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
@client_options
@click.argument("run_id", type=int)
@by_option("approves")
@handle_errors
def approve(run_id: int, by: str, **params: Any) -> None:
    """Approve a run that waits in awaiting_approval."""
    if params.get("server"):
        _client(params).approve(run_id, by)
    else:
        _open_store(params).queue.approve(run_id, by=by, now=time.time())
    click.echo(f"run {run_id} approved by {by}; it is queued")


@main.command()
@client_options
@click.option("--reason", default="", help="Why (recorded with every refused alert).")
@by_option("pauses")
@click.option("--force", is_flag=True, help="Replace who paused and why when remediation is paused already.")
@handle_errors
def pause(reason: str, by: str, force: bool, **params: Any) -> None:
    """Pause remediation: new alerts are recorded but no run starts.

    Over an existing pause it fails (exit 2) saying who paused and why, unless --force replaces them."""
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
    """Resume remediation after `remediate pause`."""
    if params.get("server"):
        _client(params).resume(by)
    else:
        _open_store(params).pause.set(False, by=by, reason="", now=time.time())
    click.echo("remediation resumed")


# ------------------------------------------------------------------ escalation ladders


@main.group()
def ladder() -> None:
    """Escalation ladders (playbooks with `escalate:`): which rung each target is on, and reset."""


def _rung_names(params: dict[str, Any]) -> dict[str, list[str]]:
    """The rung names of the configured ladder playbooks (for `of` and `name` when reading the database)."""
    from remediate.actions import default_registry
    from remediate.playbooks import load_directory

    settings = _settings(params)
    loaded, _ = load_directory(settings.playbooks, default_registry(settings))
    return {p.name: [r.name for r in p.rungs] for p in loaded if p.is_ladder}


def _local_json(states: list[Any], params: dict[str, Any]) -> list[dict[str, Any]]:
    from remediate.history_api import ladder_state_json

    names = _rung_names(params)
    return [ladder_state_json(state, names.get(state.playbook)) for state in states]


@ladder.command("status")
@client_options
@click.option("--target", "--node", "target", help="Only this target (node).")
@click.option("--playbook", help="Only this playbook.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def ladder_status(target: str | None, playbook: str | None, as_json: bool, **params: Any) -> None:
    """Show where each ladder stands: its rung (0 = reset by a person), why, and the rungs climbed since
    its last reset (from the database, or a server with --server)."""
    if params.get("server"):
        filters = {k: v for k, v in (("target", target), ("playbook", playbook)) if v}
        ladders = _client(params).ladders(filters)["ladders"]
    else:
        store = _open_store(params)
        try:
            ladders = _local_json(store.ladders.read(target=target, playbook=playbook), params)
        finally:
            store.close()
    if print_json({"ladders": ladders}, as_json):
        return
    _print(ladders)


@ladder.command("reset")
@click.argument("target")
@client_options
@click.option("--playbook", help="Only this playbook's ladder (default: every ladder of TARGET).")
@click.option("--reason", default="", help="Why (recorded).")
@by_option("resets")
@handle_errors
def ladder_reset(target: str, playbook: str | None, reason: str, by: str, **params: Any) -> None:
    """Put TARGET's ladders back before rung 1: its next alert starts on the gentlest rung again."""
    if params.get("server"):
        ladders = _client(params).ladders_reset(target, playbook, reason, by)["ladders"]
    else:
        store = _open_store(params)
        try:
            states = store.ladders.reset(target, playbook=playbook, by=by, reason=reason, now=time.time())
            ladders = _local_json(states, params)
        finally:
            store.close()
        if not ladders:
            raise CliError(f"no ladder{f' of playbook {playbook}' if playbook else ''} for target {target}")
    click.echo(f"{len(ladders)} ladder(s) of {target} reset")
    _print(ladders)


def _print(ladders: list[dict[str, Any]]) -> None:
    rows = []
    for item in ladders:
        of = f"/{item['of']}" if item.get("of") else ""
        name = f" ({item['name']})" if item.get("name") else ""
        climbed = " -> ".join(str(step["rung"]) for step in item["climb"]) or "-"
        rows.append(
            [
                item["target"],
                item["playbook"],
                item["guard_key"],
                f"{item['rung']}{of}{name}",
                climbed,
                _when(item["updated_at"]),
                _short(item["reason"], 70),
            ]
        )
    _table(rows, ["TARGET", "PLAYBOOK", "GUARD KEY", "RUNG", "CLIMB", "UPDATED", "WHY"])


# ------------------------------------------------------------------ the circuit breaker


@main.group()
def breaker() -> None:
    """The circuit breaker of cluster actions (cordon, taint, drain): status and reset."""


def _breaker(params: dict[str, Any]) -> Any:
    from remediate.breaker import CircuitBreaker, limits_from_settings

    store = _open_store(params)
    return CircuitBreaker(store.breaker.ledger, store.breaker.view, limits=limits_from_settings(_settings(params)))


@breaker.command("status")
@client_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def breaker_status(as_json: bool, **params: Any) -> None:
    """Show whether the breaker is open, why, and which nodes remediate holds."""
    status = _client(params).breaker_status() if params.get("server") else _breaker(params).status()
    if print_json(status, as_json):
        return
    _print_breaker(status)


@breaker.command("reset")
@client_options
@click.option("--reason", default="", help="Why (recorded).")
@by_option("resets")
@handle_errors
def breaker_reset(reason: str, by: str, **params: Any) -> None:
    """Close the breaker after checking the nodes it names; older alerts are then recorded as stale.

    A closed breaker is left as it is (nothing recorded, the stale horizon not moved); exit 0 either way."""
    if params.get("server"):
        status = _client(params).breaker_reset(by, reason)
    else:
        status = _breaker(params).reset(by=by, reason=reason)
    if status.get("reset", True):
        click.echo(f"circuit breaker reset by {by}" + (f": {reason}" if reason else ""))
    else:
        click.echo("breaker is closed; nothing to reset (the stale horizon did not move)")
    _print_breaker(status)


def _print_breaker(status: dict[str, Any]) -> None:
    if status["open"]:
        click.echo(
            f"breaker: OPEN since {_when(status['tripped_at'])} (run {status['tripped_by_run']}, "
            f"node {status['tripped_node']})"
        )
        click.echo(f"reason: {status['reason']}")
        click.echo(f"refused since: {status['refused']}")
    else:
        click.echo("breaker: closed")
    held, recent = status["held_nodes"], status["recent_nodes"]
    click.echo(f"held by remediate now ({len(held)}): {', '.join(held) or '-'}")
    window = status["limits"]["window_seconds"]
    click.echo(f"changed within {window:g}s ({len(recent)}): {', '.join(recent) or '-'}")
    click.echo(f"cap: {status['cap_rule']}")
    if status.get("reset_at"):
        why = f": {status['reset_reason']}" if status.get("reset_reason") else ""
        click.echo(f"last reset: {_when(status['reset_at'])} by {status['reset_by']}{why}")
