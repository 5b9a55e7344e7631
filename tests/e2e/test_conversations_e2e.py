"""Conversations at `/v1/conversations`, driven by the official `openai` SDK and the OpenAI
Agents SDK's `OpenAIConversationsSession` against a real stack: a conversation is a chat,
and its items are the chat's transcript."""

from __future__ import annotations

import base64
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIConversationsSession,
    OpenAIResponsesModel,
    Runner,
    set_tracing_disabled,
)
from harness import Stack
from openai import AsyncOpenAI

from chatd.fake_provider.script import FakeReasoning, FakeResponse, FakeText, FakeToolCall

set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SYSTEM: Any = {"role": "system", "content": "obey"}
FETCHED_IMAGE: Any = {
    "role": "user",
    "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}],
}
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


def _client(stack: Stack, key: str | None = None) -> AsyncOpenAI:
    root = stack.base_url.removesuffix("/api/v1")
    return AsyncOpenAI(base_url=f"{root}/v1", api_key=key or stack.key, max_retries=0)


def _model(stack: Stack, *responses: FakeResponse) -> tuple[str, str]:
    """A scripted model: its name at the fake provider, and as a request names it."""
    name = stack.scripted_model(*responses)["name"]
    return name, f"anthropic/{name}"


def _text(text: str) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text)])


def _texts_seen(stack: Stack, name: str, request: int = -1) -> list[str]:
    """The texts of the messages a model request held, in order."""
    messages = stack.fake.requests(name)[request].body["messages"]
    texts: list[str] = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [block["text"] for block in blocks if block.get("type") == "text"]
    return texts


def _id(item: Any) -> str:
    return str(item.id)


def _summary(items: list[Any]) -> list[tuple[str, str]]:
    """Each item's type and what it says."""
    out = []
    for item in items:
        data = item if isinstance(item, dict) else item.model_dump()
        if data["type"] == "message":
            said = " ".join(part.get("text", part["type"]) for part in data["content"])
            out.append((f"message:{data['role']}", said))
        elif data["type"] == "function_call":
            out.append(("function_call", f"{data['name']} {data['arguments']}"))
        elif data["type"] == "function_call_output":
            out.append(("function_call_output", data["output"]))
        else:
            out.append((data["type"], ""))
    return out


HISTORY: list[Any] = [
    {"role": "user", "content": "What's the weather in Oslo?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Sunny."}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this picture?"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}"},
        ],
    },
]


async def test_a_conversation_is_created_read_updated_and_deleted(stack: Stack) -> None:
    async with _client(stack) as client:
        made = await client.conversations.create(metadata={"topic": "weather"})
        assert made.object == "conversation" and made.metadata == {"topic": "weather"}
        chat = (await stack.http.get(f"/chats/{made.id}")).json()
        assert chat["status"] == "waiting", "a conversation is a chat, idle: no turn started"
        assert (await client.conversations.retrieve(made.id)).model_dump() == made.model_dump()
        updated = await client.conversations.update(made.id, metadata={"topic": "rain"})
        assert updated.metadata == {"topic": "rain"} and updated.created_at == made.created_at
        assert (await client.conversations.retrieve(made.id)).metadata == {"topic": "rain"}
        deleted = await client.conversations.delete(made.id)
        assert (deleted.id, deleted.object, deleted.deleted) == (
            made.id,
            "conversation.deleted",
            True,
        )
        with pytest.raises(openai.NotFoundError) as gone:
            await client.conversations.retrieve(made.id)
        assert gone.value.code == "conversation_not_found"
        with pytest.raises(openai.NotFoundError):
            await client.conversations.items.list(made.id)
    assert (await stack.http.get(f"/chats/{made.id}")).status_code == 404


