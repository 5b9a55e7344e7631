"""OpenAI Responses chain mode: which requests continue a stored response, and what happens
once that response is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from chatd.fake_provider import FakeError, FakeProviderServer, FakeResponse
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart, ToolCallPart, ToolResultPart
from chatd.providers.base import ModelRequest, ProviderError
from chatd.providers.openai_responses import OpenAIResponsesProvider, build_responses_request


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


# --- an expired or deleted stored response ---------------------------------------------------


@pytest.fixture
async def client(server: FakeProviderServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=server.base_url + "/v1", api_key="test", max_retries=0
    ) as oai:
        yield oai


async def _text(provider: OpenAIResponsesProvider, request: ModelRequest) -> tuple[str, str]:
    """The streamed text and the new response's id."""
    text, response_id = "", ""
    async for event in provider.stream_step(request):
        if isinstance(event, PartDelta):
            text += event.text or ""
        else:
            response_id = event.response_id or ""
    return text, response_id


async def test_the_fake_refuses_an_unknown_previous_response_as_openai_does(
    server: FakeProviderServer, client: openai.AsyncOpenAI
) -> None:
    server.script("chain-unknown", [FakeResponse.of_text("unused")])
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="chain-unknown", input="hi", previous_response_id="resp_gone", stream=True
        )
    assert caught.value.status_code == 400
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"
    assert caught.value.body == {
        "message": "Previous response with id 'resp_gone' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


async def test_a_gone_previous_response_is_retried_once_with_the_whole_transcript(
    server: FakeProviderServer, client: openai.AsyncOpenAI
) -> None:
    name = "chain-expired"
    server.script(name, [FakeResponse.of_text("first"), FakeResponse.of_text("second")])
    model = ModelConfig(provider="openai", name=name, openai_api="responses", openai_chain=True)
    provider = OpenAIResponsesProvider(client)
    history = [_user("hi")]
    text, first_id = await _text(provider, ModelRequest(model=model, messages=history))
    history.append(Message(role="assistant", parts=[TextPart(text=text)], response_id=first_id))
    server.book.forget_response(first_id)  # it expired, or someone deleted it

    request = ModelRequest(model=model, messages=[*history, _user("again")])
    text, second_id = await _text(provider, request)

    assert text == "second"
    refused, resent = (r.body for r in server.requests(name)[1:])
    assert refused["previous_response_id"] == first_id
    assert "previous_response_id" not in resent and resent["store"] is True
    assert [item["role"] for item in resent["input"]] == ["user", "assistant", "user"]
    assert server.book.has_response(second_id), "the next turn chains from the new response"


async def test_other_errors_of_a_chained_request_are_not_retried(
    server: FakeProviderServer, client: openai.AsyncOpenAI
) -> None:
    name = "chain-other-error"
    server.script(
        name,
        [
            FakeResponse.of_text("first"),
            FakeResponse.of_error(
                FakeError(status=400, type="invalid_request_error", message="bad")
            ),
        ],
    )
    model = ModelConfig(provider="openai", name=name, openai_api="responses", openai_chain=True)
    provider = OpenAIResponsesProvider(client)
    text, first_id = await _text(provider, ModelRequest(model=model, messages=[_user("hi")]))
    answered = Message(role="assistant", parts=[TextPart(text=text)], response_id=first_id)
    request = ModelRequest(model=model, messages=[_user("hi"), answered, _user("again")])
    with pytest.raises(ProviderError) as caught:
        await _text(provider, request)
    assert caught.value.error.kind == "invalid_request"
    assert len(server.requests(name)) == 2
