"""chatd's native API (`/api/v1`) with `httpx`: send, stream, resume, a client tool, an approval.

Three short scenes, each on its own chat:

1. send a message, stream the answer, drop the stream half-way and resume it with
   `Last-Event-ID`: every event arrives exactly once;
2. a client-executed tool: the chat waits in `requires_action` until we post the result;
3. an approval: a built-in tool under the `ask` policy runs only once we approve it.

    CHATD_BASE_URL=http://127.0.0.1:8080 CHATD_API_KEY=$(cat .data/api_key) \
        python examples/native_api.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

BASE_URL = os.environ.get("CHATD_BASE_URL", "http://127.0.0.1:8080")
API_KEY = os.environ["CHATD_API_KEY"]

api = httpx.Client(
    base_url=f"{BASE_URL}/api/v1",
    headers={"Authorization": f"Bearer {API_KEY}"},
    timeout=httpx.Timeout(30.0),
)


@dataclass
class Event:
    """One Server-Sent Event of a chat's stream."""

    id: int
    type: str
    data: dict[str, Any]


def events(chat_id: str, last_event_id: int | None = None) -> Iterator[Event]:
    """The chat's events after `last_event_id` (all retained events for 0), as they come.

    `Last-Event-ID` is how an SSE client resumes: the gateway sends every event after it,
    exactly once, whichever gateway you reach.
    """
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    with api.stream("GET", f"/chats/{chat_id}/stream", headers=headers) as response:
        response.raise_for_status()
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "":  # a blank line ends an event
                if "data" in fields:
                    yield Event(
                        int(fields["id"]),
                        fields.get("event", "message"),
                        json.loads(fields["data"]),
                    )
                fields = {}
            elif not line.startswith(":"):  # ":" lines are comments (keep-alive pings)
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")


def until_settled(chat_id: str, after: int) -> tuple[list[Event], str]:
    """Read events after `after` until the turn stops (`waiting`, `error` or
    `requires_action`); return them and that status."""
    seen = []
    for event in events(chat_id, after):
        seen.append(event)
        status = event.data.get("status") if event.type == "status" else None
        if status in ("waiting", "error", "requires_action"):
            return seen, status
    raise AssertionError("the stream ended before the turn settled")


def last_assistant_text(chat_id: str) -> str:
    """The text of the transcript's last assistant message."""
    messages = api.get(f"/chats/{chat_id}/messages").json()["messages"]
    last = [m for m in messages if m["role"] == "assistant"][-1]
    return "".join(p["text"] for p in last["parts"] if p["type"] == "text")


def send_stream_and_resume() -> None:
    """Scene 1: stream an answer, drop the connection, resume with Last-Event-ID."""
    chat = api.post("/chats", json={"message": {"content": "Hello! Tell me about chatd."}})
    assert chat.status_code == 201, chat.text
    chat_id = chat.json()["id"]
    print(f"[1] chat {chat_id} created with its first message")

    # Read from the first event (0) and stop after three text deltas: the dropped stream.
    seen: list[Event] = []
    for event in events(chat_id, 0):
        seen.append(event)
        if sum(e.type == "message_part" for e in seen) == 3:
            break
    print(f"[1] read {len(seen)} events, then dropped the stream at event {seen[-1].id}")

    # Resume: only what came after the last event we processed.
    rest, status = until_settled(chat_id, seen[-1].id)
    seen += rest
    ids = [e.id for e in seen]
    assert ids == list(range(1, len(ids) + 1)), f"each event exactly once, in order: {ids}"
    assert status == "waiting", status

    # Deltas put together equal the stored message (a `reset` would mean: drop the draft).
    text = ""
    for event in seen:
        if event.type == "reset":
            text = ""
        elif event.type == "message_part" and event.data["part"]["type"] == "text":
            text += event.data["part"]["text"]
    assert text == last_assistant_text(chat_id), "streamed text must equal the transcript"
    print(f"[1] resumed: {len(ids)} events, answer: {text[:60]}...")

    # Another message on the same chat: a send is a 202 once the message is stored.
    sent = api.post(
        f"/chats/{chat_id}/messages",
        json={"content": "Thanks!"},
        headers={"Idempotency-Key": f"thanks-{chat_id}"},
    )
    assert sent.status_code == 202, sent.text
    _, status = until_settled(chat_id, ids[-1])
    assert status == "waiting" and "Thanks!" in last_assistant_text(chat_id)
    # A retry with the same Idempotency-Key is answered as the first send, not sent twice.
    again = api.post(
        f"/chats/{chat_id}/messages",
        json={"content": "Thanks!"},
        headers={"Idempotency-Key": f"thanks-{chat_id}"},
    )
    assert again.json()["message_id"] == sent.json()["message_id"], "a retry is the same message"
    print("[1] a second message answered; its retry was recognised")


