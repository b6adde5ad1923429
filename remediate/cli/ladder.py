"""`remediate ladder status` and `remediate ladder reset`: where the escalation ladders stand, per target."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Any

import click

from remediate.cli._common import (
    EXIT_NOT_FOUND,
    CliError,
    _client,
    _open_store,
    _settings,
    _short,
    _table,
    _when,
    by_option,
    client_options,
    handle_errors,
    print_json,
)
from remediate.cli._group import main
from remediate.runs import Standing


@main.group()
def ladder() -> None:
    """Escalation ladders (playbooks with `escalate:`): which rung each target is on, and reset."""


def _rung_names(params: dict[str, Any]) -> dict[str, list[str]]:
    """The rung names of the configured ladder playbooks (for `of` and `name` when reading the database)."""
    from remediate.actions import default_registry
    from remediate.playbooks.loading import load_directory

    settings = _settings(params)
    loaded, _ = load_directory(settings.engine.playbooks, default_registry(settings))
    return {p.name: [r.name for r in p.rungs] for p in loaded if p.is_ladder}


def _local_json(store: Any, states: list[Any], params: dict[str, Any]) -> list[dict[str, Any]]:
    from remediate.history.api import ladder_state_json

    names = _rung_names(params)
    statuses = store.ladders.run_statuses(states)
    return [ladder_state_json(state, names.get(state.playbook), statuses.get(state.run_id)) for state in states]


@ladder.command("status")
@client_options
@click.option("--target", "--node", "target", help="Only this target (node).")
@click.option("--playbook", help="Only this playbook.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--wide", is_flag=True, help="Print each WHY whole (else cut at 70 characters).")
@handle_errors
def ladder_status(target: str | None, playbook: str | None, as_json: bool, wide: bool, **params: Any) -> None:
    """Show where each ladder stands: its rung (0 = reset by a person), why, and the rungs climbed since
    its last reset (from the database, or a server with --server)."""
    if params.get("server"):
        filters = {k: v for k, v in (("target", target), ("playbook", playbook)) if v}
        ladders = _client(params).ladders(filters)["ladders"]
    else:
        with closing(_open_store(params)) as store:
            ladders = _local_json(store, store.ladders.read(target=target, playbook=playbook), params)
    if print_json({"ladders": ladders}, as_json):
        return
    _print(ladders, wide=wide)


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
        with closing(_open_store(params)) as store:
            states = store.ladders.reset(target, playbook=playbook, by=by, reason=reason, now=time.time())
            ladders = _local_json(store, states, params)
        if not ladders:
            raise CliError(
                f"no ladder{f' of playbook {playbook}' if playbook else ''} for target {target}", EXIT_NOT_FOUND
            )
    click.echo(f"{len(ladders)} ladder(s) of {target} reset")
    _print(ladders)


def _standing(item: dict[str, Any]) -> str:
    """Where the ladder stands, in words (remediate.judging.ladder.standing): not its rung's WHY ("first rung") as
    if that rung still held after its undo, nor "in force" for a rung whose run failed."""
    run = f"run {item['run_id']}"
    where = item.get("standing")
    if where == Standing.RESET:
        return "reset: the next firing starts at rung 1"
    if where == Standing.RESOLVED:
        return f"resolved {_when(item['resolved_at'])}, no longer in force"
    if where == Standing.IN_FORCE:
        return f"in force since {_when(item['climbed_at'])}"
    if where == Standing.PENDING:
        return f"not in force yet: {run} {str(item.get('run_status')).replace('_', ' ')}"
    if where == Standing.NOT_IN_FORCE:
        return f"NOT in force: {run} {item.get('run_status')}"
    return f"{run} no longer in the history"


def _print(ladders: list[dict[str, Any]], *, wide: bool = False) -> None:
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
                _standing(item),
                climbed,
                _when(item["updated_at"]),
                item["reason"] if wide else _short(item["reason"], 70),
            ]
        )
    _table(rows, ["TARGET", "PLAYBOOK", "GUARD KEY", "RUNG", "STATE", "CLIMB", "UPDATED", "WHY"])