async def test_initial_items_are_the_transcript_and_page_as_items(stack: Stack) -> None:
    async with _client(stack) as client:
        made = await client.conversations.create(items=HISTORY)
        listed = await client.conversations.items.list(made.id, order="asc")
        newest_first = await client.conversations.items.list(made.id)
        first_two = await client.conversations.items.list(made.id, order="asc", limit=2)
        rest = await client.conversations.items.list(
            made.id, order="asc", limit=2, after=_id(first_two.data[-1])
        )
        older = await client.conversations.items.list(
            made.id, limit=3, after=_id(newest_first.data[1])
        )
    assert _summary(listed.data) == [
        ("message:user", "What's the weather in Oslo?"),
        ("function_call", 'get_weather {"city": "Oslo"}'),
        ("function_call_output", "sunny"),
        ("message:assistant", "Sunny."),
        ("message:user", "And this picture? input_image"),
    ]
    assert not listed.has_more
    image = listed.data[-1].model_dump()["content"][1]
    assert image["image_url"] == f"data:image/png;base64,{PIXEL}"
    assert [i.id for i in newest_first.data] == [i.id for i in reversed(listed.data)]
    assert first_two.has_more and [i.id for i in first_two.data] == [i.id for i in listed.data[:2]]
    assert [i.id for i in rest.data] == [i.id for i in listed.data[2:4]] and rest.has_more
    assert [i.id for i in older.data] == [i.id for i in reversed(listed.data[:3])]
    assert not older.has_more
    messages = await stack.messages(made.id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    tool_result = messages[2]["parts"][0]
    assert (tool_result["name"], tool_result["output"]) == ("get_weather", "sunny")


async def test_items_are_appended_read_and_deleted_by_id(stack: Stack) -> None:
    async with _client(stack) as client:
        made = await client.conversations.create()
        added = await client.conversations.items.create(made.id, items=HISTORY[:3])
        assert _summary(added.data) == _summary(
            (await client.conversations.items.list(made.id, order="asc")).data
        )
        call = added.data[1]
        again = await client.conversations.items.retrieve(_id(call), conversation_id=made.id)
        assert again.model_dump() == call.model_dump()
        more = await client.conversations.items.create(
            made.id,
            items=[{"type": "function_call_output", "call_id": "call_1", "output": "still sunny"}],
        )
        assert more.data[0].type == "function_call_output"
        after_delete = await client.conversations.items.delete(
            _id(added.data[0]),
            conversation_id=made.id,
        )
        assert after_delete.id == made.id and after_delete.object == "conversation"
        with pytest.raises(openai.NotFoundError) as gone:
            await client.conversations.items.retrieve(_id(added.data[0]), conversation_id=made.id)
        assert gone.value.code == "item_not_found"
        left = await client.conversations.items.list(made.id, order="asc")
    assert [i.id for i in left.data] == [i.id for i in added.data[1:] + more.data]
    messages = await stack.messages(made.id)
    assert messages[-1]["parts"][0]["name"] == "get_weather", "its call is named from the chat"


async def test_a_response_continues_a_conversation_and_its_turn_shows_as_items(
    stack: Stack,
) -> None:
    """Deleting one part of a model's message keeps the ids of the others."""
    name, model = _model(
        stack,
        FakeResponse(parts=[FakeReasoning(text="Ada said so."), FakeText(text="You are Ada.")]),
    )
    async with _client(stack) as client:
        made = await client.conversations.create(
            items=[
                {"role": "user", "content": "I am Ada."},
                {"role": "assistant", "content": "Hello Ada."},
            ]
        )
        response = await client.responses.create(
            model=model, input="Who am I?", conversation=made.id
        )
        assert response.output_text == "You are Ada."
        assert _texts_seen(stack, name) == ["I am Ada.", "Hello Ada.", "Who am I?"]
        items = (await client.conversations.items.list(made.id, order="asc")).data
        assert [i.type for i in items] == ["message", "message", "message", "reasoning", "message"]
        reasoning, answer = items[3], items[4]
        await client.conversations.items.delete(_id(reasoning), conversation_id=made.id)
        left = (await client.conversations.items.list(made.id, order="asc")).data
        kept = await client.conversations.items.retrieve(_id(answer), conversation_id=made.id)
    assert [i.id for i in left] == [i.id for i in items[:3]] + [answer.id]
    assert kept.model_dump() == answer.model_dump()
    parts = (await stack.messages(made.id))[-1]["parts"]
    assert [p["type"] for p in parts] == ["text"], "the model no longer sees the reasoning"


async def test_reasoning_carries_its_sealed_state_into_another_conversation(
    stack: Stack,
) -> None:
    """With `include=reasoning.encrypted_content`, a reasoning item carries the provider's
    signed reasoning, sealed: added to another conversation, the model is sent it again."""
    name, model = _model(
        stack,
        FakeResponse(parts=[FakeReasoning(text="Ada said so."), FakeText(text="You are Ada.")]),
        _text("Still Ada."),
    )
    async with _client(stack) as client:
        made = await client.conversations.create(items=[{"role": "user", "content": "I am Ada."}])
        await client.responses.create(model=model, input="Who am I?", conversation=made.id)
        plain = await client.conversations.items.list(made.id, order="asc")
        sealed = await client.conversations.items.list(
            made.id, order="asc", include=["reasoning.encrypted_content"]
        )
        assert [i.type for i in sealed.data] == ["message", "message", "reasoning", "message"]
        assert plain.data[2].model_dump().get("encrypted_content") is None
        assert sealed.data[2].model_dump()["encrypted_content"]
        copied: Any = [item.model_dump(exclude_unset=True) for item in sealed.data]
        copy = await client.conversations.create(items=copied)
        answer = await client.responses.create(model=model, input="Still?", conversation=copy.id)
    assert answer.output_text == "Still Ada."
    sent = stack.fake.requests(name)[-1].body["messages"]
    thinking = [
        b for m in sent for b in m["content"] if isinstance(b, dict) and b["type"] == "thinking"
    ]
    assert [b["thinking"] for b in thinking] == ["Ada said so."] and thinking[0]["signature"]


async def test_items_change_only_while_no_response_is_in_progress(stack: Stack) -> None:
    name, model = _model(
        stack,
        FakeResponse(parts=[FakeToolCall(name="get_weather", arguments={"city": "Oslo"})]),
        _text("Sunny in Oslo."),
    )
    async with _client(stack) as client:
        made = await client.conversations.create()
        waiting = await client.responses.create(
            model=model,
            input="Weather in Oslo?",
            conversation=made.id,
            tools=[WEATHER],
        )
        (call,) = [i for i in waiting.output if i.type == "function_call"]
        items = (await client.conversations.items.list(made.id)).data
        with pytest.raises(openai.ConflictError) as busy:
            await client.conversations.items.create(made.id, items=[HISTORY[0]])
        assert busy.value.code == "conversation_busy"
        with pytest.raises(openai.ConflictError):
            await client.conversations.items.delete(_id(items[0]), conversation_id=made.id)
        answered = await client.responses.create(
            model=model,
            conversation=made.id,
            tools=[WEATHER],
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        )
        assert answered.output_text == "Sunny in Oslo."
        await client.conversations.items.create(made.id, items=[HISTORY[0]])
        listed = await client.conversations.items.list(made.id, order="asc")
    assert _summary(listed.data) == [
        ("message:user", "Weather in Oslo?"),
        ("function_call", 'get_weather {"city": "Oslo"}'),
        ("function_call_output", "sunny"),
        ("message:assistant", "Sunny in Oslo."),
        ("message:user", "What's the weather in Oslo?"),
    ]
    assert len(stack.fake.requests(name)) == 2


async def test_others_conversations_and_unknown_ids_are_not_found(stack: Stack) -> None:
    other_key = stack.other_owner.headers["Authorization"].removeprefix("Bearer ")
    async with _client(stack) as client, _client(stack, other_key) as other:
        made = await client.conversations.create(items=HISTORY[:1])
        item_id = _id((await client.conversations.items.list(made.id)).data[0])
        for call in (
            other.conversations.retrieve(made.id),
            other.conversations.update(made.id, metadata={}),
            other.conversations.delete(made.id),
            other.conversations.items.list(made.id),
            other.conversations.items.create(made.id, items=HISTORY[:1]),
            other.conversations.items.retrieve(item_id, conversation_id=made.id),
            other.conversations.items.delete(item_id, conversation_id=made.id),
            client.conversations.retrieve("conv_not_a_chat"),
        ):
            with pytest.raises(openai.NotFoundError) as missing:
                await call
            assert missing.value.code == "conversation_not_found"
        for unknown in ("msg_999999999_0", "nonsense", f"{item_id[:-1]}7", f"fc{item_id[3:]}"):
            with pytest.raises(openai.NotFoundError) as no_item:
                await client.conversations.items.retrieve(unknown, conversation_id=made.id)
            assert no_item.value.code == "item_not_found"
        with pytest.raises(openai.BadRequestError) as bad:
            await client.conversations.items.create(made.id, items=[SYSTEM])
        assert bad.value.param and bad.value.param.startswith("items")
        with pytest.raises(openai.BadRequestError):
            await client.conversations.items.list(made.id, after="not-an-item")
        with pytest.raises(openai.BadRequestError):
            await client.conversations.create(items=[FETCHED_IMAGE])
        left = await client.conversations.items.list(made.id)
    assert [_id(i) for i in left.data] == [item_id], "nothing was changed"


def _agent(client: AsyncOpenAI, model: str) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions="Answer briefly.",
        model=OpenAIResponsesModel(model=model, openai_client=client),
    )


