"""One turn produces one connected trace: HTTP request -> workflow -> activity -> provider."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from harness import Stack, StackFactory
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.names import model_name

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage
from chatd.prices import Prices, TokenPrice
from workflows.constants import workflow_id

_spans = InMemorySpanExporter()
_metrics = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def _in_memory_telemetry() -> Iterator[None]:
    """Install in-memory exporters as the global providers (once per process)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_spans))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[_metrics]))
    yield


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[ReadableSpan]:
    chain = [span]
    while chain[-1].parent is not None and chain[-1].parent.span_id in by_id:
        chain.append(by_id[chain[-1].parent.span_id])
    return chain


async def test_a_turn_is_one_trace_from_the_request_to_the_provider(stack: Stack) -> None:
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name="current_time")]),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    _spans.clear()
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    # `waiting` comes from inside the last step: its activity's span ends after, by the
    # time the run has ended.
    run = stack.temporal.get_workflow_handle(workflow_id(chat["id"]))
    await asyncio.wait_for(run.result(), 60)

    spans = _spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    provider_calls = [s for s in spans if s.name == "provider.stream_step"]
    assert len(provider_calls) == 2
    step_activities = []
    for call in provider_calls:
        chain = [s.name for s in _ancestors(call, by_id)]
        assert chain[0] == "provider.stream_step"
        (run,) = [n for n in chain if n.startswith("RunActivity:")]
        step_activities.append(run.removeprefix("RunActivity:"))
        assert f"StartActivity:{step_activities[-1]}" in chain
        assert "StartUpdateWithStartWorkflow:ChatTurn" in chain
        assert chain[-1].startswith("POST /api/v1/chats/{chat_id}/messages"), chain
    assert step_activities == ["stream_model_step", "stream_model_step"]
    assert len({s.context.trace_id for s in provider_calls}) == 1
    # The step's one call was quick: its activity ran it, and went on to the next step.
    (tool,) = [s for s in spans if s.name == "tool.call"]
    assert tool.attributes is not None and tool.attributes["chatd.tool"] == "current_time"
    assert "RunActivity:stream_model_step" in [s.name for s in _ancestors(tool, by_id)]
    assert tool.context.trace_id == provider_calls[0].context.trace_id

    data = _metrics.get_metrics_data()
    assert data is not None
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"chatd.steps", "chatd.time_to_first_token", "chatd.tokens", "chatd.tool_calls"} <= names


async def test_what_steps_and_summaries_cost_is_counted_by_model_and_owner(
    make_stack: StackFactory,
) -> None:
    name = model_name()
    prices = Prices({f"anthropic/{name}": TokenPrice(input=2, output=10)})
    usage = FakeUsage(input_tokens=1000, output_tokens=100)  # $0.003 at those prices
    async with make_stack(prices=prices) as stack:
        stack.fake.script(name, [FakeResponse(parts=[FakeText(text="done")], usage=usage)])
        chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
        await stack.send(chat["id"], "hi")
        await stack.wait_status(chat["id"], "waiting")

    data = _metrics.get_metrics_data()
    assert data is not None
    points = [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "chatd.cost_usd"
        for point in m.data.data_points
        if point.attributes.get("model") == f"anthropic/{name}"
    ]
    assert [(dict(p.attributes), p.value) for p in points] == [
        ({"model": f"anthropic/{name}", "owner": "alice"}, pytest.approx(0.003))
    ]
