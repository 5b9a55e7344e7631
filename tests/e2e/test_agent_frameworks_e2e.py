"""Agent frameworks as clients, unchanged: the OpenAI Agents SDK (`openai-agents`) and the
Vercel AI SDK (`ai` with `@ai-sdk/openai`, run by node) drive `/v1/responses` with their own
loops. The tools run in the framework; between its calls, our turn waits durably for their
results (`requires_action`), and the whole run is one chat."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ItemHelpers,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from harness import Stack
from openai import AsyncOpenAI

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

VERCEL_CLIENT = Path(__file__).parent.parent / "js" / "vercel_ai"

set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@function_tool
def get_time(city: str) -> str:
    """The local time in a city."""
    return f"noon in {city}"


def _script(stack: Stack) -> str:
    """A model that calls both tools, one step each, then answers with their results."""
    scripted = stack.scripted_model(
        FakeResponse(parts=[FakeToolCall(name="get_weather", arguments={"city": "Oslo"})]),
        FakeResponse(parts=[FakeToolCall(name="get_time", arguments={"city": "Oslo"})]),
        FakeResponse(parts=[FakeText(text="Sunny, and it is noon.", chunk_size=5)]),
    )
    return scripted["name"]


def _client(stack: Stack) -> AsyncOpenAI:
    root = stack.base_url.removesuffix("/api/v1")
    return AsyncOpenAI(base_url=f"{root}/v1", api_key=stack.key, max_retries=0)


def _agent(client: AsyncOpenAI, name: str) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions="Answer with the tools' results.",
        tools=[get_weather, get_time],
        model=OpenAIResponsesModel(model=f"anthropic/{name}", openai_client=client),
    )


async def _one_chat_ran_both_tools(stack: Stack, name: str) -> None:
    """The run was one chat whose turn waited for each tool's result in turn."""
    requests = stack.fake.requests(name)
    assert len(requests) == 3, "one model step per call, then the answer"
    last = requests[-1].body["messages"]
    results = [b for m in last for b in m["content"] if b.get("type") == "tool_result"]
    outputs = [
        r["content"] if isinstance(r["content"], str) else r["content"][0]["text"] for r in results
    ]
    assert outputs == ["sunny in Oslo", "noon in Oslo"]
    chat_ids = await stack.pool.fetch(
        "SELECT DISTINCT chat_id FROM responses WHERE request->>'model' = $1", f"anthropic/{name}"
    )
    assert len(chat_ids) == 1, "every call of the run continued the same chat"
    statuses = await stack.pool.fetch(
        "SELECT ended_status FROM responses WHERE chat_id = $1 ORDER BY created_at",
        chat_ids[0]["chat_id"],
    )
    assert [r["ended_status"] for r in statuses] == [
        "requires_action",
        "requires_action",
        "waiting",
    ]


@pytest.mark.parametrize("chained", [False, True], ids=["whole-conversation", "previous-id"])
async def test_the_agents_sdk_runs_an_agent_with_two_tools_to_its_final_output(
    stack: Stack, chained: bool
) -> None:
    name = _script(stack)
    async with _client(stack) as client:
        result = await Runner.run(
            _agent(client, name), "Weather and time in Oslo?", auto_previous_response_id=chained
        )
    assert result.final_output == "Sunny, and it is noon."
    await _one_chat_ran_both_tools(stack, name)


async def test_the_agents_sdk_streams_an_agent_run(stack: Stack) -> None:
    name = _script(stack)
    deltas: list[str] = []
    tool_outputs: list[str] = []
    async with _client(stack) as client:
        run = Runner.run_streamed(_agent(client, name), "Weather and time in Oslo?")
        async for event in run.stream_events():
            if (
                event.type == "raw_response_event"
                and event.data.type == "response.output_text.delta"
            ):
                deltas.append(event.data.delta)
            elif (
                event.type == "run_item_stream_event" and event.item.type == "tool_call_output_item"
            ):
                tool_outputs.append(str(event.item.output))
    assert "".join(deltas) == "Sunny, and it is noon." == run.final_output
    assert tool_outputs == ["sunny in Oslo", "noon in Oslo"]
    assert ItemHelpers.text_message_outputs(run.new_items) == "Sunny, and it is noon."
    await _one_chat_ran_both_tools(stack, name)


@pytest.mark.slow
async def test_the_vercel_ai_sdk_streams_text_with_a_tool_to_completion(
    stack: Stack,
) -> None:
    """`streamText` with one tool and up to five steps, by node: the SDK sends the whole
    conversation each step, and the step with the tool's result continues the waiting chat."""
    assert shutil.which("node") and shutil.which("npm"), "node >= 20 and npm are needed"
    if not (VERCEL_CLIENT / "node_modules" / "ai").is_dir():
        await _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], VERCEL_CLIENT)
    scripted = stack.scripted_model(
        FakeResponse(parts=[FakeToolCall(name="get_weather", arguments={"city": "Paris"})]),
        FakeResponse(parts=[FakeText(text="It is sunny in Paris.", chunk_size=4)]),
    )
    root = stack.base_url.removesuffix("/api/v1")
    env = {
        **os.environ,
        "CHATD_BASE_URL": f"{root}/v1",
        "CHATD_API_KEY": stack.key,
        "CHATD_MODEL": f"anthropic/{scripted['name']}",
    }
    output = await _run(["node", "stream_text.mjs"], VERCEL_CLIENT, env)
    result = json.loads(output.strip().splitlines()[-1])
    assert result["text"] == "It is sunny in Paris."
    assert result["deltas"] == "It is sunny in Paris.", "the text streamed"
    assert result["toolResults"] == [{"city": "Paris", "forecast": "sunny"}]
    assert result["finishReason"] == "stop" and result["errors"] == []
    last = stack.fake.requests(scripted["name"])[-1].body["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"], "one chat, with the result"


async def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), 300)
    text = output.decode(errors="replace")
    assert process.returncode == 0, f"{' '.join(command)} failed:\n{text}"
    return text
