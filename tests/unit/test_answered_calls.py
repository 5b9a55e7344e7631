"""A transcript whose turn failed between a step's tool calls and their results still makes a
request every provider accepts (the fake provider checks what the real APIs check): each
unanswered call gets an error result right after the results it has, and nothing else
changes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_cross_provider_transcripts import TARGETS, _body, _request, _user

from chatd.answered_calls import UNANSWERED_RESULT, every_call_answered
from chatd.fake_provider.script import ApiName
from chatd.fake_provider.validation import InvalidRequest, validate
from chatd.parts import Message, TextPart, ToolCallPart, ToolResultPart


def _step(calls: list[str], answered: list[str], *, split: bool = False) -> list[Message]:
    """An assistant step calling `calls`, then tool messages answering `answered` (one per
    result when `split`, as separately recorded results are)."""
    step = Message(
        role="assistant",
        parts=[TextPart(text="let me look"), *(ToolCallPart(id=c, name="lookup") for c in calls)],
    )
    results = [ToolResultPart(tool_call_id=c, name="lookup", output="42") for c in answered]
    groups = [[r] for r in results] if split else ([results] if results else [])
    return [step, *(Message(role="tool", parts=list(g)) for g in groups)]


FAILED_TURN = [_user("what time is it?"), *_step(["toolu_1"], []), _user("still there?")]
"""The turn failed after the step that called the tool; the next turn's message follows."""


@pytest.mark.parametrize("target", TARGETS)
def test_a_failed_turns_unanswered_call_is_answered_with_an_error(target: ApiName) -> None:
    with pytest.raises(InvalidRequest):
        validate(target, _body(target, _request(FAILED_TURN)))
    answered = every_call_answered(FAILED_TURN)
    validate(target, _body(target, _request(answered)))
    assert answered[:2] == FAILED_TURN[:2] and answered[3:] == FAILED_TURN[2:]
    assert answered[2].parts == [
        ToolResultPart(
            tool_call_id="toolu_1", name="lookup", output=UNANSWERED_RESULT, is_error=True
        )
    ]


_ids = st.lists(st.sampled_from(["a", "b", "c"]), unique=True)


@st.composite
def _transcripts(draw: st.DrawFn) -> list[Message]:
    messages = [_user("hi")]
    for n in range(draw(st.integers(1, 4))):
        calls = [f"toolu_{n}{c}" for c in draw(_ids)]
        answered = [c for c in calls if draw(st.booleans())]
        messages += _step(calls, answered, split=draw(st.booleans()))
        if draw(st.booleans()):
            messages.append(_user(f"and then {n}?"))
    return messages


@given(transcript=_transcripts(), target=st.sampled_from(TARGETS))
def test_any_mix_of_answered_and_unanswered_calls_is_a_valid_request(
    transcript: list[Message], target: ApiName
) -> None:
    answered = every_call_answered(transcript)
    if answered[-1].role == "assistant":
        return  # a request never ends with the model's own step
    validate(target, _body(target, _request(answered)))
    added = [m for m in answered if m not in transcript]
    assert all(
        isinstance(r, ToolResultPart) and r.is_error and r.output == UNANSWERED_RESULT
        for m in added
        for r in m.parts
    ), "only error results are added"
    assert [m for m in answered if m in transcript] == transcript, "nothing else changes"
    assert every_call_answered(answered) == answered
