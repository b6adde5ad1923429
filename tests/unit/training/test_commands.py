"""The command schemas a job declares in job.json: the JSON-Schema subset, coercion of rendered labels, problems."""

from __future__ import annotations

import pytest

from remediate.training.commands import (
    SchemaError,
    check_schema,
    coerce,
    command_schema,
    describe,
    open_schema,
    problems,
)

REDUCE = command_schema(
    {
        "factor": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMinimum": True, "exclusiveMaximum": True},
        "to": {"type": "integer", "minimum": 1},
    },
    one_of=[["factor"], ["to"]],
)
WORKERS = command_schema({"workers": {"type": "integer", "minimum": 0, "maximum": 16}}, required=["workers"])
MODE = command_schema({"mode": {"type": "string", "enum": ["fast", "safe"]}, "dry": {"type": "boolean"}})


def test_params_inside_the_schema_have_no_problems() -> None:
    assert problems(REDUCE, {"factor": 0.5}) == []
    assert problems(REDUCE, {"to": 8}) == []
    assert problems(WORKERS, {"workers": 0}) == []
    assert problems(WORKERS, {"workers": 16}) == []
    assert problems(MODE, {}) == [] and problems(MODE, {"mode": "safe", "dry": True}) == []
    assert problems(open_schema(), {"anything": [1, 2], "x": "y"}) == []


@pytest.mark.parametrize(
    ("schema", "params", "expected"),
    [
        (REDUCE, {}, "exactly one of factor | to must be given (given: none)"),
        (REDUCE, {"factor": 0.5, "to": 8}, "exactly one of factor | to must be given (given: factor and to)"),
        (REDUCE, {"factor": 1}, "param 'factor': must be < 1, got 1"),
        (REDUCE, {"factor": 0}, "param 'factor': must be > 0, got 0"),
        (REDUCE, {"to": 0}, "param 'to': must be >= 1, got 0"),
        (REDUCE, {"to": 8.5}, "param 'to': must be an integer, got 8.5"),
        (REDUCE, {"to": True}, "param 'to': must be an integer, got True"),
        (REDUCE, {"to": 8, "size": 3}, "unknown param 'size' (the job declares: factor, to)"),
        (WORKERS, {}, "missing required param 'workers'"),
        (WORKERS, {"workers": 17}, "param 'workers': must be <= 16, got 17"),
        (WORKERS, {"workers": "4"}, "param 'workers': must be an integer, got '4'"),
        (MODE, {"mode": "turbo"}, "param 'mode': must be one of 'fast', 'safe', got 'turbo'"),
        (MODE, {"dry": "yes"}, "param 'dry': must be a boolean, got 'yes'"),
    ],
)
def test_params_outside_the_schema_are_named(schema: dict, params: dict, expected: str) -> None:
    assert expected in problems(schema, params)


def test_strings_rendered_from_labels_are_typed_by_the_schema_and_nothing_else_is() -> None:
    assert coerce(WORKERS, {"workers": " 4 "}) == {"workers": 4}
    assert coerce(REDUCE, {"factor": "0.5"}) == {"factor": 0.5}
    assert coerce(REDUCE, {"to": "8"}) == {"to": 8}
    assert coerce(MODE, {"dry": "True", "mode": "fast"}) == {"dry": True, "mode": "fast"}
    # Not the declared type: left as is, so that `problems` names it.
    assert coerce(WORKERS, {"workers": "four"}) == {"workers": "four"}
    assert coerce(REDUCE, {"to": "8.5"}) == {"to": "8.5"}
    assert problems(REDUCE, coerce(REDUCE, {"to": "8.5"})) == ["param 'to': must be an integer, got '8.5'"]
    assert coerce(WORKERS, {"other": "3"}) == {"other": "3"}


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"type": "array"},
        {"properties": {"x": {"type": "float"}}},
        {"properties": {"x": {"type": "string", "minimum": 1}}},
        {"properties": {"x": {"type": "integer", "pattern": "a"}}},
        {"properties": {"x": {"type": "integer", "enum": []}}},
        {"properties": {"x": {"type": "integer"}}, "required": ["y"]},
        {"properties": {}, "oneOf": [{"properties": {}}]},
        {"properties": {}, "allOf": []},
        {"properties": {}, "additionalProperties": {"type": "string"}},
    ],
)
def test_a_schema_outside_the_subset_is_refused(bad: object) -> None:
    with pytest.raises(SchemaError):
        check_schema(bad)


def test_describe_says_what_the_job_accepts() -> None:
    assert describe(REDUCE) == "factor: number > 0 < 1, to: integer >= 1"
    assert describe(WORKERS) == "workers: integer >= 0 <= 16"
    assert describe(command_schema({})) == "no params"
    assert describe(open_schema()) == "any other params"