def client_tool() -> None:
    """Scene 2: the model calls a tool the client runs; the chat waits for its result."""
    weather_tool = {
        "name": "get_weather",
        "description": "Today's weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    chat = api.post(
        "/chats",
        json={
            "dynamic_tools": [weather_tool],
            "message": {"content": "What's the weather in Lisbon?"},
        },
    ).json()
    seen, status = until_settled(chat["id"], 0)
    assert status == "requires_action", status

    # What the turn waits for: `pending_tool_calls`, until `action_expires_at`.
    waiting = api.get(f"/chats/{chat['id']}").json()
    calls = waiting["pending_tool_calls"]
    assert [c["name"] for c in calls] == ["get_weather"] and calls[0]["action"] == "client_tool"
    expires = waiting["action_expires_at"]
    print(f"[2] the chat waits for get_weather({calls[0]['arguments']}) until {expires}")

    # Run the tool here, and post every result in one submission.
    results = [{"tool_call_id": c["id"], "output": "sunny, 22 °C"} for c in calls]
    answer = api.post(f"/chats/{chat['id']}/tool-results", json={"results": results})
    assert answer.status_code == 202, answer.text
    # A second submission finds nothing waiting: the first one won.
    late = api.post(f"/chats/{chat['id']}/tool-results", json={"results": results})
    assert late.status_code in (400, 409), late.text

    _, status = until_settled(chat["id"], seen[-1].id)
    assert status == "waiting", status
    final = last_assistant_text(chat["id"])
    assert "sunny, 22 °C" in final, final
    print(f"[2] answered: {final}")


def approval() -> None:
    """Scene 3: a built-in tool under `ask` waits for a person's decision."""
    chat = api.post(
        "/chats",
        json={"tool_policy": {"current_time": "ask"}, "message": {"content": "What time is it?"}},
    ).json()
    seen, status = until_settled(chat["id"], 0)
    assert status == "requires_action", status

    pending = api.get(f"/chats/{chat['id']}").json()["pending_tool_calls"]
    asked = [c for c in pending if c["action"] == "approval"]
    assert [c["name"] for c in asked] == ["current_time"], pending
    print(f"[3] current_time waits for approval ({asked[0]['id']})")

    decisions = [{"tool_call_id": c["id"], "decision": "approve"} for c in asked]
    answer = api.post(f"/chats/{chat['id']}/tool-approvals", json={"decisions": decisions})
    assert answer.status_code == 202, answer.text

    _, status = until_settled(chat["id"], seen[-1].id)
    assert status == "waiting", status
    final = last_assistant_text(chat["id"])
    assert "utc" in final, final  # the demo model quotes the tool's result
    # Every decision is audited: who decided, when, and a hash of the arguments run.
    audit = api.get(f"/chats/{chat['id']}/tool-decisions").json()["decisions"]
    assert [(d["tool_name"], d["decision"]) for d in audit] == [("current_time", "approve")], audit
    print(f"[3] approved by key {audit[0]['key_id']} and run: {final}")


def main() -> None:
    send_stream_and_resume()
    client_tool()
    approval()
    print("OK")


if __name__ == "__main__":
    main()
