"""OpenAI Responses chain mode: which requests continue a stored response."""

from __future__ import annotations

from chatd.models import ModelConfig
from chatd.parts import Message, TextPart, ToolCallPart, ToolResultPart
from chatd.providers.base import ModelRequest
from chatd.providers.openai_responses import build_responses_request


def _user(text: str) -> Message:
    return Message(role="user", parts=[TextPart(text=text)])


def _request(messages: list[Message], chain: bool = True) -> ModelRequest:
    model = ModelConfig(provider="openai", name="gpt-x", openai_api="responses", openai_chain=chain)
    return ModelRequest(model=model, messages=messages)


ANSWERED = [
    _user("hi"),
    Message(role="assistant", parts=[TextPart(text="hello")], response_id="resp_1"),
]


def test_a_turns_first_step_continues_the_stored_response_with_only_the_new_message() -> None:
    kwargs = build_responses_request(_request([*ANSWERED, _user("and then?")]))
    assert kwargs["previous_response_id"] == "resp_1"
    assert kwargs["store"] is True
    assert kwargs["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "and then?"}]}
    ]


def test_once_tool_results_follow_the_full_history_is_sent() -> None:
    call = ToolCallPart(id="call_1", name="t", arguments="{}")
    messages = [
        *ANSWERED,
        _user("use the tool"),
        Message(role="assistant", parts=[call], response_id="resp_2"),
        Message(role="tool", parts=[ToolResultPart(tool_call_id="call_1", name="t", output="ok")]),
    ]
    kwargs = build_responses_request(_request(messages))
    assert "previous_response_id" not in kwargs
    assert len(kwargs["input"]) == 5


def test_without_chain_mode_nothing_is_stored_or_chained() -> None:
    kwargs = build_responses_request(_request([*ANSWERED, _user("more")], chain=False))
    assert "previous_response_id" not in kwargs and kwargs.get("store") is not True
    assert len(kwargs["input"]) == 3
