"""`remediate breaker status` and `remediate breaker reset`: the circuit breaker of cluster actions."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli._common import (
    _client,
    _open_store,
    _settings,
    _when,
    by_option,
    client_options,
    handle_errors,
    print_json,
)
from remediate.cli._group import main
from remediate.config.durations import format_duration


@main.group()
def breaker() -> None:
    """The circuit breaker of cluster actions (cordon, taint, drain): status and reset."""


def _breaker(params: dict[str, Any]) -> Any:
    from remediate.breaker import CircuitBreaker, limits_from_settings

    store = _open_store(params)
    return CircuitBreaker(
        store.breaker.ledger, store.breaker.view, limits=limits_from_settings(_settings(params).kube.breaker)
    )


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
    # As the settings write it (breaker_window: 10m), not as seconds.
    window = format_duration(status["limits"]["window_seconds"])
    click.echo(f"changed within {window} ({len(recent)}): {', '.join(recent) or '-'}")
    click.echo(f"cap: {status['cap_rule']}")
    if status.get("reset_at"):
        why = f": {status['reset_reason']}" if status.get("reset_reason") else ""
        click.echo(f"last reset: {_when(status['reset_at'])} by {status['reset_by']}{why}")
