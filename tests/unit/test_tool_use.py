"""How the model may call tools (`chatd.tool_use`), as each provider adapter sends it."""

from __future__ import annotations

from typing import Any

import pytest

from chatd.models import ModelConfig, WebSearchConfig
from chatd.parts import Message, TextPart
from chatd.providers.anthropic import build_anthropic_request
from chatd.providers.base import ModelRequest, ToolSpec
from chatd.providers.openai_chat import build_chat_request
from chatd.providers.openai_responses import build_responses_request
from chatd.tool_use import ToolUse

TOOLS = [
    ToolSpec(name=name, description=name, input_schema={"type": "object"})
    for name in ("lookup", "send_email")
]
HELLO = [Message(role="user", parts=[TextPart(text="hi")])]


def _request(use: ToolUse, tools: list[ToolSpec] = TOOLS, **model: Any) -> ModelRequest:
    config = ModelConfig(provider="anthropic", name="m", **model)
    return ModelRequest(model=config, messages=HELLO, tools=use.offered(tools), tool_use=use)


def test_a_forced_choice_binds_only_the_step_that_opens_a_response() -> None:
    use = ToolUse(mode="required", only=["lookup"], parallel=False)
    assert use.for_step(opens_response=True) == use
    later = use.for_step(opens_response=False)
    assert (later.mode, later.only, later.parallel) == ("auto", ["lookup"], False)
    none = ToolUse(mode="none")
    assert none.for_step(opens_response=False) == none, "none binds every step"


def test_only_the_allowed_tools_are_shown_in_the_chats_order() -> None:
    assert [t.name for t in ToolUse(only=["send_email", "gone"]).offered(TOOLS)] == ["send_email"]
    assert ToolUse().offered(TOOLS) == TOOLS


@pytest.mark.parametrize(
    ("use", "anthropic", "openai"),
    [
        (ToolUse(), None, {}),
        (ToolUse(mode="required"), {"type": "any"}, {"tool_choice": "required"}),
        (ToolUse(mode="none"), {"type": "none"}, {"tool_choice": "none"}),
        (
            ToolUse(parallel=False),
            {"type": "auto", "disable_parallel_tool_use": True},
            {"parallel_tool_calls": False},
        ),
        (
            ToolUse(mode="required", only=["lookup"], parallel=False),
            {"type": "any", "disable_parallel_tool_use": True},
            {"tool_choice": "required", "parallel_tool_calls": False},
        ),
    ],
    ids=["auto", "required", "none", "one-at-a-time", "named-one-at-a-time"],
)
def test_each_adapter_sends_the_tool_choice_in_its_own_words(
    use: ToolUse, anthropic: dict[str, Any] | None, openai: dict[str, Any]
) -> None:
    claude = build_anthropic_request(_request(use))
    assert claude.get("tool_choice") == anthropic
    assert [t["name"] for t in claude["tools"]] == [t.name for t in use.offered(TOOLS)]
    for build in (build_chat_request, build_responses_request):
        kwargs = build(_request(use))
        sent = {k: kwargs[k] for k in ("tool_choice", "parallel_tool_calls") if k in kwargs}
        assert sent == openai, build.__name__


def test_no_tool_choice_is_sent_without_tools() -> None:
    """The APIs refuse a tool choice beside no tools (the fake provider checks it too)."""
    use = ToolUse(mode="required", parallel=False)
    for build in (build_anthropic_request, build_chat_request, build_responses_request):
        kwargs = build(_request(use, tools=[]))
        assert not {"tools", "tool_choice", "parallel_tool_calls"} & kwargs.keys()


def test_a_forced_step_does_not_think_on_anthropic() -> None:
    """Anthropic refuses thinking with a forced tool choice: that step goes without."""
    forced = build_anthropic_request(
        _request(ToolUse(mode="required"), thinking_budget_tokens=2048)
    )
    assert "thinking" not in forced
    free = build_anthropic_request(_request(ToolUse(), thinking_budget_tokens=2048))
    assert free["thinking"]["budget_tokens"] == 2048


def test_web_search_is_a_tool_an_allowed_list_can_leave_out() -> None:
    search = WebSearchConfig()
    for only, shown in ((None, True), (["lookup"], False), (["web_search"], True)):
        use = ToolUse(only=only)
        claude = build_anthropic_request(_request(use, web_search=search))
        names = [t["name"] for t in claude.get("tools", [])]
        assert ("web_search" in names) is shown, only
        config = ModelConfig(provider="openai", name="m", openai_api="responses", web_search=search)
        request = ModelRequest(model=config, messages=HELLO, tools=use.offered(TOOLS), tool_use=use)
        kinds = [t["type"] for t in build_responses_request(request).get("tools", [])]
        assert ("web_search" in kinds) is shown, only
