"""The default tool set: file tools confined to the workspace, the opt-in execute tool."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from pydantic import ValidationError

from chatd.tools.base import MediaOutput, Tool, ToolContext, ToolOutput
from chatd.tools.defaults import default_registry
from chatd.tools.execute import ExecuteArgs, OwnerAllowList, make_execute_tool
from chatd.tools.sandbox import NoSandbox
from chatd.tools.workspace import (
    OUTPUT_CAP_BYTES,
    WorkspacePathError,
    edit_file,
    list_files,
    read_file,
    resolve_in_workspace,
    truncate_output,
    write_file,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A chat workspace, with an outside neighbour the tools must not reach."""
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("outside\n")
    return root


def unsandboxed_execute(**options: Any) -> Tool[ExecuteArgs]:
    """The execute tool for everyone, run directly on this machine: the process handling is
    the same in bubblewrap (tests/unit/test_execute_sandbox.py covers the sandbox)."""
    return make_execute_tool(sandbox=NoSandbox(), owners=OwnerAllowList.parse("*"), **options)


async def call(tool: Tool[Any], workspace: Path, **arguments: Any) -> ToolOutput:
    """Validate arguments the way the tool activity does and run the tool."""
    ctx = ToolContext(chat_id="chat-1", tool_call_id="call-1", workspace=workspace)
    return await tool.run(tool.args.model_validate(arguments), ctx)


# resolve_in_workspace


def test_resolve_plain_and_nested_paths(workspace: Path) -> None:
    root = workspace.resolve()
    assert resolve_in_workspace(workspace, "a.txt") == root / "a.txt"
    assert resolve_in_workspace(workspace, "dir/sub/b.txt") == root / "dir/sub/b.txt"
    assert resolve_in_workspace(workspace, "dir/../c.txt") == root / "c.txt"
    assert resolve_in_workspace(workspace, ".") == root
    assert resolve_in_workspace(workspace, "") == root


def test_resolve_relative_workspace(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace.parent)
    assert resolve_in_workspace(Path("ws"), "a.txt") == workspace.resolve() / "a.txt"
    with pytest.raises(WorkspacePathError):
        resolve_in_workspace(Path("ws"), "../secret.txt")


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../secret.txt", "..", "a/../../secret.txt", "a/b/../../../x"]
)
def test_resolve_refuses_escapes(workspace: Path, path: str) -> None:
    with pytest.raises(WorkspacePathError, match="path escapes the workspace"):
        resolve_in_workspace(workspace, path)


def test_resolve_refuses_a_prefix_sibling(workspace: Path) -> None:
    sibling = workspace.parent / "ws-other"
    sibling.mkdir()
    with pytest.raises(WorkspacePathError, match="path escapes the workspace"):
        resolve_in_workspace(workspace, "../ws-other/x")


