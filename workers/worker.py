"""Builds the ChatTurn worker and runs it until SIGINT/SIGTERM (graceful shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Protocol

import asyncpg
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import (
    Plugin,
    Replayer,
    ReplayerConfig,
    Worker,
    WorkflowReplayResult,
)
from temporalio.worker import WorkerConfig as TemporalWorkerConfig

from activities.agents import AgentActivities
from activities.approvals import ApprovalActivities
from activities.compaction import CompactionActivities
from activities.model_step import ModelStepActivities, StreamTimeouts
from activities.tools import ToolActivities
from activities.turn import TurnActivities, TurnEdges
from activities.webhooks import WebhookActivities
from chatd.mcp.client import McpClients
from chatd.mcp.config import McpConfig, mcp_config_from_env
from chatd.reconciler import Reconciler
from chatd.retention import Retention, RetentionSettings
from chatd.settings import ProviderSettings, ReconcilerSettings
from chatd.store.hub import NotifyHub
from chatd.store.turns import INTERRUPT_CHANNEL
from chatd.subagents import SubagentSettings
from chatd.tool_policy import PolicyDecision, operator_policy_from_env
from chatd.tools.agents import agent_tools
from chatd.tools.base import ToolRegistry
from chatd.tools.catalog import ToolCatalog
from chatd.webhooks.delivery import WebhookSettings
from workflows.chat_turn import ChatTurn
from workflows.webhook_delivery import WebhookFanout, WebhookReplay

__all__ = ["WorkerConfig", "build_worker", "run_until_signalled"]

log = logging.getLogger("chatd.worker")
HEARTBEAT_THROTTLE = timedelta(milliseconds=500)


@dataclass
class WorkerConfig:
    """What a worker needs besides its connections."""

    task_queue: str
    providers: ProviderSettings
    registry: ToolRegistry
    workspace_root: Path
    graceful_shutdown: timedelta = timedelta(seconds=10)
    max_concurrent_activities: int = 1000
    stream_timeouts: StreamTimeouts = field(default_factory=StreamTimeouts)
    generate_titles: bool = True
    reconciler: ReconcilerSettings = field(default_factory=ReconcilerSettings.from_env)
    retention: RetentionSettings = field(default_factory=RetentionSettings.from_env)
    mcp: McpConfig = field(default_factory=mcp_config_from_env)
    """The operator's MCP servers (`CHATD_MCP_CONFIG`), variables resolved."""
    tool_policy: dict[str, PolicyDecision] = field(default_factory=operator_policy_from_env)
    """The operator's default approval policy (`CHATD_TOOL_POLICY`)."""
    subagents: SubagentSettings = field(default_factory=SubagentSettings.from_env)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings.from_env)
    """How webhooks are delivered (`CHATD_WEBHOOK_*`)."""


def build_worker(
    client: Client,
    pool: asyncpg.Pool,
    config: WorkerConfig,
    *,
    delta_pool: asyncpg.Pool | None = None,
    interrupts: NotifyHub | None = None,
) -> Worker:
    """A worker for ChatTurn and all its activities.

    `delta_pool` (one connection is enough: deltas are written one batch at a time) keeps
    streamed deltas from queueing behind transcript queries when `pool` is busy.
    `interrupts`, a started hub on `INTERRUPT_CHANNEL` (see `listen_for_interrupts`), stops a
    streaming step as soon as the gateway announces an interrupt, not at its next heartbeat.
    """
    edges = TurnEdges(pool, config.providers)
    mcp = McpClients(config.mcp)
    registry = ToolRegistry.of(
        [
            *config.registry.tools.values(),
            *agent_tools(pool, client, config.task_queue, config.subagents),
        ]
    )
    catalog = ToolCatalog(pool, registry, mcp, config.tool_policy, config.subagents)
    model = ModelStepActivities(
        pool,
        catalog,
        config.providers,
        edges,
        config.stream_timeouts,
        delta_pool=delta_pool,
        interrupts=interrupts,
    )
    tools = ToolActivities(pool, catalog, config.workspace_root)
    approvals = ApprovalActivities(pool, catalog)
    agents = AgentActivities(pool, client)
    turn = TurnActivities(pool, edges)
    compaction = CompactionActivities(
        pool, config.providers, generate_titles=config.generate_titles
    )
    webhooks = WebhookActivities(pool, config.webhooks)
    return Worker(
        client,
        task_queue=config.task_queue,
        workflows=[ChatTurn, WebhookFanout, WebhookReplay],
        activities=[
            model.stream_model_step,
            tools.execute_tool_call,
            tools.record_tool_results,
            tools.stage_tool_results,
            approvals.stage_tool_decisions,
            agents.check_agents,
            agents.interrupt_children,
            turn.begin_turn,
            turn.finish_turn,
            turn.set_status,
            turn.publish_retry,
            compaction.compact_context,
            compaction.generate_title,
            webhooks.record_webhook_deliveries,
            webhooks.deliver_webhook,
        ],
        # Cancellation (interrupts) reaches an activity with its next heartbeat.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        graceful_shutdown_timeout=config.graceful_shutdown,
        max_concurrent_activities=config.max_concurrent_activities,
        max_concurrent_workflow_tasks=200,
        # A dead worker's sticky queue would hold the turn's next workflow task this long.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
        plugins=[
            BackgroundPlugin(
                Reconciler(pool, client, config.reconciler),
                Retention(pool, config.retention, config.workspace_root),
                McpConnections(mcp),
            )
        ],
    )


class Background(Protocol):
    """Work a worker does beside its tasks: the reconciler, retention."""

    def running(self) -> AbstractAsyncContextManager[None]:
        """Run in the background for the duration of the block."""
        ...


class McpConnections:
    """Closes the worker's MCP sessions (stdio servers are its child processes) when the
    worker stops."""

    def __init__(self, clients: McpClients) -> None:
        self._clients = clients

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self._clients.aclose()


class BackgroundPlugin(Plugin):
    """Runs background work for as long as the worker runs (`async with worker` or `run()`)."""

    def __init__(self, *services: Background) -> None:
        self._services = services

    def configure_worker(self, config: TemporalWorkerConfig) -> TemporalWorkerConfig:
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        async with contextlib.AsyncExitStack() as stack:
            for service in self._services:
                await stack.enter_async_context(service.running())
            await next(worker)

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        return config

    def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[WorkflowHistory],
        next: Callable[
            [Replayer, AsyncIterator[WorkflowHistory]],
            AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]],
        ],
    ) -> AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]]:
        return next(replayer, histories)


@contextlib.asynccontextmanager
async def listen_for_interrupts(database_url: str) -> AsyncIterator[NotifyHub]:
    """The worker's listener for interrupt announcements, for `build_worker(interrupts=)`.

    A notification missed while reconnecting costs nothing but speed: the workflow's
    cancellation still reaches the step with its next heartbeat.
    """
    hub = NotifyHub(database_url, INTERRUPT_CHANNEL, wake_all_on_reconnect=False)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


async def run_until_signalled(worker: Worker) -> None:
    """Run the worker; SIGINT/SIGTERM shut it down gracefully (in-flight attempts move on)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info("worker polling task queue %s", worker.task_queue)
        await stop.wait()
        log.info("worker shutting down")
