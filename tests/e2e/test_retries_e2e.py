"""Provider errors through the real SDKs: classified, retried on a workflow timer, or final."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from harness import SseEvent, Stack, StackFactory
from support.names import model_name

from activities.model_step import StreamTimeouts
from chatd.fake_provider.script import FakeError, FakeResponse, FakeText

OK = FakeResponse(parts=[FakeText(text="recovered")])


@pytest.fixture
async def quick_stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    """A stack whose streams time out after 3 s of silence."""
    async with make_stack(stream_timeouts=StreamTimeouts(startup_s=3, stall_s=3)) as stack:
        yield stack


async def _run(
    stack: Stack, responses: list[FakeResponse], *, provider: str = "anthropic", final: str
) -> tuple[dict[str, Any], list[SseEvent], str]:
    name = model_name()
    stack.fake.script(name, responses)
    model = {"provider": provider, "name": name}
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "hi")
    events = await stack.wait_status(chat["id"], final, within_s=60)
    return (await stack.http.get(f"/chats/{chat['id']}")).json(), events, name


def _retries(events: list[SseEvent]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == "retry"]


async def test_a_429_waits_for_retry_after_then_succeeds(stack: Stack) -> None:
    chat, events, _ = await _run(
        stack, [FakeResponse(error=FakeError.rate_limited(retry_after_s=2)), OK], final="waiting"
    )
    (retry,) = _retries(events)
    assert retry["attempt"] == 1 and retry["delay_ms"] == 2000
    assert retry["error"]["kind"] == "rate_limit" and retry["error"]["status_code"] == 429
    assert chat["last_error"] is None


async def test_overloaded_and_server_errors_back_off_exponentially(stack: Stack) -> None:
    _, events, name = await _run(
        stack,
        [
            FakeResponse(error=FakeError.overloaded()),
            FakeResponse(error=FakeError(status=500, message="boom")),
            OK,
        ],
        final="waiting",
    )
    retries = _retries(events)
    assert [(r["attempt"], r["delay_ms"], r["error"]["kind"]) for r in retries] == [
        (1, 1000, "overloaded"),
        (2, 2000, "generic"),
    ]
    assert len(stack.fake.requests(name)) == 3


async def test_a_mid_stream_error_resets_the_partial_step_and_retries(stack: Stack) -> None:
    broken = FakeResponse(
        parts=[FakeText(text="partial text", chunk_size=3)], stream_error_after_deltas=2
    )
    chat, events, _ = await _run(stack, [broken, OK], final="waiting")
    kinds = [e.event for e in events]
    assert kinds.index("retry") < kinds.index("reset")
    assert _retries(events)[0]["error"]["kind"] == "overloaded"
    messages = await stack.messages(chat["id"])
    assert [p["text"] for p in messages[-1]["parts"]] == ["recovered"]


@pytest.mark.parametrize(
    ("error", "provider", "kind"),
    [
        (
            FakeError(status=401, type="authentication_error", message="bad key"),
            "anthropic",
            "auth",
        ),
        (
            FakeError(
                status=429,
                type="insufficient_quota",
                code="insufficient_quota",
                message="You exceeded your current quota",
            ),
            "openai",
            "config",
        ),
        (
            FakeError(status=404, type="not_found_error", message="model not found"),
            "anthropic",
            "config",
        ),
    ],
    ids=["401", "insufficient_quota", "404"],
)
async def test_non_retryable_errors_end_the_turn_with_a_structured_error(
    stack: Stack, error: FakeError, provider: str, kind: str
) -> None:
    chat, events, name = await _run(
        stack, [FakeResponse(error=error)], provider=provider, final="error"
    )
    assert _retries(events) == []
    assert len(stack.fake.requests(name)) == 1
    last = chat["last_error"]
    assert last["kind"] == kind and last["retryable"] is False
    assert last["status_code"] == error.status and last["provider"] == provider
    assert last["message"]
    assert [e.data["kind"] for e in events if e.event == "error"] == [kind]

    stack.fake.script(name, [OK])
    await stack.send(chat["id"], "again")
    await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0)
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["last_error"] is None


async def test_a_slow_first_byte_is_retried_as_startup_timeout(quick_stack: Stack) -> None:
    _, events, _ = await _run(
        quick_stack,
        [FakeResponse(parts=[FakeText(text="late")], first_byte_delay_s=10), OK],
        final="waiting",
    )
    assert _retries(events)[0]["error"]["kind"] == "startup_timeout"


async def test_a_stalled_stream_is_retried(quick_stack: Stack) -> None:
    _, events, _ = await _run(
        quick_stack,
        [FakeResponse(parts=[FakeText(text="abcdef", chunk_size=2)], hang_after_deltas=1), OK],
        final="waiting",
    )
    assert _retries(events)[0]["error"]["kind"] == "timeout"
    assert "reset" in [e.event for e in events]
