"""docker-compose.yml's chatd services as processes on this machine, for the deployment test.

No Docker engine here. What the compose file says each service runs is read from it (its
command, the names of its environment, its volumes, replicas, read-only root filesystem), and
each replica runs as a process the way its container would: as a non-root user, from a
root-owned read-only copy of what the Dockerfile copies into /app, with a read-only home, a
private writable /tmp, and the workspace volume a directory every worker process shares.
"""

from __future__ import annotations

import getpass
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chatd.devstack.ports import pdeathsig_preexec, register_child
from support.scratch import disk_temp_dir
from support.worker_process import ROOT, WorkerProcess

__all__ = [
    "COMPOSE_FILE",
    "DOCKERFILE",
    "TEST_USER",
    "AppCopy",
    "ComposeService",
    "Host",
    "Runtime",
    "ServiceProcess",
    "User",
    "compose_services",
    "deploy_user",
    "python_runtime",
    "read_only_app",
]

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
TEST_USER = "chatd-deploy-test"
"""The unprivileged user the processes run as when the test runs as root (CI)."""


@dataclass(frozen=True)
class ComposeService:
    """What docker-compose.yml says one service runs."""

    name: str
    command: list[str]
    environment: dict[str, str]
    """Variable names and the compose file's (uninterpolated) values."""
    volumes: dict[str, str]
    """Mount path in the container -> volume name."""
    replicas: int
    read_only: bool
    tmpfs: list[str]

    def env(self, values: Mapping[str, str], mounts: Mapping[str, Path]) -> dict[str, str]:
        """The service's environment: a value from `values` for every name the compose file
        sets (a name the test has no value for fails it); a value naming a mounted path
        points into that volume's stand-in directory instead."""
        env: dict[str, str] = {}
        for name, value in self.environment.items():
            for target, volume in self.volumes.items():
                if value == target or value.startswith(target + "/"):
                    env[name] = str(mounts[volume]) + value[len(target) :]
        missing = sorted(set(self.environment) - set(env) - set(values))
        if missing:
            raise AssertionError(f"{self.name}: the test has no value for {missing}")
        return {name: env.get(name) or values[name] for name in self.environment}


def compose_services() -> dict[str, ComposeService]:
    """The services of docker-compose.yml."""
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return {name: _service(name, spec) for name, spec in document["services"].items()}


def _service(name: str, spec: dict[str, Any]) -> ComposeService:
    volumes: dict[str, str] = {}
    for entry in spec.get("volumes", []):
        source, target = str(entry).split(":")[:2]
        volumes[target] = source
    environment = spec.get("environment") or {}
    command = spec.get("command") or []
    return ComposeService(
        name=name,
        command=[str(a) for a in command] if isinstance(command, list) else [str(command)],
        environment={str(k): "" if v is None else str(v) for k, v in environment.items()},
        volumes=volumes,
        replicas=int(spec.get("deploy", {}).get("replicas", 1)),
        read_only=bool(spec.get("read_only", False)),
        tmpfs=[str(t) for t in spec.get("tmpfs", [])],
    )


def dockerfile_sources() -> list[str]:
    """What the Dockerfile COPYs from the build context into the image."""
    sources: list[str] = []
    for line in DOCKERFILE.read_text().splitlines():
        if match := re.match(r"COPY\s+(?!--)(.+)", line.strip()):
            sources += match.group(1).split()[:-1]
    return sources


@dataclass(frozen=True)
class User:
    """Who the processes run as."""

    name: str
    uid: int
    gid: int

    @property
    def switches(self) -> bool:
        """Whether starting a process as this user changes its uid (the test runs as root)."""
        return self.uid != os.geteuid()


def deploy_user() -> User:
    """`TEST_USER` (created once, a system user without a home) when running as root; else
    the user running the test, which is unprivileged already."""
    if os.geteuid() != 0:
        return User(getpass.getuser(), os.getuid(), os.getgid())
    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        created = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
             "/nonexistent", "--shell", "/usr/sbin/nologin", TEST_USER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        # 9: created meanwhile by another test run; any other failure is the test's.
        assert created.returncode in (0, 9), created.stderr
        entry = pwd.getpwnam(TEST_USER)
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid)


