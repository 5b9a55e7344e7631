"""OpenAI Responses API adapter: input items, stream event mapping, in-stream failures."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import openai
from openai import AsyncStream
from openai.types.responses import ResponseStreamEvent, ResponseUsage

from chatd.models import ModelConfig
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
    ModelProvider,
    ModelRequest,
    ProviderError,
    StepFinish,
    StreamEvent,
    guarded_count,
)
from chatd.providers.errors import error_fields, incomplete_stream_error
from chatd.providers.openai_chat import (
    classify_openai_error,
    classify_openai_payload,
    data_url,
    openai_tool_choice,
    tool_output_text,
)

__all__ = [
    "OpenAIResponsesProvider",
    "build_responses_input",
    "build_responses_request",
    "previous_response_missing",
]

_INCOMPLETE_REASONS = {"max_output_tokens": "max_tokens"}
_NOT_COUNTED = frozenset({"max_output_tokens", "temperature", "top_p", "store", "include"})
"""The `responses.create` kwargs `responses.input_tokens.count` doesn't take: the output's
length, the sampling and what is kept of the response, which don't change the input."""


class OpenAIResponsesProvider(ModelProvider):
    """Streams one step from the OpenAI Responses API (stateless unless `openai_chain`)."""

    def __init__(self, client: openai.AsyncOpenAI, provider_name: str = "openai") -> None:
        self._client = client
        self._provider_name = provider_name

    async def stream_step(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield deltas in stream order, then one `StepFinish`; raise `ProviderError`."""
        mapper = _ResponsesStreamMapper(self._provider_name)
        try:
            stream = await self._open_stream(request)
            async with stream:
                async for event in stream:
                    for delta in mapper.feed(event):
                        yield delta
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise ProviderError(classify_openai_error(exc, self._provider_name)) from exc
        yield mapper.finish()

    async def _open_stream(self, request: ModelRequest) -> AsyncStream[ResponseStreamEvent]:
        """Start the stream; a chained request whose stored response is gone (expired or
        deleted) is sent once more with the whole transcript, which starts a new chain."""
        kwargs = build_responses_request(request)
        stream: AsyncStream[ResponseStreamEvent]
        try:
            stream = await self._client.responses.create(**kwargs, stream=True)
        except openai.APIStatusError as exc:
            if "previous_response_id" not in kwargs or not previous_response_missing(exc):
                raise
            kwargs = build_responses_request(request, chain=False)
            stream = await self._client.responses.create(**kwargs, stream=True)
        return stream

    async def count_input_tokens(self, request: ModelRequest) -> int | None:
        """`responses.input_tokens.count` of the step's own request (model, input,
        instructions, tools and tool choice, reasoning, text format; a chained step's
        `previous_response_id`, or its whole transcript when that response is gone, as
        `stream_step` would send it)."""
        return await guarded_count(self._provider_name, self._count(request))

    async def _count(self, request: ModelRequest) -> int:
        kwargs = _counted(build_responses_request(request))
        try:
            counted = await self._client.responses.input_tokens.count(**kwargs)
        except openai.APIStatusError as exc:
            if "previous_response_id" not in kwargs or not previous_response_missing(exc):
                raise
            kwargs = _counted(build_responses_request(request, chain=False))
            counted = await self._client.responses.input_tokens.count(**kwargs)
        return counted.input_tokens


def _counted(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in kwargs.items() if name not in _NOT_COUNTED}


def previous_response_missing(exc: openai.APIStatusError) -> bool:
    """Whether OpenAI refused a request because its `previous_response_id` is not stored.

    OpenAI answers 400 with code `previous_response_not_found`; compatible servers use 404
    or only name the parameter.
    """
    if exc.status_code not in (400, 404):
        return False
    fields = error_fields(exc.body)
    if (exc.code or fields.get("code")) == "previous_response_not_found":
        return True
    message = str(fields.get("message") or exc.message).lower()
    param = exc.param or fields.get("param")
    return param == "previous_response_id" and "not found" in message


# --- request mapping -------------------------------------------------------------------------


def build_responses_request(request: ModelRequest, *, chain: bool = True) -> dict[str, Any]:
    """The `responses.create` kwargs (without `stream`) for a request.

    `chain=False` sends the whole transcript even where chain mode would continue a stored
    response (the response is still stored, so the next turn chains from this one).
    """
    previous_id, messages = _chain_start(request) if chain else (None, request.messages)
    kwargs: dict[str, Any] = {
        "model": request.model.name,
        "input": build_responses_input(messages),
        **_call_options(request.model),
    }
    if request.model.openai_chain:
        kwargs["store"] = True
        kwargs.pop("include", None)
    if previous_id is not None:
        kwargs["previous_response_id"] = previous_id
    if request.system:
        kwargs["instructions"] = request.system
    tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.input_schema,
            "strict": False,
        }
        for t in request.tools
    ]
    search = request.model.web_search
    if search is not None and request.tool_use.offers("web_search"):
        web: dict[str, Any] = {"type": "web_search"}
        if search.user_location:
            web["user_location"] = search.user_location
        if search.search_context_size:
            web["search_context_size"] = search.search_context_size
        if search.allowed_domains:
            web["filters"] = {"allowed_domains": search.allowed_domains}
        tools.append(web)
    if tools:
        kwargs["tools"] = tools
        kwargs |= openai_tool_choice(request.tool_use)
    return kwargs


def _chain_start(request: ModelRequest) -> tuple[str | None, list[Message]]:
    """In chain mode, a turn's first step continues the stored response of the last step.

    That holds while only user messages follow it; once tool results follow, the full
    history is sent (as the seeds do).
    """
    messages = request.messages
    if not request.model.openai_chain:
        return None, messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            rest = messages[index + 1 :]
            if message.response_id and rest and all(m.role == "user" for m in rest):
                return message.response_id, rest
            return None, messages
    return None, messages


def _call_options(config: ModelConfig) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_output_tokens": config.max_output_tokens,
        "temperature": config.temperature,
        "top_p": config.top_p,
    }
    if config.reasoning_effort:
        # Stateless reasoning: nothing is stored, encrypted reasoning is replayed instead.
        options["reasoning"] = {"effort": config.reasoning_effort, "summary": "auto"}
        options["store"] = False
        options["include"] = ["reasoning.encrypted_content"]
    text = _text_options(config)
    if text:
        options["text"] = text
    return {k: v for k, v in options.items() if v is not None}


def _text_options(config: ModelConfig) -> dict[str, Any]:
    """`text`: the answer's format (structured output) and verbosity."""
    text: dict[str, Any] = {}
    answer_format = config.output_format
    if answer_format is not None and answer_format.type == "json_object":
        text["format"] = {"type": "json_object"}
    elif answer_format is not None:
        text["format"] = {
            "type": "json_schema",
            "name": answer_format.name,
            "schema": answer_format.schema_or_object(),
            "strict": answer_format.strict,
        }
        if answer_format.description:
            text["format"]["description"] = answer_format.description
    if config.verbosity:
        text["verbosity"] = config.verbosity
    return text


