"""OpenAI's Codex CLI (`@openai/codex`, pinned in tests/js/codex) as its docs configure a
provider, against the real stack: `codex exec` runs real tasks on this machine while every
model call is a durable turn in chatd, over HTTP SSE and over a WebSocket.

The fake model is scripted as a real model would act: it reads the tools Codex offers from
the provider request (their names and parameters) and calls them; the commands run in the
test's own directory, by Codex."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import Cluster, Stack
from support.api_process import chatd_api, until_ready
from support.forked import ForkedChatd

from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.store.chats import ChatStore

CODEX = Path(__file__).resolve().parents[1] / "js" / "codex" / "node_modules" / ".bin" / "codex"
TRANSPORTS = ["http", "websocket"]

pytestmark = pytest.mark.skipif(
    not CODEX.exists(), reason="npm ci in tests/js/codex first (.ci/run does)"
)


@dataclass
class CodexRun:
    """What one `codex exec` printed and how it ended."""

    returncode: int
    stdout: str
    stderr: str


def _config(stack: Stack, transport: str, root: str | None = None) -> str:
    """The provider block of docs/guides/codex.md, pointed at this stack (or `root`)."""
    root = root or stack.base_url.removesuffix("/api/v1")
    return (
        'model_provider = "chatd"\n'
        "[model_providers.chatd]\n"
        'name = "chatd"\n'
        f'base_url = "{root}/v1"\n'
        'env_key = "CHATD_API_KEY"\n'
        'wire_api = "responses"\n'
        f"supports_websockets = {'true' if transport == 'websocket' else 'false'}\n"
        "request_max_retries = 10\n"
        "stream_max_retries = 10\n"
    )


async def _codex(
    stack: Stack, tmp_path: Path, transport: str, model: str, *args: str, root: str | None = None
) -> CodexRun:
    """Run `codex exec` in `tmp_path/work` with a fresh CODEX_HOME, against the stack's
    gateway or the one at `root`."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    (home / "config.toml").write_text(_config(stack, transport, root))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CODEX_HOME": str(home),
        "CHATD_API_KEY": stack.key,
        "RUST_LOG": "error",
    }
    process = await asyncio.create_subprocess_exec(
        str(CODEX),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--model",
        model,
        *args,
        cwd=work,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 240)
    assert process.returncode is not None
    return CodexRun(process.returncode, out.decode(), err.decode())


def _tool(request: FakeRequest, name: str) -> dict[str, Any]:
    """The tool Codex offered the model under `name` (an Anthropic tool, as chatd sent it)."""
    for tool in request.body.get("tools", []):
        if tool.get("name") == name:
            return dict(tool)
    offered = [t.get("name") for t in request.body.get("tools", [])]
    raise AssertionError(f"Codex offered no {name!r} tool: {offered}")


def _shell(request: FakeRequest, command: str, call_id: str) -> FakeToolCall:
    """A call of Codex's shell tool, with the arguments its schema asks for."""
    properties = _tool(request, "exec_command")["input_schema"]["properties"]
    arguments: dict[str, Any] = (
        {"cmd": command} if "cmd" in properties else {"command": ["bash", "-lc", command]}
    )
    return FakeToolCall(name="exec_command", arguments=arguments, id=call_id)


def _results(request: FakeRequest) -> dict[str, str]:
    """The tool results in the request, by call id."""
    found: dict[str, str] = {}
    for message in request.body["messages"]:
        if message["role"] != "user" or isinstance(message["content"], str):
            continue
        for block in message["content"]:
            if block.get("type") == "tool_result":
                content = block.get("content")
                text = (
                    content
                    if isinstance(content, str)
                    else "".join(c.get("text", "") for c in content or [])
                )
                found[block["tool_use_id"]] = text
    return found


def _model(stack: Stack, act: Callable[[FakeRequest, dict[str, str]], FakeResponse]) -> str:
    """A fake model whose next step `act` decides from the request and its tool results."""
    name = f"codex-{os.urandom(4).hex()}"
    stack.fake.script(name, lambda request: act(request, _results(request)))
    return name


def _steps(stack: Stack, name: str) -> int:
    """The model steps the fake model was asked for (an attempt retried on a busy machine
    asks for its step again, with the same messages)."""
    return len({len(r.body["messages"]) for r in stack.fake.requests(name)})


