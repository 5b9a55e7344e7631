"""The sandboxed execute tool end to end: a worker enabled the way an operator enables it
(environment variables), a model that tries to escape, and an owner off the allow-list."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Stack, StackFactory, sse_events
from support.names import model_name

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.tools.defaults import default_registry

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SECRET = f"sk-e2e-marker-{uuid.uuid4().hex}"
ESCAPE = (
    "id -u; cat /proc/*/environ; ls / ..; cat ../*/diary.txt; "
    "python3 -c 'import urllib.request as u; u.urlopen(\"{url}\", timeout=5)' || echo offline"
)


@pytest.fixture
async def execute_stack(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """A stack whose worker offers execute to alice only, and holds credentials."""
    monkeypatch.setenv("CHATD_ENABLE_EXECUTE", "1")
    monkeypatch.setenv("CHATD_EXECUTE_OWNERS", "alice")
    monkeypatch.delenv("CHATD_EXECUTE_UNSANDBOXED", raising=False)
    monkeypatch.delenv("CHATD_EXECUTE_NETWORK", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    async with make_stack(registry=default_registry()) as stack:
        yield stack


async def _execute_turn(http: httpx.AsyncClient, stack: Stack, command: str) -> dict[str, Any]:
    """One turn of `http`'s owner in which the model runs `command`; its tool result."""
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name="execute", arguments={"command": command})]),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    created = await http.post("/chats", json={"model": {"provider": "anthropic", "name": name}})
    assert created.status_code == 201, created.text
    chat_id = created.json()["id"]
    sent = await http.post(f"/chats/{chat_id}/messages", json={"content": "go"})
    assert sent.status_code == 202, sent.text
    await asyncio.wait_for(_until_waiting(http, chat_id), 60)
    response = await http.get(f"/chats/{chat_id}/messages")
    results = [p for m in response.json()["messages"] if m["role"] == "tool" for p in m["parts"]]
    assert len(results) == 1
    result: dict[str, Any] = results[0]
    return result


async def _until_waiting(http: httpx.AsyncClient, chat_id: str) -> None:
    async for event in sse_events(http, chat_id):
        if event.event == "status" and event.data["status"] == "waiting":
            return


async def test_a_model_cannot_escape_the_sandbox(execute_stack: Stack, tmp_path: Path) -> None:
    neighbour = tmp_path / "workspaces" / str(uuid.uuid4())
    neighbour.mkdir(parents=True)
    (neighbour / "diary.txt").write_text(f"their {SECRET}\n")
    # The gateway the worker can reach, as a model with network access could.
    command = ESCAPE.format(url=execute_stack.base_url)
    result = await _execute_turn(execute_stack.http, execute_stack, command)
    assert not result["is_error"], result
    output = result["output"]
    assert output["stdout"].startswith("65534\n")
    assert SECRET not in output["stdout"] + output["stderr"]
    assert "workspace" in output["stdout"] and neighbour.name not in output["stdout"]
    assert output["stdout"].endswith("offline\n")


async def test_an_owner_off_the_allow_list_gets_an_error_result(
    execute_stack: Stack, tmp_path: Path
) -> None:
    result = await _execute_turn(execute_stack.other_owner, execute_stack, "touch ran")
    assert result["is_error"]
    assert "not available to this chat's owner" in result["output"]
    assert not list((tmp_path / "workspaces").glob("*/ran"))
