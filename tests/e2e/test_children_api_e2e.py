"""Subagents over HTTP: a chat's children (`GET /chats/{id}/children`), root-only lists
unless `include_children`, the subagent fields of a chat, its children's usage, and their
status reaching the parent's stream. Children are made in the store, as the spawn tool does
(the tool itself is tested with the workflow); everything else is the real stack."""

from __future__ import annotations

import uuid
from typing import Any

from harness import Stack

from chatd.models import ModelConfig
from chatd.store.chats import ChatRecord, ChatStore
from workflows.constants import workflow_id
from workflows.payloads import ChatTurnInput


async def _child(stack: Stack, parent_id: str, **fields: Any) -> ChatRecord:
    """A subagent of the parent, made as the spawn tool makes one."""
    chats = ChatStore(stack.pool)
    parent = await chats.get(uuid.UUID(parent_id))
    assert parent is not None
    return await chats.create(
        owner=parent.owner, model=ModelConfig(), parent_chat_id=parent.id, **fields
    )


async def test_a_chat_shows_its_subagent_fields(stack: Stack) -> None:
    fallback = [
        {"provider": "openai", "name": "gpt-4o", "openai_api": "responses"},
        {"provider": "anthropic", "name": "claude-haiku-4-5", "temperature": 0.2},
    ]

    created = await stack.create_chat(subagents=True, fallback_models=fallback)
    read = (await stack.http.get(f"/chats/{created['id']}")).json()
    plain = await stack.create_chat()

    for chat in (created, read):
        assert (chat["parent_chat_id"], chat["depth"], chat["subagents"]) == (None, 0, True)
        assert [(m["provider"], m["name"]) for m in chat["fallback_models"]] == [
            ("openai", "gpt-4o"),
            ("anthropic", "claude-haiku-4-5"),
        ]
        assert chat["fallback_models"][1]["temperature"] == 0.2
        assert chat["usage"]["children"] is None
    assert (plain["subagents"], plain["fallback_models"]) == (False, [])


async def test_bad_subagent_fields_are_400(stack: Stack) -> None:
    model = {"provider": "openai", "name": "gpt-4o"}
    bodies: list[dict[str, Any]] = [
        {"fallback_models": [model] * 4},
        {"fallback_models": [{**model, "temperature": "0.5"}]},
        {"fallback_models": model},
        {"subagents": 1},
        {"subagents": "true"},
        {"parent_chat_id": str(uuid.uuid4())},
    ]
    for body in bodies:
        response = await stack.http.post("/chats", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == "invalid_request", body
    listing = await stack.http.get("/chats", params={"include_children": "maybe"})
    assert listing.status_code == 400, listing.text


async def test_children_are_listed_under_their_parent_only(stack: Stack) -> None:
    root = await stack.create_chat(title="root")
    first = await _child(stack, root["id"], title="first")
    second = await _child(stack, root["id"])
    grandchild = await _child(stack, str(first.id))

    children = await stack.http.get(f"/chats/{root['id']}/children")
    child = (await stack.http.get(f"/chats/{first.id}")).json()
    roots = (await stack.http.get("/chats")).json()["chats"]
    every = (await stack.http.get("/chats", params={"include_children": "true"})).json()["chats"]

    assert children.status_code == 200, children.text
    listed = children.json()["data"]
    assert [c["id"] for c in listed] == [str(first.id), str(second.id)]
    assert [c["parent_chat_id"] for c in listed] == [root["id"]] * 2
    assert [c["title"] for c in listed] == ["first", None]
    assert (child["parent_chat_id"], child["depth"]) == (root["id"], 1)
    assert [c["id"] for c in roots] == [root["id"]]
    assert roots[0]["parent_chat_id"] is None
    assert {c["id"] for c in every} == {
        root["id"],
        str(first.id),
        str(second.id),
        str(grandchild.id),
    }
    nested = (await stack.http.get(f"/chats/{first.id}/children")).json()["data"]
    assert [c["id"] for c in nested] == [str(grandchild.id)]
    assert (await stack.http.get(f"/chats/{second.id}/children")).json() == {"data": []}


async def test_another_owners_children_are_not_found(stack: Stack) -> None:
    root = await stack.create_chat()
    await _child(stack, root["id"])

    for path in (f"/chats/{root['id']}/children", f"/chats/{uuid.uuid4()}/children"):
        response = await stack.other_owner.get(path)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "chat_not_found"
    listed = (await stack.other_owner.get("/chats", params={"include_children": True})).json()
    assert listed["chats"] == []


async def test_a_childs_turn_shows_on_its_parent(stack: Stack) -> None:
    """A child runs turns as any chat does; its parent's stream gets each of its status and
    title changes, and its parent's usage counts what it used."""
    root = await stack.create_chat()
    child = await _child(stack, root["id"])

    await stack.send(str(child.id), "hello")
    await stack.wait_status(str(child.id), "waiting")
    renamed = await stack.http.patch(f"/chats/{child.id}", json={"title": "helper"})
    assert renamed.status_code == 200, renamed.text
    events = await stack.events_until(
        root["id"], lambda e: e.event == "subagent" and e.data["title"] == "helper"
    )

    assert [(e.event, e.data) for e in events] == [
        ("subagent", {"chat_id": str(child.id), "status": status, "title": title})
        for status, title in [
            ("waiting", None),
            ("running", None),
            ("waiting", None),
            ("waiting", "helper"),
        ]
    ]
    parent, used = [(await stack.http.get(f"/chats/{i}")).json() for i in (root["id"], child.id)]
    assert used["usage"]["output_tokens"] > 0
    assert parent["usage"]["children"] == {
        k: v for k, v in used["usage"].items() if k != "children"
    }
    assert parent["usage"]["output_tokens"] == 0
    started = await _start_input(stack, str(child.id))
    assert started.parent_chat_id == root["id"]


async def _start_input(stack: Stack, chat_id: str) -> ChatTurnInput:
    """The input the chat's (first) ChatTurn run was started with."""
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [started] = await stack.temporal.data_converter.decode(payloads, [ChatTurnInput])
            assert isinstance(started, ChatTurnInput)
            return started
    raise AssertionError(f"no run of chat {chat_id} started")
