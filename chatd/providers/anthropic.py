"""Anthropic Messages API adapter: request mapping, stream mapping, error classification."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Awaitable
from typing import Any, cast

import anthropic
import httpx2
import pydantic_core
from anthropic._constants import RAW_RESPONSE_HEADER
from anthropic._response import AsyncAPIResponse, AsyncResponseContextManager

from chatd.models import ErrorKind, ModelConfig, ModelError
from chatd.parts import (
    FilePart,
    Message,
    Part,
    PartDelta,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from chatd.providers.base import (
    ANTHROPIC_DEFAULT_OUTPUT_TOKENS,
    LEADING_USER_TEXT,
    ModelProvider,
    ModelRequest,
    ProviderError,
    StepFinish,
    StreamEvent,
    guarded_count,
)
from chatd.providers.errors import (
    described,
    error_fields,
    incomplete_stream_error,
    kind_for_status,
    parse_retry_after_ms,
)
from chatd.providers.errors import transport_error as _transport_error
from chatd.sse import parse_sse
from chatd.tool_use import ToolUse

__all__ = [
    "AnthropicProvider",
    "build_anthropic_messages",
    "build_anthropic_request",
    "classify_anthropic_error",
]

_EPHEMERAL = {"type": "ephemeral"}
_UNCACHEABLE = {"thinking", "redacted_thinking"}
_FOREIGN_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


_NOT_COUNTED = frozenset({"max_tokens", "extra_body"})
"""The `messages.create` kwargs `messages.count_tokens` doesn't take: the output's length and
the sampling, which don't change the input."""


class AnthropicProvider(ModelProvider):
    """Streams one step from the Anthropic Messages API (also serves the `demo` model)."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic
        | anthropic.AsyncAnthropicBedrock
        | anthropic.AsyncAnthropicVertex,
        provider_name: str = "anthropic",
    ) -> None:
        self._client = client
        self._provider_name = provider_name

    async def stream_step(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield deltas in stream order, then one `StepFinish`; raise `ProviderError`."""
        kwargs = build_anthropic_request(request)
        mapper = _StreamMapper(self._provider_name)
        try:
            async for event in self._events(kwargs):
                for delta in mapper.feed(event):
                    yield delta
        except (anthropic.AnthropicError, httpx2.TransportError) as exc:
            raise ProviderError(classify_anthropic_error(exc, self._provider_name)) from exc
        yield mapper.finish()

    async def _events(self, kwargs: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The stream's events as their JSON.

        Read from the SSE body, not through the SDK's stream, which builds a typed model of
        every event only for the mapping to read its fields back. Bedrock's stream is AWS's
        binary event stream, which the SDK decodes."""
        if isinstance(self._client, anthropic.AsyncAnthropicBedrock):
            stream = await self._client.messages.create(**kwargs, stream=True)
            async with stream:
                async for event in stream:
                    yield event.to_dict()
            return
        async with self._streamed(kwargs) as response:
            async for sse in parse_sse(response.iter_lines()):
                if sse.event == "error":  # as the SDK's stream raises it
                    raise anthropic.APIStatusError(
                        str(sse.data), response=response.http_response, body=sse.data
                    )
                yield sse.data

    def _streamed(
        self, kwargs: dict[str, Any]
    ) -> AsyncResponseContextManager[AsyncAPIResponse[object]]:
        """`messages.create(**kwargs, stream=True)`'s raw response, its body serialized here
        for Anthropic's own API: the SDK copies a body's every container, then encodes it,
        which for a long chat's messages costs more than the rest of the request. Vertex
        AI's client builds its URL from the body's model, so it gets the body to build it."""
        if type(self._client) is not anthropic.AsyncAnthropic:
            create = self._client.messages.with_streaming_response.create
            return create(**kwargs, stream=True)
        body = {k: v for k, v in kwargs.items() if k != "extra_body"}
        body.update(kwargs.get("extra_body", {}), stream=True)
        headers = {RAW_RESPONSE_HEADER: "stream", "Content-Type": "application/json"}
        posted = self._client.post(
            "/v1/messages",
            content=pydantic_core.to_json(body),
            cast_to=object,
            options={"headers": headers},
        )
        return AsyncResponseContextManager(cast(Awaitable[AsyncAPIResponse[object]], posted))

    async def count_input_tokens(self, request: ModelRequest) -> int | None:
        """`messages.count_tokens` of the step's own request (model, system, messages, tools,
        tool choice, thinking, output format); None on Bedrock, whose SDK client refuses to
        count ("not supported in Bedrock yet"). Vertex AI counts (`count-tokens:rawPredict`)."""
        if isinstance(self._client, anthropic.AsyncAnthropicBedrock):
            return None
        return await guarded_count(self._provider_name, self._count(request))

    async def _count(self, request: ModelRequest) -> int:
        kwargs = build_anthropic_request(request)
        counted = await self._client.messages.count_tokens(
            **{name: value for name, value in kwargs.items() if name not in _NOT_COUNTED}
        )
        return counted.input_tokens


# --- request mapping -------------------------------------------------------------------------


WEB_SEARCH_TOOL_TYPE = "web_search_20250305"


def build_anthropic_request(request: ModelRequest) -> dict[str, Any]:
    """The `messages.create` kwargs (without `stream`) for a request, with cache breakpoints."""
    messages = build_anthropic_messages(request.messages)
    answer_tool = _answer_tool(request)
    # The API refuses thinking in a step whose tool choice is forced: that step doesn't think.
    forced = request.tool_use.mode == "required" or answer_tool is not None
    thinking = _may_think(messages) and not forced
    kwargs: dict[str, Any] = {
        "model": request.model.name,
        "messages": messages,
        **_call_options(request.model, thinking=thinking),
    }
    answer_format = request.model.output_format
    if answer_format is not None and answer_tool is None:
        schema = answer_format.schema_or_object()
        kwargs["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    if request.system:
        kwargs["system"] = [
            {"type": "text", "text": request.system, "cache_control": dict(_EPHEMERAL)}
        ]
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in request.tools
    ]
    search = request.model.web_search
    if search is not None and request.tool_use.offers("web_search"):
        server_tool = {"type": WEB_SEARCH_TOOL_TYPE, "name": "web_search"}
        options = search.model_dump(exclude_none=True, exclude={"search_context_size"})
        tools.append(server_tool | options)
    if answer_tool is not None:
        # The answer is the input of a tool the model must call (this one, or another first).
        only = {"type": "tool", "name": ANSWER_TOOL} if not tools else {"type": "any"}
        kwargs["tools"] = [*tools, answer_tool]
        kwargs["tool_choice"] = only
    elif tools:
        kwargs["tools"] = tools
        choice = _tool_choice(request.tool_use)
        if choice is not None:
            kwargs["tool_choice"] = choice
    _mark_cache(kwargs["messages"])
    return kwargs


ANSWER_TOOL = "give_final_answer"
"""The tool whose input is a structured answer, for models without structured outputs."""
_WITHOUT_STRUCTURED_OUTPUTS = re.compile(r"^claude-(3|(sonnet|opus)-4-(0|2025))")
"""Models older than Anthropic's structured outputs (Claude 3, Sonnet and Opus 4.0)."""


