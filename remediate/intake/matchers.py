"""AlertManager label matchers (``severity="critical"``, ``gpu=~"[0-7]"``, ``env!~"dev|test"``).

Playbooks (``match.labels``) are written with AlertManager's own matcher syntax so that a
selector can be copied between an AlertManager route, ``amtool`` and a playbook; the playbook
loader parses each with ``parse_matcher`` and the engine tests alerts with ``matches_all``.
Pure logic, no I/O.

Semantics follow AlertManager's classic parser (prometheus/alertmanager pkg/labels, parse.go
and matcher.go):

* ``name op value`` with op one of ``=``, ``!=``, ``=~``, ``!~``; whitespace around each token
  is ignored; the value may be double-quoted or bare; inside it ``\\"``, ``\\\\`` and ``\\n`` are
  escapes and any other backslash is literal.
* A label the alert does not have reads as the empty string: ``foo=""`` matches alerts without
  ``foo`` and ``foo!=""`` matches only alerts that have it.
* Regexes are anchored at both ends, as if written ``^(?:re)$``.

Go uses RE2, Python's ``re`` backtracks. A regex is therefore checked before compiling and
refused when it uses what RE2 does not have (backreferences, lookarounds, conditionals, atomic
groups, possessive quantifiers) or what Python would read differently (POSIX classes like
``[[:alpha:]]``, ``{,n}``, inline flags other than at the start). ``\\d``, ``\\w``, ``\\s`` and
``\\b`` are ASCII-only, as in Go. Known gaps: Go-only syntax such as ``\\pL`` or ``\\Q..\\E`` is
refused rather than translated, and a nested quantifier like ``(a+)+`` is valid RE2 but can
backtrack for a long time in Python on a hostile label value (values are capped at 4096
characters by remediate.intake.alerts).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

# Prometheus label names. AlertManager's classic parser also lets ':' through, but no alert
# label can contain one, so a matcher on such a name could only ever test the empty string.
LABEL_NAME_PATTERN: Final = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LABEL_NAME: Final = re.compile(LABEL_NAME_PATTERN)
_NAME_CHARS: Final = re.compile(r"[a-zA-Z0-9_:]*")

# Go's \s in the matcher grammar: ASCII whitespace only (no \v, no Unicode spaces).
_WHITESPACE: Final = " \t\n\f\r"

# Leading inline flags, e.g. "(?i)" or "(?is)"; Go's flags are i, m, s and U.
_FLAG_GROUP: Final = re.compile(r"\(\?(?=[imsU-]*[imsU])([imsU]*)(?:-([imsU]*))?\)")
_SCOPED_FLAGS: Final = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?:")
_REPEAT: Final = re.compile(r"\{([0-9]*)(?:(,)([0-9]*))?\}")
_MAX_REPEAT: Final = 1000  # Go's limit for {n,m}

_SHOW_LIMIT: Final = 80


class MatchType(enum.Enum):
    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


class MatcherSyntaxError(ValueError):
    """A matcher that does not parse; the message says what is wrong and where."""


# Builds the error for a regex construct that is refused, given what and the offset.
_Refuse = Callable[[str, int], MatcherSyntaxError]


@dataclass(frozen=True)
class Matcher:
    """One label matcher (parse_matcher checks the name); regexes are compiled once, when the matcher is made."""

    name: str
    type: MatchType
    value: str
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.type in (MatchType.REGEX, MatchType.NOT_REGEX):
            object.__setattr__(self, "_regex", _compile_regex(self.value))

    def matches(self, labels: Mapping[str, str]) -> bool:
        # AlertManager reads a missing label as "": foo="" and foo!~".+" match alerts without foo.
        actual = labels.get(self.name, "")
        if self.type is MatchType.EQUAL:
            return actual == self.value
        if self.type is MatchType.NOT_EQUAL:
            return actual != self.value
        assert self._regex is not None  # set by __post_init__ for both regex types
        # fullmatch is the anchoring: AlertManager compiles "^(?:" + value + ")$".
        found = self._regex.fullmatch(actual) is not None
        return found if self.type is MatchType.REGEX else not found

    def __str__(self) -> str:
        """Canonical form, as AlertManager prints it: name="value" with OpenMetrics escaping."""
        escaped = self.value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        return f'{self.name}{self.type.value}"{escaped}"'


def parse_matcher(text: str) -> Matcher:
    """Parse one matcher such as ``severity=~"warning|critical"`` or ``team=ml``."""
    if not isinstance(text, str):
        raise MatcherSyntaxError(f"a matcher must be a string like 'severity=\"critical\"', got {type(text).__name__}")
    try:
        return _parse(text)
    except MatcherSyntaxError as exc:
        raise MatcherSyntaxError(f"matcher {_show(text)}: {exc}") from None


def matches_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    """True when every matcher matches the labels (so no matchers match everything)."""
    return all(matcher.matches(labels) for matcher in matchers)


def _parse(text: str) -> Matcher:
    start = len(text) - len(text.lstrip(_WHITESPACE))
    end = len(text.rstrip(_WHITESPACE))
    if start >= end:
        raise MatcherSyntaxError('is empty; expected name="value"')

    name_match = _NAME_CHARS.match(text, start, end)
    assert name_match is not None  # the pattern matches the empty string
    name = name_match.group()
    if not name:
        raise MatcherSyntaxError(f"expected a label name at column {start + 1}, found {text[start]!r}")
    if not _LABEL_NAME.fullmatch(name):
        raise MatcherSyntaxError(
            f"{_show(name)} at column {start + 1} is not a valid label name (must match {LABEL_NAME_PATTERN})"
        )

    pos = _skip_whitespace(text, name_match.end(), end)
    operator = text[pos : pos + 2]
    if operator not in ("=~", "!=", "!~"):
        operator = text[pos : pos + 1]
        if operator != "=":
            found = repr(text[pos]) if pos < end else "the end"
            raise MatcherSyntaxError(
                f"expected an operator (=, !=, =~ or !~) after the label name at column {pos + 1}, found {found}"
            )
    pos = _skip_whitespace(text, pos + len(operator), end)

    value = _unescape(text, pos, end)
    try:
        return Matcher(name, MatchType(operator), value)
    except MatcherSyntaxError as exc:
        raise MatcherSyntaxError(f"{exc}; the value starts at column {pos + 1}") from None


def _skip_whitespace(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _unescape(text: str, start: int, end: int) -> str:
    """The value token text[start:end], unquoted and unescaped exactly as AlertManager does."""
    quoted = start < end and text[start] == '"'
    first = start + 1 if quoted else start
    out: list[str] = []
    escaped = False
    closed = False
    for pos in range(first, end):
        char = text[pos]
        if escaped:
            escaped = False
            if char == "n":
                out.append("\n")
            elif char in '"\\':
                out.append(char)
            else:
                # Not an escape AlertManager knows: the backslash stays (handy in regexes: \d, \.).
                out.append("\\" + char)
            continue
        if char == "\\":
            if pos < end - 1:
                escaped = True
            else:
                out.append("\\")  # a backslash as the very last character is literal
        elif char == '"':
            if not quoted or pos < end - 1:
                hint = " (one matcher per entry)" if "," in text[pos:end] else ""
                raise MatcherSyntaxError(
                    f'unescaped double quote at column {pos + 1}; write \\" for a literal quote{hint}'
                )
            closed = True
        else:
            out.append(char)
    if quoted and not closed:
        raise MatcherSyntaxError(f"the quote opened at column {start + 1} is not closed")
    return "".join(out)


def _compile_regex(pattern: str) -> re.Pattern[str]:
    # Go applies leading flags to the rest of the regex. Python 3.11 takes them only as global
    # flags, which must come first and must not switch anything off: fold them into one group.
    flags = ""
    body = 0
    while (flag_match := _FLAG_GROUP.match(pattern, body)) is not None:
        on, off = flag_match.group(1), flag_match.group(2) or ""
        if "U" in on + off:
            raise MatcherSyntaxError(
                f"invalid regex: the ungreedy flag U is not supported (at offset {flag_match.start()})"
            )
        flags = "".join(sorted((set(flags) | set(on)) - set(off)))
        body = flag_match.end()
    _check_re2(pattern, body)
    # Not wrapped in "(?:...)" as AlertManager does: fullmatch anchors, and compiling the regex
    # on its own refuses "a)|(b", which would escape AlertManager's wrapper and its anchors.
    python_pattern = (f"(?{flags})" if flags else "") + pattern[body:]
    try:
        # ASCII: Go's \d, \w, \s and \b are ASCII-only.
        return re.compile(python_pattern, re.ASCII)
    except re.error as exc:
        raise MatcherSyntaxError(f"invalid regex {_show(pattern)}: {exc.msg}") from None
    except (RecursionError, OverflowError):
        raise MatcherSyntaxError(f"invalid regex {_show(pattern)}: too deeply nested or too large") from None


def _check_re2(pattern: str, pos: int) -> None:
    """Refuse what RE2 (AlertManager's engine) lacks or Python's re would read differently."""

    def refuse(what: str, at: int) -> MatcherSyntaxError:
        return MatcherSyntaxError(f"invalid regex: {what} (at offset {at}); AlertManager uses RE2 syntax")

    end = len(pattern)
    while pos < end:
        char = pattern[pos]
        if char == "\\":
            following = pattern[pos + 1 : pos + 2]
            if following in tuple("123456789"):
                raise refuse(f"backreferences like \\{following} are not supported", pos)
            pos += 2
        elif char == "[":
            pos = _skip_class(pattern, pos, refuse)
        elif char == "(" and pattern.startswith("(?", pos):
            _check_group(pattern, pos, refuse)
            pos += 2
        elif char in "*+?" and pattern[pos + 1 : pos + 2] == "+":
            raise refuse("possessive quantifiers like *+ are not supported", pos)
        elif char == "{" and (repeat := _REPEAT.match(pattern, pos)) is not None:
            low, comma, high = repeat.group(1), repeat.group(2), repeat.group(3)
            if not low:
                # Python reads {,n} as {0,n}, Go as literal text: refuse rather than guess.
                if comma:
                    raise refuse("{,n} is not a repetition in RE2; write {0,n}", pos)
            else:
                if any(len(count) > 4 or int(count) > _MAX_REPEAT for count in (low, high) if count):
                    raise refuse(f"repetition counts above {_MAX_REPEAT} are not supported", pos)
                if pattern[repeat.end() : repeat.end() + 1] == "+":
                    raise refuse("possessive quantifiers like {n}+ are not supported", repeat.end() - 1)
            pos = repeat.end()
        else:
            pos += 1


def _check_group(pattern: str, pos: int, refuse: _Refuse) -> None:
    rest = pattern[pos + 2 : pos + 4]
    if rest[:1] in ("=", "!") or rest in ("<=", "<!"):
        raise refuse("lookahead and lookbehind assertions are not supported", pos)
    if rest == "P=":
        raise refuse("backreferences like (?P=name) are not supported", pos)
    if rest[:1] == "(":
        raise refuse("conditional groups are not supported", pos)
    if rest[:1] == ">":
        raise refuse("atomic groups are not supported", pos)
    if rest[:1] == "#":
        raise refuse("comments (?#...) are not supported", pos)
    if rest == "P<":
        return  # named group, fine in both
    if _FLAG_GROUP.match(pattern, pos):
        raise refuse("inline flags are only supported at the start; use a scoped group like (?i:...)", pos)
    scoped = _SCOPED_FLAGS.match(pattern, pos)
    if scoped is not None and "U" in (scoped.group(1) or "") + (scoped.group(2) or ""):
        raise refuse("the ungreedy flag U is not supported", pos)
    if scoped is None and rest[:1] != ":":
        raise refuse(f"unknown group syntax {_show(pattern[pos : pos + 4])}", pos)


def _skip_class(pattern: str, pos: int, refuse: _Refuse) -> int:
    """Return the offset just past the character class that opens at pattern[pos]."""
    pos += 1
    if pattern[pos : pos + 1] == "^":
        pos += 1
    if pattern[pos : pos + 1] == "]":
        pos += 1  # a ']' first in the class is a literal in both engines
    end = len(pattern)
    while pos < end:
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "]":
            return pos + 1
        if char == "[":
            # Go reads [[:alpha:]] as a POSIX class, Python as a literal '[' and warns.
            raise refuse("'[' inside a character class (POSIX classes like [:alpha:]); write \\[", pos)
        if char in "-&~|" and pattern[pos + 1 : pos + 2] == char:
            # Python reserves these pairs for future set operations and warns.
            raise refuse(f"{char}{char} inside a character class; escape one of them", pos)
        pos += 1
    return end  # unterminated: re.compile reports it


def _show(value: str) -> str:
    if len(value) > _SHOW_LIMIT:
        value = value[:_SHOW_LIMIT] + "..."
    return json.dumps(value)
