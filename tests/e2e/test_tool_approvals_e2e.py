"""Tool approval through the gateway: a person approves, edits or denies the calls the chat's
policy asks about, while the turn waits durably in requires_action."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from harness import Stack
from support.names import model_name

from chatd.devstack.temporal import TemporalDevServer, temporal_binary
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from workflows.tool_batch import INTERRUPTED_RESULT, POLICY_DENIED

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


ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}


async def test_a_mixed_wait_takes_each_kind_at_its_own_endpoint_and_goes_on_after_both(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(
        stack,
        tmp_path,
        [FakeToolCall(name="ask_user", arguments={"question": "Which?"}), write("a.md", "A")],
        dynamic_tools=[ASK_USER],
    )
    [approval], [client] = waiting.ids("approval"), waiting.ids("client_tool")
    assert {p["id"]: p["name"] for p in waiting.pending} == {
        approval: "write_file",
        client: "ask_user",
    }
    both = [approval, client]
    results_path = f"/chats/{waiting.id}/tool-results"
    for call_id in (approval, *both):
        ids = both if call_id == client else [call_id]
        wrong = await stack.http.post(
            results_path, json={"results": [{"tool_call_id": i, "output": "x"} for i in ids]}
        )
        assert wrong.status_code == 400, "tool-results answers client calls only"
        assert wrong.json()["error"]["code"] == "invalid_tool_results"
    for ids in ([client], both):
        wrong = await decide(
            stack, waiting.id, *[{"tool_call_id": i, "decision": "approve"} for i in ids]
        )
        assert wrong.status_code == 400, "tool-approvals answers approvals only"
        assert wrong.json()["error"]["code"] == "invalid_tool_approvals"

    approved = await decide(stack, waiting.id, {"tool_call_id": approval, "decision": "approve"})
    assert approved.status_code == 202, approved.text
    again = await decide(stack, waiting.id, {"tool_call_id": approval, "decision": "deny"})
    assert again.status_code == 409, "the first accepted approval wins"
    chat = (await stack.http.get(f"/chats/{waiting.id}")).json()
    assert chat["status"] == "requires_action", "the client's call still waits"
    assert not (waiting.workspace / "a.md").exists(), "approved calls run once the wait is over"

    answered = await stack.http.post(
        results_path, json={"results": [{"tool_call_id": client, "output": "this one"}]}
    )
    assert answered.status_code == 202, answered.text
    await stack.wait_status(waiting.id, "waiting")
    assert (waiting.workspace / "a.md").read_text() == "A"
    results = sent_results(stack, waiting.model, 1)
    assert result_text(results[client]) == "this one"
    assert "Created a.md" in result_text(results[approval])


async def test_approvals_when_nothing_waits_for_approval_are_a_409(
    stack: Stack, tmp_path: Path
) -> None:
    idle = await stack.create_chat(tool_policy=ASK_WRITE)
    response = await decide(stack, idle["id"], {"tool_call_id": "toolu_x", "decision": "approve"})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "not_awaiting_tool_approvals"
    assert error["detail"]["status"] == "waiting"

    client_only = await waiting_chat(
        stack,
        tmp_path,
        [FakeToolCall(name="ask_user", arguments={})],
        dynamic_tools=[ASK_USER],
    )
    [client] = client_only.ids("client_tool")
    response = await decide(stack, client_only.id, {"tool_call_id": client, "decision": "approve"})
    assert response.status_code == 409, "a wait for the client holds no approval"
    assert response.json()["error"]["detail"]["status"] == "requires_action"


async def test_approvals_must_answer_each_pending_call_once_and_the_first_wins(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("a.md", "A"), write("b.md", "B")])
    a, b = waiting.ids("approval")

    def approve(call_id: str) -> dict[str, Any]:
        return {"tool_call_id": call_id, "decision": "approve"}

    refusals = {
        "missing": [approve(a)],
        "extra": [approve(a), approve(b), approve("toolu_unknown")],
        "duplicate": [approve(a), approve(a), approve(b)],
        "deny with arguments": [approve(a), {**approve(b), "decision": "deny", "arguments": {}}],
        "approve with a message": [approve(a), {**approve(b), "message": "why"}],
        "deny with remember": [approve(a), {**approve(b), "decision": "deny", "remember": True}],
    }
    for what, decisions in refusals.items():
        response = await decide(stack, waiting.id, *decisions)
        assert response.status_code == 400, (what, response.text)
        assert response.json()["error"]["code"] == "invalid_tool_approvals", what
    missing = await decide(stack, waiting.id, approve(a))
    assert missing.json()["error"]["detail"] == {"expected": [a, b], "received": [a]}
    malformed = await decide(stack, waiting.id, {**approve(a), "colour": "blue"}, approve(b))
    assert malformed.status_code == 400 and "error" in malformed.json()

    first = await decide(stack, waiting.id, approve(b), {**approve(a), "decision": "deny"})
    assert first.status_code == 202, first.text
    second = await decide(stack, waiting.id, approve(a), approve(b))
    assert second.status_code == 409
    assert second.headers["x-should-retry"] == "false"
    assert second.json()["error"]["code"] == "not_awaiting_tool_approvals"
    assert second.json()["error"]["detail"]["status"] in {"requires_action", "running", "waiting"}

    await stack.wait_status(waiting.id, "waiting")
    assert not (waiting.workspace / "a.md").exists(), "the first submission denied it"
    assert (waiting.workspace / "b.md").read_text() == "B"
    decisions = (await stack.http.get(f"/chats/{waiting.id}/tool-decisions")).json()["decisions"]
    assert {d["tool_call_id"]: d["decision"] for d in decisions} == {a: "deny", b: "approve"}


async def test_an_expired_wait_answers_every_call_with_an_error_and_approved_calls_dont_run(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(
        stack,
        tmp_path,
        [write("a.md", "A"), FakeToolCall(name="ask_user", arguments={"question": "?"})],
        FakeResponse(parts=[FakeText(text="back")]),
        dynamic_tools=[ASK_USER],
        action_timeout_s=2,
    )
    [approval], [client] = waiting.ids("approval"), waiting.ids("client_tool")
    approved = await decide(stack, waiting.id, {"tool_call_id": approval, "decision": "approve"})
    assert approved.status_code == 202, approved.text
    await stack.wait_status(waiting.id, "error")

    chat = (await stack.http.get(f"/chats/{waiting.id}")).json()
    assert chat["last_error"]["kind"] == "timeout" and chat["pending_tool_calls"] is None
    results = tool_results(await stack.messages(waiting.id))
    for call_id in (approval, client):
        assert results[call_id]["is_error"] and "expired" in results[call_id]["output"]
    assert not (waiting.workspace / "a.md").exists(), "the wait ended before it could run"
    late = await decide(stack, waiting.id, {"tool_call_id": approval, "decision": "approve"})
    assert late.status_code == 409

    events = await stack.wait_status(waiting.id, "error")
    await stack.send(waiting.id, "still there?")
    await stack.wait_status(waiting.id, "waiting", after=events[-1].id or 0)
    sent = sent_results(stack, waiting.model, 1)
    assert set(sent) == {approval, client}, "the next request carries a result for every call"
    assert (await stack.messages(waiting.id))[-1]["parts"][0]["text"] == "back"


async def test_an_interrupt_during_the_wait_answers_the_calls_and_the_chat_goes_on(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(
        stack,
        tmp_path,
        [write("a.md", "A")],
        FakeResponse(parts=[FakeText(text="back")]),
    )
    [call_id] = waiting.ids("approval")
    response = await stack.http.post(f"/chats/{waiting.id}/interrupt")
    assert response.status_code == 202
    events = await stack.wait_status(waiting.id, "waiting")

    result = tool_results(await stack.messages(waiting.id))[call_id]
    assert result["is_error"] and result["output"] == INTERRUPTED_RESULT
    assert not (waiting.workspace / "a.md").exists()
    late = await decide(stack, waiting.id, {"tool_call_id": call_id, "decision": "approve"})
    assert late.status_code == 409 and late.json()["error"]["detail"]["status"] == "waiting"

    await stack.send(waiting.id, "still there?")
    await stack.wait_status(waiting.id, "waiting", after=events[-1].id or 0)
    assert set(sent_results(stack, waiting.model, 1)) == {call_id}
    assert (await stack.messages(waiting.id))[-1]["parts"][0]["text"] == "back"


def canonical_sha256(arguments: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of `arguments`, computed here independently."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def test_the_audit_lists_who_decided_what_with_the_digest_of_what_ran(
    stack: Stack, tmp_path: Path
) -> None:
    model_args = {"path": "b.md", "content": "from the model, é"}
    waiting = await waiting_chat(
        stack, tmp_path, [write("a.md", "A"), write(**model_args), write("c.md", "C")]
    )
    a, b, c = waiting.ids("approval")
    edited = {"path": "b.md", "content": "edited, ü"}
    started = datetime.now(UTC)
    response = await decide(
        stack,
        waiting.id,
        {"tool_call_id": a, "decision": "approve"},
        {"tool_call_id": b, "decision": "approve", "arguments": edited},
        {"tool_call_id": c, "decision": "deny", "message": "not c"},
    )
    assert response.status_code == 202, response.text
    await stack.wait_status(waiting.id, "waiting")

    audit = (await stack.http.get(f"/chats/{waiting.id}/tool-decisions")).json()
    print("\nAUDIT:\n" + json.dumps(audit, indent=2))
    key_id = await stack.pool.fetchval("SELECT id::text FROM api_keys WHERE owner = 'alice'")
    decisions = {d["tool_call_id"]: d for d in audit["decisions"]}
    # One submission's decisions share their time; the audit lists them by call id.
    assert list(decisions) == sorted([a, b, c]) and audit["has_more"] is False
    for decision in decisions.values():
        assert decision["key_id"] == key_id and decision["owner"] == "alice"
        assert decision["decided_by"] is None and decision["tool_name"] == "write_file"
        assert started <= datetime.fromisoformat(decision["decided_at"]) <= datetime.now(UTC)
    ran = {"a.md": "A", "b.md": "edited, ü"}
    assert {p.name: p.read_text() for p in waiting.workspace.iterdir()} == ran
    expected = {
        a: ("approve", {"path": "a.md", "content": "A"}, False, None),
        b: ("approve", edited, True, None),
        c: ("deny", {"path": "c.md", "content": "C"}, False, "not c"),
    }
    for call_id, (verdict, arguments, was_edited, message) in expected.items():
        decision = decisions[call_id]
        assert decision["decision"] == verdict and decision["edited"] is was_edited
        assert decision["arguments_sha256"] == canonical_sha256(arguments), call_id
        assert decision["message"] == message
    other = await stack.other_owner.get(f"/chats/{waiting.id}/tool-decisions")
    assert other.status_code == 404, "another owner's audit is not found"


async def test_an_update_sent_straight_to_temporal_records_decided_by(
    stack: Stack, tmp_path: Path, temporal_server: TemporalDevServer
) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("a.md", "A")])
    [call_id] = waiting.ids("approval")
    payload = json.dumps(
        {
            "decisions": [{"tool_call_id": call_id, "decision": "approve"}],
            "decided_by": "ops:carol via temporal CLI",
        }
    )
    command = [
        str(temporal_binary()),
        "workflow",
        "update",
        "execute",
        "--address",
        temporal_server.address,
        "--workflow-id",
        f"chat-{waiting.id}",
        "--name",
        "submit_tool_approvals",
        "--input",
        payload,
    ]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    await stack.wait_status(waiting.id, "waiting")

    assert (waiting.workspace / "a.md").read_text() == "A"
    [decision] = (await stack.http.get(f"/chats/{waiting.id}/tool-decisions")).json()["decisions"]
    assert decision["decided_by"] == "ops:carol via temporal CLI"
    assert decision["key_id"] is None and decision["owner"] is None


async def test_a_policy_patched_during_a_turn_applies_from_its_next_step(
    stack: Stack, tmp_path: Path
) -> None:
    waiting = await waiting_chat(
        stack,
        tmp_path,
        [FakeToolCall(name="ask_user", arguments={"question": "May I?"})],
        FakeResponse(parts=[write("a.md", "A")]),
        DONE,
        tool_policy={},
        dynamic_tools=[ASK_USER],
    )
    [client] = waiting.ids("client_tool")
    waited = await stack.wait_status(waiting.id, "requires_action")  # the client's wait
    patched = await stack.http.patch(
        f"/chats/{waiting.id}", json={"tool_policy": ASK_WRITE, "title": "Files"}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["tool_policy"] == ASK_WRITE and patched.json()["title"] == "Files"
    answered = await stack.http.post(
        f"/chats/{waiting.id}/tool-results",
        json={"results": [{"tool_call_id": client, "output": "yes"}]},
    )
    assert answered.status_code == 202, answered.text
    events = await stack.wait_status(waiting.id, "running", after=waited[-1].id or 0)
    events += await stack.wait_status(waiting.id, "requires_action", after=events[-1].id or 0)

    asked = (await stack.http.get(f"/chats/{waiting.id}")).json()
    [pending] = asked["pending_tool_calls"]
    assert pending["action"] == "approval" and pending["name"] == "write_file"
    assert not (waiting.workspace / "a.md").exists()
    response = await decide(
        stack, waiting.id, {"tool_call_id": pending["id"], "decision": "approve"}
    )
    assert response.status_code == 202, response.text
    await stack.wait_status(waiting.id, "waiting", after=events[-1].id or 0)
    assert (waiting.workspace / "a.md").read_text() == "A"
    chat = (await stack.http.get(f"/chats/{waiting.id}")).json()
    assert chat["title"] == "Files" and chat["tool_policy"] == ASK_WRITE


@pytest.mark.parametrize(
    "body",
    [
        {"tool_policy": {"write file!": "ask"}},
        {"tool_policy": {"write_file": "maybe"}},
        {"tool_policy": {"": "ask"}},
        {"tool_policy": {"[abc]": "deny"}},
        {"tool_policy": ["write_file"]},
        {"title": ""},
        {},
        {"colour": "blue"},
    ],
    ids=[
        "bad key",
        "bad value",
        "empty key",
        "bracket glob",
        "not a map",
        "empty title",
        "nothing",
        "unknown field",
    ],
)
async def test_a_bad_patch_is_a_400_and_changes_nothing(stack: Stack, body: dict[str, Any]) -> None:
    chat = await stack.create_chat(tool_policy=ASK_WRITE, title="Kept")
    response = await stack.http.patch(f"/chats/{chat['id']}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"]
    after = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert after["tool_policy"] == ASK_WRITE and after["title"] == "Kept"
    other = await stack.other_owner.patch(f"/chats/{chat['id']}", json={"title": "Mine"})
    assert other.status_code == 404


async def test_of_two_submissions_at_once_exactly_one_wins(stack: Stack, tmp_path: Path) -> None:
    waiting = await waiting_chat(stack, tmp_path, [write("a.md", "A")])
    [call_id] = waiting.ids("approval")
    approve = decide(stack, waiting.id, {"tool_call_id": call_id, "decision": "approve"})
    deny = decide(stack, waiting.id, {"tool_call_id": call_id, "decision": "deny", "message": "no"})
    approved, denied = await asyncio.gather(approve, deny)
    assert sorted([approved.status_code, denied.status_code]) == [202, 409]
    await stack.wait_status(waiting.id, "waiting")

    won = "approve" if approved.status_code == 202 else "deny"
    [decision] = (await stack.http.get(f"/chats/{waiting.id}/tool-decisions")).json()["decisions"]
    assert decision["decision"] == won
    assert (waiting.workspace / "a.md").exists() == (won == "approve")
    result = tool_results(await stack.messages(waiting.id))[call_id]
    assert result.get("is_error", False) == (won == "deny")


async def test_approving_the_models_own_arguments_is_not_an_edit(
    stack: Stack, tmp_path: Path
) -> None:
    model_args = {"path": "a.md", "content": "A"}
    waiting = await waiting_chat(stack, tmp_path, [write(**model_args)])
    [call_id] = waiting.ids("approval")
    same = {"content": "A", "path": "a.md"}  # other key order: the same arguments
    response = await decide(
        stack, waiting.id, {"tool_call_id": call_id, "decision": "approve", "arguments": same}
    )
    assert response.status_code == 202, response.text
    await stack.wait_status(waiting.id, "waiting")

    [decision] = (await stack.http.get(f"/chats/{waiting.id}/tool-decisions")).json()["decisions"]
    assert decision["edited"] is False
    assert decision["arguments_sha256"] == canonical_sha256(model_args)
    call = tool_calls(await stack.messages(waiting.id))[call_id]
    assert json.loads(call["arguments"]) == model_args and call["original_arguments"] is None