def _answer_tool(request: ModelRequest) -> dict[str, Any] | None:
    """The forced tool that carries a structured answer, when the model can't be given the
    format itself; its input streams as the answer's text (`_StreamMapper`)."""
    answer_format = request.model.output_format
    if answer_format is None or not _WITHOUT_STRUCTURED_OUTPUTS.match(request.model.name):
        return None
    schema = answer_format.schema_or_object()
    if schema.get("type") != "object":
        return None  # a tool's input is an object: such a format goes as instructions only
    description = answer_format.description or "Give your final answer, in this shape."
    return {"name": ANSWER_TOOL, "description": description, "input_schema": schema}


def _tool_choice(use: ToolUse) -> dict[str, Any] | None:
    """Anthropic's `tool_choice` for a step (None: its default, any tools in parallel)."""
    if use.mode == "auto" and use.parallel:
        return None
    choice: dict[str, Any] = {"type": {"auto": "auto", "required": "any", "none": "none"}[use.mode]}
    if not use.parallel and use.mode != "none":
        choice["disable_parallel_tool_use"] = True
    return choice


def _call_options(config: ModelConfig, *, thinking: bool) -> dict[str, Any]:
    max_tokens = config.max_output_tokens or ANTHROPIC_DEFAULT_OUTPUT_TOKENS
    budget = config.thinking_budget_tokens if thinking else None
    if budget:
        # The API requires max_tokens > budget_tokens and rejects sampling overrides with thinking.
        return {
            "max_tokens": max_tokens
            if max_tokens > budget
            else budget + ANTHROPIC_DEFAULT_OUTPUT_TOKENS,
            "thinking": {"type": "enabled", "budget_tokens": budget},
        }
    # The API takes temperature and top_p; the SDK's typed arguments (2.x) no longer name them.
    sampling = {"temperature": config.temperature, "top_p": config.top_p}
    sampling = {name: value for name, value in sampling.items() if value is not None}
    return (
        {"max_tokens": max_tokens, "extra_body": sampling}
        if sampling
        else {"max_tokens": max_tokens}
    )


