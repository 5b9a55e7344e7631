"""Structured output: the JSON a chat's final answers must be, and the check of an answer.

A format travels with the chat's model (`ModelConfig.output_format`); each provider maps it
to its own mechanism, and the model-step activity checks a strict format's final answer, so
an answer that does not fit gets one corrective step before the turn fails.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["FORMAT_NOTE_PREFIX", "OutputFormat", "format_note", "misfit"]

FORMAT_NOTE_PREFIX = "Your last answer does not match the required output format"
"""How the corrective message that asks the model to answer again begins."""


_ERRORS_SHOWN = 3


class OutputFormat(BaseModel):
    """The shape of the model's final answer: JSON that fits `json_schema`, or any JSON
    object (`json_object`)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    type: Literal["json_schema", "json_object"]
    name: str = Field(default="response", min_length=1, max_length=64, pattern=r"^[\w-]+$")
    """The schema's name, as OpenAI's `text.format.name` (providers that name none ignore it)."""
    description: str | None = Field(default=None, max_length=4096)
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    """The JSON Schema of the answer (with `type: json_schema`)."""
    strict: bool = False
    """Check the answer against the schema: a misfit gets one corrective step, then fails."""

    @field_validator("json_schema")
    @classmethod
    def _is_a_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as err:
                raise ValueError(f"schema is not a JSON Schema: {err.message}") from err
        return schema

    def schema_or_object(self) -> dict[str, Any]:
        """The schema a provider is given: `json_object` is any object."""
        return self.json_schema if self.json_schema is not None else {"type": "object"}


def misfit(output_format: OutputFormat, text: str) -> str | None:
    """Why `text` is not an answer in `output_format` (None when it is, or when the format is
    not checked). `json_object` answers must parse as an object; strict schemas must fit."""
    if output_format.type == "json_schema" and not output_format.strict:
        return None
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as err:
        return f"the answer is not JSON ({err.msg} at line {err.lineno} column {err.colno})"
    if output_format.type == "json_object":
        return None if isinstance(answer, dict) else "the answer is not a JSON object"
    validator = Draft202012Validator(output_format.schema_or_object())
    errors = sorted(validator.iter_errors(answer), key=lambda e: [str(p) for p in e.path])
    if not errors:
        return None
    said = [
        f"{'/'.join(str(p) for p in error.absolute_path) or 'the answer'}: {error.message}"
        for error in errors[:_ERRORS_SHOWN]
    ]
    return "; ".join(said)[:1000]


def format_note(problem: str) -> str:
    """The message that asks the model for its answer again, saying what was wrong."""
    return (
        f"{FORMAT_NOTE_PREFIX}: {problem}. Answer again with only the JSON the format"
        " requires, and nothing before or after it."
    )
