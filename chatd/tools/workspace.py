"""File tools confined to the chat's workspace: read, write, edit and list files.

Every path is relative to the workspace; `resolve_in_workspace` refuses anything that would
land outside it (absolute paths, `..` escapes, symlinks pointing out). Blocking file I/O runs
in a thread so the worker's event loop never stalls.

A chat's tool calls run on any worker, so the workspace root is a volume all workers share
and every call reads the files afresh (nothing about them is kept in a process). Writes
replace a file by renaming a complete temporary copy over it, so another worker's read never
sees half a file and a worker killed mid-write leaves the previous content.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import os
import stat
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, Field

from chatd.tools.base import MediaOutput, Tool, ToolContext, ToolOutput

__all__ = [
    "MAX_IMAGE_BYTES",
    "OUTPUT_CAP_BYTES",
    "WorkspacePathError",
    "edit_file",
    "list_files",
    "read_file",
    "resolve_in_workspace",
    "truncate_output",
    "write_file",
]

OUTPUT_CAP_BYTES = 32 * 1024
"""Text results larger than this are truncated."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Images larger than this are refused by read_file."""

_FILE_TOOL_TIMEOUT = timedelta(seconds=30)
_SNIFF_BYTES = 8192
_IMAGE_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}
_IMAGE_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_PATH_HELP = "Path relative to the workspace root, e.g. 'notes.md' or 'src/app.py'."


class WorkspacePathError(ValueError):
    """A path that is invalid or would leave the workspace."""


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """The absolute, symlink-free location of `path` inside `workspace`, or WorkspacePathError."""
    if Path(path).is_absolute():
        raise WorkspacePathError(f"path escapes the workspace: {path} (use a relative path)")
    root = workspace.resolve()
    try:
        resolved = (root / path).resolve()
    except (OSError, RuntimeError, ValueError) as err:
        raise WorkspacePathError(f"invalid path {path!r}: {err}") from err
    if not resolved.is_relative_to(root):
        raise WorkspacePathError(f"path escapes the workspace: {path}")
    return resolved