async def _chats_of(stack: Stack, name: str) -> set[str]:
    rows = await stack.pool.fetch("SELECT id FROM chats WHERE model->>'name' = $1", name)
    return {str(r["id"]) for r in rows}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_codex_runs_a_command_and_answers_from_its_output(
    stack: Stack, tmp_path: Path, transport: str
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("the answer is 42\n")

    def act(request: FakeRequest, results: dict[str, str]) -> FakeResponse:
        if "toolu_cat" not in results:
            return FakeResponse(parts=[_shell(request, "cat notes.txt", "toolu_cat")])
        return FakeResponse(parts=[FakeText(text=f"The file says: {results['toolu_cat'].strip()}")])

    name = _model(stack, act)
    run = await _codex(stack, tmp_path, transport, f"anthropic/{name}", "what is in notes.txt?")
    assert run.returncode == 0, run.stderr
    assert "the answer is 42" in run.stdout
    assert "ERROR" not in run.stderr, run.stderr
    assert _steps(stack, name) == 2
    assert len(await _chats_of(stack, name)) == 1, "the session's calls are one chat"


PATCH = """*** Begin Patch
*** Update File: greeting.txt
@@
-hello
+hello, world
*** End Patch
"""


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_codex_edits_a_file_with_apply_patch(
    stack: Stack, tmp_path: Path, transport: str
) -> None:
    """Codex 0.171 offers a model it has no metadata for no `apply_patch` tool: the model
    runs `apply_patch` as a command, which Codex intercepts and applies itself. Had it
    offered the freeform tool, it would be a custom tool here, called with its `input`."""
    (tmp_path / "work").mkdir()
    target = tmp_path / "work" / "greeting.txt"
    target.write_text("hello\n")

    forms: list[str] = []

    def act(request: FakeRequest, results: dict[str, str]) -> FakeResponse:
        if "toolu_patch" in results:
            return FakeResponse(parts=[FakeText(text="Patched.")])
        offered = {t.get("name") for t in request.body.get("tools", [])}
        if "apply_patch" in offered:  # a freeform (custom) tool, its one string as `input`
            forms.append("tool")
            call = FakeToolCall(name="apply_patch", arguments={"input": PATCH}, id="toolu_patch")
            return FakeResponse(parts=[call])
        # Offered no tool of its own, apply_patch is a command Codex runs itself.
        forms.append("command")
        command = f"apply_patch <<'EOF'\n{PATCH}EOF"
        return FakeResponse(parts=[_shell(request, command, "toolu_patch")])

    name = _model(stack, act)
    run = await _codex(stack, tmp_path, transport, f"anthropic/{name}", "greet the world")
    assert run.returncode == 0, run.stderr
    assert target.read_text() == "hello, world\n", (forms, run.stdout)
    assert "Patched." in run.stdout


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_codex_runs_two_commands_of_one_step_in_parallel(
    stack: Stack, tmp_path: Path, transport: str
) -> None:
    (tmp_path / "work").mkdir()

    def act(request: FakeRequest, results: dict[str, str]) -> FakeResponse:
        if not results:
            return FakeResponse(
                parts=[
                    _shell(request, "echo one > a.txt && echo wrote a", "toolu_a"),
                    _shell(request, "echo two > b.txt && echo wrote b", "toolu_b"),
                ]
            )
        assert set(results) == {"toolu_a", "toolu_b"}, "both results come back in one request"
        return FakeResponse(parts=[FakeText(text="both written")])

    name = _model(stack, act)
    run = await _codex(stack, tmp_path, transport, f"anthropic/{name}", "write a and b")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "work" / "a.txt").read_text() == "one\n"
    assert (tmp_path / "work" / "b.txt").read_text() == "two\n"
    assert "both written" in run.stdout
    assert _steps(stack, name) == 2, "both calls in one step, both results in the next"


async def test_codex_exec_resume_continues_the_same_chat(stack: Stack, tmp_path: Path) -> None:
    def act(request: FakeRequest, results: dict[str, str]) -> FakeResponse:
        users = sum(1 for m in request.body["messages"] if m["role"] == "user")
        return FakeResponse(parts=[FakeText(text=f"reply after {users} user messages")])

    name = _model(stack, act)
    first = await _codex(stack, tmp_path, "http", f"anthropic/{name}", "remember the word kiwi")
    assert first.returncode == 0, first.stderr
    again = await _codex(
        stack, tmp_path, "http", f"anthropic/{name}", "resume", "--last", "what was the word?"
    )
    assert again.returncode == 0, again.stderr
    before, after = (int(re.findall(r"reply after (\d+)", r.stdout)[-1]) for r in (first, again))
    assert after > before, "the resumed session holds the first one"
    [chat] = await _chats_of(stack, name)
    texts = json.dumps(stack.fake.requests(name)[-1].body["messages"])
    assert "kiwi" in texts and "what was the word?" in texts
    chat_row = await ChatStore(stack.pool).get(uuid.UUID(chat))
    assert chat_row is not None and chat_row.discard_at is not None, "store: false stays hidden"


