"""Forking a chat: a new chat with the chat's settings and its conversation up to a message,
which the next turn continues from; the source stays as it was."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from harness import Stack
from support.names import model_name

from activities.compaction import SUMMARY_PREAMBLE
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage
from chatd.parts import Part, Role, TextPart, ToolCallPart, ToolResultPart
from chatd.store.step_keys import StepKey
from chatd.store.transcript import TranscriptStore

SETTINGS_OF_THEIR_OWN = {"id", "usage", "created_at", "updated_at"}
"""What a fork doesn't take from its chat (`ChatOut` fields); it takes every other one."""


def _texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def _conversation(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], _texts(m)) for m in messages]


def _sent(stack: Stack, model: str) -> list[tuple[str, str]]:
    """(role, text) of each message of the model's latest request."""
    body = stack.fake.requests(model)[-1].body
    sent = []
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        sent.append((message["role"], "".join(b.get("text", "") for b in blocks)))
    return sent


async def _turn(stack: Stack, chat_id: str, content: str, *, after: int = 0) -> int:
    """Send a message and wait for its turn to end; the id of the turn's last event."""
    await stack.send(chat_id, content)
    events = await stack.wait_status(chat_id, "waiting", after=after)
    return events[-1].id or 0


async def _fork(stack: Stack, chat_id: str, message_id: int, **extra: Any) -> dict[str, Any]:
    response = await stack.http.post(
        f"/chats/{chat_id}/fork", json={"message_id": message_id, **extra}
    )
    assert response.status_code == 201, response.text
    fork: dict[str, Any] = response.json()
    return fork


async def _tokens_counted(stack: Stack) -> int:
    """The input tokens counted against the owner's daily quota."""
    return int(
        await stack.pool.fetchval("SELECT coalesce(sum(input_tokens), 0) FROM owner_daily_usage")
    )


async def test_a_fork_continues_from_its_message_and_leaves_the_chat_alone(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse.of_text("first answer"),
            FakeResponse.of_text("second answer"),
            FakeResponse.of_text("fork answer"),
        ],
    )
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name},
        title="the source",
        system_prompt="be brief",
        dynamic_tools=[{"name": "ask_user", "description": "Ask the user."}],
        active_tools=["current_time", "read_file"],
        max_steps=7,
        action_timeout_s=120,
        compaction_threshold=0.5,
        tool_policy={"read_file": "ask"},
        subagents=True,
        fallback_models=[{"provider": "anthropic", "name": model_name()}],
    )
    after = await _turn(stack, chat["id"], "one")
    await _turn(stack, chat["id"], "two", after=after)
    source = (await stack.http.get(f"/chats/{chat['id']}")).json()
    transcript = await stack.messages(chat["id"])
    assert _conversation(transcript) == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
        ("assistant", "second answer"),
    ]
    counted = await _tokens_counted(stack)

    fork = await _fork(stack, chat["id"], transcript[1]["id"])

    assert fork["id"] != chat["id"] and fork["status"] == "waiting"
    assert {k: v for k, v in fork.items() if k not in SETTINGS_OF_THEIR_OWN} == {
        k: v for k, v in source.items() if k not in SETTINGS_OF_THEIR_OWN
    }
    assert fork["usage"]["input_tokens"] == 0 and await _tokens_counted(stack) == counted
    copied = await stack.messages(fork["id"])
    assert _conversation(copied) == [("user", "one"), ("assistant", "first answer")]
    assert [m["parts"] for m in copied] == [m["parts"] for m in transcript[:2]]
    assert {m["turn_id"] for m in copied}.isdisjoint(m["turn_id"] for m in transcript)
    assert (await stack.http.get(f"/chats/{chat['id']}")).json() == source
    assert await stack.messages(chat["id"]) == transcript

    await _turn(stack, fork["id"], "three")

    assert _sent(stack, name) == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "three"),
    ]
    assert "be brief" in json.dumps(stack.fake.requests(name)[-1].body["system"])
    assert _conversation(await stack.messages(fork["id"]))[2:] == [
        ("user", "three"),
        ("assistant", "fork answer"),
    ]
    assert await stack.messages(chat["id"]) == transcript
    assert len(stack.fake.requests(name)) == 3


