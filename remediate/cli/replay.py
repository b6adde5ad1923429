"""`remediate replay`: the stored notifications judged again with a changed playbook directory, compared with
what was really decided (remediate/rehearsal/replay.py); reads the database only, executes nothing."""

from __future__ import annotations

import time
from typing import Any

import click

from remediate.cli._common import CliError, _settings, _table, _when, common_options, handle_errors, print_json
from remediate.cli._group import main


@main.command()
@common_options
@click.option("--since", default="30d", show_default=True, help="A duration back from --until (30d, 24h) or a time.")
@click.option("--until", help="A duration back from now (1h), an RFC 3339 time or UNIX seconds (default: now).")
@click.option("--cluster-nodes", type=click.IntRange(min=1), help="Nodes the breaker's cap counts [as last stored].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def replay(since: str, until: str | None, cluster_nodes: int | None, as_json: bool, **params: Any) -> None:
    """Judge the notifications stored in the database (--database-url) within the window again with the
    playbooks of --playbooks, in the order they came, and show what would differ from what was decided:
    runs added or removed per playbook and node, ladder rungs, breaker trips, nodes cordoned or drained, and
    the steps of the same decisions whose params differ (with the change they would make, where the
    recorded plan tells it).
    Cooldowns, attempt caps, ladders and the breaker are simulated over time in memory; nothing is
    executed and the database is opened read-only."""
    from remediate.actions import default_registry
    from remediate.actions.slurm.common import slurm_node_cache
    from remediate.playbooks.loading import load_playbooks
    from remediate.rehearsal.replay import Window
    from remediate.rehearsal.replay import replay as run_replay
    from remediate.server.queries import parse_time_arg
    from remediate.services import kube_client

    settings = _settings(params)
    try:
        end = parse_time_arg(until, "until") or time.time()
        start = parse_time_arg(since, "since", now=end)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    if start is None or start >= end:
        raise CliError("--since must be before --until")
    kube = kube_client(settings)  # one for the actions and the waves: one node cache, if a wave reads labels
    slurm = slurm_node_cache(settings.slurm)  # ... and one Slurm node cache, polling only if a wave reads Slurm
    try:
        registry = default_registry(settings, kube, slurm)
        playbooks = load_playbooks(settings.engine.playbooks, registry)
        report = run_replay(
            settings,
            settings.store.url,
            playbooks,
            registry,
            Window(start, end),
            cluster_nodes=cluster_nodes,
            kube=kube,
            slurm=slurm,
        )
    finally:
        kube.close()
        slurm.stop()
    if not print_json(report, as_json):
        print_replay(report)


def print_replay(report: dict[str, Any]) -> None:
    click.echo(
        f"replayed {report['notifications']} notifications ({report['alerts']} alerts) from "
        f"{report['since']} to {report['until']}"
    )
    click.echo("\ndecisions (recorded -> replayed):")
    _table(
        [[k, v["recorded"], v["replayed"]] for k, v in report["decisions"].items()],
        ["DECISION", "RECORDED", "REPLAYED"],
    )
    click.echo("\nruns that differ, per playbook and node:")
    _table(
        [
            [r["playbook"], r["target"], r["recorded"], r["replayed"], f"+{r['added']}", f"-{r['removed']}"]
            for r in report["runs"]
        ],
        ["PLAYBOOK", "NODE", "RECORDED", "REPLAYED", "ADDED", "REMOVED"],
    )
    if report["rungs"]:
        click.echo("\nladder rungs that differ:")
        _table(
            [[r["playbook"], r["target"], r["rung"], r["recorded"], r["replayed"]] for r in report["rungs"]],
            ["PLAYBOOK", "NODE", "RUNG", "RECORDED", "REPLAYED"],
        )
    breaker = report["breaker"]
    click.echo(f"\nbreaker: {breaker['note']}; {len(breaker['trips'])} trips")
    for trip in breaker["trips"]:
        click.echo(f"  {_when(trip['at'])} run {trip['run']} {trip['action']} {trip['node']}: {trip['reason']}")
    for change in report["promotions"]:
        head = "promoted" if change["promoted"] else "demoted"
        click.echo(f"\nwave {change['wave']} of {change['playbook']} {head} at {_when(change['at'])}: {change['note']}")
    cordoned = report["cordoned"]
    click.echo(
        f"\nnodes cordoned or drained: {len(cordoned['recorded'])} recorded, {len(cordoned['replayed'])} replayed; "
        f"added {', '.join(cordoned['added']) or '-'}; removed {', '.join(cordoned['removed']) or '-'}"
    )
    if report["steps"]:
        from remediate.rehearsal.replay_steps import describe

        click.echo("\nsteps that would do something else (the same decision, other params):")
        for run in report["steps"]:
            click.echo(
                f"  {_when(run['received_at'])} {run['playbook']} {run['target']} (recorded run {run['recorded_run']}):"
            )
            for change in run["steps"]:
                click.echo(f"    {describe(change)}")
    click.echo(
        f"\n{report['changed_decisions']} decisions, {len(report['rungs'])} ladder rungs and "
        f"{report['changed_steps']} steps differ" + ("" if report["differs"] else ": nothing would change")
    )
