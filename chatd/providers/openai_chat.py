"""OpenAI Chat Completions adapter, and the OpenAI error classifier both OpenAI adapters share."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk

from chatd.models import ErrorKind, ModelConfig, ModelError
from chatd.parts import FilePart, Message, PartDelta, TextPart, ToolCallPart, ToolResultPart, Usage
from chatd.providers.base import (
    ModelProvider,
    ModelRequest,
    ProviderError,
    StepFinish,
    StreamEvent,
)
from chatd.providers.errors import (
    described,
    error_fields,
    incomplete_stream_error,
    kind_for_status,
    parse_retry_after_ms,
)
from chatd.providers.errors import transport_error as _transport_error
from chatd.tool_use import ToolUse

__all__ = [
    "OpenAIChatProvider",
    "build_chat_messages",
    "build_chat_request",
    "classify_openai_error",
    "classify_openai_payload",
    "data_url",
    "openai_tool_choice",
    "tool_output_text",
]

_FINISH_REASONS = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "stop": "end_turn",
    "length": "max_tokens",
}


class OpenAIChatProvider(ModelProvider):
    """Streams one step from the OpenAI Chat Completions API.

    Chat Completions has no token counting: `count_input_tokens` is the default, None.
    """

    def __init__(self, client: openai.AsyncOpenAI, provider_name: str = "openai") -> None:
        self._client = client
        self._provider_name = provider_name

    async def stream_step(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield deltas in stream order, then one `StepFinish`; raise `ProviderError`."""
        kwargs = build_chat_request(request)
        mapper = _ChatStreamMapper()
        try:
            stream = await self._client.chat.completions.create(**kwargs, stream=True)
            async with stream:
                async for chunk in stream:
                    for delta in mapper.feed(chunk):
                        yield delta
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise ProviderError(classify_openai_error(exc, self._provider_name)) from exc
        yield mapper.finish(self._provider_name)


# --- request mapping -------------------------------------------------------------------------


def build_chat_request(request: ModelRequest) -> dict[str, Any]:
    """The `chat.completions.create` kwargs (without `stream`) for a request."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(build_chat_messages(request.messages))
    kwargs: dict[str, Any] = {
        "model": request.model.name,
        "messages": messages,
        "stream_options": {"include_usage": True},
        **_call_options(request.model),
    }
    if request.tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
        kwargs |= openai_tool_choice(request.tool_use)
    return kwargs


def openai_tool_choice(use: ToolUse) -> dict[str, Any]:
    """`tool_choice` and `parallel_tool_calls` for a step that offers tools (both OpenAI
    APIs name them alike); nothing for the defaults."""
    options: dict[str, Any] = {}
    if use.mode != "auto":
        options["tool_choice"] = use.mode
    if not use.parallel:
        options["parallel_tool_calls"] = False
    return options


def _call_options(config: ModelConfig) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_completion_tokens": config.max_output_tokens,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "reasoning_effort": config.reasoning_effort,
        "verbosity": config.verbosity,
        "response_format": _response_format(config),
    }
    return {k: v for k, v in options.items() if v is not None}


def _response_format(config: ModelConfig) -> dict[str, Any] | None:
    """Structured output as Chat Completions asks for it."""
    answer_format = config.output_format
    if answer_format is None:
        return None
    if answer_format.type == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {
        "name": answer_format.name,
        "schema": answer_format.schema_or_object(),
        "strict": answer_format.strict,
    }
    if answer_format.description:
        schema["description"] = answer_format.description
    return {"type": "json_schema", "json_schema": schema}


def build_chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our transcript as Chat Completions messages; reasoning and provider tools are dropped."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            out.extend(_assistant_message(message))
        elif message.role == "tool":
            out.extend(_tool_messages(message))
        else:
            out.extend(_user_message(message))
    return out


def _user_message(message: Message) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, FilePart):
            content.append(_file_content(part.media_type, part.data, part.name))
    if not content:
        return []
    if message.role == "system":
        texts = [c["text"] for c in content if c["type"] == "text"]
        return [{"role": "system", "content": "\n\n".join(texts)}]
    return [{"role": "user", "content": content}]


def _file_content(media_type: str, data: str, name: str | None) -> dict[str, Any]:
    if media_type.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": data_url(media_type, data)}}
    file = {"file_data": data_url(media_type, data), "filename": name or "file"}
    return {"type": "file", "file": file}


def _assistant_message(message: Message) -> list[dict[str, Any]]:
    text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.id,
            "type": "function",
            "function": {"name": p.name, "arguments": p.arguments or "{}"},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart) and not p.provider_executed
    ]
    if not text and not calls:
        return []
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return [out]


def _tool_messages(message: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    for part in message.parts:
        if not isinstance(part, ToolResultPart) or part.provider_executed:
            continue
        text = tool_output_text(part)
        if part.media_type and part.data:
            # Tool messages carry text only, so media follows in one user message after them.
            media.append(_file_content(part.media_type, part.data, None))
            text = text or f"[{part.media_type} result attached in the next message]"
        out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": text})
    if media:
        out.append({"role": "user", "content": media})
    return out


def tool_output_text(part: ToolResultPart) -> str:
    """A tool result's output as text (JSON for structured output), marked when it is an error."""
    output = part.output
    if output is None:
        text = ""
    else:
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return f"Error: {text}" if part.is_error else text


