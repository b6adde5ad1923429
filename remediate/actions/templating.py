"""Render playbook step params from an alert, in Jinja2's sandbox with strict undefined.

Alert labels are data: templates only read them. The sandbox blocks attribute tricks,
StrictUndefined turns a missing label into a clear error instead of an empty string.
Called by the engine at ingest and by the dry-run command.

A render happens inside POST /webhook, so its cost is bounded too (one template must not stall the webhook): no string,
list or output over MAX_RENDER_CHARS (checked before `*`, `+`, `%`, padding and joining build one),
no integer over MAX_INT_BITS, and at most RENDER_SECONDS of wall-clock per template (checked at every
loop iteration, call and operator). A template over a limit is refused — a `rejected` run — and,
within one notification (`render_session`), refused at once for the notification's other alerts.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from remediate.errors import ParamsError, parsed_by

MAX_RENDER_CHARS = 1_000_000
"""The most characters a template may output, or any string or list it builds on the way."""
MAX_INT_BITS = 4096
"""The largest integer a template may compute (about 1,200 digits): `2 ** 10 ** 9` is refused, not computed."""
RENDER_SECONDS = 0.5
"""Wall-clock a single template may take to render; rendering one takes microseconds."""

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


class RenderLimitError(Exception):
    """A template went over a render limit (size, integer, time): refused before it could take more."""


_DEADLINE: ContextVar[float | None] = ContextVar("remediate_render_deadline", default=None)
"""The monotonic deadline of the render in progress (a context variable: each thread renders its own)."""
_SESSION: ContextVar[dict[str, str] | None] = ContextVar("remediate_render_session", default=None)
"""One notification's renders: template -> why it was refused (refused again at once)."""


@contextlib.contextmanager
def render_session() -> Iterator[None]:
    """The renders of one notification (Engine.evaluate_all): a template refused for going over a limit is
    refused for the notification's other alerts without rendering, so a storm of alerts costs one refusal."""
    token = _SESSION.set({})
    try:
        yield
    finally:
        _SESSION.reset(token)


def _tick() -> None:
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise RenderLimitError(f"took longer than {RENDER_SECONDS:g}s")


