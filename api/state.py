"""What the gateway's request handlers share: stores, the Temporal client, the event hub,
the quota gates."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import asyncpg
from starlette.requests import HTTPConnection
from temporalio.client import Client

from api.hand_overs import HandOvers
from api.open_responses.sealing import CompactionSeal
from api.quotas import ChatSends, KeyGate, LimitsCache, MessageGate, StreamSlots
from api.shutdown import GatewayShutdown
from api.stream_reads import SharedReads
from chatd.codec import KEYS_ENV, CodecKeys
from chatd.models import ModelConfig
from chatd.prices import Prices, load_prices
from chatd.store.chats import ChatStore
from chatd.store.events import EventLog
from chatd.store.keys import KeyStore
from chatd.store.listen_hub import ListenHub
from chatd.store.quotas import QuotaStore
from chatd.store.responses import ResponseStore
from chatd.store.spend import SpendStore
from chatd.store.tool_decisions import ToolDecisionStore
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore

__all__ = ["GatewayState", "state_of"]


@dataclass
class GatewayState:
    """Long-lived resources of one gateway process."""

    pool: asyncpg.Pool
    stream_pool: asyncpg.Pool
    """For the chat streams' reads alone: under a burst they would hold every connection of
    `pool`, and each send's queries would wait behind them."""
    temporal: Client
    task_queue: str
    hub: ListenHub
    generate_titles: bool = True
    mcp_servers: frozenset[str] = frozenset()
    """Names of the operator's MCP servers, which a chat may select."""
    model_aliases: dict[str, ModelConfig] = field(default_factory=dict)
    """The operator's names for models (`CHATD_MODEL_ALIASES`), for Open Responses' `model`."""
    shutdown: GatewayShutdown = field(default_factory=GatewayShutdown)
    """Started when the server stops: streams end then (`api.shutdown`)."""
    prices: Prices = field(default_factory=load_prices)
    """What models cost (`CHATD_PRICES`): a budget is refused on a model with no price."""

    def __post_init__(self) -> None:
        self.chats = ChatStore(self.pool)
        self.transcript = TranscriptStore(self.pool)
        self.turns = TurnStore(self.pool)
        self.events = EventLog(self.stream_pool)
        self.stream_reads = SharedReads(self.events, self.hub.recent)
        self.keys = KeyStore(self.pool)
        self.decisions = ToolDecisionStore(self.pool)
        quotas = QuotaStore(self.pool)
        limits = LimitsCache(quotas)
        self.key_gate = KeyGate(limits)
        self.message_gate = MessageGate(quotas, limits)
        self.chat_sends = ChatSends()
        self.hand_overs = HandOvers()
        self.stream_slots = StreamSlots(quotas, limits)
        self.responses = ResponseStore(self.pool)
        self.spend = SpendStore(self.pool)
        self._seal: CompactionSeal | None = None

    async def compaction_seal(self) -> CompactionSeal:
        """What seals and opens `compaction` items (loaded on first use)."""
        if self._seal is None:
            codec_keys = os.environ.get(KEYS_ENV, "").strip()
            self._seal = await CompactionSeal.load(
                self.pool, CodecKeys.parse(codec_keys) if codec_keys else None
            )
        return self._seal


def state_of(connection: HTTPConnection) -> GatewayState:
    """The gateway state of the app serving a request or a WebSocket."""
    state: GatewayState = connection.app.state.gateway
    return state
