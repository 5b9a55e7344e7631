"""Retention's settings come from the environment; 0 keeps a kind forever."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chatd.retention import RetentionSettings

_NAMES = (
    "CHATD_RETENTION_INTERVAL_SECONDS",
    "CHATD_EVENT_RETENTION_HOURS",
    "CHATD_QUEUED_MESSAGE_RETENTION_HOURS",
    "CHATD_TOOL_CALL_RETENTION_HOURS",
    "CHATD_WORKSPACE_RETENTION_HOURS",
)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _NAMES:
        monkeypatch.delenv(name, raising=False)
    settings = RetentionSettings.from_env()
    assert settings.interval == timedelta(minutes=10)
    assert settings.events == timedelta(hours=24)
    assert settings.queued_messages == timedelta(days=7)
    assert settings.tool_calls == timedelta(hours=24)
    assert settings.workspaces == timedelta(days=30)


def test_the_environment_sets_each_and_0_keeps_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATD_RETENTION_INTERVAL_SECONDS", "30")
    monkeypatch.setenv("CHATD_EVENT_RETENTION_HOURS", "1.5")
    monkeypatch.setenv("CHATD_QUEUED_MESSAGE_RETENTION_HOURS", "0")
    monkeypatch.setenv("CHATD_TOOL_CALL_RETENTION_HOURS", "2")
    monkeypatch.setenv("CHATD_WORKSPACE_RETENTION_HOURS", "0")
    settings = RetentionSettings.from_env()
    assert settings.interval == timedelta(seconds=30)
    assert settings.events == timedelta(minutes=90)
    assert settings.queued_messages is None and settings.workspaces is None
    assert settings.tool_calls == timedelta(hours=2)
