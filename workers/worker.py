"""Builds the ChatTurn worker and runs it until SIGINT/SIGTERM (graceful shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import (
    Plugin,
    Replayer,
    ReplayerConfig,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowReplayResult,
)
from temporalio.worker import WorkerConfig as TemporalWorkerConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.agents import AgentActivities
from activities.approvals import ApprovalActivities
from activities.compaction import CompactionActivities
from activities.model_step import ModelStepActivities, StreamTimeouts
from activities.spend import SpendActivities
from activities.tools import ToolActivities
from activities.turn import TurnActivities, TurnLifecycleWrites
from activities.webhooks import WebhookActivities
from chatd.heap import freeze_startup_objects
from chatd.mcp.config import McpConfig, mcp_config_from_env
from chatd.prices import Prices, load_prices
from chatd.providers import import_sdks
from chatd.reconciler import Reconciler
from chatd.retention import Retention, RetentionSettings
from chatd.settings import (
    ProviderSettings,
    ReconcilerSettings,
    worker_max_activities,
    workflow_sandbox_enabled,
)
from chatd.store.db import connect_pool
from chatd.store.listen_hub import ListenHub
from chatd.store.turns import INTERRUPT_CHANNEL
from chatd.subagents import SubagentSettings
from chatd.tool_policy import PolicyDecision, operator_policy_from_env
from chatd.tools.agents import agent_tools
from chatd.tools.base import ToolRegistry
from chatd.tools.catalog import ToolCatalog
from chatd.webhooks.delivery import WebhookSettings
from workflows.chat_turn import ChatTurn
from workflows.summarise_window import SummariseWindow
from workflows.webhook_delivery import WebhookFanout, WebhookReplay

if TYPE_CHECKING:
    from chatd.mcp.client import McpClients

__all__ = ["WorkerConfig", "build_worker", "run_until_signalled", "tuned_worker"]

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
    max_concurrent_activities: int = field(default_factory=worker_max_activities)
    """Activities in hand at once. Tasks polled beyond what the event loop keeps up with
    wait inside the worker with their clocks running: a streaming step taken too late misses
    its first heartbeat and is timed out before it ran. The rest wait at the server, where
    waiting costs nothing."""
    max_concurrent_workflow_tasks: int = 100
    """Workflow tasks polled or in hand: each poll holds one, so a few are too few."""
    workflow_threads: int = 2
    """Threads that run workflow tasks, sharing the GIL with the event loop that runs the
    activities: one more than can run at once only takes turns from the loop, whose
    streaming steps then beat late and are timed out while alive. Tasks in hand wait for a
    thread instead (one takes milliseconds)."""
    max_cached_workflows: int = 5000
    """More than the turns a worker runs at once: a run evicted mid-turn is replayed from its
    whole history at its next workflow task, work that a burst can't afford."""
    sticky_queue_timeout: timedelta = timedelta(seconds=2)
    """How long a turn's next workflow task waits for this worker before any worker may take
    it (a dead worker's turn stalls this long)."""
    workflow_sandbox: bool = field(default_factory=workflow_sandbox_enabled)
    """Whether workflow code runs in Temporal's sandbox (`CHATD_WORKFLOW_SANDBOX`)."""
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
    prices: Prices = field(default_factory=load_prices)
    """What each model's tokens cost: the shipped table and `CHATD_PRICES`."""


def _mcp_clients(config: McpConfig) -> McpClients | None:
    """The worker's MCP sessions, or None when it has no MCP servers: the MCP SDK takes
    longer to import than the rest of the worker, so only a worker that uses it loads it."""
    if not config.servers:
        return None
    from chatd.mcp.client import McpClients

    return McpClients(config)


