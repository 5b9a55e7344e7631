"""Clients that keep the conversation themselves (`store: false`, no `previous_response_id`):
reasoning items round-trip their sealed provider state, and a conversation that ends in
function results begins a turn though no chat waits on them."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from harness import Stack

from chatd.fake_provider.script import FakeReasoning, FakeResponse, FakeText, FakeToolCall

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
}


def _thinking_model(stack: Stack, *responses: FakeResponse) -> tuple[str, str]:
    name = stack.scripted_model(*responses)["name"]
    return f"anthropic/{name}", name


async def test_a_replayed_reasoning_item_restores_signed_thinking_for_tool_use(
    stack: Stack,
) -> None:
    """Anthropic tool use with thinking: the client replays the reasoning item with the
    function call and its output, and the next request carries the signed thinking block
    the real API requires (without it, the step could not think)."""
    model, name = _thinking_model(
        stack,
        FakeResponse(
            parts=[
                FakeReasoning(text="I should look it up.", signature="sig-original"),
                FakeToolCall(name="lookup", arguments={"word": "durable"}, id="toolu_1"),
            ]
        ),
        FakeResponse(parts=[FakeText(text="It means lasting.")]),
    )
    asked: dict[str, Any] = {
        "model": model,
        "tools": [LOOKUP],
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
    }
    question = {"role": "user", "content": "what does durable mean?"}
    async with stack.responses_client() as client:
        first = await client.responses.create(input=[question], **asked)
        assert first.status == "completed"
        reasoning, call = first.output[0], first.output[1]
        assert reasoning.type == "reasoning" and call.type == "function_call"
        assert reasoning.encrypted_content, "the provider state comes sealed"
        assert reasoning.summary[0].text == "I should look it up."
        assert "sig-original" not in reasoning.encrypted_content
        conversation = [
            question,
            reasoning.model_dump(exclude_none=True),
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "lasting"},
        ]
        second = await client.responses.create(input=conversation, **asked)
    assert second.status == "completed", second.error
    assert second.output_text == "It means lasting."
    sent = stack.fake.requests(name)[1].body
    assert sent.get("thinking", {}).get("type") == "enabled", "the step still thinks"
    replayed = sent["messages"][1]["content"][0]
    assert replayed == {
        "type": "thinking",
        "thinking": "I should look it up.",
        "signature": "sig-original",
    }, sent["messages"]
    assert sent["messages"][2]["content"][0]["type"] == "tool_result"


async def test_a_reasoning_item_this_deployment_cant_read_is_dropped(stack: Stack) -> None:
    model, name = _thinking_model(stack, FakeResponse(parts=[FakeText(text="fine")]))
    async with stack.responses_client() as client:
        response = await client.responses.create(
            model=model,
            store=False,
            input=[
                {"role": "user", "content": "hello"},
                {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-elsewhere"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "again"},
            ],
        )
    assert response.status == "completed" and response.output_text == "fine"
    messages = stack.fake.requests(name)[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert all(b["type"] == "text" for m in messages for b in m["content"])


async def test_a_whole_conversation_ending_in_results_no_chat_waits_on_begins_a_turn(
    stack: Stack,
) -> None:
    """LangChain, pydantic-ai and Codex send the whole conversation each call; results for
    calls no chat waits on (another gateway's chat, expired, or never made here) begin a
    turn from that history instead of a 400."""
    model, name = _thinking_model(stack, FakeResponse(parts=[FakeText(text="Sunny.")]))
    async with stack.responses_client() as client:
        response = await client.responses.create(
            model=model,
            tools=[LOOKUP],
            input=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "weather?"},
                {
                    "type": "web_search_call",
                    "id": "ws_1",
                    "status": "completed",
                    "action": {"type": "search", "query": "weather"},
                },
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sun"},
            ],
        )
        assert response.status == "completed" and response.output_text == "Sunny."
        assert [item.type for item in response.output] == ["message"]
        with pytest.raises(openai.BadRequestError) as orphan:
            await client.responses.create(
                model=model,
                input=[{"type": "function_call_output", "call_id": "c9", "output": "x"}],
            )
    assert orphan.value.code == "no_pending_calls"
    sent = stack.fake.requests(name)[0].body
    assert sent["system"][0]["text"] == "Be brief."
    roles = [(m["role"], [b["type"] for b in m["content"]]) for m in sent["messages"]]
    assert roles == [("user", ["text"]), ("assistant", ["tool_use"]), ("user", ["tool_result"])]
