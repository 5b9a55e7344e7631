"""Open Responses over a WebSocket at `/v1/responses`: one socket, many responses, one after
another, each streamed as the same events as over SSE (one event per text frame, no
`[DONE]`), ending with its terminal `response.*` event or a single `error` event.

A response made here is the same durable turn as one made over HTTP: a socket that closes
mid-response stops nothing, and a stored one is read later with `GET ...?stream=true`. The
socket remembers the responses it made, the only way to continue a `store: false` one by
`previous_response_id`; a continuation refused with an error forgets what it referenced.
When the socket closes, its `store: false` chats are deleted once idle for a while (their
client may yet continue one by sending the whole conversation again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from api.auth import invalid_key
from api.errors import ApiError, as_api_error, invalid_request, openai_error_body
from api.open_responses.continuation import idle_deadline
from api.open_responses.creation import create_response
from api.open_responses.events import TERMINAL_EVENTS
from api.open_responses.requests import CreateResponse
from api.open_responses.resource import build_resource, usage_of
from api.open_responses.turn_settings import echoed_request
from api.open_responses.views import response_events
from api.quotas import StreamSlot
from api.state import GatewayState, state_of
from api.turn_updates import interrupt_turn
from chatd.store.keys import hash_key
from chatd.store.responses import ResponseRecord, new_response_id

__all__ = ["CONNECTION_LIMIT_S", "MAX_MESSAGE_BYTES", "router"]

log = logging.getLogger("chatd.api.sockets")

router = APIRouter(prefix="/v1")

CONNECTION_LIMIT_S = 60 * 60
"""A socket lives at most this long (the specification's limit); then the client reconnects."""
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""A larger client message closes the socket (1009): it is not read."""
REMEMBERED_RESPONSES = 64
"""Responses a socket remembers for continuation, newest first."""

_POLICY_VIOLATION = 1008
_TOO_BIG = 1009
_SERVICE_RESTART = 1012


@router.websocket("/responses")
async def responses_socket(websocket: WebSocket) -> None:
    """Serve `response.create` messages until the client closes the socket, its hour is up,
    its key is revoked, or the gateway stops (close code 1012: reconnect)."""
    state = state_of(websocket)
    await websocket.accept()
    try:
        owner, key = await _authenticated(state, websocket)
        slot = await state.stream_slots.take(hash_key(key), owner, uuid.uuid4())
    except ApiError as refusal:
        await _refuse(websocket, refusal)
        return
    connection = _Connection(state, websocket, owner, key, slot)
    try:
        await connection.serve()
    except WebSocketDisconnect:
        pass
    finally:
        state.stream_slots.release(slot)
        await connection.discard_unstored()


async def _authenticated(state: GatewayState, websocket: WebSocket) -> tuple[str, str]:
    """The owner and key of the handshake's `Authorization: Bearer` header."""
    scheme, _, key = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key:
        raise ApiError(401, "unauthorized", "missing bearer API key")
    key_hash = hash_key(key)
    if state.key_gate.recently_failed(key_hash):
        raise invalid_key()
    state.key_gate.take(key_hash)  # the handshake is a request, as over HTTP
    owner = await state.keys.owner_of(key)
    if owner is None:
        state.key_gate.failed(key_hash)
        raise invalid_key()
    await state.key_gate.authenticated(key_hash, owner)
    return owner, key


def error_event(err: ApiError) -> dict[str, Any]:
    """The specification's WebSocket error envelope, with the fields of the SSE `error`
    event beside it (what OpenAI's SDK reads)."""
    body = openai_error_body(err.status, err.code, err.message, err.detail)["error"]
    return {
        "type": "error",
        "status": err.status,
        "error": body,
        "code": body["code"],
        "message": body["message"],
        "param": body["param"],
        "sequence_number": 0,
    }


async def _refuse(websocket: WebSocket, err: ApiError) -> None:
    """Tell the client why, then close the socket."""
    await websocket.send_text(json.dumps(error_event(err)))
    await websocket.close(_POLICY_VIOLATION, err.code)


class _Connection:
    """One socket's responses, one at a time."""

    def __init__(
        self, state: GatewayState, websocket: WebSocket, owner: str, key: str, slot: StreamSlot
    ) -> None:
        self._state = state
        self._socket = websocket
        self._owner = owner
        self._key = key
        self._slot = slot
        self._responses: OrderedDict[str, None] = OrderedDict()
        """The ids of the responses this socket made, oldest first (an ordered set)."""
        self._unstored_chats: set[uuid.UUID] = set()
        self._warm_ups: OrderedDict[str, CreateResponse] = OrderedDict()
        """Warm-up requests (`generate: false`) by the id they were answered with."""
        self._closes_at = time.monotonic() + CONNECTION_LIMIT_S

    async def serve(self) -> None:
        while True:
            text = await self._next_message()
            if text is None:
                return
            try:
                body, generate = self._create_request(text)
            except ApiError as refusal:
                await self._send(error_event(refusal))
                continue
            if not generate:
                await self._warm_up(body)
            elif not await self._respond(self._after_warm_up(body)):
                return

    async def _warm_up(self, body: CreateResponse) -> None:
        """Answer a `generate: false` request at once, with an empty completed response and no
        model call (Codex sends one as a socket's first message). Its input waits here: a
        request continuing it (`previous_response_id`) is made with that input before its
        own, so the model sees the whole conversation in one turn."""
        response_id = new_response_id()
        self._warm_ups[response_id] = body
        while len(self._warm_ups) > REMEMBERED_RESPONSES:
            self._warm_ups.popitem(last=False)
        now = datetime.now(UTC)
        record = ResponseRecord(
            id=response_id,
            chat_id=uuid.UUID(int=0),
            owner=self._owner,
            turn_id="",
            after_message_id=None,
            previous_response_id=body.previous_response_id,
            request=echoed_request(body),
            input_items=[],
            store=body.store,
            after_event_seq=0,
            created_at=now,
            cancel_requested_at=None,
            ended_at=now,
            ended_status="waiting",
            ended_error=None,
            deleted_at=None,
        )
        resource = build_resource(record, status="completed", output=[], usage=usage_of([]))
        resource["conversation"] = None  # none yet: the next request makes it
        created = {**resource, "status": "in_progress", "completed_at": None, "usage": None}
        await self._send({"type": "response.created", "response": created, "sequence_number": 0})
        await self._send({"type": "response.completed", "response": resource, "sequence_number": 1})

    def _after_warm_up(self, body: CreateResponse) -> CreateResponse:
        """The request with the input of the warm-up it continues, if it continues one."""
        warm_up = self._warm_ups.pop(body.previous_response_id or "", None)
        if warm_up is None:
            return body
        earlier, own = _items(warm_up.input), _items(body.input)
        return body.model_copy(
            update={"input": earlier + own, "previous_response_id": warm_up.previous_response_id}
        )

    async def _next_message(self) -> str | None:
        """The client's next text (or binary) message; None when the socket is done."""
        try:
            message = await asyncio.wait_for(
                self._socket.receive(), max(self._closes_at - time.monotonic(), 0)
            )
        except TimeoutError:
            limit = ApiError(
                400,
                "websocket_connection_limit_reached",
                f"a WebSocket lives {CONNECTION_LIMIT_S // 60} minutes: open a new one",
            )
            await self._send(error_event(limit))
            await self._socket.close(1000, limit.code)
            return None
        if message["type"] == "websocket.disconnect":
            return None
        raw: str | bytes = message.get("text") or message.get("bytes") or ""
        if len(raw) > MAX_MESSAGE_BYTES:
            too_big = ApiError(
                413, "request_too_large", f"a message holds at most {MAX_MESSAGE_BYTES} bytes"
            )
            await self._send(error_event(too_big))
            await self._socket.close(_TOO_BIG, too_big.code)
            return None
        return raw.decode(errors="replace") if isinstance(raw, bytes) else raw

    def _create_request(self, text: str) -> tuple[CreateResponse, bool]:
        """The `response.create` message's body, and whether to generate (False for a
        warm-up); a 400 for anything else."""
        try:
            message = json.loads(text)
        except ValueError:
            raise ApiError(400, "invalid_json", "a message is one JSON object") from None
        if not isinstance(message, dict) or message.get("type") != "response.create":
            kind = message.get("type") if isinstance(message, dict) else None
            raise ApiError(
                400,
                "unknown_message_type",
                f"unknown message type {kind!r}: send `response.create` messages",
                {"param": "type"},
            )
        if message.get("background") or message.get("stream") is False:
            field = "background" if message.get("background") else "stream"
            raise ApiError(
                400,
                "invalid_request",
                f"{field} is for HTTP requests: a response over a WebSocket always streams",
                {"param": field},
            )
        generate = message.pop("generate", True)
        if not isinstance(generate, bool):
            raise ApiError(
                400, "invalid_request", "generate is true or false", {"param": "generate"}
            )
        for transport_field in ("type", "stream", "stream_options", "background"):
            message.pop(transport_field, None)
        try:
            return CreateResponse.model_validate(message), generate
        except ValidationError as err:
            # Located as an HTTP body's errors are, so the two doors word them alike.
            raise invalid_request(
                [{**e, "loc": ("body", *e["loc"])} for e in err.errors()]
            ) from None

    async def _respond(self, body: CreateResponse) -> bool:
        """Create the response and stream it; False when the socket is done."""
        try:
            self._state.key_gate.take(hash_key(self._key))
            record = await create_response(
                self._socket, self._owner, self._key, body, None, self._responses.keys()
            )
        except Exception as err:
            if body.previous_response_id is not None:
                self._responses.pop(body.previous_response_id, None)
            await self._send(error_event(_client_error(err)))
            return True
        self._remember(record)
        async for batch in response_events(self._state, record, self._slot):
            for event in batch:
                await self._send(event)
                if event["type"] in TERMINAL_EVENTS:
                    return True
        # The stream stopped before the response ended: the gateway stops, or the key went.
        if self._state.shutdown.started:
            await self._socket.close(_SERVICE_RESTART, "the gateway is restarting: reconnect")
        else:
            await _refuse(self._socket, invalid_key())
        return False

    def _remember(self, record: ResponseRecord) -> None:
        self._responses[record.id] = None
        while len(self._responses) > REMEMBERED_RESPONSES:
            self._responses.popitem(last=False)
        if not record.store:
            self._unstored_chats.add(record.chat_id)

    async def _send(self, event: dict[str, Any]) -> None:
        if self._socket.application_state != WebSocketState.CONNECTED:
            raise WebSocketDisconnect(1006)
        try:
            await self._socket.send_text(json.dumps(event, separators=(",", ":")))
        except (RuntimeError, OSError) as err:  # the client went away mid-send
            raise WebSocketDisconnect(1006) from err

    async def discard_unstored(self) -> None:
        """The socket is gone: its `store: false` responses' chats are deleted once idle for
        `unstored_keep()` (their client may send the conversation again to continue one),
        and a turn that waits for the client's function results is interrupted (no one can
        send them on this socket)."""
        until = idle_deadline()
        for chat_id in self._unstored_chats:
            try:
                await self._state.chats.keep_unstored(chat_id, until)
                chat = await self._state.chats.get(chat_id)
                if chat is not None and chat.status == "requires_action":
                    await interrupt_turn(self._state.temporal, self._state.turns, chat)
            except Exception:  # the chat's creation deadline deletes it all the same
                log.warning("discarding chat %s failed", chat_id, exc_info=True)


def _items(given: str | list[Any]) -> list[Any]:
    """A request's input as a list of items."""
    return [{"role": "user", "content": given}] if isinstance(given, str) else list(given)


def _client_error(err: Exception) -> ApiError:
    """What the client is told of a failed `response.create` (a 500 for our bugs)."""
    try:
        return as_api_error(err)
    except Exception:
        log.exception("a WebSocket response.create failed")
        return ApiError(500, "internal_error", "the server failed to create the response")
