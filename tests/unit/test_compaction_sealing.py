"""A compaction item's content opens only on the deployment that sealed it, for the owner it
was sealed for, and not after any change; the codec's keys rotate as they do for history."""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.open_responses.sealing import CompactionSeal


def _seal(*key_ids: str) -> CompactionSeal:
    return CompactionSeal([(key_id, _KEYS[key_id]) for key_id in key_ids])


_KEYS = {name: os.urandom(32) for name in ("k1", "k2", "server")}


@given(st.text(max_size=2000), st.text(min_size=1, max_size=40))
def test_a_summary_round_trips_for_its_owner_and_is_unreadable_sealed(
    summary: str, owner: str
) -> None:
    seal = _seal("k1")
    sealed = seal.seal(owner, summary)
    assert seal.open(owner, sealed) == summary
    if len(summary) >= 8:
        assert summary not in sealed


@given(st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_any_changed_byte_is_refused(position: int, flip: int) -> None:
    seal = _seal("k1")
    sealed = seal.seal("alice", "the code word is slate")
    version, key_id, body = sealed.split(".")
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[position % len(raw)] ^= flip
    changed = f"{version}.{key_id}.{base64.urlsafe_b64encode(bytes(raw)).decode().rstrip('=')}"
    with pytest.raises(ValueError):
        seal.open("alice", changed)


@pytest.mark.parametrize(
    "sealed", ["", "cmp1", "cmp1.k1.", "cmp1.nokey.AAAA", "cmp2.k1.AAAA", "x.y.z"]
)
def test_what_this_deployment_did_not_seal_is_refused(sealed: str) -> None:
    with pytest.raises(ValueError):
        _seal("k1").open("alice", sealed)


def test_another_owner_or_deployment_cannot_open_it() -> None:
    sealed = _seal("k1").seal("alice", "secret")
    with pytest.raises(ValueError):
        _seal("k1").open("bob", sealed)
    with pytest.raises(ValueError):
        CompactionSeal([("k1", os.urandom(32))]).open("alice", sealed)


def test_a_rotated_key_still_opens_what_it_sealed() -> None:
    old = _seal("k1").seal("alice", "before the rotation")
    rotated = _seal("k2", "k1")
    assert rotated.open("alice", old) == "before the rotation"
    assert rotated.seal("alice", "after").split(".")[1] == "k2"
