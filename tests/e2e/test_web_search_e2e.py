"""Opt-in provider web search: kept in the assistant message in stream order, round-tripped."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeResponse, FakeSearchResult, FakeText, FakeWebSearch

SEARCH = FakeWebSearch(
    query="temporal durable execution",
    results=[
        FakeSearchResult(url="https://temporal.io/", title="Temporal"),
        FakeSearchResult(url="https://docs.temporal.io/", title="Docs"),
    ],
)
MODES = [
    {"provider": "anthropic"},
    {"provider": "openai", "openai_api": "responses"},
]


@pytest.mark.parametrize("mode", MODES, ids=["anthropic", "openai-responses"])
async def test_a_web_search_is_kept_in_order_and_sent_back_next_step(
    stack: Stack, mode: dict[str, Any]
) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeText(text="Searching."), SEARCH, FakeText(text="Found it.")]),
            FakeResponse(parts=[FakeText(text="As I said.")]),
        ],
    )
    model = {**mode, "name": name, "web_search": {"allowed_domains": ["temporal.io"]}}
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "what is temporal?")
    events = await stack.wait_status(chat["id"], "waiting")

    first = stack.fake.requests(name)[0].body
    assert any(t.get("type", "").startswith("web_search") for t in first["tools"])
    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant"], "never moved to a tool message"
    kinds = [(p["type"], p.get("provider_executed")) for p in messages[1]["parts"]]
    assert kinds[0] == ("text", None) and kinds[-1] == ("text", None)
    assert ("tool_call", True) in kinds and ("tool_result", True) in kinds
    assert kinds.index(("tool_call", True)) < kinds.index(("tool_result", True))
    sources = [
        e.data["part"]
        for e in events
        if e.event == "message_part" and e.data["part"]["type"] == "source"
    ]
    assert [s["part"]["url"] for s in sources] == [
        "https://temporal.io/",
        "https://docs.temporal.io/",
    ]

    await stack.send(chat["id"], "say it again")
    await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0)
    replay = str(stack.fake.requests(name)[1].body)
    expected = "server_tool_use" if mode["provider"] == "anthropic" else "web_search_call"
    assert expected in replay, "the search round-trips to the provider"
