"""The advisor tool: its handoff (context, step text, question, budget), the one switch for
tool and guidance, its configuration, and its results against a real Postgres and the fake
provider (advice, the per-turn cap, a failing advisor model)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.names import model_name
from temporalio.testing import ActivityEnvironment

from activities.tools import ToolActivities
from chatd.fake_provider import FakeProviderServer
from chatd.fake_provider.script import FakeError, FakeResponse
from chatd.models import ModelConfig, WebSearchConfig
from chatd.parts import Message, Part, Role, TextPart, ToolCallPart, ToolResultPart, Usage
from chatd.providers.base import ToolSpec
from chatd.settings import ProviderSettings
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore
from chatd.tools.advisor import (
    ADVISOR_ENV,
    ADVISOR_MAX_USES_ENV,
    ADVISOR_MODEL_ENV,
    ADVISOR_SYSTEM_PROMPT,
    DEFAULT_MAX_USES,
    GUIDANCE,
    AdvisorConfig,
    advisor_gate,
    advisor_guidance,
    make_advisor_tool,
)
from chatd.tools.advisor_handoff import handoff_text, render_message, split_at_call
from chatd.tools.base import ToolRegistry
from chatd.tools.catalog import ToolCatalog
from chatd.tools.defaults import default_registry
from workflows.payloads import ExecuteToolInput, RecordToolResultsInput, ToolCallRef


def _text(role: Role, text: str) -> Message:
    return Message(role=role, parts=[TextPart(text=text)])


def _chat(**fields: Any) -> ChatRecord:
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "owner": "o",
        "title": None,
        "title_source": None,
        "model": ModelConfig(),
        "system_prompt": "Be brief.",
        "dynamic_tools": [],
        "active_tools": None,
        "max_steps": 25,
        "action_timeout_s": 600,
        "compaction_threshold": 0.7,
        "status": "running",
        "last_error": None,
        "pending_tool_calls": None,
        "action_expires_at": None,
        "usage": Usage(),
        "created_at": now,
        "updated_at": now,
    }
    return ChatRecord.model_validate({**values, **fields})


def _spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=name, input_schema={"type": "object"})


# The handoff


def test_the_handoff_holds_instructions_conversation_step_and_question_in_order() -> None:
    messages = [
        _text("user", "Port the parser to Rust."),
        Message(
            role="assistant",
            parts=[ToolCallPart(id="c0", name="read_file", arguments='{"path": "p.py"}')],
        ),
        Message(
            role="tool",
            parts=[ToolResultPart(tool_call_id="c0", name="read_file", output="def parse(): ...")],
        ),
    ]
    text = handoff_text(
        question="Rewrite or wrap?",
        system_prompt="You are a careful engineer.",
        messages=messages,
        step_text="Two options come to mind.",
        budget_chars=10_000,
    )
    order = [
        "You are a careful engineer.",
        "Port the parser to Rust.",
        'called tool read_file with {"path": "p.py"}',
        "result of tool read_file: def parse(): ...",
        "Two options come to mind.",
        "Rewrite or wrap?",
    ]
    positions = [text.index(piece) for piece in order]
    assert positions == sorted(positions)
    assert "left out" not in text


def test_over_its_budget_the_handoff_keeps_the_newest_messages_and_the_whole_question() -> None:
    messages = [
        _text("user" if i % 2 else "assistant", f"message {i:03d} " * 40) for i in range(60)
    ]
    question = "Which way? " * 100
    text = handoff_text(
        question=question,
        system_prompt=None,
        messages=messages,
        step_text="",
        budget_chars=6_000,
    )
    assert len(text) <= 6_000
    assert question.strip() in text
    assert "message 059" in text and "message 058" in text
    assert "message 000" not in text
    assert "earlier message(s) left out to fit the advisor's budget" in text


def test_long_instructions_keep_their_head_and_a_long_step_its_tail() -> None:
    text = handoff_text(
        question="Now what?",
        system_prompt="RULE-ONE " + "x" * 50_000 + " RULE-LAST",
        messages=[_text("user", "hello")],
        step_text="FIRST-THOUGHT " + "y" * 50_000 + " LATEST-THOUGHT",
        budget_chars=20_000,
    )
    assert len(text) <= 20_000
    assert "RULE-ONE" in text and "RULE-LAST" not in text
    assert "LATEST-THOUGHT" in text and "FIRST-THOUGHT" not in text
    assert "hello" in text


def test_the_step_is_split_off_at_the_call_with_only_its_text_before_the_call() -> None:
    earlier = [_text("user", "go"), _text("assistant", "earlier step")]
    step = Message(
        role="assistant",
        parts=[
            TextPart(text="I could refactor first."),
            ToolCallPart(id="adv", name="advisor", arguments='{"question": "q"}'),
            TextPart(text="written after the call"),
        ],
    )
    seen, step_text = split_at_call([*earlier, step], "adv")
    assert seen == earlier
    assert step_text == "I could refactor first."
    assert split_at_call(earlier, "missing") == (earlier, "")


def test_a_rendered_message_shows_errors_and_media_but_no_reasoning() -> None:
    parts: list[Part] = [
        ToolResultPart(tool_call_id="a", name="run", output="exit 1", is_error=True),
        ToolResultPart(tool_call_id="b", name="shot", media_type="image/png", data="AAAA"),
        ToolResultPart(tool_call_id="c", name="ls", output={"files": ["a"]}),
    ]
    rendered = render_message(Message(role="tool", parts=parts))
    assert "(error of tool run: exit 1)" in rendered
    assert "[image/png data]" in rendered and "AAAA" not in rendered
    assert '{"files": ["a"]}' in rendered


# The one switch


def test_a_root_chat_offered_the_advisor_gets_the_tool_and_the_guidance() -> None:
    chat = _chat()
    specs = [_spec("read_file"), _spec("advisor")]
    offered, system = advisor_gate(chat, specs)
    assert [s.name for s in offered] == ["read_file", "advisor"]
    assert system == f"Be brief.\n\n{GUIDANCE}"
    assert advisor_guidance(chat, ["advisor"]) == GUIDANCE
    assert advisor_gate(_chat(system_prompt=None), specs)[1] == GUIDANCE


def test_without_the_advisor_a_chat_gets_neither_tool_nor_guidance() -> None:
    chat = _chat()
    offered, system = advisor_gate(chat, [_spec("read_file")])
    assert [s.name for s in offered] == ["read_file"]
    assert system == "Be brief."
    assert advisor_guidance(chat, ["read_file"]) is None


def test_a_subagent_gets_neither_tool_nor_guidance_though_the_worker_offers_it() -> None:
    child = _chat(parent_chat_id=uuid.uuid4(), depth=1)
    offered, system = advisor_gate(child, [_spec("read_file"), _spec("advisor")])
    assert [s.name for s in offered] == ["read_file"]
    assert system == "Be brief."
    assert advisor_guidance(child, ["advisor"]) is None


# Configuration


def test_the_advisor_is_registered_only_when_switched_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADVISOR_ENV, raising=False)
    assert "advisor" not in default_registry().tools
    monkeypatch.setenv(ADVISOR_ENV, "1")
    tool = default_registry().get("advisor")
    assert tool is not None and tool.exclusive and tool.read_only
    assert "advisor" not in default_registry(enable_advisor=False).tools


def test_the_advisor_model_and_cap_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    providers = ProviderSettings()
    monkeypatch.delenv(ADVISOR_MODEL_ENV, raising=False)
    monkeypatch.delenv(ADVISOR_MAX_USES_ENV, raising=False)
    default = AdvisorConfig.from_env(providers)
    assert default.model is None and default.max_uses == DEFAULT_MAX_USES
    monkeypatch.setenv(ADVISOR_MODEL_ENV, "openai/gpt-4.1")
    monkeypatch.setenv(ADVISOR_MAX_USES_ENV, "5")
    configured = AdvisorConfig.from_env(providers)
    assert configured.model == ModelConfig(provider="openai", name="gpt-4.1")
    assert configured.max_uses == 5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (ADVISOR_MODEL_ENV, "gpt-4.1"),
        (ADVISOR_MODEL_ENV, "mistral/large"),
        (ADVISOR_MAX_USES_ENV, "0"),
        (ADVISOR_MAX_USES_ENV, "three"),
    ],
)
def test_a_bad_setting_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        AdvisorConfig.from_env(ProviderSettings())


def test_the_advisor_model_is_called_without_provider_tools_or_chain() -> None:
    providers = ProviderSettings()
    chat_model = ModelConfig(
        provider="openai",
        name="gpt-4.1",
        openai_api="responses",
        openai_chain=True,
        web_search=WebSearchConfig(),
    )
    model = AdvisorConfig(providers).model_for(_chat(model=chat_model))
    assert model.web_search is None and not model.openai_chain
    assert model.max_output_tokens == 4096 and model.name == "gpt-4.1"
    bounded = chat_model.model_copy(update={"max_output_tokens": 900})
    assert AdvisorConfig(providers).model_for(_chat(model=bounded)).max_output_tokens == 900


# Results, against Postgres and the fake provider


@dataclass
class AdvisedTurn:
    """A chat in a turn whose steps call the advisor, run as the worker runs them."""

    pool: asyncpg.Pool
    activities: ToolActivities
    chat_id: uuid.UUID
    turn_id: str

    async def ask(self, step: int, question: str, text: str = "") -> dict[str, Any]:
        """Persist step `step` (its text, then an advisor call), run and record the call;
        the result's output."""
        call = ToolCallPart(
            id=f"adv{step}", name="advisor", arguments=json.dumps({"question": question})
        )
        parts: list[Part] = [TextPart(text=text), call] if text else [call]
        transcript = TranscriptStore(self.pool)
        await transcript.save(
            self.chat_id,
            turn_id=self.turn_id,
            step_key=f"{step}:assistant",
            role="assistant",
            parts=parts,
        )
        ref = ToolCallRef(id=call.id, name="advisor", exclusive=True)
        run = ExecuteToolInput(chat_id=str(self.chat_id), turn_id=self.turn_id, step=step, call=ref)
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, activity_id=f"a{step}")
        await env.run(self.activities.execute_tool_call, run)
        record = RecordToolResultsInput(
            chat_id=str(self.chat_id), turn_id=self.turn_id, step=step, calls=[ref]
        )
        await ActivityEnvironment().run(self.activities.record_tool_results, record)
        message = await transcript.find(self.chat_id, self.turn_id, f"{step}:tools")
        assert message is not None
        [result] = message.parts
        assert isinstance(result, ToolResultPart) and not result.is_error
        assert isinstance(result.output, dict)
        return result.output


