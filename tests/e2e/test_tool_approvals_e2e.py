"""Tool approval through the gateway: a person approves, edits or denies the calls the chat's
policy asks about, while the turn waits durably in requires_action."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from workflows.decide import POLICY_DENIED

ASK_WRITE = {"write_file": "ask"}
DONE = FakeResponse(parts=[FakeText(text="Done.")])


@dataclass
class Waiting:
    """A chat in requires_action, as `GET /chats/{id}` shows it."""

    chat: dict[str, Any]
    model: str
    workspace: Path

    @property
    def id(self) -> str:
        chat_id: str = self.chat["id"]
        return chat_id

    @property
    def pending(self) -> list[dict[str, Any]]:
        pending: list[dict[str, Any]] = self.chat["pending_tool_calls"]
        return pending

    def ids(self, action: str) -> list[str]:
        """The pending calls waiting for `action` ("approval" or "client_tool")."""
        return [p["id"] for p in self.pending if p["action"] == action]


def write(path: str, content: str, call_id: str | None = None) -> FakeToolCall:
    return FakeToolCall(name="write_file", arguments={"path": path, "content": content}, id=call_id)


async def waiting_chat(
    stack: Stack,
    tmp_path: Path,
    calls: list[FakeToolCall],
    *later: FakeResponse,
    tool_policy: dict[str, str] | None = None,
    **chat: Any,
) -> Waiting:
    """A chat whose model's first step makes `calls` (then answers `later`, or "Done."),
    waiting in requires_action."""
    name = model_name()
    first = FakeResponse(parts=[FakeText(text="On it."), *calls])
    stack.fake.script(name, [first, *(later or (DONE,))])
    created = await stack.create_chat(
        model={"provider": "anthropic", "name": name},
        tool_policy=ASK_WRITE if tool_policy is None else tool_policy,
        **chat,
    )
    await stack.send(created["id"], "write the files")
    await stack.wait_status(created["id"], "requires_action")
    shown = (await stack.http.get(f"/chats/{created['id']}")).json()
    return Waiting(shown, name, tmp_path / "workspaces" / created["id"])


async def decide(stack: Stack, chat_id: str, *decisions: dict[str, Any]) -> Any:
    """POST the decisions; the response."""
    return await stack.http.post(
        f"/chats/{chat_id}/tool-approvals", json={"decisions": list(decisions)}
    )


def sent_results(stack: Stack, model: str, request: int) -> dict[str, dict[str, Any]]:
    """The tool_result blocks of the model's `request`-th request, by call id."""
    body = stack.fake.requests(model)[request].body
    return {
        block["tool_use_id"]: block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


def sent_calls(stack: Stack, model: str, request: int) -> dict[str, dict[str, Any]]:
    """The tool_use blocks of the model's `request`-th request, by call id."""
    body = stack.fake.requests(model)[request].body
    return {
        block["id"]: block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    }


def result_text(block: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in block.get("content", []))


def tool_results(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every tool result of the transcript, by call id."""
    return {
        part["tool_call_id"]: part
        for message in messages
        if message["role"] == "tool"
        for part in message["parts"]
    }


def tool_calls(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every tool call of the transcript, by call id."""
    return {
        part["id"]: part
        for message in messages
        if message["role"] == "assistant"
        for part in message["parts"]
        if part["type"] == "tool_call"
    }


async def test_an_asked_call_waits_with_its_arguments_and_runs_once_approved(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("notes.md", "hello")])
    assert waiting.chat["status"] == "requires_action"
    [pending] = waiting.pending
    assert pending["action"] == "approval" and pending["name"] == "write_file"
    assert pending["arguments"] == {"path": "notes.md", "content": "hello"}
    assert not (waiting.workspace / "notes.md").exists(), "nothing runs before the decision"

    response = await decide(
        stack, waiting.id, {"tool_call_id": pending["id"], "decision": "approve"}
    )
    assert response.status_code == 202, response.text
    await stack.wait_status(waiting.id, "waiting")

    assert (waiting.workspace / "notes.md").read_text() == "hello"
    result = sent_results(stack, waiting.model, 1)[pending["id"]]
    assert "is_error" not in result and "Created notes.md" in result_text(result)
    assert (await stack.http.get(f"/chats/{waiting.id}")).json()["pending_tool_calls"] is None


async def test_a_denied_call_never_runs_and_the_model_gets_the_message(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("notes.md", "hello")])
    [call_id] = waiting.ids("approval")
    response = await decide(
        stack,
        waiting.id,
        {"tool_call_id": call_id, "decision": "deny", "message": "not in my notes"},
    )
    assert response.status_code == 202, response.text
    await stack.wait_status(waiting.id, "waiting")

    assert not (waiting.workspace / "notes.md").exists()
    result = sent_results(stack, waiting.model, 1)[call_id]
    assert result["is_error"] is True
    assert "denied" in result_text(result) and "not in my notes" in result_text(result)


