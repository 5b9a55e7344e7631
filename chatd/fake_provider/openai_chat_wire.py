"""OpenAI Chat Completions streaming wire format (`POST /v1/chat/completions`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from chatd.fake_provider.script import FakeError, FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.fake_provider.sse import EventKind, SseEvent, chunks, new_id

__all__ = ["ChatEncoder", "error_body", "finish_reason", "new_call_id"]

_FINISH_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def new_call_id() -> str:
    """A `call_...` tool call id."""
    return new_id("call_", 24)


def finish_reason(stop_reason: str) -> str:
    """The Chat Completions `finish_reason` for a neutral stop reason."""
    return _FINISH_REASONS.get(stop_reason, stop_reason)


def error_body(error: FakeError) -> dict[str, Any]:
    """The JSON body of an OpenAI HTTP error response."""
    return {"error": _error_object(error)}


def _error_object(error: FakeError) -> dict[str, Any]:
    return {
        "message": error.message,
        "type": error.type,
        "param": error.param,
        "code": error.code,
    }


class ChatEncoder:
    """Encodes one scripted response as `chat.completion.chunk` frames then `[DONE]`.

    Reasoning and web search parts have no Chat Completions form and are skipped.
    """

    def __init__(self, request: FakeRequest, response: FakeResponse) -> None:
        self._request = request
        self._response = response
        self._id = new_id("chatcmpl-", 29)
        self._created = int(time.time())
        options = request.body.get("stream_options") or {}
        self._include_usage = bool(options.get("include_usage"))
        self._tool_index = 0

    def events(self) -> Iterator[SseEvent]:
        """All frames of a successful stream, in order."""
        yield self._chunk({"role": "assistant", "content": "", "refusal": None}, "head")
        for part in self._response.parts:
            if isinstance(part, FakeText):
                for piece in chunks(part.text, part.chunk_size):
                    yield self._chunk({"content": piece}, "delta", text=piece)
            elif isinstance(part, FakeToolCall):
                yield from self._tool_call(part)
        reason = finish_reason(self._response.resolved_stop_reason())
        yield self._chunk({}, "final", finish=reason)
        if self._include_usage:
            yield SseEvent(data=self._envelope([], usage=self._usage()), kind="final")
        yield SseEvent(data="[DONE]", kind="final")

    def error_events(self, error: FakeError) -> list[SseEvent]:
        """The `{"error": ...}` frame of a mid-stream failure."""
        return [SseEvent(data={"error": _error_object(error)}, kind="final")]

    def _tool_call(self, call: FakeToolCall) -> Iterator[SseEvent]:
        index = self._tool_index
        self._tool_index += 1
        first = {
            "index": index,
            "id": call.id or new_call_id(),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield self._chunk({"tool_calls": [first]}, "block")
        arguments = call.arguments_json()
        if not arguments:
            return
        for piece in chunks(arguments, call.chunk_size):
            fragment = {"index": index, "function": {"arguments": piece}}
            yield self._chunk({"tool_calls": [fragment]}, "delta")

    def _chunk(
        self,
        delta: dict[str, Any],
        kind: EventKind,
        text: str | None = None,
        finish: str | None = None,
    ) -> SseEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        data = self._envelope([choice], usage=None)
        return SseEvent(data=data, kind=kind, text=text)

    def _envelope(
        self, choices: list[dict[str, Any]], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._request.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
            "choices": choices,
        }
        if self._include_usage:
            data["usage"] = usage
        return data

    def _usage(self) -> dict[str, Any]:
        usage = self._response.usage
        output = self._response.output_tokens()
        return {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": output,
            "total_tokens": usage.input_tokens + output,
            "prompt_tokens_details": {
                "cached_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "audio_tokens": 0,
            },
            "completion_tokens_details": {
                "reasoning_tokens": usage.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
