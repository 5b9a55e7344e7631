"""The per-key gate: request rate buckets and the cache of failed keys, answered in memory."""

from __future__ import annotations

import pytest

import api.quotas
from api.errors import ApiError
from api.quotas import BAD_KEY_CACHE_S, KeyGate, LimitsCache
from chatd.store.quotas import Limits, QuotaStore


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _FixedLimits(QuotaStore):
    """Limits without a database: what the test sets."""

    def __init__(self, limits: Limits) -> None:
        self.value = limits
        self.reads = 0

    async def limits(self, owner: str) -> Limits:
        self.reads += 1
        return self.value


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(api.quotas.time, "monotonic", clock)
    return clock


def _limits(rate: float, burst: int) -> Limits:
    return Limits(
        requests_per_s=rate,
        request_burst=burst,
        running_turns=1,
        streams=1,
        streams_per_chat=1,
        queued_messages=1,
    )


async def test_a_key_gets_its_burst_then_its_rate(clock: _Clock) -> None:
    gate = KeyGate(LimitsCache(_FixedLimits(_limits(rate=2, burst=3))))
    gate.take("k")  # no bucket yet: not counted here
    await gate.authenticated("k", "alice")  # the first request's token
    gate.take("k")
    gate.take("k")
    with pytest.raises(ApiError) as refused:
        gate.take("k")
    assert (refused.value.status, refused.value.code) == (429, "rate_limited")
    assert refused.value.headers == {"Retry-After": "1"}
    clock.now += 0.5  # one token at 2 per second
    gate.take("k")
    with pytest.raises(ApiError):
        gate.take("k")
    gate.take("other key")  # has no bucket: its first request is looked up


async def test_an_owner_s_new_limits_resize_its_keys_buckets(clock: _Clock) -> None:
    store = _FixedLimits(_limits(rate=1, burst=10))
    gate = KeyGate(LimitsCache(store))
    await gate.authenticated("k", "alice")
    store.value = _limits(rate=1, burst=2)
    clock.now += api.quotas.LIMITS_CACHE_S + 1  # the cached limits expire
    await gate.authenticated("k", "alice")
    assert store.reads == 2
    gate.take("k")
    gate.take("k")
    with pytest.raises(ApiError):
        gate.take("k")


def test_a_failed_key_is_refused_without_a_lookup_for_a_while(clock: _Clock) -> None:
    gate = KeyGate(LimitsCache(_FixedLimits(_limits(rate=1, burst=1))))
    assert not gate.recently_failed("bad")
    gate.failed("bad")
    assert gate.recently_failed("bad")
    clock.now += BAD_KEY_CACHE_S
    assert not gate.recently_failed("bad")


def test_the_failed_keys_kept_are_bounded(clock: _Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api.quotas, "MAX_TRACKED_KEYS", 3)
    gate = KeyGate(LimitsCache(_FixedLimits(_limits(rate=1, burst=1))))
    for n in range(5):
        gate.failed(f"bad-{n}")
    assert [gate.recently_failed(f"bad-{n}") for n in range(5)] == [False, False, True, True, True]
