"""Script models for the fake provider: what each request for a model is answered with."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "ApiName",
    "DeltaRecord",
    "FakeError",
    "FakePart",
    "FakeReasoning",
    "FakeRequest",
    "FakeResponse",
    "FakeSearchResult",
    "FakeText",
    "FakeToolCall",
    "FakeUsage",
    "FakeWebSearch",
    "Responder",
    "ScriptBook",
    "ScriptError",
]

ApiName = Literal["anthropic", "openai_chat", "openai_responses", "gemini"]


class FakeText(BaseModel):
    """Text, streamed as deltas of `chunk_size` characters."""

    type: Literal["text"] = "text"
    text: str
    chunk_size: int = Field(default=8, ge=1)


class FakeReasoning(BaseModel):
    """Reasoning: Anthropic thinking (or redacted_thinking), an OpenAI Responses reasoning item.

    Ignored on the Chat Completions wire, which has no reasoning output.
    """

    type: Literal["reasoning"] = "reasoning"
    text: str = ""
    signature: str | None = None
    """Anthropic thinking signature; generated when None."""
    redacted: bool = False
    """Anthropic `redacted_thinking` block / Responses item without summary."""
    encrypted_content: str | None = None
    """Redacted `data` / Responses `encrypted_content` (sent when `include` asks); generated."""
    chunk_size: int = Field(default=8, ge=1)


class FakeToolCall(BaseModel):
    """A client-side tool call; `arguments` is a dict (sent as JSON) or raw text sent verbatim."""

    type: Literal["tool_call"] = "tool_call"
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None
    """Generated in the provider's style when None (also used as Responses `call_id`)."""
    chunk_size: int = Field(default=8, ge=1)

    def arguments_json(self) -> str:
        """The arguments as the JSON text the model streams."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


class FakeSearchResult(BaseModel):
    """One web search hit."""

    url: str
    title: str = ""
    page_age: str | None = None


class FakeWebSearch(BaseModel):
    """A provider-executed web search (Anthropic server_tool_use + result; Responses call)."""

    type: Literal["web_search"] = "web_search"
    query: str
    results: list[FakeSearchResult] = Field(default_factory=list)
    id: str | None = None
    chunk_size: int = Field(default=8, ge=1)
    error_code: str | None = None
    """A search that failed (`unavailable`, `max_uses_exceeded`, ...): Anthropic's result is
    its error object, OpenAI's item ends `failed`."""


FakePart = Annotated[
    FakeText | FakeReasoning | FakeToolCall | FakeWebSearch, Field(discriminator="type")
]


class FakeUsage(BaseModel):
    """Token counts, written verbatim into each provider's usage fields.

    OpenAI's input count includes cached tokens by its own definition, Anthropic's does not.
    """

    input_tokens: int = 10
    output_tokens: int | None = None
    """Generated from the streamed deltas when None."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


class FakeError(BaseModel):
    """An error: an HTTP error response, or the payload of a mid-stream error event."""

    status: int = 500
    type: str = "api_error"
    """Anthropic `error.type` / OpenAI `error.type`."""
    code: str | None = None
    """OpenAI `error.code` (e.g. `insufficient_quota`, `context_length_exceeded`)."""
    message: str = "fake provider error"
    param: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers, e.g. `retry-after`, `retry-after-ms`."""

    @classmethod
    def rate_limited(
        cls, retry_after_s: float | None = None, retry_after_ms: int | None = None
    ) -> FakeError:
        """429 `rate_limit_error` / code `rate_limit_exceeded`, with optional retry hints."""
        headers: dict[str, str] = {}
        if retry_after_s is not None:
            headers["retry-after"] = f"{retry_after_s:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        return cls(
            status=429,
            type="rate_limit_error",
            code="rate_limit_exceeded",
            message="Rate limit exceeded (fake provider)",
            headers=headers,
        )

    @classmethod
    def overloaded(cls) -> FakeError:
        """Anthropic's 529 `overloaded_error` (also the default mid-stream error)."""
        return cls(status=529, type="overloaded_error", code="server_error", message="Overloaded")


