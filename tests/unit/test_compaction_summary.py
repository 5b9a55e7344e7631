"""Compaction's summary request: it fits the window, and a failure is a classified error."""

from __future__ import annotations

import json

import pytest
from temporalio.exceptions import ApplicationError

from activities.compaction import summarise_transcript
from activities.failures import model_failure
from chatd.context import estimate_message_tokens, newest_that_fit
from chatd.fake_provider import FakeProviderServer, FakeReasoning, FakeResponse
from chatd.models import ModelConfig, ModelError
from chatd.parts import Message, TextPart, ToolCallPart, ToolResultPart
from chatd.providers.base import ProviderError
from workflows.constants import MODEL_ERROR_TYPE

pytestmark = pytest.mark.usefixtures("closed_sdk_clients")


def _user(text: str) -> Message:
    return Message(role="user", parts=[TextPart(text=text)])


def _assistant(text: str) -> Message:
    return Message(role="assistant", parts=[TextPart(text=text)])


NOTES = [_user("a" * 4000), _assistant("ok"), _user("b" * 4000), _assistant("ok")]


def _sent(server: FakeProviderServer, name: str, index: int) -> str:
    return json.dumps(server.requests(name)[index].body["messages"])


# --- which messages fit ---------------------------------------------------------------------


def test_the_newest_messages_that_fit_are_kept() -> None:
    one = estimate_message_tokens(NOTES[0])
    assert newest_that_fit(NOTES, budget=10 * one) == NOTES
    assert newest_that_fit(NOTES, budget=one + 10) == NOTES[2:]
    assert newest_that_fit(NOTES, budget=1) == []


def test_a_kept_transcript_never_opens_on_tool_results_whose_call_was_left_out() -> None:
    call = Message(role="assistant", parts=[ToolCallPart(id="c1", name="t", arguments="{}")])
    result = Message(
        role="tool", parts=[ToolResultPart(tool_call_id="c1", name="t", output="x" * 400)]
    )
    messages = [_user("go"), call, result, _assistant("done")]
    budget = estimate_message_tokens(result) + estimate_message_tokens(messages[3])
    assert newest_that_fit(messages, budget) == [messages[3]]


# --- the summary request --------------------------------------------------------------------


async def test_a_transcript_over_the_window_is_summarised_without_its_oldest_messages(
    server: FakeProviderServer,
) -> None:
    name = "summary-trims"
    server.book.context_windows[name] = 2000
    server.script(name, [FakeResponse.of_text("two notes")])
    model = ModelConfig(provider="anthropic", name=name)
    summary = await summarise_transcript(model, NOTES, 2000, server.provider_settings())
    assert summary.text == "two notes"
    sent = _sent(server, name, 0)
    assert "a" * 4000 not in sent and "b" * 4000 in sent
    assert "oldest messages of this conversation are left out" in sent


async def test_when_the_provider_still_finds_it_too_long_more_is_left_out(
    server: FakeProviderServer,
) -> None:
    """Our estimate says it fits a 4000-token window; the provider's is 1400 tokens."""
    name = "summary-provider-says-too-long"
    server.book.context_windows[name] = 1400
    server.script(name, [FakeResponse.of_text("the newest note")])
    model = ModelConfig(provider="openai", name=name)
    summary = await summarise_transcript(model, NOTES, 4000, server.provider_settings())
    assert summary.text == "the newest note"
    assert len(server.requests(name)) > 1, "refused, then sent with less"
    assert "a" * 4000 in _sent(server, name, 0) and "a" * 4000 not in _sent(server, name, -1)


async def test_a_newest_message_alone_over_the_window_is_context_exceeded(
    server: FakeProviderServer,
) -> None:
    model = ModelConfig(provider="anthropic", name="summary-never-fits")
    with pytest.raises(ProviderError) as caught:
        await summarise_transcript(model, NOTES[:3], 600, server.provider_settings())
    assert caught.value.error.kind == "context_exceeded"
    assert server.requests("summary-never-fits") == [], "nothing sent that cannot fit"


async def test_a_summary_of_reasoning_only_is_an_error(server: FakeProviderServer) -> None:
    name = "summary-empty"
    thinking = FakeResponse(parts=[FakeReasoning(text="hmm")], stop_reason="max_tokens")
    server.script(name, [thinking])
    model = ModelConfig(provider="anthropic", name=name)
    with pytest.raises(ProviderError) as caught:
        await summarise_transcript(model, NOTES[:2], 200_000, server.provider_settings())
    assert caught.value.error.message == "compaction produced no summary"
    assert caught.value.error.retryable is False


# --- the errors contract with the workflow --------------------------------------------------


@pytest.mark.parametrize("retryable", [True, False])
def test_a_compaction_error_carries_the_model_error_for_the_workflow(retryable: bool) -> None:
    error = ModelError(message="Overloaded", kind="overloaded", retryable=retryable)
    raised = model_failure(error, non_retryable=not error.retryable)
    assert isinstance(raised, ApplicationError)
    assert raised.type == MODEL_ERROR_TYPE and raised.message == "Overloaded"
    assert raised.non_retryable is not retryable
    assert ModelError.model_validate(raised.details[0]) == error
