"""Checks a real provider makes before a request reaches the model, with their real errors.

A request must name a model the server has (a script of it), a chained Responses request a
stored response, and a request must fit the model's context window (when a test sets one).
The refusals leave the model's script untouched.
"""

from __future__ import annotations

import json
from typing import Any

from chatd.fake_provider.script import ApiName, FakeError, ScriptBook

__all__ = ["estimate_request_tokens", "model_not_found", "refusal"]

_PROMPT_FIELDS = (
    "system",
    "instructions",
    "messages",
    "input",
    "tools",
    "contents",
    "systemInstruction",
    "system_instruction",
)
"""The body fields a provider counts against the context window."""


def refusal(book: ScriptBook, api: ApiName, model: str, body: dict[str, Any]) -> FakeError | None:
    """The error a real provider would answer `body` with before running the model, if any."""
    if not book.knows(model):
        return model_not_found(api, model)
    previous = body.get("previous_response_id")
    if api == "openai_responses" and previous and not book.has_response(str(previous)):
        return previous_response_not_found(str(previous))
    window = book.context_window(model)
    if window is not None:
        tokens = estimate_request_tokens(body)
        if tokens > window:
            return prompt_too_long(api, tokens, window)
    return None


def estimate_request_tokens(body: dict[str, Any]) -> int:
    """About four characters of the prompt's JSON per token (the fake has no tokenizer)."""
    chars = sum(len(json.dumps(body[f])) for f in _PROMPT_FIELDS if f in body)
    return (chars + 3) // 4


def model_not_found(api: ApiName, model: str) -> FakeError:
    """Each API's 404 for a model it doesn't serve (a name of no script: the demo server's
    only model is `demo`). A 404, not a 500, so a chat naming it fails at once instead of
    retrying."""
    if api == "anthropic":
        return FakeError(status=404, type="not_found_error", message=f"model: {model}")
    if api == "gemini":
        message = f"models/{model} is not found for API version v1beta, or is not supported."
        return FakeError(status=404, type="NOT_FOUND", message=message)
    return FakeError(
        status=404,
        type="invalid_request_error",
        code="model_not_found",
        param="model",
        message=f"The model `{model}` does not exist or you do not have access to it.",
    )


def previous_response_not_found(response_id: str) -> FakeError:
    """OpenAI's 400 for a `previous_response_id` that expired, was deleted or never stored."""
    return FakeError(
        status=400,
        type="invalid_request_error",
        code="previous_response_not_found",
        param="previous_response_id",
        message=f"Previous response with id '{response_id}' not found.",
    )


def prompt_too_long(api: ApiName, tokens: int, window: int) -> FakeError:
    """Each API's 400 for a prompt over the context window, in its own words."""
    if api == "anthropic":
        return FakeError(
            status=400,
            type="invalid_request_error",
            message=f"prompt is too long: {tokens} tokens > {window} maximum",
        )
    if api == "gemini":
        message = (
            f"The input token count ({tokens}) exceeds the maximum number of tokens "
            f"allowed ({window})."
        )
        return FakeError(status=400, type="INVALID_ARGUMENT", message=message)
    if api == "openai_chat":
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages."
        )
        param = "messages"
    else:
        message = (
            "Your input exceeds the context window of this model. "
            "Please adjust your input and try again."
        )
        param = "input"
    return FakeError(
        status=400,
        type="invalid_request_error",
        code="context_length_exceeded",
        param=param,
        message=message,
    )
