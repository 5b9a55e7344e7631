"""Quotas at the front door: request rate per key, running turns and daily token budgets per
owner, messages queued per chat, open streams per key. Each refusal is a 429 with
`Retry-After`.

The limits live in Postgres (`chatd.store.quotas`), read through a short cache. The request
rate is a token bucket per key in this process: refusing costs no database work, and with N
gateways behind a balancer a key gets up to N times its rate. Running turns, budgets and
stream slots are counted in Postgres, so they hold across gateways.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import asyncpg

from api.background import in_background
from api.errors import ApiError
from chatd.chat_status import BUSY
from chatd.store.chats import ChatRecord
from chatd.store.quotas import Limits, QuotaStore

__all__ = [
    "ChatSends",
    "KeyGate",
    "LimitsCache",
    "MessageGate",
    "StreamSlot",
    "StreamSlots",
    "quota_refusal",
    "too_many_sends",
]

log = logging.getLogger("chatd.api.quotas")

LIMITS_CACHE_S = 10.0
"""How long a gateway uses limits it read: a change in `owner_limits` applies within this."""
BAD_KEY_CACHE_S = 10.0
"""How long a key that failed to authenticate is refused without asking the database."""
MAX_TRACKED_KEYS = 100_000
"""Bound of each per-key table (buckets, failed keys): the oldest entry makes room."""
TURN_RETRY_AFTER_S = 5
"""`Retry-After` of a refused message: when a running turn may have ended, or taken the
chat's queue."""
REFUSAL_PAUSE_S = 0.5
"""How long a request refused by a quota (or for a key that failed lately) waits for its
answer: a client that retries at once, Retry-After unheeded, then waits on each of its
connections instead of costing the gateway a refusal per turn of its loop."""
SENDS_IN_FLIGHT_PER_CHAT = 4
"""Sends to one chat this gateway hands to Temporal at once. Temporal refuses more than 10
concurrent updates of a workflow (after its client has retried each for seconds), so more
are refused here first, at no cost."""
STREAM_SWEEP_S = 2.0
"""How often open streams' keys are re-checked (a revoked key's streams end within this) and
their leases extended."""
STREAM_LEASE = timedelta(seconds=30)
"""How long a stream slot stays taken without being extended (a crashed gateway's)."""


def quota_refusal(
    code: str, message: str, retry_after_s: float, detail: dict[str, Any] | None = None
) -> ApiError:
    """A 429 with the error shape and `Retry-After` (whole seconds, at least 1)."""
    retry_after = max(1, math.ceil(retry_after_s))
    return ApiError(
        429,
        code,
        message,
        {"retry_after_s": retry_after, **(detail or {})},
        headers={"Retry-After": str(retry_after)},
        pause_s=REFUSAL_PAUSE_S,
    )


class _Bounded(dict[str, Any]):
    """A dict that forgets its oldest entry when full."""

    def put(self, key: str, value: Any) -> None:
        if key not in self and len(self) >= MAX_TRACKED_KEYS:
            del self[next(iter(self))]
        self[key] = value


class _TokenBucket:
    """`rate` tokens a second, up to `burst`; one per request."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, limits: Limits, now: float) -> None:
        self.rate = limits.requests_per_s
        self.burst = float(limits.request_burst)
        self.tokens = self.burst
        self.stamp = now

    def take(self, now: float) -> float:
        """Take a token: 0.0, or else the seconds until one is due (nothing taken)."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class LimitsCache:
    """Owners' limits, read from Postgres at most once per `LIMITS_CACHE_S` each."""

    def __init__(self, store: QuotaStore) -> None:
        self._store = store
        self._cached = _Bounded()

    async def of(self, owner: str) -> Limits:
        """The owner's limits as of at most `LIMITS_CACHE_S` ago."""
        now = time.monotonic()
        hit: tuple[float, Limits] | None = self._cached.get(owner)
        if hit is not None and hit[0] > now:
            return hit[1]
        limits = await self._store.limits(owner)
        self._cached.put(owner, (now + LIMITS_CACHE_S, limits))
        return limits


