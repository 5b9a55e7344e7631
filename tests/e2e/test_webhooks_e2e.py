"""Outbound webhooks end to end: endpoints registered over HTTP, a turn event's fanout run by
a real worker on the real Temporal server, delivered to a receiver in the test that checks
each Standard Webhooks signature; failed attempts logged and replayed; internal addresses
refused unless the operator allows them.

The fanout is started here with a Temporal client, as `ChatTurn` starts it at a turn's end
(`workflows.webhook_delivery.start_deliveries`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from harness import Stack, StackFactory
from support.webhook_receiver import WebhookReceiver, webhook_receiver

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.models import ModelError
from chatd.retention import Pruned, Retention, RetentionSettings
from workflows.webhook_delivery import WebhookFanout, fanout_workflow_id
from workflows.webhook_payloads import WebhookFanoutInput


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as running:
        yield running


async def _register(stack: Stack, receiver: WebhookReceiver, *events: str) -> dict[str, Any]:
    response = await stack.http.post(
        "/webhooks", json={"url": receiver.url, "events": list(events)}
    )
    assert response.status_code == 201, response.text
    endpoint: dict[str, Any] = response.json()
    receiver.secret = endpoint["secret"]
    return endpoint


async def _fanout(stack: Stack, chat_id: str, event: str, **extra: Any) -> None:
    """Run the event's fanout to its end, as a turn would start it."""
    input = WebhookFanoutInput(chat_id=chat_id, turn_id="turn-1", event=event, **extra)  # type: ignore[arg-type]
    await stack.temporal.execute_workflow(
        WebhookFanout.run, input, id=fanout_workflow_id(input), task_queue=stack.task_queue
    )


async def _deliveries(stack: Stack, webhook_id: str) -> list[dict[str, Any]]:
    response = await stack.http.get(f"/webhooks/{webhook_id}/deliveries")
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def _chat(stack: Stack) -> str:
    chat = await stack.create_chat(model=stack.scripted_model())
    return str(chat["id"])


