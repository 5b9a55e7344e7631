"""The model-step activity: stream one step, publish its deltas, persist it once.

An interrupt (cancellation requested by the workflow, or announced at once through
Postgres by the gateway that signalled it) persists the partial step and returns it; a
worker shutdown abandons the attempt so another worker retries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.attempt_spend import AttemptSpend
from activities.failures import STEP_ABANDONED, classified_failures, model_failure
from activities.heartbeat import LIVENESS_EVERY_S, first_liveness_beat, heartbeating
from activities.publishing import DeltaPublisher, EventBatcher
from activities.tools import run_quick_calls
from activities.turn import TurnLifecycleWrites
from chatd.budgets import BudgetState, StepAllowance, allowance
from chatd.context import estimate_messages_tokens, estimate_tokens
from chatd.models import ModelConfig, ModelError
from chatd.output_format import format_note, misfit
from chatd.parts import (
    Message,
    Part,
    PartDelta,
    TextPart,
    ToolCallPart,
    calls_to_run,
    error_result,
)
from chatd.prices import Prices
from chatd.providers import make_provider
from chatd.providers.base import (
    ModelRequest,
    ProviderError,
    StepAccumulator,
    StepFinish,
    StreamEvent,
    default_output_tokens,
)
from chatd.settings import ProviderSettings
from chatd.store.chats import ChatRecord
from chatd.store.events import EventLog
from chatd.store.listen_hub import ListenHub
from chatd.store.spend import AttemptKey, SpendStore
from chatd.store.step_inputs import StepInputs, read_step_inputs
from chatd.store.step_keys import StepKey, stored_key
from chatd.store.transcript import NewMessage, StoredMessage, TranscriptStore
from chatd.telemetry import METRICS, TRACER
from chatd.tools.advisor import advisor_gate
from chatd.tools.catalog import ToolCatalog, TurnTools
from workflows.decide import continues_in_activity, step_finishes_turn
from workflows.payloads import BeginTurnResult, StreamStepInput, StreamStepResult
from workflows.tool_batch import INTERRUPTED_RESULT

__all__ = ["ModelStepActivities", "StreamTimeouts"]

T = TypeVar("T")

log = logging.getLogger("chatd.model_step")
_CLIENT_HIDDEN_FIELDS = {"signature"}
"""Provider metadata clients don't need while streaming (it stays in the persisted step)."""
_WORKER_SHUTDOWN = "WorkerShutdown"
"""Raised by `_unless_stopped` when the worker stops mid-stream (`_abandoned` reports it)."""


@dataclass(frozen=True)
class StreamTimeouts:
    """How long a stream may stay silent before the attempt is retried."""

    startup_s: float = 60.0
    """Until the first stream event."""
    stall_s: float = 60.0
    """Between two events once streaming."""


