"""Request checks the real APIs make, so invalid transcripts fail tests loudly (HTTP 400)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from chatd.fake_provider.answer_formats import check_answer_format
from chatd.fake_provider.gemini_wire import validate_gemini
from chatd.fake_provider.script import ApiName
from chatd.fake_provider.shapes import (
    InvalidRequest,
    check_anthropic_block,
    check_anthropic_thinking,
    check_chat_message,
    check_responses_item,
)

__all__ = [
    "InvalidRequest",
    "check_anthropic_messages",
    "check_tool_choice",
    "validate",
    "validate_anthropic",
    "validate_openai_chat",
    "validate_openai_responses",
]


def validate(api: ApiName, body: dict[str, Any]) -> None:
    """Raise `InvalidRequest` if `body` is not a valid request for `api`."""
    if api == "gemini":  # the model is in the path, and so is the choice to stream
        validate_gemini(body)
        return
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("model: Field required", "model")
    check_tool_choice(api, body)
    check_answer_format(api, body)
    if api == "anthropic":
        validate_anthropic(body)
    elif api == "openai_chat":
        validate_openai_chat(body)
    else:
        validate_openai_responses(body)


def check_tool_choice(api: ApiName, body: dict[str, Any]) -> None:
    """`tool_choice` (and OpenAI's `parallel_tool_calls`) only beside tools; Anthropic also
    refuses a forced tool choice while thinking."""
    if body.get("tools"):
        choice = body.get("tool_choice")
        forced = isinstance(choice, dict) and choice.get("type") in ("any", "tool")
        if api == "anthropic" and forced and body.get("thinking"):
            raise InvalidRequest("Thinking may not be enabled when tool_choice forces tool use.")
        return
    if api == "anthropic" and "tool_choice" in body:
        raise InvalidRequest("tool_choice: may only be specified while providing tools")
    for name in ("tool_choice", "parallel_tool_calls"):
        if api != "anthropic" and name in body:
            raise InvalidRequest(f"'{name}' is only allowed when 'tools' are specified.", name)


def _ids(values: list[str]) -> str:
    return ", ".join(values)


def _duplicates(values: list[str]) -> list[str]:
    return [value for value, count in Counter(values).items() if count > 1]


# --- Anthropic Messages -------------------------------------------------------------------


def validate_anthropic(body: dict[str, Any]) -> None:
    """Anthropic Messages rules: max_tokens, alternating roles, tool_use/tool_result pairing."""
    if not isinstance(body.get("max_tokens"), int):
        raise InvalidRequest("max_tokens: Field required")
    check_anthropic_messages(body)


def check_anthropic_messages(body: dict[str, Any]) -> None:
    """The messages and tools of an Anthropic request (Messages, or its token count)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    _check_anthropic_tools(body.get("tools") or [])
    pending: list[str] = []
    previous_role: str | None = None
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            raise InvalidRequest('messages: first message must use the "user" role')
        if role == previous_role:
            raise InvalidRequest(
                f'messages.{i}: roles must alternate between "user" and "assistant"'
            )
        blocks = _anthropic_blocks(i, message, last=i == len(messages) - 1)
        if role == "user":
            _check_tool_results(i, blocks, pending)
            pending = []
        else:
            pending = _tool_use_ids(i, blocks)
        previous_role = role
    check_anthropic_thinking(body)
    if pending:
        raise InvalidRequest(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {_ids(pending)}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )


def _check_anthropic_tools(tools: list[Any]) -> None:
    names: list[str] = []
    for j, tool in enumerate(tools):
        if not isinstance(tool, dict) or not tool.get("name"):
            raise InvalidRequest(f"tools.{j}.name: Field required")
        if tool.get("type") in (None, "custom") and "input_schema" not in tool:
            raise InvalidRequest(f"tools.{j}.custom.input_schema: Field required")
        names.append(str(tool["name"]))
    if dupes := _duplicates(names):
        raise InvalidRequest(f"tools: Tool names must be unique. Duplicated: {_ids(dupes)}")


def _anthropic_blocks(i: int, message: dict[str, Any], last: bool) -> list[dict[str, Any]]:
    content = message.get("content")
    empty_error = InvalidRequest(
        f"messages.{i}: all messages must have non-empty content except for the optional "
        "final assistant message"
    )
    if isinstance(content, str):
        if not content and not (last and message["role"] == "assistant"):
            raise empty_error
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list) or (not content and not last):
        raise empty_error
    for j, block in enumerate(content):
        _check_anthropic_block(f"messages.{i}.content.{j}", block)
        check_anthropic_block(f"messages.{i}.content.{j}", message["role"], block)
    return content


