"""A deployment that runs: docker-compose.yml's chatd services as processes on this machine.

The migrate job, then the compose file's worker and gateway replicas (two each), run their
compose commands with their compose environments as a non-root user, from a root-owned
read-only copy of the image's /app, with the workspace volume a directory all workers share;
the Temporal dev server and the embedded Postgres stand in for the compose file's. Under load
one worker and one gateway are SIGKILLed: every message sent is in its chat exactly once and
every turn ends. A chat's file tools write on one worker and read and edit on the other.
"""

from __future__ import annotations

import asyncio
import base64
import random
import re
import secrets
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from support.deployment import AppCopy, ComposeService, Host, ServiceProcess, User, compose_services
from support.names import model_name
from temporalio.client import Client

from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.demo import TITLE_REQUEST, latest_turn
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.fake_provider.server import FakeProviderServer

CHATS = 30
SENDS_PER_CHAT = 4
KILL_AFTER_SENDS = CHATS * SENDS_PER_CHAT // 3
"""The worker and the gateway die once this many sends were accepted, with turns running."""
STEP_S = 1.0
"""How long an echo step streams."""
PLAN = "plan/steps.md"


@dataclass
class Deployment:
    """The running services and what the test needs to reach and inspect them."""

    user: User
    app: AppCopy
    volume: Path
    workers: list[ServiceProcess]
    gateways: list[ServiceProcess]
    urls: list[str]
    key: str
    notes: list[str] = field(default_factory=list)

    def worker_of(self, identity: str) -> ServiceProcess:
        """The worker whose Temporal identity (`pid@host`) this is."""
        pid = int(identity.split("@")[0])
        return next(w for w in self.workers if w.process and w.process.pid == pid)


@pytest.fixture
async def deployment(
    database_url: str,
    temporal_server: TemporalDevServer,
    fake_provider: FakeProviderServer,
) -> AsyncIterator[Deployment]:
    services = compose_services()
    extra = {"ANTHROPIC_BASE_URL": fake_provider.base_url}  # the one addition: the fake model
    host = await asyncio.to_thread(Host.prepare, services, extra)
    try:
        yield await _deploy(host, services, database_url, temporal_server)
    finally:
        await asyncio.to_thread(host.remove)


