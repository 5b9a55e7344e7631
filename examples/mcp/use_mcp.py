"""Give chats an MCP server: the config, the server, and a chat that selects it.

An operator lists MCP servers in a JSON file and points `CHATD_MCP_CONFIG` at it, on the
workers and the gateways. Chats then select servers by name (never by URL):

    CHATD_MCP_CONFIG=examples/mcp/mcp.json chatd dev          # from the repo root
    CHATD_BASE_URL=http://127.0.0.1:8080 CHATD_API_KEY=$(cat .data/api_key) \
        python examples/mcp/use_mcp.py

This script checks three things:

1. the config loads as a worker loads it, and through chatd's own MCP client (what a worker
   does in a turn) the server lists its tools and answers a call;
2. the gateway accepts a chat that selects `notes` and refuses an unknown server by name;
3. a turn of that chat lists the server's tools on the worker (seen in NOTES_LOG, when the
   stack was started with it, as `examples/run_all.py` does).

The demo model never calls MCP tools itself; with a real model, ask it to save a note and
it calls `notes__save_note`.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx

from chatd.mcp.client import McpClients
from chatd.mcp.config import load_mcp_config

BASE_URL = os.environ.get("CHATD_BASE_URL", "http://127.0.0.1:8080")
API_KEY = os.environ["CHATD_API_KEY"]
CONFIG = os.environ.get("CHATD_MCP_CONFIG") or str(Path(__file__).with_name("mcp.json"))


async def check_server_directly() -> None:
    """Part 1: load the config and use the server as a chatd worker does."""
    config = load_mcp_config(CONFIG)  # a mistake here is an McpConfigError naming the fix
    assert list(config.servers) == ["notes"], config.servers
    clients = McpClients(config)  # starts the stdio server on first use
    try:
        tools = await clients.list_tools("notes")
        names = sorted(t.qualified_name for t in tools)
        print("[1] the model would see:", names)
        assert names == ["notes__read_note", "notes__save_note"], names
        save = next(t for t in tools if t.name == "save_note")
        assert save.idempotent and not save.destructive  # from the server's annotations

        saved = await clients.call_tool(
            "notes", "save_note", {"title": "hello", "text": "from chatd"}
        )
        read = await clients.call_tool("notes", "read_note", {"title": "hello"})
        print("[1] save_note ->", saved.output, "| read_note ->", read.output)
        assert not saved.is_error and read.output == "from chatd", (saved, read)
    finally:
        await clients.aclose()  # stops the server process


def check_through_chatd() -> None:
    """Parts 2 and 3: chats select the server by name; a turn lists its tools."""
    api = httpx.Client(
        base_url=f"{BASE_URL}/api/v1", headers={"Authorization": f"Bearer {API_KEY}"}
    )
    log = os.environ.get("NOTES_LOG")
    listed_before = _lines(log)

    unknown = api.post("/chats", json={"mcp_servers": ["nope"]})
    assert unknown.status_code == 400 and "nope" in unknown.text, unknown.text
    print("[2] an unknown server is refused:", unknown.json()["error"]["message"])

    chat = api.post("/chats", json={"mcp_servers": ["notes"], "message": {"content": "hello"}})
    assert chat.status_code == 201, chat.text  # the gateway knows `notes` from the config
    chat_id = chat.json()["id"]
    deadline = time.monotonic() + 30
    while (status := api.get(f"/chats/{chat_id}").json()["status"]) == "running":
        assert time.monotonic() < deadline, "the turn did not end"
        time.sleep(0.2)
    assert status == "waiting", api.get(f"/chats/{chat_id}").json()["last_error"]
    print(f"[2] chat {chat_id} with mcp_servers ['notes'] answered")

    if log is None:
        print("[3] skipped: NOTES_LOG is not set (examples/run_all.py sets it)")
        return
    assert _lines(log) > listed_before, "the worker did not list the notes server's tools"
    print(f"[3] the worker listed the server's tools for the turn ({log})")


def _lines(path: str | None) -> int:
    if path is None or not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def main() -> None:
    asyncio.run(check_server_directly())
    check_through_chatd()
    print("OK")


if __name__ == "__main__":
    main()