async def test_a_fork_keeps_tool_calls_with_their_results(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name="current_time")]),
            FakeResponse.of_text("it is now"),
            FakeResponse.of_text("fork answer"),
        ],
    )
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await _turn(stack, chat["id"], "what time is it?")
    transcript = await stack.messages(chat["id"])
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "assistant"]

    split = await stack.http.post(
        f"/chats/{chat['id']}/fork", json={"message_id": transcript[1]["id"]}
    )
    assert split.status_code == 400, split.text
    assert split.json()["error"]["code"] == "splits_tool_call"
    assert split.json()["error"]["detail"] == {"message_id": transcript[1]["id"]}

    fork = await _fork(stack, chat["id"], transcript[2]["id"], title="branch")
    assert fork["title"] == "branch"
    assert [m["role"] for m in await stack.messages(fork["id"])] == ["user", "assistant", "tool"]
    await _turn(stack, fork["id"], "and in an hour?")
    body = stack.fake.requests(name)[-1].body
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert len(uses) == 1 and uses == [
        b["tool_use_id"] for b in blocks if b["type"] == "tool_result"
    ]
    assert "it is now" not in json.dumps(body["messages"])
    assert _sent(stack, name)[-1] == ("user", "and in an hour?")


async def test_a_fork_is_refused_for_what_isnt_there(stack: Stack) -> None:
    chat_id = (await stack.create_chat(model=stack.scripted_model(FakeResponse.of_text("hi"))))[
        "id"
    ]
    await _turn(stack, chat_id, "hello")
    other_id = (await stack.create_chat(model=stack.scripted_model(FakeResponse.of_text("yo"))))[
        "id"
    ]
    await _turn(stack, other_id, "hey")
    mine = (await stack.messages(chat_id))[0]["id"]
    theirs = (await stack.messages(other_id))[0]["id"]

    cases = [
        (stack.http, f"/chats/{uuid.uuid4()}/fork", {"message_id": mine}, 404, "chat_not_found"),
        (stack.other_owner, f"/chats/{chat_id}/fork", {"message_id": mine}, 404, "chat_not_found"),
        (stack.http, f"/chats/{chat_id}/fork", {"message_id": theirs}, 404, "message_not_found"),
        (stack.http, f"/chats/{chat_id}/fork", {"message_id": 2**40}, 404, "message_not_found"),
        (stack.http, f"/chats/{chat_id}/fork", {"message_id": 0}, 400, "invalid_request"),
        (stack.http, f"/chats/{chat_id}/fork", {}, 400, "invalid_request"),
        (stack.http, f"/chats/{chat_id}/fork", {"message_id": "1"}, 400, "invalid_request"),
    ]
    for client, path, body, status, code in cases:
        response = await client.post(path, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert response.json()["error"]["code"] == code, (path, body, response.text)
    listed = (await stack.http.get("/chats")).json()["chats"]
    assert sorted(c["id"] for c in listed) == sorted([chat_id, other_id]), "no chat was made"


async def test_a_compacted_message_is_not_a_fork_point_and_its_summary_is(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(
                parts=[FakeText(text="first half"), FakeToolCall(name="current_time")],
                usage=FakeUsage(input_tokens=700),
            ),
            FakeResponse.of_text("the user wants a poem", usage=FakeUsage(input_tokens=900)),
            FakeResponse.of_text("second half", usage=FakeUsage(input_tokens=100)),
            FakeResponse.of_text("fork answer", usage=FakeUsage(input_tokens=100)),
        ],
    )
    model = {"provider": "anthropic", "name": name, "context_limit": 1000}
    chat = await stack.create_chat(model=model)
    await _turn(stack, chat["id"], "write me a long poem")
    transcript = await stack.messages(chat["id"])
    assert [m["compressed"] for m in transcript] == [True, True, True, False, False]

    compacted = await stack.http.post(
        f"/chats/{chat['id']}/fork", json={"message_id": transcript[0]["id"]}
    )
    assert compacted.status_code == 409, compacted.text
    assert compacted.headers["x-should-retry"] == "false"
    error = compacted.json()["error"]
    assert error["code"] == "message_compacted"
    assert error["detail"] == {"message_id": transcript[0]["id"], "status": "waiting"}

    fork = await _fork(stack, chat["id"], transcript[3]["id"])
    copied = await stack.messages(fork["id"])
    assert [(m["role"], m["compressed"]) for m in copied] == [
        (m["role"], m["compressed"]) for m in transcript[:4]
    ]
    await _turn(stack, fork["id"], "now a haiku")
    [sent] = stack.fake.requests(name)[-1].body["messages"]  # one user turn: Anthropic's
    texts = [b["text"] for b in sent["content"] if b["type"] == "text"]
    assert len(texts) == 2 and texts[0].startswith(SUMMARY_PREAMBLE) and texts[1] == "now a haiku"


