"""`chatd chat` / `chatd chats` as a user runs them: in a pseudo-terminal, over the HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from harness import Stack
from support.names import model_name

from chatd.devstack.ports import free_port
from chatd.fake_provider.script import (
    FakeError,
    FakeReasoning,
    FakeResponse,
    FakeText,
    FakeToolCall,
)

PROMPT = "you> "
ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[=>]|\r")
_CTTY = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
"""Make the pty the child's controlling terminal, so Ctrl-C (\\x03) becomes SIGINT."""
_LATE_SELECT = (
    "import ctypes, functools, readline, runpy; "
    "readline.set_pre_input_hook(functools.partial(ctypes.CDLL(None).usleep, 300_000)); "
    "runpy.run_module('chatd.cli', run_name='__main__')"
)
"""Run the CLI with readline pausing 0.3 s after showing the prompt, before it waits for keys.

The pause is a C call (no Python code runs in it), so it only widens the window in which a
loaded machine can deschedule the client between printing the prompt and `select()`."""


def _client_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CHATD_URL")}
    return {**env, "TERM": "xterm-256color", "CHATD_API_KEY": "", "PYTHONFAULTHANDLER": "1"}


class Terminal:
    """A `python -m chatd.cli ...` child on a pseudo-terminal, with an expect helper."""

    def __init__(self, *args: str, late_select: bool = False) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        cli = ("-c", _LATE_SELECT) if late_select else ("-m", "chatd.cli")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CTTY, *cli, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            env=_client_env(),
        )
        os.close(slave)
        self._fd = master
        self.raw = b""
        self._pos = 0
        self._eof = False

    @property
    def screen(self) -> str:
        """Everything printed so far, without ANSI sequences or carriage returns."""
        return _ANSI.sub("", self.raw.decode(errors="replace"))

    def send(self, keys: str) -> None:
        """Type `keys` (\\r is Enter, \\x03 Ctrl-C, \\x04 Ctrl-D)."""
        os.write(self._fd, keys.encode())

    def _read(self, wait_s: float) -> None:
        ready, _, _ = select.select([self._fd], [], [], wait_s)
        if not ready:
            return
        try:
            chunk = os.read(self._fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        self.raw += chunk
        self._eof = not chunk

    async def expect(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        """Wait for `pattern` after the previous match (reads off the event loop)."""
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern)
        while (match := regex.search(self.screen, self._pos)) is None:
            if self._eof or time.monotonic() > deadline:
                why = "the client exited" if self._eof else "timed out"
                raise AssertionError(f"{why} waiting for {pattern!r}; screen:\n{self.screen}")
            await asyncio.to_thread(self._read, 0.2)
        self._pos = match.end()
        return match

    async def exit_code(self, timeout_s: float = 15.0) -> int:
        """Read to the end and return the exit status. A client still running then is made
        to print its threads' stacks (faulthandler, on SIGABRT), which the failure shows."""
        deadline = time.monotonic() + timeout_s
        while not self._eof and time.monotonic() < deadline:
            await asyncio.to_thread(self._read, 0.2)
        if self.process.poll() is None and not self._eof:
            self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(AssertionError):
                await self.expect(r"Current thread|Thread 0x", timeout_s=5.0)
            await asyncio.to_thread(self._read, 1.0)
            raise AssertionError(f"the client did not exit; screen:\n{self.screen}")
        return await asyncio.to_thread(self.process.wait, 30)

    async def close(self) -> None:
        """Kill the child if it still runs and release the terminal."""
        if self.process.poll() is None:
            self.process.kill()
        await asyncio.to_thread(self.process.wait, 10)
        os.close(self._fd)


@contextlib.asynccontextmanager
async def _terminal(
    url: str, key: str, *args: str, late_select: bool = False
) -> AsyncIterator[Terminal]:
    term = Terminal(*args, "--url", url, "--api-key", key, late_select=late_select)
    try:
        yield term
    finally:
        await term.close()


async def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run the CLI without a terminal (lines from `stdin`) and capture its output."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "chatd.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=_client_env(),
    )


