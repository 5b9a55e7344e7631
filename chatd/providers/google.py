"""Google Gemini adapter (`google-genai`), on the Gemini Developer API or Vertex AI.

Gemini's thinking is carried by `thought_signature`s on the parts they came with: on a
function call it stays with that call (`ToolCallPart.provider_data`); on text or an empty
part it becomes a signature-only `ReasoningPart`, sent back in the same place. Thought
summaries are streamed as reasoning and not sent back (the API doesn't need them). Another
provider's reasoning and call ids are left out: Gemini matches a function response to its
call by name when the call has no id of Gemini's.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
from google.genai import Client, errors

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
    LEADING_USER_TEXT,
    ModelProvider,
    ModelRequest,
    ProviderError,
    StepFinish,
    StreamEvent,
    guarded_count,
)
from chatd.providers.errors import incomplete_stream_error, kind_for_status, transport_error
from chatd.providers.openai_chat import tool_output_text
from chatd.tool_use import ToolUse

__all__ = [
    "API_VERSION",
    "GoogleProvider",
    "build_contents",
    "build_generate_config",
    "classify_google_error",
]

API_VERSION = "v1beta"
"""The Gemini API version chatd speaks (thinking and Search grounding are there)."""

SIGNATURE = "gemini_thought_signature"
"""`provider_data` type of a `ReasoningPart` holding only a Gemini thought signature."""

_FINISH_REASONS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
_FILTERED = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "LANGUAGE",
}
"""Finish reasons of an answer Google withheld: an error the user can read, not silence."""
_MALFORMED = {"MALFORMED_FUNCTION_CALL", "MALFORMED_RESPONSE", "UNEXPECTED_TOOL_CALL"}
"""Finish reasons of an answer the model botched: asked for again, as a cut stream is."""
_STATUS_KINDS: dict[str, tuple[ErrorKind, bool]] = {
    "RESOURCE_EXHAUSTED": ("rate_limit", True),
    "UNAVAILABLE": ("overloaded", True),
    "DEADLINE_EXCEEDED": ("timeout", True),
    "INTERNAL": ("generic", True),
    "INVALID_ARGUMENT": ("invalid_request", False),
    "FAILED_PRECONDITION": ("config", False),
    "UNAUTHENTICATED": ("auth", False),
    "PERMISSION_DENIED": ("auth", False),
    "NOT_FOUND": ("config", False),
}
_CONTEXT_MARKERS = ("input token count", "exceeds the maximum number of tokens", "too long")
_SECONDS = re.compile(r"^(\d+(?:\.\d+)?)s$")


class GoogleProvider(ModelProvider):
    """Streams one step from Gemini (`generate_content_stream`)."""

    def __init__(self, client: Client, provider_name: str = "google") -> None:
        self._client = client
        self._provider_name = provider_name

    async def stream_step(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield deltas in stream order, then one `StepFinish`; raise `ProviderError`."""
        mapper = _GeminiStreamMapper(self._provider_name)
        try:
            # The request is sent on the first iteration: errors surface inside the loop.
            stream = await self._client.aio.models.generate_content_stream(
                model=request.model.name,
                contents=build_contents(request.messages),
                config=build_generate_config(request),  # type: ignore[arg-type]
            )
            async for chunk in stream:
                for delta in mapper.feed(chunk):
                    yield delta
        except (errors.APIError, httpx2.TransportError, httpx.TransportError) as exc:
            raise ProviderError(classify_google_error(exc, self._provider_name)) from exc
        except errors.UnknownApiResponseError as exc:
            raise ProviderError(
                ModelError(
                    message=f"the provider's stream could not be read: {exc}",
                    provider=self._provider_name,
                    retryable=True,
                )
            ) from exc
        yield mapper.finish()

    async def count_input_tokens(self, request: ModelRequest) -> int | None:
        """`models.count_tokens` of the step's contents, system instruction and tools.

        The SDK's count config takes a system instruction and tools on Vertex AI only (on the
        Developer API it refuses them, and `generation_config` too): there the count asks
        for the step's whole `generateContentRequest` instead, built by the SDK as
        `generate_content_stream` builds it.
        """
        return await guarded_count(self._provider_name, self._count(request))

    async def _count(self, request: ModelRequest) -> int | None:
        name = request.model.name
        contents = build_contents(request.messages)
        config = build_generate_config(request)
        if self._client.vertexai:
            counted_parts = {k: config[k] for k in ("system_instruction", "tools") if k in config}
            counted = await self._client.aio.models.count_tokens(
                model=name,
                contents=contents,
                config=counted_parts,  # type: ignore[arg-type]
            )
        else:
            whole = _generate_content_request(self._client, name, contents, config)
            options = {"extra_body": {"generateContentRequest": whole}}
            counted = await self._client.aio.models.count_tokens(
                model=name,
                contents=None,  # never both: the request holds them
                config={"http_options": options},  # type: ignore[arg-type]
            )
        return counted.total_tokens