@dataclass(frozen=True)
class AppCopy:
    """The image's /app: a root-owned, read-only copy of what the Dockerfile copies."""

    path: Path
    snapshot: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Relative path -> (mode, size, mtime_ns) of every entry, as copied."""

    def changes(self) -> list[str]:
        """Entries added, removed or changed since the copy was made."""
        now = _tree(self.path)
        return sorted(
            k for k in now.keys() | self.snapshot.keys() if now.get(k) != self.snapshot.get(k)
        )


def read_only_app(root: Path) -> AppCopy:
    """Copy the Dockerfile's sources to `root/app`, byte-compiled as `pip install .` leaves
    a package (the processes never write bytecode), and take write permission from all."""
    app = root / "app"
    app.mkdir()
    for source in dockerfile_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, app / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, app / source)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(app)], check=True)
    for path in [app, *app.rglob("*")]:
        path.chmod(stat.S_IMODE(path.lstat().st_mode) & ~0o222)
    return AppCopy(app, _tree(app))


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    entries = {}
    for path in root.rglob("*"):
        info = path.lstat()
        entries[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return entries


@dataclass(frozen=True)
class Runtime:
    """The Python the processes run: a venv whose `bin` has `python` and the `chatd` script
    (as `pip install .` makes it), on the interpreter and site-packages of the test's own."""

    bin: Path
    env: dict[str, str]
    copied: list[str]
    """What had to be hard-linked (or copied) for the user to reach it, and why."""


def python_runtime(root: Path, user: User) -> Runtime:
    """A venv in `root/venv` for `user`. The test's interpreter and packages are used where
    they are: each one behind a directory others can't enter (pyenv under a 0700 /root, a
    clone in a 0700 temp dir) is hard-linked into `root` first."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    home, site = Path(sys.base_prefix), Path(sysconfig.get_paths()["purelib"])
    copied: list[str] = []
    env: dict[str, str] = {}
    if user.switches and (closed := _closed_dir(home)):
        home = _link_interpreter(home, root / "python", version)
        copied.append(f"interpreter {sys.base_prefix} ({closed} is closed to others)")
        env["LD_LIBRARY_PATH"] = str(home / "lib")  # libpython's RUNPATH names the original
    if user.switches and (closed := _closed_dir(site)):
        site = _link_tree(site, root / "site-packages")
        copied.append(f"site-packages {sysconfig.get_paths()['purelib']} ({closed} is closed)")
    venv = root / "venv"
    packages = venv / "lib" / version / "site-packages"
    packages.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "pyvenv.cfg").write_text(
        f"home = {home / 'bin'}\ninclude-system-site-packages = false\n"
    )
    (venv / "bin" / "python").symlink_to(home / "bin" / version)
    # addsitedir, not a path line: the test venv's own .pth files must run (setuptools' shim).
    (packages / "test-venv.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    script = venv / "bin" / "chatd"
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom chatd.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return Runtime(venv / "bin", env, copied)


def _closed_dir(path: Path) -> Path | None:
    """The first directory on the way to `path` that others may not enter, if any."""
    for directory in [*reversed(path.parents), path]:
        if not directory.stat().st_mode & stat.S_IXOTH:
            return directory
    return None


def _link_interpreter(prefix: Path, into: Path, version: str) -> Path:
    (into / "bin").mkdir(parents=True)
    os.link(prefix / "bin" / version, into / "bin" / version)
    _link_tree(prefix / "lib" / version, into / "lib" / version, skip=("site-packages", "test"))
    for library in (prefix / "lib").glob("libpython*"):
        if library.is_symlink():
            (into / "lib" / library.name).symlink_to(library.readlink())
        else:
            _link(library, into / "lib" / library.name)
    return into


def _link(source: str | Path, target: str | Path) -> None:
    """A hard link, or a copy across file systems: instant, and the file keeps its mode."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _link_tree(source: Path, into: Path, skip: tuple[str, ...] = ()) -> Path:
    shutil.copytree(source, into, ignore=shutil.ignore_patterns(*skip), copy_function=_link)
    into.chmod(0o755)
    return into


