"""OpenAI Responses streaming wire format (`POST /v1/responses`, `stream: true`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from chatd.fake_provider.openai_chat_wire import new_call_id
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

__all__ = ["ResponsesEncoder"]

_HEX = "0123456789abcdef"


def _item_id(prefix: str) -> str:
    return new_id(prefix, 48, _HEX)


class ResponsesEncoder:
    """Encodes one scripted response as `response.*` events with sequence numbers."""

    def __init__(self, request: FakeRequest, response: FakeResponse) -> None:
        self._request = request
        self._response = response
        self._id = _item_id("resp_")
        self._created = int(time.time())
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        include = request.body.get("include") or []
        self._encrypted = "reasoning.encrypted_content" in include

    @property
    def response_id(self) -> str:
        """The `resp_...` id of this response (what a later request chains from)."""
        return self._id

    def events(self) -> Iterator[SseEvent]:
        """All frames of a successful stream, in order."""
        yield self._event("response.created", "head", response=self._snapshot("in_progress"))
        yield self._event("response.in_progress", "head", response=self._snapshot("in_progress"))
        for part in self._response.parts:
            yield from self._part(part)
        if self._response.resolved_stop_reason() == "max_tokens":
            final = self._snapshot("incomplete", usage=self._usage())
            final["incomplete_details"] = {"reason": "max_output_tokens"}
            yield self._event("response.incomplete", "final", response=final)
            return
        final = self._snapshot("completed", usage=self._usage())
        yield self._event("response.completed", "final", response=final)

    def error_events(self, error: FakeError) -> list[SseEvent]:
        """An `error` event then `response.failed`, as a mid-stream failure sends."""
        code = error.code or "server_error"
        failed = self._snapshot("failed")
        failed["error"] = {"code": code, "message": error.message}
        return [
            self._event("error", "final", code=code, message=error.message, param=error.param),
            self._event("response.failed", "final", response=failed),
        ]

    def _event(
        self, name: str, kind: EventKind, record: str | None = None, **fields: Any
    ) -> SseEvent:
        data = {"type": name, "sequence_number": self._seq, **fields}
        self._seq += 1
        return SseEvent(data=data, event=name, kind=kind, text=record)

    def _snapshot(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self._request.body
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": self._request.model,
            "output": [dict(item) for item in self._output],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": usage,
            "metadata": body.get("metadata") or {},
        }

    def _usage(self) -> dict[str, Any]:
        usage = self._response.usage
        output = self._response.output_tokens()
        return {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {
                "cached_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
            },
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.input_tokens + output,
        }

    def _part(
        self, part: FakeText | FakeReasoning | FakeToolCall | FakeWebSearch
    ) -> Iterator[SseEvent]:
        if isinstance(part, FakeText):
            yield from self._message(part)
        elif isinstance(part, FakeReasoning):
            yield from self._reasoning(part)
        elif isinstance(part, FakeToolCall):
            yield from self._function_call(part)
        else:
            yield from self._web_search(part)

    def _added(self, item: dict[str, Any]) -> SseEvent:
        return self._event(
            "response.output_item.added", "block", output_index=len(self._output), item=item
        )

    def _done(self, item: dict[str, Any]) -> SseEvent:
        index = len(self._output)
        self._output.append(item)
        return self._event("response.output_item.done", "block", output_index=index, item=item)

    def _message(self, part: FakeText) -> Iterator[SseEvent]:
        item = {"id": _item_id("msg_"), "type": "message", "role": "assistant", "content": []}
        where: dict[str, Any] = {
            "item_id": item["id"],
            "output_index": len(self._output),
            "content_index": 0,
        }
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        yield self._added({**item, "status": "in_progress"})
        yield self._event("response.content_part.added", "block", part=empty, **where)
        for piece in chunks(part.text, part.chunk_size):
            yield self._event(
                "response.output_text.delta", "delta", piece, delta=piece, logprobs=[], **where
            )
        done = {**empty, "text": part.text}
        yield self._event(
            "response.output_text.done", "block", text=part.text, logprobs=[], **where
        )
        yield self._event("response.content_part.done", "block", part=done, **where)
        yield self._done({**item, "status": "completed", "content": [done]})

    def _reasoning(self, part: FakeReasoning) -> Iterator[SseEvent]:
        item: dict[str, Any] = {"id": _item_id("rs_"), "type": "reasoning", "summary": []}
        if self._encrypted:
            item["encrypted_content"] = part.encrypted_content or new_id("gAAAAA", 120)
        yield self._added(item)
        summary = [] if part.redacted or not part.text else [part.text]
        where: dict[str, Any] = {
            "item_id": item["id"],
            "output_index": len(self._output),
            "summary_index": 0,
        }
        for text in summary:
            empty = {"type": "summary_text", "text": ""}
            yield self._event("response.reasoning_summary_part.added", "block", part=empty, **where)
            for piece in chunks(text, part.chunk_size):
                yield self._event(
                    "response.reasoning_summary_text.delta", "delta", delta=piece, **where
                )
            yield self._event("response.reasoning_summary_text.done", "block", text=text, **where)
            done = {"type": "summary_text", "text": text}
            yield self._event("response.reasoning_summary_part.done", "block", part=done, **where)
        summary_items = [{"type": "summary_text", "text": t} for t in summary]
        yield self._done({**item, "summary": summary_items})

    def _function_call(self, call: FakeToolCall) -> Iterator[SseEvent]:
        item = {
            "id": _item_id("fc_"),
            "type": "function_call",
            "call_id": call.id or new_call_id(),
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        where: dict[str, Any] = {"item_id": item["id"], "output_index": len(self._output)}
        yield self._added(item)
        arguments = call.arguments_json()
        for piece in chunks(arguments, call.chunk_size) if arguments else []:
            yield self._event(
                "response.function_call_arguments.delta", "delta", delta=piece, **where
            )
        yield self._event(
            "response.function_call_arguments.done", "block", arguments=arguments, **where
        )
        yield self._done({**item, "arguments": arguments, "status": "completed"})

    def _web_search(self, search: FakeWebSearch) -> Iterator[SseEvent]:
        item_id = search.id or _item_id("ws_")
        where: dict[str, Any] = {"item_id": item_id, "output_index": len(self._output)}
        action = {"type": "search", "query": search.query}
        item = {"id": item_id, "type": "web_search_call", "status": "in_progress", "action": action}
        yield self._added(item)
        yield self._event("response.web_search_call.in_progress", "block", **where)
        yield self._event("response.web_search_call.searching", "block", **where)
        if search.error_code is not None:
            yield self._done({**item, "status": "failed"})
            return
        yield self._event("response.web_search_call.completed", "block", **where)
        sources = [{"type": "url", "url": r.url} for r in search.results]
        done_action = {**action, "sources": sources}
        yield self._done({**item, "status": "completed", "action": done_action})
