"""Loading playbooks: the YAML format, read with errors that name file, playbook and field.

One file per playbook in a directory. Loading checks everything that can be
checked before an alert arrives: keys, types, matcher syntax, durations, that
every action exists, and each step's non-templated params against the action's
schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence, Set
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from remediate.actions.base import ActionRegistry, Where
from remediate.actions.templating import check_syntax, is_template
from remediate.config.durations import format_duration, parse_duration
from remediate.config.rollout import Mode, RolloutError, parse_rollout
from remediate.config.schedulers import JobPath
from remediate.errors import PlaybookError
from remediate.intake.matchers import Matcher, MatcherSyntaxError, parse_matcher
from remediate.playbooks.model import (
    DEFAULT_RESET_AFTER,
    NAME_PATTERN,
    LeftOutStep,
    Playbook,
    PlaybookSet,
    Rung,
    StepSpec,
    TargetSpec,
)
from remediate.playbooks.repeat import parse_repeat_offender

_PLAYBOOK_KEYS = {
    "guard_by",
    "name",
    "description",
    "match",
    "mode",
    "target",
    "cooldown",
    "max_attempts",
    "steps",
    "on_resolved",
    "escalate",
    "reset_after",
    "rollout",
    "repeat_offender",
    "start_at",
}
_RUNG_KEYS = {"name", "holds_for", "mode", "cooldown", "max_attempts", "steps", "on_resolved"}
_STEP_KEYS = {"action", "with", "name", "timeout", "retries", "always", "continue_on_error", "run_on", "jobs"}
_MAX_RETRIES = 10


def load_directory(directory: Path, registry: ActionRegistry) -> tuple[list[Playbook], list[PlaybookError]]:
    """Every playbook of a directory and every error found; loads what it can."""
    if not directory.is_dir():
        return [], [PlaybookError(f"playbook directory {directory} does not exist", file=str(directory))]
    playbooks: list[Playbook] = []
    errors: list[PlaybookError] = []
    seen: dict[str, str] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        try:
            playbook = load_file(path, registry)
        except PlaybookError as exc:
            errors.append(exc)
            continue
        if playbook.name in seen:
            errors.append(
                PlaybookError(
                    f"name already used by {seen[playbook.name]}",
                    file=str(path),
                    playbook=playbook.name,
                    field="name",
                )
            )
            continue
        seen[playbook.name] = str(path)
        playbooks.append(playbook)
    return playbooks, errors


def load_playbooks(directory: Path, registry: ActionRegistry) -> PlaybookSet:
    """Load a directory, or raise one PlaybookError listing every problem."""
    playbooks, errors = load_directory(directory, registry)
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise PlaybookError(f"{len(errors)} invalid playbooks:\n" + "\n".join(f"  {e}" for e in errors))
    return PlaybookSet(playbooks)


def load_file(path: Path, registry: ActionRegistry) -> Playbook:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlaybookError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlaybookError(f"not valid YAML: {exc}", file=str(path)) from exc
    return parse_playbook(data, registry, source=str(path))


def parse_playbook(data: Any, registry: ActionRegistry, *, source: str = "<memory>") -> Playbook:
    if not isinstance(data, dict):
        raise PlaybookError("a playbook must be a YAML mapping", file=source)
    name = data.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise PlaybookError(
            "required; lower-case letters, digits, '.', '_' and '-', starting and ending with a letter or digit",
            file=source,
            field="name",
        )

    def fail(field: str, message: str) -> PlaybookError:
        return PlaybookError(message, file=source, playbook=name, field=field)

    _refuse_unknown_keys(data, _PLAYBOOK_KEYS, "", fail)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail("description", "must be a string")

    alertnames, matchers = _parse_match(data.get("match"), fail)
    mode = _parse_mode(data.get("mode", "enforce"), fail)
    target = _parse_target(data.get("target", "node"), fail)
    cooldown = _parse_timedelta(data.get("cooldown", "0s"), "cooldown", fail)
    guard_by = _parse_guard_by(data.get("guard_by", []), fail)
    max_attempts = _parse_max_attempts(data.get("max_attempts"), "max_attempts", fail)

    if "steps" in data and "escalate" in data:
        raise fail("escalate", "a playbook has either `steps` or `escalate` (a ladder of rungs), not both")
    for ladder_only in ("reset_after", "repeat_offender", "start_at"):
        if ladder_only in data and "escalate" not in data:
            raise fail(ladder_only, f"only a ladder (`escalate`) has a {ladder_only}")
    rungs: tuple[Rung, ...] = ()
    reset_after = DEFAULT_RESET_AFTER
    repeat = None
    start_at: tuple[tuple[str, str], ...] = ()
    left_out: list[LeftOutStep] = []
    if "escalate" in data:
        rungs = _parse_rungs(data["escalate"], registry, fail, left_out)
        reset_after = _parse_timedelta(data.get("reset_after", "24h"), "reset_after", fail)
        _check_ladder(rungs, cooldown, max_attempts, reset_after, "reset_after" in data, fail)
        if "repeat_offender" in data:
            repeat = parse_repeat_offender(data["repeat_offender"], [r.name for r in rungs], fail)
        if "start_at" in data:
            start_at = _parse_start_at(data["start_at"], alertnames, [r.name for r in rungs], fail)
        steps: tuple[StepSpec, ...] = ()
    elif "steps" not in data:
        raise fail("steps", "required: a list of at least one step (or `escalate`: a ladder of rungs)")
    else:
        steps = _parse_steps(data["steps"], "steps", registry, fail, left_out, allow_empty=False)
    on_resolved = _parse_steps(data.get("on_resolved") or [], "on_resolved", registry, fail, left_out, allow_empty=True)
    try:
        rollout = parse_rollout(data.get("rollout"))
    except RolloutError as exc:
        raise fail("rollout", str(exc)) from None
    return Playbook(
        name=name,
        description=description,
        alertnames=alertnames,
        matchers=matchers,
        mode=mode,
        target=target,
        cooldown=cooldown,
        max_attempts=max_attempts,
        steps=steps,
        on_resolved=on_resolved,
        source=source,
        guard_by=guard_by,
        rungs=rungs,
        reset_after=reset_after,
        rollout=rollout,
        repeat_offender=repeat,
        left_out=tuple(left_out),
        version=playbook_version(data),
        start_at=start_at,
    )


def playbook_version(data: Mapping[str, Any]) -> str:
    """The sha256 of the playbook's parsed definition in canonical JSON (sorted keys, no spaces): comments,
    key order and YAML's quoting do not change it; any changed value does."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _parse_start_at(
    raw: Any, alertnames: Sequence[str], rung_names: Sequence[str], fail: Any
) -> tuple[tuple[str, str], ...]:
    """`start_at: {TrainingLossSpike: rollback}`: alerts the playbook matches, each with a rung that is not the
    first (the first needs no entry)."""
    if not isinstance(raw, dict) or not raw:
        raise fail("start_at", "must be a mapping of alert names to rung names: {TrainingLossSpike: rollback}")
    pairs = []
    for alertname, rung in raw.items():
        field = f"start_at.{alertname}"
        if alertname not in alertnames:
            raise fail(field, f"not an alert this playbook matches (match.alertname: {', '.join(alertnames)})")
        if not isinstance(rung, str) or rung not in rung_names:
            raise fail(field, f"required: the name of a rung of this ladder (one of {', '.join(rung_names)})")
        if rung == rung_names[0]:
            raise fail(field, f"{rung!r} is the first rung: every alert starts there without start_at")
        pairs.append((alertname, rung))
    return tuple(pairs)


