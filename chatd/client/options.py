"""Command-line options of `chatd chat` and `chatd chats` (kept light: no client imports)."""

from __future__ import annotations

import argparse
import os

__all__ = ["DEFAULT_URL", "add_client_commands"]

DEFAULT_URL = "http://127.0.0.1:8080/api/v1"


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("CHATD_URL") or DEFAULT_URL,
        help=f"gateway base URL (env CHATD_URL, default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("CHATD_API_KEY"),
        help="API key (env CHATD_API_KEY; `chatd dev` prints one)",
    )


def add_client_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `chat` and `chats` to the `chatd` subcommands."""
    chat = sub.add_parser("chat", help="chat in the terminal (new chat, or resume CHAT_ID)")
    chat.add_argument("chat_id", nargs="?", metavar="CHAT_ID", help="resume this chat")
    chat.add_argument(
        "--model", default="demo/demo", help="provider/name for a new chat (default demo/demo)"
    )
    _connection(chat)
    chats = sub.add_parser("chats", help="list your chats")
    chats.add_argument("--limit", type=int, default=50, help="how many (newest first)")
    _connection(chats)
