"""The shapes of blocks, messages and input items the real APIs accept.

A block type or a field that belongs to another provider (a transcript that crossed
providers after a fallback and kept what the target can't take) is refused with HTTP 400,
in the words of the real API.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "InvalidRequest",
    "check_anthropic_block",
    "check_anthropic_thinking",
    "check_chat_message",
    "check_responses_item",
]


class InvalidRequest(Exception):
    """The request would be rejected by the provider with `invalid_request_error`."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _one_of(values: set[str] | frozenset[str]) -> str:
    return ", ".join(f"'{v}'" for v in sorted(values))


# --- Anthropic Messages -------------------------------------------------------------------

_ANTHROPIC_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "document": frozenset({"type", "source", "cache_control", "title", "context", "citations"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}
"""Blocks whose fields are checked; server tool blocks are replayed as the API sent them."""
_ANTHROPIC_SERVER_BLOCKS = frozenset({"server_tool_use", "web_search_tool_result"})
_ANTHROPIC_ASSISTANT_ONLY = frozenset(
    {"thinking", "redacted_thinking", "tool_use", *_ANTHROPIC_SERVER_BLOCKS}
)
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def check_anthropic_block(where: str, role: str, block: dict[str, Any]) -> None:
    """A content block of a `role` message: a known type, its own fields, a valid id."""
    kind = block["type"]
    known = _ANTHROPIC_KEYS.keys() | _ANTHROPIC_SERVER_BLOCKS
    if kind not in known:
        raise InvalidRequest(
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the "
            f"expected tags: {_one_of(set(known))}"
        )
    if role == "user" and kind in _ANTHROPIC_ASSISTANT_ONLY:
        raise InvalidRequest(f"{where}: `{kind}` blocks are only allowed in assistant messages")
    if extra := sorted(block.keys() - _ANTHROPIC_KEYS.get(kind, block.keys())):
        raise InvalidRequest(f"{where}.{kind}.{extra[0]}: Extra inputs are not permitted")
    if kind == "tool_use" and not _TOOL_USE_ID.match(str(block["id"])):
        raise InvalidRequest(f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")


def check_anthropic_thinking(body: dict[str, Any]) -> None:
    """With thinking on, an open tool loop's assistant message must begin with thinking."""
    thinking = body.get("thinking")
    messages = body["messages"]
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled" or len(messages) < 2:
        return
    last, answered = messages[-1], messages[-2]
    content = last.get("content")
    blocks = content if isinstance(content, list) else []
    if not any(b.get("type") == "tool_result" for b in blocks):
        return
    answered_blocks = answered.get("content")
    first = answered_blocks[0]["type"] if isinstance(answered_blocks, list) else "text"
    if first not in ("thinking", "redacted_thinking"):
        raise InvalidRequest(
            f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or "
            f"`redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final "
            "`assistant` message must start with a thinking block (preceeding the lastmost set "
            "of `tool_use` and `tool_result` blocks). To avoid this requirement, disable "
            "`thinking`."
        )


# --- OpenAI Chat Completions ---------------------------------------------------------------

_CHAT_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset(
        {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}
    ),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_CHAT_PARTS: dict[str, frozenset[str]] = {
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
}


def check_chat_message(i: int, message: dict[str, Any]) -> None:
    """A message's own fields only, and content parts of the types its role takes."""
    role = message["role"]
    if extra := sorted(message.keys() - _CHAT_KEYS[role]):
        raise InvalidRequest(
            f"Additional properties are not allowed ('{extra[0]}' was unexpected) - 'messages.{i}'",
            f"messages.[{i}]",
        )
    content = message.get("content")
    allowed = _CHAT_PARTS.get(role, frozenset({"text"}))
    for j, part in enumerate(content if isinstance(content, list) else []):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            raise InvalidRequest(
                f"Invalid value: '{kind}'. Supported values are: {_one_of(allowed)}.",
                f"messages[{i}].content[{j}].type",
            )


# --- OpenAI Responses ----------------------------------------------------------------------

_RESPONSES_KEYS: dict[str, frozenset[str]] = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "call_id", "name", "arguments", "id", "status"}),
    "function_call_output": frozenset({"type", "call_id", "output", "id", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
}
_RESPONSES_OTHER_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "item_reference",
    }
)
"""Item types taken as they are (replayed as the API sent them)."""


def check_responses_item(j: int, item: dict[str, Any]) -> None:
    """An input item of a known type, with its own fields (a reasoning item its summary)."""
    kind = item.get("type", "message")
    known = _RESPONSES_KEYS.keys() | _RESPONSES_OTHER_ITEMS
    if kind not in known:
        raise InvalidRequest(
            f"Invalid value: '{kind}'. Supported values are: {_one_of(set(known))}.",
            f"input[{j}].type",
        )
    if extra := sorted(item.keys() - _RESPONSES_KEYS.get(kind, item.keys())):
        raise InvalidRequest(
            f"Unknown parameter: 'input[{j}].{extra[0]}'.", f"input[{j}].{extra[0]}"
        )
    if kind == "reasoning" and not isinstance(item.get("summary"), list):
        raise InvalidRequest(f"Missing required parameter: 'input[{j}].summary'.", f"input[{j}]")