def _generate_content_request(
    client: Client, model: str, contents: list[dict[str, Any]], config: dict[str, Any]
) -> dict[str, Any]:
    """The Developer API's `GenerateContentRequest` for a step, as the SDK's
    `generate_content_stream` writes it (its own request conversion, which is private)."""
    from google.genai import _common, types
    from google.genai import models as sdk_models

    params = types._GenerateContentParameters(model=model, contents=contents, config=config)
    wire = sdk_models._GenerateContentParameters_to_mldev(client._api_client, params)
    path = wire.pop("_url")
    for local in ("_query", "config"):
        wire.pop(local, None)
    wire = _common.encode_unserializable_types(_common.convert_to_dict(wire))
    return {"model": path["model"], **wire}


# --- request mapping -------------------------------------------------------------------------


def build_generate_config(request: ModelRequest) -> dict[str, Any]:
    """The `GenerateContentConfig` (as a dict) for a request: no SDK retries, no automatic
    function calling or continuation, so each step is exactly one HTTP request."""
    model = request.model
    config: dict[str, Any] = {
        "automatic_function_calling": {"disable": True},
        "automatic_continuation": False,
        **_call_options(model),
    }
    if request.system:
        config["system_instruction"] = request.system
    tools = _tools(request)
    if tools:
        config["tools"] = tools
        if request.tools:
            config["tool_config"] = {"function_calling_config": _function_calling(request.tool_use)}
    return config


def _call_options(model: ModelConfig) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_output_tokens": model.max_output_tokens,
        "temperature": model.temperature,
        "top_p": model.top_p,
    }
    thinking = _thinking(model)
    if thinking:
        options["thinking_config"] = thinking
    answer = model.output_format
    if answer is not None:
        options["response_mime_type"] = "application/json"
        options["response_json_schema"] = answer.schema_or_object()
    return {k: v for k, v in options.items() if v is not None}


_EFFORT_BUDGETS = {"minimal": 0, "low": 1024, "medium": 8192, "high": 24576}
"""`reasoning_effort` as a thinking budget (Gemini 2.5 takes tokens, not levels)."""


def _thinking(model: ModelConfig) -> dict[str, Any] | None:
    budget = model.thinking_budget_tokens
    if budget is None and model.reasoning_effort is not None:
        budget = _EFFORT_BUDGETS[model.reasoning_effort]
    if budget is None:
        return None
    return {"thinking_budget": budget, "include_thoughts": budget > 0}


def _tools(request: ModelRequest) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    if request.model.web_search is not None and request.tool_use.offers("web_search"):
        tools.append({"google_search": {}})
    if request.tools:
        declarations = [
            {
                "name": t.name,
                "description": t.description,
                "parameters_json_schema": t.input_schema,
            }
            for t in request.tools
        ]
        tools.append({"function_declarations": declarations})
    return tools


def _function_calling(use: ToolUse) -> dict[str, Any]:
    """Gemini's mode (`AUTO`, `ANY`: some call, `NONE`) and the names it may call."""
    modes = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
    config: dict[str, Any] = {"mode": modes[use.mode]}
    if use.only is not None and use.mode == "required":
        config["allowed_function_names"] = list(use.only)
    return config


def build_contents(messages: list[Message]) -> list[dict[str, Any]]:
    """Our transcript as Gemini `contents`: the model's turns `model`, the rest `user`
    (tool results are function responses in a user turn), neighbours of a role merged."""
    given = {
        part.id
        for message in messages
        for part in message.parts
        if isinstance(part, ToolCallPart) and (part.provider_data or {}).get("gemini_id")
    }
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "model" if message.role == "assistant" else "user"
        parts = [
            p
            for part in message.parts
            for p in (_model_part(part) if role == "model" else _user_parts(part, given))
        ]
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    if out and out[0]["role"] == "model":
        out.insert(0, {"role": "user", "parts": [{"text": LEADING_USER_TEXT}]})
    return out