class ModelStepActivities:
    """Streams model steps with this worker's provider credentials."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        catalog: ToolCatalog,
        settings: ProviderSettings,
        edges: TurnLifecycleWrites,
        timeouts: StreamTimeouts | None = None,
        *,
        workspace_root: Path,
        prices: Prices | None = None,
        delta_pool: asyncpg.Pool | None = None,
        interrupts: ListenHub | None = None,
    ) -> None:
        """`interrupts` (on `turns.INTERRUPT_CHANNEL`) lets a streaming step stop as soon as
        the gateway announces an interrupt; without it, the next heartbeat brings it.
        `workspace_root` is where the quick tools a step runs itself find their chat's
        workspace (as `ToolActivities`)."""
        self._interrupts = interrupts
        self._workspace_root = workspace_root
        self._edges = edges
        self._pool = pool
        self._transcript = TranscriptStore(pool)
        self._spend = SpendStore(pool)
        self._prices = prices or Prices()
        self._events = EventLog(delta_pool or pool)
        self._shared_batcher: EventBatcher | None = None
        self._catalog = catalog
        self._settings = settings
        self._timeouts = timeouts or StreamTimeouts()

    @activity.defn(name="stream_model_step")
    async def stream_model_step(self, input: StreamStepInput) -> StreamStepResult:
        """Generate step `input.step` from the persisted transcript (once: retries reuse it).

        With `input.begin` it begins the turn first; with `input.may_finish` a step that ends
        the turn (`decide.ends_turn`) also finishes it.
        """
        started = time.monotonic()
        try:
            async with classified_failures(f"model step {input.step}"):
                return await self._stream_steps(input)
        except asyncio.CancelledError:
            if _interrupted():
                raise
            # The server gave up on this attempt (its heartbeat timed out), or the worker
            # stops: the attempt is retried.
            raise _abandoned(input, started, str(activity.cancellation_details())) from None
        except ApplicationError as err:
            if err.type != _WORKER_SHUTDOWN:
                raise
            raise _abandoned(input, started, "the worker is shutting down") from None

    async def _stream_steps(self, input: StreamStepInput) -> StreamStepResult:
        """Step `input.step`, then each step after one whose calls were all quick, while the
        turn may go on (`decide.continues_in_activity`): a retried attempt finds the steps
        and results saved before, and goes on from the first that is not."""
        # Heartbeats a beat in (a wait for a pooled connection under load must not look like
        # a dead worker) until the last stream ends; the gateway's announcements carry
        # interrupts, heard from the start. Not sooner unless begun late: the server's timeout
        # timer, reset by a beat just after the start, fires about a second late, so an early
        # beat slows the resume of a step killed in its first second (bench/chaos.py).
        async with heartbeating(LIVENESS_EVERY_S, first=first_liveness_beat()):
            with self._interrupt_requests(input.turn_id) as interrupt_requested:
                result, calls = await self._stream_step(input, interrupt_requested)
                began = result.began
                going_on = _going_on(input, began)
                step = input.step
                while (
                    calls is not None
                    and calls.may_run_again
                    and continues_in_activity(
                        result,
                        step=step,
                        steps_before=going_on.steps_before,
                        compact_at_tokens=going_on.compact_at_tokens,
                    )
                ):
                    await _completed_despite_cancel(
                        run_quick_calls(
                            calls.tools,
                            input.turn_id,
                            step,
                            result.tool_calls,
                            calls.parts,
                            self._workspace_root,
                            self._transcript,
                        )
                    )
                    if _stopped(interrupt_requested):
                        result = result.model_copy(update={"interrupted": True})
                        break
                    step += 1
                    following = going_on.model_copy(update={"step": step})
                    result, calls = await self._stream_step(following, interrupt_requested)
        if step == input.step:
            return result
        return result.model_copy(update={"began": began, "step": step})

    async def _stream_step(
        self, input: StreamStepInput, interrupt_requested: asyncio.Event | None
    ) -> tuple[StreamStepResult, _StepCalls | None]:
        """One step, and its calls if it is saved and made some."""
        chat_id = uuid.UUID(input.chat_id)
        async with self._turn_begin(chat_id, input) as (begin, reads):
            # Read while the turn's begin is written: the chat, whether a lost attempt
            # saved this step already, the context (with the turn's message, promoted
            # or not yet) and the budgets.
            inputs = await reads
            chat, done, context = inputs.chat, inputs.saved, inputs.context
            if chat is None:
                if input.begin:  # the begin says why: the chat or its message is gone
                    return StreamStepResult(message_id=None, began=await begin.result()), None
                raise ApplicationError(f"chat {chat_id} not found", non_retryable=True)
            tools = await self._catalog.for_turn(chat, input.turn_id)
            # The request goes out before the begin commits only if the turn's message
            # was still waiting: one deleted from the queue must not cost a request.
            if done is not None or not context.message_waiting:
                if (unbegun := await begin.unbegun()) is not None:
                    return unbegun, None
            if done is not None:
                began = await begin.result()
                summary = await self._checked(
                    tools, input, self._summary(tools, done, interrupted=False), done.parts
                )
                closed = await _completed_despite_cancel(self._close(chat, input, began, summary))
                return closed, _StepCalls.of(tools, done.parts)
            config = _model_in_use(chat, input.model_index)
            request = self._request(tools, config, context.messages, input.opens_response)
            allowed = await self._allowance(request, input, inputs.budgets)
            if allowed.pending is not None:
                if (unbegun := await begin.unbegun()) is not None:
                    return unbegun, None
                began = await begin.result()
                log.info("step paused on a budget: %s", allowed.pending.model_dump_json())
                paused = StreamStepResult(
                    message_id=None, pending_budget=allowed.pending, began=began
                )
                return paused, None
            if allowed.max_output_tokens is not None:
                capped = config.model_copy(update={"max_output_tokens": allowed.max_output_tokens})
                request = request.model_copy(update={"model": capped})
            spend = AttemptSpend(
                self._spend,
                self._prices,
                self._attempt(chat_id, input),
                chat.owner,
                request.model,
                allowed.estimated_input_tokens,
            )
            publisher = DeltaPublisher(self._batcher(), chat_id)
            accumulator = StepAccumulator()
            sent = await self._send(
                tools,
                input,
                begin,
                request,
                spend,
                accumulator,
                publisher,
                interrupt_requested,
            )
            if isinstance(sent, StreamStepResult):
                return sent, None
            began = await begin.result()  # committed before the first delta was published
        # The stream is complete: an interrupt arriving now finds the whole step, kept as is.
        saved = await _completed_despite_cancel(
            self._save_step(tools, input, began, accumulator, sent, publisher, spend)
        )
        return saved, _StepCalls.of(tools, accumulator.parts())

    async def _send(
        self,
        tools: TurnTools,
        input: StreamStepInput,
        begin: _TurnBegin,
        request: ModelRequest,
        spend: AttemptSpend,
        accumulator: StepAccumulator,
        publisher: DeltaPublisher,
        interrupt_requested: asyncio.Event | None,
    ) -> StepFinish | StreamStepResult:
        """Stream the step: its finish, or the partial step an interrupt kept; or, if the
        turn did not begin after all, nothing (the stream is dropped before its first delta
        is published)."""
        if input.attempt > 1 or activity.info().attempt > 1:
            if (unbegun := await begin.unbegun()) is not None:
                return unbegun
            publisher.add("reset", {"turn_id": input.turn_id, "step": input.step})
        spend.estimate()  # written while the request goes out
        log.info(
            "streaming step: chat=%s turn=%s step=%d attempt=%d",
            input.chat_id,
            input.turn_id,
            input.step,
            input.attempt,
        )
        try:
            stream = self._stream(request, accumulator, publisher, begin)
            return await _unless_stopped(stream, interrupt_requested)
        except _NotBegun as not_begun:
            await _completed_despite_cancel(spend.stopped(accumulator))
            return not_begun.result
        except ProviderError as err:
            await publisher.drain()
            await spend.failed(accumulator)
            raise model_failure(err.error) from None  # the classified error says it all
        except _InterruptRequested:
            # The workflow's cancellation follows the announcement (with a heartbeat's
            # answer): it must not cut the partial step's writes short.
            await _completed_despite_cancel(spend.stopped(accumulator))
            return await _completed_despite_cancel(
                self._persist_interrupted(tools, input, begin, accumulator, publisher)
            )
        except asyncio.CancelledError:
            if not _interrupted():
                raise  # shutdown, or this attempt timed out: the retry streams it anew
            # An interrupt: keep what was produced, even if cancelled again meanwhile.
            await _completed_despite_cancel(spend.stopped(accumulator))
            return await _completed_despite_cancel(
                self._persist_interrupted(tools, input, begin, accumulator, publisher)
            )

    @contextlib.asynccontextmanager
    async def _turn_begin(
        self, chat_id: uuid.UUID, input: StreamStepInput
    ) -> AsyncIterator[tuple[_TurnBegin, asyncio.Future[StepInputs]]]:
        """The turn's begin (with `input.begin`) under way, and the step's inputs being read,
        whose chat the begin shares. The begin is not cancelled with the step: it ends before
        the step."""
        reads = asyncio.ensure_future(
            read_step_inputs(
                self._pool,
                chat_id,
                input.turn_id,
                StepKey.assistant(input.step),
                uuid.UUID(input.turn_id) if input.begin else None,
            )
        )
        begin = _TurnBegin(
            self._edges.begin(chat_id, input.turn_id, input.run_id, plan_read=_plan_of(reads))
            if input.begin
            else None
        )
        try:
            yield begin, reads
        finally:
            await begin.ended()

    @contextlib.contextmanager
    def _interrupt_requests(self, turn_id: str) -> Iterator[asyncio.Event | None]:
        """Set when the gateway announces an interrupt of this turn (None: not listening)."""
        try:
            key = uuid.UUID(turn_id)
        except ValueError:  # turn ids are message UUIDs; anything else is never announced
            key = None
        if self._interrupts is None or key is None:
            yield None
            return
        with self._interrupts.subscribe(key) as requested:
            yield requested

    async def _close(
        self,
        chat: ChatRecord,
        input: StreamStepInput,
        began: BeginTurnResult | None,
        result: StreamStepResult,
    ) -> StreamStepResult:
        """Tell the turn's beginning, and finish the turn here if this step ends it."""
        finished = step_finishes_turn(input, began, result)
        if finished:
            await self._edges.finish(chat.id, input.turn_id, "waiting")
        return result.model_copy(update={"began": began, "finished_turn": finished})

    async def _save_step(
        self,
        tools: TurnTools,
        input: StreamStepInput,
        began: BeginTurnResult | None,
        accumulator: StepAccumulator,
        finish: StepFinish,
        publisher: DeltaPublisher,
        spend: AttemptSpend,
    ) -> StreamStepResult:
        """Save the streamed step after its deltas, its settled spend first: a crash between
        the two streams the step again, which is billed again."""
        step = NewMessage(
            StepKey.assistant(input.step),
            "assistant",
            accumulator.parts(),
            finish.usage,
            finish.response_id,
        )
        chat = tools.chat
        unsaved = self._summary(tools, step, interrupted=False, stop_reason=finish.stop_reason)
        unsaved = await self._checked(tools, input, unsaved, step.parts, saving=True)
        if unsaved.format_error is None and step_finishes_turn(input, began, unsaved):
            # A turn's last step, as usual: its last deltas, its spend, the step and the
            # turn's finish in one statement.
            settled = await spend.settling(finish.usage)
            deltas = await publisher.unwritten()
            saved = await self._edges.save_last_step(chat.id, input.turn_id, step, settled, deltas)
            if saved is not None:
                return unsaved.model_copy(
                    update={"message_id": saved.id, "began": began, "finished_turn": True}
                )
            # Saved before, by a lost attempt: its deltas went out then, and these don't.
        else:
            await asyncio.gather(publisher.drain(), spend.settled(finish.usage))
        if unsaved.format_error is not None:
            return await self._save_misfit(tools, input, began, step, unsaved)
        stored = await self._transcript.save(
            chat.id,
            turn_id=input.turn_id,
            step_key=step.step_key,
            role=step.role,
            parts=step.parts,
            usage=step.usage,
            response_id=step.response_id,
        )
        summary = self._summary(tools, stored, interrupted=False, stop_reason=finish.stop_reason)
        return await self._close(chat, input, began, summary)

    async def _checked(
        self,
        tools: TurnTools,
        input: StreamStepInput,
        result: StreamStepResult,
        parts: list[Part],
        *,
        saving: bool = False,
    ) -> StreamStepResult:
        """The result with its final answer checked against the chat's output format: a
        misfit says why, and whether a note asks the model again (the first misfit of the
        turn; with `saving`, the note is to be saved with the step, else it was already)."""
        chat_id = tools.chat.id
        answer_format = tools.chat.model.output_format
        if answer_format is None or result.tool_calls or result.interrupted:
            return result
        text = "".join(p.text for p in parts if isinstance(p, TextPart))
        problem = misfit(answer_format, text)
        if problem is None:
            return result
        if saving:
            earlier = StepKey.format_note(input.step - 1)
            noted = await self._transcript.find(chat_id, input.turn_id, earlier) is None
        else:
            noted = (
                await self._transcript.find(chat_id, input.turn_id, StepKey.format_note(input.step))
                is not None
            )
        return result.model_copy(update={"format_error": problem, "format_note_saved": noted})

    async def _save_misfit(
        self,
        tools: TurnTools,
        input: StreamStepInput,
        began: BeginTurnResult | None,
        step: NewMessage,
        result: StreamStepResult,
    ) -> StreamStepResult:
        """Save a final answer that misses the output format, with the note that asks the
        model to answer again when it gets another try. The turn goes on, or fails."""
        messages = [step]
        if result.format_note_saved:
            note = TextPart(text=format_note(result.format_error or ""))
            messages.append(NewMessage(StepKey.format_note(input.step), "user", [note]))
        saved = await self._transcript.save_step(
            tools.chat.id, turn_id=input.turn_id, messages=messages
        )
        return result.model_copy(update={"message_id": saved[0].id, "began": began})

    def _batcher(self) -> EventBatcher:
        """The worker's one delta writer (made on first use, inside the worker's loop)."""
        if self._shared_batcher is None:
            self._shared_batcher = EventBatcher(self._events)
        return self._shared_batcher

    @staticmethod
    def _request(
        tools: TurnTools, model: ModelConfig, context: list[Message], opens_response: bool
    ) -> ModelRequest:
        """The step's request: its context, the tools it is offered and the system prompt."""
        specs, system = advisor_gate(tools.chat, tools.specs())
        use = tools.chat.tool_use.for_step(opens_response)
        return ModelRequest(
            model=model, system=system, messages=context, tools=use.offered(specs), tool_use=use
        )

    async def _stream(
        self,
        request: ModelRequest,
        accumulator: StepAccumulator,
        publisher: DeltaPublisher,
        begin: _TurnBegin,
    ) -> StepFinish:
        model = request.model.label
        with TRACER.start_as_current_span(
            "provider.stream_step", attributes={"chatd.model": model}
        ) as span:
            events = _classified_stream(
                lambda: make_provider(request.model, self._settings).stream_step(request)
            )
            started, finish, first = time.monotonic(), None, True
            async for event in _with_silence_limits(events, self._timeouts):
                if first:
                    elapsed_ms = (time.monotonic() - started) * 1000
                    METRICS.time_to_first_token.record(elapsed_ms, {"model": model})
                    first = False
                    if (unbegun := await begin.unbegun()) is not None:
                        raise _NotBegun(unbegun)  # no delta of a turn that did not begin
                if isinstance(event, PartDelta):
                    accumulator.apply(event)
                    publisher.add(
                        "message_part", {"role": "assistant", "part": _client_part(event)}
                    )
                else:
                    finish = event
            if finish is None:
                raise ProviderError(
                    ModelError(message="stream ended without a finish event", retryable=True)
                )
            span.set_attribute("chatd.stop_reason", finish.stop_reason)
            _record_usage(model, finish)
            return finish

    async def _allowance(
        self, request: ModelRequest, input: StreamStepInput, budgets: list[BudgetState]
    ) -> StepAllowance:
        """What the budgets allow this step. Under a budget, its input is counted by the
        provider's token counting where it has one; otherwise (and when that fails) it is
        estimated from the request's size."""
        config = request.model
        price = self._prices.of(config)
        counted = None
        if budgets and price is not None:  # the count is a round trip: only when it matters
            counted = await self._counted(request)
        input_tokens = counted if counted is not None else _estimated_input(request)
        return allowance(
            budgets,
            price,
            input_tokens=input_tokens,
            output_tokens=default_output_tokens(config),
            thinking_tokens=config.thinking_budget_tokens or 0,
            step=input.step,
        )

    async def _counted(self, request: ModelRequest) -> int | None:
        """The provider's count of the request's input; None where it has none, and where
        it can't be made (a model it doesn't know, a missing key): sending the step then
        fails with that error, classified, as it always has."""
        try:
            provider = make_provider(request.model, self._settings)
        except ProviderError:
            return None
        return await provider.count_input_tokens(request)

    @staticmethod
    def _attempt(chat_id: uuid.UUID, input: StreamStepInput) -> AttemptKey:
        """This try of the step: the workflow's attempt and Temporal's, which together
        name each request sent."""
        return AttemptKey(
            chat_id=chat_id,
            turn_id=input.turn_id,
            step_key=stored_key(input.turn_id, StepKey.assistant(input.step)),
            attempt=f"{input.attempt}.{activity.info().attempt}",
        )

    async def _persist_interrupted(
        self,
        tools: TurnTools,
        input: StreamStepInput,
        begin: _TurnBegin,
        accumulator: StepAccumulator,
        publisher: DeltaPublisher,
    ) -> StreamStepResult:
        """Persist the partial step and an interrupted result for each of its tool calls
        (none if the turn did not begin after all)."""
        if (unbegun := await begin.unbegun()) is not None:
            return unbegun
        began = await begin.result()
        await publisher.drain()
        parts = accumulator.parts()
        if not parts:
            return StreamStepResult(message_id=None, interrupted=True, began=began)
        calls = calls_to_run(parts)
        messages = [NewMessage(StepKey.assistant(input.step), "assistant", parts)]
        if calls:
            results = [error_result(c, INTERRUPTED_RESULT) for c in calls]
            messages.append(
                NewMessage(StepKey.tool_results(input.step, "tools"), "tool", list(results))
            )
        saved = await self._transcript.save_step(
            tools.chat.id, turn_id=input.turn_id, messages=messages
        )
        return self._summary(tools, saved[0], interrupted=True).model_copy(update={"began": began})

    def _summary(
        self,
        tools: TurnTools,
        message: StoredMessage | NewMessage,
        *,
        interrupted: bool,
        stop_reason: str = "end_turn",
    ) -> StreamStepResult:
        calls = calls_to_run(message.parts)
        usage = message.usage
        return StreamStepResult(
            message_id=message.id if isinstance(message, StoredMessage) else None,
            tool_calls=[tools.classify(c) for c in calls],
            stop_reason="tool_use" if calls else stop_reason,
            input_tokens=(
                usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
                if usage
                else 0
            ),
            output_tokens=usage.output_tokens if usage else 0,
            interrupted=interrupted,
        )