def build_responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    """Our transcript as Responses input items, in transcript order."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            items.extend(i for i in map(_assistant_item, message.parts) if i is not None)
        elif message.role == "tool":
            items.extend(
                _tool_output_item(p)
                for p in message.parts
                if isinstance(p, ToolResultPart) and not p.provider_executed
            )
        else:
            items.extend(_user_items(message))
    return items


def _user_items(message: Message) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append({"type": "input_text", "text": part.text})
        elif isinstance(part, FilePart):
            content.append(_file_content(part.media_type, part.data, part.name))
    return [{"role": message.role, "content": content}] if content else []


def _file_content(media_type: str, data: str, name: str | None) -> dict[str, Any]:
    if media_type.startswith("image/"):
        return {"type": "input_image", "image_url": data_url(media_type, data), "detail": "auto"}
    return {
        "type": "input_file",
        "file_data": data_url(media_type, data),
        "filename": name or "file",
    }


def _assistant_item(part: Part) -> dict[str, Any] | None:
    if isinstance(part, TextPart) and part.text:
        return {"role": "assistant", "content": part.text}
    if isinstance(part, ReasoningPart):
        data = part.provider_data or {}
        return dict(data) if data.get("type") == "reasoning" else None
    if isinstance(part, ToolCallPart) and not part.provider_executed:
        args = part.arguments or "{}"
        return {"type": "function_call", "call_id": part.id, "name": part.name, "arguments": args}
    if isinstance(part, ToolCallPart):
        data = part.provider_data or {}
        return dict(data) if data.get("type") == "web_search_call" else None
    return None


def _tool_output_item(part: ToolResultPart) -> dict[str, Any]:
    text = tool_output_text(part)
    output: str | list[dict[str, Any]] = text
    if part.media_type and part.data:
        output = [_file_content(part.media_type, part.data, None)]
        if text:
            output.insert(0, {"type": "input_text", "text": text})
    return {"type": "function_call_output", "call_id": part.tool_call_id, "output": output}


# --- stream mapping --------------------------------------------------------------------------


class _ResponsesStreamMapper:
    """Turns Responses stream events into part deltas, one part per output item."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._next = 0
        self._items: dict[int, int] = {}
        self._streamed_args: set[int] = set()
        self._sources: set[str] = set()
        self._called_tools = False
        self._stop_reason: str | None = None
        self._usage = Usage()
        self._response_id: str | None = None
        self._handlers: dict[str, Callable[[Any], list[PartDelta]]] = {
            "response.output_item.added": self._item_added,
            "response.output_item.done": self._item_done,
            "response.output_text.delta": self._text_delta,
            "response.refusal.delta": self._text_delta,
            "response.reasoning_summary_text.delta": self._reasoning_delta,
            "response.reasoning_text.delta": self._reasoning_delta,
            "response.reasoning_summary_part.added": self._summary_part,
            "response.function_call_arguments.delta": self._args_delta,
            "response.output_text.annotation.added": self._annotation,
            "response.completed": self._completed,
            "response.incomplete": self._completed,
            "response.failed": self._failed,
            "error": self._error,
        }

    def feed(self, event: ResponseStreamEvent) -> list[PartDelta]:
        """The deltas one stream event produces."""
        handler = self._handlers.get(str(event.type))
        return handler(event) if handler else []

    def finish(self) -> StepFinish:
        """The step's `StepFinish`; a stream without `response.completed` is an error."""
        if self._stop_reason is None:
            raise ProviderError(incomplete_stream_error(self._provider))
        return StepFinish(
            stop_reason=self._stop_reason, usage=self._usage, response_id=self._response_id
        )

    def _allocate(self) -> int:
        self._next += 1
        return self._next - 1

    def _index(self, output_index: int) -> int:
        if output_index not in self._items:
            self._items[output_index] = self._allocate()
        return self._items[output_index]

    def _item_added(self, event: Any) -> list[PartDelta]:
        item = event.item
        if item.type not in ("message", "reasoning", "function_call", "web_search_call"):
            return []
        index = self._index(event.output_index)
        if item.type != "function_call":
            return []
        self._called_tools = True
        args = item.arguments or None
        if args:
            self._streamed_args.add(event.output_index)
        return [
            PartDelta(
                index=index, type="tool_call", id=item.call_id, name=item.name, args_delta=args
            )
        ]

    def _item_done(self, event: Any) -> list[PartDelta]:
        item, index = event.item, self._index(event.output_index)
        if item.type == "reasoning":
            return [self._reasoning_part(index, item)]
        if item.type == "function_call" and event.output_index not in self._streamed_args:
            return [PartDelta(index=index, type="tool_call", args_delta=item.arguments or None)]
        if item.type == "web_search_call":
            return self._web_search(index, item)
        return []

    def _reasoning_part(self, index: int, item: Any) -> PartDelta:
        texts = [s.text for s in item.summary] or [c.text for c in item.content or []]
        raw = item.model_dump(mode="json", exclude_none=True)
        part = ReasoningPart(text="\n\n".join(texts), provider_data=raw)
        return PartDelta(index=index, type="reasoning", part=part.model_dump(mode="json"))

    def _web_search(self, index: int, item: Any) -> list[PartDelta]:
        raw: dict[str, Any] = item.model_dump(mode="json", exclude_none=True)
        action = raw.get("action") or {}
        call = ToolCallPart(
            id=item.id,
            name="web_search",
            arguments=json.dumps(action),
            provider_executed=True,
            provider_data=raw,
        )
        result = ToolResultPart(
            tool_call_id=item.id,
            name="web_search",
            output={"status": item.status, "sources": action.get("sources") or []},
            is_error=item.status == "failed",
            provider_executed=True,
        )
        deltas = [
            PartDelta(index=index, type="tool_call", part=call.model_dump(mode="json")),
            PartDelta(
                index=self._allocate(), type="tool_result", part=result.model_dump(mode="json")
            ),
        ]
        for source in action.get("sources") or []:
            deltas.extend(self._source(source.get("url", ""), None))
        return deltas

    def _source(self, url: str, title: str | None) -> list[PartDelta]:
        if not url or url in self._sources:  # the same page is often cited many times
            return []
        self._sources.add(url)
        part = SourcePart(url=url, title=title).model_dump()
        return [PartDelta(index=self._allocate(), type="source", part=part)]

    def _text_delta(self, event: Any) -> list[PartDelta]:
        return [PartDelta(index=self._index(event.output_index), type="text", text=event.delta)]

    def _reasoning_delta(self, event: Any) -> list[PartDelta]:
        index = self._index(event.output_index)
        return [PartDelta(index=index, type="reasoning", text=event.delta)]

    def _summary_part(self, event: Any) -> list[PartDelta]:
        if event.summary_index == 0:
            return []
        return [PartDelta(index=self._index(event.output_index), type="reasoning", text="\n\n")]

    def _args_delta(self, event: Any) -> list[PartDelta]:
        self._streamed_args.add(event.output_index)
        index = self._index(event.output_index)
        return [PartDelta(index=index, type="tool_call", args_delta=event.delta)]

    def _annotation(self, event: Any) -> list[PartDelta]:
        annotation = event.annotation
        if annotation is None or getattr(annotation, "type", None) != "url_citation":
            return []
        return self._source(annotation.url, annotation.title)

    def _completed(self, event: Any) -> list[PartDelta]:
        response = event.response
        self._response_id = response.id
        if response.usage is not None:
            self._usage = _usage(response.usage)
        details = response.incomplete_details
        if event.type == "response.incomplete" and details is not None:
            reason = str(details.reason)
            self._stop_reason = _INCOMPLETE_REASONS.get(reason, reason)
        else:
            self._stop_reason = "tool_use" if self._called_tools else "end_turn"
        return []

    def _failed(self, event: Any) -> list[PartDelta]:
        error = event.response.error
        code, message = (error.code, error.message) if error else (None, "response failed")
        raise ProviderError(classify_openai_payload(code, message, None, self._provider))

    def _error(self, event: Any) -> list[PartDelta]:
        raise ProviderError(
            classify_openai_payload(event.code, event.message, None, self._provider)
        )


def _usage(usage: ResponseUsage) -> Usage:
    details = usage.input_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    written = getattr(details, "cache_write_tokens", 0) or 0
    reasoning = usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details else 0
    return Usage(
        # input_tokens includes cached tokens; ours counts them separately (as Anthropic does).
        input_tokens=max(0, usage.input_tokens - cached - written),
        output_tokens=usage.output_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning or 0,
    )
