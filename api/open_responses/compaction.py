"""`POST /v1/responses/compact`: a conversation summarised by the chat's compaction prompt,
returned as a `compaction` item the client carries forward as input.

The summary is written by a worker (a `SummariseWindow` workflow) and sealed here
(`api.open_responses.sealing`): the client holds it, but only this deployment reads it.
"""

from __future__ import annotations

import secrets
import time
import uuid
from functools import partial
from typing import Any

from api.errors import ApiError
from api.open_responses.continuation import conversation_end, previous_not_found
from api.open_responses.inputs import parse_window
from api.open_responses.model_names import resolve_model
from api.open_responses.requests import CompactRequest
from api.state import GatewayState
from chatd.models import ModelError
from chatd.parts import Message
from workflows.payloads import SummariseWindowInput
from workflows.summarise_window import SummariseWindow

__all__ = ["compact"]

_STATUS_OF_KIND = {
    "context_exceeded": 400,
    "invalid_request": 400,
    "rate_limit": 429,
    "overloaded": 503,
    "unavailable": 503,
    "timeout": 504,
}
"""The HTTP status of a summary's model error (any other kind: 502)."""


async def compact(state: GatewayState, owner: str, body: CompactRequest) -> dict[str, Any]:
    """The `response.compaction` object for the request's conversation."""
    model = resolve_model(body.model, state.model_aliases)
    seal = await state.compaction_seal()
    given = parse_window(body.input, partial(seal.open, owner)) if body.input else []
    chat_id, through = await _previous_conversation(state, owner, body.previous_response_id)
    compaction_id = f"cmp_{secrets.token_hex(16)}"
    result = await state.temporal.execute_workflow(
        SummariseWindow.run,
        SummariseWindowInput(
            model=model,
            chat_id=str(chat_id) if chat_id else None,
            through_message_id=through,
            messages=[Message(role=m.role, parts=m.parts) for m in given],
        ),
        id=f"summarise-{compaction_id}",
        task_queue=state.task_queue,
    )
    if result.error is not None:
        raise _refusal(result.error)
    usage = result.usage
    return {
        "id": compaction_id,
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [
            {
                "type": "compaction",
                "id": compaction_id,
                "encrypted_content": seal.seal(owner, result.summary),
            }
        ],
        "usage": {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }


async def _previous_conversation(
    state: GatewayState, owner: str, previous_response_id: str | None
) -> tuple[uuid.UUID | None, int | None]:
    """The chat and its last message of the conversation up to the previous response."""
    if previous_response_id is None:
        return None, None
    previous = await state.responses.get(owner, previous_response_id)
    if previous is None:
        raise previous_not_found(previous_response_id)
    through = await conversation_end(state, previous, "compact it")
    return previous.chat_id, through


def _refusal(error: ModelError) -> ApiError:
    status = _STATUS_OF_KIND.get(error.kind, 502)
    code = "context_length_exceeded" if error.kind == "context_exceeded" else "model_error"
    return ApiError(status, code, f"the summary failed: {error.message}", {"kind": error.kind})
