"""Loading operator-supplied tools into a worker: `CHATD_TOOLS=package.module:TOOLS`."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from typing import Any

from chatd.tools.base import Tool, ToolRegistry

__all__ = ["TOOLS_ENV", "load_tools", "with_extra_tools"]

TOOLS_ENV = "CHATD_TOOLS"
"""Comma-separated `module:attribute` specs; each attribute is a Tool or a list of Tools."""


def load_tools(spec: str) -> list[Tool[Any]]:
    """The tools named by one `module:attribute` spec."""
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise ValueError(f"tool spec {spec!r} must look like package.module:ATTRIBUTE")
    value = getattr(importlib.import_module(module_name), attribute)
    tools = value if isinstance(value, list | tuple) else [value]
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"{spec} holds {type(tool).__name__}, not a chatd Tool")
    return list(tools)


def with_extra_tools(registry: ToolRegistry, specs: Iterable[str] | None = None) -> ToolRegistry:
    """Add the tools of `specs` (default: the `CHATD_TOOLS` environment variable)."""
    if specs is None:
        specs = [s for s in os.environ.get(TOOLS_ENV, "").split(",") if s.strip()]
    for spec in specs:
        for tool in load_tools(spec):
            registry.register(tool)
    return registry