def _check_anthropic_block(where: str, block: Any) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidRequest(f"{where}.type: Field required")
    kind = block["type"]
    if kind == "text" and not block.get("text"):
        raise InvalidRequest("messages: text content blocks must be non-empty")
    if kind == "thinking" and not isinstance(block.get("signature"), str):
        raise InvalidRequest(f"{where}.thinking.signature: Field required")
    if kind in ("tool_use", "server_tool_use") and not block.get("id"):
        raise InvalidRequest(f"{where}.{kind}.id: Field required")
    if kind == "tool_use" and not isinstance(block.get("input"), dict):
        raise InvalidRequest(f"{where}.tool_use.input: Input should be a valid dictionary")
    if kind == "tool_result" and not block.get("tool_use_id"):
        raise InvalidRequest(f"{where}.tool_result.tool_use_id: Field required")


def _tool_use_ids(i: int, blocks: list[dict[str, Any]]) -> list[str]:
    ids = [str(b["id"]) for b in blocks if b["type"] == "tool_use"]
    server_ids = {str(b["id"]) for b in blocks if b["type"] == "server_tool_use"}
    answered = {str(b.get("tool_use_id")) for b in blocks if b["type"].endswith("_tool_result")}
    if missing := sorted(server_ids - answered):
        raise InvalidRequest(
            f"messages.{i}: `server_tool_use` ids were found without a result block: "
            f"{_ids(missing)}"
        )
    if dupes := _duplicates(ids + sorted(server_ids)):
        raise InvalidRequest(f"messages.{i}: `tool_use` ids must be unique: {_ids(dupes)}")
    if any(b["type"] == "tool_result" for b in blocks):
        raise InvalidRequest(
            f"messages.{i}: `tool_result` blocks are only allowed in user messages"
        )
    return ids


def _check_tool_results(i: int, blocks: list[dict[str, Any]], pending: list[str]) -> None:
    kinds = [b["type"] for b in blocks]
    results = [str(b["tool_use_id"]) for b in blocks if b["type"] == "tool_result"]
    if results and kinds[: len(results)] != ["tool_result"] * len(results):
        raise InvalidRequest(
            f"messages.{i}: `tool_result` blocks must come first in the user message content, "
            "before any other content"
        )
    if dupes := _duplicates(results):
        raise InvalidRequest(
            f"messages.{i}: each `tool_use` must have a single result. Found multiple "
            f"`tool_result` blocks with id: {_ids(dupes)}"
        )
    if unexpected := [r for r in results if r not in pending]:
        raise InvalidRequest(
            f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
            f"{_ids(unexpected)}. Each `tool_result` block must have a corresponding "
            "`tool_use` block in the previous message."
        )
    if missing := [p for p in pending if p not in results]:
        raise InvalidRequest(
            f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
            f"after: {_ids(missing)}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message."
        )


# --- OpenAI Chat Completions ---------------------------------------------------------------

_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