async def test_approved_edited_arguments_run_and_replace_the_models_in_the_transcript(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("notes.md", "hello")])
    [call_id] = waiting.ids("approval")
    edited = {"path": "edited.md", "content": "edited by a person"}
    response = await decide(
        stack, waiting.id, {"tool_call_id": call_id, "decision": "approve", "arguments": edited}
    )
    assert response.status_code == 202, response.text
    await stack.wait_status(waiting.id, "waiting")

    assert (waiting.workspace / "edited.md").read_text() == "edited by a person"
    assert not (waiting.workspace / "notes.md").exists()
    call = tool_calls(await stack.messages(waiting.id))[call_id]
    assert json.loads(call["arguments"]) == edited
    assert json.loads(call["original_arguments"]) == {"path": "notes.md", "content": "hello"}
    assert sent_calls(stack, waiting.model, 1)[call_id]["input"] == edited, (
        "the model sees what ran"
    )


@pytest.mark.parametrize(
    "arguments",
    [{"path": "x.md"}, {"path": 5, "content": "x"}, {"path": "x.md", "content": ["x"]}],
    ids=["missing field", "wrong type", "wrong content type"],
)
async def test_edited_arguments_that_dont_fit_the_schema_are_a_400_and_the_wait_stays(
    stack: Stack, tmp_path: Path, arguments: dict[str, Any]
) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("notes.md", "hello")])
    [call_id] = waiting.ids("approval")
    refused = await decide(
        stack, waiting.id, {"tool_call_id": call_id, "decision": "approve", "arguments": arguments}
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_tool_approvals"
    still = (await stack.http.get(f"/chats/{waiting.id}")).json()
    assert still["status"] == "requires_action" and still["pending_tool_calls"] == waiting.pending

    valid = {"path": "fixed.md", "content": "fixed"}
    accepted = await decide(
        stack, waiting.id, {"tool_call_id": call_id, "decision": "approve", "arguments": valid}
    )
    assert accepted.status_code == 202, accepted.text
    await stack.wait_status(waiting.id, "waiting")
    assert (waiting.workspace / "fixed.md").read_text() == "fixed"
    assert not (waiting.workspace / "x.md").exists()


async def test_remember_makes_the_tool_auto_for_the_chat(stack: Stack, tmp_path: Path) -> None:
    waiting = await waiting_chat(
        stack,
        tmp_path,
        [write("a.md", "first")],
        FakeResponse(parts=[write("b.md", "second")]),
        DONE,
    )
    [call_id] = waiting.ids("approval")
    response = await decide(
        stack, waiting.id, {"tool_call_id": call_id, "decision": "approve", "remember": True}
    )
    assert response.status_code == 202, response.text
    events = await stack.wait_status(waiting.id, "waiting")

    statuses = [e.data["status"] for e in events if e.event == "status"]
    assert statuses.count("requires_action") == 1, "the second call ran without asking"
    assert (waiting.workspace / "a.md").read_text() == "first"
    assert (waiting.workspace / "b.md").read_text() == "second"
    chat = (await stack.http.get(f"/chats/{waiting.id}")).json()
    assert chat["tool_policy"] == {"write_file": "auto"}
    [decision] = (await stack.http.get(f"/chats/{waiting.id}/tool-decisions")).json()["decisions"]
    assert decision["remember"] is True


async def test_a_denying_policy_answers_an_error_without_waiting(
    stack: Stack, tmp_path: Path
) -> None:
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[write("notes.md", "hello")]), DONE])
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, tool_policy={"write_*": "deny"}
    )
    await stack.send(chat["id"], "write it")
    events = await stack.wait_status(chat["id"], "waiting")

    assert "requires_action" not in [e.data["status"] for e in events if e.event == "status"]
    assert not (tmp_path / "workspaces" / chat["id"] / "notes.md").exists()
    [result] = sent_results(stack, name, 1).values()
    assert result["is_error"] is True and result_text(result) == POLICY_DENIED
    assert (await stack.http.get(f"/chats/{chat['id']}/tool-decisions")).json()["decisions"] == []