def _estimated_input(request: ModelRequest) -> int:
    """The request's input tokens, estimated from its size (messages, system, tools)."""
    return (
        estimate_messages_tokens(request.messages)
        + estimate_tokens(len(request.system or ""))
        + sum(estimate_tokens(len(t.model_dump_json())) for t in request.tools)
    )


def _model_in_use(chat: ChatRecord, index: int) -> ModelConfig:
    """The model a step streams from: the chat's own (0) or its `index`th fallback."""
    model = chat.model_in_use(index)
    if model is None:
        message = f"the chat has no fallback model {index} (it has {len(chat.fallback_models)})"
        raise ProviderError(ModelError(message=message, kind="config"))
    return model


def _going_on(input: StreamStepInput, began: BeginTurnResult | None) -> StreamStepInput:
    """The input of the steps the activity goes on to: none begins the turn or opens a
    response, and the plan the first step began the turn with (if it did) sets their
    limits."""
    going_on = input.model_copy(update={"begin": False, "run_id": None, "opens_response": False})
    plan = began.plan if began is not None else None
    if plan is None:
        return going_on
    return going_on.model_copy(
        update={
            "compact_at_tokens": plan.compact_at_tokens,
            "steps_before": min(input.steps_before, plan.max_steps),
        }
    )


class _StepCalls(NamedTuple):
    """A saved step's tool calls, with its turn's tools, which would run them."""

    tools: TurnTools
    parts: list[ToolCallPart]

    @classmethod
    def of(cls, tools: TurnTools, parts: list[Part]) -> _StepCalls:
        return cls(tools, calls_to_run(parts))

    @property
    def may_run_again(self) -> bool:
        """Every call's tool is idempotent: a retried attempt runs a saved step's calls
        again. (Whether they are quick is `decide.continues_in_activity`'s to say.)"""
        return all(
            (tool := self.tools.tool(call.name)) is not None and tool.idempotent
            for call in self.parts
        )


