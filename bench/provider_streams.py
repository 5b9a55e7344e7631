"""CPU per streamed delta of each provider adapter, the worker's share of reading a model.

    python bench/provider_streams.py                                    # 100 x 100, 5 rounds
    python bench/provider_streams.py --streams 5 --deltas 10 --rounds 1   # a quick look

The fake provider runs in a child process of its own (this script with `--serve-fake PORT`).
In this process, each adapter (`anthropic`, `anthropic-bedrock`, `openai` Responses and Chat
Completions, `google`) is built as the worker builds it (`make_provider`, its cached SDK
client) and runs `--streams` concurrent `stream_step`s, each of `--deltas` text deltas sent
`--spacing-ms` apart, so that every delta arrives in a read of its own, as from a real model.
Per round and adapter: this process's CPU (`time.process_time`) over the deltas received.
The adapters alternate within a round, so a busy moment of the machine is shared out. The
last row, the floor, reads the Anthropic stream with bare asyncio: no HTTP client, no SDK.

This is the worker's cost of a delta up to `PartDelta`: the HTTP client's reads, the SDK's
or our SSE decoding, the adapter's mapping. What the worker then does with a delta (frames,
writes, notifications) is `bench/concurrency.py`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _stack
import httpx
from _stack import ChildProcess

from chatd.devstack.ports import free_port
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText
from chatd.fake_provider.server import provider_settings_for
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart
from chatd.providers import close_clients, make_provider
from chatd.providers.base import ModelRequest
from chatd.settings import ProviderSettings

ADAPTERS: dict[str, ModelConfig] = {
    "anthropic": ModelConfig(provider="anthropic", name="bench"),
    "anthropic-bedrock": ModelConfig(provider="anthropic-bedrock", name="bench"),
    "openai-responses": ModelConfig(provider="openai", name="bench", openai_api="responses"),
    "openai-chat": ModelConfig(provider="openai", name="bench", openai_api="chat"),
    "google": ModelConfig(provider="google", name="bench"),
}
"""Adapter -> the model config that selects it."""
FLOOR = "floor (asyncio)"


@dataclass(frozen=True)
class Script:
    """What the fake model streams: `deltas` text deltas, `spacing_s` apart."""

    deltas: int
    spacing_s: float

    def __call__(self, request: FakeRequest) -> FakeResponse:
        tokens = [f"d{i:05d} " for i in range(self.deltas)]
        return FakeResponse(
            parts=[FakeText(text="".join(tokens), chunk_size=len(tokens[0]))],
            delta_delay_s=self.spacing_s,
        )


async def cpu_per_delta(config: ModelConfig, settings: ProviderSettings, streams: int) -> float:
    """This process's CPU per delta, µs, over `streams` concurrent steps of the adapter."""
    request = ModelRequest(
        model=config, messages=[Message(role="user", parts=[TextPart(text="go")])]
    )

    async def one() -> int:
        provider = make_provider(config, settings)
        return sum([isinstance(e, PartDelta) async for e in provider.stream_step(request)])

    return await _cpu_per_delta(config.provider, [one() for _ in range(streams)])


async def floor_cpu_per_delta(fake_url: str, streams: int) -> float:
    """The same for a bare asyncio reader of the Anthropic stream (no HTTP client, no SDK:
    each line read, each event's JSON decoded): what reading a delta costs at the least."""
    host, port = fake_url.removeprefix("http://").split(":")
    body = json.dumps(
        {"model": "bench", "max_tokens": 64, "stream": True,
         "messages": [{"role": "user", "content": "go"}]}
    ).encode()  # fmt: skip
    head = (
        f"POST /v1/messages HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()

    async def one() -> int:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + body)
        deltas = 0
        while line := await reader.readline():
            if line.startswith(b"data: "):
                deltas += json.loads(line[6:]).get("type") == "content_block_delta"
        writer.close()
        return deltas

    return await _cpu_per_delta(FLOOR, [one() for _ in range(streams)])


async def _cpu_per_delta(reader: str, streams: list[Coroutine[Any, Any, int]]) -> float:
    """This process's CPU, µs, per delta the concurrent `streams` count between them."""
    started = time.process_time()
    received = sum(await asyncio.gather(*streams))
    if received == 0:
        raise RuntimeError(f"{reader} streamed no delta")
    return (time.process_time() - started) * 1e6 / received


async def run(args: argparse.Namespace) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="chatd-provider-streams-") as tmp:
        fake = ChildProcess(
            [sys.executable, __file__, "--serve-fake", str(port), "--deltas", str(args.deltas),
             "--spacing-ms", str(args.spacing_ms)],
            log=Path(tmp) / "fake.log",
        ).start()  # fmt: skip
        try:
            fake_url = f"http://127.0.0.1:{port}"
            await fake.wait_http(f"{fake_url}/health")
            settings = provider_settings_for(fake_url)
            for config in ADAPTERS.values():  # warm up: imports, clients, connections
                await cpu_per_delta(config, settings, min(args.streams, 5))
            figures: dict[str, list[float]] = {name: [] for name in [*ADAPTERS, FLOOR]}
            for round_no in range(1, args.rounds + 1):
                for name, config in ADAPTERS.items():
                    figures[name].append(await cpu_per_delta(config, settings, args.streams))
                figures[FLOOR].append(await floor_cpu_per_delta(fake_url, args.streams))
                async with httpx.AsyncClient() as http:  # the fake forgets the deltas
                    await http.get(f"{fake_url}/bench/deltas")
                print(f"round {round_no}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            await close_clients()
            fake.stop()
    print(
        f"=== CPU per delta in this process, µs ({args.streams} streams x {args.deltas} deltas "
        f"{args.spacing_ms:g} ms apart, {args.rounds} rounds) ==="
    )
    print(f"{'adapter':<18} {'median':>8} {'min':>8} {'max':>8}")
    for name, values in figures.items():
        print(f"{name:<18} {statistics.median(values):8.1f} {min(values):8.1f} {max(values):8.1f}")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse options; measure, or serve the fake provider (`--serve-fake`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100, help="concurrent steps per adapter")
    parser.add_argument("--deltas", type=int, default=100, help="text deltas per step")
    parser.add_argument("--spacing-ms", type=float, default=20.0, help="between deltas")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the median is shown)")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_fake:
        _stack.serve_fake_provider(Script(args.deltas, args.spacing_ms / 1000), args.serve_fake)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