async def test_an_answer_streams_with_reasoning_a_tool_call_its_result_and_a_retry(
    stack: Stack,
) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(error=FakeError.rate_limited(retry_after_s=1)),
            FakeResponse(
                parts=[
                    FakeReasoning(text="pondering the clock"),
                    FakeText(text="Let me check the time."),
                    FakeToolCall(name="current_time"),
                ],
                delta_delay_s=0.01,
            ),
            FakeResponse(parts=[FakeText(text="It is tea time,\nmy friend.")], delta_delay_s=0.01),
        ],
    )
    async with _terminal(stack.base_url, stack.key, "chat", "--model", f"anthropic/{name}") as t:
        chat_id = (await t.expect(r"new chat ([0-9a-f-]{36}) \(anthropic/")).group(1)
        await t.expect(PROMPT)
        t.send("what time is it?\r")
        await t.expect(r"↻ retrying in 1 s: rate_limit \(attempt 1\)\n")
        await t.expect(r"pondering the clock\n")
        await t.expect(r"Let me check the time\.\n")
        await t.expect(r"→ current_time\(\)\n")
        await t.expect(r"← current_time: \S+")
        await t.expect(r"It is tea time,\nmy friend\.\n")
        await t.expect(PROMPT)
        assert "\x1b[2mponder" in t.raw.decode(), "reasoning is dimmed on a terminal"
        assert t.screen.count("Let me check the time.") == 1
        t.send("\x04")
        assert await t.exit_code() == 0
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]


async def test_ctrl_c_interrupts_a_slow_stream_and_the_prompt_returns(stack: Stack) -> None:
    name = model_name()
    slow = FakeResponse(parts=[FakeText(text="slow " * 400, chunk_size=5)], delta_delay_s=0.05)
    stack.fake.script(name, [slow, FakeResponse.of_text("after the interrupt")])
    async with _terminal(stack.base_url, stack.key, "chat", "--model", f"anthropic/{name}") as t:
        chat_id = (await t.expect(r"new chat ([0-9a-f-]{36})")).group(1)
        await t.expect(PROMPT)
        t.send("take your time\r")
        await t.expect("slow slow slow")
        t.send("\x03")
        await t.expect("interrupting…")
        await t.expect(r"\ninterrupted\n")
        await t.expect(PROMPT)
        chat = (await stack.http.get(f"/chats/{chat_id}")).json()
        assert chat["status"] == "waiting"
        t.send("go on\r")
        await t.expect("after the interrupt")
        await t.expect(PROMPT)
        t.send("\x03")
        assert await t.exit_code() == 0, "Ctrl-C at the prompt exits"


async def test_ctrl_c_right_after_the_prompt_appears_exits(stack: Stack) -> None:
    """A SIGINT between the prompt being shown and the client waiting for keys is not lost."""
    chat = await stack.create_chat(model={"provider": "anthropic", "name": model_name()})
    for delay_s in (0.0, 0.1, 0.2):
        async with _terminal(stack.base_url, stack.key, "chat", chat["id"], late_select=True) as t:
            await t.expect(PROMPT)
            await asyncio.sleep(delay_s)
            t.send("\x03")
            assert await t.exit_code() == 0, f"Ctrl-C {delay_s} s after the prompt exits"


async def test_ctrl_c_right_after_a_tool_prompt_appears_interrupts_the_turn(stack: Stack) -> None:
    name = model_name()
    call = FakeToolCall(name="ask_user", arguments={"question": "Why?"})
    stack.fake.script(name, [FakeResponse(parts=[call])])
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK_USER]
    )
    async with _terminal(stack.base_url, stack.key, "chat", chat["id"], late_select=True) as t:
        await t.expect(PROMPT)
        t.send("ask me\r")
        await t.expect(re.escape('tool ask_user({"question": "Why?"}) result> '))
        t.send("\x03")
        await t.expect(r"interrupting…\n(.*\n)?interrupted\n")
        await t.expect(PROMPT)
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["status"] == "waiting"


async def test_a_dynamic_tool_call_is_answered_at_the_prompt_then_resumed_and_listed(
    stack: Stack,
) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(
                parts=[
                    FakeText(text="Let me ask."),
                    FakeToolCall(name="ask_user", arguments={"question": "Which colour?"}),
                ]
            ),
            FakeResponse.of_text("Blue it is!"),
        ],
    )
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK_USER], title="quiz"
    )
    async with _terminal(stack.base_url, stack.key, "chat", chat["id"]) as t:
        await t.expect(rf"chat {chat['id']} “quiz” \(anthropic/{name}, waiting\)")
        await t.expect(PROMPT)
        t.send("pick a colour\r")
        await t.expect(r"Let me ask\.\n")
        await t.expect(re.escape('→ ask_user({"question": "Which colour?"})'))
        await t.expect(re.escape('tool ask_user({"question": "Which colour?"}) result> '))
        t.send("blue\r")
        await t.expect(r"← ask_user: blue\n")
        await t.expect(r"Blue it is!\n")
        await t.expect(PROMPT)
        t.send("\x04")
        assert await t.exit_code() == 0
    tool_message = (await stack.messages(chat["id"]))[2]
    assert tool_message["parts"][0]["output"] == "blue"

    async with _terminal(stack.base_url, stack.key, "chat", chat["id"]) as again:
        await again.expect(r"you> pick a colour\n")
        await again.expect(r"Let me ask\.\n→ ask_user\(")
        await again.expect(r"← ask_user: blue\nBlue it is!\n")
        await again.expect(PROMPT)

    listed = await _cli("chats", "--url", stack.base_url, "--api-key", stack.key)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "STATUS", "TITLE", "MODEL", "UPDATED"]
    assert row.split()[:4] == [chat["id"], "waiting", "quiz", f"anthropic/{name}"]