def _stopped(interrupt_requested: asyncio.Event | None) -> bool:
    """Whether an interrupt stops the steps going on (asked for by the workflow's cancel, or
    announced). A cancellation that is not an interrupt (a timed-out attempt, a worker
    shutdown) is raised: the attempt is retried, and goes on from the steps saved."""
    if activity.cancellation_details() is not None:
        if not _interrupted():
            raise asyncio.CancelledError
        return True
    return interrupt_requested is not None and interrupt_requested.is_set()


def _interrupted() -> bool:
    """Whether the workflow asked for this cancellation (an interrupt).

    Not a worker shutdown, and not the server giving up on this attempt (heartbeat timeout
    during an outage): keeping the partial step then would cut the answer short.
    """
    details = activity.cancellation_details()
    return (
        details is not None
        and details.cancel_requested
        and not (details.worker_shutdown or details.timed_out or details.not_found)
        and not activity.is_worker_shutdown()
    )


async def _with_silence_limits(
    events: AsyncIterator[StreamEvent], timeouts: StreamTimeouts
) -> AsyncIterator[StreamEvent]:
    """Fail the attempt (retryably) when the stream is silent too long."""
    limit, kind = timeouts.startup_s, "startup_timeout"
    while True:
        try:
            async with asyncio.timeout(limit):
                event = await anext(events)
        except StopAsyncIteration:
            return
        except TimeoutError as err:
            message = f"no stream event within {limit:g}s"
            raise ProviderError(ModelError(message=message, kind=kind, retryable=True)) from err
        yield event
        limit, kind = timeouts.stall_s, "timeout"


