"""Anthropic Messages streaming wire format (`POST /v1/messages`, `stream: true`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from chatd.fake_provider.script import (
    FakeError,
    FakeReasoning,
    FakeRequest,
    FakeResponse,
    FakeText,
    FakeToolCall,
    FakeWebSearch,
)
from chatd.fake_provider.sse import EventKind, SseEvent, chunks, new_id

__all__ = ["AnthropicEncoder", "error_body", "new_tool_use_id"]

_Delta = tuple[dict[str, Any], str | None]
"""A `content_block_delta` payload and the visible text it carries (recorded), if any."""


def new_tool_use_id() -> str:
    """A `toolu_01...` id."""
    return new_id("toolu_01", 22)


def error_body(error: FakeError, request_id: str | None = None) -> dict[str, Any]:
    """The JSON body of an Anthropic HTTP error response."""
    body: dict[str, Any] = {"type": "error", "error": _error_object(error)}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def _error_object(error: FakeError) -> dict[str, Any]:
    return {"type": error.type, "message": error.message}


class AnthropicEncoder:
    """Encodes one scripted response as Anthropic `message_*`/`content_block_*` events."""

    def __init__(self, request: FakeRequest, response: FakeResponse) -> None:
        self._request = request
        self._response = response
        self._index = 0
        self._searches = 0

    def events(self) -> Iterator[SseEvent]:
        """All frames of a successful stream, in order."""
        yield self._event("message_start", "head", message=self._message_start())
        yield self._event("ping", "head")
        for part in self._response.parts:
            yield from self._part(part)
        delta = {"stop_reason": self._response.resolved_stop_reason(), "stop_sequence": None}
        yield self._event("message_delta", "final", delta=delta, usage=self._final_usage())
        yield self._event("message_stop", "final")

    def error_events(self, error: FakeError) -> list[SseEvent]:
        """The `event: error` frame of a mid-stream failure."""
        return [self._event("error", "final", error=_error_object(error))]

    def _event(
        self, name: str, kind: EventKind, record: str | None = None, **fields: Any
    ) -> SseEvent:
        return SseEvent(data={"type": name, **fields}, event=name, kind=kind, text=record)

    def _message_start(self) -> dict[str, Any]:
        usage = self._response.usage
        return {
            "id": new_id("msg_01", 22),
            "type": "message",
            "role": "assistant",
            "model": self._request.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": usage.cache_write_tokens,
                "cache_read_input_tokens": usage.cache_read_tokens,
                "output_tokens": 1,
                "service_tier": "standard",
            },
        }

    def _final_usage(self) -> dict[str, Any]:
        usage = self._response.usage
        final: dict[str, Any] = {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "output_tokens": self._response.output_tokens(),
        }
        if usage.reasoning_tokens:
            final["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
        if self._searches:
            final["server_tool_use"] = {
                "web_search_requests": self._searches,
                "web_fetch_requests": 0,
            }
        return final

    def _part(
        self, part: FakeText | FakeReasoning | FakeToolCall | FakeWebSearch
    ) -> Iterator[SseEvent]:
        if isinstance(part, FakeText):
            deltas: list[_Delta] = [
                ({"type": "text_delta", "text": c}, c) for c in chunks(part.text, part.chunk_size)
            ]
            yield from self._block({"type": "text", "text": ""}, deltas)
        elif isinstance(part, FakeReasoning):
            yield from self._reasoning(part)
        elif isinstance(part, FakeToolCall):
            block = {"type": "tool_use", "id": part.id or new_tool_use_id(), "name": part.name}
            yield from self._block({**block, "input": {}}, _json_deltas(part))
        else:
            yield from self._web_search(part)

    def _reasoning(self, part: FakeReasoning) -> Iterator[SseEvent]:
        if part.redacted:
            data = part.encrypted_content or new_id("EqQBCkYIAxgC", 120)
            yield from self._block({"type": "redacted_thinking", "data": data}, [])
            return
        deltas: list[_Delta] = [
            ({"type": "thinking_delta", "thinking": c}, None)
            for c in chunks(part.text, part.chunk_size)
        ]
        signature = part.signature or new_id("ErUBCkYIBRgC", 80)
        deltas.append(({"type": "signature_delta", "signature": signature}, None))
        yield from self._block({"type": "thinking", "thinking": "", "signature": ""}, deltas)

    def _web_search(self, part: FakeWebSearch) -> Iterator[SseEvent]:
        self._searches += 1
        call_id = part.id or new_id("srvtoolu_01", 22)
        call = {"type": "server_tool_use", "id": call_id, "name": "web_search", "input": {}}
        args = json.dumps({"query": part.query})
        deltas: list[_Delta] = [
            ({"type": "input_json_delta", "partial_json": c}, None)
            for c in chunks(args, part.chunk_size)
        ]
        yield from self._block(call, deltas)
        results = [
            {
                "type": "web_search_result",
                "url": r.url,
                "title": r.title,
                "encrypted_content": new_id("Eq0C", 40),
                "page_age": r.page_age,
            }
            for r in part.results
        ]
        content: list[dict[str, Any]] | dict[str, Any] = results
        if part.error_code is not None:
            content = {"type": "web_search_tool_result_error", "error_code": part.error_code}
        result = {"type": "web_search_tool_result", "tool_use_id": call_id, "content": content}
        yield from self._block(result, [])

    def _block(self, start: dict[str, Any], deltas: list[_Delta]) -> Iterator[SseEvent]:
        index = self._index
        self._index += 1
        yield self._event("content_block_start", "block", index=index, content_block=start)
        for delta, record in deltas:
            yield self._event("content_block_delta", "delta", record, index=index, delta=delta)
        yield self._event("content_block_stop", "block", index=index)


def _json_deltas(call: FakeToolCall) -> list[_Delta]:
    # Like the real API, a call without arguments streams one empty `partial_json`.
    text = "" if call.arguments == {} else call.arguments_json()
    return [
        ({"type": "input_json_delta", "partial_json": c}, None)
        for c in chunks(text, call.chunk_size)
    ]
