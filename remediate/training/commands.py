"""The param schemas a job declares for its commands, and their validation (docs/training-protocol.md).

A job lists every command it handles in ``job.json`` under ``commands``, each with the schema of
its params, so that remediate refuses an unknown command or bad params when it plans a step —
not when the job gets the command at 3 a.m. The schema is a subset of JSON Schema, one object
per command::

    {"type": "object",
     "properties": {"factor": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMinimum": true},
                    "to": {"type": "integer", "minimum": 1}},
     "required": [],
     "oneOf": [{"required": ["factor"]}, {"required": ["to"]}],
     "additionalProperties": false}

Understood: per property ``type`` (integer, number, string, boolean), ``minimum``, ``maximum``
(``exclusiveMinimum``/``exclusiveMaximum`` as booleans, draft-4 style), ``enum`` and
``description``; per command ``required``, ``oneOf`` of ``{"required": [...]}`` alternatives
(exactly one must hold) and ``additionalProperties`` (false unless the handler was registered
without a schema). Standard library only: the job and remediate both import this.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

TYPES = ("integer", "number", "string", "boolean")
_PROPERTY_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "description"}
_COMMAND_KEYS = {"type", "properties", "required", "oneOf", "additionalProperties", "description"}
_INTEGER = re.compile(r"[+-]?[0-9]+")


class SchemaError(ValueError):
    """A declared command schema is not one this subset understands."""


def open_schema() -> dict[str, Any]:
    """The schema of a command registered without one: any params (the handler checks them itself)."""
    return {"type": "object", "properties": {}, "required": [], "additionalProperties": True}


def command_schema(
    params: Mapping[str, Mapping[str, Any]] | None,
    *,
    required: tuple[str, ...] | list[str] = (),
    one_of: list[list[str]] | tuple[tuple[str, ...], ...] | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """The command schema for ``@control.handler(..., params=..., required=..., one_of=...)``; checked."""
    if params is None:
        schema = open_schema()
    else:
        schema = {
            "type": "object",
            "properties": {name: dict(spec) for name, spec in params.items()},
            "required": list(required),
            "additionalProperties": False,
        }
        if one_of:
            schema["oneOf"] = [{"required": list(names)} for names in one_of]
    if description:
        schema["description"] = description
    return check_schema(schema)


def check_schema(schema: Any) -> dict[str, Any]:
    """`schema` when this subset understands it; SchemaError (saying what is wrong) otherwise."""
    if not isinstance(schema, Mapping):
        raise SchemaError("a command schema must be an object")
    unknown = set(schema) - _COMMAND_KEYS
    if unknown:
        known = ", ".join(sorted(_COMMAND_KEYS))
        raise SchemaError(f"unsupported schema keys {', '.join(sorted(unknown))} (known: {known})")
    if schema.get("type", "object") != "object":
        raise SchemaError("a command schema's type must be 'object'")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise SchemaError("'properties' must be an object")
    for name, spec in properties.items():
        _check_property(str(name), spec)
    names = set(properties)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError("'required' must be a list of names")
    alternatives = schema.get("oneOf", [])
    if not isinstance(alternatives, list) or not all(
        isinstance(a, Mapping) and set(a) == {"required"} and isinstance(a["required"], list) for a in alternatives
    ):
        raise SchemaError("'oneOf' must be a list of {\"required\": [names]} objects")
    closed = schema.get("additionalProperties", False) is False
    listed = set(required) | {n for a in alternatives for n in a["required"]}
    if closed and not listed <= names:
        raise SchemaError(f"required params {', '.join(sorted(listed - names))} are not in 'properties'")
    if not isinstance(schema.get("additionalProperties", False), bool):
        raise SchemaError("'additionalProperties' must be true or false")
    return dict(schema)


def _check_property(name: str, spec: Any) -> None:
    if not isinstance(spec, Mapping):
        raise SchemaError(f"param {name!r}: its schema must be an object")
    unknown = set(spec) - _PROPERTY_KEYS
    if unknown:
        raise SchemaError(f"param {name!r}: unsupported keys {', '.join(sorted(unknown))}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise SchemaError(f"param {name!r}: type must be one of {', '.join(TYPES)}, got {kind!r}")
    for bound in ("minimum", "maximum"):
        value = spec.get(bound)
        if value is not None and (not _is_number(value) or kind not in ("integer", "number")):
            raise SchemaError(f"param {name!r}: {bound} must be a number, on an integer or number param")
    for flag in ("exclusiveMinimum", "exclusiveMaximum"):
        if not isinstance(spec.get(flag, False), bool):
            raise SchemaError(f"param {name!r}: {flag} must be true or false")
    enum = spec.get("enum")
    if enum is not None and (not isinstance(enum, list) or not enum):
        raise SchemaError(f"param {name!r}: enum must be a non-empty list")


def _is_number(value: Any) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float: no number a job can use
        return False


def coerce(schema: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` with strings (rendered from alert labels) turned into the declared integer/number/boolean.

    A string that does not read as the declared type is left as it is, for `problems` to report.
    """
    properties = schema.get("properties", {})
    result = dict(params)
    for name, value in params.items():
        kind = properties.get(name, {}).get("type") if isinstance(properties.get(name), Mapping) else None
        if not isinstance(value, str):
            continue
        text = value.strip()
        if kind == "integer" and _INTEGER.fullmatch(text):
            result[name] = int(text)
        elif kind == "number":
            try:
                number = float(text)
            except ValueError:
                continue
            if not math.isfinite(number):
                continue  # "inf", "nan" or beyond any float (a 309-digit label): `problems` refuses the string
            result[name] = int(text) if _INTEGER.fullmatch(text) else number
        elif kind == "boolean" and text.lower() in ("true", "false"):
            result[name] = text.lower() == "true"
    return result


