"""A transcript that crossed providers (a fallback mid-turn) maps onto each API: tool calls and
results carry over, another provider's private data (thinking signatures, redacted thinking,
encrypted reasoning, server tool blocks) is left out, and the fake provider, which checks
what the real APIs check, accepts every request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatd.fake_provider.script import ApiName
from chatd.fake_provider.validation import InvalidRequest, validate
from chatd.models import ModelConfig
from chatd.parts import Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from chatd.providers.anthropic import build_anthropic_request
from chatd.providers.base import ModelRequest, ToolSpec
from chatd.providers.openai_chat import build_chat_request
from chatd.providers.openai_responses import build_responses_request

TOOL = ToolSpec(name="lookup", description="Look it up", input_schema={"type": "object"})
REDACTED = {"type": "redacted_thinking", "data": "opaque-anthropic"}
SERVER_CALL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
SERVER_RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
OPENAI_REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "think"}],
    "encrypted_content": "opaque-openai",
}
OPENAI_SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}}
PRIVATE = ("sig-anthropic", "opaque-anthropic", "opaque-openai", "srvtoolu_1", "ws_1")
"""What no other provider may receive."""


def _user(text: str) -> Message:
    return Message(role="user", parts=[TextPart(text=text)])


def _results(call_id: str) -> Message:
    return Message(
        role="tool",
        parts=[ToolResultPart(tool_call_id=call_id, name="lookup", output={"answer": 42})],
    )


def anthropic_step() -> list[Message]:
    """An Anthropic step: signed and redacted thinking, a web search, a tool call, its result."""
    parts = [
        ReasoningPart(text="hmm", signature="sig-anthropic"),
        ReasoningPart(provider_data=REDACTED),
        ToolCallPart(
            id="srvtoolu_1", name="web_search", provider_executed=True, provider_data=SERVER_CALL
        ),
        ToolResultPart(
            tool_call_id="srvtoolu_1",
            name="web_search",
            provider_executed=True,
            provider_data=SERVER_RESULT,
        ),
        TextPart(text="let me look"),
        ToolCallPart(id="toolu_01", name="lookup", arguments='{"q": 1}'),
    ]
    return [Message(role="assistant", parts=parts), _results("toolu_01")]


def openai_step(call_id: str = "call_1") -> list[Message]:
    """An OpenAI Responses step: encrypted reasoning, a web search, a tool call, its result."""
    parts = [
        ReasoningPart(text="think", provider_data=OPENAI_REASONING),
        ToolCallPart(
            id="ws_1", name="web_search", provider_executed=True, provider_data=OPENAI_SEARCH
        ),
        ToolResultPart(tool_call_id="ws_1", name="web_search", provider_executed=True),
        ToolCallPart(id=call_id, name="lookup", arguments='{"q": 1}'),
    ]
    return [Message(role="assistant", parts=parts), _results(call_id)]


def _request(messages: list[Message], **model: Any) -> ModelRequest:
    config = ModelConfig(provider="anthropic", name="m", **model)
    return ModelRequest(model=config, system="be brief", messages=messages, tools=[TOOL])


def _body(api: ApiName, request: ModelRequest) -> dict[str, Any]:
    """The request as the SDK sends it (the fake validates the JSON body)."""
    if api == "anthropic":
        body = build_anthropic_request(request)
        body |= body.pop("extra_body", {})
    elif api == "openai_chat":
        body = build_chat_request(request)
    else:
        body = build_responses_request(request)
    return {**body, "stream": True}


TARGETS: list[ApiName] = ["anthropic", "openai_chat", "openai_responses"]


@pytest.mark.parametrize("target", ["openai_chat", "openai_responses"])
def test_an_anthropic_tool_loop_continues_on_openai(target: ApiName) -> None:
    body = _body(target, _request([_user("hi"), *anthropic_step()]))
    validate(target, body)
    text = json.dumps(body)
    assert not [p for p in PRIVATE if p in text], "no Anthropic-only data reaches OpenAI"
    assert "toolu_01" in text and '{\\"answer\\": 42}' in text, "the call and its result"


def test_an_openai_tool_loop_continues_on_anthropic() -> None:
    body = _body("anthropic", _request([_user("hi"), *openai_step()]))
    validate("anthropic", body)
    assert not [p for p in PRIVATE if p in json.dumps(body)]
    assistant, results = body["messages"][1:]
    assert [b["type"] for b in assistant["content"]] == ["tool_use"]
    assert results["content"][0]["tool_use_id"] == assistant["content"][0]["id"] == "call_1"


def test_a_foreign_call_id_is_made_one_anthropic_takes_in_call_and_result() -> None:
    body = _body("anthropic", _request([_user("hi"), *openai_step("functions.lookup:0")]))
    validate("anthropic", body)
    call, result = body["messages"][1]["content"][0], body["messages"][2]["content"][0]
    assert call["id"] == result["tool_use_id"] == "functions_lookup_0"


def test_thinking_waits_for_the_next_turn_after_another_providers_tool_step() -> None:
    thinking = {"thinking_budget_tokens": 2048}
    mid_loop = _body("anthropic", _request([_user("hi"), *openai_step()], **thinking))
    validate("anthropic", mid_loop)
    assert "thinking" not in mid_loop, "the open tool loop has no thinking to send back"
    own = _body("anthropic", _request([_user("hi"), *anthropic_step()], **thinking))
    assert own["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    answer = Message(role="assistant", parts=[TextPart(text="42")])
    next_turn = [_user("hi"), *openai_step(), answer, _user("and now?")]
    assert "thinking" in _body("anthropic", _request(next_turn, **thinking))


def test_the_fake_refuses_what_a_real_api_refuses_of_another_providers_data() -> None:
    """The control: without the mapping's care, these requests fail as the real ones would."""
    anthropic_turn = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "reasoning", **OPENAI_REASONING}]},
        {"role": "user", "content": "go on"},
    ]
    refused: list[tuple[ApiName, dict[str, Any], str]] = [
        ("anthropic", {"max_tokens": 9, "messages": anthropic_turn}, "does not match any"),
        (
            "anthropic",
            {
                "max_tokens": 9,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "a:0", "name": "f", "input": {}}],
                    },
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a:0"}]},
                ],
            },
            "should match pattern",
        ),
        (
            "anthropic",
            {
                "max_tokens": 9000,
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "messages": _body("anthropic", _request([_user("hi"), *openai_step()]))["messages"],
            },
            "must start with a thinking block",
        ),
        (
            "openai_chat",
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "ok", "signature": "sig-anthropic"},
                ]
            },
            "Additional properties are not allowed",
        ),
        (
            "openai_chat",
            {"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}]},
            "Invalid value: 'thinking'",
        ),
        ("openai_responses", {"input": [REDACTED]}, "Invalid value: 'redacted_thinking'"),
        (
            "openai_responses",
            {"input": [{"type": "reasoning", "id": "rs", "signature": "sig-anthropic"}]},
            "Unknown parameter",
        ),
        ("openai_responses", {"input": [{"type": "reasoning", "id": "rs"}]}, "summary"),
    ]
    for api, body, fragment in refused:
        with pytest.raises(InvalidRequest) as err:
            validate(api, {"model": "m", "stream": True, **body})
        assert fragment in err.value.message, (api, err.value.message)