class FakeResponse(BaseModel):
    """What one request is answered with: a stream of parts, or an HTTP error."""

    parts: list[FakePart] = Field(default_factory=list)
    usage: FakeUsage = Field(default_factory=FakeUsage)
    stop_reason: str | None = None
    """Neutral `end_turn`/`tool_use`/`max_tokens` (mapped per provider) or a raw provider value;
    None = `tool_use` if there are tool calls, else `end_turn`."""
    first_byte_delay_s: float = 0.0
    """Sleep before the response headers are sent."""
    delta_delay_s: float = 0.0
    """Sleep before each delta frame."""
    hang_after_deltas: int | None = None
    """After this many deltas, send nothing more but keep the connection open."""
    disconnect_after_deltas: int | None = None
    """After this many deltas, drop the connection without finishing the body."""
    stream_error_after_deltas: int | None = None
    """After this many deltas, send the provider's mid-stream error event and end the stream."""
    stream_error: FakeError = Field(default_factory=FakeError.overloaded)
    error: FakeError | None = None
    """Answer with this HTTP error instead of a stream."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra headers on a successful stream."""

    @classmethod
    def of_text(cls, text: str, **fields: Any) -> FakeResponse:
        """A response with one text part."""
        return cls(parts=[FakeText(text=text)], **fields)

    @classmethod
    def of_tool_call(
        cls, name: str, arguments: dict[str, Any] | str | None = None, **fields: Any
    ) -> FakeResponse:
        """A response with one tool call."""
        call = FakeToolCall(name=name, arguments={} if arguments is None else arguments)
        return cls(parts=[call], **fields)

    @classmethod
    def of_error(cls, error: FakeError) -> FakeResponse:
        """A response that is an HTTP error."""
        return cls(error=error)

    def resolved_stop_reason(self) -> str:
        """The neutral stop reason, defaulted from the parts."""
        if self.stop_reason is not None:
            return self.stop_reason
        has_calls = any(isinstance(p, FakeToolCall) for p in self.parts)
        return "tool_use" if has_calls else "end_turn"

    def output_tokens(self) -> int:
        """The output token count to report."""
        if self.usage.output_tokens is not None:
            return self.usage.output_tokens
        return max(1, sum(_part_tokens(p) for p in self.parts))


def _part_tokens(part: FakeText | FakeReasoning | FakeToolCall | FakeWebSearch) -> int:
    if isinstance(part, FakeText | FakeReasoning):
        return len(part.text) // 4 + 1
    if isinstance(part, FakeToolCall):
        return len(part.arguments_json()) // 4 + 1
    return 1


class FakeRequest(BaseModel):
    """A request the fake provider received."""

    api: ApiName
    path: str
    model: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_ns: int = Field(default_factory=time.time_ns)


class DeltaRecord(BaseModel):
    """A streamed text delta and the wall-clock time (`time.time_ns()`) it was written."""

    text: str
    emitted_ns: int


Responder = Callable[[FakeRequest], FakeResponse]
"""Computes the response to a request (dynamic scripts)."""


class ScriptError(Exception):
    """No scripted response is available for a request."""


