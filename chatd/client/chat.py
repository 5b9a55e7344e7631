"""The interactive loop of `chatd chat` and the table of `chatd chats`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from chatd.chat_status import BUSY
from chatd.client.http import (
    ApiError,
    ChatdClient,
    ChatView,
    ClientError,
    EventStream,
    MessageView,
    PendingCall,
)
from chatd.client.prompt import read_line
from chatd.client.render import (
    Renderer,
    Style,
    chats_table,
    error_line,
    message_lines,
    use_color,
)
from chatd.sse import Event

__all__ = ["ChatSession", "run_client"]

HISTORY_MESSAGES = 6
PROMPT = "you> "
_DONE = ("waiting", "error")
T = TypeVar("T")


class Quit(Exception):
    """The user asked to leave."""


@dataclass
class _Turn:
    """One turn being followed: which, and whether Ctrl-C was pressed already."""

    turn_id: str | None
    interrupting: bool = False


def run_client(args: argparse.Namespace) -> int:
    """Run `chatd chat` or `chatd chats`; returns the exit code."""
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    try:
        with asyncio.Runner() as runner:
            client = ChatdClient(args.url, args.api_key)
            try:
                if args.command == "chats":
                    print(chats_table(runner.run(client.list_chats(args.limit))))
                    return 0
                return ChatSession(runner, client, args.model).run(args.chat_id)
            finally:
                runner.run(client.aclose())
    except ClientError as err:
        print(f"chatd: {_with_hint(err, args)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print()
        return 130


def _with_hint(err: ClientError, args: argparse.Namespace) -> str:
    if str(err) == "invalid API key" and not args.api_key:
        return "no API key: set CHATD_API_KEY or pass --api-key (`chatd dev` prints one)"
    return str(err)


def _read_line(prompt: str) -> str | None:
    """A line typed at `prompt`; None for Ctrl-D or Ctrl-C."""
    try:
        line = read_line(prompt)
    except (EOFError, KeyboardInterrupt):
        print()
        return None
    if not sys.stdin.isatty():
        print(line)  # piped input is not echoed; show what was sent
    return line


def _checked_id(chat_id: str) -> str:
    try:
        return str(uuid.UUID(chat_id))
    except ValueError as err:
        raise ClientError(f"{chat_id!r} is not a chat id (see `chatd chats`)") from err


def _ask(call: PendingCall) -> dict[str, Any]:
    """Prompt for one dynamic tool call's result."""
    args = json.dumps(call.arguments, ensure_ascii=False)
    output = read_line(f"tool {call.name}({args}) result> ")
    return {"tool_call_id": call.id, "output": output, "is_error": False}