class KeyGate:
    """Per key, answered before any database work: whether it failed to authenticate lately
    (so it is refused without a lookup), and whether it is over its request rate. A key's
    bucket is made on its first authenticated request, sized by its owner's limits."""

    def __init__(self, limits: LimitsCache) -> None:
        self._limits = limits
        self._buckets = _Bounded()
        self._bad = _Bounded()

    def recently_failed(self, key_hash: str) -> bool:
        """Whether the key failed to authenticate within `BAD_KEY_CACHE_S`."""
        failed_until: float | None = self._bad.get(key_hash)
        if failed_until is None:
            return False
        if failed_until > time.monotonic():
            return True
        del self._bad[key_hash]
        return False

    def take(self, key_hash: str) -> None:
        """Count a request of the key; raise the 429 of a key over its rate."""
        bucket: _TokenBucket | None = self._buckets.get(key_hash)
        if bucket is None:
            return
        wait_s = bucket.take(time.monotonic())
        if wait_s:
            raise quota_refusal(
                "rate_limited", f"more than {bucket.rate:g} requests per second on this key", wait_s
            )

    def failed(self, key_hash: str) -> None:
        """The key is unknown or revoked: refuse it without a lookup for a while."""
        self._bad.put(key_hash, time.monotonic() + BAD_KEY_CACHE_S)

    async def authenticated(self, key_hash: str, owner: str) -> None:
        """The key belongs to `owner`: size its bucket by the owner's limits (the first
        request of a key takes its first token here)."""
        limits = await self._limits.of(owner)
        bucket: _TokenBucket | None = self._buckets.get(key_hash)
        if bucket is None:
            bucket = _TokenBucket(limits, time.monotonic())
            bucket.tokens -= 1.0
            self._buckets.put(key_hash, bucket)
        elif (bucket.rate, bucket.burst) != (limits.requests_per_s, limits.request_burst):
            bucket.rate, bucket.burst = limits.requests_per_s, float(limits.request_burst)
            bucket.tokens = min(bucket.tokens, bucket.burst)


class _RunningTurns:
    """An owner's running turns, counted by one query at a time: the sends that arrive while
    it is in flight take its answer. A send after it counts afresh, so a turn that has just
    ended frees its slot at once; a burst of sends costs a few counts, not one each."""

    def __init__(self, store: QuotaStore) -> None:
        self._store = store
        self._counting: dict[str, asyncio.Future[int]] = {}

    async def of(self, owner: str) -> int:
        counting = self._counting.get(owner)
        if counting is None:
            counting = asyncio.ensure_future(self._store.running_turns(owner))
            self._counting[owner] = counting
            counting.add_done_callback(partial(self._forget, owner))
        return await asyncio.shield(counting)

    def _forget(self, owner: str, counting: asyncio.Future[int]) -> None:
        if self._counting.get(owner) is counting:
            del self._counting[owner]
        if not counting.cancelled():
            counting.exception()  # retrieved: every waiter may have gone


class MessageGate:
    """Whether a message may be sent: to an idle chat, if its owner has room for one more
    running turn and tokens left today; to a busy chat, if its queue has room."""

    def __init__(self, store: QuotaStore, limits: LimitsCache) -> None:
        self._store = store
        self._limits = limits
        self._running = _RunningTurns(store)

    async def admit(self, chat: ChatRecord) -> None:
        """Raise a 429 if a message to `chat` would start a turn its owner has no room for,
        or would wait behind the chat's running turn in a full queue.

        Two messages sent at once may both see the last free slot: the counts limit load,
        they are not exact bounds.
        """
        if chat.status in BUSY:
            await self._queue_has_room(chat)
        else:
            await self.admit_turn(chat.owner)

    async def admit_turn(self, owner: str) -> None:
        """Raise a 429 if the owner has no room for one more running turn, or no tokens left
        today."""
        limits = await self._limits.of(owner)
        running = await self._running.of(owner)
        if running >= limits.running_turns:
            raise quota_refusal(
                "too_many_turns",
                f"{running} turns are running; the limit is {limits.running_turns}",
                TURN_RETRY_AFTER_S,
                {"running_turns": running, "limit": limits.running_turns},
            )
        if limits.input_tokens_per_day is None and limits.output_tokens_per_day is None:
            return
        usage = await self._store.usage_today(owner)
        for kind, used, budget in (
            ("input", usage.input_tokens, limits.input_tokens_per_day),
            ("output", usage.output_tokens, limits.output_tokens_per_day),
        ):
            if budget is not None and used >= budget:
                raise quota_refusal(
                    "budget_exhausted",
                    f"today's {kind} token budget ({budget}) is used up; it renews at 00:00 UTC",
                    usage.seconds_to_next_day,
                    {"kind": kind, "used": used, "budget": budget},
                )

    async def _queue_has_room(self, chat: ChatRecord) -> None:
        limits = await self._limits.of(chat.owner)
        queued = await self._store.queued_messages(chat.id)
        if queued >= limits.queued_messages:
            raise quota_refusal(
                "queue_full",
                f"{queued} messages wait for this chat's turn; the limit is"
                f" {limits.queued_messages}",
                TURN_RETRY_AFTER_S,
                {"queued_messages": queued, "limit": limits.queued_messages},
            )


