"""The Response object: a response's row and its transcript messages, in the shape Open
Responses defines (every field present; nullable ones as null).

Output items are read from the transcript only, so `GET /v1/responses/{id}` shows what the
chat durably holds: an attempt abandoned by a crashed worker is not in it. Item ids are
`<kind>_<response hex>_<n>`, n counting the response's items in order, as its stream does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

from api.open_responses.client_tools import ClientTools, call_item
from api.open_responses.sealing import SealedKind
from chatd.models import ModelError
from chatd.output_format import OutputFormat, misfit
from chatd.parts import Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart, Usage
from chatd.store.responses import ResponseRecord
from chatd.store.transcript import StoredMessage
from chatd.tools.names import MCP_SEPARATOR

__all__ = [
    "APPROVAL_PREFIX",
    "ItemIds",
    "ReasoningShown",
    "ResponseStatus",
    "approval_request_item",
    "awaits_approval",
    "build_resource",
    "cost_of",
    "function_call_item",
    "is_web_search",
    "output_format_of",
    "output_items",
    "reasoning_shown",
    "response_status",
    "shows_as_tool_run",
    "superseded",
    "tool_call_item",
    "usage_of",
    "web_search_item",
]

APPROVAL_PREFIX = "mcpr_"
"""An approval request's id: this, then the id of the call it asks about."""

ResponseStatus = str
"""queued, in_progress, completed, failed, cancelled or incomplete."""

_ERROR_CODES = {
    "rate_limit": "rate_limit_exceeded",
    "context_exceeded": "context_length_exceeded",
    "invalid_request": "invalid_prompt",
    "auth": "server_error",
    "overloaded": "server_error",
    "unavailable": "server_error",
    "internal": "server_error",
}
"""Our error kinds as the codes OpenAI's failed responses carry (the rest: `kind` itself)."""


class ItemIds:
    """Ids for a response's output items, in order."""

    def __init__(self, response_id: str) -> None:
        self._hex = response_id.removeprefix("resp_")
        self._count = 0

    def next(self, prefix: str) -> str:
        item_id = f"{prefix}_{self._hex}_{self._count}"
        self._count += 1
        return item_id


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}] if text else [],
    }


@dataclass(frozen=True)
class ReasoningShown:
    """How a response shows the model's reasoning: as its summary (the client set
    `reasoning.summary`) or its content, and with its provider state sealed into
    `encrypted_content` (the client included `reasoning.encrypted_content`)."""

    as_summary: bool = False
    seal: Callable[[ReasoningPart], str] | None = None

    def item(self, item_id: str, text: str, part: ReasoningPart | None = None) -> dict[str, Any]:
        """The reasoning item; `part` (with its provider state) is what gets sealed."""
        kind = "summary_text" if self.as_summary else "reasoning_text"
        texts = [{"type": kind, "text": text}] if text else []
        item: dict[str, Any] = {
            "type": "reasoning",
            "id": item_id,
            "summary": texts if self.as_summary else [],
            "content": [] if self.as_summary else texts,
        }
        restorable = part is not None and (part.signature or part.provider_data)
        if self.seal is not None and part is not None and restorable:
            item["encrypted_content"] = self.seal(part)
        return item


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    """A reasoning item as shown by default: its text as content, nothing sealed."""
    return ReasoningShown().item(item_id, text)


def reasoning_shown(
    record: ResponseRecord, seal: Callable[[str, str, SealedKind], str]
) -> ReasoningShown:
    """How the response asked to see reasoning; `seal` seals text for an owner."""
    asked = record.request.get("reasoning") or {}
    sealed = "reasoning.encrypted_content" in (record.request.get("include") or [])
    owner = record.owner
    return ReasoningShown(
        as_summary=asked.get("summary") is not None,
        seal=(lambda part: seal(owner, part.model_dump_json(), "reasoning")) if sealed else None,
    )


def function_call_item(item_id: str, call: ToolCallPart, status: str) -> dict[str, Any]:
    """A model's call as a plain `function_call` item (its tool's kind unknown)."""
    return call_item(item_id, call, status, None)


def tool_call_item(
    item_id: str, call: ToolCallPart | None, result: ToolResultPart
) -> dict[str, Any]:
    """A tool the workers ran: an MCP server's as an `mcp_call` item; a built-in one
    (workspace tools, `execute`, subagents, the advisor) as the extension `chatd:tool_call`."""
    server, separator, tool = result.name.partition(MCP_SEPARATOR)
    if separator:
        output = result.output if isinstance(result.output, str) else json.dumps(result.output)
        return {
            "type": "mcp_call",
            "id": item_id,
            "server_label": server,
            "name": tool,
            "arguments": call.arguments if call else "",
            "output": None if result.is_error else output,
            "error": output if result.is_error else None,
        }
    return {
        "type": "chatd:tool_call",
        "id": item_id,
        "status": "incomplete" if result.is_error else "completed",
        "call_id": result.tool_call_id,
        "name": result.name,
        "arguments": call.arguments if call else "",
        "output": result.output,
        "is_error": result.is_error,
    }


