"""A small typed async client of the chatd HTTP API (httpx), with SSE parsing and reconnection."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from chatd.sse import Event, parse_sse
from chatd.tls import client_context

__all__ = [
    "ApiError",
    "ChatView",
    "ChatdClient",
    "ClientError",
    "EventStream",
    "MessageView",
    "PendingCall",
    "SendResult",
]

READ_TIMEOUT_S = 45.0
"""Longer than the server's 15 s ping, so a dead stream is noticed."""
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 5.0)


class ClientError(Exception):
    """A failure to show the user as one line."""


class ApiError(ClientError):
    """The gateway answered with an error."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ModelRef(_View):
    """Which model a chat uses."""

    provider: str
    name: str

    @property
    def label(self) -> str:
        """`provider/name`."""
        return f"{self.provider}/{self.name}"


class PendingCall(_View):
    """A dynamic tool call waiting for the client's result."""

    id: str
    name: str
    arguments: Any = None


class ChatView(_View):
    """A chat as the API shows it."""

    id: str
    title: str | None = None
    model: ModelRef
    status: str
    last_error: dict[str, Any] | None = None
    pending_tool_calls: list[PendingCall] | None = None
    updated_at: datetime


class MessageView(_View):
    """A persisted transcript message."""

    id: int
    turn_id: str
    role: str
    parts: list[dict[str, Any]]


class SendResult(_View):
    """Where a sent message went."""

    queued: bool
    message_id: str
    turn_id: str | None
    """Null while no worker has taken the message (then its turn's id is `message_id`)."""


def _api_error(response: httpx.Response) -> ApiError:
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        message += _first_problem(error.get("detail"))
    except (ValueError, KeyError, TypeError, AttributeError):
        code, message = "http_error", f"HTTP {response.status_code}"
    if response.status_code == 401:
        message = "invalid API key"
    return ApiError(response.status_code, code, message)


def _first_problem(detail: Any) -> str:
    """`: model.provider: Input should be ...` from a 400's validation detail."""
    errors = detail.get("errors") if isinstance(detail, dict) else None
    if not errors:
        return ""
    where = ".".join(str(x) for x in errors[0].get("loc", ()) if x != "body")
    return f": {where}: {errors[0].get('msg')}" if where else f": {errors[0].get('msg')}"


class ChatdClient:
    """The chatd gateway for one API key."""

    def __init__(self, base_url: str, api_key: str | None, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, verify=client_context()
        )

    async def aclose(self) -> None:
        """Close the connections."""
        await self.http.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send a request; gateway errors and unreachable gateways become `ClientError`."""
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise _unreachable(self.base_url, err) from err
        if response.status_code >= 400:
            raise _api_error(response)
        return response

    async def create_chat(self, model: str, **body: Any) -> ChatView:
        """POST /chats with `model` as `provider/name`."""
        provider, _, name = model.partition("/")
        if not provider or not name:
            raise ClientError(f"--model must be provider/name (e.g. demo/demo), not {model!r}")
        payload = {"model": {"provider": provider, "name": name}, **body}
        response = await self.request("POST", "/chats", json=payload)
        return ChatView.model_validate(response.json())

    async def list_chats(self, limit: int = 50) -> list[ChatView]:
        """GET /chats, newest first."""
        response = await self.request("GET", "/chats", params={"limit": limit})
        return [ChatView.model_validate(c) for c in response.json()["chats"]]

    async def get_chat(self, chat_id: str) -> ChatView:
        """GET /chats/{id}."""
        response = await self.request("GET", f"/chats/{chat_id}")
        return ChatView.model_validate(response.json())

    async def messages(self, chat_id: str) -> list[MessageView]:
        """The whole transcript, oldest first."""
        out: list[MessageView] = []
        after: int | None = 0
        while after is not None:
            params = {"after_id": after, "limit": 500}
            page = (await self.request("GET", f"/chats/{chat_id}/messages", params=params)).json()
            out += [MessageView.model_validate(m) for m in page["messages"]]
            after = page["next_after_id"]
        return out

    async def send_message(self, chat_id: str, content: str) -> SendResult:
        """POST a user message (idempotent: one key per message)."""
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        response = await self.request(
            "POST", f"/chats/{chat_id}/messages", json={"content": content}, headers=headers
        )
        return SendResult.model_validate(response.json())

    async def interrupt(self, chat_id: str) -> bool:
        """POST /interrupt; False when nothing was running."""
        try:
            await self.request("POST", f"/chats/{chat_id}/interrupt")
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        return True

    async def tool_results(self, chat_id: str, results: list[dict[str, Any]]) -> None:
        """POST /tool-results: `[{tool_call_id, output, is_error}]`."""
        await self.request("POST", f"/chats/{chat_id}/tool-results", json={"results": results})


def _unreachable(base_url: str, err: httpx.TransportError) -> ClientError:
    return ClientError(f"cannot reach the gateway at {base_url} ({_reason(err)})")


def _reason(err: BaseException) -> str:
    """The root cause, worded for a person (`connection refused`, `timed out`)."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, TimeoutError | httpx.TimeoutException):
            return "timed out"
        cause = cause.__cause__ or cause.__context__
    return str(err) or type(err).__name__


class EventStream:
    """A chat's events from `last_id` on; reconnects with `Last-Event-ID` when dropped.

    `open()` returns once the server has answered, so nothing sent afterwards is missed.
    `on_note` hears about a lost connection that does not come back at once.
    """

    def __init__(
        self,
        client: ChatdClient,
        chat_id: str,
        last_id: int | None = None,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._chat_id = chat_id
        self.last_id = last_id
        self._on_note = on_note or (lambda _: None)
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> EventStream:
        await self.open()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect (raising `ClientError` if the gateway is unreachable or refuses)."""
        headers = {"Last-Event-ID": str(self.last_id)} if self.last_id is not None else {}
        timeout = httpx.Timeout(self._client.http.timeout.connect, read=READ_TIMEOUT_S)
        request = self._client.http.build_request(
            "GET", f"/chats/{self._chat_id}/stream", headers=headers, timeout=timeout
        )
        try:
            response = await self._client.http.send(request, stream=True)
        except httpx.TransportError as err:
            raise _unreachable(self._client.base_url, err) from err
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            raise _api_error(response)
        self._response = response

    async def aclose(self) -> None:
        """Drop the connection."""
        if self._response is not None:
            await self._response.aclose()
            self._response = None

    async def __aiter__(self) -> AsyncIterator[Event]:
        """Events, exactly once each, across reconnections."""
        while True:
            try:
                async for event in self._read():
                    yield event
            except httpx.TransportError:
                pass
            await self.aclose()
            await self._reconnect()

    async def _read(self) -> AsyncIterator[Event]:
        if self._response is None:
            return
        async for event in parse_sse(self._response.aiter_lines()):
            if event.id is not None:
                if self.last_id is not None and event.id <= self.last_id:
                    continue
                self.last_id = event.id
            yield event

    async def _reconnect(self) -> None:
        for attempt in itertools.count():
            await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            try:
                await self.open()
                return
            except ApiError as err:
                if err.code == "cursor_expired":
                    self._on_note("events were lost while disconnected; continuing from now")
                    self.last_id = None
                    continue
                if err.status < 500:
                    raise
                self._on_note(f"connection lost ({err}); retrying…")
            except ClientError as err:
                self._on_note(f"connection lost ({err}); retrying…")