def test_resolve_refuses_symlinks_pointing_outside(workspace: Path) -> None:
    (workspace / "out.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "outdir").symlink_to(workspace.parent)
    (workspace / "abs").symlink_to("/etc")
    for path in ["out.txt", "outdir", "outdir/secret.txt", "abs/passwd"]:
        with pytest.raises(WorkspacePathError, match="path escapes the workspace"):
            resolve_in_workspace(workspace, path)


def test_resolve_follows_symlinks_inside(workspace: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "link").symlink_to("real")
    assert resolve_in_workspace(workspace, "link/f.txt") == workspace.resolve() / "real/f.txt"


def test_resolve_refuses_invalid_paths(workspace: Path) -> None:
    (workspace / "loop").symlink_to("loop")
    with pytest.raises(WorkspacePathError):
        resolve_in_workspace(workspace, "loop")
    with pytest.raises(WorkspacePathError):
        resolve_in_workspace(workspace, "a\x00b")


@pytest.mark.parametrize("tool", [read_file, write_file, edit_file, list_files])
async def test_every_file_tool_is_confined(workspace: Path, tool: Tool[Any]) -> None:
    (workspace / "out.txt").symlink_to(workspace.parent / "secret.txt")
    arguments: dict[str, Any] = {"content": "x", "old_string": "outside", "new_string": "pwned"}
    for path in ["/etc/passwd", "../secret.txt", "out.txt"]:
        with pytest.raises(WorkspacePathError, match="path escapes the workspace"):
            await call(tool, workspace, path=path, **arguments)
    assert (workspace.parent / "secret.txt").read_text() == "outside\n"


# truncation


def test_truncate_output() -> None:
    assert truncate_output(b"short") == "short"
    text = truncate_output(b"x" * 100, cap=10)
    assert text == "x" * 10 + "\n[truncated: showing the first 10 of 100 bytes]"
    assert truncate_output(b"abc", total=50, cap=10).endswith("showing the first 3 of 50 bytes]")


def test_truncate_does_not_split_a_character() -> None:
    text = truncate_output("é".encode() * 10, cap=5)  # 2 bytes each: the 5th byte is half an é
    assert text.startswith("éé\n[truncated: showing the first 4 of 20 bytes]")


# read_file


async def test_read_text_file(workspace: Path) -> None:
    (workspace / "notes.md").write_text("one\ntwo\nthree\n")
    assert await call(read_file, workspace, path="notes.md") == "one\ntwo\nthree\n"


async def test_read_with_offset_and_limit(workspace: Path) -> None:
    (workspace / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    text = await call(read_file, workspace, path="n.txt", offset=2, limit=3)
    assert text == "line 3\nline 4\nline 5\n\n[lines 3-5 of 10]"
    assert await call(read_file, workspace, path="n.txt", offset=8) == (
        "line 9\nline 10\n\n[lines 9-10 of 10]"
    )
    with pytest.raises(ValueError, match="past the end"):
        await call(read_file, workspace, path="n.txt", offset=10)


async def test_read_large_file_is_truncated_at_a_line(workspace: Path) -> None:
    line = "x" * 99 + "\n"
    (workspace / "big.txt").write_text(line * 1000)
    text = await call(read_file, workspace, path="big.txt")
    assert isinstance(text, str)
    shown = OUTPUT_CAP_BYTES // 100
    assert text.startswith(line * shown + "\n[truncated: showing the first")
    assert f"of 100000 bytes (lines 1-{shown} of 1000); continue with offset={shown}]" in text
    rest = await call(read_file, workspace, path="big.txt", offset=shown, limit=2)
    assert rest == line * 2 + f"\n[lines {shown + 1}-{shown + 2} of 1000]"


async def test_read_one_huge_line_is_truncated(workspace: Path) -> None:
    (workspace / "min.js").write_text("y" * (OUTPUT_CAP_BYTES * 2))
    text = await call(read_file, workspace, path="min.js")
    assert isinstance(text, str)
    assert text.startswith("y" * OUTPUT_CAP_BYTES + "\n[truncated: showing the first")
    assert len(text) < OUTPUT_CAP_BYTES + 200


async def test_read_empty_file(workspace: Path) -> None:
    (workspace / "empty").write_bytes(b"")
    assert await call(read_file, workspace, path="empty") == "(empty file)"


@pytest.mark.parametrize(
    ("name", "data", "media_type"),
    [
        ("pic.png", PNG, "image/png"),
        ("photo.jpg", JPEG, "image/jpeg"),
        ("anim.gif", b"GIF89a" + b"\x00" * 16, "image/gif"),
        ("img.webp", b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 16, "image/webp"),
        ("no_extension", PNG, "image/png"),  # by magic
        ("wrong.txt", JPEG, "image/jpeg"),  # magic wins over the extension
    ],
)
async def test_read_image(workspace: Path, name: str, data: bytes, media_type: str) -> None:
    (workspace / name).write_bytes(data)
    output = await call(read_file, workspace, path=name)
    assert output == MediaOutput(media_type=media_type, data=base64.b64encode(data).decode())


async def test_read_errors(workspace: Path) -> None:
    (workspace / "dir").mkdir()
    (workspace / "blob.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(FileNotFoundError, match=r"no such file: missing\.txt"):
        await call(read_file, workspace, path="missing.txt")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        await call(read_file, workspace, path="dir")
    with pytest.raises(ValueError, match="not a text file"):
        await call(read_file, workspace, path="blob.bin")
    with pytest.raises(ValidationError):
        await call(read_file, workspace, path="x", offset=-1)


@pytest.mark.parametrize("tool", [read_file, write_file, edit_file])
async def test_fifos_are_refused(workspace: Path, tool: Tool[Any]) -> None:
    os.mkfifo(workspace / "pipe")  # opening it would block a worker thread forever
    with pytest.raises(ValueError, match="not a regular file: pipe"):
        await call(tool, workspace, path="pipe", content="x", old_string="a", new_string="b")


# write_file


async def test_write_creates_parents_and_overwrites(workspace: Path) -> None:
    result = await call(write_file, workspace, path="a/b/c.txt", content="héllo\n")
    assert result == "Created a/b/c.txt (7 bytes)"
    assert (workspace / "a/b/c.txt").read_text() == "héllo\n"
    result = await call(write_file, workspace, path="a/b/c.txt", content="bye")
    assert result == "Overwrote a/b/c.txt (3 bytes)"
    assert (workspace / "a/b/c.txt").read_text() == "bye"


async def test_write_to_a_directory_fails(workspace: Path) -> None:
    (workspace / "d").mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        await call(write_file, workspace, path="d", content="x")


# edit_file


async def test_edit_replaces_one_occurrence(workspace: Path) -> None:
    (workspace / "app.py").write_bytes(b"x = 1\r\ny = 2\r\n")
    result = await call(edit_file, workspace, path="app.py", old_string="y = 2", new_string="y = 3")
    assert result == "Replaced 1 occurrence in app.py"
    assert (workspace / "app.py").read_bytes() == b"x = 1\r\ny = 3\r\n"  # line endings kept


async def test_edit_replace_all(workspace: Path) -> None:
    (workspace / "t.txt").write_text("a a a")
    result = await call(
        edit_file, workspace, path="t.txt", old_string="a", new_string="b", replace_all=True
    )
    assert result == "Replaced 3 occurrences in t.txt"
    assert (workspace / "t.txt").read_text() == "b b b"


async def test_edit_errors(workspace: Path) -> None:
    (workspace / "t.txt").write_text("a a")
    with pytest.raises(ValueError, match="old_string not found"):
        await call(edit_file, workspace, path="t.txt", old_string="z", new_string="y")
    with pytest.raises(ValueError, match="occurs 2 times"):
        await call(edit_file, workspace, path="t.txt", old_string="a", new_string="b")
    with pytest.raises(ValueError, match="identical"):
        await call(edit_file, workspace, path="t.txt", old_string="a", new_string="a")
    with pytest.raises(FileNotFoundError, match="no such file"):
        await call(edit_file, workspace, path="nope.txt", old_string="a", new_string="b")
    with pytest.raises(ValidationError):
        await call(edit_file, workspace, path="t.txt", old_string="", new_string="b")
    assert (workspace / "t.txt").read_text() == "a a"
    (workspace / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ValueError, match="not a UTF-8 text file"):
        await call(edit_file, workspace, path="latin1.txt", old_string="caf", new_string="x")


def test_tool_flags() -> None:
    assert write_file.idempotent and read_file.idempotent and list_files.idempotent
    assert not edit_file.idempotent
    assert not unsandboxed_execute().idempotent


# list_files


@pytest.fixture
def tree(workspace: Path) -> Path:
    """A small tree: b.txt, a/, a/x.py, a/sub/, a/sub/y.md, and a symlink out."""
    (workspace / "a/sub").mkdir(parents=True)
    (workspace / "b.txt").write_text("b")
    (workspace / "a/x.py").write_text("x")
    (workspace / "a/sub/y.md").write_text("y")
    (workspace / "out").symlink_to(workspace.parent)
    return workspace


async def test_list_top_level(tree: Path) -> None:
    assert await call(list_files, tree) == "a/\nb.txt\nout/"


async def test_list_recursive_does_not_follow_symlinks(tree: Path) -> None:
    listing = await call(list_files, tree, recursive=True)
    assert listing == "a/\na/sub/\na/sub/y.md\na/x.py\nb.txt\nout/"


async def test_list_subdirectory_gives_workspace_paths(tree: Path) -> None:
    assert await call(list_files, tree, path="a") == "a/sub/\na/x.py"


async def test_list_max_entries(tree: Path) -> None:
    listing = await call(list_files, tree, recursive=True, max_entries=2)
    assert listing == (
        "a/\na/sub/\n[truncated: showing the first 2 of 6 entries; "
        "list a subdirectory or raise max_entries]"
    )


async def test_list_errors(tree: Path) -> None:
    (tree / "empty").mkdir()
    assert await call(list_files, tree, path="empty") == "(empty directory)"
    with pytest.raises(FileNotFoundError, match="no such directory: nope"):
        await call(list_files, tree, path="nope")
    with pytest.raises(NotADirectoryError, match=r"not a directory: b\.txt"):
        await call(list_files, tree, path="b.txt")
    with pytest.raises(WorkspacePathError):
        await call(list_files, tree, path="out")


# execute


async def test_execute_runs_in_the_workspace(workspace: Path) -> None:
    (workspace / "f.txt").write_text("hi")
    result = await call(unsandboxed_execute(), workspace, command="pwd; cat f.txt; echo err >&2")
    assert result == {
        "exit_code": 0,
        "stdout": f"{workspace}\nhi",  # tmp_path is already resolved
        "stderr": "err\n",
        "timed_out": False,
    }


async def test_execute_reports_failure_and_hides_worker_env(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_API_KEY", "sk-123")
    result = await call(
        unsandboxed_execute(), workspace, command='echo "[$SECRET_API_KEY]"; exit 3'
    )
    assert isinstance(result, dict)
    assert result["exit_code"] == 3
    assert result["stdout"] == "[]\n"


async def test_execute_has_no_stdin(workspace: Path) -> None:
    result = await call(unsandboxed_execute(), workspace, command="cat", timeout_seconds=5)
    assert isinstance(result, dict)
    assert result["exit_code"] == 0 and not result["timed_out"]


async def test_execute_timeout_kills_the_process_group(workspace: Path) -> None:
    started = time.monotonic()
    result = await call(
        unsandboxed_execute(),
        workspace,
        command="sleep 60 & echo $!; sleep 60",
        timeout_seconds=2,
    )
    assert time.monotonic() - started < 30, "the timeout ended it, not the sleeps"
    assert isinstance(result, dict)
    assert result["timed_out"] is True
    assert result["exit_code"] == -9
    assert "killed after 2 s" in result["note"]
    assert_gone(int(result["stdout"]))


async def test_execute_background_processes_do_not_outlive_it(workspace: Path) -> None:
    result = await call(unsandboxed_execute(), workspace, command="sleep 30 >/dev/null & echo $!")
    assert isinstance(result, dict)
    assert result["exit_code"] == 0
    assert_gone(int(result["stdout"]))


async def test_execute_cancelled_by_the_caller_kills_the_process_group(workspace: Path) -> None:
    command = "sleep 60 & echo $! > pid.tmp; mv pid.tmp pid; sleep 60"
    run = asyncio.ensure_future(call(unsandboxed_execute(), workspace, command=command))
    pid_file = workspace / "pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.05)
    run.cancel()  # as the tool activity's Tool.timeout does
    with pytest.raises(asyncio.CancelledError):
        await run
    assert_gone(int(pid_file.read_text()))


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
async def test_execute_returns_when_an_escaped_process_holds_the_pipes(workspace: Path) -> None:
    started = time.monotonic()
    # Wait until the escaped process has left the group (its pid file is written by itself).
    command = (
        "setsid sh -c 'echo $$ > escaped.tmp; mv escaped.tmp escaped; exec sleep 60' & "
        "while [ ! -s escaped ]; do sleep 0.05; done; cat escaped"
    )
    result = await call(unsandboxed_execute(), workspace, command=command)
    elapsed = time.monotonic() - started
    assert isinstance(result, dict)
    pid = int(result["stdout"])
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # it did escape the kill
    os.kill(pid, signal.SIGKILL)
    assert result["exit_code"] == 0 and not result["timed_out"]
    assert elapsed < 30, "it did not wait for the escaped process"


def assert_gone(pid: int) -> None:
    """The process is dead (a zombie awaiting its reaper counts as dead)."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"process {pid} survived")


async def test_execute_caps_timeout_and_output(workspace: Path) -> None:
    tool = unsandboxed_execute(max_timeout_seconds=2, output_cap=100)
    assert "capped at 2" in tool.description
    command = "head -c 1000 /dev/zero | tr '\\0' x; sleep 60"
    result = await call(tool, workspace, command=command, timeout_seconds=60)
    assert isinstance(result, dict)
    assert result["timed_out"] is True
    assert result["stdout"] == "x" * 100 + "\n[truncated: showing the first 100 of 1000 bytes]"


def test_execute_rejects_bad_arguments() -> None:
    with pytest.raises(ValidationError):
        unsandboxed_execute().args.model_validate({"command": ""})
    with pytest.raises(ValidationError):
        unsandboxed_execute().args.model_validate({"command": "ls", "timeout_seconds": 0})
    with pytest.raises(ValueError, match="positive"):
        unsandboxed_execute(max_timeout_seconds=0)


# the default registry


@pytest.fixture
def execute_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Owners set, and a sandbox or the operator's consent to none, so execute can be enabled
    on any machine."""
    monkeypatch.setenv("CHATD_EXECUTE_OWNERS", "*")
    monkeypatch.setenv("CHATD_EXECUTE_UNSANDBOXED", "1")


def test_execute_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATD_ENABLE_EXECUTE", raising=False)
    names = list(default_registry().tools)
    assert names == ["current_time", "read_file", "write_file", "edit_file", "list_files"]
    monkeypatch.setenv("CHATD_ENABLE_EXECUTE", "0")
    assert "execute" not in default_registry().tools


@pytest.mark.parametrize("value", ["1", "true", "YES"])
@pytest.mark.usefixtures("execute_allowed")
def test_execute_enabled_by_env(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CHATD_ENABLE_EXECUTE", value)
    assert "execute" in default_registry().tools
    assert "execute" not in default_registry(enable_execute=False).tools


@pytest.mark.usefixtures("execute_allowed")
def test_execute_enabled_by_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATD_ENABLE_EXECUTE", raising=False)
    monkeypatch.setenv("CHATD_EXECUTE_MAX_TIMEOUT_SECONDS", "7")
    tool = default_registry(enable_execute=True).get("execute")
    assert tool is not None
    assert tool.timeout.total_seconds() > 7
    assert "capped at 7" in tool.description
    monkeypatch.setenv("CHATD_EXECUTE_MAX_TIMEOUT_SECONDS", "soon")
    with pytest.raises(ValueError, match="CHATD_EXECUTE_MAX_TIMEOUT_SECONDS"):
        default_registry(enable_execute=True)


@pytest.mark.parametrize(
    ("name", "properties", "required"),
    [
        ("read_file", {"path", "offset", "limit"}, ["path"]),
        ("write_file", {"path", "content"}, ["path", "content"]),
        (
            "edit_file",
            {"path", "old_string", "new_string", "replace_all"},
            ["path", "old_string", "new_string"],
        ),
        ("list_files", {"path", "recursive", "max_entries"}, []),
        ("execute", {"command", "timeout_seconds"}, ["command"]),
        ("current_time", set(), []),
    ],
)
@pytest.mark.usefixtures("execute_allowed")
def test_json_schemas(name: str, properties: set[str], required: list[str]) -> None:
    tool = default_registry(enable_execute=True).get(name)
    assert tool is not None
    spec = tool.spec()
    assert spec.name == name and len(spec.description) > 20
    schema = spec.input_schema
    assert schema["type"] == "object"
    assert set(schema.get("properties", {})) == properties
    for prop in schema.get("properties", {}).values():
        assert len(prop["description"]) > 10
    assert schema.get("required", []) == required
