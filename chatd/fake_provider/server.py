"""The fake provider's ASGI app, and `FakeProviderServer` running it with uvicorn in a thread."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Literal

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from chatd.fake_provider import anthropic_wire, gemini_wire, openai_chat_wire
from chatd.fake_provider.admission import refusal
from chatd.fake_provider.anthropic_wire import AnthropicEncoder
from chatd.fake_provider.aws_eventstream import CONTENT_TYPE as EVENTSTREAM
from chatd.fake_provider.demo import DEMO_MODEL, demo_responder
from chatd.fake_provider.gemini_wire import GeminiEncoder
from chatd.fake_provider.openai_chat_wire import ChatEncoder
from chatd.fake_provider.openai_responses_wire import ResponsesEncoder
from chatd.fake_provider.platforms import (
    Platform,
    bedrock_error,
    bedrock_frame,
    bedrock_stream_error,
    check_platform_body,
    model_in_path,
)
from chatd.fake_provider.script import (
    ApiName,
    DeltaRecord,
    FakeError,
    FakeRequest,
    FakeResponse,
    Responder,
    ScriptBook,
)
from chatd.fake_provider.sse import SseEvent, WireEncoder, new_id
from chatd.fake_provider.token_counts import (
    check_count,
    count_model,
    count_refusal,
    count_response,
    counted_tokens,
    is_count_path,
)
from chatd.fake_provider.validation import InvalidRequest, validate
from chatd.settings import ProviderSettings

__all__ = [
    "KEEP_ALIVE_S",
    "FakeProviderServer",
    "ProviderEndpoint",
    "create_app",
    "main",
    "provider_settings_for",
]

KEEP_ALIVE_S = 75
"""How long an idle connection stays open, as the providers' APIs keep theirs: longer than the
SDKs' 5 s keep-alive, so a client never reuses one the server is closing (uvicorn's 5 s
default raced them, and the request failed with a ReadError)."""

_ENCODERS: dict[ApiName, Callable[[FakeRequest, FakeResponse], WireEncoder]] = {
    "anthropic": AnthropicEncoder,
    "openai_chat": ChatEncoder,
    "openai_responses": ResponsesEncoder,
    "gemini": GeminiEncoder,
}
_ROUTES: dict[str, ApiName] = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai_chat",
    "/v1/responses": "openai_responses",
    "/v1/messages/count_tokens": "anthropic",
    "/v1/responses/input_tokens": "openai_responses",
}
_Outcome = Literal["done", "hang", "disconnect"]


class _AbortConnection(Exception):
    """Raised after the response started so uvicorn drops the connection mid-body."""


class _DropAbortLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _AbortConnection))


_ABORT_FILTER = _DropAbortLogs()


def _request_id_header(api: ApiName) -> dict[str, str]:
    if api == "anthropic":
        return {"request-id": new_id("req_011", 21)}
    return {"x-request-id": new_id("req_", 32, "0123456789abcdef")}


def error_response(api: ApiName, error: FakeError) -> Response:
    """The provider's JSON error response for `error`."""
    headers = {**_request_id_header(api), **error.headers}
    if api == "anthropic":
        body = anthropic_wire.error_body(error, headers.get("request-id"))
    elif api == "gemini":
        body = gemini_wire.error_body(error)
    else:
        body = openai_chat_wire.error_body(error)
    return JSONResponse(body, status_code=error.status, headers=headers)


