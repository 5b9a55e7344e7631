"""The `chatd` command runs its services (worker, gateway, dev stack) on uvloop."""

from __future__ import annotations

import argparse
import asyncio

import pytest
import uvloop

import chatd.cli


def test_a_command_runs_on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def run(args: argparse.Namespace) -> None:
        assert args.command == "worker"
        loops.append(asyncio.get_running_loop())

    monkeypatch.setattr(chatd.cli, "_run", run)
    chatd.cli.main(["worker"])
    assert len(loops) == 1 and isinstance(loops[0], uvloop.Loop)
