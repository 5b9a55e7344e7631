"""A 300-message chat against a 20k-token model: compaction keeps the context, and Temporal
history per step stays flat.

    python bench/long_chat.py [--turns 150] [--context-limit 20000] [--reply-tokens 200]

One chat, `--turns` sequential user turns through the in-process stack of
`_stack.running_stack` (each turn one model step: 2 x turns messages). The chat's model has
`ModelConfig.context_limit` = `--context-limit` (compaction threshold 0.7 of it, the default).
The fake model is a responder that reports `input_tokens` = len(request body JSON) / 4, so
usage grows with the transcript; it answers compaction requests (system prompt "Summarise the
conversation...") with a short summary, title requests with a title, and anything else with
~`--reply-tokens` tokens of text.

Reported: the number of compactions; the tokens sent per model step over the chat (a compact
series, min/max/last; the check: no step's input exceeds the context limit); and the Temporal
history bytes per model step of each turn's run (each turn is its own run of `chat-<id>`),
for turns with and without a compaction (the check: the last tenth of plain turns within 10%
of the first tenth). Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import _stack
from _history_size import event_kinds, payload_bytes
from _stack import BenchStack, SseEvent, say
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from activities.compaction import TITLE_INSTRUCTIONS
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeUsage
from workflows.constants import workflow_id

COMPACTION_MARK = "Summarise the conversation"
FLAT_WITHIN = 0.10
WORDS = "durable turns keep their context small while the chat grows long and longer ".split()


def _text(tokens: int, seed: int) -> str:
    """About `tokens` tokens (4 characters each) of filler words."""
    out: list[str] = []
    chars = 0
    i = seed
    while chars < tokens * 4:
        word = WORDS[i % len(WORDS)]
        out.append(word)
        chars += len(word) + 1
        i += 1
    return " ".join(out)


@dataclass
class Sent:
    """One request the fake model answered."""

    kind: str
    """`step`, `compaction` or `title`."""
    input_tokens: int


@dataclass
class LongChatModel:
    """The responder: usage from the request size, short summaries, ~N-token replies."""

    reply_tokens: int
    sent: list[Sent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: FakeRequest) -> FakeResponse:
        """Answer one request (runs in the fake provider's thread)."""
        body = request.body
        tokens = len(json.dumps(body)) // 4
        system = json.dumps(body.get("system", ""))
        if COMPACTION_MARK in system:
            kind, text = "compaction", "Summary: " + _text(100, len(self.sent))
        elif TITLE_INSTRUCTIONS[:40] in system:
            kind, text = "title", "A long chat"
        else:
            kind, text = "step", _text(self.reply_tokens, len(self.sent))
        with self._lock:
            self.sent.append(Sent(kind, tokens))
        return FakeResponse(
            parts=[FakeText(text=text, chunk_size=64)], usage=FakeUsage(input_tokens=tokens)
        )


@dataclass
class TurnRun:
    """One turn's run and what its history holds."""

    index: int
    run_id: str
    model_steps: int = 0
    compactions: int = 0
    events: int = 0
    proto_bytes: int = 0
    kinds: tuple[int, ...] = ()

    @property
    def per_step(self) -> float:
        return self.proto_bytes / max(1, self.model_steps)


def _is_final(event: SseEvent) -> bool:
    return event.event == "status" and event.data.get("status") in ("waiting", "error")


def _activity_counts(history: WorkflowHistory) -> tuple[int, int]:
    """(model steps, compactions) scheduled in a run."""
    steps = compactions = 0
    for e in history.events:
        if e.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        name = e.activity_task_scheduled_event_attributes.activity_type.name
        steps += name == "stream_model_step"
        compactions += name == "compact_context"
    return steps, compactions


async def run_chat(stack: BenchStack, args: argparse.Namespace, model: str) -> list[TurnRun]:
    """Create the chat, run the turns one after another; the run of each turn."""
    chat_id = await stack.create_chat(
        model={"provider": "anthropic", "name": model, "context_limit": args.context_limit}
    )
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    runs: list[TurnRun] = []
    async with stack.listen(chat_id) as sse:
        for i in range(args.turns):
            sse.drain()
            await stack.send(chat_id, f"Turn {i}. " + _text(args.user_tokens, i))
            final = await sse.until(_is_final, within_s=120)
            if final.data["status"] != "waiting":
                raise RuntimeError(f"turn {i} ended {final.data}")
            await handle.result()
            runs.append(TurnRun(i, (await handle.describe()).run_id))
            if (i + 1) % 25 == 0:
                say(f"{i + 1}/{args.turns} turns")
    rows = await stack.pool.fetchval(
        "SELECT count(*) FROM messages WHERE chat_id = $1", uuid.UUID(chat_id)
    )
    say(f"chat {chat_id}: {rows} stored messages (summaries included)")
    for run in runs:
        history = await stack.temporal.get_workflow_handle(
            workflow_id(chat_id), run_id=run.run_id
        ).fetch_history()
        run.model_steps, run.compactions = _activity_counts(history)
        run.events = len(history.events)
        run.proto_bytes = payload_bytes(history)
        run.kinds = event_kinds(history)
    return runs


def _series(values: list[int], points: int = 15) -> str:
    step = max(1, len(values) // points)
    return " ".join(str(v) for v in values[::step])


def _history_growth(plain: list[TurnRun]) -> float:
    """Print the plain turns' history bytes per step; the last tenth's growth over the first
    tenth's, of the runs that took the most common path (NaN, which fails the check, when
    no turn after the first ran without a compaction)."""
    if not plain:
        print("  no turn after the first ran without a compaction: nothing to compare")
        return math.nan
    path = Counter(r.kinds for r in plain).most_common(1)[0][0]
    other = [r.index for r in plain if r.kinds != path]
    if other:
        print(f"  turns {other} took another path (other events): compared without them")
        plain = [r for r in plain if r.kinds == path]
    tenth = max(1, len(plain) // 10)
    first = statistics.mean(r.per_step for r in plain[:tenth])
    last = statistics.mean(r.per_step for r in plain[-tenth:])
    growth = (last - first) / first
    per_step = [round(r.per_step) for r in plain]
    print(f"  turns without compaction: {_series(per_step)}")
    print(f"    min {min(per_step)}, max {max(per_step)}, first tenth {first:.0f}, last tenth "
          f"{last:.0f} ({growth:+.1%}; target within {FLAT_WITHIN:.0%})")  # fmt: skip
    return growth


def report(sent: list[Sent], runs: list[TurnRun], args: argparse.Namespace) -> bool:
    """Print the figures; whether both checks pass."""
    steps = [s.input_tokens for s in sent if s.kind == "step"]
    compactions = [s.input_tokens for s in sent if s.kind == "compaction"]
    threshold = round(args.context_limit * 0.7)
    print(
        f"\n=== long chat: {args.turns} turns ({2 * args.turns} messages), context limit "
        f"{args.context_limit} tokens (compact at {threshold}) ==="
    )
    print(f"compactions: {len(compactions)} (requests of {_series(compactions, 10)} tokens); "
          f"in history: {sum(r.compactions for r in runs)}")  # fmt: skip
    turns_with = [r.index for r in runs if r.compactions]
    print(f"turns that compacted: {turns_with} (such a turn has 2 model steps: the model goes on "
          "after the summary)")  # fmt: skip
    print(f"input tokens per model step, every {max(1, len(steps) // 15)}th: {_series(steps)}")
    print(f"  min {min(steps)}, max {max(steps)}, last {steps[-1]}, n={len(steps)}")
    kinds = [s.kind for s in sent]
    first_c = kinds.index("compaction") if "compaction" in kinds else len(kinds)
    after_first = [s.input_tokens for s in sent[first_c + 1 :] if s.kind == "step"]
    over = [t for t in steps if t > args.context_limit]
    print(
        f"  after the first compaction: max {max(after_first, default=0)}; "
        f"steps over the {args.context_limit}-token limit: {len(over)}"
    )
    # Turn 0 also starts the title activity: compare the turns after it.
    plain = [r for r in runs if not r.compactions and r.model_steps and r.index > 0]
    with_c = [r for r in runs if r.compactions]
    print("\nTemporal history bytes (protobuf, less the workflow tasks' own events) per model "
          "step, each turn's run:")  # fmt: skip
    growth = _history_growth(plain)
    if with_c:
        print(
            "  turns with a compaction: "
            + ", ".join(
                f"#{r.index} {r.proto_bytes} B = {r.per_step:.0f} B/step ({r.model_steps} steps, "
                f"{r.events} events)"
                for r in with_c
            )
        )
    events = sorted({r.events for r in plain})
    print(f"  events per plain run: {events}")
    tokens_ok = not over and bool(compactions)
    flat = abs(growth) <= FLAT_WITHIN
    print(
        f"\nchecks: context {'BOUNDED' if tokens_ok else 'EXCEEDED (or never compacted)'}, "
        f"history {'FLAT' if flat else 'GROWS' if not math.isnan(growth) else 'NOT MEASURED'}"
    )
    return tokens_ok and flat


async def run(args: argparse.Namespace) -> bool:
    """Bring the stack up, run the chat, report, tear down."""
    model = f"bench-long-{uuid.uuid4().hex[:6]}"
    responder = LongChatModel(args.reply_tokens)
    async with _stack.services() as svc, _stack.running_stack(svc) as stack:
        svc.fake.script(model, responder)
        say(f"stack up; {args.turns} turns")
        started = time.perf_counter()
        runs = await run_chat(stack, args, model)
        say(f"chat done in {time.perf_counter() - started:.1f}s")
    return report(responder.sent, runs, args)


def main() -> None:
    """Parse options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=150, help="user turns (default 150)")
    parser.add_argument("--context-limit", type=int, default=20_000)
    parser.add_argument("--reply-tokens", type=int, default=200, help="per model answer")
    parser.add_argument("--user-tokens", type=int, default=100, help="per user message")
    args = parser.parse_args()
    sys.exit(0 if asyncio.run(run(args)) else 1)


if __name__ == "__main__":
    main()
