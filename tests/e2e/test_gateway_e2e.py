"""Gateway contract: auth, owner isolation, error shape, paging, health."""

from __future__ import annotations

import json
import uuid

import httpx
from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeReasoning, FakeResponse, FakeText, FakeToolCall
from chatd.retention import Pruned, Retention, RetentionSettings


def _assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["detail"], dict)


async def test_another_owners_chat_is_a_404_everywhere(stack: Stack) -> None:
    chat = await stack.create_chat(model={"provider": "demo", "name": "demo"})
    path = f"/chats/{chat['id']}"
    _assert_error(await stack.other_owner.get(path), 404, "chat_not_found")
    _assert_error(await stack.other_owner.get(f"{path}/messages"), 404, "chat_not_found")
    _assert_error(
        await stack.other_owner.post(f"{path}/messages", json={"content": "hi"}),
        404,
        "chat_not_found",
    )
    _assert_error(await stack.other_owner.get(f"{path}/stream"), 404, "chat_not_found")
    listed = (await stack.other_owner.get("/chats")).json()["chats"]
    assert listed == []
    assert (await stack.http.get(path)).status_code == 200


async def test_requests_without_a_valid_key_are_401(stack: Stack) -> None:
    chat = await stack.create_chat()
    bad = {"Authorization": "Bearer chatd_not-a-key"}
    async with httpx.AsyncClient(base_url=stack.base_url) as anonymous:
        _assert_error(await anonymous.get("/chats"), 401, "unauthorized")
        _assert_error(await anonymous.get("/chats", headers=bad), 401, "unauthorized")
        # A chat's routes check the key and the chat in one query: still 401, never 404.
        # Without a key, even a malformed chat id is a 401 (the key is checked first).
        _assert_error(await anonymous.get("/chats/not-a-uuid"), 401, "unauthorized")
        for path in (f"/chats/{chat['id']}", f"/chats/{uuid.uuid4()}"):
            _assert_error(await anonymous.get(path), 401, "unauthorized")
            _assert_error(await anonymous.get(path, headers=bad), 401, "unauthorized")
            sent = await anonymous.post(f"{path}/messages", json={"content": "hi"}, headers=bad)
            _assert_error(sent, 401, "unauthorized")
    assert await stack.messages(chat["id"]) == []


async def test_bad_input_is_a_400_with_the_error_shape(stack: Stack) -> None:
    _assert_error(
        await stack.http.post("/chats", json={"model": {"provider": "nope"}}),
        400,
        "invalid_request",
    )
    _assert_error(
        await stack.http.post(
            "/chats", content=b"{not json", headers={"content-type": "application/json"}
        ),
        400,
        "invalid_request",
    )
    _assert_error(await stack.http.post("/chats", json={"max_steps": 0}), 400, "invalid_request")
    chat = await stack.create_chat()
    _assert_error(
        await stack.http.post(f"/chats/{chat['id']}/messages", json={"content": ""}),
        400,
        "invalid_request",
    )
    _assert_error(await stack.http.get("/chats/not-a-uuid"), 400, "invalid_request")
    _assert_error(await stack.http.get(f"/chats/{uuid.uuid4()}"), 404, "chat_not_found")
    garbage = await stack.http.get("/chats", params={"before": "garbage"})
    _assert_error(garbage, 400, "invalid_request")
    assert "before" in garbage.json()["error"]["message"]
    _assert_error(
        await stack.http.get(f"/chats/{chat['id']}/stream", headers={"Last-Event-ID": "x"}),
        400,
        "invalid_cursor",
    )


async def test_chats_are_listed_newest_first_with_a_cursor(stack: Stack) -> None:
    created = [await stack.create_chat(title=f"chat {i}") for i in range(5)]
    first = (await stack.http.get("/chats", params={"limit": 3})).json()
    second = (
        await stack.http.get("/chats", params={"limit": 3, "before": first["next_before"]})
    ).json()
    titles = [c["title"] for c in first["chats"] + second["chats"]]
    assert titles == [c["title"] for c in reversed(created)]
    assert second["next_before"] is None


async def test_a_retried_send_with_the_same_idempotency_key_sends_once(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text="once")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    headers = {"Idempotency-Key": "k-1"}
    path = f"/chats/{chat['id']}/messages"
    first = await stack.http.post(path, json={"content": "hi"}, headers=headers)
    await stack.wait_status(chat["id"], "waiting")
    again = await stack.http.post(path, json={"content": "hi"}, headers=headers)
    assert first.json()["message_id"] == again.json()["message_id"]
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert len(stack.fake.requests(name)) == 1


async def test_health_and_readiness(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    async with httpx.AsyncClient(base_url=root) as anonymous:
        assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
        ready = await anonymous.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"postgres": "ok", "temporal": "ok"}


