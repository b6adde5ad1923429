"""`log`: record a message in the server's log and in the step's result. Changes nothing else."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import Action, StepContext, Where
from remediate.actions.schema import Param, ParamSchema

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class LogAction(Action):
    name: ClassVar[str] = "log"
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = True
    description: ClassVar[str] = "Record a message (useful to try playbooks and as an audit marker)."
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "message": Param(str, required=True, doc="text to record; may use templates"),
            "level": Param(str, default="info", choices=tuple(_LEVELS), doc="log level"),
        }
    )

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would_log": params["message"], "level": params["level"]}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ctx.logger.log(_LEVELS[params["level"]], "run %s playbook %s: %s", ctx.run_id, ctx.playbook, params["message"])
        return {"logged": params["message"], "level": params["level"]}
