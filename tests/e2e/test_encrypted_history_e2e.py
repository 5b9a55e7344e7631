"""Encrypted history: with CHATD_CODEC_KEYS set, a turn's raw Temporal history holds no chat
content; `temporal workflow show` through `chatd codec-server` reads it again. Client tool
results never enter a history at all, codec or not.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import AsyncIterator

import httpx
import pytest
from harness import Stack, StackFactory
from temporalio.client import Client

from chatd.codec import CodecKeys, new_key
from chatd.codec_server import CodecServerConfig, codec_app
from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer, temporal_binary
from chatd.fake_provider.script import FakeError, FakeResponse, FakeText, FakeToolCall
from chatd.serving import EmbeddedServer
from workflows.constants import workflow_id

ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}
TOKEN = "codec-server-token-e2e-0123456789"
USER_TEXT = "canary-user-aubergine-7731"
TOOL_RESULT = "canary-tool-result-quince-4410"
PROVIDER_ERROR = "canary-provider-refusal-xylophone-9902"
ASSISTANT_TEXT = "canary-assistant-marmalade-5581"
CANARIES = (USER_TEXT, TOOL_RESULT, PROVIDER_ERROR, ASSISTANT_TEXT)
KEY_ID = "k-e2e"
KEYS = f"{KEY_ID}:{new_key()}"


async def _raw_history(address: str, chat_id: str) -> bytes:
    """Every run of the chat's workflow as stored, read by a client without the codec."""
    client = await Client.connect(address)
    handle = client.get_workflow_handle(workflow_id(chat_id))
    runs: list[bytes] = []
    while True:
        history = await handle.fetch_history()
        runs.append(b"".join(e.SerializeToString() for e in history.events))
        earlier = history.events[0].workflow_execution_started_event_attributes
        if not earlier.continued_execution_run_id:
            return b"".join(reversed(runs))
        handle = client.get_workflow_handle(
            workflow_id(chat_id), run_id=earlier.continued_execution_run_id
        )