async def _deploy(
    host: Host,
    services: dict[str, ComposeService],
    database_url: str,
    temporal: TemporalDevServer,
) -> Deployment:
    # A value for each variable the compose file sets (the test fails on one it doesn't know).
    values = {
        "TEMPORAL_ADDRESS": temporal.address,
        "TEMPORAL_NAMESPACE": temporal.namespace,
        "CHATD_TASK_QUEUE": f"deploy-{uuid.uuid4().hex[:8]}",
        "DATABASE_URL": database_url,
        "ANTHROPIC_API_KEY": "test-anthropic-key",
        "OPENAI_API_KEY": "",
        "CHATD_CODEC_KEYS": f"k1:{base64.b64encode(secrets.token_bytes(32)).decode()}",
    }
    migrate, api, worker = services["migrate"], services["api"], services["worker"]
    began = time.monotonic()
    job = host.start(migrate, migrate.command, values, "migrate")
    assert await asyncio.to_thread(job.wait, 120) == 0, job.output()
    # As `docker compose run --rm api chatd keys create --owner me`.
    keys = host.start(api, ["chatd", "keys", "create", "--owner", "deployer"], values, "keys")
    assert await asyncio.to_thread(keys.wait, 60) == 0, keys.output()
    key = keys.output().split()[-1]
    assert key.startswith("chatd_"), keys.output()
    workers = [
        host.start(worker, worker.command, values, f"worker-{i}") for i in range(worker.replicas)
    ]
    ports = [free_port() for _ in range(api.replicas)]
    gateways = [
        host.start(api, _listening(api.command, port), values, f"api-{i}")
        for i, port in enumerate(ports)
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    await asyncio.gather(*(_ready(url, g) for url, g in zip(urls, gateways, strict=True)))
    await _polling(workers)
    notes = [f"migrated and up in {time.monotonic() - began:.1f} s", *host.runtime.copied]
    workspaces = worker.environment["CHATD_WORKSPACE_ROOT"]
    assert workspaces in worker.volumes, f"the workers' {workspaces} is not on a volume"
    volume = host.mounts[worker.volumes[workspaces]]
    return Deployment(host.user, host.app, volume, workers, gateways, urls, key, notes)


def _listening(command: list[str], port: int) -> list[str]:
    """The gateway's command on this machine: the loopback and a free port."""
    argv = list(command)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    return argv


async def _ready(url: str, gateway: ServiceProcess) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        while True:
            assert gateway.running, gateway.output()
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


async def _polling(workers: list[ServiceProcess]) -> None:
    """Until every worker says it polls (its worker has started)."""
    while not all("worker polling task queue" in w.output() for w in workers):
        for worker in workers:
            assert worker.running, worker.output()
        await asyncio.sleep(0.1)


# The models: an echo for the load, a file-tools script for the workspace chat. Both answer
# from the request alone, so a step retried after the kill gets the same answer again.


def _echo(request: FakeRequest) -> FakeResponse:
    turn = latest_turn(request)
    if TITLE_REQUEST in str(request.body.get("system")):
        return FakeResponse.of_text("Load chat")
    # Streamed for STEP_S, so that turns are streaming on the worker when it is killed.
    text = f"echo: {turn.user_text}"
    return FakeResponse(parts=[FakeText(text=text, chunk_size=2)],
                        delta_delay_s=STEP_S / (len(text) / 2))  # fmt: skip


_FILE_STEPS: dict[str, list[Callable[[str], FakeResponse]]] = {
    "write the plan": [
        lambda _: _call("write_file", path=PLAN, content="1. write\n2. draft\n"),
        lambda result: FakeResponse.of_text(f"wrote it: {result}"),
    ],
    "edit the plan": [
        lambda _: _call("read_file", path=PLAN),
        lambda _: _call("edit_file", path=PLAN, old_string="2. draft", new_string="2. edit"),
        lambda result: FakeResponse.of_text(f"edited it: {result}"),
    ],
    "read the plan": [
        lambda _: _call("read_file", path=PLAN),
        lambda result: FakeResponse.of_text(f"it says: {result}"),
    ],
}


def _call(name: str, **arguments: str) -> FakeResponse:
    return FakeResponse(parts=[FakeToolCall(name=name, arguments=arguments)])


def _file_tools(request: FakeRequest) -> FakeResponse:
    """The next step of the instruction in the chat's last user message: its Nth step after
    N tool results since that message."""
    if TITLE_REQUEST in str(request.body.get("system")):
        return FakeResponse.of_text("Plan")
    turn = latest_turn(request)
    messages: list[dict[str, Any]] = request.body["messages"]
    last_user_text = max(
        i for i, m in enumerate(messages) if m["role"] == "user" and _has_text(m["content"])
    )
    done = sum(1 for m in messages[last_user_text:] if m["role"] == "assistant")
    return _FILE_STEPS[turn.user_text][done](turn.tool_result or "")


def _has_text(content: Any) -> bool:
    return isinstance(content, str) or any(b.get("type") == "text" for b in content)


class Gateways:
    """The clients' load balancer: a request goes to the next gateway that hasn't failed
    one; a request that fails in transport is retried with the same Idempotency-Key on
    another gateway."""

    def __init__(self, urls: list[str], key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        # A send right after the kill may wait for the dead worker's sticky workflow task.
        self.clients = [
            httpx.AsyncClient(base_url=f"{u}/api/v1", headers=headers, timeout=60) for u in urls
        ]
        self.down: set[int] = set()
        self.turn = 0
        self.retries = 0

    async def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """The first answer that isn't a transport error or a 5xx, from any gateway."""
        for _ in range(10):
            up = [i for i in range(len(self.clients)) if i not in self.down]
            index = up[self.turn % len(up)]
            self.turn += 1
            try:
                response = await self.clients[index].request(method, path, **options)
            except httpx.TransportError:
                self.down.add(index)
                self.retries += 1
                continue
            if response.status_code < 500:
                return response
            self.retries += 1
            await asyncio.sleep(0.2)
        raise AssertionError(f"{method} {path}: no gateway answered")

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


@dataclass
class Load:
    """The load's record: what each chat was sent, and when the kill came."""

    sent: dict[str, list[str]] = field(default_factory=dict)
    accepted: int = 0
    kill: asyncio.Event = field(default_factory=asyncio.Event)
    sent_all: asyncio.Event = field(default_factory=asyncio.Event)
    running_at_kill: int = 0
    killed_at: float = 0.0


async def _send_all(gateways: Gateways, load: Load, chat_id: str, rng: random.Random) -> None:
    for n in range(SENDS_PER_CHAT):
        content = f"message {n} of {chat_id[:8]}"
        headers = {"Idempotency-Key": f"{chat_id}-{n}"}
        path = f"/chats/{chat_id}/messages"
        response = await gateways.request("POST", path, json={"content": content}, headers=headers)
        assert response.status_code == 202, response.text
        load.sent[chat_id].append(content)
        load.accepted += 1
        if load.accepted == KILL_AFTER_SENDS:
            load.kill.set()
        await asyncio.sleep(rng.uniform(0, 0.3))


async def _kill_when_due(load: Load, deployment: Deployment, worker: ServiceProcess) -> None:
    """Once the kill is due, as soon as `worker` has a model step streaming (or when the
    load is over: the test then fails on the kill having interrupted nothing)."""
    await load.kill.wait()
    begun = len(_steps_begun(worker))
    while True:  # polling a log: no event to wait on
        await asyncio.sleep(0.02)
        if len(_steps_begun(worker)) > begun or load.sent_all.is_set():
            break  # a step began at most 20 ms ago: it streams for STEP_S
    load.running_at_kill = await _running_chats(deployment)
    load.killed_at = time.monotonic()
    for process in (worker, deployment.gateways[0]):
        process.signal(signal.SIGKILL)
    for process in (worker, deployment.gateways[0]):
        await asyncio.to_thread(process.wait, 10)


def _steps_begun(worker: ServiceProcess) -> set[str]:
    """The model steps (`chat= turn= step=`) the worker began."""
    return set(re.findall(r"streaming step: (chat=\S+ turn=\S+ step=\d+)", worker.output()))


async def _running_chats(deployment: Deployment) -> int:
    database_url = deployment.workers[0].env["DATABASE_URL"]
    connection = await asyncpg.connect(database_url)
    try:
        count: int = await connection.fetchval(
            "SELECT count(*) FROM chats WHERE status = 'running'"
        )
    finally:
        await connection.close()
    return count


async def _drained(gateways: Gateways, load: Load, within_s: float) -> None:
    """Until every chat waits with a reply to each message it was sent (or `within_s`)."""
    deadline = time.monotonic() + within_s
    pending = set(load.sent)
    while pending and time.monotonic() < deadline:
        for chat_id in sorted(pending):
            chat = (await gateways.request("GET", f"/chats/{chat_id}")).json()
            replies = _expected(load.sent[chat_id])
            if chat["status"] == "waiting" and await _transcript(gateways, chat_id) == replies:
                pending.discard(chat_id)
        await asyncio.sleep(0.2)


def _expected(sent: list[str]) -> list[tuple[str, str]]:
    """Each message once, in order, each answered once by its own turn."""
    return [m for content in sent for m in (("user", content), ("assistant", f"echo: {content}"))]


async def _transcript(gateways: Gateways, chat_id: str) -> list[tuple[str, str]]:
    """(role, text) of every message with text, in order."""
    response = await gateways.request("GET", f"/chats/{chat_id}/messages", params={"limit": 500})
    assert response.status_code == 200 and not response.json()["has_more"], response.text
    return [
        (m["role"], "".join(p.get("text") or p.get("output") or "" for p in m["parts"]))
        for m in response.json()["messages"]
    ]


async def _tool_workers(client: Client, chat_id: str) -> set[str]:
    """The identities of the workers that ran the tool calls of the chat's latest turn."""
    history = await client.get_workflow_handle(f"chat-{chat_id}").fetch_history()
    scheduled = {
        e.event_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "execute_tool_call"
    }
    return {
        e.activity_task_started_event_attributes.identity
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    }


async def _turn(gateways: Gateways, chat_id: str, content: str) -> str:
    """Send `content`, wait for the turn to end; the reply's text."""
    before = len(await _transcript(gateways, chat_id))
    response = await gateways.request(
        "POST", f"/chats/{chat_id}/messages", json={"content": content}
    )
    assert response.status_code == 202, response.text
    for _ in range(300):
        chat = (await gateways.request("GET", f"/chats/{chat_id}")).json()
        transcript = await _transcript(gateways, chat_id)
        if chat["status"] == "waiting" and len(transcript) > before + 1:
            role, text = transcript[-1]
            assert role == "assistant", transcript
            return text
        await asyncio.sleep(0.1)
    raise AssertionError(f"the turn {content!r} did not end: {transcript}")


async def test_the_compose_deployment_loses_nothing_when_a_worker_and_a_gateway_die(
    deployment: Deployment, fake_provider: FakeProviderServer, temporal_client: Client
) -> None:
    started = time.monotonic()
    echo, file_tools = model_name(), model_name()
    fake_provider.script(echo, _echo)
    fake_provider.script(file_tools, _file_tools)
    gateways = Gateways(deployment.urls, deployment.key)
    try:
        files = await _create_chat(gateways, file_tools)
        assert "Created plan/steps.md" in await _turn(gateways, files, "write the plan")
        (wrote,) = await _tool_workers(temporal_client, files)
        # The worker that wrote the file is the one to die: the next turns run on the other.
        writer = deployment.worker_of(wrote)
        load = await _run_load(gateways, echo, deployment, writer)
        await _drained(gateways, load, within_s=60)
        drained_s = time.monotonic() - load.killed_at
        for chat_id, sent in load.sent.items():
            assert await _transcript(gateways, chat_id) == _expected(sent), chat_id
        assert "Replaced 1 occurrence" in await _turn(gateways, files, "edit the plan")
        edited = await _tool_workers(temporal_client, files)
        said = await _turn(gateways, files, "read the plan")
        read = await _tool_workers(temporal_client, files)
    finally:
        await gateways.close()
    (survivor,) = (w for w in deployment.workers if w is not writer)
    # A step the dead worker began and the survivor began again: the kill interrupted it.
    retried = len(_steps_begun(writer) & _steps_begun(survivor))
    assert retried > 0, "the kill interrupted no model step"
    assert "1. write\n2. edit" in said
    assert {deployment.worker_of(i) for i in edited | read} == {survivor}, (wrote, edited, read)
    _assert_written_as_the_service_user(deployment, files)
    for process in deployment.workers + deployment.gateways:
        if process.running:  # nothing failed in the survivors (a permission, a bug)
            assert not re.search(r"Traceback| ERROR ", process.output()), process.output()
    sends = CHATS * SENDS_PER_CHAT
    print(
        f"\ndeployment kill test: {CHATS} chats, {sends} sends ({gateways.retries} retried on"
        f" the other gateway), {sends} turns ({load.running_at_kill} running at the kill,"
        f" {retried} model steps retried on the surviving worker), 0 lost, 0 duplicated;"
        f" drained {drained_s:.1f} s after the kill; {time.monotonic() - started:.1f} s in all;"
        f" {'; '.join(deployment.notes)}"
    )


async def _create_chat(gateways: Gateways, model: str) -> str:
    body = {"model": {"provider": "anthropic", "name": model}}
    response = await gateways.request(
        "POST", "/chats", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
    )
    assert response.status_code == 201, response.text
    chat_id: str = response.json()["id"]
    return chat_id


async def _run_load(
    gateways: Gateways, model: str, deployment: Deployment, victim: ServiceProcess
) -> Load:
    """Every chat's sends, through both gateways, with the kill a third of the way in."""
    chat_ids = [await _create_chat(gateways, model) for _ in range(CHATS)]
    load = Load(sent={chat_id: [] for chat_id in chat_ids})
    rng = random.Random(16)
    killer = asyncio.create_task(_kill_when_due(load, deployment, victim))
    await asyncio.gather(*(_send_all(gateways, load, c, rng) for c in chat_ids))
    load.sent_all.set()
    await killer
    return load


def _assert_written_as_the_service_user(deployment: Deployment, chat_id: str) -> None:
    """The chat's file is on the volume, everything there the service user's; the app
    directory is as it was copied."""
    plan = deployment.volume / chat_id / PLAN
    assert plan.read_text() == "1. write\n2. edit\n"
    for path in [deployment.volume, *deployment.volume.rglob("*")]:
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (deployment.user.uid, deployment.user.gid), path
    assert deployment.app.changes() == []