def _model_part(part: Part) -> list[dict[str, Any]]:
    if isinstance(part, TextPart):
        return [{"text": part.text}] if part.text else []
    if isinstance(part, ReasoningPart):
        data = part.provider_data or {}
        if data.get("type") == SIGNATURE:
            return [{"text": "", "thought_signature": _signature(data)}]
        return []  # thought summaries, and other providers' reasoning, aren't sent back
    if isinstance(part, ToolCallPart) and not part.provider_executed:
        data = part.provider_data or {}
        call: dict[str, Any] = {"name": part.name, "args": part.arguments_object()}
        if data.get("gemini_id"):
            call["id"] = part.id
        sent: dict[str, Any] = {"function_call": call}
        if data.get("thought_signature"):
            sent["thought_signature"] = _signature(data)
        return [sent]
    return []  # a search Google ran is not replayed: its answer's text carries it


def _user_parts(part: Part, gemini_ids: set[str]) -> list[dict[str, Any]]:
    if isinstance(part, TextPart):
        return [{"text": part.text}] if part.text else []
    if isinstance(part, FilePart):
        return [_inline(part.media_type, part.data)]
    if isinstance(part, ToolResultPart) and not part.provider_executed:
        key = "error" if part.is_error else "output"
        response: dict[str, Any] = {
            "name": part.name,
            "response": {key: _result_value(part)},
        }
        if part.tool_call_id in gemini_ids:
            response["id"] = part.tool_call_id
        parts: list[dict[str, Any]] = [{"function_response": response}]
        if part.media_type and part.data:
            parts.append(_inline(part.media_type, part.data))
        return parts
    return []


def _result_value(part: ToolResultPart) -> Any:
    """The output as JSON where it is JSON (Gemini reads structure), else its text."""
    if part.is_error or isinstance(part.output, str) or part.output is None:
        return tool_output_text(part).removeprefix("Error: ")
    return part.output


def _inline(media_type: str, data: str) -> dict[str, Any]:
    return {"inline_data": {"mime_type": media_type, "data": base64.b64decode(data)}}


def _signature(data: dict[str, Any]) -> bytes:
    return base64.b64decode(str(data.get("thought_signature")))


# --- stream mapping --------------------------------------------------------------------------