def _decode_prefix(data: bytes, cap: int) -> str:
    """The first `cap` bytes of `data` decoded, without a split multi-byte character at the end."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data[:cap], final=False)


def truncate_output(data: bytes, total: int | None = None, cap: int = OUTPUT_CAP_BYTES) -> str:
    """`data` decoded as UTF-8, cut to `cap` bytes with a note when it (of `total`) is larger."""
    size = len(data) if total is None else max(total, len(data))
    if size <= cap:
        return data.decode("utf-8", "replace")
    shown = _decode_prefix(data, cap)
    shown_bytes = len(shown.encode("utf-8", "replace"))
    return f"{shown}\n[truncated: showing the first {shown_bytes} of {size} bytes]"


# read_file


class ReadFileArgs(BaseModel):
    """Arguments of read_file."""

    path: str = Field(description=_PATH_HELP)
    offset: int = Field(
        default=0, ge=0, description="Number of lines to skip first (0 starts at line 1)."
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description="Maximum number of lines to return; omit to read to the end of the file.",
    )


def _image_type(path: Path, head: bytes) -> str | None:
    for magic, media_type in _IMAGE_MAGIC.items():
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return _IMAGE_EXTENSIONS.get(path.suffix.lower())


def _existing_file(target: Path, shown: str) -> None:
    if not target.exists():
        raise FileNotFoundError(f"no such file: {shown}")
    if target.is_dir():
        raise IsADirectoryError(f"is a directory, not a file: {shown} (use list_files)")
    if not target.is_file():
        raise ValueError(f"not a regular file: {shown}")


def _read_image(target: Path, media_type: str, shown: str) -> MediaOutput:
    size = target.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise ValueError(f"image too large: {shown} is {size} bytes (limit {MAX_IMAGE_BYTES})")
    return MediaOutput(media_type=media_type, data=base64.b64encode(target.read_bytes()).decode())


@dataclass
class _Lines:
    data: bytes = b""
    shown: int = 0
    """Lines in `data` (the last may be cut at the output cap)."""
    selected: int = 0
    selected_bytes: int = 0
    total: int = 0


def _read_lines(target: Path, offset: int, limit: int | None) -> _Lines:
    """The lines selected by offset and limit, kept up to the output cap."""
    lines, kept, full = _Lines(), list[bytes](), False
    with target.open("rb") as file:
        for number, line in enumerate(file, start=1):
            lines.total = number
            if number <= offset or (limit is not None and lines.selected >= limit):
                continue
            full = full or (lines.selected_bytes + len(line) > OUTPUT_CAP_BYTES and bool(kept))
            if not full:
                kept.append(line[:OUTPUT_CAP_BYTES])
            lines.selected += 1
            lines.selected_bytes += len(line)
    lines.data, lines.shown = b"".join(kept), len(kept)
    return lines


def _read_text(target: Path, args: ReadFileArgs) -> str:
    lines = _read_lines(target, args.offset, args.limit)
    if args.offset and args.offset >= lines.total:
        raise ValueError(f"offset {args.offset} is past the end ({lines.total} lines): {args.path}")
    if lines.total == 0:
        return "(empty file)"
    text = _decode_prefix(lines.data, OUTPUT_CAP_BYTES)
    first, last = args.offset + 1, args.offset + lines.shown
    span = f"lines {first}-{last} of {lines.total}"
    if lines.selected_bytes > OUTPUT_CAP_BYTES:
        shown_bytes = len(text.encode("utf-8", "replace"))
        return (
            f"{text}\n[truncated: showing the first {shown_bytes} of {lines.selected_bytes} bytes "
            f"({span}); continue with offset={last}]"
        )
    if lines.selected < lines.total:
        text += f"\n[{span}]"
    return text


def _read_file_sync(workspace: Path, args: ReadFileArgs) -> ToolOutput:
    target = resolve_in_workspace(workspace, args.path)
    _existing_file(target, args.path)
    with target.open("rb") as file:
        head = file.read(_SNIFF_BYTES)
    media_type = _image_type(target, head)
    if media_type is not None:
        return _read_image(target, media_type, args.path)
    if b"\x00" in head:
        raise ValueError(f"not a text file (binary content): {args.path}")
    return _read_text(target, args)


async def _read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolOutput:
    return await asyncio.to_thread(_read_file_sync, ctx.workspace, args)


read_file: Tool[ReadFileArgs] = Tool(
    name="read_file",
    description=(
        "Read a file from your workspace. Text files are returned as-is (UTF-8); use offset and "
        f"limit to page through long files, since output over {OUTPUT_CAP_BYTES // 1024} KiB is "
        "truncated. PNG, JPEG, GIF and WebP images are returned as images you can see. "
        "Binary files are refused."
    ),
    args=ReadFileArgs,
    run=_read_file,
    timeout=_FILE_TOOL_TIMEOUT,
)


# write_file


class WriteFileArgs(BaseModel):
    """Arguments of write_file."""

    path: str = Field(description=_PATH_HELP)
    content: str = Field(description="The complete new content of the file (UTF-8 text).")


def _replace_file(target: Path, data: bytes) -> None:
    """Write `data` to `target` atomically: a temporary file beside it, renamed over it (the
    mode of the file it replaces is kept; a new file is 0644)."""
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _write_file_sync(workspace: Path, args: WriteFileArgs) -> str:
    target = resolve_in_workspace(workspace, args.path)
    existed = target.exists()
    if target.is_dir():
        raise IsADirectoryError(f"is a directory, not a file: {args.path}")
    if existed and not target.is_file():
        raise ValueError(f"not a regular file: {args.path}")
    target.parent.mkdir(parents=True, exist_ok=True)
    data = args.content.encode("utf-8")
    _replace_file(target, data)
    return f"{'Overwrote' if existed else 'Created'} {args.path} ({len(data)} bytes)"


async def _write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolOutput:
    return await asyncio.to_thread(_write_file_sync, ctx.workspace, args)


write_file: Tool[WriteFileArgs] = Tool(
    name="write_file",
    description=(
        "Write a text file in your workspace, replacing it entirely if it exists. Missing parent "
        "directories are created. To change part of an existing file prefer edit_file."
    ),
    args=WriteFileArgs,
    run=_write_file,
    timeout=_FILE_TOOL_TIMEOUT,
)


# edit_file


class EditFileArgs(BaseModel):
    """Arguments of edit_file."""

    path: str = Field(description=_PATH_HELP)
    old_string: str = Field(
        min_length=1,
        description=(
            "The exact text to replace, including whitespace and indentation. It must occur "
            "exactly once unless replace_all is true; include surrounding lines to make it unique."
        ),
    )
    new_string: str = Field(description="The text to put in its place (may be empty to delete).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of requiring exactly one."
    )


def _edit_file_sync(workspace: Path, args: EditFileArgs) -> str:
    target = resolve_in_workspace(workspace, args.path)
    _existing_file(target, args.path)
    try:
        text = target.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not a UTF-8 text file: {args.path}") from err
    found = text.count(args.old_string)
    if found == 0:
        raise ValueError(f"old_string not found in {args.path}; read the file and copy it exactly")
    if found > 1 and not args.replace_all:
        raise ValueError(
            f"old_string occurs {found} times in {args.path}; add surrounding context to make it "
            "unique, or set replace_all to replace every occurrence"
        )
    _replace_file(target, text.replace(args.old_string, args.new_string).encode("utf-8"))
    return f"Replaced {found} occurrence{'s' if found > 1 else ''} in {args.path}"


async def _edit_file(args: EditFileArgs, ctx: ToolContext) -> ToolOutput:
    if args.old_string == args.new_string:
        raise ValueError("old_string and new_string are identical; nothing to change")
    return await asyncio.to_thread(_edit_file_sync, ctx.workspace, args)


edit_file: Tool[EditFileArgs] = Tool(
    name="edit_file",
    description=(
        "Edit a text file in your workspace by exact string replacement: old_string is replaced "
        "with new_string. old_string must match the file exactly (whitespace included) and, "
        "unless replace_all is true, occur exactly once. Read the file first."
    ),
    args=EditFileArgs,
    run=_edit_file,
    timeout=_FILE_TOOL_TIMEOUT,
    idempotent=False,  # after a crash the edit may already be applied, or the file changed
)


# list_files


class ListFilesArgs(BaseModel):
    """Arguments of list_files."""

    path: str = Field(
        default=".", description="Directory relative to the workspace root; '.' is the root."
    )
    recursive: bool = Field(
        default=False, description="List everything below the directory, not only its entries."
    )
    max_entries: int = Field(
        default=200, ge=1, le=5000, description="Maximum number of entries to return."
    )


def _entry(root: Path, path: Path) -> str:
    name = path.relative_to(root).as_posix()
    return f"{name}/" if path.is_dir() else name


def _walk(root: Path, directory: Path, recursive: bool) -> list[str]:
    if not recursive:
        return [_entry(root, p) for p in directory.iterdir()]
    entries: list[str] = []
    for dirpath, dirnames, filenames in os.walk(directory):  # does not follow symlinks
        base = Path(dirpath)
        entries.extend(_entry(root, base / name) for name in [*dirnames, *filenames])
    return entries


def _list_files_sync(workspace: Path, args: ListFilesArgs) -> str:
    directory = resolve_in_workspace(workspace, args.path)
    if not directory.exists():
        raise FileNotFoundError(f"no such directory: {args.path}")
    if not directory.is_dir():
        raise NotADirectoryError(f"not a directory: {args.path} (use read_file)")
    entries = sorted(_walk(workspace.resolve(), directory, args.recursive))
    if not entries:
        return "(empty directory)"
    text = "\n".join(entries[: args.max_entries])
    if len(entries) > args.max_entries:
        text += (
            f"\n[truncated: showing the first {args.max_entries} of {len(entries)} entries; "
            "list a subdirectory or raise max_entries]"
        )
    return truncate_output(text.encode("utf-8"))


async def _list_files(args: ListFilesArgs, ctx: ToolContext) -> ToolOutput:
    return await asyncio.to_thread(_list_files_sync, ctx.workspace, args)


list_files: Tool[ListFilesArgs] = Tool(
    name="list_files",
    description=(
        "List files in your workspace, one per line, sorted, as paths relative to the workspace "
        "root (usable as-is with the other file tools). Directories end with '/'."
    ),
    args=ListFilesArgs,
    run=_list_files,
    timeout=_FILE_TOOL_TIMEOUT,
)
