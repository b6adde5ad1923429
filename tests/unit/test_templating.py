"""remediate.actions.templating: step params rendered in Jinja2's sandbox with strict undefined."""

from __future__ import annotations

import pytest

from remediate.actions.templating import (
    check_syntax,
    is_template,
    promql_string,
    render_params,
    render_session,
    unescaped_outputs,
)
from remediate.errors import ParamsError
from tests.conftest import XID_CONTEXT as CONTEXT


def test_templates_read_labels_annotations_and_alert_fields() -> None:
    rendered = render_params(
        {
            "message": "GPU {{ labels.gpu }} on {{ labels.Hostname }}: {{ annotations.summary }}",
            "who": "{{ alertname }}/{{ status }}/{{ fingerprint }}",
        },
        CONTEXT,
    )

    assert rendered == {
        "message": "GPU 3 on node-a: GPU 3 Xid error",
        "who": "GpuXidError/firing/c5801e9cde93e74f",
    }


def test_strings_without_template_markers_are_left_exactly_as_written() -> None:
    params = {"message": "literal {braces} and }} and {", "level": "info", "count": 3, "flag": True, "none": None}

    assert render_params(params, CONTEXT) == params


def test_nested_dicts_and_lists_are_rendered_throughout() -> None:
    params = {
        "outer": {"inner": "{{ labels.gpu }}", "deeper": {"list": ["a", "{{ labels.Hostname }}", 7]}},
        "items": [{"x": "{{ status }}"}, "plain"],
    }

    assert render_params(params, CONTEXT) == {
        "outer": {"inner": "3", "deeper": {"list": ["a", "node-a", 7]}},
        "items": [{"x": "firing"}, "plain"],
    }


def test_filters_and_defaults_work_in_the_sandbox() -> None:
    rendered = render_params(
        {"a": "{{ labels.node | default('unknown') }}", "b": "{{ labels.Hostname | upper }}"}, CONTEXT
    )

    assert rendered == {"a": "unknown", "b": "NODE-A"}


def test_a_missing_label_is_a_params_error_naming_the_param_path() -> None:
    with pytest.raises(ParamsError) as info:
        render_params({"message": "on {{ labels.node }}"}, CONTEXT)

    message = str(info.value)
    assert message.startswith("with.message:")
    assert "node" in message
    assert "does not carry that label" in message


def test_a_missing_label_deep_inside_names_the_nested_path() -> None:
    with pytest.raises(ParamsError, match=r"^with\.outer\.list\[1\]:"):
        render_params({"outer": {"list": ["ok", "{{ labels.absent }}"]}}, CONTEXT)


def test_an_unknown_top_level_name_is_an_error_not_an_empty_string() -> None:
    with pytest.raises(ParamsError, match="is undefined"):
        render_params({"message": "{{ nothing_here }}"}, CONTEXT)


def test_the_prefix_names_where_the_params_came_from() -> None:
    with pytest.raises(ParamsError, match=r"^steps\[0\]\.with\.message:"):
        render_params({"message": "{{ labels.absent }}"}, CONTEXT, prefix="steps[0].with")


@pytest.mark.parametrize(
    "template",
    [
        "{{ labels.__class__ }}",
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ labels.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ labels.pop('gpu') }}",
        "{{ labels.update({'gpu': '0'}) }}",
    ],
)
def test_the_sandbox_blocks_attribute_tricks_and_mutation(template: str) -> None:
    context = {**CONTEXT, "labels": dict(CONTEXT["labels"])}

    with pytest.raises(ParamsError):
        render_params({"message": template}, context)

    assert context["labels"] == CONTEXT["labels"]


def test_a_label_value_that_looks_like_a_template_is_not_evaluated() -> None:
    context = {**CONTEXT, "labels": {"evil": "{{ ''.__class__.__mro__ }}"}}

    assert render_params({"message": "got {{ labels.evil }}"}, context) == {"message": "got {{ ''.__class__.__mro__ }}"}