class ServiceProcess(WorkerProcess):
    """One replica of a compose service: its command run as `user` in `cwd` with exactly
    `env`. Killing, stopping and waiting are a `WorkerProcess`'s."""

    def __init__(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, user: User, log: Path
    ) -> None:
        # Not WorkerProcess.__init__: that one builds a test worker's environment from ours.
        self.argv, self.env, self.cwd, self.user, self.log = argv, env, cwd, user, log
        self.process: subprocess.Popen[bytes] | None = None
        self.pids: list[int] = []
        """The pid of each start, oldest first."""

    def start(self) -> ServiceProcess:
        """Start it (the previous process, if any, must have exited)."""
        if self.running:
            raise RuntimeError("this service process is already running")
        as_user: dict[str, Any] = (
            {"user": self.user.uid, "group": self.user.gid, "extra_groups": []}
            if self.user.switches
            else {}
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=pdeathsig_preexec(signal.SIGKILL),
                **as_user,
            )
        register_child(self.process)
        self.pids.append(self.process.pid)
        return self

    def output(self) -> str:
        """What the process printed (stdout and stderr)."""
        return self.log.read_text(errors="replace")


@dataclass
class Host:
    """This machine set up as the containers see theirs: the service user, the read-only
    app, the Python, a directory per named volume (the user's), a read-only home and a
    private /tmp, all under one temp directory (not pytest's tmp_path, which lies under a
    0700 directory the user can't enter)."""

    root: Path
    user: User
    app: AppCopy
    runtime: Runtime
    mounts: dict[str, Path]
    """Volume name -> its directory."""
    base_env: dict[str, str]
    started: list[ServiceProcess] = field(default_factory=list)

    @classmethod
    def prepare(cls, services: Mapping[str, ComposeService], extra_env: Mapping[str, str]) -> Host:
        """Set it up; `extra_env` goes to every process after the image's own."""
        root = Path(tempfile.mkdtemp(prefix="chatd-deploy-", dir=disk_temp_dir()))
        try:
            return cls._prepare(root, services, extra_env)
        except BaseException:
            _remove(root)
            raise

    @classmethod
    def _prepare(
        cls, root: Path, services: Mapping[str, ComposeService], extra_env: Mapping[str, str]
    ) -> Host:
        root.chmod(0o755)
        user = deploy_user()
        app, runtime = read_only_app(root), python_runtime(root, user)
        names = {v for s in services.values() for v in s.volumes.values()}
        mounts = {name: _owned_dir(root / "volumes" / name, user, 0o755) for name in names}
        home = root / "home"  # the image user's home, on the read-only root filesystem
        home.mkdir(mode=0o555)
        base_env = {
            "PATH": f"{runtime.bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(_owned_dir(root / "tmp", user, 0o700)),  # the services' tmpfs /tmp
            "PYTHONPATH": str(app.path),
            # The Dockerfile's ENV.
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **runtime.env,
            **extra_env,
        }
        return cls(root, user, app, runtime, mounts, base_env)

    def start(
        self, service: ComposeService, argv: list[str], values: Mapping[str, str], name: str
    ) -> ServiceProcess:
        """Run `argv` (a `chatd` command) as a replica of `service` would, its environment
        from `values` (`ComposeService.env`); the output in `<name>.log`."""
        assert argv[0] == "chatd", argv
        env = {**self.base_env, **service.env(values, self.mounts)}
        process = ServiceProcess(
            [str(self.runtime.bin / "chatd"), *argv[1:]],
            env=env,
            cwd=self.app.path,
            user=self.user,
            log=self.root / f"{name}.log",
        )
        self.started.append(process.start())
        return process

    def remove(self) -> None:
        """Stop every process and delete the directory."""
        for process in self.started:
            process.stop()
        _remove(self.root)


def _remove(root: Path) -> None:
    """Delete `root`, giving write permission back where it was taken (the app, the home):
    only there, since the hard links elsewhere share their modes with the originals."""
    for tree in (root / "app", root / "home"):
        for path in [tree, *tree.rglob("*")] if tree.exists() else []:
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)
    shutil.rmtree(root)


def _owned_dir(path: Path, user: User, mode: int) -> Path:
    path.mkdir(parents=True)
    path.chmod(mode)
    os.chown(path, user.uid, user.gid)
    return path
