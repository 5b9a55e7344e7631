"""A `POST /v1/responses` body as its turn's settings, without a database or a gateway."""

from __future__ import annotations

from api.open_responses.requests import CreateResponse
from api.open_responses.turn_settings import turn_settings_of
from chatd.models import ModelConfig

WEATHER = {
    "type": "function",
    "name": "weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _body(**fields: object) -> CreateResponse:
    return CreateResponse.model_validate({"model": "anthropic/claude", "input": "hi", **fields})


def test_instructions_come_before_the_inputs_system_messages() -> None:
    settings = turn_settings_of(
        _body(instructions="Be brief."), ModelConfig(), ["From the input.", "", "And more."]
    )
    assert settings.system == "Be brief.\n\nFrom the input.\n\nAnd more."


def test_no_instructions_and_no_system_messages_is_no_system_prompt() -> None:
    assert turn_settings_of(_body(), ModelConfig(), []).system is None


def test_the_requests_sampling_and_tools_reach_the_turn() -> None:
    body = _body(
        temperature=0.2,
        max_output_tokens=300,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    settings = turn_settings_of(body, ModelConfig(provider="anthropic", name="claude"), [])
    assert (settings.model.name, settings.model.temperature) == ("claude", 0.2)
    assert settings.model.max_output_tokens == 300
    assert [t.name for t in settings.tools] == ["weather"]
    assert (settings.tool_use.mode, settings.tool_use.parallel) == ("required", False)


def test_truncation_auto_compacts_and_disabled_never_does() -> None:
    auto = turn_settings_of(_body(truncation="auto"), ModelConfig(), [])
    assert auto.compaction_threshold == 0.7
    assert turn_settings_of(_body(), ModelConfig(), []).compaction_threshold == 0.0
