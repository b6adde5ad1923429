"""`remediate node release NODE`: give a node a breakfix system holds (k8s.handoff, slurm.handoff) back to remediate,
once the re-admission gate proves it healthy.

The owner normally releases the node itself (removes the remediate.io/owner annotation; resumes the Slurm node);
this is the operator's way to do it. First the gate the shipped XID ladder runs before re-admitting a node
(remediate.executor.readmission: gpu.health on the node, through its agent, over a soak), then its burn-in
(remediate.executor.release_burnin: slurm.burnin, k8s.burnin, skipped without `burnin_baselines`); both pass:
the Kubernetes annotation is removed and a Slurm node handed off is resumed, whichever hold the node has (both
on Slurm on Kubernetes). Either fails, or cannot run: nothing is released, exit EXIT_GATE_FAILED, audited
`node_release_refused`. `--skip-gate --reason WHY` releases without that proof; `--no-burnin --reason WHY`
without the burn-in's. It talks to the cluster and the
node's agent as the settings configure them, never to the server, and is audited (`node_released`,
docs/logging.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from remediate.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_NOT_FOUND,
    CliError,
    _settings,
    by_option,
    common_options,
    gpu_options,
    handle_errors,
)
from remediate.cli._group import main

if TYPE_CHECKING:  # imported in the command: every other command would load the executor's dispatch
    from remediate.cli.node_holds import Hold, NodeHolds, NodeState
    from remediate.config.settings import Settings
    from remediate.executor.readmission import GateOptions, GateOutcome, GatePlan, GateRound
    from remediate.executor.release_burnin import BurninOutcome


@main.group()
def node() -> None:
    """Nodes handed to another system (k8s.handoff, slurm.handoff): release."""


@node.command("release")
@click.argument("name")
@common_options
@gpu_options
@click.option("--reason", default="", help="Why (recorded); required with --skip-gate.")
@click.option("--soak", default="30m", show_default=True, help="The gate's soak window (a duration; 0s: one round).")
@click.option("--every", default="5m", show_default=True, help="The time between two rounds of the soak.")
@click.option("--diag", type=click.IntRange(0, 3), default=1, show_default=True, help="dcgmi diag level (0: none).")
@click.option("--skip-gate", is_flag=True, help="Release without the gate's proof of health (needs --reason).")
@click.option("--no-burnin", is_flag=True, help="Run the soak but not the burn-in after it (needs --reason).")
@by_option("releases")
@handle_errors
def node_release(
    name: str,
    reason: str,
    soak: str,
    every: str,
    diag: int,
    skip_gate: bool,
    no_burnin: bool,
    by: str,
    **params: Any,
) -> None:
    """Give node NAME back to remediate once the re-admission gate passes: gpu.health on the node (through its
    agent) over a soak, then the burn-in (slurm.burnin, k8s.burnin: the site's burnin_* settings; skipped
    without burnin_baselines), as the shipped XID ladder re-admits a node. Passed: the remediate.io/owner
    annotation is removed and a Slurm node handed off (reason `breakfix: ...`) is resumed. Failed, or the gate
    cannot run (no agent, agent unreachable, no NVML, a node not drained for its burn-in): nothing is released,
    exit 7.

    A node no other system owns is left as it is (exit 0, nothing recorded)."""
    from remediate.cli.node_holds import NodeHolds, name_problem
    from remediate.config.burnin import check_burnin
    from remediate.config.settings import check_schedulers
    from remediate.executor.readmission import GateOptions, gate_params
    from remediate.logs.setup import configure_logging

    if skip_gate and not reason.strip():
        raise click.UsageError("--skip-gate releases without proof of health: say why with --reason")
    if no_burnin and not reason.strip():
        raise click.UsageError("--no-burnin releases without the burn-in's proof: say why with --reason")
    options = GateOptions(soak, every, diag)
    gate_params(options)  # a bad --soak / --every fails here, before anything is read
    settings = _settings(params)
    problem = name_problem(name, settings)  # a name valid in any system read: each is asked only for its own
    if problem:
        raise click.BadParameter(f"node name {problem}", param_hint="NAME")
    check_schedulers(settings)
    if not (skip_gate or no_burnin):  # settings a burn-in needs are needed only where one runs
        check_burnin(settings.burnin, settings.engine.schedulers)
    configure_logging(settings.log.format, settings.log.level)
    holds = NodeHolds.from_settings(settings)
    try:
        state = _holds_of(holds, name)
        if not state.holds:
            click.echo(f"{name} is not owned by another system: nothing to release")
            return
        held = state.holds
        outcome = None if skip_gate else _gate(settings, holds, name, options)
        if outcome is not None and not outcome.passed:
            _refuse(name, held, outcome, by, reason)
        burnins = [] if outcome is None or no_burnin else _burnins(settings, holds, _holds_of(holds, name))
        failed = next((burnt for burnt in burnins if not burnt.passed), None)
        if outcome is not None and failed is not None:  # burn-ins run only after a soak (outcome) passed
            _refuse(name, held, outcome, by, reason, failed)
        # A soak is long: the owner may have acted.
        still = _holds_of(holds, name).holds if outcome is not None else held
        if not still:
            click.echo(f"{name} is no longer owned by another system (released during the gate): nothing to release")
            return
        release = Release(name, by, reason, gate="skipped" if outcome is None else "passed",
                          burnin=_burnin_field(burnins, ran=outcome is not None and not no_burnin),
                          ran_on=None if outcome is None else outcome.ran_on)  # fmt: skip
        _release(holds, release, still)
    finally:
        holds.close()


@dataclass(frozen=True)
class Release:
    """What each hold's audit of one release says besides the hold: who asked, why, and what proof it rests on."""

    node: str
    principal: str
    reason: str
    gate: str
    burnin: str
    ran_on: str | None


