"""The faults of `chaos.py --faults`: a plan per chat, and the fake provider's answers to it.

Every chat gets a `Plan` (drawn from a seeded RNG): no fault, a few retryable provider errors
that then clear, a retryable error that never clears, one non-retryable error, a poison
model or message the provider always refuses, a compaction whose summary fails (or works),
a prompt over the fake's context window, or a turn (retrying a 529) whose workflow run an
operator terminates (`_chaos_faults.py` does that; the reconciler must end it). `FaultScript`
is the responder of the chats' models: it finds the chat's plan from the turn number in the
request's messages and answers as the plan says, until `stop()` turns the faults off (then
every request gets its normal answer). Each plan knows how its turn must end and what its
transcript must be.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from activities.compaction import SUMMARY_INSTRUCTIONS, SUMMARY_PREAMBLE, TITLE_INSTRUCTIONS
from chatd.fake_provider.script import (
    FakeError,
    FakeRequest,
    FakeResponse,
    FakeText,
    FakeToolCall,
    FakeUsage,
    ScriptBook,
)

__all__ = ["MODELS", "FaultScript", "Plan", "Shape", "draw_plan"]

MODEL = "chaos-model"
POISON_MODEL = "chaos-poison"
"""Every request for it is refused with a 400 while faults are on."""
OVERFLOW_MODEL = "chaos-overflow"
OVERFLOW_WINDOW = 600
"""The fake's context window for OVERFLOW_MODEL, in its estimated tokens: a step request (the
five default tools alone are ~900) never fits, a summary request (~400) does."""
MODELS = (MODEL, POISON_MODEL, OVERFLOW_MODEL)
COMPACT_LIMIT = 2000
"""`context_limit` of a compaction chat (threshold 70 %: 1400 tokens) ..."""
COMPACT_INPUT_TOKENS = 1800
"""... which its first step's reported prompt is over, so a compaction follows."""
POISON_MARKER = "[chaos poison]"
"""A message containing this is refused with a 400 while faults are on."""
ANSWER_WORDS = "".join(f"w{i:04d} " for i in range(30))
DELTA_DELAY_S = 0.02

Kind = Literal[
    "clean",
    "transient",
    "persistent",
    "fatal",
    "poison_model",
    "poison_message",
    "compaction",
    "overflow",
    "terminated",
]
WEIGHTS: dict[Kind, int] = {
    "clean": 25,
    "transient": 25,
    "persistent": 8,
    "fatal": 12,
    "poison_model": 5,
    "poison_message": 5,
    "compaction": 15,
    "overflow": 5,
    "terminated": 4,
}
RETRYABLE = ("529", "500", "429", "mid-stream", "disconnect")
FATAL = ("400", "401", "mid-stream-400")
SUMMARY_OUTCOMES = ("ok", "refused", "empty", "overloaded")
Shape = tuple[str, str, tuple[str, ...]]
"""(role, text, tool calls/results by name) of a message: what a plan's transcript is."""


