"""`slurm.burnin`: a short collective benchmark run on a drained node, its figure judged against the baseline of
the GPU model it ran on; a failed burn-in fails the step (what a re-admission gate waits on). The params a step
does not write come from the site's `burnin_*` settings (remediate.config.burnin); with no baseline table at all
the step reports itself skipped (remediate.actions.burnin_common).

The job is `srun --no-allocate -w NODE <python> -m remediate.burnin ...` (SlurmClient.run_on_drained): Slurm
starts no new job on a drained node, not even in a maintenance reservation of it (checked on 22.05.8), but root
or SlurmUser may run a step there without an allocation, and the node stays drained throughout: the burn-in
never resumes it. remediate.burnin measures the all-reduce bus bandwidth (gloo on CPU, nccl on GPUs) and prints
the model it ran on; remediate.burnin.verdict judges it against the step's `baselines` table x `tolerance`.

Every part of the command line is a static param, checked when the playbook loads: no alert label reaches it.
Only a drained node with no job left is burnt in (on a node in service, or one still draining, the benchmark
would share it with users' jobs, and its figure would judge neither), and never one handed to a breakfix
system (its owner's now), but by `remediate node release` (`for_release`): the person releasing the node takes
it back from its owner, and the burn-in is part of the proof the release asks for (the node is still drained).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Self

from remediate.actions.base import ActionDeps, StepContext
from remediate.actions.burnin_common import (
    BURNIN_PARAMS,
    BurninFailedStep,
    command_of,
    judged,
    missing,
    skipped,
    with_site_defaults,
)
from remediate.actions.schema import Param, ParamSchema
from remediate.actions.slurm.common import CacheProvider, SlurmAction, SlurmOptions, handed_note, node_schema
from remediate.burnin.command import check_path
from remediate.burnin.verdict import BadMeasurement, Measurement
from remediate.config.burnin import BurninSettings
from remediate.errors import ActionError
from remediate.slurm import SlurmNode

SRUN_GRACE = 30.0
"""Seconds srun may take past the benchmark's own time limit (its start, the output's way back)."""
BUSY = ("allocated", "mixed")
"""Base states of a node whose jobs still run (DRAINING, not yet DRAINED)."""
WORKDIR_PARAM = Param(
    str,
    default="/",
    static=True,
    check=check_path,
    doc="absolute path of the directory the burn-in runs in on the node (it writes nothing there)",
)

__all__ = ["BurninFailedStep", "SlurmBurninAction"]


class SlurmBurninAction(SlurmAction):
    name: ClassVar[str] = "slurm.burnin"
    description: ClassVar[str] = (
        "Run a short all-reduce burn-in on a drained Slurm node (srun --no-allocate: it stays drained) and judge "
        "its figure against the baseline of its GPU model; a figure below it fails the step."
    )
    schema: ClassVar[ParamSchema] = node_schema(**BURNIN_PARAMS, workdir=WORKDIR_PARAM)

    def __init__(
        self,
        cache: CacheProvider,
        options: SlurmOptions | None = None,
        site: BurninSettings | None = None,
        *,
        releasing: bool = False,
    ) -> None:
        super().__init__(cache, options)
        self.site = site or BurninSettings()
        self.releasing = releasing
        """Burn in a node handed to a breakfix system too: `remediate node release`, taking it back."""

    def for_release(self) -> SlurmBurninAction:
        """This action, with the same backends and settings, as `remediate node release` runs it: on the node
        handed off as well (still only a drained one)."""
        return type(self)(self._cache_provider, self.options, self.site, releasing=True)

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        built = super().from_deps(deps)
        return cls(built._cache_provider, built.options, deps.burnin)

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The step's params over the site's `burnin_*` settings (its own win), checked as the schema says."""
        return super().validate(with_site_defaults(params, self.site, self.schema))

    def _why_not(self, node: SlurmNode) -> str | None:
        if node.handed_to is not None and not self.releasing:
            return f"{handed_note(node)}: its owner tests it"
        if not node.drained:
            return f"not drained ({node.state_text}): a burn-in would share the node with jobs (slurm.drain it first)"
        if node.state in BUSY or "COMPLETING" in node.flags:
            return f"draining ({node.state_text}): jobs still run there, and would share it with the burn-in"
        return None

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (skip := skipped(params)) is not None:
            return skip
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        seen: dict[str, Any] = {"node": node.name, "from": ref.source, "found": True, "current": node.summary()}
        if (why_not := missing(params, ("python",), self.name) or self._why_not(node)) is not None:
            return {**seen, "can_act": False, "why_not": why_not, "would": "nothing"}
        argv = command_of(params).argv()
        return {**seen, "would": f"run {' '.join(argv)} on {node.name} (srun --no-allocate) and judge its figure",
                "baselines": dict(params["baselines"]), "tolerance": params["tolerance"]}  # fmt: skip

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (skip := skipped(params)) is not None:
            return skip
        if (lacking := missing(params, ("python",), self.name)) is not None:
            raise ActionError(lacking)
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        if (why_not := self._why_not(node)) is not None:
            raise ActionError(f"slurm.burnin refused on {node.name}: {why_not}")
        argv = command_of(params).argv()
        # The benchmark ends itself at `timeout`; srun gets a grace past it to bring its output back.
        timeout = max(1.0, min(params["timeout"] + SRUN_GRACE, ctx.remaining() - 1.0))
        output = self.client.run_on_drained(node.name, argv, chdir=Path(params["workdir"]), timeout=timeout)
        try:
            measured = Measurement.parse(output)
        except BadMeasurement as exc:
            raise ActionError(f"slurm.burnin on {node.name}: {exc}") from exc
        verdict = judged(measured, params)
        after = self.read(ref)
        result = {"outcome": "passed" if verdict.passed else "fell_short", "node": node.name, **verdict.summary(),
                  "measurement": asdict(measured), "command": argv, "still_drained": after.drained,
                  "current": after.summary()}  # fmt: skip
        if not verdict.passed:
            raise BurninFailedStep(f"burn-in of {node.name} failed: {verdict.why}", result)
        return result