def test_rendering_does_not_html_escape() -> None:
    context = {**CONTEXT, "labels": {"q": "<a & 'b'>"}}

    assert render_params({"m": "{{ labels.q }}"}, context) == {"m": "<a & 'b'>"}


def test_is_template_recognises_expressions_and_statements_only_in_strings() -> None:
    assert is_template("{{ x }}")
    assert is_template("{% if x %}y{% endif %}")
    assert not is_template("plain")
    assert not is_template("{ single }")
    assert not is_template(42)
    assert not is_template(None)


def test_check_syntax_reports_the_error_or_none() -> None:
    assert check_syntax("{{ labels.gpu }}") is None
    assert check_syntax("{% if status == 'firing' %}x{% endif %}") is None
    assert check_syntax("{{ labels.gpu ") is not None
    assert check_syntax("{% if x %}never closed") is not None


def test_bad_template_syntax_met_while_rendering_is_a_params_error() -> None:
    with pytest.raises(ParamsError, match=r"^with\.m: cannot render"):
        render_params({"m": "{{ labels.gpu "}, CONTEXT)


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ labels.gpu + 1 }}", "TypeError"),  # a label is a string
        ("{{ labels.gpu | round }}", "TypeError"),
    ],
)
def test_a_python_error_while_rendering_is_a_params_error_naming_it(template: str, error: str) -> None:
    with pytest.raises(ParamsError, match=rf"with\.message: cannot render .*{error}"):
        render_params({"message": template}, CONTEXT)


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("gpu-node-7", '"gpu-node-7"'),
        ('node-a"} or vector(1) #', '"node-a\\"} or vector(1) #"'),
        ("back\\slash", '"back\\\\slash"'),
        ("two\nlines\ttab", '"two\\nlines\\ttab"'),
        ("zero\u200bwidth\x1b", '"zero\\u200bwidth\\u001b"'),
        ("μ-node", '"μ-node"'),
        (7, '"7"'),
    ],
)
def test_promql_string_writes_one_quoted_promql_literal(value: object, literal: str) -> None:
    assert promql_string(value) == literal
    assert render_params({"q": "{{ labels.v | promql_string }}"}, {"labels": {"v": value}}) == {"q": literal}


def test_unescaped_outputs_names_every_value_printed_without_a_safe_filter() -> None:
    safe = frozenset({"promql_string", "int"})
    source = (
        "up{a={{ labels.a | promql_string }}, b={{ labels.b }}} * {{ labels.gpu | int }}"
        "{% if labels.c %} + {{ labels.c | upper }}{% endif %} + {{ (labels.d ~ 'x') | promql_string }}"
    )

    assert unescaped_outputs(source, safe) == ["line 1: labels.b", "line 1: a value filtered by 'upper'"]
    assert unescaped_outputs("up == 1", safe) == []
    assert unescaped_outputs("{{ broken", safe) == []


def test_render_text_escapes_every_printed_value_and_keeps_the_templates_own_text() -> None:
    from remediate.actions.templating import Trusted, render_text

    def shout(text: str) -> str:
        return f"[{text}]"

    source = "*own* {{ labels.x }} {% for s in steps %}{{ s }};{% endfor %} {{ link }} {{ link | upper }}"
    context = {"labels": {"x": "*v*"}, "steps": ["a", "b"], "link": Trusted("https://r/1")}

    assert render_text(source, context, escape=shout) == "*own* [*v*] [a];[b]; https://r/1 [HTTPS://R/1]"
    assert render_text(source, context) == "*own* *v* a;b; https://r/1 HTTPS://R/1"
    assert render_text("no template", {}, escape=shout) == "no template"
    with pytest.raises(ParamsError, match="cannot render"):
        render_text("{{ labels.missing }}", {"labels": {}}, escape=shout)


