"""Parameter schemas for actions: what each step's `with:` may contain.

A schema checks a playbook twice: at load time (unknown keys, missing keys, the
types of values that are not templates, params that must never come from a label)
and after rendering (everything, with strings from templates coerced to the
declared type). Pure logic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from remediate.actions.templating import is_template
from remediate.config.durations import format_duration, parse_duration
from remediate.errors import ParamsError

_MISSING: Any = object()


@dataclass(frozen=True)
class Param:
    """One parameter of an action."""

    type: type
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    static: bool = False
    """True: the value must be written in the playbook, never rendered from the alert (URLs, paths)."""
    check: Callable[[Any], str | None] | None = None
    """Extra check; returns an error message or None."""
    doc: str = ""
    templated_check: Callable[[Any], str | None] | None = None
    """Extra check of a value rendered from the alert (after `check`), for forms only the playbook's
    author may write: a label must not widen what a step touches (`gpu: all`)."""
    secret: bool = False
    """True: the value is the absolute path of a file holding a secret (e.g. a mounted Kubernetes Secret).
    Only the path is ever stored, shown or logged; the action reads the file when the step executes.
    Implies `static`. Secrets themselves never go into params (which the history stores and shows)."""
    late: bool = False
    """True: a template here is rendered when the step runs, not when the alert arrives: by the action,
    which adds what only then exists (the earlier steps' outcomes, remediate.actions.messages). The
    engine stores it as written."""
    template_check: Callable[[str], str | None] | None = None
    """Check of the template as written, at load time (before any alert): e.g. that a PromQL query prints
    every value through the `promql_string` filter. Returns an error message or None."""
    type_name: str = ""
    """The type as the actions reference shows it, for a param of several forms (`type` object, `check`
    telling them apart); empty: `type`'s own name."""


@dataclass(frozen=True)
class ParamSchema:
    fields: Mapping[str, Param] = field(default_factory=dict)

    @cached_property
    def late(self) -> frozenset[str]:
        """The params whose templates the action renders when its step runs (Param.late)."""
        return frozenset(name for name, spec in self.fields.items() if spec.late)

    def check_static(self, params: Mapping[str, Any]) -> list[str]:
        """Errors visible before any alert arrives (used by the playbook loader)."""
        errors = [f"unknown parameter {key!r} (known: {self._known()})" for key in params if key not in self.fields]
        for name, spec in self.fields.items():
            if name not in params:
                if spec.required:
                    errors.append(f"missing required parameter {name!r}")
                continue
            value = params[name]
            if _contains_template(value):
                if spec.static or spec.secret:
                    errors.append(f"parameter {name!r} must be written in the playbook, not templated from the alert")
                elif spec.template_check is not None and isinstance(value, str):
                    problem = spec.template_check(value)
                    if problem:
                        errors.append(f"parameter {name!r}: {problem}")
                continue
            try:
                self._check_one(name, spec, value)
            except ParamsError as exc:
                errors.append(str(exc))
        return errors

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Full validation of rendered params; returns them with defaults filled in."""
        unknown = [key for key in params if key not in self.fields]
        if unknown:
            raise ParamsError(f"unknown parameter {unknown[0]!r} (known: {self._known()})")
        result: dict[str, Any] = {}
        for name, spec in self.fields.items():
            if name not in params or params[name] is None:
                if spec.required:
                    raise ParamsError(f"missing required parameter {name!r}")
                if spec.default is not None:
                    result[name] = spec.default
                continue
            result[name] = self._check_one(name, spec, params[name])
        return result

    def check_templated(self, written: Mapping[str, Any], rendered: Mapping[str, Any]) -> None:
        """Raise ParamsError if a param written as a template rendered to a value its
        `templated_check` refuses. `written`: the step's params as in the playbook; `rendered`: validated."""
        for name, spec in self.fields.items():
            if spec.templated_check is None or name not in rendered or not _contains_template(written.get(name)):
                continue
            problem = spec.templated_check(rendered[name])
            if problem:
                raise ParamsError(f"parameter {name!r}: {problem}")

    def _known(self) -> str:
        return ", ".join(self.fields) or "none"

    @staticmethod
    def _check_one(name: str, spec: Param, value: Any) -> Any:
        coerced = _coerce(value, spec.type)
        if coerced is _MISSING:
            raise ParamsError(f"parameter {name!r} must be {spec.type.__name__}, got {value!r}")
        if spec.choices and coerced not in spec.choices:
            options = ", ".join(map(str, spec.choices))
            raise ParamsError(f"parameter {name!r} must be one of {options}, got {value!r}")
        if spec.secret and not (isinstance(coerced, str) and coerced.startswith("/")):
            raise ParamsError(f"parameter {name!r} must be the absolute path of a file holding the secret")
        if spec.check is not None:
            problem = spec.check(coerced)
            if problem:
                raise ParamsError(f"parameter {name!r}: {problem}")
        return coerced


def _contains_template(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_contains_template(item) for item in value.values())
    if isinstance(value, list):
        return any(_contains_template(item) for item in value)
    return is_template(value)


def _coerce(value: Any, wanted: type) -> Any:
    if wanted is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return _MISSING
    if isinstance(value, bool):
        return _MISSING
    if wanted in (int, float):
        if isinstance(value, int) or (wanted is float and isinstance(value, float)):
            return wanted(value)
        try:
            return wanted(value.strip()) if isinstance(value, str) else _MISSING
        except ValueError:
            return _MISSING
    if wanted is str:
        return value if isinstance(value, str) else (str(value) if isinstance(value, int | float) else _MISSING)
    return value if isinstance(value, wanted) else _MISSING


def duration_within(low_s: float, high_s: float) -> Callable[[str], str | None]:
    """A `Param.check` for a duration param (`90s`, `15m`): it must parse and lie within [low_s, high_s] seconds."""
    bounds = f"{format_duration(low_s)} and {format_duration(high_s)}"

    def check(value: str) -> str | None:
        try:
            seconds = parse_duration(value).total_seconds()
        except ValueError as exc:
            return str(exc)
        return None if low_s <= seconds <= high_s else f"must be between {bounds}"

    return check


def positive(value: float) -> str | None:
    """A `Param.check`: the number must be greater than 0."""
    return None if value > 0 else "must be greater than 0"


def between(low: float, high: float) -> Callable[[float], str | None]:
    """A `Param.check`: the number must lie within [low, high]."""
    return lambda value: None if low <= value <= high else f"must be between {low:g} and {high:g}"