class ChatSends:
    """Sends to each chat in flight in this gateway, bounded per chat."""

    def __init__(self) -> None:
        self._in_flight: collections.Counter[uuid.UUID] = collections.Counter()

    @contextlib.contextmanager
    def slot(self, chat_id: uuid.UUID) -> Iterator[None]:
        """Hold one of the chat's send slots; a 429 if all are taken."""
        if self._in_flight[chat_id] >= SENDS_IN_FLIGHT_PER_CHAT:
            raise too_many_sends()
        self._in_flight[chat_id] += 1
        try:
            yield
        finally:
            self._in_flight[chat_id] -= 1
            if not self._in_flight[chat_id]:
                del self._in_flight[chat_id]


def too_many_sends() -> ApiError:
    """The 429 of a send that found the chat's sends all in flight (here or in Temporal)."""
    return quota_refusal(
        "rate_limited",
        "too many messages are being sent to this chat at once; retry with the same"
        " Idempotency-Key",
        1,
    )


class StreamSlot:
    """One open stream's lease; `ended` once its key is revoked."""

    def __init__(self, lease_id: uuid.UUID, key_hash: str) -> None:
        self.lease_id = lease_id
        self.key_hash = key_hash
        self.ended = False
        self._wake: asyncio.Event | None = None

    def wake_with(self, event: asyncio.Event) -> None:
        """Set `event` when the slot ends (the stream's loop waits on it)."""
        self._wake = event
        if self.ended:
            event.set()

    def end(self) -> None:
        """The key was revoked: the stream must stop."""
        self.ended = True
        if self._wake is not None:
            self._wake.set()


class StreamSlots:
    """Open SSE streams per key, as lease rows every gateway counts. While this gateway has
    streams open, a sweep extends their leases and ends those whose key was revoked."""

    def __init__(self, store: QuotaStore, limits: LimitsCache) -> None:
        self._store = store
        self._limits = limits
        self._open: dict[uuid.UUID, StreamSlot] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def take(self, key_hash: str, owner: str, chat_id: uuid.UUID) -> StreamSlot:
        """A slot for a new stream of this key on the chat; 429 if the key holds all of its
        slots, or all it may hold on one chat."""
        limits = await self._limits.of(owner)
        lease = await self._store.take_stream_lease(key_hash, chat_id, limits, STREAM_LEASE)
        if lease.lease_id is None:
            on_chat = lease.this_chat >= limits.streams_per_chat
            limit = limits.streams_per_chat if on_chat else limits.streams
            where = " on this chat" if on_chat else ""
            raise quota_refusal(
                "too_many_streams",
                f"this key has {limit} streams open{where}, its limit",
                STREAM_SWEEP_S,
                {"limit": limit, "per_chat": on_chat},
            )
        lease_id = lease.lease_id
        slot = StreamSlot(lease_id, key_hash)
        self._open[lease_id] = slot
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep())
        return slot

    def release(self, slot: StreamSlot) -> None:
        """Free the slot of a stream that ended. Synchronous (the stream may be ending by
        cancellation, where awaiting is not possible): the delete runs in a task of its own."""
        if self._open.pop(slot.lease_id, None) is None:
            return
        in_background(self._store.release_stream_lease(slot.lease_id), "releasing a stream slot")

    async def _sweep(self) -> None:
        while self._open:
            await asyncio.sleep(STREAM_SWEEP_S)
            leases = {lease: slot.key_hash for lease, slot in self._open.items()}
            if not leases:
                return
            try:
                revoked = await self._store.extend_stream_leases(leases, STREAM_LEASE)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
                log.warning("extending stream leases failed: %s", err)
                continue
            for lease_id in revoked:
                slot = self._open.get(lease_id)
                if slot is not None:
                    slot.end()