def _refuse_unknown_keys(item: Any, known: Set[str], where: str, fail: Any, not_mapping: str = "") -> None:
    """A PlaybookError at `where` when `item` is not a mapping (`not_mapping` says what it must be), or naming
    its first key that is not one of `known`."""
    if not isinstance(item, dict):
        raise fail(where, not_mapping)
    unknown = sorted(set(item) - known)
    if unknown:
        raise fail(f"{where}.{unknown[0]}" if where else unknown[0], f"unknown key (known: {', '.join(sorted(known))})")


def _parse_rungs(raw: Any, registry: ActionRegistry, fail: Any, left_out: list[LeftOutStep]) -> tuple[Rung, ...]:
    if not isinstance(raw, list) or not raw:
        raise fail("escalate", "must be a list of at least one rung (name, holds_for, steps)")
    rungs: list[Rung] = []
    for index, item in enumerate(raw):
        where = f"escalate[{index}]"
        _refuse_unknown_keys(
            item, _RUNG_KEYS, where, fail, "a rung must be a mapping with 'name', 'holds_for' and 'steps'"
        )
        name = item.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise fail(f"{where}.name", "required; lower-case letters, digits, '.', '_' and '-'")
        if any(r.name == name for r in rungs):
            raise fail(f"{where}.name", f"rung name {name!r} is used twice in this ladder")
        if "holds_for" not in item:
            raise fail(f"{where}.holds_for", "required: how long the alert must stay quiet for this rung to count")
        holds_for = _parse_timedelta(item["holds_for"], f"{where}.holds_for", fail)
        if holds_for <= timedelta(0):
            raise fail(f"{where}.holds_for", "must be longer than 0s: a rung that holds at once never lets it climb")
        mode = _parse_mode(item["mode"], fail, f"{where}.mode") if "mode" in item else None
        raw_cooldown = item.get("cooldown")
        cooldown = None if raw_cooldown is None else _parse_timedelta(raw_cooldown, f"{where}.cooldown", fail)
        max_attempts = _parse_max_attempts(item.get("max_attempts"), f"{where}.max_attempts", fail)
        if "steps" not in item:
            raise fail(f"{where}.steps", "required: a list of at least one step")
        steps = _parse_steps(item["steps"], f"{where}.steps", registry, fail, left_out, allow_empty=False)
        undo = _parse_steps(
            item.get("on_resolved") or [], f"{where}.on_resolved", registry, fail, left_out, allow_empty=True
        )
        rungs.append(Rung(name, holds_for, steps, undo, mode, cooldown, max_attempts))
    return tuple(rungs)