def _release(holds: NodeHolds, release: Release, still: list[Hold]) -> None:
    """Each hold given back in turn, audited and told as soon as it is: a failure part-way leaves the others
    with their owner, and says (and audits) which were released and which not."""
    from remediate.errors import ActionError
    from remediate.logs.audit import audit_event

    r = release
    for index, hold in enumerate(still):
        try:
            holds.release(hold)
        except ActionError as exc:  # the Kubernetes API or scontrol refused: KubeError, SlurmError
            _incomplete(release, still[:index], still[index:], exc)
        # WARNING, as resets are: remediate may change a node again that a person or a system had taken from it.
        audit_event(
            "node_released", level=logging.WARNING, node=r.node, owner=hold.owner.name, owner_since=hold.owner.since,
            principal=r.principal, reason=r.reason, released=[hold.system], gate=r.gate, burnin=r.burnin,
            ran_on=r.ran_on,
        )  # fmt: skip
        done = "resumed in Slurm" if hold.slurm_name else "owner annotation removed"
        click.echo(f"released {hold.owner.describe(r.node)} ({done}); remediate may change it again")


def _incomplete(release: Release, released: list[Hold], kept: list[Hold], exc: Exception) -> None:
    from remediate.logs.audit import audit_event

    r = release
    # ERROR: the node is now half given back; an operator has to finish the release (or take it back).
    audit_event(
        "node_release_incomplete", level=logging.ERROR, node=r.node, owner=kept[0].owner.name,
        principal=r.principal, reason=r.reason, gate=r.gate, burnin=r.burnin, ran_on=r.ran_on,
        released=[h.system for h in released], not_released=[h.system for h in kept], error=str(exc),
    )  # fmt: skip
    done = f"released in {', '.join(h.system for h in released)}; " if released else ""
    raise CliError(
        f"{r.node} released only in part: {done}not released in {', '.join(h.system for h in kept)} "
        f"({kept[0].system}: {exc}), so {kept[0].owner.name} keeps it there. Once that is fixed, "
        f"remediate node release {r.node} gives back what is left"
    ) from exc


def _holds_of(holds: NodeHolds, name: str) -> NodeState:
    from remediate.cli.node_holds import NodeNotFound

    if not holds.systems:
        raise CliError(
            "no cluster to release a node in: schedulers names neither kubernetes nor slurm (with slurm_conf)"
        )
    try:
        return holds.read(name)
    except NodeNotFound as exc:
        where = " nor ".join(holds.systems)
        raise CliError(f"node {name} does not exist in the cluster ({where})", EXIT_NOT_FOUND) from exc


def _gate(settings: Any, holds: NodeHolds, name: str, options: GateOptions) -> GateOutcome:
    """The gate, run where the executor would run the step (its Dispatch, built from the same settings)."""
    from remediate.actions import default_registry
    from remediate.executor.dispatch import Dispatch
    from remediate.executor.readmission import ACTION, Gate

    registry = default_registry(settings, holds.kube, holds.slurm)
    dispatch = Dispatch.from_settings(settings, slurm=holds.slurm)
    outcome = Gate(dispatch, registry.get(ACTION), name, options, on_plan=_show_plan, on_round=_show_round).run()
    click.echo(outcome.line())
    return outcome