def validate_openai_chat(body: dict[str, Any]) -> None:
    """Chat Completions rules: tool messages answer each preceding tool call exactly once."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("[] is too short - 'messages'", "messages")
    if body.get("stream_options") is not None and body.get("stream") is not True:
        raise InvalidRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    open_calls: dict[str, bool] = {}
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _CHAT_ROLES:
            raise InvalidRequest(f"Invalid value for 'messages[{i}].role'.", f"messages.[{i}].role")
        if role == "tool":
            check_chat_message(i, message)
            _answer_call(i, message, open_calls)
            continue
        _require_answers(open_calls)
        check_chat_message(i, message)
        _check_chat_content(i, message)
        open_calls = {cid: False for cid in _chat_call_ids(i, message)}
    _require_answers(open_calls)


def _answer_call(i: int, message: dict[str, Any], open_calls: dict[str, bool]) -> None:
    call_id = message.get("tool_call_id")
    if call_id not in open_calls or open_calls[call_id]:
        raise InvalidRequest(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
            "message with 'tool_calls'.",
            f"messages.[{i}].role",
        )
    open_calls[call_id] = True


def _require_answers(open_calls: dict[str, bool]) -> None:
    if missing := [cid for cid, answered in open_calls.items() if not answered]:
        raise InvalidRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {_ids(missing)}",
            "messages",
        )


def _check_chat_content(i: int, message: dict[str, Any]) -> None:
    content = message.get("content")
    if message["role"] == "assistant" and message.get("tool_calls"):
        return
    if content is None or (isinstance(content, list) and not content):
        raise InvalidRequest(
            f"Invalid value for 'content': expected a string, got {content!r}.",
            f"messages.[{i}].content",
        )


def _chat_call_ids(i: int, message: dict[str, Any]) -> list[str]:
    calls = (message.get("tool_calls") or []) if message["role"] == "assistant" else []
    ids: list[str] = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("arguments"), str)
            or not function.get("name")
            or not call.get("id")
        ):
            raise InvalidRequest(
                f"Invalid tool call at messages[{i}].tool_calls[{j}]",
                f"messages.[{i}].tool_calls.[{j}]",
            )
        ids.append(str(call["id"]))
    if dupes := _duplicates(ids):
        raise InvalidRequest(f"Duplicate tool call ids: {_ids(dupes)}", f"messages.[{i}]")
    return ids


# --- OpenAI Responses ----------------------------------------------------------------------


def validate_openai_responses(body: dict[str, Any]) -> None:
    """Responses rules: every function_call has exactly one function_call_output (and back)."""
    items = body.get("input")
    chained = bool(body.get("previous_response_id") or body.get("conversation"))
    if isinstance(items, str):
        if not items and not chained:
            raise InvalidRequest("Invalid 'input': empty string.", "input")
        return
    if not isinstance(items, list) or (not items and not chained):
        raise InvalidRequest("Missing required parameter: 'input'.", "input")
    calls: list[str] = []
    outputs: list[str] = []
    for j, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(f"Invalid 'input[{j}]': expected an object.", f"input[{j}]")
        check_responses_item(j, item)
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.append(_call_id(j, item))
        elif kind == "function_call_output":
            _check_output(j, _call_id(j, item), calls, outputs, chained)
    if dupes := _duplicates(calls):
        raise InvalidRequest(f"Duplicate function call ids: {_ids(dupes)}.", "input")
    if missing := [cid for cid in calls if cid not in outputs]:
        raise InvalidRequest(f"No tool output found for function call {missing[0]}.", "input")


def _call_id(j: int, item: dict[str, Any]) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"Missing required parameter: 'input[{j}].call_id'.", f"input[{j}]")
    return call_id


def _check_output(
    j: int, call_id: str, calls: list[str], outputs: list[str], chained: bool
) -> None:
    if call_id not in calls and not chained:
        raise InvalidRequest(
            f"No tool call found for function call output with call_id {call_id}.", "input"
        )
    if call_id in outputs:
        raise InvalidRequest(
            f"Duplicate function call output for call_id {call_id}.", f"input[{j}]"
        )
    outputs.append(call_id)