async def test_an_oversized_body_is_a_413_with_the_error_shape(stack: Stack) -> None:
    chat = await stack.create_chat()
    big = {"content": "x" * (1024 * 1024 + 10)}
    _assert_error(
        await stack.http.post(f"/chats/{chat['id']}/messages", json=big), 413, "request_too_large"
    )


async def test_a_cursor_older_than_the_kept_events_is_a_410(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text="hello")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    await stack.pool.execute(
        "UPDATE chat_events SET created_at = now() - interval '2 days' WHERE chat_id = $1",
        uuid.UUID(chat["id"]),
    )
    last = await stack.pool.fetchval(
        "SELECT last_event_seq FROM chats WHERE id = $1", uuid.UUID(chat["id"])
    )
    report = await Retention(stack.pool, RetentionSettings(), None).run_round()
    assert report.pruned[0] == Pruned("chat_events", count=last, chats=1)
    path = f"/chats/{chat['id']}/stream"
    _assert_error(await stack.http.get(path, headers={"Last-Event-ID": "1"}), 410, "cursor_expired")
    async with stack.http.stream("GET", path, headers={"Last-Event-ID": str(last)}) as live:
        assert live.status_code == 200, "a cursor at the newest event is still good"


async def test_clients_never_see_provider_signatures(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(
                parts=[
                    FakeReasoning(text="hmm", signature="SECRET-SIGNATURE"),
                    FakeText(text="answer"),
                ]
            )
        ],
    )
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "hi")
    events = await stack.wait_status(chat["id"], "waiting")
    assert "SECRET-SIGNATURE" not in json.dumps([e.data for e in events])
    assert "SECRET-SIGNATURE" not in json.dumps(await stack.messages(chat["id"]))
    stored = await stack.pool.fetchval(
        "SELECT parts::text FROM messages WHERE chat_id = $1 AND role = 'assistant'",
        uuid.UUID(chat["id"]),
    )
    assert "SECRET-SIGNATURE" in stored, "kept for the provider, which needs it back"


async def test_secrets_never_enter_temporal_history(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name="list_files")]),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    history = await stack.temporal.get_workflow_handle(f"chat-{chat['id']}").fetch_history()
    dumped = history.to_json()
    assert "stream_model_step" in dumped and "execute_tool_call" in dumped
    for secret in (stack.key, "test-anthropic-key", "test-openai-key"):
        assert secret not in dumped


BAD_FILE = {"type": "file", "media_type": "text/plain", "data": "%%not base64%%"}


async def test_a_file_part_that_is_not_base64_is_a_400_wherever_user_parts_enter(
    stack: Stack,
) -> None:
    """Refused before it is stored: accepted, it would wedge the turn that reads it."""
    parts = [{"type": "text", "text": "read this"}, BAD_FILE]
    created = await stack.http.post("/chats", json={"message": {"parts": parts}})
    _assert_error(created, 400, "invalid_request")
    assert "parts[1].data is not valid base64" in created.json()["error"]["message"]
    assert (await stack.http.get("/chats")).json()["chats"] == [], "no chat was created"
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text="ok")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    sent = await stack.http.post(f"/chats/{chat['id']}/messages", json={"parts": parts})
    _assert_error(sent, 400, "invalid_request")
    assert "parts[1].data is not valid base64" in sent.json()["error"]["message"]
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    first = (await stack.messages(chat["id"]))[0]
    edited = await stack.http.patch(
        f"/chats/{chat['id']}/messages/{first['id']}", json={"parts": parts}
    )
    _assert_error(edited, 400, "invalid_request")
    assert "parts[1].data is not valid base64" in edited.json()["error"]["message"]
    assert [m["role"] for m in await stack.messages(chat["id"])] == ["user", "assistant"]
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert (detail["status"], detail["queued_messages"]) == ("waiting", [])


async def test_users_send_only_text_and_file_parts(stack: Stack) -> None:
    chat = await stack.create_chat()
    forged = {"type": "tool_result", "tool_call_id": "x", "name": "y", "output": "z"}
    sent = await stack.http.post(f"/chats/{chat['id']}/messages", json={"parts": [forged]})
    _assert_error(sent, 400, "invalid_request")


async def test_a_model_name_is_bounded_and_made_of_model_id_characters(stack: Stack) -> None:
    """A 5,000-character name used to reach Temporal's search attribute limit: a 503."""
    for name in ("x" * 5000, "", "claude sonnet", "name\u0000", "a;drop"):
        body = {"model": {"provider": "anthropic", "name": name}, "message": {"content": "hi"}}
        _assert_error(await stack.http.post("/chats", json=body), 400, "invalid_request")
    for name in ("ft:gpt-4o-mini:org:x:1", "meta-llama/Llama-3-8B", "claude@2024+v1.0_a"):
        await stack.create_chat(model={"provider": "openai", "name": name})