def _burnins(settings: Settings, holds: NodeHolds, state: NodeState) -> list[BurninOutcome]:
    """The gate's burn-in after its soak passed, one per scheduler in force that has the node (release_burnin),
    each told as it ends; the first that does not pass ends them. Slurm's only where Slurm holds the node or it
    is drained: a node its owner resumed in Slurm (another system's hold left) is in service there, and
    slurm.burnin would refuse it (not drained). Kubernetes's on the node Kubernetes has, by its own name."""
    from datetime import UTC, datetime

    from remediate.actions import default_registry
    from remediate.config.schedulers import Scheduler
    from remediate.executor.release_burnin import release_burnins, run_burnin

    registry = default_registry(settings, holds.kube, holds.slurm)
    slurm_node = state.slurm_node
    if slurm_node is not None and not (state.held_in_slurm or slurm_node.drained):
        click.echo(
            f"burn-in (slurm.burnin): not applicable: {slurm_node.name} is in service in Slurm "
            f"({slurm_node.state_text}, not drained) and Slurm does not hold it"
        )
        slurm_node = None
    slurm_name = None if slurm_node is None else slurm_node.name
    kube_name = state.kube_name if Scheduler.KUBERNETES in settings.engine.schedulers else None
    done: list[BurninOutcome] = []
    for action, node in release_burnins(registry.get, slurm_name, kube_name, datetime.now(UTC)):
        burnt = run_burnin(action, node)
        if not (burnt.skipped and done and done[-1].line() == burnt.line()):  # Slurm on Kubernetes: said once
            click.echo(burnt.line())
        done.append(burnt)
        if not burnt.passed:
            break
    return done


def _burnin_field(burnins: list[BurninOutcome], *, ran: bool) -> str:
    """The audit's `burnin`: passed, skipped (no baseline configured), or not run (--skip-gate, --no-burnin)."""
    if not ran or not burnins:
        return "not run"
    return "skipped" if all(burnt.skipped for burnt in burnins) else "passed"


def _refuse(
    name: str, held: list[Hold], outcome: GateOutcome, by: str, reason: str, burnt: BurninOutcome | None = None
) -> None:
    from remediate.logs.audit import audit_event

    could_not = outcome.error is not None if burnt is None else "figure" not in burnt.result
    evidence = outcome.evidence() if burnt is None else burnt.evidence()
    # WARNING: an operator asked for a node the gate keeps out; the evidence says why.
    audit_event(
        "node_release_refused", level=logging.WARNING, node=name, owner=held[0].owner.name, principal=by,
        reason=reason, gate="error" if could_not else "failed", evidence=evidence, ran_on=outcome.ran_on,
        rounds=len(outcome.rounds), failed_at="soak" if burnt is None else burnt.action,
    )  # fmt: skip
    why = "could not run" if could_not else "failed"
    what = "re-admission gate" if burnt is None else f"re-admission gate's burn-in ({burnt.action})"
    raise CliError(
        f"{name} not released: the {what} {why}, so {held[0].owner.name} keeps it. Once the node is "
        f"known good (fixed, or checked by other means): remediate node release {name} "
        f"{'--skip-gate' if burnt is None else '--no-burnin'} --reason WHY",
        EXIT_GATE_FAILED,
    )


def _show_plan(plan: GatePlan) -> None:
    from remediate.executor.readmission import ACTION

    notes = "".join(f"; {note}" for note in plan.notes)
    click.echo(f"gate: {ACTION} on {plan.ran_on}, {plan.rounds} round(s); dcgmi: {plan.diag}{notes}")
    for gpu in plan.gpus:
        click.echo(f"  {gpu}")


QUIET_VERDICTS = ("ok", "skipped")
"""Verdicts a round after the first leaves out: the first round's table showed every check once, and a soak of 7
rounds of 8 GPUs x 6 checks would bury the one check that turned in 336 lines."""


def _show_round(done: GateRound) -> None:
    from remediate.config.durations import format_duration

    click.echo(f"round {done.number}/{done.planned} at +{format_duration(round(done.at_s))}: {done.verdict}")
    for check in done.checks:
        if done.number == 1 or check.verdict not in QUIET_VERDICTS:
            click.echo(f"  {check.gpu}  {check.check}  {check.verdict}  {check.evidence}")
    if done.diag is not None and done.diag.get("level"):
        failed = "; ".join(done.diag.get("failed") or ()) or done.diag.get("reason") or ""
        click.echo(
            f"  dcgmi diag -r {done.diag.get('level')}: {done.diag.get('verdict')}{': ' if failed else ''}{failed}"
        )