def _payload_data(shown: str) -> bytes:
    """The data of every payload in `temporal workflow show --output json` (base64 there)."""
    data: list[bytes] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "metadata" in node and isinstance(node.get("data"), str):
                data.append(base64.b64decode(node["data"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(shown))
    return b"\n".join(data)


def _found(history: bytes, *canaries: str) -> set[str]:
    return {c for c in canaries if c.encode() in history}


async def _turn_that_asks_then_fails(stack: Stack) -> str:
    """A turn: the model writes, calls the client's tool, gets its result, then the provider
    refuses the next request (a non-retryable 400 whose message names the canary)."""
    model = stack.scripted_model(
        FakeResponse(
            parts=[
                FakeText(text=f"{ASSISTANT_TEXT}: let me ask."),
                FakeToolCall(name="ask_user", arguments={"question": "which one?"}),
            ]
        ),
        FakeResponse.of_error(
            FakeError(status=400, type="invalid_request_error", message=PROVIDER_ERROR)
        ),
    )
    chat = await stack.create_chat(model=model, dynamic_tools=[ASK_USER])
    await stack.send(chat["id"], USER_TEXT)
    await stack.wait_status(chat["id"], "requires_action")
    waiting = (await stack.http.get(f"/chats/{chat['id']}")).json()
    call_id = waiting["pending_tool_calls"][0]["id"]
    answered = await stack.http.post(
        f"/chats/{chat['id']}/tool-results",
        json={"results": [{"tool_call_id": call_id, "output": TOOL_RESULT}]},
    )
    assert answered.status_code == 202, answered.text
    await stack.wait_status(chat["id"], "error")
    ended = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert PROVIDER_ERROR in ended["last_error"]["message"]
    chat_id: str = chat["id"]
    return chat_id


@pytest.fixture
def encrypted(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every stack made in the test (its gateway's and worker's clients) encrypts with KEYS."""
    monkeypatch.setenv("CHATD_CODEC_KEYS", KEYS)
    return KEYS


@pytest.fixture
async def codec_server(encrypted: str) -> AsyncIterator[str]:
    """`chatd codec-server`'s app on a free port, with the test's keys; its URL."""
    config = CodecServerConfig(CodecKeys.parse(encrypted), TOKEN)
    port = free_port()
    server = EmbeddedServer(codec_app(config), "127.0.0.1", port)
    await server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.stop()


async def _workflow_show(
    address: str, chat_id: str, *codec: str
) -> subprocess.CompletedProcess[str]:
    command = [
        str(temporal_binary()),
        "workflow",
        "show",
        "--address",
        address,
        "--workflow-id",
        workflow_id(chat_id),
        "--output",
        "json",
        *codec,
    ]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)


async def test_client_tool_results_never_enter_the_history_even_unencrypted(
    make_stack: StackFactory, temporal_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHATD_CODEC_KEYS", raising=False)
    async with make_stack() as stack:
        chat_id = await _turn_that_asks_then_fails(stack)
        transcript = await stack.messages(chat_id)
    history = await _raw_history(temporal_server.address, chat_id)
    # The control: without the codec, the provider's message is in the history in clear.
    assert _found(history, *CANARIES) == {PROVIDER_ERROR}
    assert transcript[2]["parts"][0]["output"] == TOOL_RESULT, "staged by the gateway"


async def test_with_the_codec_the_history_holds_no_content_and_the_codec_server_reads_it(
    make_stack: StackFactory, temporal_server: TemporalDevServer, codec_server: str
) -> None:
    async with make_stack() as stack:
        chat_id = await _turn_that_asks_then_fails(stack)
    history = await _raw_history(temporal_server.address, chat_id)
    assert _found(history, *CANARIES) == set()
    assert KEY_ID.encode() in history, "payloads name their key"
    plain = await _workflow_show(temporal_server.address, chat_id)
    assert plain.returncode == 0, plain.stderr
    assert _found(_payload_data(plain.stdout), *CANARIES) == set()

    auth = ("--codec-endpoint", codec_server, "--codec-auth", f"Bearer {TOKEN}")
    shown = await _workflow_show(temporal_server.address, chat_id, *auth)
    assert shown.returncode == 0, shown.stderr
    assert _found(_payload_data(shown.stdout), *CANARIES) == {PROVIDER_ERROR}, (
        "decoded, the history has what it had before the codec: the provider's message; a"
        " client's result and the chat's messages are not in it at all (ids only)"
    )


async def test_the_codec_server_refuses_a_caller_without_the_token(codec_server: str) -> None:
    body = {"payloads": [{"metadata": {"encoding": "YmluYXJ5L2VuY3J5cHRlZA=="}, "data": ""}]}
    async with httpx.AsyncClient(base_url=codec_server) as http:
        missing = await http.post("/decode", json=body)
        wrong = await http.post(
            "/decode", json=body, headers={"Authorization": "Bearer not-the-token-at-all"}
        )
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert wrong.json()["error"]["code"] == "unauthorized"


async def test_a_rotated_key_decrypts_the_old_history_while_the_new_key_encrypts(
    make_stack: StackFactory, temporal_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = f"k-old:{new_key()}", f"k-new:{new_key()}"
    monkeypatch.setenv("CHATD_CODEC_KEYS", old)
    async with make_stack() as first:
        model = first.scripted_model(
            FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={"question": "?"})]),
            FakeResponse(parts=[FakeText(text=ASSISTANT_TEXT)]),
        )
        chat = await first.create_chat(model=model, dynamic_tools=[ASK_USER])
        await first.send(chat["id"], USER_TEXT)
        await first.wait_status(chat["id"], "requires_action")
    before = await _raw_history(temporal_server.address, chat["id"])
    # Rotation: the new key first, the old one kept. A new worker replays the waiting turn
    # from its history (old payloads), and what it adds is under the new key.
    monkeypatch.setenv("CHATD_CODEC_KEYS", f"{new},{old}")
    async with make_stack(task_queue=first.task_queue) as second:
        second.http.headers["Authorization"] = f"Bearer {first.key}"
        waiting = (await second.http.get(f"/chats/{chat['id']}")).json()
        call_id = waiting["pending_tool_calls"][0]["id"]
        answered = await second.http.post(
            f"/chats/{chat['id']}/tool-results",
            json={"results": [{"tool_call_id": call_id, "output": TOOL_RESULT}]},
        )
        assert answered.status_code == 202, answered.text
        await second.wait_status(chat["id"], "waiting")
        messages = await second.messages(chat["id"])
    assert messages[-1]["parts"][0]["text"] == ASSISTANT_TEXT
    after = await _raw_history(temporal_server.address, chat["id"])
    assert b"k-old" in before and b"k-new" not in before
    assert b"k-new" in after[len(before) :]
    assert _found(after, *CANARIES) == set()
