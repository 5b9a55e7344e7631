"""The tool set a worker offers unless told otherwise."""

from __future__ import annotations

import os
from typing import Any

from chatd.tools.base import Tool, ToolRegistry
from chatd.tools.builtin import current_time
from chatd.tools.execute import DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS, make_execute_tool
from chatd.tools.workspace import edit_file, list_files, read_file, write_file

__all__ = ["ENABLE_EXECUTE_ENV", "EXECUTE_MAX_TIMEOUT_ENV", "default_registry"]

ENABLE_EXECUTE_ENV = "CHATD_ENABLE_EXECUTE"
"""Set to 1, true or yes to offer the `execute` shell tool (off by default: not a sandbox)."""
EXECUTE_MAX_TIMEOUT_ENV = "CHATD_EXECUTE_MAX_TIMEOUT_SECONDS"
"""The longest timeout, in seconds, an `execute` call may ask for."""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes"}


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


def default_registry(
    enable_execute: bool | None = None, execute_max_timeout_seconds: float | None = None
) -> ToolRegistry:
    """The default built-in tools; `execute` only if enabled (by argument or environment)."""
    if enable_execute is None:
        enable_execute = _env_flag(ENABLE_EXECUTE_ENV)
    tools: list[Tool[Any]] = [current_time, read_file, write_file, edit_file, list_files]
    if enable_execute:
        if execute_max_timeout_seconds is None:
            execute_max_timeout_seconds = _env_seconds(
                EXECUTE_MAX_TIMEOUT_ENV, DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS
            )
        tools.append(make_execute_tool(execute_max_timeout_seconds))
    return ToolRegistry.of(tools)
