"""A step's estimate of its context counts every part's JSON, as one message's estimate does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chatd.context import estimate_message_tokens, estimate_messages_tokens, estimate_tokens
from chatd.parts import Message, Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

_text = st.text(max_size=80)  # any characters: escapes and non-ASCII are counted as written
_parts: st.SearchStrategy[Part] = st.one_of(
    st.builds(TextPart, text=_text),
    st.builds(ReasoningPart, text=_text, signature=st.none() | _text),
    st.builds(ToolCallPart, id=_text, name=_text, arguments=_text),
    st.builds(
        ToolResultPart,
        tool_call_id=_text,
        name=_text,
        output=st.none() | _text | st.dictionaries(_text, _text, max_size=3),
        is_error=st.booleans(),
    ),
)
_messages = st.lists(
    st.builds(Message, role=st.sampled_from(["user", "assistant"]), parts=st.lists(_parts)),
    max_size=8,
)


@given(_messages)
def test_the_contexts_estimate_is_its_parts_json_length(messages: list[Message]) -> None:
    """Rounded once for the whole context, so never above the messages' estimates summed."""
    chars = sum(len(part.model_dump_json()) for m in messages for part in m.parts)
    estimate = estimate_messages_tokens(messages)
    assert estimate == estimate_tokens(chars)
    assert estimate <= sum(map(estimate_message_tokens, messages))
    for m in messages:  # a message on its own: the same count, its own rounding
        one = sum(len(part.model_dump_json()) for part in m.parts)
        assert estimate_message_tokens(m) == estimate_tokens(one)