class _GeminiStreamMapper:
    """Turns `GenerateContentResponse` chunks into part deltas: consecutive text (or thought)
    pieces grow one part, each function call is a whole part, usage is the last chunk's."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._next = 0
        self._open: tuple[str, int] | None = None
        """The text or reasoning part that the next piece of its kind extends."""
        self._calls = 0
        self._usage = Usage()
        self._finish: str | None = None
        self._blocked: str | None = None

    def feed(self, chunk: Any) -> list[PartDelta]:
        """The deltas of one streamed chunk."""
        self._read_usage(chunk.usage_metadata)
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self._blocked = _enum(feedback.block_reason)
        deltas: list[PartDelta] = []
        for candidate in (chunk.candidates or [])[:1]:
            content = candidate.content
            for part in (content.parts if content is not None else None) or []:
                deltas += self._part(part)
            if candidate.grounding_metadata is not None:
                deltas += self._grounding(candidate.grounding_metadata)
            if candidate.finish_reason is not None:
                self._finish = _enum(candidate.finish_reason)
        return deltas

    def finish(self) -> StepFinish:
        """The step's end; a withheld answer is a `content_filtered` error, never silence."""
        reason = self._blocked or self._finish
        if reason is None:
            raise ProviderError(incomplete_stream_error(self._provider))
        if self._blocked is not None or reason in _FILTERED:
            raise ProviderError(
                ModelError(
                    message=f"the provider withheld the answer ({reason})",
                    kind="content_filtered",
                    provider=self._provider,
                    detail={"finish_reason": reason},
                )
            )
        if reason in _MALFORMED:
            raise ProviderError(
                ModelError(
                    message=f"the model's answer was malformed ({reason})",
                    provider=self._provider,
                    retryable=True,
                    detail={"finish_reason": reason},
                )
            )
        stop = _FINISH_REASONS.get(reason, reason)
        if stop == "end_turn" and self._calls:
            stop = "tool_use"
        return StepFinish(stop_reason=stop, usage=self._usage)

    def _part(self, part: Any) -> list[PartDelta]:
        signature = part.thought_signature
        if part.function_call is not None:
            self._open = None
            return [self._call(part.function_call, signature)]
        deltas: list[PartDelta] = []
        if part.text:
            kind = "reasoning" if part.thought else "text"
            if self._open is None or self._open[0] != kind:
                self._open = (kind, self._allocate())
            deltas.append(PartDelta(index=self._open[1], type=kind, text=part.text))
        if signature:
            self._open = None
            held = ReasoningPart(
                provider_data={"type": SIGNATURE, "thought_signature": _b64(signature)}
            )
            index = self._allocate()
            deltas.append(PartDelta(index=index, type="reasoning", part=held.model_dump()))
        return deltas

    def _call(self, call: Any, signature: bytes | None) -> PartDelta:
        self._calls += 1
        index = self._allocate()
        data: dict[str, Any] = {"gemini_id": bool(call.id)}
        if signature:
            data["thought_signature"] = _b64(signature)
        part = ToolCallPart(
            # A call without Gemini's id gets one of ours, never sent back.
            id=call.id or f"call_{uuid.uuid4().hex[:24]}",
            name=call.name or "",
            arguments=json.dumps(call.args or {}),
            provider_data=data,
        )
        return PartDelta(index=index, type="tool_call", part=part.model_dump())

    def _grounding(self, grounding: Any) -> list[PartDelta]:
        """Google Search grounding as a provider-executed `web_search` call, its result and
        the pages it cited."""
        queries = list(grounding.web_search_queries or [])
        pages = [
            {"url": chunk.web.uri, "title": chunk.web.title}
            for chunk in grounding.grounding_chunks or []
            if chunk.web is not None and chunk.web.uri
        ]
        if not queries and not pages:
            return []
        self._open = None
        call_id = f"gsearch_{uuid.uuid4().hex[:16]}"
        call = ToolCallPart(
            id=call_id,
            name="web_search",
            arguments=json.dumps({"query": "; ".join(queries)}),
            provider_executed=True,
        )
        result = ToolResultPart(
            tool_call_id=call_id, name="web_search", output=pages, provider_executed=True
        )
        deltas = [
            PartDelta(index=self._allocate(), type="tool_call", part=call.model_dump()),
            PartDelta(index=self._allocate(), type="tool_result", part=result.model_dump()),
        ]
        for page in pages:
            source = SourcePart(url=page["url"], title=page["title"]).model_dump()
            deltas.append(PartDelta(index=self._allocate(), type="source", part=source))
        return deltas

    def _allocate(self) -> int:
        index = self._next
        self._next += 1
        return index

    def _read_usage(self, usage: Any) -> None:
        # Each chunk's counts are the running totals of the whole request.
        if usage is None:
            return
        cached = usage.cached_content_token_count or 0
        self._usage = Usage(
            input_tokens=max(0, (usage.prompt_token_count or 0) - cached),
            output_tokens=(usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0),
            cache_read_tokens=cached,
            reasoning_tokens=usage.thoughts_token_count or 0,
        )


def _enum(value: Any) -> str:
    return str(getattr(value, "value", value))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- errors ----------------------------------------------------------------------------------


def classify_google_error(exc: BaseException, provider: str = "google") -> ModelError:
    """Classify a `google-genai` error (or a raw transport error) as a `ModelError`."""
    if isinstance(exc, httpx2.TimeoutException | httpx.TimeoutException):
        return transport_error(exc, provider, is_timeout=True)
    if isinstance(exc, httpx2.TransportError | httpx.TransportError):
        return transport_error(exc, provider, is_timeout=False)
    if not isinstance(exc, errors.APIError):
        return ModelError(message=str(exc) or type(exc).__name__, provider=provider)
    status = str(exc.status or "")
    kind, retryable = _STATUS_KINDS.get(status) or kind_for_status(exc.code)
    message = exc.message or status or f"HTTP {exc.code}"
    if kind == "invalid_request" and any(m in message.lower() for m in _CONTEXT_MARKERS):
        kind = "context_exceeded"
    return ModelError(
        message=message,
        kind=kind,
        provider=provider,
        retryable=retryable,
        status_code=exc.code,
        retry_after_ms=_retry_delay_ms(exc.details),
        detail={"status": status},
    )


def _retry_delay_ms(body: Any) -> int | None:
    """The `RetryInfo.retryDelay` ("7s") of a Google error body, in ms."""
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        match = _SECONDS.match(delay) if isinstance(delay, str) else None
        if match:
            return int(float(match.group(1)) * 1000)
    return None
