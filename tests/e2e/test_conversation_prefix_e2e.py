"""A client that resends its whole conversation with every request (no
`previous_response_id`) continues the chat that holds it, and each call writes only what it
added: the cost of a call stays flat as the conversation grows."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.settings import unstored_keep

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
}


async def _written(stack: Stack, chat_id: str) -> tuple[int, int]:
    """The chat's transcript rows, and the bytes of its responses' stored input items."""
    messages = await stack.pool.fetchval(
        "SELECT count(*) FROM messages WHERE chat_id = $1::uuid", chat_id
    )
    inputs = await stack.pool.fetchval(
        "SELECT coalesce(sum(octet_length(input_items::text)), 0) FROM responses"
        " WHERE chat_id = $1::uuid",
        chat_id,
    )
    return int(messages), int(inputs)


@pytest.mark.parametrize("store", [True, False], ids=["stored", "store-false"])
async def test_a_resent_growing_conversation_continues_one_chat_at_flat_cost(
    stack: Stack, store: bool
) -> None:
    """Stored, or `store: false` as Codex sends every call: its chat is kept hidden between
    calls (`CHATD_UNSTORED_KEEP_SECONDS`), and still continued."""
    turns = 12
    name = stack.stepped_model(
        *(FakeResponse(parts=[FakeText(text=f"answer {n}")]) for n in range(turns))
    )["name"]
    conversation: list[dict[str, Any]] = [{"role": "developer", "content": "Be terse."}]
    chats: set[str] = set()
    growth: list[tuple[int, int]] = []
    previous: str | None = None
    async with stack.responses_client() as client:
        for n in range(turns):
            conversation.append({"role": "user", "content": f"question {n}"})
            response = await client.responses.create(
                model=f"anthropic/{name}", input=conversation, store=store
            )
            assert response.output_text == f"answer {n}"
            assert response.previous_response_id == previous, "continued from the last one"
            previous = response.id
            assert response.conversation is not None
            chats.add(response.conversation.id)
            growth.append(await _written(stack, response.conversation.id))
            conversation += [item.model_dump(exclude_none=True) for item in response.output]
    assert len(chats) == 1, "one chat for the whole conversation"
    [chat_id] = chats
    shown = await stack.http.get(f"/chats/{chat_id}")
    assert shown.status_code == (200 if store else 404), "a store: false chat stays hidden"
    if not store:
        left = await stack.pool.fetchval(
            "SELECT discard_at - now() FROM chats WHERE id = $1::uuid", chat_id
        )
        assert timedelta(minutes=5) < left <= unstored_keep(), "deleted once idle for a while"
    rows = [b[0] - a[0] for a, b in pairwise(growth)]
    sizes = [b[1] - a[1] for a, b in pairwise(growth)]
    assert rows == [2] * (turns - 1), "each call writes its question and its answer"
    assert max(sizes) - min(sizes) < 16, f"stored input per call stays flat: {sizes}"
    last = stack.fake.requests(name)[-1].body
    assert len(last["messages"]) == 2 * turns - 1, "the model still sees the whole conversation"
    assert last["system"][0]["text"] == "Be terse.", "the system text holds on every call"


async def test_a_tool_round_trip_resent_whole_continues_too(stack: Stack) -> None:
    name = stack.stepped_model(
        FakeResponse(parts=[FakeToolCall(name="lookup", arguments={"word": "x"}, id="toolu_a")]),
        FakeResponse(parts=[FakeText(text="x is a letter")]),
        FakeResponse(parts=[FakeText(text="y too")]),
    )["name"]
    model = f"anthropic/{name}"
    async with stack.responses_client() as client:
        conversation: list[dict[str, Any]] = [{"role": "user", "content": "what is x?"}]
        first = await client.responses.create(model=model, input=conversation, tools=[LOOKUP])
        call = first.output[0]
        assert call.type == "function_call"
        conversation += [
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "a letter"},
        ]
        second = await client.responses.create(model=model, input=conversation, tools=[LOOKUP])
        assert second.output_text == "x is a letter"
        conversation += [item.model_dump(exclude_none=True) for item in second.output]
        conversation.append({"role": "user", "content": "and y?"})
        third = await client.responses.create(model=model, input=conversation, tools=[LOOKUP])
    assert third.output_text == "y too"
    assert first.conversation and third.conversation
    assert third.conversation.id == first.conversation.id
    assert third.previous_response_id == second.id


async def test_a_conversation_that_differs_from_the_stored_one_starts_its_own_chat(
    stack: Stack,
) -> None:
    name = stack.stepped_model(
        FakeResponse(parts=[FakeText(text="one")]),
        FakeResponse(parts=[FakeText(text="two")]),
    )["name"]
    async with stack.responses_client() as client:
        first = await client.responses.create(
            model=f"anthropic/{name}", input=[{"role": "user", "content": "hi"}]
        )
        edited = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "something the model never said"},
            {"role": "user", "content": "go on"},
        ]
        second = await client.responses.create(model=f"anthropic/{name}", input=edited)
    assert second.output_text == "two"
    assert first.conversation and second.conversation
    assert second.conversation.id != first.conversation.id
    assert second.previous_response_id is None


async def test_two_conversations_that_begin_alike_each_continue_their_own_chat(
    stack: Stack,
) -> None:
    # Their words alike, their instructions (which don't count in the match) tell the fake
    # model which one asks, so a retried attempt gets the same answer.
    answers = {("first", 0): "first hello", ("second", 0): "second hello",
               ("first", 1): "first again", ("second", 1): "second again"}  # fmt: skip

    def respond(request: FakeRequest) -> FakeResponse:
        system = "".join(b.get("text", "") for b in request.body.get("system") or [])
        steps = sum(1 for m in request.body["messages"] if m["role"] == "assistant")
        return FakeResponse(parts=[FakeText(text=answers.get((system, steps), "chained"))])

    name = model_name()
    stack.fake.script(name, respond)
    model = f"anthropic/{name}"
    async with stack.responses_client() as client:
        hi = [{"role": "user", "content": "hi"}]
        one = await client.responses.create(model=model, input=hi, instructions="first")
        two = await client.responses.create(model=model, input=hi, instructions="second")
        ones, twos = [], []
        for earlier, replies, who in ((one, ones, "first"), (two, twos, "second")):
            conversation = [
                {"role": "user", "content": "hi"},
                *(item.model_dump(exclude_none=True) for item in earlier.output),
                {"role": "user", "content": "more"},
            ]
            replies.append(
                await client.responses.create(model=model, input=conversation, instructions=who)
            )
        chained = await client.responses.create(
            model=model, input="hi", previous_response_id=ones[0].id
        )
    assert ones[0].output_text == "first again" and twos[0].output_text == "second again"
    assert ones[0].previous_response_id == one.id and twos[0].previous_response_id == two.id
    assert chained.previous_response_id == ones[0].id
    rows = await stack.pool.fetch(
        "SELECT response_id FROM conversation_prefixes WHERE response_id = ANY($1::text[])",
        [one.id, two.id, ones[0].id, twos[0].id, chained.id],
    )
    assert {r["response_id"] for r in rows} == {one.id, two.id, ones[0].id, twos[0].id}, (
        "a stored chain is continued by id: a stateless client with the same words must not"
        " take its tip"
    )


async def test_item_references_stand_for_the_items_they_name(stack: Stack) -> None:
    """A client may give its earlier items back by reference: each is read back from the
    stored response that holds it, so the conversation still continues its chat."""
    name = stack.stepped_model(
        FakeResponse(parts=[FakeText(text="one")]),
        FakeResponse(parts=[FakeText(text="two")]),
    )["name"]
    model = f"anthropic/{name}"
    async with stack.responses_client() as client:
        first = await client.responses.create(model=model, input="count")
        second = await client.responses.create(
            model=model,
            input=[
                {"role": "user", "content": "count"},
                {"type": "item_reference", "id": first.output[0].id},
                {"role": "user", "content": "go on"},
            ],
        )
    assert second.output_text == "two"
    assert first.conversation and second.conversation
    assert second.conversation.id == first.conversation.id
    sent = stack.fake.requests(name)[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][0]["text"] == "one"
