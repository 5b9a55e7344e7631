"""Open Responses at `/v1`, driven by the official `openai` SDK against a real stack: every
response object and streamed event is checked against the spec's schema (openapi.json)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from harness import Cluster, Stack
from openai import AsyncOpenAI
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from support.api_process import chatd_api, until_ready
from support.names import model_name

from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.settings import unstored_keep
from chatd.store.chats import ChatStore

_SPEC = json.loads(
    (Path(__file__).parent.parent / "data" / "openresponses" / "openapi.json").read_text()
)
_REGISTRY = Registry().with_resource(
    "spec", Resource.from_contents(_SPEC, default_specification=DRAFT202012)
)
_EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedStreamingEvent",
    "response.queued": "ResponseQueuedStreamingEvent",
    "response.in_progress": "ResponseInProgressStreamingEvent",
    "response.completed": "ResponseCompletedStreamingEvent",
    "response.failed": "ResponseFailedStreamingEvent",
    "response.incomplete": "ResponseIncompleteStreamingEvent",
    "response.output_item.added": "ResponseOutputItemAddedStreamingEvent",
    "response.output_item.done": "ResponseOutputItemDoneStreamingEvent",
    "response.content_part.added": "ResponseContentPartAddedStreamingEvent",
    "response.content_part.done": "ResponseContentPartDoneStreamingEvent",
    "response.output_text.delta": "ResponseOutputTextDeltaStreamingEvent",
    "response.output_text.done": "ResponseOutputTextDoneStreamingEvent",
    "response.reasoning.delta": "ResponseReasoningDeltaStreamingEvent",
    "response.reasoning.done": "ResponseReasoningDoneStreamingEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaStreamingEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneStreamingEvent",
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _conforms(instance: dict[str, Any], schema: str) -> None:
    """Raise unless `instance` is valid against the spec's component `schema`."""
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"spec#/components/schemas/{schema}"}, registry=_REGISTRY
    )
    validator.validate(instance)


def _client(stack: Stack, key: str | None = None) -> AsyncOpenAI:
    root = stack.base_url.removesuffix("/api/v1")
    return AsyncOpenAI(base_url=f"{root}/v1", api_key=key or stack.key, max_retries=0)


def _auth(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.key}"}


def _model(stack: Stack, *responses: FakeResponse) -> str:
    """A fake model answering one conversation's steps in turn (a retried attempt of a step
    gets that step's answer again)."""
    return f"anthropic/{stack.stepped_model(*responses)['name']}"


def _text(text: str, **extra: Any) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text, chunk_size=3)], **extra)


