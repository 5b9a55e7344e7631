"""A deployment that runs: docker-compose.yml's chatd services as processes on this machine.

The migrate job, then the compose file's worker and gateway replicas (two each), run their
compose commands with their compose environments as a non-root user, from a root-owned
read-only copy of the image's /app, with the workspace volume a directory all workers share;
the Temporal dev server and the embedded Postgres stand in for the compose file's. Under load
one worker (as it streams) and one gateway are SIGKILLed: every message sent is in its chat
exactly once, answered once, and every turn ends. A chat's file tools write a file on one
worker; after the killed worker restarts and the writer stops, other processes read and edit
it on the shared volume. The `execute` tool runs in its sandbox under the read-only root,
and the compose file's `codec-server` decodes the encrypted history for its token's holder.
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
from google.protobuf import json_format
from support.deployment import AppCopy, ComposeService, Host, ServiceProcess, User, compose_services
from support.gateways import Gateways
from support.names import model_name
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client

from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.demo import TITLE_REQUEST, latest_turn
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.fake_provider.server import FakeProviderServer
from chatd.tls import client_context

CHATS = 30
SENDS_PER_CHAT = 4
KILL_AFTER_SENDS = CHATS * SENDS_PER_CHAT // 3
"""The worker and the gateway die once this many sends were accepted, with turns running."""
STEP_S = 1.0
"""How long an echo step streams."""
PLAN = "plan/steps.md"
RUN_PLAN = f"wc -l < {PLAN}; (echo x > /usr/chatd-probe) 2>/dev/null || echo sandbox-root-read-only"
"""What `execute` runs in the sandbox: it reads the workspace, and can't write the system."""
CODEC_TOKEN = secrets.token_urlsafe(24)


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
    codec_url: str
    """The compose file's `codec-server`, for `CODEC_TOKEN`'s holder."""
    notes: list[str] = field(default_factory=list)

    def worker_of(self, identity: str) -> ServiceProcess:
        """The worker (the slot: a restart keeps it) whose process has, or had, the Temporal
        identity `pid@host`."""
        found = [w for w in self.workers if _pid(identity) in w.pids]
        assert len(found) == 1, f"{identity} is not one of the workers"
        return found[0]


@pytest.fixture
async def deployment(
    database_url: str,
    temporal_server: TemporalDevServer,
    fake_provider: FakeProviderServer,
) -> AsyncIterator[Deployment]:
    services = compose_services()
    extra = {
        "ANTHROPIC_BASE_URL": fake_provider.base_url,  # the fake model
        # The `execute` tool, as the compose file's comment says to enable it.
        "CHATD_ENABLE_EXECUTE": "1",
        "CHATD_EXECUTE_OWNERS": "deployer",
    }
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
        "CHATD_CODEC_SERVER_TOKEN": CODEC_TOKEN,
        "CHATD_CODEC_CORS_ORIGINS": "http://localhost:8233",
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
    codec = services["codec-server"]
    codec_port = free_port()
    codec_server = host.start(codec, _listening(codec.command, codec_port), values, "codec")
    codec_url = f"http://127.0.0.1:{codec_port}"
    await asyncio.gather(
        *(_ready(url, g) for url, g in zip(urls, gateways, strict=True)),
        _codec_ready(codec_url, codec_server),
    )
    await _polling(workers)
    notes = [f"migrated and up in {time.monotonic() - began:.1f} s", *host.runtime.copied]
    workspaces = worker.environment["CHATD_WORKSPACE_ROOT"]
    assert workspaces in worker.volumes, f"the workers' {workspaces} is not on a volume"
    volume = host.mounts[worker.volumes[workspaces]]
    return Deployment(host.user, host.app, volume, workers, gateways, urls, key, codec_url, notes)