async def advised_turn(
    pool: asyncpg.Pool, server: FakeProviderServer, tmp_path: Path, model: str, max_uses: int
) -> AdvisedTurn:
    config = AdvisorConfig(server.provider_settings(), max_uses=max_uses)
    catalog = ToolCatalog(pool, ToolRegistry.of([make_advisor_tool(config)]))
    activities = ToolActivities(pool, catalog, tmp_path / "workspaces")
    chat = await ChatStore(pool).create(
        owner="o",
        model=ModelConfig(provider="anthropic", name=model),
        system_prompt="You port code.",
    )
    transcript = TranscriptStore(pool)
    queued, _ = await transcript.enqueue(chat.id, [TextPart(text="Port the parser.")], None)
    assert await TurnStore(pool).begin(chat.id, str(queued.id))
    return AdvisedTurn(pool, activities, chat.id, str(queued.id))


_db = pytest.mark.usefixtures("closed_sdk_clients")


@_db
async def test_advice_comes_from_one_tool_less_call_with_the_context_and_question(
    pool: asyncpg.Pool, server: FakeProviderServer, tmp_path: Path
) -> None:
    model = model_name()
    server.script(model, [FakeResponse.of_text("Wrap it first; rewrite later.")])
    turn = await advised_turn(pool, server, tmp_path, model, max_uses=3)
    output = await turn.ask(0, "Rewrite or wrap?", text="Weighing two options.")
    assert output["type"] == "advice"
    assert output["advice"] == "Wrap it first; rewrite later."
    assert output["remaining_uses"] == 2
    assert output["model"] == f"anthropic/{model}"
    assert output["usage"]["input_tokens"] == 10 and output["usage"]["output_tokens"] > 0
    [request] = server.requests(model)
    assert "tools" not in request.body
    assert [block["text"] for block in request.body["system"]] == [ADVISOR_SYSTEM_PROMPT]
    [user] = request.body["messages"]
    handoff = json.dumps(user["content"])
    for piece in [
        "You port code.",
        "Port the parser.",
        "Weighing two options.",
        "Rewrite or wrap?",
    ]:
        assert piece in handoff


