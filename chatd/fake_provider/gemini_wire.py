"""Gemini's wire format (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`).

Each SSE frame is a whole `GenerateContentResponse` chunk; usage counts are running totals;
a function call arrives whole in one part; the first call of a step (or the last text part)
carries a `thoughtSignature`. A scripted call with `id=""` comes without an id, as Gemini
2.5's do. Requests are read in both spellings the API accepts (`functionCall` and
`function_call`): the SDK sends some fields each way.
"""

from __future__ import annotations

import base64
import binascii
import re
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
from chatd.fake_provider.shapes import InvalidRequest
from chatd.fake_provider.sse import EventKind, SseEvent, chunks, new_id

__all__ = [
    "GeminiEncoder",
    "error_body",
    "field",
    "model_info",
    "model_of_path",
    "streams",
    "validate_gemini",
    "whole_response",
]

METHOD_PATH = re.compile(
    r"^/v1[a-z0-9]*/(projects/[^/]+/locations/[^/]+/publishers/google/)?"
    r"models/(?P<model>[^:/]+):(?P<method>streamGenerateContent|generateContent)$"
)
"""The methods the fake answers, on the Developer API's path or Vertex AI's."""

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_FINISH_REASONS = {"end_turn": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS"}
_DEFAULT_WINDOW = 1_048_576


def model_of_path(path: str) -> str | None:
    """The model a request's path names; None for a path of no method the fake answers."""
    match = METHOD_PATH.match(path)
    return match.group("model") if match else None


def streams(path: str) -> bool:
    """Whether the path is `:streamGenerateContent` (else `:generateContent`)."""
    match = METHOD_PATH.match(path)
    return match is not None and match.group("method") == "streamGenerateContent"


def whole_response(encoder: GeminiEncoder) -> dict[str, Any]:
    """`:generateContent`'s answer: the stream's chunks as one response (text pieces of a
    kind joined), with the last chunk's finish, usage and grounding."""
    parts: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    for event in encoder.events():
        if not isinstance(event.data, dict):
            continue
        last = event.data
        for part in event.data["candidates"][0]["content"]["parts"]:
            joins = parts and "text" in part and "text" in parts[-1]
            if joins and part.get("thought") == parts[-1].get("thought"):
                parts[-1] = {**parts[-1], **part, "text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(dict(part))
    candidate = {**last["candidates"][0], "content": {"parts": parts, "role": "model"}}
    return {**last, "candidates": [candidate]}


def field(data: dict[str, Any], camel: str) -> Any:
    """`data[camel]`, or its snake_case spelling (the API takes either)."""
    if camel in data:
        return data[camel]
    return data.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel))


def error_body(error: FakeError) -> dict[str, Any]:
    """Google's error envelope; a `retry-after` header becomes a `RetryInfo` detail."""
    status = error.type if error.type.isupper() else _STATUSES.get(error.status, "UNKNOWN")
    details: list[dict[str, Any]] = []
    retry_after = error.headers.get("retry-after")
    if retry_after is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_after}s"}
        )
    body: dict[str, Any] = {"code": error.status, "message": error.message, "status": status}
    if details:
        body["details"] = details
    return {"error": body}


def model_info(model: str, window: int | None) -> dict[str, Any]:
    """`GET /v1beta/models/{model}`: what `models.get` reads."""
    return {
        "name": f"models/{model}",
        "version": "001",
        "displayName": model,
        "inputTokenLimit": window or _DEFAULT_WINDOW,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "thinking": True,
    }