async def _codec_ready(url: str, server: ServiceProcess) -> None:
    deadline = time.monotonic() + 120
    headers = {"Authorization": f"Bearer {CODEC_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, verify=client_context()) as http:
        while True:
            assert server.running and time.monotonic() < deadline, server.output()
            try:
                if (await http.post("/decode", json={"payloads": []})).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


async def _decoded_by_the_codec_server(deployment: Deployment, client: Client, chat_id: str) -> str:
    """A payload of the chat's history as Temporal holds it (encrypted), decoded by the
    compose file's codec server; a request without its token is refused."""
    history = await client.get_workflow_handle(f"chat-{chat_id}").fetch_history()
    (payload, *_) = [
        p
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        for p in e.activity_task_scheduled_event_attributes.input.payloads
    ]
    assert payload.metadata["encoding"] == b"binary/encrypted", "the deployment encrypts"
    body = {"payloads": [json_format.MessageToDict(payload)]}
    async with httpx.AsyncClient(base_url=deployment.codec_url) as http:
        refused = await http.post("/decode", json=body)
        assert refused.status_code == 401, refused.text
        headers = {"Authorization": f"Bearer {CODEC_TOKEN}"}
        answer = await http.post("/decode", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    (decoded,) = json_format.ParseDict(answer.json(), Payloads()).payloads
    assert decoded.metadata["encoding"] == b"json/plain"
    return decoded.data.decode()


def _listening(command: list[str], port: int) -> list[str]:
    """The gateway's command on this machine: the loopback and a free port."""
    argv = list(command)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    return argv


async def _ready(url: str, gateway: ServiceProcess) -> None:
    deadline = time.monotonic() + 120
    async with httpx.AsyncClient(base_url=url, verify=client_context()) as http:
        while True:
            assert gateway.running and time.monotonic() < deadline, gateway.output()
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


async def _polling(workers: list[ServiceProcess], starts: int = 1) -> None:
    """Until every worker says it polls (its `starts`-th start has its worker running)."""
    deadline = time.monotonic() + 120
    while not all(w.output().count("worker polling task queue") >= starts for w in workers):
        for worker in workers:
            assert worker.running and time.monotonic() < deadline, worker.output()
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
    "run the plan": [
        lambda _: _call("execute", command=RUN_PLAN),
        lambda result: FakeResponse.of_text(f"ran it: {result}"),
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


@dataclass
class Load:
    """The load's record: what each chat was sent, and when the kill came."""

    sent: dict[str, list[str]] = field(default_factory=dict)
    accepted: int = 0
    kill: asyncio.Event = field(default_factory=asyncio.Event)
    running_at_kill: int = 0
    killed_at: float = 0.0
    victim: ServiceProcess | None = None
    victim_log: str = ""
    """The killed worker's log when it died (a restart writes on)."""


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


async def _kill_when_due(load: Load, deployment: Deployment) -> None:
    """Once the kill is due, kill the first worker to begin a model step (it streams for
    STEP_S: the kill interrupts it) and the first gateway."""
    await load.kill.wait()
    begun = [len(_steps_begun(w.output())) for w in deployment.workers]
    deadline = time.monotonic() + 30
    while True:  # polling logs: no event to wait on
        await asyncio.sleep(0.02)
        now = [len(_steps_begun(w.output())) for w in deployment.workers]
        if now != begun:
            break
        assert time.monotonic() < deadline, "no worker logged a 'streaming step:' in 30 s"
    victim = deployment.workers[next(i for i, n in enumerate(now) if n > begun[i])]
    load.running_at_kill = await _running_chats(deployment)
    load.killed_at = time.monotonic()
    for process in (victim, deployment.gateways[0]):
        process.signal(signal.SIGKILL)
    for process in (victim, deployment.gateways[0]):
        await asyncio.to_thread(process.wait, 10)
    load.victim, load.victim_log = victim, victim.output()


def _steps_begun(log: str) -> set[str]:
    """The model steps (`chat= turn= step=`) a worker's log shows it began."""
    return set(re.findall(r"streaming step: (chat=\S+ turn=\S+ step=\d+)", log))


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
        listed = await gateways.request("GET", "/chats", params={"limit": 200})
        assert listed.status_code == 200, listed.text
        waiting = {c["id"] for c in listed.json()["chats"] if c["status"] == "waiting"}
        for chat_id in sorted(pending & waiting):
            if await gateways.transcript(chat_id) == _expected(load.sent[chat_id]):
                pending.discard(chat_id)
        await asyncio.sleep(0.2)


def _expected(sent: list[str]) -> list[tuple[str, str]]:
    """Each message once, in order, each answered once by its own turn."""
    return [m for content in sent for m in (("user", content), ("assistant", f"echo: {content}"))]


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


@pytest.mark.slow
async def test_the_compose_deployment_loses_nothing_when_a_worker_and_a_gateway_die(
    deployment: Deployment, fake_provider: FakeProviderServer, temporal_client: Client
) -> None:
    started = time.monotonic()
    echo, file_tools = model_name(), model_name()
    fake_provider.script(echo, _echo)
    fake_provider.script(file_tools, _file_tools)
    gateways = Gateways(deployment.urls, deployment.key)
    try:
        files = await gateways.create_chat(file_tools)
        assert "Created plan/steps.md" in await gateways.turn(files, "write the plan")
        (writer,) = await _tool_workers(temporal_client, files)
        ran = await gateways.turn(files, "run the plan")
        assert '"stdout": "2\\nsandbox-root-read-only\\n"' in ran and '"exit_code": 0' in ran, ran
        assert files in await _decoded_by_the_codec_server(deployment, temporal_client, files)
        load = await _run_load(gateways, echo, deployment)
        await _drained(gateways, load, within_s=60)
        drained_s = time.monotonic() - load.killed_at
        for chat_id, sent in load.sent.items():
            assert await gateways.transcript(chat_id) == _expected(sent), chat_id
        await _rolling_restart(deployment, load, stop=writer)
        assert "Replaced 1 occurrence" in await gateways.turn(files, "edit the plan")
        edited = await _tool_workers(temporal_client, files)
        said = await gateways.turn(files, "read the plan")
        read = await _tool_workers(temporal_client, files)
    finally:
        await gateways.close()
    retried = _retried_steps(deployment, load)
    assert retried > 0, "the kill interrupted no model step"
    assert "1. write\n2. edit" in said
    # Read and edited by live workers, none of them the process that wrote the file.
    assert all(deployment.worker_of(i).pid == _pid(i) for i in edited | read), (edited, read)
    assert writer not in edited | read, (writer, edited, read)
    _assert_written_as_the_service_user(deployment, files)
    for process in deployment.workers + deployment.gateways:
        if process.running:  # nothing failed in the survivors (a permission, a bug)
            output = process.output()
            assert not re.search(r"Traceback| ERROR ", output), output
    sends = CHATS * SENDS_PER_CHAT
    print(
        f"\ndeployment kill test: {CHATS} chats, {sends} sends ({gateways.retries} requests"
        f" retried on the other gateway, {gateways.throttled} after a 429), {sends} turns"
        f" ({load.running_at_kill} running at the kill, {retried} model steps begun again on"
        f" the surviving worker), 0 lost, 0 duplicated; drained {drained_s:.1f} s after the"
        f" kill; {time.monotonic() - started:.1f} s in all; the file written by pid"
        f" {_pid(writer)}, edited and read by {sorted(map(_pid, edited | read))};"
        f" {'; '.join(deployment.notes)}"
    )


async def _rolling_restart(deployment: Deployment, load: Load, stop: str) -> None:
    """The killed worker comes back (compose's `restart: unless-stopped`); then the worker
    `stop` (an identity), if it still runs, stops gracefully (SIGTERM), as in a rolling
    update: the chat's next tool calls run on a process that didn't write its file."""
    assert load.victim is not None
    load.victim.start()
    await _polling([load.victim], starts=2)
    writer = deployment.worker_of(stop)
    if writer.pid == _pid(stop):  # not the killed one, restarted
        await asyncio.to_thread(writer.stop)


def _pid(identity: str) -> int:
    """The process id in a worker's Temporal identity (`pid@host`)."""
    return int(identity.split("@")[0])


def _retried_steps(deployment: Deployment, load: Load) -> int:
    """The steps the killed worker had begun that another began again."""
    others = [w.output() for w in deployment.workers if w is not load.victim]
    return len(_steps_begun(load.victim_log) & set().union(*map(_steps_begun, others)))


async def _run_load(gateways: Gateways, model: str, deployment: Deployment) -> Load:
    """Every chat's sends, through both gateways, with the kill a third of the way in."""
    chat_ids = [await gateways.create_chat(model) for _ in range(CHATS)]
    load = Load(sent={chat_id: [] for chat_id in chat_ids})
    rng = random.Random(16)
    killer = asyncio.create_task(_kill_when_due(load, deployment))
    await asyncio.gather(*(_send_all(gateways, load, c, rng) for c in chat_ids))
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
