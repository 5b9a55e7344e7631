"""The MCP config file (chatd.mcp.config): shape rules, `${VAR}` resolution, operator errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatd.mcp.config import (
    HttpServer,
    McpConfig,
    McpConfigError,
    StdioServer,
    load_mcp_config,
    load_mcp_server_names,
    mcp_config_from_env,
    resolve_variables,
    server_names,
)


def write(tmp_path: Path, content: Any) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_an_entry_with_command_is_stdio_and_one_with_url_is_http(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "server-files"], "env": {"A": "1"}},
                "remote-1": {"url": "https://mcp.example.com/mcp", "timeout_s": 5},
            }
        },
    )
    config = load_mcp_config(path)
    assert config.servers == {
        "files": StdioServer(command="npx", args=["-y", "server-files"], env={"A": "1"}),
        "remote-1": HttpServer(url="https://mcp.example.com/mcp", timeout_s=5),
    }
    assert config.servers["files"].timeout_s == 60
    assert server_names(config) == ["files", "remote-1"]
    assert load_mcp_server_names(path) == ["files", "remote-1"]


def test_the_type_key_other_clients_write_is_accepted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "a": {"type": "stdio", "command": "x"},
                "b": {"type": "http", "url": "http://localhost:1/mcp"},
            }
        },
    )
    assert server_names(load_mcp_config(path)) == ["a", "b"]


@pytest.mark.parametrize("path", [None, ""])
def test_no_file_means_no_servers(path: str | None) -> None:
    assert load_mcp_config(path) == McpConfig()
    assert load_mcp_server_names(path) == []


def test_config_from_env_reads_the_named_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATD_MCP_CONFIG", write(tmp_path, {"mcpServers": {"s": {"command": "x"}}}))
    assert server_names(mcp_config_from_env()) == ["s"]
    monkeypatch.delenv("CHATD_MCP_CONFIG")
    assert mcp_config_from_env() == McpConfig()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "is not valid JSON: Expecting property name"),
        ([], 'with an "mcpServers" object'),
        ({"servers": {}}, 'with an "mcpServers" object'),
        ({"mcpServers": {"a_b": {"command": "x"}}}, "'a_b' must be 1 to 32 letters"),
        ({"mcpServers": {"x" * 33: {"command": "x"}}}, "must be 1 to 32 letters"),
        ({"mcpServers": {"s": "npx"}}, "server 's' must be a JSON object"),
        ({"mcpServers": {"s": {}}}, "server 's' needs exactly one of \"command\""),
        ({"mcpServers": {"s": {"command": "x", "url": "http://h"}}}, "needs exactly one of"),
        ({"mcpServers": {"s": {"command": "x", "args": "-y"}}}, "server 's': args: Input should"),
        ({"mcpServers": {"s": {"command": "x", "comand": "y"}}}, "comand: Extra inputs"),
        ({"mcpServers": {"s": {"url": "ftp://h/mcp"}}}, "url: Value error, must start with"),
        ({"mcpServers": {"s": {"url": "http://h", "timeout_s": 0}}}, "timeout_s: Input should be"),
    ],
)
def test_a_config_that_breaks_the_rules_is_an_error_an_operator_can_act_on(
    tmp_path: Path, content: Any, says: str
) -> None:
    path = write(tmp_path, content)
    with pytest.raises(McpConfigError, match=re.escape(says)) as raised:
        load_mcp_config(path)
    assert path in str(raised.value)
    assert "Traceback" not in str(raised.value)
    # The gateway's names-only reading checks the same rules.
    with pytest.raises(McpConfigError, match=re.escape(says)):
        load_mcp_server_names(path)


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    with pytest.raises(McpConfigError, match=f"MCP config {re.escape(missing)}.*can't be read"):
        load_mcp_config(missing)


def test_variables_resolve_in_every_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_BIN", "/opt/bin/server")
    monkeypatch.setenv("MCP_TOKEN", "s3cret")
    monkeypatch.setenv("MCP_HOST", "mcp.example.com")
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "local": {
                    "command": "${MCP_BIN}",
                    "args": ["--token=${MCP_TOKEN}", "--mode=${MCP_MODE:-fast}"],
                    "env": {"TOKEN": "${MCP_TOKEN}"},
                },
                "remote": {
                    "url": "https://${MCP_HOST}/mcp",
                    "headers": {"Authorization": "Bearer ${MCP_TOKEN}"},
                },
            }
        },
    )
    config = load_mcp_config(path)
    assert config.servers["local"] == StdioServer(
        command="/opt/bin/server", args=["--token=s3cret", "--mode=fast"], env={"TOKEN": "s3cret"}
    )
    assert config.servers["remote"] == HttpServer(
        url="https://mcp.example.com/mcp", headers={"Authorization": "Bearer s3cret"}
    )


def test_a_missing_variable_names_the_server_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_NOT_SET", raising=False)
    path = write(
        tmp_path,
        {"mcpServers": {"gh": {"url": "https://h/mcp", "headers": {"A": "${MCP_NOT_SET}"}}}},
    )
    says = r"server 'gh' uses \$\{MCP_NOT_SET\}, which is not set"
    with pytest.raises(McpConfigError, match=says):
        load_mcp_config(path)
    # The gateway needs only the names, not the worker's secrets.
    assert load_mcp_server_names(path) == ["gh"]


def test_a_url_must_still_be_http_once_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_URL", "file:///etc/passwd")
    path = write(tmp_path, {"mcpServers": {"s": {"url": "${MCP_URL}"}}})
    assert load_mcp_server_names(path) == ["s"]
    with pytest.raises(McpConfigError, match="server 's': url: Value error, must start with"):
        load_mcp_config(path)


def test_a_config_built_in_code_checks_names() -> None:
    with pytest.raises(ValueError, match="must be 1 to 32 letters"):
        McpConfig(servers={"has_underscore": StdioServer(command="x")})


names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
plain = st.text(st.characters(blacklist_characters="${}"), max_size=8)


@given(
    pieces=st.lists(st.tuples(plain, names), max_size=4),
    tail=plain,
    values=st.dictionaries(names, st.text(max_size=8)),
)
def test_resolution_replaces_each_reference_once(
    pieces: list[tuple[str, str]], tail: str, values: dict[str, str]
) -> None:
    template = "".join(f"{text}${{{name}}}" for text, name in pieces) + tail
    missing = [name for _, name in pieces if name not in values]
    if missing:
        with pytest.raises(McpConfigError, match=re.escape(f"${{{missing[0]}}}")):
            resolve_variables(template, values, "here")
        return
    expected = "".join(text + values[name] for text, name in pieces) + tail
    # A value holding `${...}` is data, not resolved again.
    assert resolve_variables(template, values, "here") == expected


@given(value=st.text(max_size=8), default=st.text(st.characters(blacklist_characters="}")))
def test_a_default_stands_in_for_an_unset_or_empty_variable(value: str, default: str) -> None:
    template = f"${{V:-{default}}}"
    assert resolve_variables(template, {}, "here") == default
    assert resolve_variables(template, {"V": value}, "here") == (value or default)


def test_a_resolved_value_is_not_resolved_again() -> None:
    assert resolve_variables("${A}-${B}", {"A": "${B}", "B": "b"}, "here") == "${B}-b"
