"""Rendering a chat's events, transcript and chat list as terminal text."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from chatd.client.http import ChatView, MessageView
from chatd.sse import Event

__all__ = [
    "Renderer",
    "Style",
    "chats_table",
    "compact_args",
    "error_line",
    "message_lines",
    "retry_line",
    "tool_call_line",
    "tool_result_line",
    "use_color",
]

ARGS_LIMIT = 60
LINE_LIMIT = 80


def use_color(stream: TextIO) -> bool:
    """ANSI colour only on a terminal, and never with NO_COLOR or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


@dataclass(frozen=True)
class Style:
    """ANSI styles, or plain text when colour is off."""

    color: bool = False

    def _sgr(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    def dim(self, text: str) -> str:
        """Faint (reasoning, notes)."""
        return self._sgr("2", text)

    def red(self, text: str) -> str:
        """Errors."""
        return self._sgr("31", text)

    def yellow(self, text: str) -> str:
        """Retries."""
        return self._sgr("33", text)

    def cyan(self, text: str) -> str:
        """Tool calls and results."""
        return self._sgr("36", text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_args(arguments: Any, limit: int = ARGS_LIMIT) -> str:
    """Tool arguments on one line (JSON text is re-dumped compactly), clipped to `limit`."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return _clip(" ".join(arguments.split()), limit)
    if arguments in ({}, None):
        return ""
    return _clip(json.dumps(arguments, ensure_ascii=False), limit)


def tool_call_line(name: str, arguments: Any) -> str:
    """`→ name(args…)`."""
    return f"→ {name}({compact_args(arguments)})"


def _output_text(output: Any) -> str:
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def tool_result_line(name: str, output: Any, is_error: bool = False) -> str:
    """`← name: first line… (N lines)`, with `error:` before a failed result."""
    lines = _output_text(output).strip().splitlines() or [""]
    first = _clip(lines[0].strip(), LINE_LIMIT)
    if len(lines) > 1 and not first.endswith("…"):
        first += "…"
    count = f" ({len(lines)} lines)" if len(lines) > 1 else ""
    marker = "error: " if is_error else ""
    return f"← {name}: {marker}{first or '(empty)'}{count}"


def _seconds(delay_ms: Any) -> str:
    try:
        seconds = float(delay_ms) / 1000
    except (TypeError, ValueError):
        return "?"
    return f"{seconds:.1f}".rstrip("0").rstrip(".")


def retry_line(data: dict[str, Any]) -> str:
    """`↻ retrying in 4 s: overloaded (attempt 2)` from a retry event."""
    error = data.get("error") or {}
    kind = error.get("kind") or "error"
    attempt = f" (attempt {data['attempt']})" if data.get("attempt") else ""
    return f"↻ retrying in {_seconds(data.get('delay_ms'))} s: {kind}{attempt}"


def error_line(data: dict[str, Any]) -> str:
    """`✗ error (kind): message` from an error event (or a chat's `last_error`)."""
    kind = data.get("kind") or "generic"
    return f"✗ error ({kind}): {data.get('message') or 'the turn failed'}"


@dataclass
class _OpenCall:
    index: int
    name: str
    args: list[str] = field(default_factory=list)


class Renderer:
    """Turns stream events into terminal output, text as it arrives."""

    def __init__(self, out: TextIO, style: Style | None = None) -> None:
        self._out = out
        self.style = style or Style()
        self._line_start = True
        self._mode: str | None = None
        self._call: _OpenCall | None = None
        self._shown = False
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "message_part": self._part,
            "message": self._message,
            "status": self._status,
            "retry": self._retry,
            "reset": self._reset,
            "error": self._error,
        }

    def handle(self, event: Event) -> None:
        """Render one event (unknown kinds are ignored)."""
        handler = self._handlers.get(event.event)
        if handler is not None:
            handler(event.data)

    def write(self, text: str) -> None:
        """Write raw text."""
        if text:
            self._out.write(text)
            self._out.flush()
            self._line_start = text.endswith("\n")

    def end_line(self) -> None:
        """Finish what is open (a tool call, a line of text)."""
        self._flush_call()
        if not self._line_start:
            self.write("\n")
        self._mode = None

    def line(self, text: str) -> None:
        """A line of its own."""
        self.end_line()
        self.write(text + "\n")

    def note(self, text: str) -> None:
        """A dimmed note on its own line."""
        self.line(self.style.dim(text))

    def _flush_call(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            self.line(self.style.cyan(tool_call_line(call.name, "".join(call.args))))

    def _part(self, data: dict[str, Any]) -> None:
        part: dict[str, Any] = data.get("part") or {}
        kind = part.get("type")
        if data.get("role") == "tool":
            self._tool_result(part)
        elif kind in ("text", "reasoning"):
            self._stream_text(str(kind), part.get("text") or "")
        elif kind == "tool_call":
            self._tool_call(part)
        elif kind in ("tool_result", "source", "file"):
            self._whole_part(part.get("part") or {})

    def _stream_text(self, kind: str, text: str) -> None:
        if not text:
            return
        if self._mode != kind:
            self.end_line()
            self._mode = kind
        self._shown = True
        self.write(self.style.dim(text) if kind == "reasoning" else text)

    def _tool_call(self, part: dict[str, Any]) -> None:
        index = int(part.get("index", -1))
        if self._call is None or self._call.index != index or part.get("name"):
            self.end_line()
            self._call = _OpenCall(index, str(part.get("name") or "?"))
        self._shown = True
        if part.get("args_delta"):
            self._call.args.append(str(part["args_delta"]))

    def _tool_result(self, part: dict[str, Any]) -> None:
        name = str(part.get("name") or "tool")
        line = tool_result_line(name, part.get("output"), bool(part.get("is_error")))
        self._shown = True
        self.line(self.style.red(line) if part.get("is_error") else self.style.cyan(line))

    def _whole_part(self, part: dict[str, Any]) -> None:
        kind = part.get("type")
        if kind == "tool_result":
            self._tool_result(part)
        elif kind == "source":
            title = f"{part['title']} " if part.get("title") else ""
            self.line(self.style.dim(f"[source] {title}<{part.get('url')}>"))
        elif kind == "file":
            self.line(self.style.dim(f"[file {part.get('name') or ''} {part.get('media_type')}]"))

    def _message(self, data: dict[str, Any]) -> None:
        if data.get("role") == "assistant":
            self.end_line()
            self._shown = False

    def _status(self, data: dict[str, Any]) -> None:
        if data.get("status") != "running":
            self.end_line()
            self._shown = False

    def _retry(self, data: dict[str, Any]) -> None:
        self._call = None
        self.line(self.style.yellow(retry_line(data)))

    def _reset(self, data: dict[str, Any]) -> None:
        self._call = None
        if self._shown:
            self.note("(the partial answer above is void; the step starts again)")
        self.end_line()
        self._shown = False

    def _error(self, data: dict[str, Any]) -> None:
        self.line(self.style.red(error_line(data)))


def _text_of(parts: list[dict[str, Any]]) -> str:
    return "".join(str(p.get("text") or "") for p in parts if p.get("type") == "text").strip()


def _assistant_lines(text: str, max_lines: int) -> list[str]:
    lines = text.splitlines()
    if len(lines) > max_lines:
        return [*lines[:max_lines], f"… ({len(lines) - max_lines} more lines)"]
    return lines


def message_lines(message: MessageView, style: Style, max_lines: int = 3) -> list[str]:
    """A persisted message, compactly: user text, assistant text, tool calls and results."""
    if message.role == "user":
        return [style.dim("you> ") + _clip(" ".join(_text_of(message.parts).split()), LINE_LIMIT)]
    out: list[str] = []
    for part in message.parts:
        kind = part.get("type")
        if kind == "tool_call":
            out.append(style.cyan(tool_call_line(str(part.get("name")), part.get("arguments"))))
        elif kind == "tool_result":
            name, output = str(part.get("name")), part.get("output")
            out.append(style.cyan(tool_result_line(name, output, bool(part.get("is_error")))))
    text = _text_of(message.parts)
    return [*_assistant_lines(text, max_lines), *out] if text else out


def _when(chat: ChatView) -> str:
    return chat.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")


def chats_table(chats: list[ChatView]) -> str:
    """ID, STATUS, TITLE, MODEL, UPDATED as an aligned table."""
    if not chats:
        return "no chats yet"
    rows = [("ID", "STATUS", "TITLE", "MODEL", "UPDATED")]
    rows += [(c.id, c.status, _clip(c.title or "-", 40), c.model.label, _when(c)) for c in chats]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