async def test_the_agents_sdk_keeps_a_session_in_a_conversation(stack: Stack) -> None:
    """`OpenAIConversationsSession`, unchanged: it creates the conversation, reads its items
    into each run's input and appends the run's items; the second run sees the first."""
    name, model = _model(stack, _text("Nice to meet you, Ada."), _text("Your name is Ada."))
    async with _client(stack) as client:
        session = OpenAIConversationsSession(openai_client=client)
        agent = _agent(client, model)
        first = await Runner.run(agent, "My name is Ada.", session=session)
        second = await Runner.run(agent, "What is my name?", session=session)
        assert (first.final_output, second.final_output) == (
            "Nice to meet you, Ada.",
            "Your name is Ada.",
        )
        assert _texts_seen(stack, name) == [
            "My name is Ada.",
            "Nice to meet you, Ada.",
            "What is my name?",
        ]
        conversation = await client.conversations.retrieve(session.session_id)
        items: list[Any] = await session.get_items()
        assert [(i["role"], i["content"][0]["text"]) for i in items] == [
            ("user", "My name is Ada."),
            ("assistant", "Nice to meet you, Ada."),
            ("user", "What is my name?"),
            ("assistant", "Your name is Ada."),
        ]
        popped: Any = await session.pop_item()
        assert popped is not None and popped["content"][0]["text"] == "Your name is Ada."
        assert len(await session.get_items(limit=10)) == 3
        await session.clear_session()
    assert (await stack.http.get(f"/chats/{conversation.id}")).status_code == 404


async def test_the_agents_sdk_runs_on_a_server_side_conversation(stack: Stack) -> None:
    """`Runner.run(..., conversation_id=...)`: each run is a response of the same chat."""
    name, model = _model(stack, _text("Noted: Ada."), _text("You are Ada."))
    async with _client(stack) as client:
        conversation = await client.conversations.create(metadata={"user": "ada"})
        agent = _agent(client, model)
        await Runner.run(agent, "I am Ada.", conversation_id=conversation.id)
        second = await Runner.run(agent, "Who am I?", conversation_id=conversation.id)
        items = await client.conversations.items.list(conversation.id, order="asc")
    assert second.final_output == "You are Ada."
    assert _texts_seen(stack, name) == ["I am Ada.", "Noted: Ada.", "Who am I?"]
    assert [text for _, text in _summary(items.data)] == [
        "I am Ada.",
        "Noted: Ada.",
        "Who am I?",
        "You are Ada.",
    ]
    chats = await stack.pool.fetch(
        "SELECT DISTINCT chat_id FROM responses WHERE request->>'model' = $1", model
    )
    assert [str(r["chat_id"]) for r in chats] == [conversation.id]