class ScriptBook:
    """Thread-safe per-model scripts, request log and delta log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, deque[FakeResponse]] = {}
        self._responders: dict[str, Responder] = {}
        self._requests: dict[str, list[FakeRequest]] = {}
        self._count_requests: dict[str, list[FakeRequest]] = {}
        self._token_counts: dict[str, int | FakeError] = {}
        self._deltas: dict[str, list[DeltaRecord]] = {}
        self._stored: set[str] = set()
        self.model_info: dict[str, dict[str, Any]] = {}
        """Extra fields `GET /v1/models/{model}` reports (e.g. vLLM's `max_model_len`)."""
        self.context_windows: dict[str, int] = {}
        """Per-model context windows (tokens): a longer prompt gets the "too long" error."""
        self.default_context_window: int | None = None
        """The window of every model without its own entry (None: unlimited)."""

    def set(self, model: str, script: Sequence[FakeResponse] | Responder) -> None:
        """Replace the script of `model` with a list (consumed in order) or a responder."""
        with self._lock:
            self._queues.pop(model, None)
            self._responders.pop(model, None)
            if callable(script):
                self._responders[model] = script
            else:
                self._queues[model] = deque(script)

    def next_response(self, request: FakeRequest) -> FakeResponse:
        """The response for `request`; raises `ScriptError` if there is none."""
        with self._lock:
            responder = self._responders.get(request.model)
            queue = self._queues.get(request.model)
            if responder is None and queue:
                return queue.popleft()
        if responder is not None:
            return responder(request)
        if queue is None:
            raise ScriptError(f"fake provider: no script for model {request.model!r}")
        raise ScriptError(f"fake provider: script for model {request.model!r} is exhausted")

    def knows(self, model: str) -> bool:
        """Whether `model` has a script (a list, even an exhausted one, or a responder)."""
        with self._lock:
            return model in self._queues or model in self._responders

    def remaining(self, model: str) -> int:
        """How many scripted responses of `model` are left (0 for responders)."""
        with self._lock:
            return len(self._queues.get(model, ()))

    def context_window(self, model: str) -> int | None:
        """The context window enforced for `model`, if any."""
        return self.context_windows.get(model, self.default_context_window)

    def store_response(self, response_id: str) -> None:
        """Remember a stored Responses response, so a later request may chain from it."""
        with self._lock:
            self._stored.add(response_id)

    def forget_response(self, response_id: str) -> None:
        """Drop a stored response, as its expiry or a `DELETE /v1/responses/{id}` would."""
        with self._lock:
            self._stored.discard(response_id)

    def has_response(self, response_id: str) -> bool:
        """Whether `response_id` is stored (a chained request may continue it)."""
        with self._lock:
            return response_id in self._stored

    def record_request(self, request: FakeRequest) -> None:
        """Log a received request."""
        with self._lock:
            self._requests.setdefault(request.model, []).append(request)

    def requests(self, model: str) -> list[FakeRequest]:
        """The requests received for `model`, oldest first."""
        with self._lock:
            return list(self._requests.get(model, ()))

    def set_token_count(self, model: str, answer: int | FakeError | None) -> None:
        """What the token counting endpoints answer for `model`: a count, an error, or
        (None) the default, about four characters of the prompt's JSON per token."""
        with self._lock:
            if answer is None:
                self._token_counts.pop(model, None)
            else:
                self._token_counts[model] = answer

    def token_count(self, model: str) -> int | FakeError | None:
        """The scripted answer to a token count of `model` (None: the default)."""
        with self._lock:
            return self._token_counts.get(model)

    def record_count_request(self, request: FakeRequest) -> None:
        """Log a received token count request (apart from the model's other requests)."""
        with self._lock:
            self._count_requests.setdefault(request.model, []).append(request)

    def count_requests(self, model: str) -> list[FakeRequest]:
        """The token count requests received for `model`, oldest first."""
        with self._lock:
            return list(self._count_requests.get(model, ()))

    def record_delta(self, model: str, text: str) -> None:
        """Log a text delta about to be written, with the wall-clock time."""
        record = DeltaRecord(text=text, emitted_ns=time.time_ns())
        with self._lock:
            self._deltas.setdefault(model, []).append(record)

    def deltas(self, model: str) -> list[DeltaRecord]:
        """The text deltas streamed for `model`, in order."""
        with self._lock:
            return list(self._deltas.get(model, ()))

    def reset(self, model: str | None = None) -> None:
        """Forget scripts and logs of `model` (all models when None)."""
        with self._lock:
            stores: list[dict[str, Any]] = [
                self._queues,
                self._responders,
                self._requests,
                self._count_requests,
                self._token_counts,
                self._deltas,
            ]
            for store in stores:
                if model is None:
                    store.clear()
                else:
                    store.pop(model, None)
