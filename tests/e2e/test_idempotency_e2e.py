"""Idempotency keys: a retry with the same body gets the first answer; the same key with
another body is a 422, never silently the first request's answer."""

from __future__ import annotations

from typing import Any

from harness import Stack

from chatd.fake_provider.script import FakeResponse, FakeText


def _reused(response: Any) -> None:
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "idempotency_key_reused"


async def test_a_retried_create_returns_the_first_chat_and_starts_one_turn(stack: Stack) -> None:
    body = {
        "model": stack.scripted_model(FakeResponse.of_text("hello")),
        "title": "once",
        "message": {"content": "hi"},
    }
    headers = {"Idempotency-Key": "create-1"}
    first = await stack.http.post("/chats", json=body, headers=headers)
    assert first.status_code == 201, first.text
    await stack.wait_status(first.json()["id"], "waiting")
    again = await stack.http.post("/chats", json=body, headers=headers)
    assert again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    listed = (await stack.http.get("/chats")).json()["chats"]
    assert [c["id"] for c in listed if c["title"] == "once"] == [first.json()["id"]]
    roles = [m["role"] for m in await stack.messages(first.json()["id"])]
    assert roles == ["user", "assistant"]  # one turn, not one per request


async def test_a_create_key_reused_with_another_body_is_refused(stack: Stack) -> None:
    headers = {"Idempotency-Key": "create-2"}
    model = stack.scripted_model()
    first = await stack.http.post("/chats", json={"model": model, "title": "a"}, headers=headers)
    assert first.status_code == 201, first.text
    _reused(await stack.http.post("/chats", json={"model": model, "title": "b"}, headers=headers))


async def test_create_keys_belong_to_their_owner(stack: Stack) -> None:
    headers = {"Idempotency-Key": "create-3"}
    body = {"model": stack.scripted_model(), "title": "mine"}
    mine = await stack.http.post("/chats", json=body, headers=headers)
    theirs = await stack.other_owner.post("/chats", json=body, headers=headers)
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]


async def test_a_send_key_reused_with_another_body_is_refused(stack: Stack) -> None:
    chat = await stack.create_chat(model=stack.scripted_model(FakeResponse.of_text("ok")))
    headers = {"Idempotency-Key": "send-1"}
    path = f"/chats/{chat['id']}/messages"
    first = await stack.http.post(path, json={"content": "one"}, headers=headers)
    assert first.status_code == 202, first.text
    _reused(await stack.http.post(path, json={"content": "two"}, headers=headers))
    again = await stack.http.post(path, json={"content": "one"}, headers=headers)
    assert again.json()["message_id"] == first.json()["message_id"]
    _reused(await stack.http.post(path, json={"content": "two", "client_message_id": "send-1"}))


async def test_a_retried_send_is_answered_as_the_first_even_when_its_turn_runs(
    stack: Stack,
) -> None:
    """`on_busy: reject` refuses a send while a turn runs; but the retry of the send that
    started the running turn is that send, and gets its answer, not a 409."""
    slow = FakeResponse(parts=[FakeText(text="slow answer")], delta_delay_s=0.2)
    chat = await stack.create_chat(model=stack.scripted_model(slow))
    path = f"/chats/{chat['id']}/messages"
    body = {"content": "go", "on_busy": "reject"}
    headers = {"Idempotency-Key": "send-2"}
    first = await stack.http.post(path, json=body, headers=headers)
    assert first.status_code == 202 and first.json()["queued"] is False, first.text
    again = await stack.http.post(path, json=body, headers=headers)
    assert again.status_code == 202, again.text
    assert again.json() == first.json()
    other = await stack.http.post(path, json={**body, "content": "another"})
    assert other.status_code == 409  # a new send is still refused while the turn runs
    await stack.wait_status(chat["id"], "waiting")


async def test_an_edit_key_reused_with_another_body_is_refused(stack: Stack) -> None:
    chat = await stack.create_chat(
        model=stack.scripted_model(FakeResponse.of_text("a"), FakeResponse.of_text("b"))
    )
    await stack.send(chat["id"], "first")
    await stack.wait_status(chat["id"], "waiting")
    user_id = (await stack.messages(chat["id"]))[0]["id"]
    path = f"/chats/{chat['id']}/messages/{user_id}"
    headers = {"Idempotency-Key": "edit-1"}
    first = await stack.http.patch(path, json={"content": "edited"}, headers=headers)
    assert first.status_code == 202, first.text
    _reused(await stack.http.patch(path, json={"content": "other"}, headers=headers))
