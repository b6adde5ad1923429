"""remediate.intake.matchers: AlertManager label matcher syntax and semantics."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.intake.matchers import (
    Matcher,
    MatcherSyntaxError,
    MatchType,
    matches_all,
    parse_matcher,
)

LABELS = {"alertname": "GpuXidError", "severity": "critical", "gpu": "3", "empty": ""}


# --- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "match_type", "value"),
    [
        ('severity="critical"', "severity", MatchType.EQUAL, "critical"),
        ('severity!="critical"', "severity", MatchType.NOT_EQUAL, "critical"),
        ('severity=~"warning|critical"', "severity", MatchType.REGEX, "warning|critical"),
        ('severity!~"info|none"', "severity", MatchType.NOT_REGEX, "info|none"),
        ("severity=critical", "severity", MatchType.EQUAL, "critical"),
        ("gpu=~[0-3]", "gpu", MatchType.REGEX, "[0-3]"),
        ('  severity  =  "critical"  ', "severity", MatchType.EQUAL, "critical"),
        ("\tseverity=critical\n", "severity", MatchType.EQUAL, "critical"),
        ('_private="x"', "_private", MatchType.EQUAL, "x"),
        ('foo=""', "foo", MatchType.EQUAL, ""),
        ("foo=", "foo", MatchType.EQUAL, ""),
        ('foo=" spaced "', "foo", MatchType.EQUAL, " spaced "),
        ("foo=two words", "foo", MatchType.EQUAL, "two words"),
        ('foo="a,b"', "foo", MatchType.EQUAL, "a,b"),
        ("foo==x", "foo", MatchType.EQUAL, "=x"),  # AlertManager reads the second = as the value
    ],
)
def test_each_operator_and_spelling_parses(text: str, name: str, match_type: MatchType, value: str) -> None:
    matcher = parse_matcher(text)

    assert (matcher.name, matcher.type, matcher.value) == (name, match_type, value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (r'foo="say \"hi\""', 'say "hi"'),
        (r'foo="back\\slash"', "back\\slash"),
        (r'foo="line\nbreak"', "line\nbreak"),
        (r'foo="C:\temp"', r"C:\temp"),  # unknown escape: the backslash stays, as in AlertManager
        (r'foo=~"a\.b"', r"a\.b"),
        (r'foo=~"a\\.b"', r"a\.b"),
        (r'foo=~"\d+"', r"\d+"),
        ("foo=trailing\\", "trailing\\"),  # a final backslash is literal
        ('foo="real\nnewline"', "real\nnewline"),
    ],
)
def test_escapes_inside_values_follow_alertmanager(text: str, value: str) -> None:
    assert parse_matcher(text).value == value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ('="x"', "label name at column 1"),
        ('  ="x"', "label name at column 3"),
        ('1gpu="x"', "not a valid label name"),
        ('a:b="x"', "not a valid label name"),
        ('foo-bar="x"', "operator"),
        ("severity", "operator"),
        ('severity~"x"', "operator"),
        ('severity=<"x"', "unescaped double quote"),
        ('severity="crit', "not closed"),
        ('severity="', "not closed"),
        ('severity="a\\"', "not closed"),
        ('severity="crit"ical"', "unescaped double quote at column 15"),
        ('severity=crit"', "unescaped double quote"),
        ('severity="critical", team="ml"', "one matcher per entry"),
        ('gpu=~"[0-3"', "invalid regex"),
        ('gpu=~"(3"', "invalid regex"),
        ('gpu=~"*"', "invalid regex"),
    ],
)
def test_syntax_errors_say_what_is_wrong_and_where(text: str, fragment: str) -> None:
    with pytest.raises(MatcherSyntaxError) as info:
        parse_matcher(text)

    assert fragment in str(info.value)
    assert str(info.value).startswith("matcher ")


@pytest.mark.parametrize("text", [None, 3, ["severity=critical"], b"severity=critical"])
def test_a_matcher_that_is_not_a_string_is_a_syntax_error(text: object) -> None:
    with pytest.raises(MatcherSyntaxError, match="must be a string"):
        parse_matcher(text)  # type: ignore[arg-type]


def test_syntax_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="expected an operator"):
        parse_matcher("nonsense")


# --- regexes: RE2 only ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("regex", "fragment"),
    [
        ("(?=a)a", "lookahead"),
        ("(?!b)a", "lookahead"),
        ("(?<=a)b", "lookbehind"),
        ("(?<!a)b", "lookbehind"),
        (r"(a)\1", "backreference"),
        ("(?P<x>a)(?P=x)", "backreference"),
        ("(a)?(?(1)b|c)", "conditional"),
        ("(?>a+)", "atomic"),
        ("a*+", "possessive"),
        ("a++", "possessive"),
        ("a?+", "possessive"),
        ("a{2}+", "possessive"),
        ("(?#comment)a", "comment"),
        ("(?x) a", "unknown group"),
        ("(?U)a+", "ungreedy"),
        ("(?U:a+)", "ungreedy"),
        ("a(?i)b", "only supported at the start"),
        ("[[:alpha:]]+", "POSIX"),
        ("[a--b]", "--"),
        ("a{,3}", "{0,n}"),
        ("a{1001}", "above 1000"),
        ("a{1,99999999999999999999999}", "above 1000"),
        (r"\pL", "invalid regex"),
        ("a)|(b", "unbalanced parenthesis"),  # would break out of AlertManager's ^(?:...)$ wrapper
    ],
)
def test_regex_constructs_that_re2_lacks_are_rejected(regex: str, fragment: str) -> None:
    with pytest.raises(MatcherSyntaxError) as info:
        parse_matcher(f'foo=~"{regex}"')

    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "regex",
    [
        "a|b",
        "(?i)critical",
        "(?i)(?s)a.b",
        "(?i:crit)ical",
        "(?P<name>a)",
        "(?:a|b)c",
        "a{2,3}",
        "a{2,}",
        "a{}",
        "[]a]",
        "[^]a]",
        r"[\[\]]",
        "[a-]",
        r"\(\?=",  # escaped, so not a lookahead
        "[(?=]",  # inside a class, so not a lookahead
        r"\d+\.\d+",
        "",
    ],
)
def test_regexes_that_re2_accepts_compile(regex: str) -> None:
    assert parse_matcher(f'foo=~"{regex}"').type is MatchType.REGEX


def test_a_regex_is_compiled_when_the_matcher_is_built_not_when_it_matches() -> None:
    with pytest.raises(MatcherSyntaxError):
        Matcher("foo", MatchType.REGEX, "(")


# --- semantics ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('severity="critical"', True),
        ('severity="warning"', False),
        ('severity!="warning"', True),
        ('severity!="critical"', False),
        ('severity=~"warning|critical"', True),
        ('severity=~"warn.*"', False),
        ('severity!~"warning|info"', True),
        ('severity!~"crit.*"', False),
        ('gpu=~"[0-7]"', True),
        ('gpu=~"[4-7]"', False),
    ],
)
def test_each_operator_matches_like_alertmanager(text: str, expected: bool) -> None:
    assert parse_matcher(text).matches(LABELS) is expected


@pytest.mark.parametrize(
    ("regex", "value", "expected"),
    [
        ("a", "a", True),
        ("a", "ab", False),
        ("a", "ba", False),
        ("a|ab", "ab", True),  # anchoring applies to the whole alternation
        ("b|a", "ab", False),
        ("crit", "critical", False),
        (".*crit.*", "critical", True),
        ("a", "a\n", False),  # Python's $ would accept a trailing newline; AlertManager's does not
        ("a$", "a\n", False),
        ("(?s)a.b", "a\nb", True),
        ("a.b", "a\nb", False),
        ("(?i)CRITICAL", "critical", True),
        ("(?i:CRIT)ical", "critical", True),
        ("(?i:CRIT)ical", "critICAL", False),
        (r"\d+", "123", True),
        (r"\d+", "١٢٣", False),  # Go's \d is ASCII only
        (r"\w+", "é", False),
        ("", "", True),
        ("", "x", False),
    ],
)
def test_regexes_are_fully_anchored_with_go_semantics(regex: str, value: str, expected: bool) -> None:
    assert Matcher("foo", MatchType.REGEX, regex).matches({"foo": value}) is expected
    assert Matcher("foo", MatchType.NOT_REGEX, regex).matches({"foo": value}) is not expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('missing=""', True),
        ('missing!=""', False),
        ('missing="x"', False),
        ('missing!="x"', True),
        ('missing=~""', True),
        ('missing=~".*"', True),
        ('missing=~".+"', False),
        ('missing!~".+"', True),
        ('empty=""', True),
        ('empty!=""', False),
    ],
)
def test_a_missing_label_matches_as_the_empty_string(text: str, expected: bool) -> None:
    assert parse_matcher(text).matches(LABELS) is expected


def test_matches_all_needs_every_matcher_to_match() -> None:
    matchers = [parse_matcher(text) for text in ('alertname="GpuXidError"', 'severity=~"critical|warning"', "gpu!=7")]

    assert matches_all(matchers, LABELS)
    assert not matches_all((*matchers, parse_matcher("gpu=7")), LABELS)


def test_no_matchers_match_everything() -> None:
    assert matches_all((), LABELS)
    assert matches_all([], {})


# --- canonical form and value semantics ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("severity=critical", 'severity="critical"'),
        ('  gpu =~ "[0-3]" ', 'gpu=~"[0-3]"'),
        (r'q!="say \"hi\""', r'q!="say \"hi\""'),
        (r'p!~"a\\b"', r'p!~"a\\b"'),
        ('n="line\nbreak"', r'n="line\nbreak"'),
        ('e=""', 'e=""'),
    ],
)
def test_str_gives_the_canonical_quoted_form(text: str, canonical: str) -> None:
    assert str(parse_matcher(text)) == canonical


def test_matchers_are_hashable_values_and_ignore_the_compiled_regex() -> None:
    one = parse_matcher('gpu=~"[0-3]"')
    two = parse_matcher("  gpu=~[0-3]")

    assert one == two
    assert len({one, two}) == 1
    assert "_regex" not in repr(one)


def test_matchers_are_frozen() -> None:
    matcher = parse_matcher("a=1")

    with pytest.raises(dataclasses.FrozenInstanceError):
        matcher.value = "2"  # type: ignore[misc]


label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
plain_values = st.text(max_size=30)


@given(name=label_names, match_type=st.sampled_from([MatchType.EQUAL, MatchType.NOT_EQUAL]), value=plain_values)
def test_the_canonical_form_parses_back_to_the_same_matcher(name: str, match_type: MatchType, value: str) -> None:
    matcher = Matcher(name, match_type, value)

    assert parse_matcher(str(matcher)) == matcher


@given(name=label_names, value=plain_values, labels=st.dictionaries(label_names, plain_values, max_size=4))
def test_equality_matchers_agree_with_plain_comparison(name: str, value: str, labels: dict[str, str]) -> None:
    actual = labels.get(name, "")

    assert Matcher(name, MatchType.EQUAL, value).matches(labels) is (actual == value)
    assert Matcher(name, MatchType.NOT_EQUAL, value).matches(labels) is (actual != value)


@settings(max_examples=500)
@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_only_matcher_syntax_error(text: str) -> None:
    try:
        matcher = parse_matcher(text)
    except MatcherSyntaxError as error:
        assert str(error)
        return
    matcher.matches({"foo": "bar", matcher.name: "x"})
    assert parse_matcher(str(matcher)) == matcher


@settings(max_examples=500)
@given(st.text(alphabet="ab()[]{}|*+?.^$\\-,:=!<>#PiIsmU0123-", max_size=14), st.text("ab\n", max_size=6))
def test_arbitrary_regex_text_compiles_or_raises_only_matcher_syntax_error(regex: str, value: str) -> None:
    try:
        matcher = Matcher("foo", MatchType.REGEX, regex)
    except MatcherSyntaxError:
        return
    assert isinstance(matcher.matches({"foo": value}), bool)
