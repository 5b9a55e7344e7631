"""Client libraries as their docs configure them against `/v1`: LangChain (`langchain-openai`,
`use_responses_api=True`), pydantic-ai (`OpenAIResponsesModel`), LlamaIndex
(`OpenAIResponses`, in its own venv: it pins `openai<3`) and the Vercel AI SDK's
`generateObject`. Each runs a tool loop, structured output, or a continuation; the requests
they send are recorded, so a failure names the request that caused it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from harness import Stack
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, ModelResponse, NativeOutput, ThinkingPart
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

from chatd.fake_provider.script import FakeReasoning, FakeResponse, FakeText, FakeToolCall

TESTS = Path(__file__).parents[1]
CLIENTS = TESTS / "clients"
VERCEL_CLIENT = TESTS / "js" / "vercel_ai"
LLAMAINDEX_PYTHON = CLIENTS / ".venv" / "bin" / "python"
LLAMAINDEX_SETUP = (
    "python3 -m venv tests/clients/.venv && tests/clients/.venv/bin/pip install "
    "-r tests/clients/llamaindex-requirements.txt"
)


class Forecast(BaseModel):
    """The structured answer the clients ask for."""

    city: str
    celsius: int
    sunny: bool


class Sent:
    """An HTTP client for a client library, and the JSON bodies it sent, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.http = httpx2.AsyncClient(event_hooks={"request": [self._record]}, timeout=30)

    async def _record(self, request: httpx2.Request) -> None:
        if request.method == "POST" and request.content:
            self.bodies.append(json.loads(request.content))


@pytest.fixture
async def sent() -> AsyncIterator[Sent]:
    recorder = Sent()
    yield recorder
    await recorder.http.aclose()


def _v1(stack: Stack) -> str:
    return f"{stack.base_url.removesuffix('/api/v1')}/v1"


def _weather_model(stack: Stack, city: str = "Oslo") -> str:
    """A fake model calling `get_weather` once, then answering with its result."""
    scripted = stack.scripted_model(
        FakeResponse(parts=[FakeToolCall(name="get_weather", arguments={"city": city})]),
        FakeResponse(parts=[FakeText(text=f"It is sunny in {city}.")]),
    )
    return scripted["name"]


def _tool_results(stack: Stack, name: str) -> list[Any]:
    """The tool results the fake provider's last request carried."""
    last = stack.fake.requests(name)[-1].body["messages"]
    results = [b["content"] for m in last for b in m["content"] if b.get("type") == "tool_result"]
    return [r if isinstance(r, str) else r[0]["text"] for r in results]


# LangChain


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _chat_openai(stack: Stack, model: str, sent: Sent, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model=model,
        base_url=_v1(stack),
        api_key=stack.key,
        use_responses_api=True,
        max_retries=0,
        http_async_client=sent.http,
        **options,
    )


@pytest.mark.parametrize("chained", [False, True], ids=["whole-conversation", "previous-id"])
async def test_langchain_bind_tools_runs_a_tool_loop(
    stack: Stack, sent: Sent, chained: bool
) -> None:
    """`bind_tools`, the tool run by hand as LangChain's docs show, then the answer; with
    `use_previous_response_id` the second call sends only the tool's result."""
    name = _weather_model(stack)
    llm = _chat_openai(stack, f"anthropic/{name}", sent, use_previous_response_id=chained)
    with_tools = llm.bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage("What is the weather in Oslo?")]
    ai = await with_tools.ainvoke(messages)
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather", sent.bodies
    messages += [
        ai,
        ToolMessage(
            get_weather.invoke(ai.tool_calls[0]["args"]), tool_call_id=ai.tool_calls[0]["id"]
        ),
    ]
    answer = await with_tools.ainvoke(messages)
    assert answer.text == "It is sunny in Oslo.", sent.bodies
    assert _tool_results(stack, name) == ["sunny in Oslo"]
    second = sent.bodies[1]
    if chained:
        assert second["previous_response_id"] == ai.response_metadata["id"]
        assert [i["type"] for i in second["input"]] == ["function_call_output"]


async def test_langchain_with_structured_output_gets_the_model(stack: Stack, sent: Sent) -> None:
    """`with_structured_output(Model)`: json_schema, LangChain's default on the Responses API."""
    llm = _chat_openai(stack, "demo/demo", sent)
    try:
        forecast = await llm.with_structured_output(Forecast).ainvoke("the weather in Lyon")
    except ValueError as failed:  # say what was asked and what the model was sent
        asked = [r.body for r in stack.fake.requests("demo")][-2:]
        raise AssertionError(f"{failed}\nsent: {sent.bodies}\nthe demo got: {asked}") from failed
    assert isinstance(forecast, Forecast), sent.bodies
    assert sent.bodies[0]["text"]["format"]["type"] == "json_schema"


# pydantic-ai

THINKING = OpenAIModelProfile(
    supports_thinking=True,
    openai_supports_reasoning=True,
    openai_supports_encrypted_reasoning_content=True,
)
"""What pydantic-ai knows of OpenAI's reasoning models, for a model name it doesn't know."""


def _pydantic_ai_model(
    stack: Stack, model: str, sent: Sent, profile: OpenAIModelProfile | None = None
) -> OpenAIResponsesModel:
    client = AsyncOpenAI(
        base_url=_v1(stack), api_key=stack.key, http_client=sent.http, max_retries=0
    )
    return OpenAIResponsesModel(
        model, provider=OpenAIProvider(openai_client=client), profile=profile
    )


