"""LlamaIndex's `OpenAIResponses` against chatd's `/v1`, run in its own venv
(`.venv-llamaindex`: `llama-index-llms-openai` pins `openai<3`, this project needs 3.x) by
tests/e2e/test_client_matrix_e2e.py. Prints one JSON line: what each call gave and the
request bodies sent. Env: CHATD_BASE_URL (http://HOST:PORT/v1), CHATD_API_KEY,
CHATD_CHAT_MODEL (answers twice), CHATD_TOOL_MODEL (calls get_weather, then answers)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
from llama_index.core.llms import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAIResponses


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _llm(model: str, http: httpx.AsyncClient, **options: Any) -> OpenAIResponses:
    # A model name LlamaIndex doesn't know needs its context window.
    return OpenAIResponses(
        model=model,
        api_base=os.environ["CHATD_BASE_URL"],
        api_key=os.environ["CHATD_API_KEY"],
        context_window=200_000,
        max_retries=0,
        async_http_client=http,
        **options,
    )


async def _chat(http: httpx.AsyncClient) -> list[str]:
    """Two turns, LlamaIndex keeping the chain (`track_previous_responses`)."""
    llm = _llm(os.environ["CHATD_CHAT_MODEL"], http, track_previous_responses=True)
    first = await llm.achat([ChatMessage(role="user", content="Say hello.")])
    second = await llm.achat([ChatMessage(role="user", content="Again.")])
    return [str(first.message.content), str(second.message.content)]


async def _tool_loop(http: httpx.AsyncClient) -> dict[str, Any]:
    """`achat_with_tools`, the tool run by hand, then the answer (the whole conversation,
    `store: false`, LlamaIndex's defaults)."""
    llm = _llm(os.environ["CHATD_TOOL_MODEL"], http)
    weather = FunctionTool.from_defaults(fn=get_weather)
    question = ChatMessage(role="user", content="What is the weather in Oslo?")
    response = await llm.achat_with_tools([weather], chat_history=[question])
    calls = llm.get_tool_calls_from_response(response)
    history = [question, response.message]
    for call in calls:
        output = weather.call(**call.tool_kwargs)
        history.append(
            ChatMessage(
                role="tool", content=str(output), additional_kwargs={"call_id": call.tool_id}
            )
        )
    answer = await llm.achat_with_tools([weather], chat_history=history)
    return {"calls": [c.tool_name for c in calls], "answer": str(answer.message.content)}


async def main() -> None:
    bodies: list[Any] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST" and request.content:
            bodies.append(json.loads(request.content))

    result: dict[str, Any] = {}
    async with httpx.AsyncClient(event_hooks={"request": [record]}, timeout=30) as http:
        try:
            result["chat"] = await _chat(http)
            result["tools"] = await _tool_loop(http)
        except Exception as error:  # reported with the requests that led to it
            result["error"] = f"{type(error).__name__}: {error}"
    print(json.dumps({**result, "requests": bodies}))


if __name__ == "__main__":
    asyncio.run(main())