class ChatSession:
    """One chat in the terminal: prompt, send, stream the answer, repeat."""

    def __init__(self, runner: asyncio.Runner, client: ChatdClient, model: str) -> None:
        self._runner = runner
        self._client = client
        self._model = model
        self._out = Renderer(sys.stdout, Style(use_color(sys.stdout)))
        self._chat_id = ""
        self._last_id: int | None = None
        self._sigint: tuple[_Turn, asyncio.Task[Any] | None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def run(self, chat_id: str | None) -> int:
        """Open (or create) the chat, then converse until Ctrl-D / Ctrl-C at the prompt."""
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        try:
            self._run(self._open(chat_id))
            while (line := _read_line(PROMPT)) is not None:
                if line.strip():
                    self._converse(line)
        except (Quit, asyncio.CancelledError):
            self._out.end_line()
            return 130
        return 0

    def _converse(self, line: str) -> None:
        """One turn; a failure is shown and the prompt returns (a bad key still ends it)."""
        try:
            self._run(self._turn(line))
        except ApiError as err:
            if err.status == 401:
                raise
            self._out.line(self._out.style.red(f"chatd: {err}"))
        except ClientError as err:
            self._out.line(self._out.style.red(f"chatd: {err}"))

    async def _open(self, chat_id: str | None) -> None:
        if chat_id is None:
            chat = await self._client.create_chat(self._model)
            self._out.note(f"new chat {chat.id} ({chat.model.label}); resume: chatd chat {chat.id}")
        else:
            chat = await self._client.get_chat(_checked_id(chat_id))
            self._show_history(chat, await self._client.messages(chat.id))
        self._chat_id = chat.id
        self._out.note("Ctrl-C interrupts a turn; Ctrl-D (or Ctrl-C at the prompt) exits")
        if chat.status in BUSY:
            await self._attach()

    def _show_history(self, chat: ChatView, messages: list[MessageView]) -> None:
        title = f" “{chat.title}”" if chat.title else ""
        self._out.note(f"chat {chat.id}{title} ({chat.model.label}, {chat.status})")
        if len(messages) > HISTORY_MESSAGES:
            self._out.note(f"… {len(messages) - HISTORY_MESSAGES} earlier messages")
        for message in messages[-HISTORY_MESSAGES:]:
            for text in message_lines(message, self._out.style):
                self._out.line(text)
        if chat.status == "error" and chat.last_error:
            self._out.line(self._out.style.red(error_line(chat.last_error)))

    async def _turn(self, text: str) -> None:
        async with self._stream() as stream:
            sent = await self._client.send_message(self._chat_id, text)
            if sent.turn_id is None:
                self._out.note("queued: no worker has taken it yet")
            elif sent.queued:
                self._out.note("queued behind the running turn")
            await self._follow_stream(stream, _Turn(sent.turn_id or sent.message_id))

    async def _attach(self) -> None:
        """Follow a turn that was already running when the chat was opened."""
        async with self._stream() as stream:
            chat = await self._client.get_chat(self._chat_id)
            if chat.status not in BUSY:
                return
            busy = "waits for tool results" if chat.status == "requires_action" else "is running"
            self._out.note(f"a turn {busy}; following it")
            turn = _Turn(None)
            if chat.status == "requires_action":
                await self._answer_tools(turn)
            await self._follow_stream(stream, turn)

    def _stream(self) -> EventStream:
        return EventStream(self._client, self._chat_id, self._last_id, on_note=self._out.note)

    async def _follow_stream(self, stream: EventStream, turn: _Turn) -> None:
        """Render events until the turn ends; Ctrl-C interrupts it, a second one quits."""
        self._sigint = (turn, asyncio.current_task())
        self._catch_sigint(True)
        try:
            async for event in stream:
                self._last_id = stream.last_id
                self._out.handle(event)
                if await self._turn_over(event, turn):
                    return
        finally:
            self._catch_sigint(False)
            self._sigint = None

    def _catch_sigint(self, on: bool) -> None:
        """Ctrl-C goes to `_on_sigint` (on) or raises KeyboardInterrupt as usual (off)."""
        loop = asyncio.get_running_loop()
        if on and self._sigint is not None:
            loop.add_signal_handler(signal.SIGINT, self._on_sigint, *self._sigint)
        else:
            loop.remove_signal_handler(signal.SIGINT)

    async def _turn_over(self, event: Event, turn: _Turn) -> bool:
        if event.event != "status":
            return False
        if turn.turn_id is not None and event.data.get("turn_id") != turn.turn_id:
            return False
        status = event.data.get("status")
        if status == "requires_action":
            await self._answer_tools(turn)
        if status in _DONE and turn.interrupting:
            self._out.note("interrupted")
        return status in _DONE

    def _on_sigint(self, turn: _Turn, task: asyncio.Task[Any] | None) -> None:
        if turn.interrupting and task is not None:
            task.cancel()
            return
        turn.interrupting = True
        self._out.note("interrupting… (Ctrl-C again to quit)")
        task = asyncio.get_running_loop().create_task(self._interrupt())
        self._background.add(task)  # keep a reference until it is done
        task.add_done_callback(self._background.discard)

    async def _interrupt(self) -> None:
        try:
            await self._client.interrupt(self._chat_id)
        except ClientError as err:
            self._out.note(f"interrupt failed: {err}")

    async def _answer_tools(self, turn: _Turn) -> None:
        """Prompt for each pending dynamic tool call, then POST all results."""
        chat = await self._client.get_chat(self._chat_id)
        if chat.status != "requires_action" or not chat.pending_tool_calls:
            return
        self._catch_sigint(False)  # Ctrl-C at the tool prompt raises KeyboardInterrupt
        try:
            results = [_ask(call) for call in chat.pending_tool_calls]
        except KeyboardInterrupt:
            print()
            turn.interrupting = True
            self._out.note("interrupting…")
            await self._interrupt()
            return
        except EOFError as err:
            print()
            raise Quit from err
        finally:
            self._catch_sigint(True)
        await self._submit(results)

    async def _submit(self, results: list[dict[str, Any]]) -> None:
        try:
            await self._client.tool_results(self._chat_id, results)
        except ClientError as err:
            self._out.note(f"tool results not accepted: {err}")
