"""The series a PromQL expression reads, and which of them it can do without (`a or b`).

Prometheus 2.42 (Debian bookworm's) has no parse API (`/api/v1/parse_query` came later) and promtool prints no
syntax tree, so this is a tokenizer of our own: it finds every vector selector (`name`, `name{...}`,
`{__name__="name"}`, and `{__name__=~"a|b"}` read as `a or b`) and keeps the structure that matters for "does
it have data": the alternatives of `or` (each side may supply the data; `and`/`unless`/arithmetic need every
side), at every level of parentheses.
Function names, aggregations, label lists (`by (...)`, `on (...)`), ranges, strings and numbers are skipped.
The arguments of `absent()`/`absent_over_time()` are left out: those rules fire because the series is gone.
Jinja templates in a playbook's query (`{{ labels.UUID | promql_string }}`) are read as a string.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from remediate.errors import RemediateError


class PromqlSyntaxError(RemediateError):
    """An expression this tokenizer cannot read (an unclosed string, bracket or parenthesis)."""


AGGREGATIONS = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    }
)  # fmt: skip
KEYWORDS = frozenset(["and", "unless", "bool", "offset", "inf", "nan"])
LABEL_LIST_KEYWORDS = frozenset(["by", "without", "on", "ignoring", "group_left", "group_right"])
ABSENCE_FUNCTIONS = frozenset({"absent", "absent_over_time"})

_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"[0-9.][0-9a-zA-Z_.]*")
TEMPLATE = "__doctor_template__"
"""What a Jinja template in a query reads as: a matcher with this value is left out of the selector asked."""
_NAME_MATCHER = re.compile(r"""__name__\s*=\s*(["'`])([a-zA-Z_:][a-zA-Z0-9_:]*)\1""")
_NAME_ALTERNATION = re.compile(
    r"""__name__\s*=~\s*(["'`])([a-zA-Z_:][a-zA-Z0-9_:]*(?:\|[a-zA-Z_:][a-zA-Z0-9_:]*)+)\1"""
)
"""`{__name__=~"A|B"}`: any of these names (how a query reads both dcgm-exporter generations of one field)."""


@dataclass(frozen=True)
class Token:
    kind: str
    """ident, selector ({...}: text is its inside), range, open, close, op."""
    text: str


@dataclass(frozen=True)
class AllOf:
    """One side of an `or`: it has data only when every series and group in it has."""

    names: tuple[str, ...] = ()
    groups: tuple[AnyOf, ...] = ()


@dataclass(frozen=True)
class AnyOf:
    """A parenthesised (or the whole) expression: it has data when any of its alternatives has."""

    alternatives: tuple[AllOf, ...] = field(default_factory=tuple)

    def names(self) -> list[str]:
        """Every series it reads, in order, once each."""
        found: list[str] = []
        for alternative in self.alternatives:
            found.extend(alternative.names)
            for group in alternative.groups:
                found.extend(group.names())
        return list(dict.fromkeys(found))

    def satisfied(self, present: Callable[[str], bool]) -> bool:
        """Whether the expression can have data given which series are `present`. An alternative that reads no
        series (`vector(0)`, a number) neither supplies nor lacks data: it is passed over, unless all are such."""
        reading = [a for a in self.alternatives if _reads(a)]
        if not reading:
            return True
        return any(
            all(present(name) for name in a.names) and all(g.satisfied(present) for g in a.groups) for a in reading
        )


def _reads(alternative: AllOf) -> bool:
    return bool(alternative.names) or any(group.names() for group in alternative.groups)


def tokens(expr: str) -> list[Token]:
    """The tokens of `expr` (templates read as a string first)."""
    text = _TEMPLATE.sub(f'"{TEMPLATE}"', expr)
    found: list[Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char == "#":  # a comment, to the end of the line
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif char in "\"'`":
            i = _skip_string(text, i)
        elif char == "{":
            end = _closing(text, i, "}")
            found.append(Token("selector", text[i + 1 : end]))
            i = end + 1
        elif char == "[":
            end = _closing(text, i, "]")
            found.append(Token("range", text[i + 1 : end]))
            i = end + 1
        elif char in "()":
            found.append(Token("open" if char == "(" else "close", char))
            i += 1
        elif match := _IDENTIFIER.match(text, i):
            found.append(Token("ident", match.group()))
            i = match.end()
        elif match := _NUMBER.match(text, i):
            i = match.end()  # numbers and durations read no series
        else:
            found.append(Token("op", char))
            i += 1
    return found


def _skip_string(text: str, start: int) -> int:
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\" and quote != "`":
            i += 2
        elif text[i] == quote:
            return i + 1
        else:
            i += 1
    raise PromqlSyntaxError(f"unclosed string at offset {start}")


def _closing(text: str, start: int, close: str) -> int:
    """Where the bracket opened at `start` closes (strings inside skipped)."""
    i = start + 1
    while i < len(text):
        if text[i] in "\"'`":
            i = _skip_string(text, i)
        elif text[i] == close:
            return i
        else:
            i += 1
    raise PromqlSyntaxError(f"unclosed {text[start]!r} at offset {start}")


def parse(expr: str) -> AnyOf:
    """What `expr` needs to have data (module docstring)."""
    toks = tokens(expr)
    group, end = _group(toks, 0)
    if end != len(toks):
        raise PromqlSyntaxError("unbalanced ')'")
    return group


def series_names(expr: str) -> list[str]:
    """The metric names `expr` reads, once each."""
    return list(dict.fromkeys(name_of(found) for found in parse(expr).names()))


def name_of(selector_text: str) -> str:
    """The metric name of a selector as `selector` writes it (`up{job="a"}` -> `up`)."""
    return selector_text.split("{", 1)[0]


def matchers_of(selector_text: str) -> str:
    """The matchers of a selector as `selector` writes it, without braces ("" for none)."""
    _, _, rest = selector_text.partition("{")
    return rest[:-1] if rest else ""


def selector(name: str, matchers: str) -> str:
    """`name{matchers}` as a query can ask it: the `__name__` matcher and template matchers left out (a playbook's
    `{UUID={{ labels.UUID }}}` asks for any UUID), the others as written; `name` alone when none is left."""
    kept = [
        m
        for m in _split_matchers(matchers)
        if TEMPLATE not in m and not _NAME_MATCHER.fullmatch(m.strip()) and not _NAME_ALTERNATION.fullmatch(m.strip())
    ]
    return f"{name}{{{', '.join(kept)}}}" if kept else name


def _split_matchers(text: str) -> list[str]:
    """The matchers of a selector's inside, split at the commas outside strings."""
    parts, start, i = [], 0, 0
    while i < len(text):
        if text[i] in "\"'`":
            i = _skip_string(text, i)
            continue
        if text[i] == ",":
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _group(toks: list[Token], i: int) -> tuple[AnyOf, int]:
    """The alternatives from toks[i] up to the `)` that closes this level (or the end); the index of that `)`."""
    alternatives: list[AllOf] = []
    names: list[str] = []
    groups: list[AnyOf] = []
    while i < len(toks) and toks[i].kind != "close":
        tok = toks[i]
        following = toks[i + 1] if i + 1 < len(toks) else None
        if tok.kind == "ident" and tok.text.lower() == "or":
            alternatives.append(AllOf(tuple(names), tuple(groups)))
            names, groups = [], []
            i += 1
        elif tok.kind == "ident" and tok.text.lower() in LABEL_LIST_KEYWORDS:
            i = _skip_parens(toks, i + 1) if following is not None and following.kind == "open" else i + 1
        elif tok.kind == "ident" and following is not None and following.kind == "open":
            inner, end = _group(toks, i + 2)
            if end >= len(toks):
                raise PromqlSyntaxError(f"unclosed '(' of {tok.text}")
            if tok.text not in ABSENCE_FUNCTIONS:
                groups.append(inner)
            i = end + 1
        elif tok.kind == "ident" and (tok.text.lower() in KEYWORDS or tok.text in AGGREGATIONS):
            i += 1
        elif tok.kind == "ident":
            has_matchers = following is not None and following.kind == "selector"
            names.append(selector(tok.text, following.text if has_matchers and following else ""))
            i += 2 if has_matchers else 1
        elif tok.kind == "selector":
            if match := _NAME_MATCHER.search(tok.text):
                names.append(selector(match.group(2), tok.text))
            elif match := _NAME_ALTERNATION.search(tok.text):  # as `A{...} or B{...}`
                either = match.group(2).split("|")
                groups.append(AnyOf(tuple(AllOf((selector(name, tok.text),)) for name in either)))
            i += 1
        elif tok.kind == "open":
            inner, end = _group(toks, i + 1)
            if end >= len(toks):
                raise PromqlSyntaxError("unclosed '('")
            groups.append(inner)
            i = end + 1
        else:
            i += 1
    alternatives.append(AllOf(tuple(names), tuple(groups)))
    return AnyOf(tuple(alternatives)), i


def _skip_parens(toks: list[Token], i: int) -> int:
    """The index after the parenthesised label list that opens at toks[i]."""
    depth = 0
    while i < len(toks):
        depth += {"open": 1, "close": -1}.get(toks[i].kind, 0)
        i += 1
        if depth == 0:
            return i
    raise PromqlSyntaxError("unclosed label list")