async def test_a_turn_event_reaches_a_subscribed_endpoint_signed(
    make_stack: StackFactory, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATD_WEBHOOK_ALLOW_PRIVATE", "1")
    async with make_stack() as stack:
        endpoint = await _register(stack, receiver, "turn.failed", "turn.completed")
        other = await _register(stack, receiver, "turn.requires_action")
        listed = (await stack.http.get("/webhooks")).json()["data"]
        assert [e["id"] for e in listed] == [endpoint["id"], other["id"]]
        assert all("secret" not in e for e in listed), "the secret is shown once"
        receiver.secret = endpoint["secret"]

        chat_id = await _chat(stack)
        error = ModelError(message="overloaded", kind="overloaded", status_code=529)
        await _fanout(stack, chat_id, "turn.failed", last_error=error)
        await _fanout(stack, chat_id, "turn.failed", last_error=error, occurrence=0)

    [got] = receiver.received
    assert got.verified is not None, "the signature verifies with the endpoint's secret"
    assert got.verified["type"] == "turn.failed"
    data = got.verified["data"]
    assert (data["chat_id"], data["turn_id"], data["status"]) == (chat_id, "turn-1", "error")
    assert data["last_error"]["kind"] == "overloaded"
    assert set(got.verified) == {"type", "timestamp", "data"}, "no chat content"


async def test_a_failing_endpoint_is_retried_logged_and_replayed(
    make_stack: StackFactory,
    receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("CHATD_WEBHOOK_ALLOW_PRIVATE", "1")
    monkeypatch.setenv("CHATD_WEBHOOK_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("CHATD_WEBHOOK_FIRST_RETRY_S", "0.1")
    receiver.answers = [500, 503]
    async with make_stack() as stack:
        endpoint = await _register(stack, receiver, "turn.completed")
        chat_id = await _chat(stack)
        await _fanout(stack, chat_id, "turn.completed")
        [delivery] = await _deliveries(stack, endpoint["id"])
        assert delivery["status"] == "failed"
        assert [a["status_code"] for a in delivery["attempts"]] == [500, 503]
        assert delivery["attempts"][0]["next_retry_at"] is not None
        assert "HTTP 500" in delivery["attempts"][0]["error"]
        noisy = [r for r in caplog.records if r.name == "temporalio.activity"]
        assert [r.levelname for r in noisy if r.levelno >= logging.WARNING] == [], (
            "a receiver's failure is expected: one line of ours, no traceback"
        )

        path = f"/webhooks/{endpoint['id']}/deliveries/{delivery['id']}/replay"
        replay = await stack.http.post(path)
        assert replay.status_code == 202, replay.text
        delivery = await _until_attempts(stack, endpoint["id"], 3)
        assert delivery["status"] == "succeeded"
        assert delivery["attempts"][-1] | {"created_at": None} == {
            "attempt": 3,
            "replay": True,
            "status_code": 200,
            "error": None,
            "next_retry_at": None,
            "created_at": None,
        }

        assert (await stack.other_owner.post(path)).status_code == 404
        missing = f"/webhooks/{endpoint['id']}/deliveries/{endpoint['id']}/replay"
        assert (await stack.http.post(missing)).json()["error"]["code"] == "delivery_not_found"
    assert all(r.verified is not None for r in receiver.received)
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1, "one message"


async def _until_attempts(stack: Stack, webhook_id: str, count: int) -> dict[str, Any]:
    async def poll() -> dict[str, Any]:
        while True:
            [delivery] = await _deliveries(stack, webhook_id)
            if len(delivery["attempts"]) >= count:
                return delivery
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(poll(), 30)


async def test_an_internal_address_is_refused_unless_allowed(
    make_stack: StackFactory, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHATD_WEBHOOK_ALLOW_PRIVATE", raising=False)
    async with make_stack() as stack:
        endpoint = await _register(stack, receiver, "turn.requires_action")
        chat_id = await _chat(stack)
        await _fanout(stack, chat_id, "turn.requires_action", occurrence=2)
        [delivery] = await _deliveries(stack, endpoint["id"])
    assert receiver.received == [], "the worker never sent to the loopback address"
    assert delivery["status"] == "failed"
    [attempt] = delivery["attempts"]
    assert attempt["status_code"] is None
    assert "internal address" in attempt["error"]


async def test_endpoints_are_the_owners_own_and_checked(
    stack: Stack, receiver: WebhookReceiver
) -> None:
    endpoint = await _register(stack, receiver, "turn.completed")
    for body in (
        {"url": "ftp://example.com/", "events": ["turn.completed"]},
        {"url": "https://example.com/", "events": ["turn.started"]},
        {"url": "https://example.com/", "events": []},
        {"url": "https://example.com/", "events": ["turn.failed", "turn.failed"]},
        {"url": "https://example.com/", "events": ["turn.failed"], "secret": "mine"},
    ):
        response = await stack.http.post("/webhooks", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == "invalid_request"
    assert (await stack.other_owner.get("/webhooks")).json() == {"data": []}
    webhook = f"/webhooks/{endpoint['id']}"
    assert (await stack.other_owner.get(f"{webhook}/deliveries")).status_code == 404
    assert (await stack.other_owner.delete(webhook)).status_code == 404
    assert (await stack.http.delete(webhook)).status_code == 204
    assert (await stack.http.delete(webhook)).status_code == 404
    assert (await stack.http.get("/webhooks")).json() == {"data": []}


async def test_real_turns_announce_their_end_and_their_waits(
    make_stack: StackFactory, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn workflow starts the fanouts itself: a completed turn, and a wait for the
    client's tool results; an owner without endpoints costs its turns nothing."""
    monkeypatch.setenv("CHATD_WEBHOOK_ALLOW_PRIVATE", "1")
    ask = {"name": "ask_user", "input_schema": {"type": "object"}}
    async with make_stack() as stack:
        await _register(stack, receiver, "turn.completed", "turn.requires_action")
        model = stack.scripted_model(
            FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={})]),
            FakeResponse(parts=[FakeText(text="thanks")]),
        )
        chat = await stack.create_chat(model=model, dynamic_tools=[ask])
        await stack.send(chat["id"], "ask me")
        await stack.wait_status(chat["id"], "requires_action")
        [pending] = (await stack.http.get(f"/chats/{chat['id']}")).json()["pending_tool_calls"]
        answered = await stack.http.post(
            f"/chats/{chat['id']}/tool-results",
            json={"results": [{"tool_call_id": pending["id"], "output": "yes"}]},
        )
        assert answered.status_code == 202, answered.text
        await stack.wait_status(chat["id"], "waiting")

        def both_arrived() -> bool:
            with receiver.arrived:
                return receiver.arrived.wait_for(lambda: len(receiver.received) >= 2, 30)

        assert await asyncio.to_thread(both_arrived)
    kinds = sorted(r.verified["type"] for r in receiver.received if r.verified)
    assert kinds == ["turn.completed", "turn.requires_action"]
    assert {r.verified["data"]["chat_id"] for r in receiver.received if r.verified} == {chat["id"]}


async def test_deliveries_page_back_and_settled_ones_are_forgotten(
    stack: Stack, receiver: WebhookReceiver
) -> None:
    endpoint = await _register(stack, receiver, "turn.completed")
    chat_id = await _chat(stack)
    for turn in range(3):
        input = WebhookFanoutInput(chat_id=chat_id, turn_id=f"turn-{turn}", event="turn.completed")
        await stack.temporal.execute_workflow(
            WebhookFanout.run, input, id=fanout_workflow_id(input), task_queue=stack.task_queue
        )
    path = f"/webhooks/{endpoint['id']}/deliveries"
    first = (await stack.http.get(path, params={"limit": 2})).json()
    assert len(first["data"]) == 2 and first["has_more"] is True
    assert first["next_before"] == first["data"][1]["id"]
    rest = (await stack.http.get(path, params={"limit": 2, "before": first["next_before"]})).json()
    assert len(rest["data"]) == 1 and rest["has_more"] is False and rest["next_before"] is None
    newest_first = [d["turn_id"] for d in first["data"] + rest["data"]]
    assert newest_first == ["turn-2", "turn-1", "turn-0"]
    stranger = await stack.http.get(path, params={"before": endpoint["id"]})
    assert stranger.status_code == 400, stranger.text
    assert stranger.json()["error"]["code"] == "invalid_cursor"

    old, pending, recent = (uuid.UUID(d["id"]) for d in first["data"] + rest["data"])
    await stack.pool.execute(
        "UPDATE webhook_deliveries SET updated_at = now() - interval '31 days'"
        " WHERE id = ANY($1::uuid[])",
        [old, pending],
    )
    await stack.pool.execute(
        "UPDATE webhook_deliveries SET status = 'pending' WHERE id = $1", pending
    )
    report = await Retention(stack.pool, RetentionSettings(), None).run_round()
    assert Pruned("webhook_deliveries", 1) in report.pruned
    kept = {d["id"] for d in (await stack.http.get(path)).json()["data"]}
    assert kept == {str(pending), str(recent)}, "the settled old one went; pending stays"
    assert not await stack.pool.fetchval(
        "SELECT count(*) FROM webhook_attempts WHERE delivery_id = $1", old
    )
