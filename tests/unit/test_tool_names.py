"""The names a client tool may not take cover every tool a worker may offer."""

from __future__ import annotations

from chatd.subagents import AGENT_TOOLS
from chatd.tools.advisor import ADVISOR_TOOL_NAME
from chatd.tools.defaults import default_registry
from chatd.tools.names import WORKER_TOOL_NAMES, collision


def test_every_default_built_in_and_the_optional_ones_are_worker_names() -> None:
    registry = default_registry(enable_execute=False, enable_advisor=False)
    built_in = {tool.name for tool in registry.active(None)}
    assert built_in | {"execute", ADVISOR_TOOL_NAME} | AGENT_TOOLS <= WORKER_TOOL_NAMES


def test_a_client_tool_name_is_free_unless_a_worker_or_mcp_name() -> None:
    assert collision("get_weather") is None
    assert collision("list_files") == "the worker's tool 'list_files'"
    assert collision("notes__search") is not None
