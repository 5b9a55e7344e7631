"""The providers' token counting endpoints, as the fake provider serves them.

- Anthropic `POST /v1/messages/count_tokens` (on Vertex AI
  `.../publishers/anthropic/models/count-tokens:rawPredict`, the model in the body) answers
  `{"input_tokens": N}`;
- OpenAI `POST /v1/responses/input_tokens` answers
  `{"object": "response.input_tokens", "input_tokens": N}`;
- Gemini `POST /v1beta/models/{model}:countTokens` (and Vertex AI's path) answers
  `{"totalTokens": N, "promptTokensDetails": [...]}`. The Developer API takes `contents`, or
  a whole `generateContentRequest` (with the system instruction and tools), never both.

A count takes the fields of a step's request that make its input, and refuses the others
(`max_tokens`, `stream`, sampling) as the real endpoints do. N is the model's scripted
count (`ScriptBook.set_token_count`), else about four characters of the prompt's JSON per
token. Counting consumes none of the model's scripted responses, and is logged apart from
its other requests (`ScriptBook.count_requests`).
"""

from __future__ import annotations

import re
from typing import Any

from chatd.fake_provider.admission import (
    estimate_request_tokens,
    model_not_found,
    previous_response_not_found,
)
from chatd.fake_provider.answer_formats import check_answer_format
from chatd.fake_provider.gemini_wire import field, validate_gemini
from chatd.fake_provider.script import ApiName, FakeError, ScriptBook
from chatd.fake_provider.shapes import InvalidRequest
from chatd.fake_provider.validation import (
    check_anthropic_messages,
    check_tool_choice,
    validate_openai_responses,
)

__all__ = [
    "check_count",
    "count_model",
    "count_refusal",
    "count_response",
    "counted_tokens",
    "is_count_path",
]

_ANTHROPIC_PATHS = re.compile(
    r"^/v1/messages/count_tokens$|/publishers/anthropic/models/count-tokens:rawPredict$"
)
_RESPONSES_PATH = re.compile(r"/responses/input_tokens$")
_GEMINI_PATH = re.compile(
    r"^/v1[a-z0-9]*/(?P<vertex>projects/[^/]+/locations/[^/]+/publishers/google/)?"
    r"models/(?P<model>[^:/]+):countTokens$"
)

_ANTHROPIC_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "cache_control",
        "context_management",
        "mcp_servers",
        "speed",
        "user_profile_id",
        "workspace_id",
    }
)
"""What `messages/count_tokens` takes (not `max_tokens`, `stream` or sampling)."""
_RESPONSES_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "conversation",
        "parallel_tool_calls",
        "personality",
        "previous_response_id",
        "reasoning",
        "text",
        "tool_choice",
        "tools",
        "truncation",
    }
)
"""What `responses/input_tokens` takes (not `max_output_tokens`, `store`, `include`,
`stream` or sampling)."""
_GEMINI_FIELDS = frozenset({"contents", "generateContentRequest", "generate_content_request"})
_VERTEX_GEMINI_FIELDS = frozenset(
    {
        "model",
        "instances",
        "contents",
        "systemInstruction",
        "system_instruction",
        "tools",
        "generationConfig",
        "generation_config",
    }
)


def is_count_path(api: ApiName, path: str) -> bool:
    """Whether `path` is `api`'s token counting endpoint."""
    if api == "anthropic":
        return _ANTHROPIC_PATHS.search(path) is not None
    if api == "openai_responses":
        return _RESPONSES_PATH.search(path) is not None
    if api == "gemini":
        return _GEMINI_PATH.match(path) is not None
    return False  # Chat Completions has no token counting


def count_model(api: ApiName, path: str, body: dict[str, Any]) -> str:
    """The model a count is for: in Gemini's path, in the others' body (Vertex AI's too)."""
    if api == "gemini":
        match = _GEMINI_PATH.match(path)
        return match.group("model") if match else ""
    model = body.get("model")
    return model if isinstance(model, str) else ""


def check_count(api: ApiName, path: str, body: dict[str, Any]) -> None:
    """Raise `InvalidRequest` where the real counting endpoint would answer 400."""
    if api == "gemini":
        _check_gemini(path, body)
        return
    fields = _ANTHROPIC_FIELDS if api == "anthropic" else _RESPONSES_FIELDS
    vertex = api == "anthropic" and not path.startswith("/v1/messages")
    if vertex:
        version = body.get("anthropic_version")
        if not isinstance(version, str) or not version:
            raise InvalidRequest("anthropic_version: Field required")
        fields = fields | {"anthropic_version"}
    if extra := sorted(body.keys() - fields):
        if api == "anthropic":
            raise InvalidRequest(f"{extra[0]}: Extra inputs are not permitted")
        raise InvalidRequest(f"Unknown parameter: '{extra[0]}'.", extra[0])
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("model: Field required", "model")
    check_tool_choice(api, body)
    check_answer_format(api, body)
    if api == "anthropic":
        check_anthropic_messages(body)
    else:
        validate_openai_responses(body)


def _check_gemini(path: str, body: dict[str, Any]) -> None:
    match = _GEMINI_PATH.match(path)
    vertex = match is not None and match.group("vertex") is not None
    fields = _VERTEX_GEMINI_FIELDS if vertex else _GEMINI_FIELDS
    if extra := sorted(body.keys() - fields):
        raise InvalidRequest(
            f'Invalid JSON payload received. Unknown name "{extra[0]}": Cannot find field.'
        )
    whole = None if vertex else field(body, "generateContentRequest")
    if whole is None:
        validate_gemini(body)
        return
    if body.get("contents"):
        raise InvalidRequest(
            "contents and generate_content_request are mutually exclusive: send one."
        )
    if not isinstance(whole, dict):
        raise InvalidRequest("generate_content_request: expected an object")
    model = whole.get("model")
    if not isinstance(model, str) or not model.startswith("models/"):
        raise InvalidRequest("* GenerateContentRequest.model: unexpected model name format")
    validate_gemini(whole)


def count_refusal(
    book: ScriptBook, api: ApiName, model: str, body: dict[str, Any]
) -> FakeError | None:
    """A valid count the real API would still refuse: an unknown model, a chained count
    from a response not stored; or the model's scripted error."""
    if not book.knows(model):
        return model_not_found(api, model)
    previous = body.get("previous_response_id")
    if api == "openai_responses" and previous and not book.has_response(str(previous)):
        return previous_response_not_found(str(previous))
    answer = book.token_count(model)
    return answer if isinstance(answer, FakeError) else None


def counted_tokens(book: ScriptBook, api: ApiName, model: str, body: dict[str, Any]) -> int:
    """The count to answer: the model's scripted one, else an estimate of the prompt."""
    answer = book.token_count(model)
    if isinstance(answer, int):
        return answer
    whole = field(body, "generateContentRequest") if api == "gemini" else None
    return estimate_request_tokens(whole if isinstance(whole, dict) else body)


def count_response(api: ApiName, tokens: int) -> dict[str, Any]:
    """The endpoint's answer for `tokens`, in its own shape."""
    if api == "anthropic":
        return {"input_tokens": tokens}
    if api == "openai_responses":
        return {"object": "response.input_tokens", "input_tokens": tokens}
    return {
        "totalTokens": tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}],
    }