class GeminiEncoder:
    """Encodes one scripted response as Gemini's SSE chunks."""

    def __init__(self, request: FakeRequest, response: FakeResponse) -> None:
        self._request = request
        self._response = response
        self._response_id = new_id("", 22)
        self._signed = False

    def events(self) -> Iterator[SseEvent]:
        """All chunks of a successful stream, in order; the last carries the finish."""
        searches = [p for p in self._response.parts if isinstance(p, FakeWebSearch)]
        for part in self._response.parts:
            if isinstance(part, FakeText):
                for piece in chunks(part.text, part.chunk_size):
                    yield self._chunk([{"text": piece}], text=piece)
            elif isinstance(part, FakeReasoning):
                for piece in chunks(part.text, part.chunk_size):
                    yield self._chunk([{"text": piece, "thought": True}])
            elif isinstance(part, FakeToolCall):
                yield self._chunk([self._call(part)], kind="block")
        signature = {} if self._signed else {"thoughtSignature": _signature()}
        final = {"text": "", **signature}
        yield self._chunk([final], finish=True, searches=searches)

    def error_events(self, error: FakeError) -> list[SseEvent]:
        """The `{"error": ...}` frame of a mid-stream failure."""
        return [SseEvent(data=error_body(error), kind="final")]

    def _call(self, call: FakeToolCall) -> dict[str, Any]:
        function_call: dict[str, Any] = {"name": call.name, "args": _args(call)}
        if call.id != "":
            function_call["id"] = call.id or new_id("call_", 12)
        part: dict[str, Any] = {"functionCall": function_call}
        if not self._signed:  # only a step's first call carries the signature
            part["thoughtSignature"] = _signature()
            self._signed = True
        return part

    def _chunk(
        self,
        parts: list[dict[str, Any]],
        *,
        text: str | None = None,
        kind: EventKind = "delta",
        finish: bool = False,
        searches: list[FakeWebSearch] | None = None,
    ) -> SseEvent:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            stop = self._response.resolved_stop_reason()
            candidate["finishReason"] = _FINISH_REASONS.get(stop, stop)
            if searches:
                candidate["groundingMetadata"] = _grounding(searches)
        data = {
            "candidates": [candidate],
            "usageMetadata": self._usage(finish),
            "modelVersion": self._request.model,
            "responseId": self._response_id,
        }
        return SseEvent(data=data, kind="final" if finish else kind, text=text)

    def _usage(self, final: bool) -> dict[str, Any]:
        usage = self._response.usage
        prompt = usage.input_tokens + usage.cache_read_tokens
        counts: dict[str, Any] = {
            "promptTokenCount": prompt,
            "thoughtsTokenCount": usage.reasoning_tokens,
            "cachedContentTokenCount": usage.cache_read_tokens,
        }
        output = self._response.output_tokens() if final else 0
        if final:
            counts["candidatesTokenCount"] = output
        counts["totalTokenCount"] = prompt + output + usage.reasoning_tokens
        return counts


def _grounding(searches: list[FakeWebSearch]) -> dict[str, Any]:
    return {
        "webSearchQueries": [s.query for s in searches],
        "groundingChunks": [
            {"web": {"uri": r.url, "title": r.title}} for s in searches for r in s.results
        ],
    }


def _args(call: FakeToolCall) -> dict[str, Any]:
    if isinstance(call.arguments, dict):
        return call.arguments
    raise ValueError("a Gemini function call's arguments are an object, not text")


def _signature() -> str:
    return base64.b64encode(new_id("sig_", 24).encode()).decode()


# --- request checks --------------------------------------------------------------------------


def validate_gemini(body: dict[str, Any]) -> None:
    """Raise `InvalidRequest` where the real API would answer 400: no contents, a role
    other than user/model, a function response that answers no call of the model's turn
    before it (by name, and by id where the call had one), or a bad signature."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise InvalidRequest("* GenerateContentRequest.contents: contents is not specified")
    if not isinstance(contents[0], dict) or contents[0].get("role") != "user":
        raise InvalidRequest("contents[0]: a conversation opens with the user's turn")
    calls: list[dict[str, Any]] = []
    for index, content in enumerate(contents):
        role = content.get("role") if isinstance(content, dict) else None
        if role not in ("user", "model"):
            raise InvalidRequest(f"Please use a valid role: user, model (contents[{index}]).")
        parts = content.get("parts") or []
        if not parts:
            raise InvalidRequest(f"contents[{index}].parts: must not be empty")
        responses = [field(p, "functionResponse") for p in parts if field(p, "functionResponse")]
        if responses:
            _check_answers(index, responses, calls)
        for part in parts:
            _check_signature(index, part)
        # The calls the next content must answer: a user turn makes none.
        calls = [field(p, "functionCall") for p in parts if field(p, "functionCall")]


def _check_answers(
    index: int, responses: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> None:
    if len(responses) != len(calls):
        raise InvalidRequest(
            "Please ensure that the number of function response parts is equal to the number "
            f"of function call parts of the function call turn (contents[{index}])."
        )
    for response, call in zip(responses, calls, strict=True):
        if response.get("name") != call.get("name"):
            raise InvalidRequest(
                f"contents[{index}]: function response {response.get('name')!r} does not "
                f"answer the function call {call.get('name')!r}"
            )
        if call.get("id") and response.get("id") not in (None, call["id"]):
            raise InvalidRequest(f"contents[{index}]: function response id does not match")


def _check_signature(index: int, part: dict[str, Any]) -> None:
    signature = field(part, "thoughtSignature")
    if signature is None:
        return
    try:
        standard = str(signature).replace("-", "+").replace("_", "/")
        base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"contents[{index}]: thought_signature is not valid base64") from None