def _check_ladder(
    rungs: Sequence[Rung],
    cooldown: timedelta,
    max_attempts: int | None,
    reset_after: timedelta,
    reset_given: bool,
    fail: Any,
) -> None:
    """Refuse a ladder that can never advance (docs/playbooks.md, "Escalation ladders", names each rule)."""
    for index in range(1, len(rungs)):
        rung, below = rungs[index], rungs[index - 1]
        own = rung.cooldown is not None
        effective = rung.cooldown if rung.cooldown is not None else cooldown
        if effective >= below.holds_for:
            field = f"escalate[{index}].cooldown" if own else "cooldown"
            raise fail(
                field,
                f"cooldown {format_duration(effective)} >= holds_for {format_duration(below.holds_for)} of rung "
                f"{index} ({below.name}): a re-fire within that window would always be refused, so rung "
                f"{index + 1} ({rung.name}) could never run",
            )
    longest = max(r.holds_for for r in rungs)
    if reset_after <= longest:
        raise fail(
            "reset_after" if reset_given else "escalate",
            f"reset_after {format_duration(reset_after)} must be longer than the longest holds_for "
            f"({format_duration(longest)}): the ladder would reset before a rung could count as held",
        )
    if max_attempts is not None and max_attempts < len(rungs):
        raise fail(
            "max_attempts",
            f"max_attempts {max_attempts} is below the {len(rungs)} rungs of the ladder: it caps every rung "
            "together, so the top rungs could never run",
        )


def _parse_match(match: Any, fail: Any) -> tuple[tuple[str, ...], tuple[Matcher, ...]]:
    _refuse_unknown_keys(
        match, {"alertname", "labels"}, "match", fail, "required: a mapping with 'alertname' and optional 'labels'"
    )
    raw_names = match.get("alertname")
    names = [raw_names] if isinstance(raw_names, str) else raw_names
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise fail("match.alertname", "required: an alert name or a non-empty list of names")
    raw_labels = match.get("labels", [])
    if isinstance(raw_labels, str):
        raw_labels = [raw_labels]
    if not isinstance(raw_labels, list):
        raise fail("match.labels", "must be a list of matchers like 'severity=~\"warning|critical\"'")
    matchers = []
    for index, text in enumerate(raw_labels):
        if not isinstance(text, str):
            raise fail(f"match.labels[{index}]", "must be a string matcher")
        try:
            matchers.append(parse_matcher(text))
        except MatcherSyntaxError as exc:
            raise fail(f"match.labels[{index}]", str(exc)) from exc
    return tuple(names), tuple(matchers)