def build_worker(
    client: Client,
    pool: asyncpg.Pool,
    config: WorkerConfig,
    *,
    delta_pool: asyncpg.Pool | None = None,
    interrupts: ListenHub | None = None,
) -> Worker:
    """A worker for ChatTurn and all its activities.

    `delta_pool` (one connection is enough: deltas are written one batch at a time) keeps
    streamed deltas from queueing behind transcript queries when `pool` is busy.
    `interrupts`, a started hub on `INTERRUPT_CHANNEL` (see `listen_for_interrupts`), stops a
    streaming step as soon as the gateway announces an interrupt, not at its next heartbeat.
    The configured providers' SDKs are imported here, before the worker serves a step.
    """
    import_sdks(config.providers)
    edges = TurnLifecycleWrites(pool, config.providers)
    mcp = _mcp_clients(config.mcp)
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
        workspace_root=config.workspace_root,
        prices=config.prices,
        delta_pool=delta_pool,
        interrupts=interrupts,
    )
    tools = ToolActivities(pool, catalog, config.workspace_root)
    approvals = ApprovalActivities(pool, catalog)
    spend = SpendActivities(pool)
    agents = AgentActivities(pool, client)
    turn = TurnActivities(pool, edges)
    compaction = CompactionActivities(
        pool, config.providers, generate_titles=config.generate_titles, prices=config.prices
    )
    webhooks = WebhookActivities(pool, config.webhooks)
    return tuned_worker(
        client,
        config,
        workflows=[ChatTurn, SummariseWindow, WebhookFanout, WebhookReplay],
        activities=[
            model.stream_model_step,
            tools.execute_tool_call,
            tools.record_tool_results,
            tools.stage_tool_results,
            approvals.stage_tool_decisions,
            spend.decide_budget,
            agents.check_agents,
            agents.interrupt_children,
            turn.begin_turn,
            turn.finish_turn,
            turn.set_status,
            turn.publish_retry,
            compaction.compact_context,
            compaction.summarise_window,
            compaction.generate_title,
            webhooks.record_webhook_deliveries,
            webhooks.deliver_webhook,
        ],
        background=[
            Reconciler(pool, client, config.reconciler, config.task_queue),
            Retention(pool, config.retention, config.workspace_root),
            *([McpConnections(mcp)] if mcp else []),
        ],
    )


def tuned_worker(
    client: Client,
    config: WorkerConfig,
    *,
    workflows: Sequence[type],
    activities: Sequence[Callable[..., Any]],
    background: Sequence[Background] = (),
) -> Worker:
    """A worker on `config.task_queue` with the turn worker's slots, threads, cache and
    heartbeat settings: `build_worker`'s, and a benchmark floor's measured like it."""
    workflow_threads = ThreadPoolExecutor(config.workflow_threads, "workflow-task")
    return Worker(
        client,
        task_queue=config.task_queue,
        workflows=workflows,
        activities=activities,
        # Cancellation (interrupts) reaches an activity with its next heartbeat.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        graceful_shutdown_timeout=config.graceful_shutdown,
        max_concurrent_activities=config.max_concurrent_activities,
        max_concurrent_workflow_tasks=config.max_concurrent_workflow_tasks,
        workflow_task_executor=workflow_threads,
        workflow_runner=(
            SandboxedWorkflowRunner() if config.workflow_sandbox else UnsandboxedWorkflowRunner()
        ),
        max_cached_workflows=config.max_cached_workflows,
        sticky_queue_schedule_to_start_timeout=config.sticky_queue_timeout,
        plugins=[BackgroundPlugin(*background, ThreadsShutDown(workflow_threads))],
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


class ThreadsShutDown:
    """Shuts down the worker's workflow threads once it stopped (an executor the worker was
    given is the giver's to shut down)."""

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self._executor = executor

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self._executor.shutdown(wait=False)


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
async def listen_for_interrupts(database_url: str) -> AsyncIterator[ListenHub]:
    """The worker's listener for interrupt announcements, for `build_worker(interrupts=)`.

    A notification missed while reconnecting costs nothing but speed: the workflow's
    cancellation still reaches the step with its next heartbeat.
    """
    hub = ListenHub(database_url, INTERRUPT_CHANNEL, wake_all_on_reconnect=False)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


@contextlib.asynccontextmanager
async def assembled_worker(
    database_url: str, client: Client, config: WorkerConfig
) -> AsyncIterator[Worker]:
    """The worker `chatd worker` and `chatd dev` run, not yet polling: its pools, its
    interrupt listener, and the SDKs imported and the startup heap frozen (`chatd.heap`)
    before it serves a chat."""
    async with contextlib.AsyncExitStack() as stack:
        pool = await connect_pool(database_url)
        stack.push_async_callback(pool.close)
        delta_pool = await connect_pool(database_url, min_size=1, max_size=1)
        stack.push_async_callback(delta_pool.close)
        interrupts = await stack.enter_async_context(listen_for_interrupts(database_url))
        worker = build_worker(client, pool, config, delta_pool=delta_pool, interrupts=interrupts)
        freeze_startup_objects()
        yield worker


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
