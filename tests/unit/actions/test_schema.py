"""remediate.actions.schema: what a step's `with:` may hold, before and after rendering."""

from __future__ import annotations

import pytest

from remediate.actions import default_registry
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ParamsError

SCHEMA = ParamSchema(
    {
        "count": Param(int, required=True),
        "ratio": Param(float, default=0.5),
        "force": Param(bool, default=False),
        "level": Param(str, default="info", choices=("info", "warning")),
        "url": Param(str, static=True),
        "even": Param(int, check=lambda v: None if v % 2 == 0 else "must be even"),
        "extra": Param(dict),
    }
)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"count": "3"}, 3),
        ({"count": " 42 "}, 42),
        ({"count": 7}, 7),
        ({"count": "-1"}, -1),
    ],
)
def test_rendered_strings_are_coerced_to_int(params: dict, expected: int) -> None:
    assert SCHEMA.validate(params)["count"] == expected


@pytest.mark.parametrize(("value", "expected"), [("0.25", 0.25), (" 1e-3 ", 0.001), (2, 2.0), (1.5, 1.5)])
def test_rendered_strings_and_ints_are_coerced_to_float(value: object, expected: float) -> None:
    result = SCHEMA.validate({"count": 1, "ratio": value})["ratio"]

    assert result == expected
    assert isinstance(result, float)


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("False", False), (" TRUE ", True), (True, True), (False, False)]
)
def test_rendered_strings_are_coerced_to_bool(value: object, expected: bool) -> None:
    assert SCHEMA.validate({"count": 1, "force": value})["force"] is expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("count", "three"),
        ("count", "3.5"),
        ("count", 3.5),
        ("count", True),
        ("ratio", "half"),
        ("ratio", False),
        ("force", "yes"),
        ("force", 1),
        ("level", 3.0j),
        ("extra", "not a dict"),
    ],
)
def test_values_that_do_not_fit_the_type_are_params_errors_naming_the_param(name: str, value: object) -> None:
    params = {"count": 1, name: value}

    with pytest.raises(ParamsError, match=rf"parameter {name!r} must be"):
        SCHEMA.validate(params)


def test_numbers_are_accepted_where_a_string_is_wanted() -> None:
    schema = ParamSchema({"message": Param(str, required=True)})

    assert schema.validate({"message": 12}) == {"message": "12"}


def test_defaults_fill_in_what_was_left_out_or_null() -> None:
    assert SCHEMA.validate({"count": 1, "ratio": None}) == {
        "count": 1,
        "ratio": 0.5,
        "force": False,
        "level": "info",
    }


def test_choices_are_enforced_after_coercion() -> None:
    assert SCHEMA.validate({"count": 1, "level": "warning"})["level"] == "warning"
    with pytest.raises(ParamsError, match=r"parameter 'level' must be one of info, warning, got 'debug'"):
        SCHEMA.validate({"count": 1, "level": "debug"})


def test_an_extra_check_can_refuse_a_value() -> None:
    assert SCHEMA.validate({"count": 1, "even": "4"})["even"] == 4
    with pytest.raises(ParamsError, match=r"parameter 'even': must be even"):
        SCHEMA.validate({"count": 1, "even": "3"})


def test_a_missing_required_param_is_a_params_error() -> None:
    with pytest.raises(ParamsError, match=r"missing required parameter 'count'"):
        SCHEMA.validate({})


def test_an_unknown_param_is_a_params_error_listing_the_known_ones() -> None:
    with pytest.raises(ParamsError, match=r"unknown parameter 'colour' \(known: count, ratio, force"):
        SCHEMA.validate({"count": 1, "colour": "red"})


def test_check_static_reports_every_problem_visible_before_an_alert_arrives() -> None:
    problems = SCHEMA.check_static({"colour": "red", "count": "many", "url": "{{ labels.url }}", "level": "loud"})

    assert "unknown parameter 'colour' (known: count, ratio, force, level, url, even, extra)" in problems
    assert "parameter 'count' must be int, got 'many'" in problems
    assert "parameter 'url' must be written in the playbook, not templated from the alert" in problems
    assert any(p.startswith("parameter 'level' must be one of") for p in problems)
    assert len(problems) == 4


def test_check_static_leaves_templated_values_for_later_unless_the_param_is_static() -> None:
    assert SCHEMA.check_static({"count": "{{ labels.n }}", "level": "{{ labels.level }}"}) == []
    assert SCHEMA.check_static({"count": 1, "extra": {"nested": "{{ labels.x }}"}}) == []


def test_check_static_finds_a_template_hidden_inside_a_static_dict() -> None:
    schema = ParamSchema({"headers": Param(dict, static=True)})

    assert schema.check_static({"headers": {"X-Target": "{{ labels.node }}"}}) == [
        "parameter 'headers' must be written in the playbook, not templated from the alert"
    ]


def test_check_static_reports_a_missing_required_param() -> None:
    assert SCHEMA.check_static({}) == ["missing required parameter 'count'"]


def test_the_notify_webhook_url_is_static_and_must_be_http() -> None:
    schema = default_registry().get("notify.webhook").schema

    assert schema.check_static({"url": "{{ annotations.callback }}"}) == [
        "parameter 'url' must be written in the playbook, not templated from the alert"
    ]
    assert schema.check_static({"url": "file:///etc/passwd"}) == [
        "parameter 'url': must be an absolute http:// or https:// URL"
    ]
    assert schema.check_static({"url": "https://chat.example/hook", "message": "{{ labels.x }}"}) == []


def test_the_notify_webhook_timeout_is_bounded() -> None:
    schema = default_registry().get("notify.webhook").schema

    assert schema.validate({"url": "http://x.example/", "timeout": "2.5"})["timeout"] == 2.5
    with pytest.raises(ParamsError, match=r"parameter 'timeout': must be in \(0, 300\]"):
        schema.validate({"url": "http://x.example/", "timeout": "0"})
