"""The file tools on a workspace other processes use at the same time (workers sharing the
workspace volume): a file is replaced whole, never seen half-written."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from pathlib import Path
from typing import Any

from chatd.tools.base import Tool, ToolContext, ToolOutput
from chatd.tools.workspace import edit_file, write_file

SIZE = 256 * 1024


async def call(tool: Tool[Any], workspace: Path, **arguments: Any) -> ToolOutput:
    ctx = ToolContext(chat_id="chat-1", tool_call_id="call-1", workspace=workspace)
    return await tool.run(tool.args.model_validate(arguments), ctx)


async def test_a_reader_never_sees_a_file_half_written(tmp_path: Path) -> None:
    versions = {b"a" * SIZE, b"b" * SIZE}
    target = tmp_path / "big.txt"
    target.write_bytes(b"a" * SIZE)
    seen: list[bytes] = []
    done = threading.Event()

    def read() -> None:  # another worker's read_file, as far as the file system can tell
        while not done.is_set():
            seen.append(target.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(200):
            await call(write_file, tmp_path, path="big.txt", content="ab"[n % 2] * SIZE)
            await asyncio.sleep(0)
    finally:
        done.set()
        reader.join()
    assert len(seen) > 10
    torn = [len(data) for data in seen if data not in versions]
    assert torn == [], f"{len(torn)} of {len(seen)} reads saw a partial file"


async def test_a_replaced_file_keeps_its_mode_and_nothing_is_left_beside_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o750)
    await call(write_file, tmp_path, path="run.sh", content="echo two\n")
    await call(edit_file, tmp_path, path="run.sh", old_string="two", new_string="three")
    await call(write_file, tmp_path, path="new.txt", content="x")
    assert script.read_text() == "echo three\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["new.txt", "run.sh"]