@_db
async def test_a_turn_gets_advice_up_to_its_cap_then_limit_reached_without_a_call(
    pool: asyncpg.Pool, server: FakeProviderServer, tmp_path: Path
) -> None:
    model = model_name()
    server.script(model, [FakeResponse.of_text("first"), FakeResponse.of_text("second")])
    turn = await advised_turn(pool, server, tmp_path, model, max_uses=2)
    first, second, third = [await turn.ask(step, f"question {step}") for step in range(3)]
    assert [first["remaining_uses"], second["remaining_uses"]] == [1, 0]
    assert third == {
        "type": "limit_reached",
        "message": "The advisor may be consulted 2 time(s) per turn.",
        "remaining_uses": 0,
        "model": f"anthropic/{model}",
    }
    assert len(server.requests(model)) == 2


@_db
async def test_a_failing_advisor_model_is_an_error_result_that_uses_nothing_up(
    pool: asyncpg.Pool, server: FakeProviderServer, tmp_path: Path
) -> None:
    model = model_name()
    bad_request = FakeError(status=400, type="invalid_request_error", message="no good")
    server.script(model, [FakeResponse.of_error(bad_request), FakeResponse.of_text("ok now")])
    turn = await advised_turn(pool, server, tmp_path, model, max_uses=2)
    failed = await turn.ask(0, "first try")
    assert failed["type"] == "error" and "no good" in failed["message"]
    assert failed["remaining_uses"] == 2 and "usage" not in failed
    advised = await turn.ask(1, "second try")
    assert advised["type"] == "advice" and advised["remaining_uses"] == 1