async def test_a_step_answered_in_two_tool_messages_is_cut_only_after_both(
    stack: Stack,
) -> None:
    """A step's results may come in several tool messages (run, then approved or the
    client's): a cut before the last one, or while it is still to come, is refused. Step
    keys move to the fork's turn ids with their messages."""
    chat = await stack.create_chat(model=stack.scripted_model())
    chat_id, turn = uuid.UUID(chat["id"]), str(uuid.uuid4())
    calls = [ToolCallPart(id=f"call_{x}", name="current_time") for x in "ab"]
    results = [ToolResultPart(tool_call_id=c.id, name=c.name, output="noon") for c in calls]
    store = TranscriptStore(stack.pool)

    async def save(key: StepKey | str, role: Role, parts: list[Part]) -> int:
        saved = await store.save(chat_id, turn_id=turn, step_key=key, role=role, parts=parts)
        return saved.id

    async def fork_status(message_id: int) -> int:
        response = await stack.http.post(f"/chats/{chat_id}/fork", json={"message_id": message_id})
        assert response.status_code in (201, 400), response.text
        return response.status_code

    await save("user", "user", [TextPart(text="time?")])
    called = await save(StepKey.assistant(0), "assistant", list(calls))
    ran = await save(StepKey.tool_results(0, "tools"), "tool", [results[0]])
    assert await fork_status(ran) == 400, "call_b waits for approval"
    approved = await save(StepKey.tool_results(0, "approved"), "tool", [results[1]])
    await save(StepKey.assistant(1), "assistant", [TextPart(text="noon")])
    assert [await fork_status(m) for m in (called, ran)] == [400, 400]
    fork = await _fork(stack, chat["id"], approved)

    rows = await stack.pool.fetch(
        "SELECT turn_id, step_key FROM messages WHERE chat_id = $1 ORDER BY id",
        uuid.UUID(fork["id"]),
    )
    [copy] = {r["turn_id"] for r in rows}
    assert copy != turn
    assert [r["step_key"] for r in rows] == [f"{copy}:user", f"{copy}:0:assistant"] + [
        f"{copy}:0:{kind}" for kind in ("tools", "approved")
    ]


async def test_a_retried_fork_answers_with_the_first_chat(stack: Stack) -> None:
    model = stack.scripted_model(FakeResponse.of_text("hi"), FakeResponse.of_text("me too"))
    chat = await stack.create_chat(model=model)
    await _turn(stack, chat["id"], "hello")
    first, reply = await stack.messages(chat["id"])
    path = f"/chats/{chat['id']}/fork"

    async def post(key: str, message_id: int, to: str = path) -> httpx.Response:
        headers = {"Idempotency-Key": key}
        return await stack.http.post(to, json={"message_id": message_id}, headers=headers)

    together = await asyncio.gather(*(post("fork-1", reply["id"]) for _ in range(3)))
    assert [r.status_code for r in together] == [201] * 3, [r.text for r in together]
    assert len({r.json()["id"] for r in together}) == 1
    fork_id = together[0].json()["id"]
    await _turn(stack, fork_id, "and you?")  # the fork moves on; a retry still names it
    again = await post("fork-1", reply["id"])
    assert again.status_code == 201 and again.json()["id"] == fork_id

    for reused in (
        await post("fork-1", first["id"]),  # another message
        await post("fork-1", reply["id"], f"/chats/{fork_id}/fork"),  # another chat
    ):
        assert reused.status_code == 422, reused.text
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
    create = await stack.http.post(
        "/chats", json={"model": chat["model"]}, headers={"Idempotency-Key": "create-1"}
    )
    assert create.status_code == 201
    assert (await post("create-1", reply["id"])).status_code == 422

    refused = await post("fork-2", 2**40)
    assert refused.status_code == 404, "a refused fork claims no key"
    assert (await post("fork-2", first["id"])).status_code == 201
    listed = (await stack.http.get("/chats")).json()["chats"]
    assert len(listed) == 4, "the chat, its two forks and the created one"
