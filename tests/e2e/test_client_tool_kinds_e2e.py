"""The tools real clients send beside functions: a `namespace` of functions, `custom` tools
with freeform input, `local_shell`, web search with its options; hosted tools are refused
by name. Each round-trips in the client's own item kinds."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from harness import Stack

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

SPAWN = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents",
    "tools": [
        {
            "type": "function",
            "name": "spawn",
            "description": "Start a sub-agent",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
        }
    ],
}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}


def _scripted(stack: Stack, *responses: FakeResponse) -> tuple[str, str]:
    name = stack.scripted_model(*responses)["name"]
    return f"anthropic/{name}", name


def _call(name: str, arguments: dict[str, Any], call_id: str) -> FakeResponse:
    return FakeResponse(parts=[FakeToolCall(name=name, arguments=arguments, id=call_id)])


async def test_a_namespaced_function_is_called_back_in_the_client_s_terms(stack: Stack) -> None:
    model, name = _scripted(
        stack,
        _call("agents_spawn", {"task": "tests"}, "toolu_ns"),
        FakeResponse(parts=[FakeText(text="spawned")]),
    )
    async with stack.responses_client() as client:
        first = await client.responses.create(model=model, input="spawn one", tools=[SPAWN])
        call = first.output[0]
        assert call.type == "function_call"
        assert (call.name, call.namespace, call.arguments) == (
            "spawn",
            "agents",
            '{"task": "tests"}',
        )
        second = await client.responses.create(
            model=model,
            previous_response_id=first.id,
            tools=[SPAWN],
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "ok"}],
        )
    assert second.output_text == "spawned"
    offered = stack.fake.requests(name)[0].body["tools"]
    assert [t["name"] for t in offered] == ["agents_spawn"]


async def test_a_custom_tool_takes_freeform_input_and_its_output(stack: Stack) -> None:
    """A custom tool (Codex's `apply_patch`) is a function of one string to the model; the
    call streams as a `custom_tool_call`, and the client answers statelessly with the whole
    conversation and a `custom_tool_call_output`."""
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    model, name = _scripted(
        stack,
        _call("apply_patch", {"input": patch}, "toolu_patch"),
        FakeResponse(parts=[FakeText(text="patched")]),
    )
    root = stack.base_url.removesuffix("/api/v1")
    body = {"model": model, "input": "add a.txt", "tools": [PATCH], "stream": True, "store": False}
    events: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=root, headers={"Authorization": f"Bearer {stack.key}"}) as http,
        http.stream("POST", "/v1/responses", json=body, timeout=60) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line.removeprefix("data: ")))
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    assert done["input"] == patch
    item = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    assert item["type"] == "custom_tool_call" and item["input"] == patch
    assert item["name"] == "apply_patch"
    async with stack.responses_client() as client:
        second = await client.responses.create(
            model=model,
            tools=[PATCH],
            store=False,
            input=[
                {"role": "user", "content": "add a.txt"},
                {k: v for k, v in item.items() if k != "status"},
                {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "done"},
            ],
        )
    assert second.output_text == "patched"
    offered = stack.fake.requests(name)[0].body["tools"][0]
    assert offered["input_schema"]["required"] == ["input"]
    assert "lark" in offered["input_schema"]["properties"]["input"]["description"]
    replayed = stack.fake.requests(name)[1].body["messages"]
    assert replayed[1]["content"][0]["input"] == {"input": patch}
    assert replayed[2]["content"][0]["content"][0]["text"] == "done"


async def test_local_shell_calls_come_back_as_local_shell_call_items(stack: Stack) -> None:
    model, _ = _scripted(
        stack,
        _call("local_shell", {"command": ["ls", "-la"], "working_directory": "/tmp"}, "toolu_sh"),
        FakeResponse(parts=[FakeText(text="listed")]),
    )
    async with stack.responses_client() as client:
        first = await client.responses.create(
            model=model, input="list files", tools=[{"type": "local_shell"}]
        )
        call = first.output[0]
        assert call.type == "local_shell_call"
        assert call.action.command == ["ls", "-la"] and call.action.working_directory == "/tmp"
        second = await client.responses.create(
            model=model,
            previous_response_id=first.id,
            tools=[{"type": "local_shell"}],
            input=[{"type": "local_shell_call_output", "id": call.call_id, "output": "a.txt"}],
        )
    assert second.output_text == "listed"


@pytest.mark.parametrize("hosted", ["file_search", "code_interpreter", "image_generation"])
async def test_a_hosted_tool_is_refused_by_name(stack: Stack, hosted: str) -> None:
    async with stack.responses_client() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(
                model="demo/demo",
                input="hi",
                tools=[{"type": hosted}],  # type: ignore[list-item]
            )
    assert f"`{hosted}`" in refused.value.message, refused.value.message


async def test_web_search_options_reach_the_provider(stack: Stack) -> None:
    model, name = _scripted(stack, FakeResponse(parts=[FakeText(text="found")]))
    location = {"type": "approximate", "city": "Oslo", "country": "NO"}
    async with stack.responses_client() as client:
        response = await client.responses.create(
            model=model,
            input="news?",
            tools=[
                {
                    "type": "web_search",
                    "external_web_access": True,
                    "user_location": location,  # type: ignore[typeddict-item]
                    "search_context_size": "low",
                }
            ],
        )
    assert response.output_text == "found"
    search = next(
        t for t in stack.fake.requests(name)[0].body["tools"] if "web_search" in t["type"]
    )
    assert search["user_location"] == location
    assert "search_context_size" not in search, "OpenAI's option only"


async def test_codex_s_namespaces_and_an_image_result_go_through(stack: Stack) -> None:
    """Codex groups its sub-agent tools (named as the workers' are) in a namespace with long
    descriptions, and its MCP servers' tools in `mcp__<server>` namespaces; `view_image`
    answers with an image."""
    image = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
        "AAAABJRU5ErkJggg=="
    )
    model, name = _scripted(
        stack,
        _call("view_image", {"path": "a.png"}, "toolu_img"),
        FakeResponse(parts=[FakeText(text="a red dot")]),
    )
    spawn = {
        "type": "function",
        "name": "spawn_agent",
        "description": "Spawn a sub-agent. " * 320,
        "strict": False,
        "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
    }
    tools: list[Any] = [
        {
            "type": "function",
            "name": "view_image",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
         "tools": [spawn]},
        {"type": "namespace", "name": "mcp__echoer", "description": "", "tools": [
            {"type": "function", "name": "shout", "parameters": {"type": "object"}}]},
        {"type": "web_search", "external_web_access": False,
         "search_content_types": ["text", "image"]},
    ]  # fmt: skip
    async with stack.responses_client() as client:
        first = await client.responses.create(model=model, input="what is in a.png?", tools=tools)
        call = first.output[0]
        assert call.type == "function_call" and call.name == "view_image"
        second = await client.responses.create(
            model=model,
            previous_response_id=first.id,
            tools=tools,
            input=[
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": [
                        {"type": "input_image", "image_url": f"data:image/png;base64,{image}",
                         "detail": "high"},
                    ],
                }  # type: ignore[typeddict-item]
            ],
        )  # fmt: skip
    assert second.output_text == "a red dot"
    offered = [t["name"] for t in stack.fake.requests(name)[0].body["tools"]]
    assert "multi_agent_v1_spawn_agent" in offered and "mcp_echoer_shout" in offered
    result = stack.fake.requests(name)[1].body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"][-1]["type"] == "image", result
    assert result["content"][-1]["source"]["data"] == image
