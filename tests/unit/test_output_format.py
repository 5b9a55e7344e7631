"""Structured output: which answers fit a chat's output format, and the demo model's answers
that fit any schema a pydantic model emits."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from chatd.fake_provider.answer_formats import example_for
from chatd.output_format import FORMAT_NOTE_PREFIX, OutputFormat, format_note, misfit

FORECAST: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "celsius": {"type": "integer"},
        "sunny": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["city", "celsius", "sunny", "hours"],
    "additionalProperties": False,
}
STRICT = OutputFormat(type="json_schema", name="forecast", schema=FORECAST, strict=True)
FITS = '{"city": "Oslo", "celsius": 3, "sunny": false, "hours": [9, 10]}'


def test_a_strict_schema_accepts_an_answer_that_fits() -> None:
    assert misfit(STRICT, FITS) is None


def test_a_schema_that_is_not_strict_is_never_checked() -> None:
    loose = OutputFormat(type="json_schema", schema=FORECAST)
    assert misfit(loose, "Sunny, 3 degrees.") is None
    assert misfit(loose, '{"city": 3}') is None


def test_json_object_answers_must_be_a_json_object() -> None:
    json_object = OutputFormat(type="json_object")
    assert misfit(json_object, '{"anything": [1, 2]}') is None
    assert misfit(json_object, "[1, 2]") == "the answer is not a JSON object"
    assert misfit(json_object, '"text"') == "the answer is not a JSON object"
    assert misfit(json_object, "text") == (
        "the answer is not JSON (Expecting value at line 1 column 1)"
    )


def test_invalid_json_is_reported_with_its_position() -> None:
    problem = misfit(STRICT, '{"city": "Oslo",\n "celsius": }')
    assert problem == "the answer is not JSON (Expecting value at line 2 column 13)"


def test_a_strict_schema_s_errors_name_their_paths() -> None:
    problem = misfit(
        STRICT, '{"city": "Oslo", "celsius": "cold", "sunny": true, "hours": [9, "x"]}'
    )
    assert problem == (
        "celsius: 'cold' is not of type 'integer'; hours/1: 'x' is not of type 'integer'"
    )


def test_errors_at_the_answer_s_root_say_so() -> None:
    problem = misfit(STRICT, '{"city": "Oslo", "celsius": 3, "sunny": true}')
    assert problem == "the answer: 'hours' is a required property"


def test_at_most_three_errors_are_listed() -> None:
    answer = {"city": 1, "celsius": "cold", "sunny": 0, "hours": ["x"], "wind": 3}
    problem = misfit(STRICT, json.dumps(answer))
    assert problem is not None
    said = problem.split("; ")
    assert len(said) == 3, problem  # of five
    assert said == [
        "the answer: Additional properties are not allowed ('wind' was unexpected)",
        "celsius: 'cold' is not of type 'integer'",
        "city: 1 is not of type 'string'",
    ]


def test_the_note_asking_again_begins_with_its_prefix_and_says_what_was_wrong() -> None:
    note = format_note("celsius: 'cold' is not of type 'integer'")
    assert note.startswith(FORMAT_NOTE_PREFIX)
    assert "celsius: 'cold' is not of type 'integer'" in note


@pytest.mark.parametrize(
    "schema", [{"type": 5}, {"type": "object", "properties": []}, {"required": "city"}]
)
def test_a_format_refuses_a_schema_that_is_not_a_json_schema(schema: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="schema is not a JSON Schema"):
        OutputFormat(type="json_schema", schema=schema)


def test_a_format_takes_its_schema_by_alias_or_by_name() -> None:
    assert OutputFormat.model_validate({"type": "json_schema", "schema": FORECAST}) == (
        OutputFormat(type="json_schema", json_schema=FORECAST)
    )


def test_the_schema_a_provider_is_given_is_any_object_without_one() -> None:
    assert STRICT.schema_or_object() == FORECAST
    assert OutputFormat(type="json_object").schema_or_object() == {"type": "object"}
    assert OutputFormat(type="json_schema").schema_or_object() == {"type": "object"}


# The demo model answers a structured-output request with `example_for(schema)`: it must fit
# every schema a client's pydantic model emits, or a strict format fails the demo's turn.

_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
_SCALARS = ("string", "integer", "number", "boolean")
_MAX_DEPTH = 3


class _PydanticLike:
    """Draws the parts of a schema as pydantic emits them, collecting its `$defs`."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.defs: dict[str, Any] = {}

    def in_defs(self, schema: dict[str, Any]) -> dict[str, Any]:
        name = f"Def{len(self.defs)}"
        self.defs[name] = {**schema, "title": name}
        return {"$ref": f"#/$defs/{name}"}

    def enum(self) -> dict[str, Any]:
        strings = st.lists(_NAMES, min_size=1, max_size=4, unique=True)
        numbers = st.lists(st.integers(-5, 5), min_size=1, max_size=4, unique=True)
        values: list[Any] = self.draw(strings | numbers)
        kind = "string" if isinstance(values[0], str) else "integer"
        if len(values) == 1 and self.draw(st.booleans()):
            return {"const": values[0], "type": kind}  # a one-value Literal
        enum = {"enum": values, "type": kind}
        return self.in_defs(enum) if self.draw(st.booleans()) else enum  # an Enum class

    def field(self, depth: int) -> dict[str, Any]:
        kinds = ["scalar", "enum"] + (["array", "model", "optional"] if depth < _MAX_DEPTH else [])
        kind = self.draw(st.sampled_from(kinds))
        if kind == "scalar":
            return {"type": self.draw(st.sampled_from(_SCALARS))}
        if kind == "enum":
            return self.enum()
        if kind == "array":
            array: dict[str, Any] = {"type": "array", "items": self.field(depth + 1)}
            if self.draw(st.booleans()):
                array["minItems"] = self.draw(st.integers(0, 3))
            return array
        if kind == "model":
            nested = self.model(depth + 1)
            return self.in_defs(nested) if self.draw(st.booleans()) else nested
        return {"anyOf": [self.field(depth + 1), {"type": "null"}], "default": None}

    def model(self, depth: int) -> dict[str, Any]:
        names = self.draw(st.lists(_NAMES, max_size=4, unique=True))
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {name: self.field(depth) for name in names},
            "required": [name for name in names if self.draw(st.booleans())],
        }
        if self.draw(st.booleans()):
            schema["additionalProperties"] = False
        return schema