async def _raw_events(stack: Stack, path: str, **kwargs: Any) -> list[dict[str, Any]]:
    """The SSE events of a `/v1` request, as the JSON objects sent, checked frame by frame:
    `event:` names the `type`, one `data:` line, and `[DONE]` last."""
    root = stack.base_url.removesuffix("/api/v1")
    headers = _auth(stack)
    events: list[dict[str, Any]] = []
    done = False
    async with (
        httpx.AsyncClient(base_url=root, headers=headers, timeout=60) as http,
        http.stream(kwargs.pop("method", "GET"), path, **kwargs) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        body = (await response.aread()).decode()
    assert "\r" not in body
    for frame in body.split("\n\n"):
        lines = [line for line in frame.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        assert not done, "nothing follows [DONE]"
        if lines == ["data: [DONE]"]:
            done = True
            continue
        assert len(lines) == 2 and lines[0].startswith("event: "), frame
        event = json.loads(lines[1].removeprefix("data: "))
        assert lines[0] == f"event: {event['type']}"
        events.append(event)
    assert done, "the stream ends with [DONE]"
    return events


def _check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Check a whole stream against the spec: numbered from 0 without a gap, each event
    valid, each added item and part closed; the final response."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    open_items: set[int] = set()
    open_parts: set[tuple[int, int]] = set()
    for event in events:
        _conforms(event, _EVENT_SCHEMAS[event["type"]])
        kind = event["type"]
        if kind == "response.output_item.added":
            open_items.add(event["output_index"])
        elif kind == "response.output_item.done":
            open_items.remove(event["output_index"])
        elif kind == "response.content_part.added":
            open_parts.add((event["output_index"], event["content_index"]))
        elif kind == "response.content_part.done":
            open_parts.remove((event["output_index"], event["content_index"]))
    assert not open_items and not open_parts, "every added item and part is done"
    assert events[0]["type"] == "response.created"
    final = events[-1]
    assert final["type"] in ("response.completed", "response.failed", "response.incomplete")
    response: dict[str, Any] = final["response"]
    return response


async def test_a_response_is_created_retrieved_and_listed_through_the_sdk(stack: Stack) -> None:
    model = _model(stack, _text("Hello from a durable turn."))
    async with _client(stack) as client:
        response = await client.responses.create(
            model=model, input="Say hello", instructions="Be brief.", metadata={"k": "v"}
        )
        assert response.status == "completed"
        assert response.output_text == "Hello from a durable turn."
        assert response.instructions == "Be brief." and response.metadata == {"k": "v"}
        assert response.usage is not None and response.usage.output_tokens > 0
        again = await client.responses.retrieve(response.id)
        assert again.model_dump() == response.model_dump()
        items = await client.responses.input_items.list(response.id)
        assert [(i.type, i.role) for i in items.data] == [("message", "user")]  # type: ignore[union-attr]
    root = stack.base_url.removesuffix("/api/v1")
    async with httpx.AsyncClient(base_url=root, headers=_auth(stack)) as http:
        raw = (await http.get(f"/v1/responses/{response.id}")).json()
    _conforms(raw, "ResponseResource")
    request = stack.fake.requests(model.split("/", 1)[1])[-1].body
    assert "Be brief." in json.dumps(request["system"])


async def test_a_stream_conforms_and_resumes_after_any_event_exactly_once(stack: Stack) -> None:
    model = _model(stack, _text("one two three four five"))
    async with _client(stack) as client:
        streamed = []
        async with await client.responses.create(model=model, input="count", stream=True) as s:
            async for event in s:
                streamed.append(event.to_dict())
        assert streamed[-1]["type"] == "response.completed"
    events = await _raw_events(stack, f"/v1/responses/{streamed[0]['response']['id']}",
                               params={"stream": "true"})  # fmt: skip
    assert events == streamed, "a replay is the same stream, numbered the same"
    final = _check_stream(events)
    _conforms(final, "ResponseResource")
    texts = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert texts == "one two three four five"
    for cut in (0, 3, len(events) // 2, len(events) - 2):
        rest = await _raw_events(
            stack,
            f"/v1/responses/{final['id']}",
            params={"stream": "true", "starting_after": str(cut)},
        )
        assert rest == events[cut + 1 :], cut


async def test_a_function_tool_round_trip_answers_the_waiting_turn(stack: Stack) -> None:
    model = _model(
        stack,
        FakeResponse(parts=[FakeToolCall(name="get_weather", arguments={"city": "Oslo"})]),
        _text("It is sunny in Oslo."),
    )
    async with _client(stack) as client:
        first = await client.responses.create(model=model, input="Weather?", tools=[WEATHER])  # type: ignore[list-item]
        assert first.status == "completed"
        (call,) = [item for item in first.output if item.type == "function_call"]
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
        with pytest.raises(openai.BadRequestError) as pending:
            await client.responses.create(
                model=model, input="and tomorrow?", previous_response_id=first.id
            )
        assert pending.value.code == "function_calls_pending"
        assert call.call_id in pending.value.message
        with pytest.raises(openai.BadRequestError) as unknown:
            await client.responses.create(
                model=model,
                previous_response_id=first.id,
                input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}],
            )
        assert unknown.value.code == "invalid_tool_results"
        second = await client.responses.create(
            model=model,
            previous_response_id=first.id,
            tools=[WEATHER],  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        )
        assert second.status == "completed" and second.output_text == "It is sunny in Oslo."
        assert [i.type for i in second.output] == ["message"], "the answer is input, not output"
    body = stack.fake.requests(model.split("/", 1)[1])[-1].body
    results = [b for m in body["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert [r["content"] for r in results] in (["sunny"], [[{"type": "text", "text": "sunny"}]])


async def test_a_continuation_of_an_earlier_response_forks_the_conversation(
    stack: Stack,
) -> None:
    answers = {"Q1": "A1", "Q2": "A2", "Q3": "A3"}

    def answer(request: FakeRequest) -> FakeResponse:
        return _text(answers[_said(request.body)[-1]])

    name = model_name()
    stack.fake.script(name, answer)
    model = f"anthropic/{name}"
    async with _client(stack) as client:
        first = await client.responses.create(model=model, input="Q1")
        second = await client.responses.create(
            model=model, input="Q2", previous_response_id=first.id
        )
        forked = await client.responses.create(
            model=model, input="Q3", previous_response_id=first.id
        )
        assert [r.output_text for r in (first, second, forked)] == ["A1", "A2", "A3"]
        assert second.conversation == first.conversation  # type: ignore[attr-defined]
        assert forked.conversation != first.conversation  # type: ignore[attr-defined]
    sent = [_said(r.body) for r in stack.fake.requests(name)]
    assert ["Q1", "A1", "Q2"] in sent
    assert ["Q1", "A1", "Q3"] in sent, "the fork has Q1's conversation only"


def _said(body: dict[str, Any]) -> list[str]:
    """The texts of a provider request's messages, in order."""
    return [b["text"] for m in body["messages"] for b in m["content"] if b.get("type") == "text"]


async def test_cancel_interrupts_a_background_response_and_keeps_its_partial_output(
    stack: Stack,
) -> None:
    slow = FakeResponse(
        parts=[FakeText(text=" ".join(f"w{i}" for i in range(200)), chunk_size=4)],
        delta_delay_s=0.05,
    )
    model = _model(stack, slow)
    async with _client(stack) as client:
        started = await client.responses.create(model=model, input="long", background=True)
        assert started.status in ("queued", "in_progress") and started.background
        for _ in range(200):
            now = await client.responses.retrieve(started.id)
            if now.status == "in_progress":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        cancelled = await client.responses.cancel(started.id)
        assert cancelled.status == "cancelled"
        assert cancelled.output_text.startswith("w0 w1"), cancelled.output_text
        assert len(cancelled.output_text) < len(slow.parts[0].text)  # type: ignore[union-attr]
        assert (await client.responses.retrieve(started.id)).status == "cancelled"


async def test_a_deleted_response_is_gone(stack: Stack) -> None:
    model = _model(stack, _text("bye"))
    async with _client(stack) as client:
        response = await client.responses.create(model=model, input="hi")
        await client.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError) as gone:
            await client.responses.retrieve(response.id)
        assert gone.value.code == "response_not_found"
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(response.id)


async def test_errors_use_openai_envelope_and_status(stack: Stack) -> None:
    model = _model(stack, _text("unused"))
    async with _client(stack, key="chatd_not_a_key") as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            await stranger.responses.create(model=model, input="hi")
        assert refused.value.body["type"] == "authentication_error"  # type: ignore[index]
    async with _client(stack) as client:
        cases: list[tuple[dict[str, Any], str, str | None]] = [
            ({"model": "nowhere/x", "input": "hi"}, "model_not_found", "model"),
            ({"model": model, "input": "hi", "top_logprobs": 2}, "invalid_request", "top_logprobs"),
            ({"model": model, "input": "hi", "previous_response_id": "resp_x"},
             "previous_response_not_found", "previous_response_id"),
            ({"model": model, "input": [{"type": "message", "role": "user",
              "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]}]},
             "invalid_request", "input[0]"),
            ({"model": model, "input": [{"type": "mystery"}]}, "invalid_request", "input[0]"),
        ]  # fmt: skip
        for body, code, param in cases:
            with pytest.raises(openai.BadRequestError) as bad:
                await client.responses.create(**body)
            error = bad.value.body
            assert isinstance(error, dict) and error["type"] == "invalid_request_error", error
            assert (error["code"], error["param"]) == (code, param), error
    assert stack.fake.requests(model.split("/", 1)[1]) == [], "no refused request ran a turn"


async def _events_of(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an SSE response as they arrive (`[DONE]` ends it)."""
    async for line in response.aiter_lines():
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


@pytest.mark.slow
async def test_a_worker_killed_mid_stream_while_the_client_drops_loses_and_repeats_nothing(
    cluster: Cluster,
) -> None:
    """The worker streaming the response is SIGKILLed and the client's connection drops at
    the same moment; the client resumes with `starting_after`. Sequence numbers never
    repeat, the abandoned attempt's item is closed `incomplete`, and the items the stream
    completes are the canonical output, which is the transcript's."""
    stack = cluster.stack
    long_text = " ".join(f"word{i}" for i in range(60))
    model = _model(
        stack,
        FakeResponse(parts=[FakeText(text=long_text, chunk_size=6)], delta_delay_s=0.1),
        FakeResponse(parts=[FakeText(text=long_text, chunk_size=60)]),
    )
    first = await cluster.polling_worker()
    root = stack.base_url.removesuffix("/api/v1")
    seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=root, headers=_auth(stack), timeout=60) as http:
        body = {"model": model, "input": "write", "stream": True}
        async with http.stream("POST", "/v1/responses", json=body) as response:
            async for event in _events_of(response):
                seen.append(event)
                if sum(e["type"] == "response.output_text.delta" for e in seen) == 3:
                    break  # the client drops here, as the worker dies
        cluster.start_worker()
        await asyncio.to_thread(first.signal, signal.SIGKILL)
        response_id = seen[0]["response"]["id"]
        resumed: list[dict[str, Any]] = []
        params = {"stream": "true", "starting_after": str(seen[-1]["sequence_number"])}
        async with http.stream("GET", f"/v1/responses/{response_id}", params=params) as again:
            async for event in _events_of(again):
                resumed.append(event)
        canonical = (await http.get(f"/v1/responses/{response_id}")).json()
    events = seen + resumed
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = _check_stream(events)
    assert final["status"] == "completed"
    assert final["output"] == canonical["output"]
    abandoned = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["status"] == "incomplete"
    ]
    assert len(abandoned) == 1, "the killed attempt's message is closed incomplete"
    completed = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"].get("status") == "completed"
    ]
    assert [i["content"][0]["text"] for i in completed] == [long_text]
    assert [i["content"][0]["text"] for i in canonical["output"]] == [long_text]
    (chat_id,) = {canonical["conversation"]["id"]}
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["parts"] == [{"type": "text", "text": long_text}]


async def test_an_approval_round_trip_runs_the_call_and_audits_the_decision(
    stack: Stack,
) -> None:
    model = _model(
        stack,
        FakeResponse(parts=[FakeToolCall(name="current_time", arguments={})]),
        _text("It is now."),
    )
    extensions = {"chatd:tools": ["current_time"], "chatd:tool_policy": {"current_time": "ask"}}
    async with _client(stack) as client:
        first = await client.responses.create(model=model, input="time?", extra_body=extensions)
        assert first.status == "completed"
        (ask,) = [item for item in first.output if item.type == "mcp_approval_request"]
        assert (ask.server_label, ask.name) == ("chatd", "current_time")  # type: ignore[union-attr]
        second = await client.responses.create(
            model=model,
            previous_response_id=first.id,
            input=[
                {"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": True}
            ],
        )
        assert second.status == "completed" and second.output_text == "It is now."
        (ran,) = [i.to_dict() for i in second.output if i.type == "chatd:tool_call"]
        assert ran["name"] == "current_time" and ran["status"] == "completed"
        chat_id = second.conversation.id  # type: ignore[union-attr]
    audit = (await stack.http.get(f"/chats/{chat_id}/tool-decisions")).json()["decisions"]
    assert [(d["tool_name"], d["decision"]) for d in audit] == [("current_time", "approve")]


@pytest.mark.slow
async def test_a_stream_resumes_on_another_gateway_after_its_own_was_killed(
    stack: Stack, database_url: str, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """The gateway serving a response's stream is SIGKILLed mid-stream; the client resumes
    on another gateway with `starting_after` and gets every event after it exactly once."""
    long_text = " ".join(f"word{i}" for i in range(40))
    model = _model(
        stack, FakeResponse(parts=[FakeText(text=long_text, chunk_size=6)], delta_delay_s=0.1)
    )
    port, log = free_port(), tmp_path / "api.log"
    gateway = chatd_api(database_url, temporal_server, port, log, stack.task_queue)
    seen: list[dict[str, Any]] = []
    try:
        await until_ready(f"http://127.0.0.1:{port}", gateway, log)
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, headers=_auth(stack), timeout=60) as http:
            body = {"model": model, "input": "write", "stream": True}
            with pytest.raises(httpx.HTTPError):  # the connection dies with the gateway
                async with http.stream("POST", "/v1/responses", json=body) as response:
                    async for event in _events_of(response):
                        seen.append(event)
                        if event["type"] == "response.output_text.delta":
                            gateway.kill()
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait()
    root = stack.base_url.removesuffix("/api/v1")
    params = {"stream": "true", "starting_after": str(seen[-1]["sequence_number"])}
    async with (
        httpx.AsyncClient(base_url=root, headers=_auth(stack), timeout=60) as http,
        http.stream("GET", f"/v1/responses/{seen[0]['response']['id']}", params=params) as again,
    ):
        resumed = [event async for event in _events_of(again)]
    final = _check_stream(seen + resumed)
    assert final["status"] == "completed"
    assert [i["content"][0]["text"] for i in final["output"]] == [long_text]


async def test_a_retried_create_is_the_same_response_or_at_least_the_same_chat(
    stack: Stack,
) -> None:
    """The same Idempotency-Key gets the first response; if the first call died before
    writing the response's row (deleted here to stand for it), the retry still gets the
    chat and message that call stored, not a second chat."""
    model = _model(stack, _text("once"))
    headers = {"Idempotency-Key": "create-1"}
    async with _client(stack) as client:
        first = await client.responses.create(model=model, input="hi", extra_headers=headers)
        again = await client.responses.create(model=model, input="hi", extra_headers=headers)
        assert again.id == first.id
        await stack.pool.execute("DELETE FROM responses WHERE id = $1", first.id)
        retried = await client.responses.create(model=model, input="hi", extra_headers=headers)
        assert retried.id != first.id
        assert retried.conversation.id == first.conversation.id  # type: ignore[union-attr]
        chats = await stack.pool.fetchval("SELECT count(*) FROM chats WHERE owner = 'alice'")
    messages = await stack.messages(first.conversation.id)  # type: ignore[union-attr]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert chats == 1
    assert len(stack.fake.requests(model.split("/", 1)[1])) == 1


async def _kept_then_due(stack: Stack, chat_id: str) -> None:
    """The hidden chat is kept `unstored_keep()` from about now; then make it due."""
    left = None
    for _ in range(50):  # the request's end sets it in the background
        left = await stack.pool.fetchval(
            "SELECT discard_at - now() FROM chats WHERE id = $1::uuid", chat_id
        )
        if left is not None and left <= unstored_keep():
            break
        await asyncio.sleep(0.1)
    assert left is not None and unstored_keep() - timedelta(minutes=1) < left <= unstored_keep()
    await stack.pool.execute("UPDATE chats SET discard_at = now() WHERE id = $1::uuid", chat_id)


async def test_a_store_false_response_over_http_is_answered_then_gone(stack: Stack) -> None:
    """Over HTTP nothing can continue a `store: false` response by id: its chat is hidden
    at once, kept for `CHATD_UNSTORED_KEEP_SECONDS` after the response (for its client's
    next request with the whole conversation), then deleted by the reconciler's pass."""
    model = _model(stack, _text("said once"))
    async with _client(stack) as client:
        response = await client.responses.create(model=model, input="hi", store=False)
        assert response.status == "completed" and response.output_text == "said once"
        assert response.store is False
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(response.id)
        with pytest.raises(openai.BadRequestError) as missing:
            await client.responses.create(
                model=model, input="again", previous_response_id=response.id
            )
        assert missing.value.code == "previous_response_not_found"
        with pytest.raises(openai.BadRequestError) as background:
            await client.responses.create(model=model, input="hi", store=False, background=True)
        assert "store" in background.value.message
    chat_id = response.conversation.id  # type: ignore[union-attr]
    assert (await stack.http.get(f"/chats/{chat_id}")).status_code == 404
    await _kept_then_due(stack, chat_id)
    deleted: list[str] = []
    for _ in range(50):
        deleted += map(str, await ChatStore(stack.pool).delete_discarded(100))
        if chat_id in deleted:
            break
        await asyncio.sleep(0.1)
    assert chat_id in deleted
    assert (
        await stack.pool.fetchval("SELECT count(*) FROM responses WHERE id = $1", response.id) == 0
    )
