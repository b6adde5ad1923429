"""The statuses (remediate.runs), a run built from a verdict (judging.engine), no bare status string elsewhere."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from remediate.actions.base import ActionRegistry
from remediate.intake.alerts import parse_notification
from remediate.judging.engine import Engine, Judged, decision_row, initial_status, run_row, step_rows
from remediate.judging.guards import Verdict
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.runs import (
    FINAL_RUN_STATUSES,
    AttemptOutcome,
    Decision,
    RunStatus,
    StepStatus,
)
from tests.conftest import alert_payload, notification_payload

PACKAGE = Path(__file__).resolve().parents[2] / "remediate"
NOW = 1_767_225_600.0

STATUS_VALUES = frozenset(v.value for enum in (RunStatus, StepStatus, AttemptOutcome, Decision) for v in enum)
# Calls whose positional arguments are statuses or outcomes.
STATUS_CALLS = frozenset(
    {"finish_attempt", "step_finished", "run_finished", "RunEnd", "StepEnd"}
    | {"in_", "not_in"}  # SQLAlchemy's column IN (...)
)
STATUS_NAMES = frozenset({"status", "outcome"})
ALLOWED = frozenset({("training/protocol.py", "rejected"), ("training/protocol.py", "failed")})
"""(path relative to remediate/, value) of literals that look like our statuses and are not: the training
job's command acknowledgements are a file protocol of their own."""


