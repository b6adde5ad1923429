"""`disk.cleanup`: free space on a filesystem by deleting what its node-side cleanup policy allows, oldest first.

The step picks a policy by `policy` name (written in the playbook) or by `mountpoint`
(usually "{{ labels.mountpoint }}" from node_exporter), matched exactly against the
policies' mountpoints: an alert chooses among the node's policies, it never supplies a
path. The target is `free_percent` or `free_bytes`; `max_files`/`max_bytes` may lower
the policy's caps, never raise them. What may be deleted, and how safely, is in
`remediate.disk` and docs/disk-cleanup.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.disk import (
    Cleaner,
    CleanupPolicy,
    FsHooks,
    NoPoliciesConfigured,
    PolicyError,
    PolicySet,
    Target,
    parse_size,
    statvfs_space,
)
from remediate.disk.fs import FreeSpace
from remediate.disk.policy import NAME
from remediate.errors import ActionError, ParamsError, parsed_by

PolicyProvider = Callable[[], PolicySet]
DEADLINE_MARGIN = 2.0
"""Seconds before the step's deadline at which a cleanup stops starting new deletions."""


def _check_policy_name(value: str) -> str | None:
    return None if NAME.match(value) else "must be a policy name (letters, digits, '.', '_', '-')"


def _check_mountpoint(value: str) -> str | None:
    if not value.startswith("/") or "\0" in value or len(value) > 4096:
        return "must be an absolute mountpoint as node_exporter reports it (it only selects a policy)"
    return None


_check_size = parsed_by(parse_size, ValueError)


def _check_percent(value: float) -> str | None:
    return None if 0 < value <= 100 else "must be more than 0 and at most 100"


def _check_positive(value: int) -> str | None:
    return None if value >= 1 else "must be at least 1"


@dataclass(eq=False)
class DiskCleanupAction(Action):
    name: ClassVar[str] = "disk.cleanup"
    where: ClassVar[Where] = Where.NODE
    idempotent: ClassVar[bool] = True  # a second run only finds what the first left
    description: ClassVar[str] = (
        "Delete what the node's cleanup policy allows, oldest first, until a free-space target or a cap is reached."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "policy": Param(str, static=True, check=_check_policy_name, doc="cleanup policy by name"),
            "mountpoint": Param(
                str,
                check=_check_mountpoint,
                doc="pick the policy serving this mountpoint (exact match); may be {{ labels.mountpoint }}",
            ),
            "free_percent": Param(float, check=_check_percent, doc="stop once this % of the filesystem is free"),
            "free_bytes": Param(str, check=_check_size, doc="stop once this much is free (bytes or e.g. 50GiB)"),
            "max_files": Param(int, check=_check_positive, doc="lower the policy's per-run cap on files"),
            "max_bytes": Param(str, check=_check_size, doc="lower the policy's per-run cap on bytes"),
            "missing_policy": Param(
                str,
                default="fail",
                choices=("fail", "skip"),
                doc="when no policy serves the mountpoint: fail the step, or skip it (recorded)",
            ),
        }
    )
    settings_section: ClassVar[str] = "disk"

    policies: PolicyProvider
    _: KW_ONLY
    free_space: FreeSpace = statvfs_space
    hooks: FsHooks | None = None
    clock: Callable[[], float] = time.time

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        from remediate.disk import PolicySource

        return cls(PolicySource(deps.settings.cleanup_policies_file))

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        result = self.schema.validate(params)
        if ("policy" in result) == ("mountpoint" in result):
            raise ParamsError("give exactly one of policy, mountpoint")
        if ("free_percent" in result) == ("free_bytes" in result):
            raise ParamsError("give exactly one of free_percent, free_bytes")
        for key in ("free_bytes", "max_bytes"):
            if key in result:
                result[key] = parse_size(result[key])
        if result.get("max_bytes") == 0:
            raise ParamsError("parameter 'max_bytes': must be at least 1 byte")
        return result

    def _policy(self, params: Mapping[str, Any]) -> tuple[CleanupPolicy | None, str]:
        """The policy the step names, or (None, why) when a mountpoint has none and missing_policy is skip."""
        skip = params.get("missing_policy") == "skip"
        try:
            policies = self.policies()
        except NoPoliciesConfigured as exc:
            if skip and "mountpoint" in params:
                return None, str(exc)
            raise ActionError(str(exc)) from None
        except PolicyError as exc:
            raise ActionError(str(exc)) from None
        if "policy" in params:
            policy = policies.by_name(params["policy"])
            if policy is None:
                raise ActionError(
                    f"no cleanup policy named {params['policy']!r} in {policies.source or 'the policies file'} "
                    f"(known: {', '.join(policies.names()) or 'none'})"
                )
            return policy, ""
        policy = policies.by_mountpoint(params["mountpoint"])
        if policy is None:
            why = (
                f"no cleanup policy serves mountpoint {params['mountpoint']!r} "
                f"(policies serve: {', '.join(policies.mountpoints()) or 'none'})"
            )
            if skip:
                return None, why
            raise ActionError(why)
        return policy, ""

    def _cleaner(self, policy: CleanupPolicy) -> Cleaner:
        return Cleaner(policy, free_space=self.free_space, hooks=self.hooks, clock=self.clock)

    @staticmethod
    def _target(params: Mapping[str, Any]) -> Target:
        return Target(free_percent=params.get("free_percent"), free_bytes=params.get("free_bytes"))

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        policy, why = self._policy(params)
        if policy is None:
            return {"skipped": True, "reason": why, "would_delete": [], "would_delete_files": 0}
        return self._cleaner(policy).plan(
            self._target(params), max_files=params.get("max_files"), max_bytes=params.get("max_bytes")
        )

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        policy, why = self._policy(params)
        if policy is None:
            return {"skipped": True, "reason": why, "deleted": [], "deleted_files": 0, "bytes_freed": 0}
        result = self._cleaner(policy).execute(
            self._target(params),
            max_files=params.get("max_files"),
            max_bytes=params.get("max_bytes"),
            expired=lambda: ctx.remaining() < DEADLINE_MARGIN,
        )
        ctx.logger.info("run %s playbook %s: disk.cleanup %s", ctx.run_id, ctx.playbook, result["summary"])
        return result
