"""The fault matrix: every activity of a turn x every way it can fail, and the turn ends.

Faults are injected into the real worker's activities (tests/support/faults.py); Postgres,
Temporal and the provider (the fake, through the real SDK) stay real. For each case the
chat leaves `running` within a bound, `last_error` names the fault where the turn failed,
and the next message gets an answer (the fake provider validates that transcript). A
worker SIGKILL, the fifth fault, needs worker processes: tests/e2e/test_chaos_e2e.py kills
one mid first step, mid later step, mid tool and mid compaction, and `bench/chaos.py`
kills them at random.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from harness import Stack, StackFactory
from support.faults import INJECTED, Fault, FaultInjector, FaultKind
from support.names import model_name

from chatd.fake_provider.script import FakeError, FakeResponse, FakeText, FakeToolCall, FakeUsage

DEADLINE_S = 6
"""The turn's retry deadline in these tests (CHATD_RETRY_DEADLINE_S)."""
ENDS_WITHIN_S = 60.0
"""A generous bound: the deadline, the reconciler's grace and a loaded machine."""
LIMIT = 1000
"""The chats' context window: a 700-token prompt is compacted."""


@dataclass(frozen=True)
class Target:
    """An activity of a turn, the script that reaches it, and how the turn ends when it fails."""

    activity: str
    script: tuple[FakeResponse, ...]
    turn_fails: bool
    """The fault ends the turn with an error (a tool's or a title's does not)."""
    step: int | None = None
    """Only this step's attempts fail (model steps)."""
    call: str | None = None
    """Only this tool's calls fail (tools)."""


def _text(text: str = "fine", tokens: int = 10) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text)], usage=FakeUsage(input_tokens=tokens))


_TOOL_STEP = FakeResponse(parts=[FakeToolCall(name="list_files")])
_INLINE_TOOL_STEP = FakeResponse(
    parts=[FakeToolCall(name="current_time"), FakeToolCall(name="list_files")]
)
"""A quick call beside a regular one: a local activity (a step whose calls are all quick
runs them in its own activity, the model step's)."""
TARGETS = {
    "first step": Target("stream_model_step", (_text(),), turn_fails=True, step=0),
    "later step": Target("stream_model_step", (_TOOL_STEP, _text()), turn_fails=True, step=1),
    "tool": Target("execute_tool_call", (_TOOL_STEP, _text()), turn_fails=False),
    "inline tool": Target(
        "execute_tool_call", (_INLINE_TOOL_STEP, _text()), turn_fails=False, call="current_time"
    ),
    "compaction": Target("compact_context", (_text("long", 700), _text()), turn_fails=True),
    "title": Target("generate_title", (_text(), _text()), turn_fails=False),
    "finish": Target(
        "finish_turn", (FakeResponse(error=FakeError(status=400, message="no")),), turn_fails=True
    ),
}
"""`finish`: a step the provider refuses ends the turn through `finish_turn`, not the step."""


@pytest.fixture
async def faulty(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, FaultInjector]]:
    """A stack whose worker injects faults, with a short retry deadline and a quick
    reconciler (it ends a turn whose run could not finish it)."""
    monkeypatch.setenv("CHATD_RETRY_DEADLINE_S", str(DEADLINE_S))
    monkeypatch.setenv("CHATD_RECONCILE_INTERVAL_SECONDS", "0.5")
    monkeypatch.setenv("CHATD_RECONCILE_GRACE_SECONDS", "2")
    injector = FaultInjector()
    options: dict[str, Any] = {"interceptors": [injector]}
    async with make_stack(generate_titles=True, worker_overrides=options) as stack:
        yield stack, injector


def _matches(target: Target) -> Any:
    def matches(payload: Any) -> bool:
        if target.step is not None and getattr(payload, "step", None) != target.step:
            return False
        call = getattr(payload, "call", None)
        return target.call is None or (call is not None and call.name == target.call)

    return matches


CASES = [
    (where, kind)
    for where in TARGETS
    for kind in ("fatal", "forever", "unexpected", "hang")
    if (where, kind) != ("finish", "hang")
]
"""Every pair but a hung finish: the local activity's 30 s attempts outlast the bound (and
the SDK's core panicked timing one out), so a hung database is `bench/chaos.py`'s."""


@pytest.mark.parametrize(("where", "kind"), CASES)
async def test_a_turn_ends_whatever_fails(
    faulty: tuple[Stack, FaultInjector], where: str, kind: FaultKind
) -> None:
    stack, injector = faulty
    target = TARGETS[where]
    name = model_name()
    stack.fake.script(name, [*target.script, _text(), _text(), _text()])
    model = {"provider": "anthropic", "name": name, "context_limit": LIMIT}
    # Only the title's case leaves the chat untitled: a title request shares the script.
    titled = {} if where == "title" else {"title": "faults"}
    chat = await stack.create_chat(model=model, **titled)
    fault = Fault(target.activity, kind, _matches(target))
    injector.faults = [fault]

    await stack.send(chat["id"], "hello")
    ended = "error" if target.turn_fails else "waiting"
    events = await stack.wait_status(chat["id"], ended, within_s=ENDS_WITHIN_S)
    error = (await stack.http.get(f"/chats/{chat['id']}")).json()["last_error"]
    assert fault.hits >= 1, f"the fault was not reached; the turn ended with {error}"
    if target.turn_fails:
        assert error is not None
        assert error["kind"] in {"internal", "unavailable"}, error
        if where != "finish" and kind in ("fatal", "forever"):
            assert INJECTED in error["message"], error
    else:
        assert error is None

    injector.faults = []
    sent = await stack.send(chat["id"], "still there?")
    await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0, within_s=ENDS_WITHIN_S)
    answer = (await stack.messages(chat["id"]))[-1]
    assert (answer["role"], answer["turn_id"]) == ("assistant", sent["turn_id"]), answer
    assert any(p.get("text") for p in answer["parts"]), answer