def test_a_message_rendered_when_its_step_runs_is_held_to_the_same_render_limits() -> None:
    from remediate.actions.templating import render_text

    def shout(text: str) -> str:
        return f"[{text}]"

    with pytest.raises(ParamsError, match=r"refused to render .*over 1,000,000 characters"):
        render_text("{{ 'x' * 10**9 }}", {}, escape=shout)
    with pytest.raises(ParamsError, match=r"refused to render .*took longer than 0\.5s"):
        render_text("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {})
    with pytest.raises(ParamsError, match="output would be over 1,000,000 characters"):
        render_text("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", {}, escape=shout)


def test_late_params_are_kept_as_written_for_their_step_to_render() -> None:
    params = {"url": "http://x/{{ 1 }}", "message": "{{ steps[0].status }}"}

    assert render_params(params, {}, keep={"message"}) == {"url": "http://x/1", "message": "{{ steps[0].status }}"}


# A render inside POST /webhook is bounded in size and time.
COSTLY = {
    "string times a billion": ("{{ 'x' * 10**9 }}", "over 1,000,000 characters"),
    "list times a million": ("{{ (['x' * 1000] * 1000000) | length }}", "over 1,000,000 characters"),
    "a huge power": ("{{ 2 ** (10 ** 9) }}", "over 4096 bits"),
    "squaring in a loop": (
        "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x }}",
        "over 4096 bits",
    ),
    "doubling a namespace string": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "over 1,000,000 characters",
    ),
    "doubling through a macro": (
        "{% macro f(s, n) %}{{ f(s ~ s, n - 1) if n else s }}{% endmacro %}{{ f('x', 64) }}",
        "over 1,000,000 characters",
    ),
    "padding filter": ("{{ 'x' | center(10**9) }}", "over 1,000,000 characters"),
    "padding method": ("{{ 'x'.ljust(10**9) }}", "over 1,000,000 characters"),
    "format width": ("{{ '{:>1000000000}'.format(1) }}", "format width"),
    "percent width": ("{{ '%1000000000s' % 'x' }}", "format width"),
    "format filter star width": ("{{ '%*s' | format(1000000000, 'x') }}", "format width"),
    "joining big strings": ("{{ ('x' * 100000) | join('y' * 100000) }}", "over 1,000,000 characters"),
    "printing in a loop": (
        "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
        "output would be over 1,000,000 characters",
    ),
    "silent nested loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "took longer than 0.5s",
    ),
}


@pytest.mark.parametrize("template", [t for t, _ in COSTLY.values()], ids=list(COSTLY))
def test_a_template_over_a_render_limit_is_refused_as_a_params_error(template: str) -> None:
    expected = {t: why for t, why in COSTLY.values()}[template]
    assert check_syntax(template) is None  # loads: constants are not folded when the playbook compiles

    with pytest.raises(ParamsError, match="refused to render") as refused:
        render_params({"message": template}, CONTEXT)

    assert expected in str(refused.value)


def test_the_limits_leave_ordinary_templates_alone() -> None:
    template = (
        "{{ labels.gpu * 3 }} {{ 'a,b'.split(',') | join('-') }} {% for k in labels | sort %}{{ k }} {% endfor %}"
        "{{ '%05d' % 42 }} {{ '{:>5}'.format('x') }} {{ 2 ** 10 }} {{ 'x' | center(9) }} {{ range(3) | list }}"
        "{% set ns = namespace(n=0) %}{% for i in range(1000) %}{% set ns.n = ns.n + i %}{% endfor %} {{ ns.n }}"
    )

    rendered = render_params({"message": template}, CONTEXT)["message"]

    assert rendered == "333 a-b alertname gpu Hostname 00042     x 1024     x     [0, 1, 2] 499500"
    assert render_params({"message": "{{ 'x' * 1000000 }}"}, CONTEXT)["message"] == "x" * 1_000_000


def test_within_one_notification_a_refused_template_is_refused_again_without_rendering() -> None:
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ labels.gpu }}"
    with render_session():
        with pytest.raises(ParamsError, match="took longer than"):
            render_params({"message": slow}, CONTEXT)
        with pytest.raises(ParamsError, match="for an earlier alert of this notification"):
            render_params({"message": slow}, CONTEXT | {"labels": {"gpu": "4"}})
    # A new notification renders it again (and refuses it again, on its own time).
    with pytest.raises(ParamsError, match=r"took longer than 0\.5s$"):
        render_params({"message": slow}, CONTEXT)