def _may_think(messages: list[dict[str, Any]]) -> bool:
    """Whether a step may think: not while a tool loop is open whose last assistant message
    has no thinking of its own to send back (its step was another provider's, after a
    fallback), which the API refuses with thinking on. The next turn thinks again."""
    if len(messages) < 2 or messages[-1]["role"] != "user":
        return True
    in_tool_loop = any(b.get("type") == "tool_result" for b in messages[-1]["content"])
    first = messages[-2]["content"][0]
    return not in_tool_loop or first.get("type") in ("thinking", "redacted_thinking")


def _mark_cache(messages: list[dict[str, Any]]) -> None:
    for message in messages[-2:]:
        blocks = [b for b in message["content"] if b.get("type") not in _UNCACHEABLE]
        if blocks:
            blocks[-1]["cache_control"] = dict(_EPHEMERAL)


def build_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our transcript as alternating Anthropic messages (tool results folded into user turns)."""
    answered = _answered_provider_calls(messages)
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        convert = _assistant_block if role == "assistant" else _user_block
        blocks = [b for b in (convert(p, answered) for p in message.parts) if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if out and out[0]["role"] == "assistant":
        # Anthropic's messages begin with the user's; a history given as input (Open
        # Responses) may begin with the model's.
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]})
    return out


def _answered_provider_calls(messages: list[Message]) -> set[str]:
    """Ids of provider-executed calls that have both a call and a result block to replay."""
    calls: set[str] = set()
    results: set[str] = set()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.provider_executed and part.provider_data:
                calls.add(part.id)
            elif isinstance(part, ToolResultPart) and part.provider_executed and part.provider_data:
                results.add(part.tool_call_id)
    return calls & results


def _assistant_block(part: Part, answered: set[str]) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ReasoningPart):
        return _thinking_block(part)
    if isinstance(part, ToolCallPart):
        if part.provider_executed:
            return dict(part.provider_data or {}) if part.id in answered else None
        return {
            "type": "tool_use",
            "id": _tool_use_id(part.id),
            "name": part.name,
            "input": part.arguments_object(),
        }
    if isinstance(part, ToolResultPart) and part.provider_executed:
        return dict(part.provider_data or {}) if part.tool_call_id in answered else None
    return None


def _thinking_block(part: ReasoningPart) -> dict[str, Any] | None:
    data = part.provider_data or {}
    if data.get("type") == "redacted_thinking":
        return dict(data)
    if part.signature:
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    return None  # unsigned reasoning (another provider's) cannot be sent back


def _tool_use_id(call_id: str) -> str:
    """A call id as Anthropic takes it (`^[a-zA-Z0-9_-]+$`): another provider's ids (an
    OpenAI-compatible server's `functions.lookup:0`) get their other characters replaced,
    the same way in the call and in its result."""
    return _FOREIGN_ID_CHARS.sub("_", call_id) or "_"


def _user_block(part: Part, _answered: set[str]) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, FilePart):
        return _media_block(part.media_type, part.data, part.name)
    if isinstance(part, ToolResultPart) and not part.provider_executed:
        return _tool_result_block(part)
    return None


def _tool_result_block(part: ToolResultPart) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    text = _output_text(part.output)
    if text:
        content.append({"type": "text", "text": text})
    if part.media_type and part.data:
        content.append(_media_block(part.media_type, part.data, None))
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": _tool_use_id(part.tool_call_id)}
    if content:
        block["content"] = content
    if part.is_error:
        block["is_error"] = True
    return block


def _output_text(output: Any) -> str:
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _media_block(media_type: str, data: str, name: str | None) -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": data}
    if media_type.startswith("image/"):
        return {"type": "image", "source": source}
    if media_type == "application/pdf":
        return {"type": "document", "source": source}
    if media_type.startswith("text/"):
        text = base64.b64decode(data).decode("utf-8", errors="replace")
        source = {"type": "text", "media_type": "text/plain", "data": text}
        return {"type": "document", "source": source}
    return {"type": "text", "text": f"[file {name or ''} of type {media_type} omitted]"}


# --- stream mapping --------------------------------------------------------------------------


class _StreamMapper:
    """Turns raw Messages stream events into part deltas, tracking usage and stop reason."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._indexes: dict[int, int] = {}
        self._next = 0
        self._server_calls: dict[int, tuple[dict[str, Any], list[str]]] = {}
        self._call_names: dict[str, str] = {}
        self._answers: set[int] = set()
        """Parts that are the input of the answer tool: the answer's text."""
        self._calls = 0
        """Calls of tools other than the answer tool."""
        self._usage = Usage()
        self._stop_reason: str | None = None

    def feed(self, event: dict[str, Any]) -> list[PartDelta]:
        """The deltas one stream event (its JSON) produces."""
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._block_delta(event["index"], event["delta"])
        if kind == "content_block_start":
            return self._block_start(event["index"], event["content_block"])
        if kind == "content_block_stop":
            return self._block_stop(event["index"])
        if kind == "message_start":
            self._update_usage(event["message"].get("usage") or {})
        elif kind == "message_delta":
            self._stop_reason = event["delta"].get("stop_reason") or self._stop_reason
            self._update_usage(event.get("usage") or {})
        elif kind == "message_stop" and self._stop_reason is None:
            self._stop_reason = "end_turn"
        return []

    def finish(self) -> StepFinish:
        """The step's `StepFinish`; a stream that ended without a stop reason is an error."""
        if self._stop_reason is None:
            raise ProviderError(incomplete_stream_error(self._provider))
        called = len(self._indexes) > len(self._answers) and self._stop_reason == "tool_use"
        answered = self._answers and not called
        return StepFinish(
            stop_reason="end_turn" if answered else self._stop_reason, usage=self._usage
        )

    def _allocate(self, block_index: int) -> int:
        index = self._next
        self._next += 1
        self._indexes[block_index] = index
        return index

    def _block_start(self, block_index: int, block: dict[str, Any]) -> list[PartDelta]:
        kind = str(block.get("type"))
        if kind == "server_tool_use":
            self._allocate(block_index)
            self._server_calls[block_index] = (_without_nulls(block), [])
            return []
        if kind.endswith("_tool_result"):
            return self._provider_result(block_index, block)
        return self._client_block_start(self._allocate(block_index), block)

    def _client_block_start(self, index: int, block: dict[str, Any]) -> list[PartDelta]:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            return [PartDelta(index=index, type="text", text=block["text"])]
        if kind == "thinking" and (block.get("thinking") or block.get("signature")):
            return [
                PartDelta(
                    index=index,
                    type="reasoning",
                    text=block.get("thinking") or None,
                    signature=block.get("signature") or None,
                )
            ]
        if kind == "redacted_thinking":
            part = ReasoningPart(provider_data=_without_nulls(block))
            return [PartDelta(index=index, type="reasoning", part=part.model_dump(mode="json"))]
        if kind != "tool_use":
            return []
        arguments = json.dumps(block["input"]) if block.get("input") else None
        if block.get("name") == ANSWER_TOOL:
            self._answers.add(index)
            return [PartDelta(index=index, type="text", text=arguments)] if arguments else []
        self._calls += 1
        call = {"id": block.get("id"), "name": block.get("name"), "args_delta": arguments}
        return [PartDelta(index=index, type="tool_call", **call)]

    def _block_delta(self, block_index: int, delta: dict[str, Any]) -> list[PartDelta]:
        kind = delta.get("type")
        if block_index in self._server_calls:
            if kind == "input_json_delta":
                self._server_calls[block_index][1].append(delta.get("partial_json", ""))
            return []
        index = self._indexes.get(block_index)
        if index is None:
            index = self._allocate(block_index)
        if kind == "text_delta":
            return [PartDelta(index=index, type="text", text=delta.get("text", ""))]
        if kind == "thinking_delta":
            return [PartDelta(index=index, type="reasoning", text=delta.get("thinking", ""))]
        if kind == "signature_delta":
            return [PartDelta(index=index, type="reasoning", signature=delta.get("signature"))]
        if kind == "input_json_delta" and delta.get("partial_json"):
            if index in self._answers:
                return [PartDelta(index=index, type="text", text=delta["partial_json"])]
            return [PartDelta(index=index, type="tool_call", args_delta=delta["partial_json"])]
        return []

    def _block_stop(self, block_index: int) -> list[PartDelta]:
        pending = self._server_calls.pop(block_index, None)
        if pending is None:
            return []
        raw, chunks = pending
        arguments = "".join(chunks) or json.dumps(raw.get("input") or {})
        try:
            raw["input"] = json.loads(arguments)
        except json.JSONDecodeError:
            raw["input"] = {}
        self._call_names[str(raw.get("id"))] = str(raw.get("name"))
        part = ToolCallPart(
            id=str(raw.get("id")),
            name=str(raw.get("name")),
            arguments=arguments,
            provider_executed=True,
            provider_data=raw,
        )
        index = self._indexes[block_index]
        return [PartDelta(index=index, type="tool_call", part=part.model_dump(mode="json"))]

    def _provider_result(self, block_index: int, block: dict[str, Any]) -> list[PartDelta]:
        raw = _without_nulls(block)
        content = raw.get("content")
        items = content if isinstance(content, list) else []
        links = [i for i in items if isinstance(i, dict) and i.get("url")]
        call_id = str(raw.get("tool_use_id"))
        summary = [{"url": i["url"], "title": i.get("title")} for i in links]
        part = ToolResultPart(
            tool_call_id=call_id,
            name=self._call_names.get(call_id, str(raw.get("type")).removesuffix("_tool_result")),
            output=summary or content,
            is_error=isinstance(content, dict) and "error_code" in content,
            provider_executed=True,
            provider_data=raw,
        )
        index = self._allocate(block_index)
        deltas = [PartDelta(index=index, type="tool_result", part=part.model_dump(mode="json"))]
        for link in links:
            source = SourcePart(url=link["url"], title=link.get("title"))
            deltas.append(PartDelta(index=self._next, type="source", part=source.model_dump()))
            self._next += 1
        return deltas

    def _update_usage(self, usage: dict[str, Any]) -> None:
        # message_delta counts are cumulative, so they replace the message_start ones.
        details = usage.get("output_tokens_details") or {}
        counts = {
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "cache_read_tokens": usage.get("cache_read_input_tokens"),
            "cache_write_tokens": usage.get("cache_creation_input_tokens"),
            "reasoning_tokens": details.get("thinking_tokens"),
        }
        for name, value in counts.items():
            if value is not None:
                setattr(self._usage, name, value)