@st.composite
def pydantic_like_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """An object schema shaped as `BaseModel.model_json_schema()` emits it: scalar, array,
    enum (`Literal` inline, `Enum` classes in `$defs`), optional (`anyOf` with null) and
    nested-model properties, nested models inline or in `$defs` behind a `$ref`."""
    parts = _PydanticLike(draw)
    root = parts.model(0)
    if parts.defs:
        root["$defs"] = parts.defs
    return root


@given(pydantic_like_schemas())
def test_the_demo_model_s_answer_fits_the_schema_it_was_given(schema: dict[str, Any]) -> None:
    Draft202012Validator.check_schema(schema)
    answer = example_for(schema)
    assert [e.message for e in Draft202012Validator(schema).iter_errors(answer)] == []
    strict = OutputFormat(type="json_schema", schema=schema, strict=True)
    assert misfit(strict, json.dumps(answer)) is None


class _Forecast(BaseModel):
    city: str
    celsius: int
    kind: Literal["sun", "rain"]
    hours: list[int]
    tomorrow: _Forecast | None = None


class _Pair(BaseModel):
    pair: tuple[int, str]


class _Tree(BaseModel):
    name: str
    children: list[_Tree]


def test_the_demo_model_answers_a_recursive_model_with_an_optional_self() -> None:
    schema = _Forecast.model_json_schema()
    answer = example_for(schema)
    assert list(Draft202012Validator(schema).iter_errors(answer)) == []


def test_the_demo_model_answers_a_recursive_model_with_a_list_of_itself() -> None:
    schema = _Tree.model_json_schema()
    answer = example_for(schema)
    assert list(Draft202012Validator(schema).iter_errors(answer)) == []


def test_the_demo_model_answers_a_tuple_field() -> None:
    schema = _Pair.model_json_schema()
    answer = example_for(schema)
    assert list(Draft202012Validator(schema).iter_errors(answer)) == []
