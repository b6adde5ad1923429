"""The chat message that a run awaits approval, sent when it starts waiting (docs/playbooks.md, "Chat messages").

An approve-mode run is stored `awaiting_approval` by the ingest and no step of it runs until a person
approves it, so its own notify.slack / notify.teams steps (and `notify` to a Slack or Teams sink) speak only
afterwards. The `Announcer` tells
the on-call at once: for each run awaiting approval whose steps include a chat step, one message to each
distinct webhook of those steps (their params: a URL written in the playbook or a Secret's file, never a
label), rendered as that step's action renders it, with `awaiting_approval` (what fired, what remediate
will do once approved, a link to `{public_url}/ui/runs/<id>` where the Approve button is).

Who: the executor process, one thread of its own, woken with the executor (the ingest's `on_queued`
datagram also fires for the awaiting runs it stored) and polling every `poll_interval` besides; never
an HTTP worker, so no chat call sits in the webhook's request. Each look for work is a read; a write
only takes a run found (store.announcements); looks that find nothing are `MIN_LOOK_GAP_S` apart at least,
however many ingests wake it.

Delivery: at most once per run, and in practice exactly once. The run is taken (`runs.announced_at`)
by one atomic update that matches only while it awaits approval and was never taken, before anything
is sent: a second announcer (another replica) never sends it again, and a run approved or cancelled
first is never announced. A POST that provably sent nothing (refused, unresolved, connect time-out) is
tried again `tries` times; one that may have reached the chat (no answer, 5xx, 429) is not, as the
notify actions do (a duplicate page at 3 a.m. costs trust; a missing one is visible: the outcome is on
the run's page and /runs/<id> as `announce_error`, in `remediate_approval_announcements_total{outcome}`,
and the run is listed on the /ui/ state page with its Approve button). An announcer that dies mid-send
leaves the run taken with the note `store.announcements.SENDING`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol, runtime_checkable

from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.errors import RetryableActionError, StoreUnavailable
from remediate.executor.context import StepContexts
from remediate.runs import ClaimedRun, StepRecord
from remediate.store import Store

log = logging.getLogger("remediate.announce")

SENT, FAILED = "sent", "failed"
"""Outcomes of one run's announcement (the metric's `outcome` label): sent to every webhook, or not."""
STORE_RETRY_MAX_S = 10.0
MIN_LOOK_GAP_S = 0.25
"""The shortest time between two looks that found nothing: every ingest that queued runs wakes the announcer,
and an empty look (a read, ~0.4 ms on SQLite) per wake-up would add to each alert's cost under a storm; at
most four a second cost ~1.5 ms/s, and delay an announcement by a quarter of a second at most."""


@runtime_checkable
class Announces(Protocol):
    """An action that can announce a run awaiting approval to where its step would post (notify.slack,
    notify.teams: remediate.actions.chat.ChatWebhookAction.announce; notify to a Slack or Teams sink)."""

    def announce(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]: ...


def announcing_actions(registry: ActionRegistry) -> tuple[str, ...]:
    """The names of the registry's actions whose steps make a waiting run announced: those that report
    their run in chat (`reports_run`) and can say it waits."""
    return tuple(
        name
        for name in registry.names()
        if registry.get(name).reports_run and isinstance(registry.get(name), Announces)
    )


@dataclass(eq=False)
class Announcer:
    """Sends the message of each run that starts awaiting approval (see the module docstring)."""

    _: KW_ONLY
    store: Store
    registry: ActionRegistry
    poll_interval: float = 1.0
    clock: Callable[[], float] = time.time
    on_outcome: Callable[[str], None] = lambda outcome: None
    tries: int = 3
    """POSTs of one message at most, the later ones only after a try that provably sent nothing."""
    retry_wait: float = 1.0
    min_look_gap: float = MIN_LOOK_GAP_S
    actions: tuple[str, ...] = field(init=False)
    _woken: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.actions = announcing_actions(self.registry)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """One thread (in the process that calls it: the executor process, after the fork)."""
        if not self.actions:
            return  # no chat action registered: nothing can ever be announced
        self._thread = threading.Thread(target=self._loop, name="remediate-announcer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wake(self) -> None:
        """Runs were stored (some may await approval): look now. Wakes during a look make one more look."""
        self._woken.set()

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            self._woken.clear()
            try:
                worked = self.run_once()
            except StoreUnavailable as exc:
                backoff = min(STORE_RETRY_MAX_S, max(self.poll_interval, 2 * backoff))
                log.warning("announcer: the store is unavailable (%s); looking again in %.1fs", exc, backoff)
                self._stopping.wait(backoff)
                continue
            except Exception:
                log.exception("announcer error; looking again")
                worked = False
            backoff = 0.0
            if not worked:
                looked = time.monotonic()
                self._woken.wait(self.poll_interval)
                self._stopping.wait(max(0.0, self.min_look_gap - (time.monotonic() - looked)))

    # ------------------------------------------------------------------ announcing

    def run_once(self) -> bool:
        """Take one run awaiting approval and announce it; False when none is left to announce."""
        run = self.store.announcements.take(self.clock(), self.actions)
        if run is None:
            return False
        self.announce(run)
        return True

    def announce(self, run: ClaimedRun) -> None:
        """Post the run's message to each of its chat steps' webhooks (once each), and record the outcome."""
        steps = run.steps or ()
        errors = []
        sent = 0
        contexts = StepContexts(stopping=self._stopping)
        for step in _distinct_webhooks(steps, self.actions):
            try:
                action = self.registry.get(step.action)
                params = action.validate(step.params)
                self._post(action, params, contexts.context(run, step, time.monotonic() + step.timeout, steps=steps))
                sent += 1
            except Exception as exc:
                errors.append(f"step {step.idx} {step.name} ({step.action}): {exc}")
        error = "; ".join(errors) or None
        self.on_outcome(FAILED if error else SENT)
        if error:
            log.warning("run %s awaits approval; its announcement failed: %s", run.id, error)
        else:
            log.info("run %s awaits approval: announced to %d chat webhook(s)", run.id, sent)
        self.store.announcements.record(run.id, error=error)

    def _post(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> None:
        assert isinstance(action, Announces)
        for attempt in range(1, self.tries + 1):
            try:
                action.announce(params, ctx)
                return
            except RetryableActionError:  # nothing was sent: trying again cannot send it twice
                if attempt == self.tries or self._stopping.wait(self.retry_wait * attempt):
                    raise


def _distinct_webhooks(steps: tuple[StepRecord, ...], actions: tuple[str, ...]) -> Iterator[StepRecord]:
    """The chat steps, the first of each (action, url, url_file or sink): two steps to one channel get one
    message."""
    seen: set[tuple[str, ...]] = set()
    for step in steps:
        if step.action not in actions:
            continue
        where = (step.action, *(str(step.params.get(key, "")) for key in ("url", "url_file", "sink")))
        if where not in seen:
            seen.add(where)
            yield step
