"""A response's `input` is client data: any JSON is sorted into the chat's terms or refused
with a 400 naming the item, never anything else."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from api.errors import ApiError
from api.open_responses.inputs import parse_input
from chatd.context import SUMMARY_PREAMBLE
from chatd.parts import TextPart, ToolCallPart, ToolResultPart

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
_ITEMISH = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(
            ["message", "function_call", "function_call_output", "mcp_approval_response",
             "item_reference", "compaction", "reasoning", "x"]
        ),
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
        "content": _JSON | st.text(max_size=10),
        "call_id": st.text(max_size=8),
        "name": st.text(max_size=8),
        "arguments": st.text(max_size=8),
        "output": _JSON,
        "id": st.text(max_size=8),
    },
)  # fmt: skip


def _unseal(sealed: str) -> str:
    """Opens what `_seal` made: the tests' stand-in for the deployment's key."""
    if not sealed.startswith("sealed:"):
        raise ValueError("not ours")
    return sealed.removeprefix("sealed:")


def _dumped(parts: Sequence[BaseModel]) -> list[dict[str, Any]]:
    return [part.model_dump() for part in parts]


@settings(max_examples=300, deadline=None)
@given(st.lists(_ITEMISH | _JSON, min_size=1, max_size=5))
def test_any_input_is_sorted_or_refused_with_a_400_naming_the_item(raw: list[Any]) -> None:
    try:
        parsed = parse_input(raw, "abc", _unseal)
    except ApiError as refusal:
        assert refusal.status == 400
        assert refusal.detail["param"].startswith("input[")
        return
    assert parsed.message is not None or parsed.outputs or parsed.approvals
    assert len(parsed.items) == len(raw)
    assert all(item["id"] and item["status"] for item in parsed.items)


def test_a_history_keeps_calls_with_their_message_and_results_together() -> None:
    parsed = parse_input(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "weather?"},
            {"type": "message", "role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
        ],
        "abc",
        _unseal,
    )
    assert parsed.system == ["Be brief."]
    expected = [
        ("user", [TextPart(text="weather?")]),
        (
            "assistant",
            [
                TextPart(text="Checking."),
                ToolCallPart(id="c1", name="get_weather", arguments="{}"),
            ],
        ),
        ("tool", [ToolResultPart(tool_call_id="c1", name="get_weather", output="sunny")]),
    ]
    assert [(m.role, _dumped(m.parts)) for m in parsed.history] == [
        (role, _dumped(parts)) for role, parts in expected
    ]
    assert parsed.message is not None
    assert _dumped(parsed.message.user_parts()) == _dumped([TextPart(text="thanks")])


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ([{"type": "function_call_output", "call_id": "c9", "output": "x"},
          {"role": "user", "content": "hi"}], "no function_call with call_id 'c9'"),
        ([{"role": "assistant", "content": "hi"}], "must be a user message"),
        ([{"id": "msg_1"}, {"role": "user", "content": "hi"}], "item_reference is taken only"),
        ([{"type": "compaction", "encrypted_content": "forged"},
          {"role": "user", "content": "hi"}], "encrypted_content: not ours"),
        ([{"role": "user", "content": [{"type": "input_image",
           "image_url": "https://example.com/x.png"}]}], "URLs are not fetched"),
        ([{"role": "user", "content": [{"type": "input_image",
           "image_url": "data:image/png;base64,not base64!"}]}], "base64"),
        ([{"role": "user", "content": [{"type": "input_image",
           "image_url": "data:application/x-evil;base64,AAAA"}]}], "is not allowed"),
    ],
)  # fmt: skip
def test_inputs_the_chat_cannot_take_are_refused_by_item(raw: list[Any], why: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_input(raw, "abc", _unseal)
    assert refused.value.status == 400
    assert why in refused.value.message, refused.value.message


def test_answers_after_the_client_s_copy_of_the_conversation_are_the_answers() -> None:
    """Clients that keep the conversation send all of it each time; only the trailing
    answers are new, and references in the copy are taken as they are."""
    parsed = parse_input(
        [
            {"role": "user", "content": "weather?"},
            {"type": "item_reference", "id": "msg_earlier"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "abc",
        _unseal,
    )
    assert parsed.restated and parsed.message is None and not parsed.history
    assert [(o.call_id, o.text()) for o in parsed.outputs] == [("c1", "sunny")]
    assert len(parsed.items) == 4


def test_a_compaction_item_stands_for_its_summary_in_the_history() -> None:
    parsed = parse_input(
        [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "sealed:slate was agreed"},
            {"role": "user", "content": "go on"},
        ],
        "abc",
        _unseal,
    )
    (summary,) = parsed.history
    assert summary.role == "user"
    (part,) = summary.parts
    assert isinstance(part, TextPart)
    assert part.text == f"{SUMMARY_PREAMBLE}\n\nslate was agreed"