@dataclass
class Plan:
    """What chat `index` is, which fault hits it, and how its turn must end."""

    index: int
    kind: Kind
    step: int = 0
    """The model step (0: the tool call, 1: the answer) the provider fault hits."""
    faults: list[str] = field(default_factory=list)
    """The fault names answered, in order (transient), or every time (persistent, fatal)."""
    after_deltas: int = 1
    """Mid-stream errors and disconnects come after this many deltas."""
    summary: str = "ok"
    """Compaction chats: how the summary request is answered (SUMMARY_OUTCOMES)."""

    @property
    def label(self) -> str:
        """e.g. `transient 529,disconnect @1`, `compaction refused`."""
        if self.kind == "compaction":
            return f"compaction {self.summary}"
        if self.faults:
            return f"{self.kind} {','.join(dict.fromkeys(self.faults))} @{self.step}"
        return self.kind

    def chat_body(self) -> dict[str, Any]:
        """The `POST /chats` body."""
        model: dict[str, Any] = {"provider": "anthropic", "name": MODEL}
        if self.kind == "poison_model":
            model["name"] = POISON_MODEL
        elif self.kind == "overflow":
            model["name"] = OVERFLOW_MODEL
        elif self.kind == "compaction":
            model["context_limit"] = COMPACT_LIMIT
        return {"model": model}

    def content(self) -> str:
        """The turn's user message."""
        poison = f" {POISON_MARKER}" if self.kind == "poison_message" else ""
        return f"turn {self.index}: what time is it?{poison}"

    def followup(self) -> str:
        """The message sent after faults stopped, to a chat whose turn ended in error."""
        return f"turn {self.index} follow-up: are you still there?"

    def ends(self) -> tuple[str, set[str | None]]:
        """The turn's final status and the `last_error.kind`s it may have."""
        if self.kind in ("clean", "transient") or self.summary_ok:
            return "waiting", {None}
        if self.kind == "persistent":
            return "error", {"unavailable"}
        if self.kind == "fatal":
            return "error", {"auth" if self.faults == ["401"] else "invalid_request"}
        if self.kind == "overflow":
            return "error", {"context_exceeded"}
        if self.kind == "terminated":
            return "error", {"internal"}  # ended by the reconciler
        if self.kind == "compaction":
            # An overloaded summary is retried for the deadline, then ends with its own kind.
            kinds: dict[str, set[str | None]] = {
                "refused": {"invalid_request"},
                "empty": {"generic"},
            }
            return "error", kinds.get(self.summary, {"overloaded", "unavailable"})
        return "error", {"invalid_request"}

    @property
    def summary_ok(self) -> bool:
        return self.kind == "compaction" and self.summary == "ok"

    def transcript(self) -> list[Shape]:
        """The transcript the turn must leave (compressed messages included)."""
        user: Shape = ("user", self.content(), ())
        if self.kind == "compaction":
            step = ("assistant", compact_intro(self.index), ())
            if not self.summary_ok:
                return [user, step]
            summary = ("user", f"{SUMMARY_PREAMBLE}\n\n{summary_text(self.index)}", ())
            return [user, step, summary, ("assistant", carry_on(self.index), ())]
        if self.kind == "overflow":
            return [user, ("user", f"{SUMMARY_PREAMBLE}\n\n{summary_text(self.index)}", ())]
        steps: list[Shape] = [
            ("assistant", intro(self.index), ("call:current_time",)),
            ("tool", "", ("result:current_time",)),
            ("assistant", answer(self.index), ()),
        ]
        if self.kind in ("clean", "transient"):
            return [user, *steps]
        return [user, *steps[: 2 * self.step]]

    def followup_transcript(self) -> list[Shape]:
        """What the follow-up adds to the transcript."""
        return [("user", self.followup(), ()), ("assistant", followup_answer(self.index), ())]


def draw_plan(index: int, rng: random.Random) -> Plan:
    """A random plan for chat `index`."""
    kinds = list(WEIGHTS)
    kind = rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
    plan = Plan(index, kind)
    if kind in ("transient", "persistent", "fatal"):
        plan.step = rng.randrange(2)
    if kind == "transient":
        plan.faults = [rng.choice(RETRYABLE) for _ in range(rng.randint(1, 2))]
    elif kind == "persistent":
        plan.faults = [rng.choice(("529", "500", "429"))]
    elif kind == "terminated":
        plan.faults = ["529"]  # the turn is retrying when its run is terminated
    elif kind == "fatal":
        plan.faults = [rng.choice(FATAL)]
    elif kind == "compaction":
        plan.summary = rng.choice(SUMMARY_OUTCOMES)
    plan.after_deltas = 1 if plan.step == 0 else rng.randint(1, 20)
    return plan


def intro(index: int) -> str:
    return f"turn {index}: let me check the time."


def answer(index: int) -> str:
    return f"turn {index}: {ANSWER_WORDS}"


def compact_intro(index: int) -> str:
    return f"turn {index}: a long answer that fills the context."


def summary_text(index: int) -> str:
    return f"turn {index}: the user asked for the time."


def carry_on(index: int) -> str:
    return f"turn {index}: carrying on from the summary."


def followup_answer(index: int) -> str:
    return f"turn {index}: still here after the faults."