def _size(value: Any, budget: int = MAX_RENDER_CHARS, depth: int = 0) -> int:
    """Characters (strings) plus items (lists, tuples, dicts, recursively) of a value, counted until past
    `budget`. Shared references count every time: `[[s] * 1000] * 1000` is as big as it prints."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 3
    if depth > 20:
        return 0
    if isinstance(value, Mapping):
        items: Iterable[Any] = (part for pair in value.items() for part in pair)
    elif isinstance(value, list | tuple):
        items = value
    else:
        return 0
    total = len(value)
    for item in items:
        if total > budget:
            break
        total += _size(item, budget - total, depth + 1)
    return total


def _check_size(value: Any, what: str) -> Any:
    if _size(value) > MAX_RENDER_CHARS:
        raise RenderLimitError(f"{what} would be over {MAX_RENDER_CHARS:,} characters")
    return value


def _check_int(value: Any, what: str) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise RenderLimitError(f"{what} would be an integer over {MAX_INT_BITS} bits")
    return value


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*:([^{}]*)\}")


def _check_format(template: str, args: Iterable[Any] = ()) -> None:
    """A %- or {}-format string whose widths or precisions would pad past MAX_RENDER_CHARS (a `*` width
    takes it from the arguments)."""
    numbers = [n for match in _PERCENT_SPEC.finditer(template) for n in match.groups() if n]
    numbers += [n for spec in _BRACE_SPEC.findall(template) for n in re.findall(r"\d+", spec)]
    if "*" in numbers:
        numbers += [str(a) for a in args if isinstance(a, int) and not isinstance(a, bool)]
    if any(n != "*" and int(n) > MAX_RENDER_CHARS for n in numbers):
        raise RenderLimitError(f"a format width over {MAX_RENDER_CHARS:,} characters")


def _expected(name: str, text: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """What a str method (or the filter of that name) called on `text` would produce, in characters."""
    if name in {"ljust", "rjust", "center", "zfill"}:
        width = args[0] if args else kwargs.get("width", 0)
        return max(len(text), width if isinstance(width, int) else 0)
    if name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        return len(text) + text.count("\t") * (size if isinstance(size, int) else 0)
    if name == "indent":
        width = args[0] if args else kwargs.get("width", 4)
        pad = width if isinstance(width, int) else len(str(width))
        return len(text) + (text.count("\n") + 1) * pad
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = args[0], args[1]
        times = text.count(old) if old else len(text) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            times = min(times, args[2])
        return len(text) + times * max(0, len(new) - len(old))
    return 0


def _joined_size(items: list[Any], separator: Any) -> int:
    return _size(items) + max(0, len(items) - 1) * len(str(separator))


class _BoundedNamespace(Namespace):
    """`namespace()` whose attributes hold nothing over the size limit (`{% set ns.s = ns.s ~ ns.s %}`)."""

    def __setitem__(self, name: str, value: Any) -> None:
        _tick()
        super().__setitem__(name, _check_size(value, f"namespace attribute {name!r}"))


def _loop_guard(iterable: Any) -> Iterator[Any]:
    """Every `{% for %}` iterates through this (`_guarded_template`): the deadline is checked at each
    iteration, so nested loops that print nothing still stop."""
    for item in iterable:
        _tick()
        yield item


_LOOP_GUARD = "_remediate_loop_guard"


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the render limits: operators that build strings, lists or integers, calls, str.format
    and loops are checked before they can build more than the limits allow."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        what = f"{type(left).__name__} {operator} {type(right).__name__}"
        if operator == "**" and _plain_int(left) and _plain_int(right) and abs(left) > 1 and right > 0:
            if right * abs(left).bit_length() > MAX_INT_BITS * 2:
                raise RenderLimitError(f"{what} would be an integer over {MAX_INT_BITS} bits")
        elif operator == "*":
            for sequence, times in ((left, right), (right, left)):
                sized = isinstance(sequence, str | bytes | list | tuple) and _plain_int(times)
                if sized and _size(sequence) * max(times, 0) > MAX_RENDER_CHARS:
                    raise RenderLimitError(f"{what} would be over {MAX_RENDER_CHARS:,} characters")
            if _plain_int(left) and _plain_int(right) and left.bit_length() + right.bit_length() > MAX_INT_BITS * 2:
                raise RenderLimitError(f"{what} would be an integer over {MAX_INT_BITS} bits")
        elif operator == "+" and not (_plain_int(left) and _plain_int(right)):
            if _size(left) + _size(right) > MAX_RENDER_CHARS:
                raise RenderLimitError(f"{what} would be over {MAX_RENDER_CHARS:,} characters")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right if isinstance(right, tuple) else (right,))
        result = super().call_binop(context, operator, left, right)
        return _check_int(_check_size(result, what), what)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        for arg in (*args, *kwargs.values()):
            _check_size(arg, "an argument")
        name = getattr(__obj, "__name__", "")
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            if name == "join" and args:
                items = list(args[0])
                if _joined_size(items, owner) > MAX_RENDER_CHARS:
                    raise RenderLimitError(f"str.join would be over {MAX_RENDER_CHARS:,} characters")
                args = (items, *args[1:])
            elif _expected(name, owner, args, kwargs) > MAX_RENDER_CHARS:
                raise RenderLimitError(f"str.{name} would be over {MAX_RENDER_CHARS:,} characters")
        result = super().call(__context, __obj, *args, **kwargs)
        return _check_int(_check_size(result, f"{name or 'a call'}()"), f"{name or 'a call'}()")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_format(value.__self__)
        return wrapped


def _guarded_template(environment: ImmutableSandboxedEnvironment, source: str) -> Any:
    """The template of `source` whose every `{% for %}` iterates through `_loop_guard`.

    Through Jinja's public pipeline: `parse` gives the tree (its documented node API), `from_string` compiles a
    tree as it does a source; no hook of Jinja's code generator is overridden. A syntax error is raised by
    `parse` with the source's line, as `from_string` raises it."""
    tree = environment.parse(source)
    for loop in tree.find_all(nodes.For):
        guard = nodes.Call(nodes.Name(_LOOP_GUARD, "load"), [loop.iter], [], None, None)
        loop.iter = guard.set_lineno(loop.lineno).set_environment(environment)
    return environment.from_string(tree)


