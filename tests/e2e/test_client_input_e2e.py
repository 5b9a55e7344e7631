"""Client input is data (ARCHITECTURE rule 9), checked as a property against a real stack.

Random user messages (text and file parts with random media types and sizes, invalid
base64, odd unicode, NUL bytes) and chats with random model names: each is refused with a
4xx in the error shape, or else accepted and its turn ends (the chat leaves `running`).
Never a 5xx, never a wedged chat.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
from harness import Stack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText

MAX_EXAMPLES = 100
TURN_BOUND_S = 60.0
"""How long an accepted message's turn may take to end before the chat counts as wedged."""
_BUSY = ("running", "requires_action")

_ODD = ["\x00", "\ud800", "\udfff", "\u202e", "\ufeff", "\u0301", "\U0001f600", "\n", " "]
odd_text = st.text(st.one_of(st.characters(), st.sampled_from(_ODD)), max_size=300)
# Plausible inputs outnumber hostile ones (each branch of `one_of` is about as likely), so
# many messages are accepted and run a turn.
real_media_types = st.sampled_from(
    ["text/plain", "text/csv", "text/html", "image/png", "image/jpeg", "application/pdf"]
)
odd_media_types = st.one_of(
    st.sampled_from(["audio/wav", "application/x-unknown", "image/x.odd+b", "x/y"]),
    st.sampled_from(["image/", "text", "", "a/b/c", "text/plain; x=1", " text/plain"]),
    st.text(max_size=40),
)
valid_data = st.binary(max_size=3000).map(lambda b: base64.b64encode(b).decode())
invalid_data = st.one_of(
    st.sampled_from(["%%not base64%%", "aGk", "aGk=\n", "YQ==YQ==", "a b=", "====", "é", ""]),
    st.text(max_size=50),
)
file_parts = st.fixed_dictionaries(
    {
        "type": st.just("file"),
        "media_type": st.one_of(real_media_types, real_media_types, odd_media_types),
        "data": st.one_of(valid_data, valid_data, invalid_data),
    },
    optional={"name": odd_text},
)
text_parts = st.fixed_dictionaries({"type": st.just("text"), "text": odd_text})
messages = st.one_of(
    st.fixed_dictionaries({"content": odd_text}),
    st.fixed_dictionaries(
        {"parts": st.lists(st.one_of(text_parts, file_parts), min_size=1, max_size=4)}
    ),
    st.fixed_dictionaries({"parts": st.lists(st.one_of(text_parts, file_parts), max_size=4)}),
)
model_names = st.one_of(
    st.just("demo"),
    st.text(alphabet="abcxyz0123456789.-_:/@+", min_size=1, max_size=200),
    st.text(alphabet="abcxyz0123456789.-_:/@+", min_size=1, max_size=250),
    st.text(max_size=250),
    st.integers(min_value=150, max_value=6000).map(lambda n: "m" * n),
)
models = st.fixed_dictionaries(
    {"provider": st.sampled_from(["demo", "anthropic", "openai"]), "name": model_names}
)
DEMO = {"provider": "demo", "name": "demo"}
requests = st.one_of(
    st.tuples(st.just("send"), st.just(DEMO), messages),
    st.tuples(st.just("create"), models, messages),
)


def _file(media_type: str, data: bytes | str) -> dict[str, Any]:
    encoded = base64.b64encode(data).decode() if isinstance(data, bytes) else data
    return {"type": "file", "media_type": media_type, "data": encoded}


EDGES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "send",
        DEMO,
        {"parts": [{"type": "text", "text": "read this"}, _file("text/plain", "%%not base64%%")]},
    ),
    ("create", {"provider": "anthropic", "name": "x" * 5000}, {"content": "hi"}),
    ("send", DEMO, {"content": "a lone \ud800 surrogate"}),
    ("create", {"provider": "openai", "name": "m-edge"}, {"content": "\udfff"}),
    ("send", DEMO, {"content": "a NUL \x00 byte"}),
    ("send", DEMO, {"parts": [{"type": "text", "text": "   "}]}),
    ("send", DEMO, {"parts": [_file("text/plain", b"\xff\xfe not utf-8")]}),
    ("send", DEMO, {"parts": [_file("image/png", b"not a png")]}),
    ("send", DEMO, {"parts": [_file("application/x-unknown", b"hi")]}),
    ("create", {"provider": "openai", "name": "m-edge"}, {"parts": [_file("image/png", b"x")]}),
    ("create", {"provider": "openai", "name": "m-edge"}, {"parts": [_file("audio/wav", b"x")]}),
]
"""Known edges, tried first on every run (the first two were a wedged turn and a 503)."""


def _answer(_: FakeRequest) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text="ok")])


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST `body` as ASCII JSON: lone surrogates travel as `\\udxxx` escapes, as a
    JavaScript client would send them."""
    content = json.dumps(body).encode()
    return http.post(path, content=content, headers={"content-type": "application/json"})


def _refused_in_the_error_shape(response: httpx.Response) -> bool:
    assert response.status_code < 500, f"{response.status_code}: {response.text}"
    if response.is_success:
        return False
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["detail"], dict)
    return True


def _turn_ends(http: httpx.Client, chat_id: str) -> None:
    """Poll the chat until it leaves `running`, within a bound: a wedged turn fails here."""
    deadline = time.monotonic() + TURN_BOUND_S
    while True:
        chat = http.get(f"/chats/{chat_id}")
        assert chat.status_code == 200, chat.text
        status = chat.json()["status"]
        if status not in _BUSY and not chat.json()["queued_messages"]:
            return
        assert time.monotonic() < deadline, f"chat {chat_id} still {status}: {chat.json()}"
        time.sleep(0.05)


def _examples(edges: list[Any]) -> Any:
    """`@example(request=edge)` for each edge, in order."""

    def add(test: Any) -> Any:
        for edge in reversed(edges):
            test = example(request=edge)(test)
        return test

    return add


def _check_inputs(stack: Stack) -> None:
    http = httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=60
    )

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples every CI run: a failure reproduces
        suppress_health_check=list(HealthCheck),
    )
    @given(request=requests)
    @_examples(EDGES)
    def check(request: tuple[str, dict[str, Any], dict[str, Any]]) -> None:
        kind, model, message = request
        if model["name"] != DEMO["name"]:  # any provider named `demo` is the demo model's
            stack.fake.script(model["name"], _answer)  # name: scripting it would replace it
        if kind == "create":
            created = _post(http, "/chats", {"model": model, "message": message})
            if not _refused_in_the_error_shape(created):
                _turn_ends(http, created.json()["id"])
            return
        chat = _post(http, "/chats", {"model": model})
        assert chat.status_code == 201, chat.text
        sent = _post(http, f"/chats/{chat.json()['id']}/messages", message)
        if not _refused_in_the_error_shape(sent):
            _turn_ends(http, chat.json()["id"])

    try:
        check()
    finally:
        http.close()


async def test_user_messages_are_refused_or_their_turn_ends(stack: Stack) -> None:
    await asyncio.to_thread(_check_inputs, stack)
