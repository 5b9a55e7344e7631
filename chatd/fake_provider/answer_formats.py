"""Structured output on the fake provider: the format a request asks for, in any of the three
wire formats, checked as the real APIs check it, and a JSON answer that fits a schema (the
demo model's)."""

from __future__ import annotations

from typing import Any

from chatd.fake_provider.script import ApiName
from chatd.fake_provider.shapes import InvalidRequest

__all__ = ["check_answer_format", "example_for", "requested_schema"]

_SCALARS: dict[str, Any] = {
    "string": "demo",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "null": None,
}


def check_answer_format(api: ApiName, body: dict[str, Any]) -> None:
    """Refuse a malformed format request (HTTP 400), as the real API does."""
    if api == "anthropic":
        fmt = (body.get("output_config") or {}).get("format")
        if fmt is not None and (fmt.get("type") != "json_schema" or "schema" not in fmt):
            raise InvalidRequest("output_config.format: a json_schema format needs a schema")
        return
    if api == "openai_chat":
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            named = (fmt.get("json_schema") or {}).get("name")
            if not isinstance(named, str) or not named:
                raise InvalidRequest(
                    "Missing required parameter: 'response_format.json_schema.name'.",
                    "response_format.json_schema.name",
                )
        return
    fmt = (body.get("text") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and not fmt.get("name"):
        raise InvalidRequest("Missing required parameter: 'text.format.name'.", "text.format.name")


def requested_schema(api: ApiName, body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema the answer must fit (`{"type": "object"}` for a JSON-object mode);
    None for plain text."""
    if api == "anthropic":
        fmt = (body.get("output_config") or {}).get("format")
        return fmt.get("schema") if isinstance(fmt, dict) else None
    if api == "openai_chat":
        fmt = body.get("response_format")
        nested = fmt.get("json_schema") if isinstance(fmt, dict) else None
    else:
        fmt = (body.get("text") or {}).get("format")
        nested = fmt
    if not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    schema = nested.get("schema") if isinstance(nested, dict) else None
    return schema if isinstance(schema, dict) else {"type": "object"}


def example_for(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A value that fits `schema`: every property filled, the first of each choice."""
    root = root if root is not None else schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, dict) else {}
        return example_for(target, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for choice in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(choice) or [] if o.get("type") != "null"]
        if options:
            return example_for(options[0], root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: example_for(sub, root) for name, sub in properties.items()}
    if kind == "array":
        items = schema.get("items")
        count = max(1, int(schema.get("minItems", 1)))
        return [example_for(items, root) for _ in range(count)] if items else []
    return _SCALARS.get(kind)
