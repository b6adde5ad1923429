"""Render playbook step params from an alert, in Jinja2's sandbox with strict undefined.

Alert labels are data: templates only read them. The sandbox blocks attribute tricks,
StrictUndefined turns a missing label into a clear error instead of an empty string.
Called by the engine at ingest and by the dry-run command.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from remediate.errors import ParamsError

_PROMQL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def promql_string(value: object) -> str:
    """`value` as one PromQL string literal, double quotes included: the `promql_string` filter.

    A label value templated into a query (`{Hostname={{ labels.Hostname | promql_string }}}`) then stays
    one string whatever it holds (`"} or vector(1) #` included): quotes and backslashes are escaped, and
    control or invisible characters are written as `\\uXXXX`, which PromQL's Go-style literals read back.
    """
    text = str(value)
    out = []
    for char in text:
        if char in _PROMQL_ESCAPES:
            out.append(_PROMQL_ESCAPES[char])
        elif unicodedata.category(char)[0] in "CZ" and char != " ":
            # Control, format, surrogate, separator characters: never raw inside the query.
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


_ENVIRONMENT = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
_ENVIRONMENT.filters["promql_string"] = promql_string


def is_template(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


@lru_cache(maxsize=4096)
def _compile(source: str) -> Any:
    template = _ENVIRONMENT.from_string(source)
    # A plain dict instead of Jinja's ChainMap of template and environment globals: every render copies
    # them into its context, and iterating a ChainMap in Python was a third of a render's time. This
    # environment's globals never change after import, so the snapshot is the same thing.
    template.globals = dict(template.globals)
    return template


def check_syntax(source: str) -> str | None:
    """The syntax error of a template, or None when it compiles."""
    try:
        _compile(source)
    except TemplateError as exc:
        return str(exc)
    return None


def unescaped_outputs(source: str, safe_filters: frozenset[str]) -> list[str]:
    """The `{{ ... }}` of template `source` whose value is printed without one of `safe_filters` last.

    For params in another language (PromQL): every value rendered into them must go through that
    language's escaping filter, so the loader refuses the others. A template that does not compile
    has no outputs here (check_syntax reports it).
    """
    try:
        tree = _ENVIRONMENT.parse(source)
    except TemplateError:
        return []
    found = []
    for output in tree.find_all(nodes.Output):
        for expression in output.nodes:
            if isinstance(expression, nodes.TemplateData):
                continue
            if isinstance(expression, nodes.Filter) and expression.name in safe_filters:
                continue
            lineno = getattr(expression, "lineno", 1)
            found.append(f"line {lineno}: {_describe(expression)}")
    return found


def _describe(expression: nodes.Node) -> str:
    if isinstance(expression, nodes.Getattr) and isinstance(expression.node, nodes.Name):
        return f"{expression.node.name}.{expression.attr}"
    if isinstance(expression, nodes.Name):
        return expression.name
    if isinstance(expression, nodes.Filter):
        return f"a value filtered by {expression.name!r}"
    return f"a {type(expression).__name__.lower()} expression"


_IMPURE_FILTERS = frozenset({"random"})
"""Filters whose result is not a function of their input (Jinja's `random`)."""


def template_reads(value: Any) -> frozenset[str] | None:
    """The context names that the templates in a param value (nested dicts/lists too) read, when their
    render is a function of those names' values alone; None when it may not be (a call: `lipsum()`,
    `range(...)`, a method; an impure filter: `random`) or a template does not compile.

    The engine renders a step once per distinct set of these values in a notification (Engine.evaluate_all)."""
    if isinstance(value, str):
        return _source_reads(value) if is_template(value) else frozenset()
    if isinstance(value, Mapping):
        items: list[Any] = list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return frozenset()
    reads: set[str] = set()
    for item in items:
        found = template_reads(item)
        if found is None:
            return None
        reads |= found
    return frozenset(reads)


@lru_cache(maxsize=4096)
def _source_reads(source: str) -> frozenset[str] | None:
    try:
        tree = _ENVIRONMENT.parse(source)
    except TemplateError:
        return None
    if any(True for _ in tree.find_all(nodes.Call)):
        return None
    if any(node.name in _IMPURE_FILTERS for node in tree.find_all((nodes.Filter, nodes.Test))):
        return None
    return frozenset(meta.find_undeclared_variables(tree))


def render_params(
    params: Mapping[str, Any], context: Mapping[str, Any], *, prefix: str = "with", keep: Collection[str] = ()
) -> dict:
    """Render every string template inside params (nested dicts/lists too), except the params named in
    `keep`: those are rendered when their step runs (actions.schema.Param.late) and stay as written."""
    return {key: value if key in keep else _render(value, context, f"{prefix}.{key}") for key, value in params.items()}


class Trusted(str):
    """Text `render_text` prints as it is whatever the format's escaping: remediate's own (a run's link),
    never a value that came from an alert."""


Escape = Callable[[str], str]


def render_text(source: str, context: Mapping[str, Any], *, escape: Escape | None = None) -> str:
    """Render one template when its step runs (a notification's message), each printed value passed
    through `escape` unless it is `Trusted`: the template's own text keeps its markup, the values from
    the alert become inert text of the format (remediate.inert). Raises ParamsError as render_params."""
    if not is_template(source):
        return source
    try:
        return _compile_escaping(source, escape).render(context)
    except TemplateError as exc:
        raise ParamsError(f"cannot render {source!r}: {_explain(exc)}") from exc
    except Exception as exc:  # see _render: a template's Python errors are its render errors
        raise ParamsError(f"cannot render {source!r}: {type(exc).__name__}: {exc}") from exc


_ESCAPING: dict[Escape | None, ImmutableSandboxedEnvironment] = {None: _ENVIRONMENT}


@lru_cache(maxsize=1024)
def _compile_escaping(source: str, escape: Escape | None) -> Any:
    environment = _ESCAPING.get(escape)
    if environment is None:
        # Jinja's `finalize` sees each printed value, never the template's own text: the hook escaping needs.
        environment = _ESCAPING[escape] = _ENVIRONMENT.overlay(
            finalize=lambda value: value if isinstance(value, Trusted) else escape(str(value))
        )
    return environment.from_string(source)


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
