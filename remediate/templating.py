"""Render playbook step params from an alert, in Jinja2's sandbox with strict undefined.

Alert labels are data: templates only read them. The sandbox blocks attribute tricks,
StrictUndefined turns a missing label into a clear error instead of an empty string.
Called by the engine at ingest and by the dry-run command.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from remediate.errors import ParamsError

_ENVIRONMENT = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)


def is_template(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


@lru_cache(maxsize=4096)
def _compile(source: str) -> Any:
    return _ENVIRONMENT.from_string(source)


def check_syntax(source: str) -> str | None:
    """The syntax error of a template, or None when it compiles."""
    try:
        _compile(source)
    except TemplateError as exc:
        return str(exc)
    return None


def render_params(params: Mapping[str, Any], context: Mapping[str, Any], *, prefix: str = "with") -> dict:
    """Render every string template inside params (nested dicts/lists too)."""
    return {key: _render(value, context, f"{prefix}.{key}") for key, value in params.items()}


def _render(value: Any, context: Mapping[str, Any], path: str) -> Any:
    if isinstance(value, str):
        if not is_template(value):
            return value
        try:
            return _compile(value).render(context)
        except TemplateError as exc:
            raise ParamsError(f"{path}: cannot render {value!r}: {_explain(exc)}") from exc
        except Exception as exc:
            # A template is code run over alert data: `{{ 1/0 }}`, arithmetic on a label (TypeError),
            # a filter given the wrong kind of value raise plain Python errors. Any of them is this
            # alert's render error (a rejected run), never a 500 that drops the whole notification.
            raise ParamsError(f"{path}: cannot render {value!r}: {type(exc).__name__}: {exc}") from exc
    if isinstance(value, Mapping):
        return {key: _render(item, context, f"{path}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_render(item, context, f"{path}[{index}]") for index, item in enumerate(value)]
    return value


def _explain(exc: TemplateError) -> str:
    message = str(exc)
    if "has no attribute" in message or "is undefined" in message:
        return f"{message} (the alert does not carry that label/annotation)"
    return message