def test_the_codex_binary_runs() -> None:
    """The pinned client and its platform binary came from npm."""
    assert shutil.which(str(CODEX)) is not None


SLOW_ANSWER = " ".join(f"word{i}" for i in range(40))


def _reads_notes_then_answers_slowly(stack: Stack, tmp_path: Path) -> str:
    """A model for the durability tests: it runs a command that reads notes.txt and counts
    its runs in ran.txt, then streams `SLOW_ANSWER` for seconds (the window to kill in)."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("kept safe\n")

    def act(request: FakeRequest, results: dict[str, str]) -> FakeResponse:
        if "toolu_cat" not in results:
            command = "echo ran >> ran.txt && cat notes.txt"
            return FakeResponse(parts=[_shell(request, command, "toolu_cat")])
        text = f"{SLOW_ANSWER} ({results['toolu_cat'].strip()})"
        return FakeResponse(parts=[FakeText(text=text, chunk_size=6)], delta_delay_s=0.15)

    return _model(stack, act)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_worker_killed_mid_stream_is_invisible_to_codex(
    cluster: Cluster, tmp_path: Path, transport: str
) -> None:
    """A two-step task whose answer streams slowly; the worker streaming it is SIGKILLed
    and another takes the step over. Codex prints the answer once and no error, and its
    command ran once: the step that called it had ended before the kill, and a retried
    step never repeats a call a client was handed."""
    stack = cluster.stack
    name = _reads_notes_then_answers_slowly(stack, tmp_path)
    first = await cluster.polling_worker()
    run = asyncio.create_task(
        _codex(stack, tmp_path, transport, f"anthropic/{name}", "read notes.txt")
    )
    while not stack.fake.deltas(name):  # the answer streams: the second step is under way
        assert not run.done(), (await run).stderr
        await asyncio.sleep(0.05)
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    done = await run
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(SLOW_ANSWER) == 1, done.stdout
    assert "kept safe" in done.stdout
    assert "error" not in done.stderr.lower(), done.stderr
    assert (tmp_path / "work" / "ran.txt").read_text() == "ran\n", "the command ran once"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_gateway_restarted_mid_stream_costs_codex_no_second_model_call(
    stack: Stack,
    database_url: str,
    temporal_server: TemporalDevServer,
    tmp_path: Path,
    transport: str,
) -> None:
    """Codex talks to a `chatd api` process that is SIGKILLed while the answer streams and
    started again on its port. Codex retries (HTTP) or reconnects and resends its session
    (WebSocket); the retry is the same session's same request, so it gets the running
    turn's response again from its start: one chat, no second model call for the step."""
    name = _reads_notes_then_answers_slowly(stack, tmp_path)
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    start: Callable[[str], ForkedChatd] = lambda log: chatd_api(  # noqa: E731
        database_url, temporal_server, port, tmp_path / log, stack.task_queue
    )
    gateway = start("api-1.log")
    try:
        await until_ready(root, gateway, tmp_path / "api-1.log")
        run = asyncio.create_task(
            _codex(stack, tmp_path, transport, f"anthropic/{name}", "read notes.txt", root=root)
        )
        while len(stack.fake.deltas(name)) < 3:
            assert not run.done(), (await run).stderr
            await asyncio.sleep(0.05)
        await asyncio.to_thread(gateway.send_signal, signal.SIGKILL)
        await asyncio.to_thread(gateway.wait)
        gateway = start("api-2.log")
        await until_ready(root, gateway, tmp_path / "api-2.log")
        done = await run
    finally:
        if gateway.poll() is None:
            gateway.send_signal(signal.SIGTERM)
        await asyncio.to_thread(gateway.wait)
    assert done.returncode == 0, done.stderr
    assert SLOW_ANSWER in done.stdout and "kept safe" in done.stdout
    assert (tmp_path / "work" / "ran.txt").read_text() == "ran\n", "the command ran once"
    assert len(await _chats_of(stack, name)) == 1, "the retry landed on the same chat"
    responses = await stack.pool.fetchval(
        "SELECT count(*) FROM responses r JOIN chats c ON c.id = r.chat_id"
        " WHERE c.model->>'name' = $1",
        name,
    )
    assert responses == 2, "one response per step: the retry got the first again"
