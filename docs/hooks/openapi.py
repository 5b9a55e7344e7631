"""MkDocs hook: the HTTP reference page, rendered from the gateway's own OpenAPI document.

At build time it builds the FastAPI app the gateway serves (`api.app.create_app`, with
settings that open no connection: the app connects only in its lifespan, which never runs
here), takes `app.openapi()` and writes `api/reference.md` from it: every path and method
with its summary, description, parameters, request body and responses, then every schema
with its fields. Nothing is hand-copied, so a route or field added to the code appears in
the docs on the next build, and `mkdocs build --strict` fails if the app can't be built.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "api/reference.md"
ROOT = Path(__file__).resolve().parents[2]

Schema = dict[str, Any]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference page to the site's files."""
    files.append(File.generated(config, PAGE, content=render(openapi_document())))
    return files


def openapi_document() -> dict[str, Any]:
    """The gateway's OpenAPI document, as `/openapi.json` serves it."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from api.app import GatewayConfig, create_app
    from chatd.settings import TemporalSettings

    settings = TemporalSettings(address="localhost:1", task_queue="q")
    config = GatewayConfig(database_url="postgresql://unused", temporal=settings, mcp_servers=[])
    return create_app(config).openapi()


# -- rendering -----------------------------------------------------------------------------

SECTIONS = [
    ("Native API (`/api/v1`)", "/api/v1/"),
    ("Open Responses (`/v1`)", "/v1/"),
    ("Health (no key)", "/"),
]
METHODS = ("get", "post", "put", "patch", "delete")


def render(doc: dict[str, Any]) -> str:
    """The whole page."""
    info = doc.get("info", {})
    lines = [
        "# HTTP reference",
        "",
        '!!! note "Generated"',
        "    This page is rendered at build time from the gateway's OpenAPI document "
        f"(`{info.get('title', '')}` {info.get('version', '')}, OpenAPI {doc.get('openapi', '')}),",
        "    the same one a running gateway serves at `/openapi.json` and `/docs`. "
        "Edit the code, not this page.",
        "",
        _cell(info.get("description", "")).replace("<br>", "\n\n"),
        "",
        "Every route but the health checks takes `Authorization: Bearer <key>`. The WebSocket "
        "mode of Open Responses (`ws://HOST/v1/responses`) is not an OpenAPI operation: see "
        "[WebSocket mode](../open-responses/websocket.md).",
        "",
    ]
    done: set[str] = set()
    for title, prefix in SECTIONS:
        paths = [p for p in doc.get("paths", {}) if p.startswith(prefix) and p not in done]
        if not paths:
            continue
        done.update(paths)
        lines += [f"## {title}", ""]
        for path in paths:
            for method in METHODS:
                op = doc["paths"][path].get(method)
                if op is not None:
                    lines += _operation(method, path, op)
    lines += ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += _schema(name, schema)
    return "\n".join(lines) + "\n"


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    anchor = _slug(f"{method} {path}")
    lines = [f"### `{method.upper()} {path}` {{#{anchor}}}", ""]
    if op.get("summary"):
        lines += [f"**{op['summary']}**", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    params = op.get("parameters") or []
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(schema)} | "
                f"{'yes' if p.get('required') else 'no'} | "
                f"{_cell(p.get('description') or schema.get('description') or '')} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        kinds = [
            f"{_type(c.get('schema', {}))} (`{t}`)" for t, c in body.get("content", {}).items()
        ]
        required = "required" if body.get("required") else "optional"
        lines += [f"Request body ({required}): " + ", ".join(kinds), ""]
    lines += ["| status | meaning | body |", "|---|---|---|"]
    for status, resp in sorted(op.get("responses", {}).items()):
        content = resp.get("content") or {}
        bodies = ", ".join(
            (_type(c["schema"]) if c.get("schema") else "") + f" (`{t}`)"
            for t, c in content.items()
        )
        lines.append(f"| {status} | {_cell(resp.get('description', ''))} | {bodies or '—'} |")
    return [*lines, ""]


def _schema(name: str, schema: Schema) -> list[str]:
    lines = [f"### {name} {{#schema-{_slug(name)}}}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]).replace("<br>", "\n\n"), ""]
    props = schema.get("properties")
    if not props:
        lines += [f"Type: {_type(schema)}", ""]
        return lines
    required = set(schema.get("required", []))
    lines += ["| field | type | required | description |", "|---|---|---|---|"]
    for field, sub in props.items():
        value = sub.get("default")
        default = f" Default: `{value}`." if value not in (None, [], {}) else ""
        lines.append(
            f"| `{field}` | {_type(sub)} | {'yes' if field in required else 'no'} | "
            f"{_cell(sub.get('description', ''))}{default} |"
        )
    return [*lines, ""]


def _type(schema: Schema) -> str:
    """A short, linked rendering of a JSON schema's type."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{_slug(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [_type(s) for s in schema[key] if s.get("type") != "null"]
            nullable = any(s.get("type") == "null" for s in schema[key])
            text = " \\| ".join(dict.fromkeys(options)) or "null"
            return text + (" or null" if nullable else "")
    if "const" in schema:
        return f"`{schema['const']!r}`".replace("'", '"')
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    if isinstance(kind, list):
        return " \\| ".join(kind)
    text = kind or "any"
    if schema.get("format"):
        text += f" ({schema['format']})"
    bounds = [
        f"{label} {schema[key]}"
        for key, label in (
            ("minLength", "≥"),
            ("maxLength", "≤"),
            ("minimum", "≥"),
            ("maximum", "≤"),
            ("minItems", "≥"),
            ("maxItems", "≤"),
        )
        if key in schema
    ]
    return text + (f", {', '.join(bounds)}" if bounds else "")


def _cell(text: str) -> str:
    """Text fit for one table cell (no pipes, no line breaks)."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return "<br>".join(paragraphs).replace("|", "\\|")


def _slug(text: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in text)
    return "-".join(part for part in out.split("-") if part)