async def test_pydantic_ai_runs_an_agent_with_a_tool(stack: Stack, sent: Sent) -> None:
    name = _weather_model(stack, "Rome")
    agent = Agent(_pydantic_ai_model(stack, f"anthropic/{name}", sent))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    result = await agent.run("What is the weather in Rome?")
    assert result.output == "It is sunny in Rome.", sent.bodies
    assert _tool_results(stack, name) == ["sunny in Rome"]


async def test_pydantic_ai_native_output_gets_the_model(stack: Stack, sent: Sent) -> None:
    """`output_type=NativeOutput(Model)`: `text.format` json_schema, answered by the demo."""
    agent = Agent(_pydantic_ai_model(stack, "demo/demo", sent), output_type=NativeOutput(Forecast))
    result = await agent.run("the weather in Lyon")
    assert isinstance(result.output, Forecast), sent.bodies
    assert sent.bodies[0]["text"]["format"]["type"] == "json_schema"


async def test_pydantic_ai_replays_a_thinking_model_s_reasoning(stack: Stack, sent: Sent) -> None:
    """A second run with the first's `message_history` and `store: false`: pydantic-ai sends
    the reasoning item back with its `encrypted_content`, and Anthropic gets its signed
    thinking block again."""
    name = stack.scripted_model(
        FakeResponse(
            parts=[FakeReasoning(text="Add them.", signature="sig-1"), FakeText(text="4")]
        ),
        FakeResponse(parts=[FakeText(text="5")]),
    )["name"]
    settings = OpenAIResponsesModelSettings(
        openai_reasoning_effort="low", openai_reasoning_summary="auto", openai_store=False
    )
    model = _pydantic_ai_model(stack, f"anthropic/{name}", sent, THINKING)
    agent = Agent(model, model_settings=settings)
    first = await agent.run("2+2?")
    thinking = [p for m in first.all_messages() if isinstance(m, ModelResponse) for p in m.parts]
    assert isinstance(thinking[0], ThinkingPart) and thinking[0].content == "Add them."
    second = await agent.run("and 2+3?", message_history=first.all_messages())
    assert second.output == "5"
    replayed = sent.bodies[1]["input"][1]
    assert replayed["type"] == "reasoning" and replayed["encrypted_content"], sent.bodies[1]
    messages = stack.fake.requests(name)[1].body["messages"]
    assert messages[1]["content"][0] == {
        "type": "thinking",
        "thinking": "Add them.",
        "signature": "sig-1",
    }, messages


# LlamaIndex, in its own venv


@pytest.mark.slow
async def test_llamaindex_openai_responses_chats_and_runs_a_tool(stack: Stack) -> None:
    """Two chained chat calls (`track_previous_responses`), then a tool loop with the whole
    conversation and `store: false`, LlamaIndex's defaults. It sends every optional field,
    unset ones as null (`metadata: null`, `include: null`), which mean their defaults."""
    if not LLAMAINDEX_PYTHON.exists():
        message = f"LlamaIndex's venv is missing; make it as .ci/run does: {LLAMAINDEX_SETUP}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    chat = stack.scripted_model(
        FakeResponse(parts=[FakeText(text="Hello.")]),
        FakeResponse(parts=[FakeText(text="Hello again.")]),
    )["name"]
    weather = _weather_model(stack)
    env = {
        **os.environ,
        "CHATD_BASE_URL": _v1(stack),
        "CHATD_API_KEY": stack.key,
        "CHATD_CHAT_MODEL": f"anthropic/{chat}",
        "CHATD_TOOL_MODEL": f"anthropic/{weather}",
    }
    output = await _run([str(LLAMAINDEX_PYTHON), str(CLIENTS / "llamaindex_responses.py")], env)
    result = json.loads(output.strip().splitlines()[-1])
    sent = result["requests"]
    assert "error" not in result, f"{result['error']}\nsent: {json.dumps(sent)}"
    assert result["chat"] == ["Hello.", "Hello again."]
    assert sent[1]["previous_response_id"], "the second call continued the first"
    assert result["tools"] == {"calls": ["get_weather"], "answer": "It is sunny in Oslo."}
    assert _tool_results(stack, weather) == ["sunny in Oslo"]
    assert [m["role"] for m in stack.fake.requests(chat)[1].body["messages"]] == [
        "user",
        "assistant",
        "user",
    ]


async def _run(command: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    output, errors = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode == 0, f"{' '.join(command)} failed:\n{errors.decode()}"
    return output.decode()


# The Vercel AI SDK (node)


@pytest.mark.slow
async def test_the_vercel_ai_sdk_generates_an_object_with_a_zod_schema(stack: Stack) -> None:
    """`generateObject` and `generateText` with `Output.object` against the demo model,
    which answers JSON fitting the schema it is sent."""
    assert shutil.which("node") and shutil.which("npm"), "node >= 20 and npm are needed"
    if not (VERCEL_CLIENT / "node_modules" / "ai").is_dir():
        await _run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            {**os.environ},
            VERCEL_CLIENT,
        )
    env = {
        **os.environ,
        "CHATD_BASE_URL": _v1(stack),
        "CHATD_API_KEY": stack.key,
        "CHATD_MODEL": "demo/demo",
    }
    output = await _run(["node", "generate_object.mjs"], env, VERCEL_CLIENT)
    result = json.loads(output.strip().splitlines()[-1])
    sent = result["requests"]
    assert "error" not in result, f"{result['error']}\nsent: {json.dumps(sent)}"
    for answer in (result["object"], result["output"]):
        assert set(answer) == {"city", "celsius", "sunny", "hours"}, result
    assert result["finishReason"] == "stop"
    assert [body["text"]["format"]["type"] for body in sent] == ["json_schema", "json_schema"]
