"""`k8s.burnin`: the burn-in of a node remediate took out of service, as a Job pinned to it (spec.nodeName:
no scheduler, so a cordon does not keep it off) that tolerates remediate's taints on it, its figure judged
against the baseline of the GPU model it ran on; a failed burn-in fails the step. The params a step does not write
come from the site's `burnin_*` settings (remediate.config.burnin); with no baseline table at all the step reports
itself skipped, and with one but no `image` (or `namespace`) it fails naming the setting.

The Job runs `<python> -m remediate.burnin ...` in `image` (torch and remediate installed), backoffLimit 0
(one try: a burn-in that fails once has failed), activeDeadlineSeconds = the timeout, and is named from the
run, the step and the node, so a retry of the step finds its Job (409 on create) and waits for it instead of
starting a second; `remediate node release` (no run: `for_release`) names it from the time it starts instead, so
a second release of the node reads its own Job, never the verdict of the one before. The figure is the last
JSON line of its pod's log (remediate.burnin.verdict). The Job is left for the TTL controller
(ttlSecondsAfterFinished), so that its pod's log can be read meanwhile.

Every part of the command line and the pod is a static param or comes from the node's fresh read (its name,
checked, and the taints remediate's own annotation records): no alert label reaches it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

from remediate.actions.base import ActionDeps, StepContext
from remediate.actions.burnin_common import (
    BURNIN_PARAMS,
    SITE,
    BurninFailedStep,
    command_of,
    judged,
    missing,
    skipped,
    with_site_defaults,
)
from remediate.actions.k8s.common import ClientProvider, KubeAction, KubeOptions, digest, node_schema
from remediate.actions.schema import Param, ParamSchema
from remediate.burnin.command import check_image, check_namespace
from remediate.burnin.verdict import BadMeasurement, Measurement
from remediate.config.burnin import BurninSettings
from remediate.errors import ActionError, RetryableActionError
from remediate.kube import KubeConflict, NodeInfo
from remediate.kube.jobs import JobCalls, JobState

__all__ = ["BurninFailedStep", "KubeBurninAction"]

UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TTL_SECONDS = 3600
"""How long a finished burn-in Job (and its pod's log) stays for a person to read."""


K8S_PARAMS = {
    "image": Param(str, static=True, check=check_image,
                   doc="the container image of the burn-in, with torch and remediate installed "
                   f"({SITE.format(name='image')}; needed to run)"),
    "namespace": Param(str, static=True, check=check_namespace,
                       doc="namespace of the burn-in Job: the one remediate's chart grants Jobs in (its release's; "
                       f"{SITE.format(name='namespace')}, which the chart sets; needed to run)"),
}  # fmt: skip


class BurninStillRunning(RetryableActionError):
    """The burn-in Job has not finished within the step's time: a retry finds it and waits again."""


def job_name(ctx: StepContext, node: str, release: str | None = None) -> str:
    """The Job of a run's step, or of the release started at `release` (UTC, %Y%m%d%H%M%S): 50 characters at
    most, under the 63 a Job's name may have (its pods' job-name label)."""
    if release is not None:
        return f"remediate-burnin-release-{release}-{digest(node)}"
    return f"remediate-burnin-{ctx.run_id}-{ctx.step_index}-{digest(node)}"


class KubeBurninAction(KubeAction):
    name: ClassVar[str] = "k8s.burnin"
    verb: ClassVar[str] = "burnin"
    description: ClassVar[str] = (
        "Run a short all-reduce burn-in as a Job pinned to a node remediate took out of service (tolerating its "
        "taints) and judge its figure against the baseline of its GPU model; a figure below it fails the step."
    )
    schema: ClassVar[ParamSchema] = node_schema(**BURNIN_PARAMS, **K8S_PARAMS)
    poll_interval: float = 1.0
    """Seconds between two reads of the Job while it runs."""
    needs: ClassVar[tuple[str, ...]] = ("image", "namespace", "python")
    """The params it cannot run without, from the step or the site's settings."""

    def __init__(
        self,
        client: ClientProvider,
        options: KubeOptions | None = None,
        site: BurninSettings | None = None,
        *,
        release: str | None = None,
    ) -> None:
        super().__init__(client, options)
        self.site = site or BurninSettings()
        self.release = release
        """When `remediate node release` started (UTC, %Y%m%d%H%M%S): its Job is named from it (job_name)."""

    def for_release(self, started: datetime) -> KubeBurninAction:
        """This action, with the same backends and settings, as `remediate node release` started at `started`
        runs it (its own Job)."""
        stamp = started.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        return type(self)(self._client_provider, self.options, self.site, release=stamp)

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        built = super().from_deps(deps)
        return cls(built._client_provider, built.options, deps.burnin)

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The step's params over the site's `burnin_*` settings (its own win), checked as the schema says."""
        return super().validate(with_site_defaults(params, self.site, self.schema))

    def _why_not(self, node: NodeInfo) -> str | None:
        # A node handed to another system is its owner's to test, but for the release that takes it back.
        if self.release is None and (owned := self.owned_elsewhere(node)) is not None:
            return owned
        if not node.held_by_remediate:
            return "not taken out of service by remediate (no cordon, no taint of its own): a burn-in would share it"
        return None

    def job_body(self, params: Mapping[str, Any], ctx: StepContext, node: NodeInfo) -> dict[str, Any]:
        tolerations = [{"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]
        for taint in sorted(node.owned_taints()):
            key, _, effect = taint.rpartition(":")
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
        labels = {"app.kubernetes.io/managed-by": "remediate", "remediate.io/burnin-run": str(ctx.run_id)}
        container: dict[str, Any] = {"name": "burnin", "image": params["image"], "command": command_of(params).argv()}
        if params["backend"] == "nccl":
            container["resources"] = {"limits": {"nvidia.com/gpu": params["ranks"]}}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name(ctx, node.name, self.release), "namespace": params["namespace"],
                         "labels": labels, "annotations": {"remediate.io/burnin-node": node.name}},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": max(1, int(params["timeout"])),
                "ttlSecondsAfterFinished": TTL_SECONDS,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"nodeName": node.name, "restartPolicy": "Never", "tolerations": tolerations,
                             "containers": [container]},
                },
            },
        }  # fmt: skip

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (skip := skipped(params)) is not None:
            return skip
        _, node, seen = self.observe(params, ctx)
        if (why_not := missing(params, self.needs, self.name) or self._why_not(node)) is not None:
            return {**seen, "can_act": False, "why_not": why_not, "would": "nothing"}
        body = self.job_body(params, ctx, node)
        return {**seen, "would": f"create Job {params['namespace']}/{body['metadata']['name']} on {node.name} "
                f"running {' '.join(command_of(params).argv())}, and judge its figure", "job": body}  # fmt: skip

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (skip := skipped(params)) is not None:
            return skip
        if (lacking := missing(params, self.needs, self.name)) is not None:
            raise ActionError(lacking)
        ref = self.node_ref(params, ctx)
        node = self.read_node(ref, ctx)
        if (why_not := self._why_not(node)) is not None:
            raise ActionError(f"k8s.burnin refused on {node.name}: {why_not}")
        body = self.job_body(params, ctx, node)
        namespace, name = params["namespace"], body["metadata"]["name"]
        try:
            self.api(ctx, lambda c: JobCalls(c).create(namespace, body))
            created = "now"
        except KubeConflict:
            created = "earlier (an earlier attempt of this step)"
        state = self._wait(ctx, namespace, name, float(params["timeout"]))
        log = self.api(ctx, lambda c: JobCalls(c).log(namespace, name))
        argv = command_of(params).argv()
        seen = {"node": node.name, "job": f"{namespace}/{name}", "created": created, "command": argv}
        if state.failed:
            raise ActionError(f"burn-in Job {namespace}/{name} on {node.name} failed ({state.reason}: "
                              f"{state.message}); its log ends: {log[-300:]!r}")  # fmt: skip
        try:
            measured = Measurement.parse(log)
        except BadMeasurement as exc:
            raise ActionError(f"k8s.burnin on {node.name}: {exc}") from exc
        verdict = judged(measured, params)
        result = {"outcome": "passed" if verdict.passed else "fell_short", **seen, **verdict.summary(),
                  "measurement": asdict(measured)}  # fmt: skip
        if not verdict.passed:
            raise BurninFailedStep(f"burn-in of {node.name} failed: {verdict.why}", result)
        return result

    def _wait(self, ctx: StepContext, namespace: str, name: str, timeout: float) -> JobState:
        deadline = time.monotonic() + max(0.0, min(timeout, ctx.remaining() - 1.0))
        while True:
            state = self.api(ctx, lambda c: JobCalls(c).get(namespace, name))
            if state.finished:
                return state
            if time.monotonic() >= deadline:
                raise BurninStillRunning(f"burn-in Job {namespace}/{name} still running after {timeout:g} s")
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))