class ProviderEndpoint:
    """ASGI endpoint answering one provider API from a `ScriptBook`."""

    def __init__(
        self,
        book: ScriptBook,
        api: ApiName,
        closing: threading.Event | None = None,
        platform: Platform = "direct",
    ) -> None:
        """`platform`: Anthropic's API as Vertex AI or Bedrock carry it (`platforms`)."""
        self._book = book
        self._api = api
        self._closing = closing or threading.Event()
        self._platform = platform

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Validate, record and answer one request."""
        outcome = await self._prepare(Request(scope, receive))
        if isinstance(outcome, Response):
            await outcome(scope, receive, send)
        else:
            await outcome.run(receive, send)

    async def _prepare(self, request: Request) -> Response | _Stream:
        body = await _json_body(request)
        if body is None:
            return self._invalid(InvalidRequest("The request body is not a JSON object."))
        if is_count_path(self._api, request.url.path):
            return self._count(request, body)
        fake = FakeRequest(
            api=self._api,
            path=request.url.path,
            model=self._model_of(request.url.path, body),
            headers=dict(request.headers),
            body=body,
        )
        self._book.record_request(fake)
        try:
            self._check(fake)
        except InvalidRequest as exc:
            return self._invalid(exc)
        refused = refusal(self._book, self._api, fake.model, body)
        if refused is not None:
            return self._error(refused)
        try:
            response = self._book.next_response(fake)
        except Exception as exc:  # a responder bug or an exhausted script: fail loudly
            kind = "api_error" if self._api == "anthropic" else "server_error"
            return self._error(FakeError(status=500, type=kind, message=str(exc)))
        if response.first_byte_delay_s > 0:
            await asyncio.sleep(response.first_byte_delay_s)
        if response.error is not None:
            return self._error(response.error)
        encoder = _ENCODERS[self._api](fake, response)
        if isinstance(encoder, GeminiEncoder) and not gemini_wire.streams(fake.path):
            return JSONResponse(gemini_wire.whole_response(encoder))
        if isinstance(encoder, ResponsesEncoder) and body.get("store", True) is not False:
            self._book.store_response(encoder.response_id)
        return _Stream(self._book, fake, response, encoder, self._closing, self._platform)

    def _count(self, request: Request, body: dict[str, Any]) -> Response:
        """A token count (`token_counts`): checked and logged as the model's requests are,
        answered with its scripted count, consuming none of its scripted responses."""
        path = request.url.path
        fake = FakeRequest(
            api=self._api,
            path=path,
            model=count_model(self._api, path, body),
            headers=dict(request.headers),
            body=body,
        )
        self._book.record_count_request(fake)
        try:
            check_count(self._api, path, body)
        except InvalidRequest as exc:
            return self._invalid(exc)
        refused = count_refusal(self._book, self._api, fake.model, body)
        if refused is not None:
            return self._error(refused)
        tokens = counted_tokens(self._book, self._api, fake.model, body)
        return JSONResponse(
            count_response(self._api, tokens), headers=_request_id_header(self._api)
        )

    def _model_of(self, path: str, body: dict[str, Any]) -> str:
        """The model asked for: Gemini, Vertex and Bedrock name it in the path, the others
        in the body."""
        if self._api == "gemini":
            return gemini_wire.model_of_path(path) or ""
        if self._platform != "direct":
            return model_in_path(self._platform, path)
        return str(body.get("model") or "")

    def _check(self, request: FakeRequest) -> None:
        """What the real API checks, and that the request streams (the fake only streams,
        but for Gemini's `:generateContent`: Gemini's and Bedrock's paths say so, the others'
        `stream`)."""
        if self._api == "gemini" and not request.model:
            raise InvalidRequest("Not a Gemini method: :streamGenerateContent or :generateContent.")
        body = request.body
        if self._platform != "direct":
            check_platform_body(self._platform, body)
            streams = self._platform == "bedrock" or body.get("stream") is True
            body = {**body, "model": request.model, "stream": streams}
        validate(self._api, body)
        if self._api != "gemini" and body.get("stream") is not True:
            raise InvalidRequest("The fake provider only streams: set `stream: true`.")

    def _error(self, error: FakeError) -> Response:
        if self._platform == "bedrock":
            return bedrock_error(error)
        return error_response(self._api, error)

    def _invalid(self, exc: InvalidRequest) -> Response:
        error = FakeError(
            status=400, type="invalid_request_error", message=exc.message, param=exc.param
        )
        return self._error(error)


async def _json_body(request: Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class _Stream:
    """Writes one scripted SSE stream, applying its timing and fault knobs."""

    def __init__(
        self,
        book: ScriptBook,
        request: FakeRequest,
        response: FakeResponse,
        encoder: WireEncoder,
        closing: threading.Event,
        platform: Platform = "direct",
    ) -> None:
        self._book = book
        self._request = request
        self._response = response
        self._encoder = encoder
        self._closing = closing
        self._bedrock = platform == "bedrock"
        self._client_gone = False

    async def run(self, receive: Receive, send: Send) -> None:
        """Send the stream; stop when the client goes away."""
        kind = EVENTSTREAM if self._bedrock else "text/event-stream; charset=utf-8"
        headers = {
            "content-type": kind,
            "cache-control": "no-cache",
            **_request_id_header(self._request.api),
            **self._response.headers,
        }
        raw_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
        outcome: _Outcome = "done"
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
            outcome = await self._emit(send)
            if outcome == "hang":
                outcome = await self._hang()
            group.cancel_scope.cancel()
        if outcome == "disconnect":
            raise _AbortConnection("fake provider: scripted disconnect")
        if not self._client_gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _hang(self) -> _Outcome:
        """Send nothing until the client goes away (cancels us) or the server stops."""
        # `closing` is set from another thread, so poll it rather than await an asyncio.Event.
        while not self._closing.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return "disconnect"

    async def _watch_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._client_gone = True
        scope.cancel()

    async def _emit(self, send: Send) -> _Outcome:
        sent = 0
        for event in self._encoder.events():
            if self._closing.is_set():
                return "disconnect"  # a long, slow stream would hold the server's shutdown
            if event.kind in ("delta", "final"):
                fault = self._fault_due(sent)
                if fault == "error":
                    await self._send_error(send, self._response.stream_error)
                    return "done"
                if fault is not None:
                    return fault
            if event.kind == "delta":
                if self._response.delta_delay_s > 0:
                    await asyncio.sleep(self._response.delta_delay_s)
                sent += 1
            await self._send(send, event)
        return "done"

    def _fault_due(self, sent: int) -> Literal["hang", "disconnect", "error"] | None:
        response = self._response
        if (
            response.disconnect_after_deltas is not None
            and sent >= response.disconnect_after_deltas
        ):
            return "disconnect"
        if (
            response.stream_error_after_deltas is not None
            and sent >= response.stream_error_after_deltas
        ):
            return "error"
        if response.hang_after_deltas is not None and sent >= response.hang_after_deltas:
            return "hang"
        return None

    async def _send(self, send: Send, event: SseEvent) -> None:
        if event.text is not None:
            self._book.record_delta(self._request.model, event.text)
        body = bedrock_frame(event) if self._bedrock else event.encode()
        await send({"type": "http.response.body", "body": body, "more_body": True})

    async def _send_error(self, send: Send, error: FakeError) -> None:
        if self._bedrock:
            body = bedrock_stream_error(error)
            await send({"type": "http.response.body", "body": body, "more_body": True})
            return
        for event in self._encoder.error_events(error):
            await self._send(send, event)


def create_app(book: ScriptBook, closing: threading.Event | None = None) -> Starlette:
    """The ASGI app serving the four provider APIs (and their token counting), Claude as
    Vertex AI and Bedrock carry it and OpenAI's on Azure's URLs (plus `GET /health`), from
    `book`.

    Setting `closing` makes hanging streams drop their connections (for a quick shutdown).
    """
    logging.getLogger("uvicorn.error").addFilter(_ABORT_FILTER)
    routes = [
        Route(path, ProviderEndpoint(book, api, closing), methods=["POST"])
        for path, api in _ROUTES.items()
    ]
    routes.append(Route("/health", _health, methods=["GET"]))

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        info = {"id": name, "object": "model", "created": 0, "owned_by": "fake"}
        return JSONResponse({**info, **book.model_info.get(name, {})})

    routes.append(Route("/v1/models/{model:path}", model, methods=["GET"]))

    async def gemini_model(request: Request) -> Response:
        name = request.path_params["model"]
        return JSONResponse(gemini_wire.model_info(name, book.context_window(name)))

    # Claude on Vertex AI and on Bedrock; OpenAI on Azure (its deployment-scoped URLs).
    vertex = ProviderEndpoint(book, "anthropic", closing, platform="vertex")
    routes.append(
        Route("/v1/projects/{project}/locations/{region}/{rest:path}", vertex, methods=["POST"])
    )
    bedrock = ProviderEndpoint(book, "anthropic", closing, platform="bedrock")
    routes.append(Route("/model/{model}/invoke-with-response-stream", bedrock, methods=["POST"]))
    azure_chat = ProviderEndpoint(book, "openai_chat", closing)
    routes.append(
        Route("/openai/deployments/{deployment}/chat/completions", azure_chat, methods=["POST"])
    )
    azure_responses = ProviderEndpoint(book, "openai_responses", closing)
    routes.append(Route("/openai/responses", azure_responses, methods=["POST"]))
    routes.append(Route("/openai/responses/input_tokens", azure_responses, methods=["POST"]))
    gemini = ProviderEndpoint(book, "gemini", closing)
    routes.append(Route("/v1beta/models/{model}", gemini_model, methods=["GET"]))
    # `/v1beta/models/{model}:streamGenerateContent`: the endpoint reads the model itself.
    routes.append(Route("/v1beta/models/{action:path}", gemini, methods=["POST"]))
    routes.append(Route("/v1beta1/projects/{rest:path}", gemini, methods=["POST"]))
    return Starlette(routes=routes)


async def _health(request: Request) -> Response:
    return PlainTextResponse("ok")


def provider_settings_for(base_url: str) -> ProviderSettings:
    """Every provider pointed at the fake provider at `base_url` (`http://host:port`), with
    placeholder keys: for a fake in this process (`FakeProviderServer`) or in another."""
    return ProviderSettings(
        anthropic_api_key="test-anthropic-key",
        anthropic_base_url=base_url,
        openai_api_key="test-openai-key",
        openai_base_url=base_url + "/v1",
        google_api_key="test-google-key",
        google_base_url=base_url,
        bedrock_region="us-east-1",
        bedrock_api_key="test-bedrock-key",
        bedrock_base_url=base_url,
        vertex_region="us-east5",
        vertex_project="test-project",
        vertex_base_url=base_url + "/v1",
        vertex_access_token="test-vertex-token",
        azure_endpoint=base_url,
        azure_api_key="test-azure-key",
        demo_base_url=base_url,
    )


class FakeProviderServer:
    """Runs the fake provider with uvicorn in a background thread (port 0 = a free port)."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, demo_model: str | None = DEMO_MODEL
    ) -> None:
        self.host = host
        self.port = port
        self.book = ScriptBook()
        self._demo_model = demo_model
        if demo_model is not None:
            self.book.set(demo_model, demo_responder)
        self._closing = threading.Event()
        self.app = create_app(self.book, self._closing)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """`http://host:port` (no `/v1`: Anthropic's SDK adds it, OpenAI's needs it added)."""
        if self._server is None:
            raise RuntimeError("FakeProviderServer is not started")
        return f"http://{self.host}:{self.port}"

    def provider_settings(self) -> ProviderSettings:
        """Every provider pointed at this server, with placeholder keys."""
        return provider_settings_for(self.base_url)

    def start(self, timeout_s: float = 10.0) -> FakeProviderServer:
        """Start serving; returns once the port is bound."""
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            loop="asyncio",
            timeout_keep_alive=KEEP_ALIVE_S,
            http="h11",
            ws="none",
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="fake-provider", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"fake provider server failed to start on {self.host}:{self.port}"
                )
            time.sleep(0.01)
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server, self._thread = server, thread
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and join the thread."""
        if self._server is None or self._thread is None:
            return
        self._closing.set()
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._closing.clear()
        self._server = self._thread = None

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def script(self, model: str, responses: Sequence[FakeResponse] | Responder) -> None:
        """Script `model`: a list consumed one response per request, or a responder."""
        self.book.set(model, responses)

    def requests(self, model: str) -> list[FakeRequest]:
        """Every request received for `model`, oldest first (including rejected ones)."""
        return self.book.requests(model)

    def script_token_count(self, model: str, answer: int | FakeError | None) -> None:
        """What counting `model`'s input answers: a count, an error, or (None) about four
        characters of the prompt's JSON per token."""
        self.book.set_token_count(model, answer)

    def count_requests(self, model: str) -> list[FakeRequest]:
        """Every token count request received for `model`, oldest first (not in
        `requests`)."""
        return self.book.count_requests(model)

    def deltas(self, model: str) -> list[DeltaRecord]:
        """The text deltas streamed for `model`, with `time.time_ns()` emission stamps."""
        return self.book.deltas(model)

    def remaining(self, model: str) -> int:
        """How many scripted responses of `model` are not consumed yet."""
        return self.book.remaining(model)

    def reset(self, model: str | None = None) -> None:
        """Forget scripts and logs of `model` (all models when None); the demo model stays."""
        self.book.reset(model)
        if self._demo_model is not None and model in (None, self._demo_model):
            self.book.set(self._demo_model, demo_responder)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the fake provider (with the demo model) in the foreground."""
    parser = argparse.ArgumentParser(description="chatd fake model provider")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    book = ScriptBook()
    book.set(DEMO_MODEL, demo_responder)
    uvicorn.run(create_app(book), host=args.host, port=args.port, lifespan="off")


if __name__ == "__main__":
    main()
