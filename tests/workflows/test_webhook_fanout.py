"""The webhook workflows on the time-skipping server, with fake activities under the real
names: a fanout delivers each recorded delivery, retrying one that fails after the delay it
asked for; one delivery out of attempts fails neither the fanout nor the others; a turn
starts the fanout without waiting for it, once per event; a replay is one attempt."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from time_skipping import time_skipping_server

from workflows.webhook_delivery import (
    DELIVERY_RETRY,
    WebhookFanout,
    WebhookReplay,
    fanout_workflow_id,
    start_deliveries,
)
from workflows.webhook_payloads import (
    DeliverWebhookInput,
    DeliverWebhookResult,
    RecordDeliveriesInput,
    RecordDeliveriesResult,
    WebhookFanoutInput,
    WebhookReplayInput,
)


class FakeWebhookActivities:
    """`record_webhook_deliveries` records deliveries `a` and `b`; `deliver_webhook` fails
    each delivery as many times as `failures` says (with a 30 s retry delay) then succeeds."""

    def __init__(
        self, failures: dict[str, int] | None = None, retry_delay: timedelta = timedelta(seconds=30)
    ) -> None:
        self.failures = failures or {}
        self.retry_delay = retry_delay
        """What a failed attempt asks to wait (the server's timer)."""
        self.records: list[RecordDeliveriesInput] = []
        self.attempts: Counter[str] = Counter()
        self.replays: list[str] = []
        self.gate: asyncio.Event | None = None
        """Set: each delivery waits for it to open."""

    @activity.defn(name="record_webhook_deliveries")
    async def record(self, input: RecordDeliveriesInput) -> RecordDeliveriesResult:
        self.records.append(input)
        return RecordDeliveriesResult(delivery_ids=["a", "b"])

    @activity.defn(name="deliver_webhook")
    async def deliver(self, input: DeliverWebhookInput) -> DeliverWebhookResult:
        self.attempts[input.delivery_id] += 1
        if self.gate is not None:
            await self.gate.wait()
        if input.replay:
            self.replays.append(input.delivery_id)
        if self.attempts[input.delivery_id] <= self.failures.get(input.delivery_id, 0):
            raise ApplicationError(
                "HTTP 500", type="WebhookAttemptFailed", next_retry_delay=self.retry_delay
            )
        return DeliverWebhookResult(status="succeeded")


@workflow.defn(name="TurnThatEnds")
class TurnThatEnds:
    """Stands in for ChatTurn: announces its end twice (a retried end) and completes."""

    @workflow.run
    async def run(self, chat_id: str) -> None:
        await start_deliveries(chat_id, "turn-1", "turn.completed")
        await start_deliveries(chat_id, "turn-1", "turn.completed")


def _worker(client: Client, fakes: FakeWebhookActivities) -> Worker:
    return Worker(
        client,
        task_queue=f"wh-{uuid.uuid4().hex[:12]}",
        workflows=[WebhookFanout, WebhookReplay, TurnThatEnds],
        activities=[fakes.record, fakes.deliver],
    )


def _fanout(event: str = "turn.failed") -> WebhookFanoutInput:
    return WebhookFanoutInput(chat_id=str(uuid.uuid4()), turn_id="turn-1", event=event)  # type: ignore[arg-type]


async def test_a_fanout_retries_a_failing_delivery_after_its_delay() -> None:
    """On a server of its own: its 30 s delays are skipped only if no other test holds the
    shared server's time locked."""
    fakes = FakeWebhookActivities({"a": 2})
    async with time_skipping_server() as env:
        async with _worker(env.client, fakes) as worker:
            input = _fanout()
            handle = await env.client.start_workflow(
                WebhookFanout.run, input, id=fanout_workflow_id(input), task_queue=worker.task_queue
            )
            await handle.result()
        waits = [
            e.activity_task_scheduled_event_attributes
            async for e in handle.fetch_history_events()
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
    assert fakes.attempts == {"a": 3, "b": 1}
    [record] = fakes.records
    assert (record.event_id, record.event) == (fanout_workflow_id(input), "turn.failed")
    assert len(waits) == 3, "one record, one activity per delivery: retries are the server's"


async def test_a_delivery_out_of_attempts_fails_nothing_else(env_client: Client) -> None:
    # Short waits: seven of them must not depend on the shared server's time skipping,
    # which an earlier test of the session may leave locked.
    fakes = FakeWebhookActivities({"a": 1000}, retry_delay=timedelta(milliseconds=100))
    async with _worker(env_client, fakes) as worker:
        input = _fanout()
        await env_client.execute_workflow(
            WebhookFanout.run, input, id=fanout_workflow_id(input), task_queue=worker.task_queue
        )
    assert fakes.attempts["b"] == 1
    assert fakes.attempts["a"] == DELIVERY_RETRY.maximum_attempts


async def test_a_turn_starts_its_fanout_once_without_waiting(env_client: Client) -> None:
    fakes = FakeWebhookActivities()
    fakes.gate = asyncio.Event()
    chat_id = str(uuid.uuid4())
    async with _worker(env_client, fakes) as worker:
        turn = await env_client.start_workflow(
            TurnThatEnds.run, chat_id, id=f"turn-{chat_id}", task_queue=worker.task_queue
        )
        await turn.result()
        kinds = [e.WhichOneof("attributes") async for e in turn.fetch_history_events()]
        assert "child_workflow_execution_started_event_attributes" in kinds
        assert "child_workflow_execution_completed_event_attributes" not in kinds, (
            "the turn ended before its deliveries did"
        )
        fanout_id = f"webhook-{chat_id}-turn-1-turn.completed"
        fakes.gate.set()
        run_id = (await env_client.get_workflow_handle(fanout_id).describe()).run_id
        await env_client.get_workflow_handle(fanout_id, run_id=run_id).result()
    assert len(fakes.records) == 1, "the second start found the first fanout"
    assert fakes.attempts == {"a": 1, "b": 1}


async def test_a_replay_is_one_attempt(env_client: Client) -> None:
    fakes = FakeWebhookActivities()
    async with _worker(env_client, fakes) as worker:
        await env_client.execute_workflow(
            WebhookReplay.run,
            WebhookReplayInput(delivery_id="a"),
            id=f"webhook-replay-{uuid.uuid4()}",
            task_queue=worker.task_queue,
        )
    assert fakes.replays == ["a"]