async def test_resuming_a_chat_that_waits_for_a_tool_result_asks_for_it(stack: Stack) -> None:
    name = model_name()
    call = FakeToolCall(name="ask_user", arguments={"question": "Why?"})
    stack.fake.script(name, [FakeResponse(parts=[call]), FakeResponse.of_text("Understood.")])
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK_USER]
    )
    await stack.send(chat["id"], "ask me")
    await stack.wait_status(chat["id"], "requires_action")
    async with _terminal(stack.base_url, stack.key, "chat", chat["id"]) as t:
        await t.expect(r"requires_action\)\nyou> ask me\n→ ask_user")
        await t.expect("a turn waits for tool results; following it")
        await t.expect(re.escape('tool ask_user({"question": "Why?"}) result> '))
        t.send("because\r")
        await t.expect(r"← ask_user: because\nUnderstood\.\n")
        await t.expect(PROMPT)


async def test_a_dropped_stream_reconnects_without_repeating_text(stack: Stack) -> None:
    name = model_name()
    words = " ".join(f"w{i:02d}" for i in range(60))
    stack.fake.script(
        name, [FakeResponse(parts=[FakeText(text=words, chunk_size=4)], delta_delay_s=0.1)]
    )
    async with _Proxy(urlsplit(stack.base_url).port or 0) as proxy:
        url = f"http://127.0.0.1:{proxy.port}/api/v1"
        async with _terminal(url, stack.key, "chat", "--model", f"anthropic/{name}") as t:
            await t.expect(PROMPT)
            t.send("count\r")
            await t.expect("w05")
            proxy.cut()
            await t.expect("w59\n")
            await t.expect(PROMPT)
            assert words in t.screen, "the text continues exactly where it stopped"
    resumed = [r for r in proxy.requests if r.startswith(b"GET") and b"/stream" in r]
    assert len(resumed) == 2, "the stream was opened once, then reopened after the cut"
    assert re.search(rb"(?i)last-event-id: \d+", resumed[1])


async def test_without_a_terminal_lines_are_read_from_stdin_and_a_turn_error_is_shown(
    stack: Stack,
) -> None:
    name = model_name()
    bad = FakeError(status=400, type="invalid_request_error", message="bad things happened")
    stack.fake.script(name, [FakeResponse(error=bad), FakeResponse.of_text("fine now")])
    args = ("chat", "--model", f"anthropic/{name}", "--url", stack.base_url)
    done = await _cli(*args, "--api-key", stack.key, stdin="first\nsecond\n")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout, "no colour without a terminal"
    assert re.search(r"✗ error \(invalid_request\): .*bad things happened\n", done.stdout)
    assert done.stdout.endswith("you> second\nfine now\nyou> \n")


async def test_errors_are_one_line(stack: Stack) -> None:
    bad_key = await _cli("chats", "--url", stack.base_url, "--api-key", "not-a-key")
    assert (bad_key.returncode, bad_key.stderr) == (1, "chatd: invalid API key\n")
    no_key = await _cli("chats", "--url", stack.base_url)
    assert no_key.returncode == 1 and "set CHATD_API_KEY" in no_key.stderr
    down_url = f"http://127.0.0.1:{free_port()}/api/v1"
    down = await _cli("chat", "--url", down_url, "--api-key", stack.key)
    assert down.returncode == 1
    assert down.stderr == f"chatd: cannot reach the gateway at {down_url} (connection refused)\n"
    missing = await _cli("chat", str(uuid.uuid4()), "--url", stack.base_url, "--api-key", stack.key)
    assert missing.returncode == 1 and "not found" in missing.stderr


class _Proxy:
    """A TCP forwarder in front of the gateway whose connections can be cut."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0
        self.requests: list[bytes] = []
        """The first bytes of each connection (the request line and headers)."""

    async def __aenter__(self) -> _Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def cut(self) -> None:
        """Abort every open connection (both sides)."""
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        self._writers += [writer, up_writer]
        pipes = [
            asyncio.create_task(_pipe(reader, up_writer, self.requests)),
            asyncio.create_task(_pipe(up_reader, writer)),
        ]
        self._tasks.update(pipes)
        await asyncio.gather(*pipes, return_exceptions=True)
        self._tasks.difference_update(pipes)


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: list[bytes] | None = None
) -> None:
    try:
        while data := await reader.read(65536):
            if log is not None:
                log.append(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