async def _completed_despite_cancel(work: Awaitable[T]) -> T:
    """Finish `work` even if the activity is cancelled meanwhile: its result stands."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        return await task


async def _plan_of(reads: Awaitable[StepInputs]) -> tuple[ChatRecord | None, list[str]]:
    """What the begin plans the turn from, of the step's inputs: the chat, and the events
    its owner's webhooks take."""
    inputs = await reads
    return inputs.chat, inputs.webhook_events


class _TurnBegin:
    """A first step's begin of its turn, written while the step's request goes out (the
    request needs only reads): its result is awaited before the step publishes its first
    delta or returns, so no client sees a delta of a turn that did not begin."""

    def __init__(self, write: Awaitable[tuple[ChatRecord | None, BeginTurnResult]] | None) -> None:
        self._write = asyncio.ensure_future(write) if write is not None else None

    async def result(self) -> BeginTurnResult | None:
        """The begin's result, even if the step is cancelled meanwhile; None for a step
        that doesn't begin its turn."""
        if self._write is None:
            return None
        _chat, began = await _completed_despite_cancel(self._write)
        return began

    async def unbegun(self) -> StreamStepResult | None:
        """The step's result if its turn did not begin after all (its message went, or
        another run took it): the step then streams and saves nothing. None otherwise."""
        began = await self.result()
        if began is None or began.started:
            return None
        return StreamStepResult(message_id=None, began=began)

    async def ended(self) -> None:
        """Wait until the write has ended, however the step ends. A failure the step did
        not read (it failed first) is not raised over the step's own."""
        if self._write is None:
            return
        await _completed_despite_cancel(asyncio.wait({self._write}))
        if not self._write.cancelled():
            self._write.exception()


