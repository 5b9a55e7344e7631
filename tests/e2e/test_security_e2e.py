"""Every route of the served app, tried without a valid key and with another owner's key.

The routes come from the app itself (`create_app`, as the stack serves it), so a route added
later is covered without touching this module. Each credential sends one request per route and
target: few enough to stay under any per-key rate limit.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI
from fastapi.routing import APIWebSocketRoute, iter_route_contexts
from harness import Stack

from api.app import API_PREFIX, GatewayConfig, create_app
from chatd.settings import TemporalSettings
from chatd.store.keys import KeyStore
from chatd.tls import client_context

OPEN_PATHS = {"/healthz", "/readyz"}
"""Routes meant to answer without a key (probes)."""

_PARAM = re.compile(r"{(\w+)(?::\w+)?}")
_BODIES: dict[str, dict[str, Any]] = {
    "CreateChat": {"title": "probe"},
    "SendMessage": {"content": "probe"},
    "EditMessage": {"content": "probe"},
    "ToolResults": {"results": [{"tool_call_id": "call_1", "output": "probe"}]},
}
"""A valid body per request schema: a check that is missing shows as a 2xx, not a 400. Any
other schema gets `{}` (the key is checked before the body)."""


@dataclass(frozen=True)
class Operation:
    """One method on one route, with what the served OpenAPI document says of it."""

    method: str
    path: str
    spec: dict[str, Any]

    @property
    def names_a_chat(self) -> bool:
        """Whether the path addresses one chat (the owner check applies)."""
        return "{chat_id}" in self.path

    def url(self, chat_id: str, known: dict[str, str]) -> str:
        """The path with `chat_id`, the ids in `known`, and made-up other ids."""
        params = {p["name"]: p.get("schema", {}) for p in self.spec.get("parameters", [])}

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "chat_id":
                return chat_id
            if name in known:
                return known[name]
            return "1" if params.get(name, {}).get("type") == "integer" else str(uuid.uuid4())

        return _PARAM.sub(value, self.path)

    def body(self) -> dict[str, Any] | None:
        """A valid JSON body, if the operation takes one."""
        content = self.spec.get("requestBody", {}).get("content", {})
        if "application/json" not in content:
            return None
        ref = content["application/json"].get("schema", {}).get("$ref", "")
        return _BODIES.get(ref.rsplit("/", 1)[-1], {})


_CONVERTER = re.compile(r"\{(\w+):\w+\}")


def _operations(app: FastAPI, document: dict[str, Any]) -> list[Operation]:
    """Every method of every route (as the OpenAPI generator walks them, included routers
    flattened) but the probes and the app's own documentation."""
    skipped = OPEN_PATHS | {app.openapi_url, app.docs_url, app.redoc_url}
    skipped.add(app.swagger_ui_oauth2_redirect_url)
    operations = []
    for route in iter_route_contexts(app.routes):
        if route.path in skipped or isinstance(route.route, APIWebSocketRoute):
            continue  # the WebSocket's keys: test_a_socket_refuses_missing_bad_and_revoked_keys
        assert route.path and route.methods, f"no probe for {route!r}: add one to this module"
        path = _CONVERTER.sub(r"{\1}", route.path)  # `{model_id:path}` is documented bare
        for method in sorted(route.methods):
            spec = document["paths"].get(path, {}).get(method.lower(), {})
            assert spec or not route.include_in_schema, f"{method} {path} is undocumented"
            operations.append(Operation(method, path, spec))
    return operations


@pytest.fixture
async def operations(stack: Stack) -> list[Operation]:
    settings = TemporalSettings(address="localhost:1", task_queue=stack.task_queue)
    app = create_app(GatewayConfig(database_url="postgresql://unused", temporal=settings))
    served = await stack.http.get(stack.base_url.removesuffix(API_PREFIX) + "/openapi.json")
    document: dict[str, Any] = served.json()
    found = _operations(app, document)
    assert any(o.names_a_chat for o in found) and any(not o.names_a_chat for o in found)
    return found


async def _answer(
    base_url: str, key: str | None, operation: Operation, url: str
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    root = base_url.removesuffix(API_PREFIX)  # the native API's routes and Open Responses'
    async with (
        httpx.AsyncClient(
            base_url=root, headers=headers, timeout=10, verify=client_context()
        ) as http,
        http.stream(operation.method, url, json=operation.body()) as response,
    ):
        kind = response.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):  # a stream of one's own: it never ends
            return response.status_code, {"text": "<an event stream>"}
        body = await response.aread()
    if kind.startswith("application/json"):
        return response.status_code, json.loads(body)
    return response.status_code, {"text": body.decode()}


def _masked(body: dict[str, Any], *ids: str) -> str:
    text = str(body)
    for chat_id in ids:
        text = text.replace(chat_id, "<chat>")
    return text


@pytest.mark.parametrize("label", ["no key", "bad key", "revoked key"])
async def test_a_socket_refuses_missing_bad_and_revoked_keys(stack: Stack, label: str) -> None:
    """`ws://.../v1/responses`: an `error` event with status 401, then close code 1008,
    before any request is read."""
    keys = KeyStore(stack.pool)
    revoked = await keys.create("alice", "revoked socket key")
    await keys.revoke(next(k.id for k in await keys.list() if k.name == "revoked socket key"))
    key = {"no key": None, "bad key": "chatd_" + uuid.uuid4().hex, "revoked key": revoked}[label]
    url = stack.base_url.removesuffix(API_PREFIX).replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with websockets.connect(url, additional_headers=headers) as socket:
        event = json.loads(await socket.recv())
        assert (event["type"], event["status"]) == ("error", 401)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await socket.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


@pytest.mark.slow
async def test_every_route_refuses_missing_bad_and_revoked_keys_and_other_owners(
    stack: Stack, operations: list[Operation], no_pause_after_a_bad_key: None
) -> None:
    chat = await stack.create_chat(
        model={"provider": "demo", "name": "demo"}, message={"content": "hello"}
    )
    await stack.wait_status(chat["id"], "waiting")
    transcript = await stack.messages(chat["id"])
    known = {"message_id": str(transcript[0]["id"])}
    keys = KeyStore(stack.pool)
    revoked = await keys.create("alice", "revoked before its first use")
    await keys.revoke(next(k.id for k in await keys.list() if k.name.startswith("revoked")))
    bob = stack.other_owner.headers["Authorization"].removeprefix("Bearer ")
    missing = str(uuid.uuid4())
    foreign = {"no key": None, "bad key": "chatd_" + uuid.uuid4().hex, "revoked key": revoked}

    for operation in operations:
        for label, key in {**foreign, "other owner": bob}.items():
            what = f"{operation.method} {operation.path} with {label}"
            existing = await _answer(
                stack.base_url, key, operation, operation.url(chat["id"], known)
            )
            if label == "other owner" and not operation.names_a_chat:
                # Bob's own collection: it must not show Alice's chat.
                assert existing[0] < 500 and chat["id"] not in str(existing[1]), what
                continue
            assert existing[0] in (401, 404), f"{what}: {existing}"
            assert existing[0] == 401 or label == "other owner", f"{what}: {existing}"
            if not operation.names_a_chat:
                continue
            absent = await _answer(stack.base_url, key, operation, operation.url(missing, known))
            assert existing[0] == absent[0], f"{what}: {existing} vs {absent}"
            assert _masked(existing[1], chat["id"]) == _masked(absent[1], missing), what

    assert await stack.messages(chat["id"]) == transcript, "nothing reached Alice's chat"
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["status"] == "waiting"
