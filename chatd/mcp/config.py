"""The operator's MCP server list: the JSON file named by `CHATD_MCP_CONFIG`.

The file has the shape MCP clients share, `{"mcpServers": {"<name>": {...}}}`. An entry with
`command` is a stdio server (a subprocess), one with `url` a streamable-HTTP server. Strings may
hold `${VAR}` (or `${VAR:-default}`), resolved once from the worker's environment when the file
is loaded, so secrets stay in the environment. Every mistake is a `McpConfigError` whose message
names the file, the server and what to fix: it is printed at startup, not a traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "CONFIG_ENV",
    "HttpServer",
    "McpConfig",
    "McpConfigError",
    "McpServer",
    "StdioServer",
    "load_mcp_config",
    "load_mcp_server_names",
    "mcp_config_from_env",
    "resolve_variables",
    "server_names",
]

CONFIG_ENV = "CHATD_MCP_CONFIG"
"""The environment variable naming the config file (unset or empty: no MCP servers)."""

SERVER_NAME = re.compile(r"^[a-zA-Z0-9-]{1,32}$")
"""No `_`: tools reach the model as `<server>__<tool>`, which must split back unambiguously."""

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class McpConfigError(ValueError):
    """The MCP config can't be used; the message tells an operator what to fix."""


class StdioServer(BaseModel):
    """A server the worker starts as a subprocess and talks to over stdin/stdout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["stdio"] | None = None
    """Accepted so entries copied from other MCP clients load; the shape decides."""
    command: str = Field(min_length=1)
    """The executable (looked up on PATH)."""
    args: list[str] = []
    """Its command-line arguments."""
    env: dict[str, str] = {}
    """Extra environment for it; it inherits only HOME, PATH and a few such from the worker."""
    timeout_s: float = Field(default=60, gt=0)
    """How long a tool call (or a listing of its tools) may take, once the session is open."""
    connect_timeout_s: float = Field(default=30, gt=0)
    """How long starting the server (stdio) and opening the session may take."""


class HttpServer(BaseModel):
    """A server reached over streamable HTTP."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["http", "streamable-http"] | None = None
    """Accepted so entries copied from other MCP clients load; the shape decides."""
    url: str
    """The MCP endpoint, e.g. `https://example.com/mcp`."""
    headers: dict[str, str] = {}
    """Sent with every request (an `Authorization` header, say)."""
    timeout_s: float = Field(default=60, gt=0)
    """How long a tool call (or a listing of its tools) may take, once the session is open."""
    connect_timeout_s: float = Field(default=30, gt=0)
    """How long starting the server (stdio) and opening the session may take."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        # An unresolved `${VAR}` passes here; the resolved entry is validated again.
        if not re.match(r"^(https?://|\$\{)", url):
            raise ValueError("must start with http:// or https://")
        return url


McpServer = StdioServer | HttpServer


class McpConfig(BaseModel):
    """The MCP servers a worker may use, by name."""

    model_config = ConfigDict(frozen=True)

    servers: dict[str, StdioServer | HttpServer] = {}

    @field_validator("servers")
    @classmethod
    def _names_fit(cls, servers: dict[str, McpServer]) -> dict[str, McpServer]:
        for name in servers:
            _check_name(name)
        return servers


def server_names(config: McpConfig) -> list[str]:
    """The configured server names, in file order."""
    return list(config.servers)


def mcp_config_from_env() -> McpConfig:
    """The config named by `CHATD_MCP_CONFIG`, variables resolved (unset: no servers)."""
    return load_mcp_config(os.environ.get(CONFIG_ENV))


def load_mcp_config(path: str | None) -> McpConfig:
    """Read, validate and resolve the config file; None or "" means no servers."""
    if not path:
        return McpConfig()
    entries = _read_entries(path)
    servers = {name: _resolved(name, server, path, os.environ) for name, server in entries.items()}
    return McpConfig(servers=servers)


def load_mcp_server_names(path: str | None) -> list[str]:
    """The server names in the file, checked but without resolving variables.

    For the gateway: it validates a chat's `mcp_servers` against these names and needs none of
    the secrets the worker's environment holds.
    """
    if not path:
        return []
    return list(_read_entries(path))


def _read_entries(path: str) -> dict[str, McpServer]:
    """The file's servers, validated in shape (variables still unresolved)."""
    raw = _read_json(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict):
        raise McpConfigError(
            f'MCP config {path}: expected a JSON object with an "mcpServers" object, '
            'like {"mcpServers": {"files": {"command": "..."}}}'
        )
    entries: dict[str, McpServer] = {}
    for name, entry in raw["mcpServers"].items():
        try:
            _check_name(name)
        except ValueError as err:
            raise McpConfigError(f"MCP config {path}: {err}") from None
        entries[name] = _parse_entry(name, entry, path)
    return entries


def _read_json(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise McpConfigError(
            f"MCP config {path} ({CONFIG_ENV}) can't be read: {err.strerror or err}"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise McpConfigError(
            f"MCP config {path} is not valid JSON: {err.msg} at line {err.lineno} "
            f"column {err.colno}"
        ) from None


def _check_name(name: str) -> None:
    if not SERVER_NAME.match(name):
        raise ValueError(
            f"MCP server name {name!r} must be 1 to 32 letters, digits or '-' "
            "(no '_': tool names are '<server>__<tool>')"
        )


def _parse_entry(name: str, entry: Any, path: str) -> McpServer:
    where = f"MCP config {path}: server {name!r}"
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be a JSON object")
    if ("command" in entry) == ("url" in entry):
        raise McpConfigError(
            f'{where} needs exactly one of "command" (a stdio server) or "url" '
            "(a streamable-HTTP server)"
        )
    return _validated(StdioServer if "command" in entry else HttpServer, entry, where)


def _validated(model: type[McpServer], entry: dict[str, Any], where: str) -> McpServer:
    try:
        return model.model_validate(entry)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'entry'}: {e['msg']}"
            for e in err.errors(include_url=False)
        )
        raise McpConfigError(f"{where}: {problems}") from None


def _resolved(name: str, server: McpServer, path: str, environ: Mapping[str, str]) -> McpServer:
    """The entry with `${VAR}` replaced in every string, validated again."""
    where = f"MCP config {path}: server {name!r}"

    def sub(value: str) -> str:
        return resolve_variables(value, environ, where)

    fields = server.model_dump(exclude_none=True)
    if isinstance(server, StdioServer):
        fields["command"] = sub(server.command)
        fields["args"] = [sub(arg) for arg in server.args]
        fields["env"] = {key: sub(value) for key, value in server.env.items()}
    else:
        fields["url"] = sub(server.url)
        fields["headers"] = {key: sub(value) for key, value in server.headers.items()}
    return _validated(type(server), fields, where)


def resolve_variables(value: str, environ: Mapping[str, str], where: str) -> str:
    """`value` with each `${VAR}` / `${VAR:-default}` replaced, in one pass (a value that
    itself holds `${...}` is not resolved again)."""

    def replace(match: re.Match[str]) -> str:
        variable, default = match.group(1), match.group(2)
        found = environ.get(variable)
        if default is not None and not found:
            return default  # shell semantics: `:-` also replaces an empty value
        if found is not None:
            return found
        raise McpConfigError(f"{where} uses ${{{variable}}}, which is not set in the environment")

    return _VARIABLE.sub(replace, value)