class _NotBegun(Exception):
    """The step's turn did not begin (`_TurnBegin.unbegun`): the stream is dropped before
    its first delta is published."""

    def __init__(self, result: StreamStepResult) -> None:
        super().__init__("the turn did not begin")
        self.result = result


class _InterruptRequested(Exception):
    """The gateway announced an interrupt of this turn while its step ran.

    Unlike a cancellation, it doesn't tell whether the server still knows this attempt: one
    it gave up on (an outage) may save its partial step first. It is an interrupted partial
    step either way, and the step key lets only one be saved.
    """


async def _unless_stopped(
    work: Awaitable[StepFinish], interrupt_requested: asyncio.Event | None
) -> StepFinish:
    """Run the stream, abandoning it if the worker starts shutting down, and stopping it
    (`_InterruptRequested`) if an interrupt is announced first."""
    task: asyncio.Task[StepFinish] = asyncio.ensure_future(work)
    shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    waits: set[asyncio.Future[Any]] = {task, shutdown}
    if interrupt_requested is not None:
        waits.add(asyncio.ensure_future(interrupt_requested.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits - {task}:
            waiting.cancel()
        if not task.done():
            task.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    if interrupt_requested is not None and interrupt_requested.is_set():
        await asyncio.wait({task})  # the stream stops before its partial step is read
        if not task.cancelled():
            task.exception()  # retrieved: whatever ended it, the partial step is kept
        raise _InterruptRequested
    raise ApplicationError("the worker is shutting down", type=_WORKER_SHUTDOWN)


def _abandoned(input: StreamStepInput, started: float, reason: str) -> ApplicationError:
    """The error ending an attempt abandoned for `reason` (not an interrupt): it is retried,
    on another worker if this one stops. One line says so; BENIGN, the SDK logs it at debug,
    not as a crash's traceback."""
    log.warning(
        "step attempt abandoned after %.1fs: chat=%s step=%d attempt=%d reason=%s",
        time.monotonic() - started,
        input.chat_id,
        input.step,
        activity.info().attempt,
        reason,
    )
    return ApplicationError(
        f"model step {input.step} attempt abandoned: {reason}",
        type=STEP_ABANDONED,
        category=ApplicationErrorCategory.BENIGN,
    )


def _record_usage(model: str, finish: StepFinish) -> None:
    METRICS.steps.add(1, {"model": model})
    for kind, count in finish.usage.model_dump().items():
        if count:
            METRICS.tokens.add(count, {"model": model, "kind": kind.removesuffix("_tokens")})


async def _classified_stream(
    open_stream: Callable[[], AsyncIterator[StreamEvent]],
) -> AsyncIterator[StreamEvent]:
    """The provider's stream; a failure before its first event other than a classified
    provider error means the request could not be built or sent, which no retry mends."""
    try:
        events = open_stream()
        first = await anext(events)
    except StopAsyncIteration:
        return
    except (ProviderError, asyncio.CancelledError):
        raise
    except Exception as err:
        log.warning("model request could not be built: %r", err)
        message = f"the model request could not be built: {type(err).__name__}: {err}"
        raise ProviderError(ModelError(message=message[:500], kind="invalid_request")) from err
    yield first
    async for event in events:
        yield event


def _client_part(delta: PartDelta) -> dict[str, Any]:
    return delta.model_dump(exclude_none=True, exclude=_CLIENT_HIDDEN_FIELDS)
