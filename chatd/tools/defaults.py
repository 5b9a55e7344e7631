"""The tool set a worker offers unless told otherwise."""

from __future__ import annotations

import logging
import os
from typing import Any

from chatd.settings import ProviderSettings
from chatd.tools.advisor import ADVISOR_ENV, AdvisorConfig, make_advisor_tool
from chatd.tools.base import Tool, ToolRegistry
from chatd.tools.builtin import current_time
from chatd.tools.execute import (
    DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS,
    ExecuteArgs,
    OwnerAllowList,
    make_execute_tool,
)
from chatd.tools.sandbox import NoSandbox, Sandbox, SandboxUnavailable, available_bubblewrap
from chatd.tools.workspace import edit_file, list_files, read_file, write_file

__all__ = [
    "ADVISOR_ENV",
    "ENABLE_EXECUTE_ENV",
    "EXECUTE_MAX_TIMEOUT_ENV",
    "EXECUTE_NETWORK_ENV",
    "EXECUTE_OWNERS_ENV",
    "EXECUTE_UNSANDBOXED_ENV",
    "default_registry",
]

log = logging.getLogger("chatd.tools")

ENABLE_EXECUTE_ENV = "CHATD_ENABLE_EXECUTE"
"""Set to 1, true or yes to offer the `execute` shell tool (off by default)."""
EXECUTE_MAX_TIMEOUT_ENV = "CHATD_EXECUTE_MAX_TIMEOUT_SECONDS"
"""The longest timeout, in seconds, an `execute` call may ask for."""
EXECUTE_OWNERS_ENV = "CHATD_EXECUTE_OWNERS"
"""Comma-separated owners whose chats may use `execute`, or `*` for all; required with it."""
EXECUTE_NETWORK_ENV = "CHATD_EXECUTE_NETWORK"
"""Set to 1 to give sandboxed commands the worker's network (off by default)."""
EXECUTE_UNSANDBOXED_ENV = "CHATD_EXECUTE_UNSANDBOXED"
"""Set to 1 to run commands directly on the worker where bubblewrap is unavailable."""


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


def _execute_owners() -> OwnerAllowList:
    """The allow-list; there is no default, so enabling execute says who may use it."""
    owners = OwnerAllowList.parse(os.environ.get(EXECUTE_OWNERS_ENV, ""))
    if not owners.everyone and not owners.owners:
        raise ValueError(
            f"{ENABLE_EXECUTE_ENV} is set but {EXECUTE_OWNERS_ENV} is empty: set it to the "
            "comma-separated owners whose chats may run commands, or to * for all of them"
        )
    return owners


def _execute_sandbox() -> Sandbox:
    """bubblewrap, proven to work here; else the worker itself if the operator said so."""
    try:
        return available_bubblewrap(network=_env_flag(EXECUTE_NETWORK_ENV))
    except SandboxUnavailable as err:
        if not _env_flag(EXECUTE_UNSANDBOXED_ENV):
            raise SandboxUnavailable(
                f"{ENABLE_EXECUTE_ENV} is set but commands cannot be sandboxed: {err}. Install "
                "bubblewrap and allow user namespaces (see the README), or set "
                f"{EXECUTE_UNSANDBOXED_ENV}=1 to run them unsandboxed on the worker"
            ) from err
        log.warning(
            "execute runs commands UNSANDBOXED (%s=1): they can read this worker's "
            "environment and every chat's workspace (%s)",
            EXECUTE_UNSANDBOXED_ENV,
            err,
        )
        return NoSandbox()


def _execute_tool(max_timeout_seconds: float | None) -> Tool[ExecuteArgs]:
    if max_timeout_seconds is None:
        max_timeout_seconds = _env_seconds(
            EXECUTE_MAX_TIMEOUT_ENV, DEFAULT_MAX_EXECUTE_TIMEOUT_SECONDS
        )
    owners = _execute_owners()  # before the probe: a missing list is the cheaper mistake
    return make_execute_tool(
        sandbox=_execute_sandbox(),
        owners=owners,
        max_timeout_seconds=max_timeout_seconds,
    )


def default_registry(
    enable_execute: bool | None = None,
    execute_max_timeout_seconds: float | None = None,
    *,
    enable_advisor: bool | None = None,
    providers: ProviderSettings | None = None,
) -> ToolRegistry:
    """The default built-in tools; `execute` and `advisor` only if enabled (by argument or
    environment). `providers` are the credentials the advisor calls models with (default:
    the environment's, as a worker reads them).

    Enabling `execute` fails (ValueError, SandboxUnavailable) rather than offer a tool that
    would run unsandboxed, or for nobody, without the operator saying so.
    """
    if enable_execute is None:
        enable_execute = _env_flag(ENABLE_EXECUTE_ENV)
    if enable_advisor is None:
        enable_advisor = _env_flag(ADVISOR_ENV)
    tools: list[Tool[Any]] = [current_time, read_file, write_file, edit_file, list_files]
    if enable_execute:
        tools.append(_execute_tool(execute_max_timeout_seconds))
    if enable_advisor:
        config = AdvisorConfig.from_env(providers or ProviderSettings.from_env())
        tools.append(make_advisor_tool(config))
    return ToolRegistry.of(tools)
