"""Where the tests' temporary files go: RAM (/dev/shm) when the machine has it.

Every test's database is a copy of a template, dropped when the test ends, and every
`chatd dev` or benchmark run makes a PostgreSQL cluster of its own. On a disk, creating and
deleting those files costs PostgreSQL several times the CPU of the copy itself, all of it in
the kernel. Nothing the tests write must survive the machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["disk_temp_dir", "use_ram_for_temp_files"]

RAM = Path("/dev/shm")
RAM_NEEDED_BYTES = 4 << 30
"""Free space /dev/shm must have to be used: PostgreSQL's WAL alone may take 256 MiB per
cluster, and a container's default /dev/shm is 64 MiB."""
DISK_TMPDIR_ENV = "CHATD_TEST_DISK_TMPDIR"
"""The temp dir the tests would have used: for files that must share a disk with others."""


def use_ram_for_temp_files() -> None:
    """Point TMPDIR at /dev/shm, unless it is set already or the machine has no such dir.
    Subprocesses inherit it, xdist's workers included."""
    os.environ.setdefault(DISK_TMPDIR_ENV, tempfile.gettempdir())
    if "TMPDIR" not in os.environ and _roomy(RAM):
        os.environ["TMPDIR"] = str(RAM)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def _roomy(path: Path) -> bool:
    return (
        path.is_dir()
        and os.access(path, os.W_OK | os.X_OK)
        and shutil.disk_usage(path).free >= RAM_NEEDED_BYTES
    )


def disk_temp_dir() -> str:
    """The temp dir on disk: hard links to the interpreter and the venv need their file
    system, which a RAM temp dir is not."""
    return os.environ.get(DISK_TMPDIR_ENV) or tempfile.gettempdir()