def web_search_item(
    item_id: str, call: ToolCallPart, result: ToolResultPart | None, status: str | None = None
) -> dict[str, Any]:
    """A search the provider ran while the model streamed, as OpenAI's `web_search_call`
    item: `in_progress` until its result, then `completed` or `failed` (or `status`)."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        arguments = {}
    query = arguments.get("query") if isinstance(arguments, dict) else None
    action: dict[str, Any] = {"type": "search", "query": query if isinstance(query, str) else ""}
    sources = _sources(result.output) if result is not None else []
    if sources:
        action["sources"] = sources
    if status is None:
        status = "in_progress" if result is None else "failed" if result.is_error else "completed"
    return {"type": "web_search_call", "id": item_id, "status": status, "action": action}


def _sources(output: Any) -> list[dict[str, str]]:
    """The pages a search found: Anthropic's results are a list of pages, OpenAI's an object
    with `sources`."""
    found = output.get("sources") if isinstance(output, dict) else output
    pages = found if isinstance(found, list) else []
    return [
        {"type": "url", "url": page["url"]}
        for page in pages
        if isinstance(page, dict) and isinstance(page.get("url"), str)
    ]


def is_web_search(part: ToolCallPart) -> bool:
    return part.provider_executed and part.name == "web_search"


def approval_request_item(call: ToolCallPart) -> dict[str, Any]:
    """A call waiting for a person's approval: an MCP server's tool (`<server>__<tool>`) or
    a built-in one (server label `chatd`). Its id names the call, so the answer maps back."""
    server, separator, tool = call.name.partition(MCP_SEPARATOR)
    return {
        "type": "mcp_approval_request",
        "id": f"{APPROVAL_PREFIX}{call.id}",
        "server_label": server if separator else "chatd",
        "name": tool if separator else call.name,
        "arguments": call.arguments,
    }


def shows_as_tool_run(
    part: ToolResultPart, client_tools: Container[str], answered: set[str]
) -> bool:
    """Whether a result is an item of its own: a tool the workers ran, not the client's
    answer (that is input) nor a provider's (its call carries it)."""
    return (
        part.tool_call_id not in answered
        and not part.provider_executed
        and part.name not in client_tools
    )


def awaits_approval(call: ToolCallPart, client_tools: Container[str], results: set[str]) -> bool:
    """Whether a call a turn stopped on waits for a person (not for the client, and with no
    result yet)."""
    return call.name not in client_tools and call.id not in results and not call.provider_executed


def output_format_of(record: ResponseRecord) -> OutputFormat | None:
    """The structured output format the response asked for (None: plain text)."""
    fmt = (record.request.get("text") or {}).get("format") or {}
    if fmt.get("type") not in ("json_schema", "json_object"):
        return None
    return OutputFormat.model_validate(fmt)


def superseded(message: StoredMessage, output_format: OutputFormat | None) -> bool:
    """Whether a model step is a final answer that missed the output format: the model was
    asked again (or the response failed), so it is not part of the output."""
    if output_format is None or message.role != "assistant":
        return False
    if any(isinstance(p, ToolCallPart) and not p.provider_executed for p in message.parts):
        return False
    text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
    return misfit(output_format, text) is not None