def _without_nulls(value: Any) -> Any:
    """`value` without its null fields, at every depth: what is kept of a block and sent back
    to the API, which may refuse a null where a field is optional."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


# --- errors ----------------------------------------------------------------------------------

_ERROR_TYPES: dict[str, tuple[ErrorKind, bool]] = {
    "overloaded_error": ("overloaded", True),
    "api_error": ("generic", True),
    "rate_limit_error": ("rate_limit", True),
    "timeout_error": ("timeout", True),
    "authentication_error": ("auth", False),
    "permission_error": ("auth", False),
    "not_found_error": ("config", False),
    "billing_error": ("config", False),
    "invalid_request_error": ("invalid_request", False),
    "request_too_large": ("invalid_request", False),
    # Bedrock's exceptions inside its event stream
    "throttlingException": ("rate_limit", True),
    "serviceUnavailableException": ("overloaded", True),
    "internalServerException": ("generic", True),
    "modelStreamErrorException": ("generic", True),
    "modelTimeoutException": ("timeout", True),
    "validationException": ("invalid_request", False),
}
"""Anthropic `error.type` -> (kind, retryable), for errors that arrive inside a 200 stream."""

_CONTEXT_MARKERS = ("prompt is too long", "exceed context limit", "context window")


def classify_anthropic_error(exc: BaseException, provider: str = "anthropic") -> ModelError:
    """Classify an Anthropic SDK (or raw httpx2 transport) exception as a `ModelError`."""
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc, provider)
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return _transport_error(exc, provider, is_timeout=True)
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return _transport_error(exc, provider, is_timeout=False)
    return ModelError(
        message=str(exc) or type(exc).__name__,
        provider=provider,
        detail={"type": type(exc).__name__},
    )


def _status_error(exc: anthropic.APIStatusError, provider: str) -> ModelError:
    fields = error_fields(exc.body)
    error_type = exc.type or fields.get("type")
    message = exc.api_message or fields.get("message") or exc.message
    in_stream = exc.status_code < 400  # an `error` event inside a 200 stream
    if in_stream:
        kind, retryable = _ERROR_TYPES.get(str(error_type), ("generic", False))
    else:
        kind, retryable = kind_for_status(exc.status_code)
    if error_type == "overloaded_error":
        kind, retryable = "overloaded", True
    if kind == "invalid_request" and any(m in str(message).lower() for m in _CONTEXT_MARKERS):
        kind = "context_exceeded"
    detail = {"type": error_type, "error_code": exc.error_code, "request_id": exc.request_id}
    status_code = None if in_stream else exc.status_code
    return ModelError(
        message=described(kind, provider, status_code, error_type, str(message)),
        kind=kind,
        provider=provider,
        retryable=retryable,
        status_code=status_code,
        retry_after_ms=parse_retry_after_ms(exc.response.headers),
        detail={k: v for k, v in detail.items() if v is not None},
    )
