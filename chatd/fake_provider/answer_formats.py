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


def example_for(schema: dict[str, Any], root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A value that fits `schema`: the first of each choice, every property filled while
    shallow, then only what is required (so a recursive model ends)."""
    root = root if root is not None else schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, dict) else {}
        return example_for(target, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    options = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf") or []
    if options:
        return _chosen(options, root, depth)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return _object_for(schema, root, depth)
    if kind == "array":
        return _array_for(schema, root, depth)
    return _SCALARS.get(kind)


_SHALLOW = 4
"""How deep an example fills optional properties and array items."""


def _chosen(options: list[dict[str, Any]], root: dict[str, Any], depth: int) -> Any:
    """The first option; deep down, null where null is an option (a recursive model ends)."""
    if depth >= _SHALLOW and any(o.get("type") == "null" for o in options):
        return None
    concrete = [o for o in options if o.get("type") != "null"]
    return example_for(concrete[0], root, depth) if concrete else None


def _object_for(schema: dict[str, Any], root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    return {
        name: example_for(sub, root, depth + 1)
        for name, sub in properties.items()
        if depth < _SHALLOW or name in required
    }


def _array_for(schema: dict[str, Any], root: dict[str, Any], depth: int) -> list[Any]:
    fixed = [example_for(sub, root, depth + 1) for sub in schema.get("prefixItems") or []]
    least = int(schema.get("minItems", 0))
    wanted = max(least, len(fixed), 0 if depth >= _SHALLOW else 1)
    wanted = min(wanted, int(schema.get("maxItems", wanted)))
    items = schema.get("items")
    rest = items if isinstance(items, dict) else {}
    return [*fixed, *(example_for(rest, root, depth + 1) for _ in range(wanted - len(fixed)))]
