"""`training.command`: send a training job one of the commands it declared itself, checked against its schema.

A job built on `remediate.training` lists every command it handles in its ``job.json``
(``commands``: name -> params schema, `remediate.training.commands`): the built-in ones
(rollback, scale_lr, checkpoint, skip_batches, restart), the shipped batching ones (reduce_batch_size,
set_dataloader_workers) when it attached a `Batching`, and its own (``@control.handler``).
This step names the command and its params::

    - action: training.command
      with:
        command: reduce_batch_size
        params: {factor: 0.5}            # or templated: {to: "{{ labels.batch_size }}"}

The params are typed by the job's schema (a string rendered from a label becomes the declared
integer/number/boolean) and checked against it when the step is planned and again before it
sends: a command the job did not declare, or params outside its schema, make the plan say
``can_act: false`` with ``why_not`` and fail the step with that reason — nothing is written to
the job's inbox. A job on an older library (no ``commands`` in job.json) can still be sent the
built-in commands it lists in ``kinds``; it checks their params itself.

Everything else — finding the job, expect_pod/expect_namespace, wait_for_job, delivery with
expiry, the wake-up signal, waiting for the acknowledgement, the pid check, late outcomes — is
the same as for the other training actions (`remediate.actions.training`). The step's result
holds the handler's own result from the acknowledgement (e.g. micro_batch_size_before/after).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.schema import Param, ParamSchema
from remediate.actions.training import COMMON_PARAMS, _TrainingAction
from remediate.errors import parsed_by
from remediate.training.commands import SchemaError, check_schema, coerce, describe, problems
from remediate.training.protocol import BUILTIN_KINDS, Registration, check_kind

_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_VALUE_CHARS = 1024


def _params_check(value: dict[str, Any]) -> str | None:
    for name, item in value.items():
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            return f"param name {str(name)[:80]!r} is not allowed (letters, digits, '_')"
        if item is not None and not isinstance(item, str | int | float | bool):
            return f"param {name!r} must be a string, number or boolean (the job's schema types it), got {item!r}"
        if isinstance(item, str) and len(item) > MAX_VALUE_CHARS:
            return f"param {name!r} is longer than {MAX_VALUE_CHARS} characters"
    return None


class TrainingCommandAction(_TrainingAction):
    name: ClassVar[str] = "training.command"
    kind: ClassVar[str] = "command"
    description: ClassVar[str] = (
        "Send a training job a command it declared in its registration (reduce_batch_size, "
        "set_dataloader_workers, skip_batches, restart, its own), with params checked against its declared schema."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            **COMMON_PARAMS,
            "command": Param(
                str,
                required=True,
                static=True,
                check=parsed_by(check_kind, ValueError),
                doc="the command's name, as the job declared it in job.json (e.g. reduce_batch_size)",
            ),
            "params": Param(
                dict,
                default={},
                check=_params_check,
                doc="the command's params (values may be templated from labels); checked against the "
                "job's declared schema before anything is sent",
            ),
        }
    )

    def command_kind(self, params: Mapping[str, Any]) -> str:
        return str(params["command"])

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in (params.get("params") or {}).items() if v is not None}

    def command_params_for(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        raw = self.command_params(params)
        schema = (registration.commands or {}).get(self.command_kind(params))
        try:
            return coerce(check_schema(schema), raw) if schema is not None else raw
        except SchemaError:
            return raw  # `refusal` reports the unreadable schema

    def refusal(self, params: Mapping[str, Any], registration: Registration) -> str | None:
        name = self.command_kind(params)
        job = registration.job
        if registration.commands is None:
            if name in BUILTIN_KINDS and (not registration.kinds or name in registration.kinds):
                return None  # an older library: it checks the params of its built-in commands itself
            return (
                f"training job {job!r} declares no commands in its registration (an older remediate.training; "
                f"it handles {', '.join(registration.kinds) or 'the built-in commands'}): only the built-in "
                f"commands {', '.join(BUILTIN_KINDS)} can be sent to it, not {name!r}"
            )
        declared = registration.commands.get(name)
        if declared is None:
            known = ", ".join(sorted(registration.commands)) or "none"
            why = registration.refused.get(name)
            if why:
                return (
                    f"training job {job!r} does not declare command {name!r} (it declares: {known}): its "
                    f"{registration.framework or 'training'} integration cannot apply it: {why}; change that in the "
                    'job (docs/training-protocol.md, "Batch size and data loader workers") and restart it'
                )
            return (
                f"training job {job!r} does not declare command {name!r} (it declares: {known}): a job declares "
                "a command by handling it (a Batching for reduce_batch_size and set_dataloader_workers, "
                'control.handler() for its own; docs/training-protocol.md, "Declared commands")'
            )
        try:
            schema = check_schema(declared)
        except SchemaError as exc:
            return f"training job {job!r} declares command {name!r} with a schema remediate cannot read: {exc}"
        found = problems(schema, coerce(schema, self.command_params(params)))
        if found:
            return (
                f"the params of command {name!r} do not match what training job {job!r} declares "
                f"({describe(schema)}): {'; '.join(found)}"
            )
        return None

    def plan_extra(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        declared = (registration.commands or {}).get(self.command_kind(params))
        if registration.commands is None:
            return {
                "declared_schema": None,
                "schema_check": "not checked: the job declares no commands (an older library)",
            }
        return {"declared_schema": declared}
