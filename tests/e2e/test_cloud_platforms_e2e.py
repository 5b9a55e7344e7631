"""Chats on Claude through Bedrock and Vertex AI and on OpenAI through Azure, through the
whole stack: the worker's SDK clients for each platform against the fake provider's
platform URLs, a tool call and its answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeToolCall

CALL = FakeResponse(parts=[FakeToolCall(name="current_time", id="call_clock_1")])
ANSWER = FakeResponse.of_text("It is noon.")


@pytest.mark.parametrize(
    ("provider", "name", "extra"),
    [
        ("anthropic-bedrock", "us.anthropic.claude-sonnet-4-5-{}-v1:0", {}),
        ("anthropic-vertex", "claude-sonnet-4-5@{}", {}),
        ("azure-openai", "chat-deployment-{}", {}),
        ("azure-openai", "responses-deployment-{}", {"openai_api": "responses"}),
    ],
)
async def test_a_chat_on_a_cloud_platform_calls_a_tool_and_answers(
    stack: Stack, provider: str, name: str, extra: dict[str, Any]
) -> None:
    name = name.format(model_name())

    def respond(request: FakeRequest) -> FakeResponse:
        # By step (the tool's result names its call), so a retried attempt answers alike.
        return ANSWER if "call_clock_1" in json.dumps(request.body) else CALL

    stack.fake.script(name, respond)
    chat = await stack.create_chat(model={"provider": provider, "name": name, **extra})
    await stack.send(chat["id"], "what time is it?")
    await stack.wait_status(chat["id"], "waiting", within_s=60)

    view = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert view["last_error"] is None
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1]["parts"] == [{"type": "text", "text": "It is noon."}]
    assert len(stack.fake.requests(name)) == 2