def output_items(
    record: ResponseRecord,
    messages: list[StoredMessage],
    client_tools: ClientTools,
    reasoning: ReasoningShown = ReasoningShown(),
) -> list[dict[str, Any]]:
    """The response's output: each model step's reasoning, text, provider web searches and
    client function calls, then the results of the tools the workers ran for it."""
    answer_format = output_format_of(record)
    messages = [m for m in messages if not superseded(m, answer_format)]
    ids = ItemIds(record.id)
    answered = set(record.answered_call_ids)
    calls: dict[str, ToolCallPart] = {}
    results: set[str] = set()
    searched = {
        part.tool_call_id: part
        for message in messages
        for part in message.parts
        if isinstance(part, ToolResultPart) and part.provider_executed
    }
    items: list[dict[str, Any]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls[part.id] = part
            item = _step_item(part, message.role, ids, searched, client_tools, reasoning)
            if item is not None:
                items.append(item)
            if isinstance(part, ToolResultPart):
                results.add(part.tool_call_id)
                if shows_as_tool_run(part, client_tools, answered):
                    call = calls.get(part.tool_call_id)
                    items.append(tool_call_item(ids.next("tc"), call, part))
    if record.ended_status == "requires_action":
        items += [
            approval_request_item(call)
            for call in calls.values()
            if awaits_approval(call, client_tools, results)
        ]
    return items


def _step_item(
    part: Part,
    role: str,
    ids: ItemIds,
    searched: dict[str, ToolResultPart],
    client_tools: ClientTools,
    reasoning: ReasoningShown,
) -> dict[str, Any] | None:
    """The item a model step's part is: its reasoning, text, a provider's web search, or a
    call of the client's functions (None for the rest)."""
    if isinstance(part, ToolCallPart) and is_web_search(part):
        return web_search_item(ids.next("ws"), part, searched.get(part.id))
    if isinstance(part, ReasoningPart) and role == "assistant":
        return reasoning.item(ids.next("rs"), part.text, part)
    if isinstance(part, TextPart) and role == "assistant":
        return message_item(ids.next("msg"), part.text, "completed")
    if isinstance(part, ToolCallPart) and not part.provider_executed and part.name in client_tools:
        return call_item(ids.next("fc"), part, "completed", client_tools[part.name])
    return None


def usage_of(messages: list[StoredMessage]) -> dict[str, Any]:
    total = Usage()
    for message in messages:
        if message.usage is not None:
            total = total + message.usage
    return {
        "input_tokens": total.input_tokens,
        "output_tokens": total.output_tokens,
        "total_tokens": total.input_tokens + total.output_tokens,
        "input_tokens_details": {"cached_tokens": total.cache_read_tokens},
        "output_tokens_details": {"reasoning_tokens": total.reasoning_tokens},
    }


def response_status(
    record: ResponseRecord, messages: list[StoredMessage], running_turn: str | None
) -> tuple[ResponseStatus, dict[str, Any] | None]:
    """The status, and `incomplete_details` when incomplete. A response whose turn hasn't
    begun is queued; one whose model stopped at `max_output_tokens` is incomplete."""
    if record.ended_at is None:
        return ("in_progress" if running_turn == record.turn_id else "queued"), None
    if record.cancel_requested_at is not None:
        return "cancelled", None
    if record.ended_status == "error":
        return "failed", None
    if record.ended_status == "budget":
        return "incomplete", {"reason": "budget"}
    limit = record.request.get("max_output_tokens")
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if limit and last and last.usage and last.usage.output_tokens >= limit:
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def cost_of(messages: list[StoredMessage]) -> dict[str, Any] | None:
    """What the response's model steps cost (`chatd:cost`): USD, and whether any of it is
    an estimate; None when none of them was priced."""
    priced = [m for m in messages if m.cost_usd is not None]
    if not priced:
        return None
    return {
        "usd": sum(m.cost_usd or 0.0 for m in priced),
        "estimated": any(m.cost_estimated for m in priced),
    }


def _text_field(text: dict[str, Any] | None) -> dict[str, Any]:
    """The request's `text` as a Response repeats it: every field of its format present
    (the schema too, as OpenAI repeats it)."""
    text = dict(text or {})
    fmt = dict(text.get("format") or {"type": "text"})
    if fmt["type"] == "json_schema":
        fmt = {"description": None, "strict": False, **fmt}
    return {**text, "format": fmt}


def error_of(error: ModelError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"code": _ERROR_CODES.get(error.kind, error.kind), "message": error.message}


def build_resource(
    record: ResponseRecord,
    *,
    status: ResponseStatus,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Response object; `status` decides `completed_at`, `error` and what else shows.
    `cost` (what the response's steps cost) shows as `chatd:cost` beside `usage`."""
    request = record.request
    ended = status in ("completed", "failed", "cancelled", "incomplete")
    extension = {} if cost is None else {"chatd:cost": cost}
    return {
        "id": record.id,
        "object": "response",
        "created_at": int(record.created_at.timestamp()),
        "completed_at": int(record.ended_at.timestamp()) if ended and record.ended_at else None,
        "status": status,
        "incomplete_details": incomplete,
        "model": request["model"],
        "previous_response_id": record.previous_response_id,
        "instructions": request.get("instructions"),
        "output": output,
        "error": error_of(record.ended_error) if status == "failed" else None,
        "tools": request.get("tools", []),
        "tool_choice": request.get("tool_choice", "auto"),
        "truncation": request.get("truncation", "disabled"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "text": _text_field(request.get("text")),
        "top_p": request.get("top_p") if request.get("top_p") is not None else 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "temperature": (
            request.get("temperature") if request.get("temperature") is not None else 1.0
        ),
        "reasoning": request.get("reasoning"),
        "usage": usage,
        **extension,
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": None,
        "store": record.store,
        "background": request.get("background", False),
        "service_tier": "default",  # the one tier served here, whatever was asked
        "metadata": request.get("metadata", {}),
        "safety_identifier": request.get("safety_identifier"),
        "prompt_cache_key": request.get("prompt_cache_key"),
        "conversation": {"id": str(record.chat_id)},
    }