def problems(schema: Mapping[str, Any], params: Mapping[str, Any]) -> list[str]:
    """Why `params` do not fit `schema` (empty when they do). No coercion: JSON types as sent."""
    found = []
    properties = schema.get("properties", {})
    if schema.get("additionalProperties", False) is False:
        for name in params:
            if name not in properties:
                known = ", ".join(properties) or "none"
                found.append(f"unknown param {name!r} (the job declares: {known})")
    for name in schema.get("required", []):
        if name not in params:
            found.append(f"missing required param {name!r}")
    alternatives = schema.get("oneOf", [])
    if alternatives:
        holding = [a["required"] for a in alternatives if all(n in params for n in a["required"])]
        if len(holding) != 1:
            options = " | ".join("+".join(a["required"]) for a in alternatives)
            given = "none" if not holding else " and ".join("+".join(h) for h in holding)
            found.append(f"exactly one of {options} must be given (given: {given})")
    for name, value in params.items():
        spec = properties.get(name)
        if isinstance(spec, Mapping):
            problem = _value_problem(spec, value)
            if problem:
                found.append(f"param {name!r}: {problem}")
    return found


def _value_problem(spec: Mapping[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    fits = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": _is_number(value),
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
    }.get(kind, True)
    if not fits:
        return f"must be {'an' if kind == 'integer' else 'a'} {kind}, got {_shown(value)}"
    enum = spec.get("enum")
    if enum is not None and value not in enum:
        return f"must be one of {', '.join(map(repr, enum))}, got {_shown(value)}"
    low, high = spec.get("minimum"), spec.get("maximum")
    if low is not None and (value <= low if spec.get("exclusiveMinimum") else value < low):
        return f"must be {'>' if spec.get('exclusiveMinimum') else '>='} {low}, got {_shown(value)}"
    if high is not None and (value >= high if spec.get("exclusiveMaximum") else value > high):
        return f"must be {'<' if spec.get('exclusiveMaximum') else '<='} {high}, got {_shown(value)}"
    return None


def _shown(value: Any) -> str:
    """`value` for a message: its repr, at most 80 characters (a label may be 1024)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe(schema: Mapping[str, Any]) -> str:
    """One line for people: ``factor: number (0, 1] | to: integer >= 1``."""
    parts = []
    for name, spec in (schema.get("properties") or {}).items():
        text = f"{name}: {spec.get('type')}"
        if "enum" in spec:
            text += " in " + "/".join(map(str, spec["enum"]))
        if "minimum" in spec:
            text += f" {'>' if spec.get('exclusiveMinimum') else '>='} {spec['minimum']}"
        if "maximum" in spec:
            text += f" {'<' if spec.get('exclusiveMaximum') else '<='} {spec['maximum']}"
        parts.append(text)
    if schema.get("additionalProperties", False) is not False:
        parts.append("any other params")
    return ", ".join(parts) or "no params"
