"""Run every example against one fresh `chatd dev` stack; exit non-zero if any fails.

    python examples/run_all.py                 # all of them
    python examples/run_all.py native_api      # only those whose name contains a word

It starts `chatd dev` once, on free ports and a temporary data directory, with what the
examples need: a known API key, `CHATD_WEBHOOK_ALLOW_PRIVATE=1` (the webhook receiver
listens on 127.0.0.1) and `CHATD_MCP_CONFIG=examples/mcp/mcp.json`. Each example then runs
as its own process with `CHATD_BASE_URL` and `CHATD_API_KEY` set, and must exit 0.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [
    ["python", "examples/openai_function_tools.py"],
    ["python", "examples/openai_background_resume.py"],
    ["python", "examples/native_api.py"],
    ["python", "examples/webhook_receiver.py"],
    ["python", "examples/mcp/use_mcp.py"],
    ["node", "examples/node_stream.mjs"],
]
EXAMPLE_TIMEOUT_S = 180
START_TIMEOUT_S = 120


def free_port() -> int:
    """A port nothing listens on now (the OS picks it)."""
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def say(message: str) -> None:
    print(f"[run_all {time.strftime('%H:%M:%S')}] {message}", flush=True)


def start_stack(data_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start `chatd dev` and wait until its gateway is ready; return it and its base URL."""
    api_port = free_port()
    ports = {
        "--api-port": api_port,
        "--temporal-port": free_port(),
        "--temporal-ui-port": free_port(),
        "--postgres-port": free_port(),
        "--demo-port": free_port(),
    }
    command = [sys.executable, "-m", "chatd.cli", "dev", "--data-dir", str(data_dir)]
    command += [str(v) for pair in ports.items() for v in pair]
    command += ["--api-key", env["CHATD_API_KEY"]]
    log = open(data_dir.parent / "chatd-dev.log", "wb")  # kept open while it runs
    say(f"starting chatd dev ({' '.join(command[3:])}), log {log.name}")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{api_port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"chatd dev exited ({process.returncode}):\n{_tail(Path(log.name))}")
        try:
            if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                say(f"chatd dev ready at {base_url} (pid {process.pid})")
                return process, base_url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_stack(process)
    raise SystemExit(f"chatd dev not ready within {START_TIMEOUT_S} s:\n{_tail(Path(log.name))}")


def stop_stack(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C for `chatd dev` (it stops its children), then a kill if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()  # its Postgres and Temporal die with it (parent-death signal)
            process.wait()
    say(f"chatd dev stopped ({process.returncode})")


def run_example(command: list[str], env: dict[str, str]) -> tuple[bool, float, str]:
    """Run one example; whether it passed, how long it took, and its output."""
    executable = sys.executable if command[0] == "python" else shutil.which(command[0])
    if executable is None:
        return False, 0.0, f"{command[0]} is not installed (the node example needs Node 20+)"
    started = time.monotonic()
    try:
        done = subprocess.run(
            [executable, *command[1:]],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as timeout:
        output = (timeout.stdout or "") + (timeout.stderr or "")
        output = output if isinstance(output, str) else output.decode(errors="replace")
        return (
            False,
            time.monotonic() - started,
            output + f"\n(timed out after {EXAMPLE_TIMEOUT_S} s)",
        )
    return done.returncode == 0, time.monotonic() - started, done.stdout + done.stderr


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def main(words: list[str]) -> int:
    chosen = [c for c in EXAMPLES if not words or any(w in c[1] for w in words)]
    if not chosen:
        say(f"no example matches {words}")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="chatd-examples-"))
    env = dict(os.environ)
    env.update(
        {
            "CHATD_API_KEY": "examples-" + secrets.token_urlsafe(24),
            "CHATD_WEBHOOK_ALLOW_PRIVATE": "1",
            "CHATD_MCP_CONFIG": str(ROOT / "examples/mcp/mcp.json"),
            "NOTES_DIR": str(workdir / "notes"),
            "NOTES_LOG": str(workdir / "notes-mcp.log"),
            # The MCP config's `python` must be this interpreter (it has the `mcp` package).
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        }
    )
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):  # the examples expect the demo model
        env.pop(name, None)
    process, base_url = start_stack(workdir / "data", env)
    env["CHATD_BASE_URL"] = base_url
    failed = []
    try:
        for number, command in enumerate(chosen, 1):
            say(f"({number}/{len(chosen)}) {' '.join(command)} ...")
            passed, seconds, output = run_example(command, env)
            if passed:
                say(f"({number}/{len(chosen)}) PASS {command[1]} in {seconds:.1f} s")
            else:
                failed.append(command[1])
                say(f"({number}/{len(chosen)}) FAIL {command[1]} in {seconds:.1f} s; its output:")
                print("    " + output.strip().replace("\n", "\n    "), flush=True)
    finally:
        stop_stack(process)
    if failed:
        shutil.rmtree(workdir / "data", ignore_errors=True)  # keep the log, not the databases
        say(f"{len(failed)} of {len(chosen)} failed: {', '.join(failed)}")
        say(f"chatd dev's log: {workdir / 'chatd-dev.log'}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    say(f"all {len(chosen)} examples passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