def data_url(media_type: str, data: str) -> str:
    """A `data:` URL for base64 data."""
    return f"data:{media_type};base64,{data}"


# --- stream mapping --------------------------------------------------------------------------


class _ChatStreamMapper:
    """Turns completion chunks into part deltas: one text part, one part per tool call."""

    def __init__(self) -> None:
        self._next = 0
        self._text_index: int | None = None
        self._tool_indexes: dict[int, int] = {}
        self._finish_reason: str | None = None
        self._usage = Usage()

    def feed(self, chunk: ChatCompletionChunk) -> list[PartDelta]:
        """The deltas one chunk produces."""
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        deltas: list[PartDelta] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
            text = (choice.delta.content or "") + (choice.delta.refusal or "")
            if text:
                deltas.append(PartDelta(index=self._text(), type="text", text=text))
            for call in choice.delta.tool_calls or []:
                deltas.append(self._tool_delta(call))
        return deltas

    def _text(self) -> int:
        if self._text_index is None:
            self._text_index = self._next
            self._next += 1
        return self._text_index

    def _tool_delta(self, call: Any) -> PartDelta:
        index = self._tool_indexes.get(call.index)
        if index is None:
            index = self._tool_indexes[call.index] = self._next
            self._next += 1
        function = call.function
        return PartDelta(
            index=index,
            type="tool_call",
            id=call.id or None,
            name=(function.name if function else None) or None,
            args_delta=(function.arguments if function else None) or None,
        )

    def finish(self, provider: str) -> StepFinish:
        """The step's `StepFinish`; a stream without a finish reason is an error."""
        if self._finish_reason is None:
            raise ProviderError(incomplete_stream_error(provider))
        reason = _FINISH_REASONS.get(self._finish_reason, self._finish_reason)
        return StepFinish(stop_reason=reason, usage=self._usage)


def _usage(usage: CompletionUsage) -> Usage:
    prompt = usage.prompt_tokens_details
    cached = (prompt.cached_tokens or 0) if prompt else 0
    written = (prompt.cache_write_tokens or 0) if prompt else 0
    details = usage.completion_tokens_details
    return Usage(
        # prompt_tokens includes cached tokens; ours counts them separately (as Anthropic does).
        input_tokens=max(0, usage.prompt_tokens - cached - written),
        output_tokens=usage.completion_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=(details.reasoning_tokens or 0) if details else 0,
    )


# --- errors ----------------------------------------------------------------------------------

_ERROR_CODES: dict[str, tuple[ErrorKind, bool]] = {
    "context_length_exceeded": ("context_exceeded", False),
    "insufficient_quota": ("config", False),
    "model_not_found": ("config", False),
    "invalid_api_key": ("auth", False),
    "rate_limit_exceeded": ("rate_limit", True),
    "server_error": ("generic", True),
    "internal_error": ("generic", True),
    "vector_store_timeout": ("timeout", True),
}
"""OpenAI `code` (or `type`) -> (kind, retryable); codes override the HTTP status."""

_STATUS_OVERRIDES = {"context_length_exceeded", "insufficient_quota", "model_not_found"}


def classify_openai_error(exc: BaseException, provider: str = "openai") -> ModelError:
    """Classify an OpenAI SDK (or raw httpx2 transport) exception as a `ModelError`."""
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return _transport_error(exc, provider, is_timeout=True)
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return _transport_error(exc, provider, is_timeout=False)
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc, provider)
    if isinstance(exc, openai.APIError):  # an error object inside a 200 stream
        fields = error_fields(exc.body)
        code = exc.code or fields.get("code")
        error_type = exc.type or fields.get("type")
        return classify_openai_payload(
            code, fields.get("message") or exc.message, error_type, provider
        )
    return ModelError(
        message=str(exc) or type(exc).__name__,
        provider=provider,
        detail={"type": type(exc).__name__},
    )


def classify_openai_payload(
    code: str | None, message: str, error_type: str | None = None, provider: str = "openai"
) -> ModelError:
    """Classify an error object that arrived in a stream (chat error chunk, Responses event)."""
    kind, retryable = _ERROR_CODES.get(code or "") or _ERROR_CODES.get(
        error_type or "", ("generic", False)
    )
    detail = {"code": code, "type": error_type}
    return ModelError(
        message=described(kind, provider, None, code or error_type, message),
        kind=kind,
        provider=provider,
        retryable=retryable,
        detail={k: v for k, v in detail.items() if v is not None},
    )


def _status_error(exc: openai.APIStatusError, provider: str) -> ModelError:
    fields = error_fields(exc.body)
    code = exc.code or fields.get("code")
    message = fields.get("message") or exc.message
    if code in _STATUS_OVERRIDES:
        kind, retryable = _ERROR_CODES[code]
    else:
        kind, retryable = kind_for_status(exc.status_code)
    error_type = exc.type or fields.get("type")
    detail = {"code": code, "type": error_type, "request_id": exc.request_id}
    return ModelError(
        message=described(kind, provider, exc.status_code, code or error_type, str(message)),
        kind=kind,
        provider=provider,
        retryable=retryable,
        status_code=exc.status_code,
        retry_after_ms=parse_retry_after_ms(exc.response.headers),
        detail={k: v for k, v in detail.items() if v is not None},
    )