def _literals(node: ast.AST | None) -> list[ast.Constant]:
    """The string constants of `node`, or of the tuple/list/set it is."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [c for e in node.elts for c in _literals(e)]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def status_literals(tree: ast.AST) -> list[ast.Constant]:
    """String literals equal to a status, where a status goes: compared, passed or stored as one.

    Words that merely look like statuses elsewhere (a `timeout` param, a `{"skipped": ...}` key,
    `getattr(exc, "maybe_applied")`) are not statuses and are not looked at.
    """
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += _literals(operand)
        elif isinstance(node, ast.keyword) and node.arg in STATUS_NAMES:
            found += _literals(node.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in STATUS_NAMES:
                    found += _literals(value)
        elif isinstance(node, ast.Call) and _called_name(node) in STATUS_CALLS:
            for arg in node.args:
                found += _literals(arg)
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            pairs = list(zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
            for arg, default in pairs:
                if arg.arg in STATUS_NAMES:
                    found += _literals(default)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            # `status = ...`, `DONE_STATUSES = (...)`, and constants spelling a status (`QUEUED = "queued"`).
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            literals = _literals(node.value)
            if names & STATUS_NAMES or any("STATUS" in n.upper() for n in names):
                found += literals
            else:
                found += [c for c in literals if c.value.upper() in names]
    return [c for c in found if c.value in STATUS_VALUES]


def _parse(path: Path) -> ast.AST:
    # CPython 3.11 keeps the AST constructor's recursion depth in state shared by threads: a parse while a
    # leftover thread of an earlier test in this worker parses too may raise "AST constructor recursion depth
    # mismatch" (seen twice in 3,000-test runs). The source is the same: parse it again.
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except SystemError:
        return ast.parse(path.read_text(), filename=str(path))


def bare_statuses(package: Path) -> list[str]:
    hits = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative == "runs.py":
            continue
        for constant in status_literals(_parse(path)):
            if (relative, constant.value) not in ALLOWED:
                hits.append(f"remediate/{relative}:{constant.lineno}: {constant.value!r}")
    return hits


def test_no_bare_status_string_outside_runs() -> None:
    hits = bare_statuses(PACKAGE)
    assert not hits, "use the enums of remediate.runs (RunStatus, StepStatus, AttemptOutcome, Decision):\n" + "\n".join(
        hits
    )


@pytest.mark.parametrize(
    "source",
    [
        'if step.status == "interrupted": pass',
        'x = status in ("queued", "running")',
        'StepEnd(1, "succeeded")',
        'store.queue.finish_attempt(1, 2, "maybe_applied", None, 0)',
        'q.values(status="skipped")',
        'row = {"status": "pending"}',
        'def fail(error, *, status="failed"): pass',
        'def fail(error, status="failed"): pass',
        'DONE_STEP_STATUSES = ("succeeded", "planned")',
        'if decision == "cooldown": pass',
        'outcome = "retryable_error" if retry else "maybe_applied"',
        'q.where(t.steps.c.status.in_((FAILED, "interrupted")))',
        'QUEUED = "queued"',
    ],
)
def test_the_scan_finds_a_bare_status(source: str) -> None:
    assert status_literals(ast.parse(source))


@pytest.mark.parametrize(
    "source",
    [
        'timeout = params["timeout"]',
        'return {"skipped": True, "reason": why}',
        'flag = getattr(exc, "maybe_applied", False)',
        'if alert.status == "firing": pass',
        'log.info("step failed")',
        "if step.status == StepStatus.INTERRUPTED: pass",
    ],
)
def test_the_scan_leaves_other_words_alone(source: str) -> None:
    assert not status_literals(ast.parse(source))


def test_statuses_equal_the_stored_strings() -> None:
    # The database and the HTTP API hold the plain strings: the enums must keep equal to them.
    assert RunStatus.AWAITING_APPROVAL == "awaiting_approval"
    assert json.dumps({"status": StepStatus.SKIPPED}) == '{"status": "skipped"}'
    assert f"{AttemptOutcome.MAYBE_APPLIED}" == "maybe_applied"
    assert set(FINAL_RUN_STATUSES) == set(RunStatus) - {
        RunStatus.QUEUED,
        RunStatus.AWAITING_APPROVAL,
        RunStatus.RUNNING,
    }


@pytest.mark.parametrize(
    ("accepted", "awaits_approval", "status"),
    [
        (True, False, RunStatus.QUEUED),
        (True, True, RunStatus.AWAITING_APPROVAL),
        (False, False, RunStatus.REJECTED),
        (False, True, RunStatus.REJECTED),
    ],
)
def test_initial_status(accepted: bool, awaits_approval: bool, status: RunStatus) -> None:
    assert initial_status(accepted, awaits_approval) is status


def _judged(registry: ActionRegistry, mode: str, status: str = "firing") -> Judged:
    playbook = parse_playbook(
        {
            "name": "hot",
            "match": {"alertname": "GpuHot"},
            "mode": mode,
            "target": "node",
            "steps": [{"action": "log", "with": {"message": "hot {{ labels.node }}"}, "retries": 0, "always": True}],
            "on_resolved": [{"action": "log", "with": {"message": "cooled"}}],
        },
        registry,
    )
    engine = Engine(store=None, playbooks=PlaybookSet([playbook]), registry=registry)
    payload = notification_payload(alert_payload("GpuHot", status=status, labels={"node": "n1"}))
    alert = parse_notification(payload).alerts[0]
    (evaluation,) = engine.evaluate(alert)
    return Judged(0, alert, evaluation, Verdict(Decision.ACCEPTED, "matched playbook hot"))


def test_run_row_of_an_accepted_firing_run(registry: ActionRegistry) -> None:
    judged = _judged(registry, "enforce")
    row = run_row(judged, alert_id=7, now=NOW)
    assert row["status"] is RunStatus.QUEUED
    assert (row["playbook"], row["alertname"], row["target"], row["phase"], row["mode"]) == (
        "hot",
        "GpuHot",
        "n1",
        "firing",
        "enforce",
    )
    assert (row["alert_id"], row["created_at"], row["finished_at"], row["error"], row["after_run_id"]) == (
        7,
        NOW,
        None,
        None,
        None,
    )


def test_approve_mode_waits_when_firing_only(registry: ActionRegistry) -> None:
    assert run_row(_judged(registry, "approve"), 1, NOW)["status"] is RunStatus.AWAITING_APPROVAL
    assert run_row(_judged(registry, "approve", status="resolved"), 1, NOW)["status"] is RunStatus.QUEUED


def test_a_rejected_run_is_finished_with_the_reason(registry: ActionRegistry) -> None:
    base = _judged(registry, "enforce")
    judged = Judged(0, base.alert, base.evaluation, Verdict(Decision.REJECTED, "params: bad"), firing_run=(3, "failed"))
    row = run_row(judged, 1, NOW)
    assert (row["status"], row["finished_at"], row["error"], row["after_run_id"]) == ("rejected", NOW, "params: bad", 3)


def test_step_rows_are_pending_and_rendered(registry: ActionRegistry) -> None:
    judged = _judged(registry, "enforce")
    (row,) = step_rows(42, judged.evaluation)
    assert row["status"] is StepStatus.PENDING
    assert (row["run_id"], row["idx"], row["action"], row["retries"], row["always"]) == (42, 0, "log", 0, True)
    assert json.loads(row["params"])["message"] == "hot n1"
    assert step_rows(42, None) == []


def test_decision_row_takes_the_run_status_or_the_decision(registry: ActionRegistry) -> None:
    judged = _judged(registry, "enforce")
    with_run = decision_row(5, 7, judged, 9, RunStatus.QUEUED, NOW)
    assert (with_run["status"], with_run["decision"], with_run["run_id"]) == ("queued", "accepted", 9)
    refused = Judged(0, judged.alert, judged.evaluation, Verdict(Decision.COOLDOWN, "cooling down"))
    without = decision_row(5, 7, refused, None, None, NOW)
    assert (without["status"], without["reason"], without["alertname"]) == ("cooldown", "cooling down", "GpuHot")