def _parse_max_attempts(value: Any, field: str, fail: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise fail(field, "must be a whole number >= 1 (or left out for no cap)")
    return value


def _parse_mode(value: Any, fail: Any, field: str = "mode") -> Mode:
    try:
        return Mode(value)
    except ValueError:
        raise fail(field, f"must be one of {', '.join(m.value for m in Mode)}, got {value!r}") from None


def _parse_target(value: Any, fail: Any) -> TargetSpec:
    if value == "node":
        return TargetSpec()
    if value == "cluster":
        return TargetSpec(labels=(), constant="cluster")
    if isinstance(value, dict) and set(value) == {"labels"}:
        labels = value["labels"]
        if isinstance(labels, str):
            labels = [labels]
        if isinstance(labels, list) and labels and all(isinstance(label, str) and label for label in labels):
            return TargetSpec(labels=tuple(labels))
    raise fail("target", "must be 'node', 'cluster' or {labels: [label, ...]} (the first label present wins)")


def _parse_guard_by(value: Any, fail: Any) -> tuple[str, ...]:
    labels = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not all(
        isinstance(label, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label) for label in labels
    ):
        raise fail("guard_by", "must be a label name or a list of label names (e.g. [UUID])")
    return tuple(labels)


def _parse_timedelta(value: Any, field: str, fail: Any) -> timedelta:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        value = str(value)  # parse_duration refuses .inf and durations too long for a timedelta
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise fail(field, str(exc)) from exc
    raise fail(field, "must be a duration like 90s, 15m or 2h")


def _parse_steps(
    raw: Any, field: str, registry: ActionRegistry, fail: Any, left_out: list[LeftOutStep], *, allow_empty: bool
) -> tuple[StepSpec, ...]:
    """The steps of a phase this server runs; a step of a scheduler the site does not run is checked as fully
    as the others (a typo fails on every site), then added to `left_out` instead."""
    if not isinstance(raw, list) or (not raw and not allow_empty):
        raise fail(field, "must be a list of at least one step" if not allow_empty else "must be a list of steps")
    steps = []
    for index, item in enumerate(raw):
        where = f"{field}[{index}]"
        _refuse_unknown_keys(item, _STEP_KEYS, where, fail, "a step must be a mapping with 'action' and 'with'")
        action_name = item.get("action")
        if not isinstance(action_name, str) or action_name not in registry:
            raise fail(f"{where}.action", f"unknown action {action_name!r} (known: {', '.join(registry.names())})")
        params = item.get("with") or {}
        if not isinstance(params, dict):
            raise fail(f"{where}.with", "must be a mapping of parameters")
        for problem in _template_syntax_errors(params, f"{where}.with"):
            raise fail(problem[0], problem[1])
        problems = registry.get(action_name).schema.check_static(params)
        if problems:
            raise fail(f"{where}.with", problems[0])
        name = item.get("name", f"{index + 1}-{action_name}")
        if not isinstance(name, str) or not name:
            raise fail(f"{where}.name", "must be a non-empty string")
        timeout = None
        if item.get("timeout") is not None:
            timeout = _parse_timedelta(item["timeout"], f"{where}.timeout", fail).total_seconds()
            if timeout <= 0:
                raise fail(f"{where}.timeout", "must be longer than 0s")
        retries = item.get("retries", 2)
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= _MAX_RETRIES:
            raise fail(f"{where}.retries", f"must be a whole number from 0 to {_MAX_RETRIES}")
        flags = {flag: item.get(flag, False) for flag in ("always", "continue_on_error")}
        for flag, value in flags.items():
            if not isinstance(value, bool):
                raise fail(f"{where}.{flag}", "must be true or false")
        run_on = _parse_run_on(item, action_name, registry, f"{where}.run_on", fail)
        jobs = _parse_jobs(item, f"{where}.jobs", fail)
        if why := registry.left_out(action_name, jobs):
            left_out.append(LeftOutStep(where, name, action_name, why))
            continue
        steps.append(StepSpec(action_name, params, name, timeout, retries, **flags, run_on=run_on))
    return tuple(steps)


def _parse_jobs(item: Mapping[str, Any], field: str, fail: Any) -> JobPath | None:
    """A step's `jobs: slurm | launcher`: it belongs to that restart path of training jobs only
    (remediate.config.schedulers.JobPath); absent: to both."""
    if "jobs" not in item:
        return None
    try:
        return JobPath(item["jobs"])
    except ValueError:
        choices = ", ".join(JobPath)
        raise fail(field, f"must be one of {choices} (the restart path the step belongs to)") from None


def _parse_run_on(
    item: Mapping[str, Any], action: str, registry: ActionRegistry, field: str, fail: Any
) -> tuple[str, ...]:
    """A step's `run_on: {labels: [label, ...]}` (static label names, the target's shape); only a node action
    runs somewhere: a cluster action (log, notify, k8s.*) always runs in the server."""
    if "run_on" not in item:
        return ()
    value = item["run_on"]
    labels = value.get("labels") if isinstance(value, dict) and set(value) == {"labels"} else None
    if isinstance(labels, str):
        labels = [labels]
    if not isinstance(labels, list) or not labels or not all(isinstance(label, str) and label for label in labels):
        raise fail(field, "must be {labels: [label, ...]} (the first label the alert has names the node)")
    if registry.get(action).where != Where.NODE:
        raise fail(field, f"{action} is a cluster action, it runs in the server: only node actions have run_on")
    return tuple(labels)


def _template_syntax_errors(value: Any, path: str) -> Sequence[tuple[str, str]]:
    if isinstance(value, dict):
        return [e for key, item in value.items() for e in _template_syntax_errors(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [e for index, item in enumerate(value) for e in _template_syntax_errors(item, f"{path}[{index}]")]
    if is_template(value):
        problem = check_syntax(value)
        if problem:
            return [(path, f"template syntax error: {problem}")]
    return []
