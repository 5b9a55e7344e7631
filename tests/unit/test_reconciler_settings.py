"""The reconciler's settings come from the environment, and nonsense is refused at start."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from chatd.settings import ReconcilerSettings


def test_defaults_sweep_every_30_s_for_turns_quiet_for_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CHATD_RECONCILE_INTERVAL_SECONDS", raising=False)
    monkeypatch.delenv("CHATD_RECONCILE_GRACE_SECONDS", raising=False)
    monkeypatch.delenv("CHATD_RECONCILE_HAND_OVER_SECONDS", raising=False)
    settings = ReconcilerSettings.from_env()
    assert settings.interval == timedelta(seconds=30)
    assert settings.grace == timedelta(seconds=60)
    assert settings.hand_over_after == timedelta(seconds=10)


def test_the_environment_sets_interval_grace_and_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATD_RECONCILE_INTERVAL_SECONDS", "5")
    monkeypatch.setenv("CHATD_RECONCILE_GRACE_SECONDS", "120.5")
    monkeypatch.setenv("CHATD_RECONCILE_HAND_OVER_SECONDS", "3")
    settings = ReconcilerSettings.from_env()
    assert settings.interval == timedelta(seconds=5)
    assert settings.grace == timedelta(seconds=120.5)
    assert settings.hand_over_after == timedelta(seconds=3)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_grace_that_would_end_a_starting_turn_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CHATD_RECONCILE_GRACE_SECONDS", value)
    with pytest.raises(ValidationError):
        ReconcilerSettings.from_env()