class FaultScript:
    """The fake provider's responder for every chaos model; thread-safe."""

    def __init__(self, book: ScriptBook, plans: list[Plan]) -> None:
        self._book = book
        self._plans = {p.index: p for p in plans}
        self._lock = threading.Lock()
        self._pending = {p.index: deque(p.faults) for p in plans if p.kind == "transient"}
        self.on = True
        book.context_windows[OVERFLOW_MODEL] = OVERFLOW_WINDOW

    def stop(self) -> None:
        """Faults off: from now on every request gets its normal answer."""
        self.on = False
        self._book.context_windows.pop(OVERFLOW_MODEL, None)

    def __call__(self, request: FakeRequest) -> FakeResponse:
        system = _system_text(request.body)
        messages = request.body.get("messages", [])
        found = re.search(r"turn (\d+)", json.dumps(messages))
        plan = self._plans.get(int(found.group(1))) if found else None
        if plan is None:
            return FakeResponse.of_text("no plan")
        if self.on and (refused := _refusal(plan, request)) is not None:
            return FakeResponse.of_error(refused)
        if TITLE_INSTRUCTIONS in system:
            return FakeResponse.of_text(f"Chaos turn {plan.index}")
        if SUMMARY_INSTRUCTIONS.splitlines()[0] in system:
            return self._summary(plan)
        last_user, step = _position(messages)
        if "follow-up" in last_user:
            return FakeResponse.of_text(followup_answer(plan.index))
        if last_user.startswith(SUMMARY_PREAMBLE):
            return FakeResponse.of_text(carry_on(plan.index))
        if plan.kind == "compaction":
            usage = FakeUsage(input_tokens=COMPACT_INPUT_TOKENS)
            return FakeResponse.of_text(compact_intro(plan.index), usage=usage)
        return self._step(plan, step)

    def _step(self, plan: Plan, step: int) -> FakeResponse:
        normal = _normal_step(plan.index, step)
        if not self.on or step != plan.step:
            return normal
        if plan.kind in ("persistent", "fatal", "terminated"):
            return _faulty(plan.faults[0], normal, plan.after_deltas)
        with self._lock:
            pending = self._pending.get(plan.index)
            fault = pending.popleft() if pending else None
        return normal if fault is None else _faulty(fault, normal, plan.after_deltas)

    def _summary(self, plan: Plan) -> FakeResponse:
        outcome = plan.summary if self.on else "ok"
        if outcome == "refused":
            return FakeResponse.of_error(_bad_request("the summary request is refused"))
        if outcome == "empty":
            return FakeResponse(parts=[])
        if outcome == "overloaded":
            return FakeResponse.of_error(FakeError.overloaded())
        return FakeResponse.of_text(summary_text(plan.index))


def _refusal(plan: Plan, request: FakeRequest) -> FakeError | None:
    """A poison model's or message's 400, for every request that carries it."""
    if plan.kind == "poison_model":
        return _bad_request(f"model {request.model} refuses every request (chaos poison)")
    if plan.kind == "poison_message" and POISON_MARKER in json.dumps(request.body):
        return _bad_request("messages.0: this message cannot be processed (chaos poison)")
    return None


def _normal_step(index: int, step: int) -> FakeResponse:
    if step == 0:
        return FakeResponse(parts=[FakeText(text=intro(index)), FakeToolCall(name="current_time")])
    text = FakeText(text=answer(index), chunk_size=6)
    return FakeResponse(parts=[text], delta_delay_s=DELTA_DELAY_S)


def _faulty(fault: str, normal: FakeResponse, after_deltas: int) -> FakeResponse:
    """The normal step's response with `fault` instead (or in the middle of it)."""
    errors = {
        "529": FakeError.overloaded(),
        "500": FakeError(status=500),
        "429": FakeError.rate_limited(retry_after_s=1),
        "400": _bad_request("max_tokens: invalid value (chaos)"),
        "401": FakeError(status=401, type="authentication_error", message="invalid x-api-key"),
    }
    if fault in errors:
        return FakeResponse.of_error(errors[fault])
    update: dict[str, Any] = {"stream_error_after_deltas": after_deltas}
    if fault == "disconnect":
        update = {"disconnect_after_deltas": after_deltas}
    elif fault == "mid-stream-400":
        update["stream_error"] = _bad_request("invalid request (chaos, mid-stream)")
    return normal.model_copy(update=update)


def _bad_request(message: str) -> FakeError:
    return FakeError(status=400, type="invalid_request_error", message=message)


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    if isinstance(system, str):
        return system
    return "".join(b.get("text", "") for b in system if isinstance(b, dict))


def _position(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The text of the last user message that has text, and how many assistant messages
    follow it (the step of the turn this request is for)."""
    for k in range(len(messages) - 1, -1, -1):
        message = messages[k]
        texts = _texts(message)
        if message.get("role") == "user" and texts:
            after = messages[k + 1 :]
            return texts[-1], sum(1 for m in after if m.get("role") == "assistant")
    return "", 0


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if b.get("type") == "text"]