def _plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A built-in filter that can build a large string (center, indent, replace, join, format), checked
    before it runs; the value comes after the context jinja2 passes to some filters."""
    skip = 1 if hasattr(function, "jinja_pass_arg") else 0

    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        head, value, rest = args[:skip], args[skip] if len(args) > skip else "", args[skip + 1 :]
        if name == "join":
            value = list(value)
            separator = rest[0] if rest else kwargs.get("d", "")
            if _joined_size(value, separator) > MAX_RENDER_CHARS:
                raise RenderLimitError(f"join would be over {MAX_RENDER_CHARS:,} characters")
        elif name == "format":
            _check_format(str(value), rest)
        elif _expected(name, str(value), rest, kwargs) > MAX_RENDER_CHARS:
            raise RenderLimitError(f"{name} would be over {MAX_RENDER_CHARS:,} characters")
        return _check_size(function(*head, value, *rest, **kwargs), name)

    return bounded


_ENVIRONMENT = _BoundedEnvironment(undefined=StrictUndefined, autoescape=False)
_ENVIRONMENT.filters["promql_string"] = promql_string
for _name in ("center", "indent", "replace", "join", "format"):
    _ENVIRONMENT.filters[_name] = _bounded_filter(_name, _ENVIRONMENT.filters[_name])
_ENVIRONMENT.globals[_LOOP_GUARD] = _loop_guard
_ENVIRONMENT.globals["namespace"] = _BoundedNamespace
# lipsum(n) writes n paragraphs of filler: nothing a step's params need, and a way to allocate at will.
del _ENVIRONMENT.globals["lipsum"]


def is_template(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


@lru_cache(maxsize=4096)
def _compile(source: str) -> Any:
    template = _guarded_template(_ENVIRONMENT, source)
    # A plain dict instead of Jinja's ChainMap of template and environment globals: every render copies
    # them into its context, and iterating a ChainMap in Python was a third of a render's time. This
    # environment's globals never change after import, so the snapshot is the same thing.
    template.globals = dict(template.globals)
    return template


check_syntax = parsed_by(_compile, TemplateError)
"""The syntax error of a template, or None when it compiles."""


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
    the alert become inert text of the format (remediate.outbound.inert). Raises ParamsError as render_params."""
    if not is_template(source):
        return source
    try:
        return _bounded_render(source, context, _compile_escaping(source, escape))
    except RenderLimitError as exc:
        raise ParamsError(f"refused to render {_short(source)}: {exc}") from exc
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
    return _guarded_template(environment, source)


def _render(value: Any, context: Mapping[str, Any], path: str) -> Any:
    if isinstance(value, str):
        if not is_template(value):
            return value
        try:
            return _bounded_render(value, context)
        except RenderLimitError as exc:
            raise ParamsError(f"{path}: refused to render {_short(value)}: {exc}") from exc
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


def _bounded_render(source: str, context: Mapping[str, Any], template: Any = None) -> str:
    """The template's output, within the render limits (module docstring); `template`: `source` compiled
    for another escaping (render_text), else the plain one."""
    refused = _SESSION.get()
    if refused is not None and source in refused:
        raise RenderLimitError(f"{refused[source]} (for an earlier alert of this notification)")
    token = _DEADLINE.set(time.monotonic() + RENDER_SECONDS)
    try:
        parts: list[str] = []
        size = 0
        # generate(), not render(): the output is counted as it is produced, and refused once over the limit.
        for chunk in (template or _compile(source)).generate(context):
            size += len(chunk)
            if size > MAX_RENDER_CHARS:
                raise RenderLimitError(f"its output would be over {MAX_RENDER_CHARS:,} characters")
            parts.append(chunk)
        return "".join(parts)
    except RenderLimitError as exc:
        if refused is not None:
            refused[source] = str(exc)
        raise
    finally:
        _DEADLINE.reset(token)


def _short(source: str, width: int = 120) -> str:
    return repr(source) if len(source) <= width else repr(source[: width - 1] + "…")


def _explain(exc: TemplateError) -> str:
    message = str(exc)
    if "has no attribute" in message or "is undefined" in message:
        return f"{message} (the alert does not carry that label/annotation)"
    return message
