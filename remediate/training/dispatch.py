"""The commands a job handles: the built-in handlers, a `Batching`'s, the job's own; judging and applying one.

On rank 0 a claimed command is judged first (`refusal`: expired, not supported by this integration, no
handler, params outside the declared schema); one that passes is prepared there and sent to every rank,
where `apply` runs its handler and reports the outcome that rank 0 acknowledges.
"""

from __future__ import annotations

import logging
from typing import Any

from remediate.training.commands import open_schema, problems
from remediate.training.distributed import LocalChannel, TorchChannel
from remediate.training.handle import ControlHandle
from remediate.training.handlers import BUILTIN_HANDLERS, CommandContext, CommandRejected, Handler, RestartRequested
from remediate.training.inbox import Claimed, Inbox
from remediate.training.outbox import Outbox, unlink
from remediate.training.protocol import APPLIED, EXPIRED, FAILED, REJECTED, RESTART, Command

log = logging.getLogger("remediate.training")


class Commands:
    """Command kind -> its handler, less the kinds this integration cannot apply (`unsupported`: kind -> why);
    and the loop that takes the claimed commands through them."""

    def __init__(self, framework: str, unsupported: dict[str, str] | None, inbox: Inbox, outbox: Outbox) -> None:
        self.framework = framework
        self.inbox = inbox
        self.outbox = outbox
        # The caller's own dict (not a copy): a framework callback refuses more once it has seen the trainer.
        self.unsupported = unsupported if unsupported is not None else {}
        self.handlers = {kind: h for kind, h in BUILTIN_HANDLERS.items() if kind not in self.unsupported}

    def add(self, kind: str, handler: Handler) -> None:
        """Handle `kind` with `handler` (a handler you add yourself lifts an unsupported kind: you wired it)."""
        self.unsupported.pop(kind, None)
        self.handlers[kind] = handler

    @property
    def declared(self) -> dict[str, dict[str, Any]]:
        """Every command this job handles -> its declared params schema (what job.json lists)."""
        return {kind: handler.schema or open_schema() for kind, handler in sorted(self.handlers.items())}

    def run(
        self, control: ControlHandle, channel: LocalChannel | TorchChannel, step: int, pending: list[Claimed]
    ) -> int:
        """Apply the commands rank 0 took (`pending`) on every rank, one at a time; the step to continue from."""
        rank, world_size = control.rank, control.world_size
        while True:
            payload = None
            while rank == 0:
                try:
                    payload = self._next_payload(control, pending, step)
                    break
                except OSError as exc:  # every rank must still get the broadcast below
                    self.inbox.io_trouble("handling a command", exc)
                    if not pending:
                        break
            payload = channel.broadcast(payload)
            if payload is None:
                return step
            command = Command.from_dict(payload["command"])
            ctx = CommandContext(command, dict(payload["params"]), control, step, rank, world_size)
            outcomes = channel.gather(self.apply(ctx))
            if rank == 0:
                try:
                    self.outbox.answer_ranks(command, float(payload["received_at"]), outcomes)
                except OSError as exc:
                    self.inbox.io_trouble(f"acknowledging {command.id}", exc)
            if command.kind == RESTART and all(o["status"] == APPLIED for o in outcomes):
                # One more collective: no rank exits before rank 0 wrote the acknowledgement (a launcher
                # stops the other ranks as soon as one exits). Then every rank exits, at the same step.
                channel.broadcast(None)
                raise RestartRequested(ctx.step)
            step = ctx.step

    def _next_payload(self, control: ControlHandle, pending: list[Claimed], step: int) -> dict[str, Any] | None:
        """The next command to send to every rank, answering the ones that are not applied on the way (rank 0)."""
        while pending:
            command_id, received, command = pending.pop(0)
            if not isinstance(command, Command):
                self.inbox.record_applied(command_id)
                self.outbox.answer(command_id, "", REJECTED, f"not a valid command: {command}", received, step)
                continue
            if command_id in self.inbox.applied:
                if self.inbox.paths.ack(command_id).exists():
                    unlink(self.inbox.paths.taken_command(command_id))
                    continue
                refused: tuple[str, str] | None = (
                    REJECTED,
                    "this command id was taken before; a command is applied at most once",
                )
            else:
                self.inbox.record_applied(command_id)
                ctx = CommandContext(command, dict(command.params), control, step, control.rank, control.world_size)
                refused = self.refusal(command, received) or self.prepare(ctx)
                if refused is None:
                    return {"command": command.to_dict(), "params": ctx.params, "received_at": received}
            self.outbox.answer(command_id, command.kind, *refused, received, step)
        return None

    def refusal(self, command: Command, received: float) -> tuple[str, str] | None:
        """(status, why) when the command is not to be applied at all; None when it goes to its handler."""
        if command.expired(received):
            return EXPIRED, f"expired {received - command.expires_at:.1f} s before the job saw it; not applied"
        handler = self.handlers.get(command.kind)
        if handler is None and command.kind in self.unsupported:
            return REJECTED, (
                f"{command.kind!r} is not supported by this integration ({self.framework}): "
                f"{self.unsupported[command.kind]}; nothing was changed"
            )
        if handler is None:
            return (
                REJECTED,
                f"this job has no handler for {command.kind!r} (it handles {', '.join(sorted(self.handlers))})",
            )
        invalid = problems(handler.schema, command.params) if handler.schema is not None else []
        if invalid:
            return REJECTED, (f"params do not match what this job declares for {command.kind!r}: {'; '.join(invalid)}")
        return None

    def prepare(self, ctx: CommandContext) -> tuple[str, str] | None:
        """Run the handler's `prepare` (rank 0); (status, why) when it refused or failed."""
        handler = self.handlers[ctx.command.kind]
        if handler.prepare is None:
            return None
        try:
            handler.prepare(ctx)
        except CommandRejected as exc:
            return REJECTED, str(exc)
        except Exception as exc:
            log.exception("remediate: preparing %s command %s failed", ctx.command.kind, ctx.command.id)
            return FAILED, _describe(exc)
        return None

    def apply(self, ctx: CommandContext) -> dict[str, Any]:
        """Apply the command on this rank: its outcome (rank, status, detail, steps, result) for the acknowledgement."""
        before = ctx.step
        handler = self.handlers.get(ctx.command.kind)
        try:
            if handler is None:
                raise CommandRejected(f"rank {ctx.rank} has no handler for {ctx.command.kind!r}")
            returned = handler.apply(ctx)
            if isinstance(returned, dict):  # a handler's own facts go into the acknowledgement
                ctx.result.update(returned)
            status, detail = APPLIED, ctx.detail or f"{ctx.command.kind} applied"
        except CommandRejected as exc:
            status, detail = REJECTED, str(exc)
            ctx.step = before
        except Exception as exc:
            log.exception("remediate: applying %s command %s failed", ctx.command.kind, ctx.command.id)
            status, detail = FAILED, _describe(exc)
        return {
            "rank": ctx.rank,
            "status": status,
            "detail": detail,
            "step_before": before,
            "step_after": ctx.step,
            "result": ctx.result,
        }


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
