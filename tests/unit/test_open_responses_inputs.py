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
from api.open_responses.inputs import parse_input, restart_from_copy
from chatd.context import SUMMARY_PREAMBLE
from chatd.parts import ReasoningPart, TextPart, ToolCallPart, ToolResultPart

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


def _unseal(sealed: str, kind: str) -> str:
    """Opens what `_seal` made: the tests' stand-in for the deployment's key."""
    if not sealed.startswith(f"sealed:{kind}:"):
        raise ValueError("not ours")
    return sealed.removeprefix(f"sealed:{kind}:")


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
            {
                "type": "compaction",
                "id": "cmp_1",
                "encrypted_content": "sealed:compaction:slate was agreed",
            },
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


def test_a_sealed_reasoning_item_restores_its_part_and_any_other_is_dropped() -> None:
    state = ReasoningPart(text="think", signature="sig")
    raw = [
        {"role": "user", "content": "q"},
        {"type": "reasoning", "summary": [], "encrypted_content": "forged"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "no state"}]},
        {"type": "reasoning", "summary": [],
         "encrypted_content": f"sealed:reasoning:{state.model_dump_json()}"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        {"role": "user", "content": "next"},
    ]  # fmt: skip
    parsed = parse_input(raw, "abc", _unseal)
    roles = [(m.role, [p.type for p in m.parts]) for m in parsed.history]
    assert roles == [("user", ["text"]), ("assistant", ["reasoning", "tool_call"]),
                     ("tool", ["tool_result"])]  # fmt: skip
    assert parsed.history[1].parts[0] == state


def test_a_compaction_sealed_as_reasoning_does_not_open() -> None:
    raw = [
        {"type": "compaction", "encrypted_content": "sealed:reasoning:x"},
        {"role": "user", "content": "hi"},
    ]
    with pytest.raises(ApiError, match="not ours"):
        parse_input(raw, "abc", _unseal)


def test_results_no_chat_waits_on_restart_from_the_copy_before_them() -> None:
    raw = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    parsed = parse_input(raw, "abc", _unseal)
    assert parsed.message is None and not parsed.history, "nothing read while a chat may wait"
    restart_from_copy(parsed, _unseal)
    assert parsed.system == ["be brief"]
    assert [m.role for m in parsed.history] == ["user", "assistant"]
    assert [(r.tool_call_id, r.name, r.output) for r in parsed.results] == [
        ("c1", "f", "one"),
        ("c2", "g", "two"),
    ]


@pytest.mark.parametrize(
    "raw",
    [
        [{"type": "function_call_output", "call_id": "c1", "output": "x"}],
        [{"role": "user", "content": "q"},
         {"type": "function_call_output", "call_id": "c1", "output": "x"}],
        [{"role": "user", "content": "q"},
         {"type": "mcp_approval_response", "approval_request_id": "mcpr_c1", "approve": True}],
    ],
)  # fmt: skip
def test_answers_without_their_calls_can_t_begin_a_turn(raw: list[Any]) -> None:
    parsed = parse_input(raw, "abc", _unseal)
    with pytest.raises(ApiError) as refused:
        restart_from_copy(parsed, _unseal)
    assert refused.value.status == 400
