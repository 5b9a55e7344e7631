"""OpenTelemetry: traces and metrics, exported with OTLP when configured, else nowhere.

Traces run from the HTTP request (FastAPI instrumentation) through the Temporal client,
workflow and activities (the SDK's TracingInterceptor) to the provider call (a span of
ours: the SDKs' HTTP client is not instrumented).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, UpDownCounter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

__all__ = ["METRICS", "TRACER", "Metrics", "recording", "setup_telemetry"]

log = logging.getLogger("chatd.telemetry")
TRACER = trace.get_tracer("chatd")


@dataclass(frozen=True)
class Metrics:
    """The instruments chatd records."""

    steps: Counter
    time_to_first_token: Histogram
    tokens: Counter
    cost_usd: Counter
    tool_calls: Counter
    tool_errors: Counter
    retries: Counter
    compactions: Counter
    active_turns: UpDownCounter
    stuck_turns: Counter
    sends_queued: Counter

    @classmethod
    def create(cls) -> Metrics:
        """Instruments on the global meter provider (no-op until one is configured)."""
        meter = metrics.get_meter("chatd")
        return cls(
            steps=meter.create_counter("chatd.steps", description="model steps streamed"),
            time_to_first_token=meter.create_histogram(
                "chatd.time_to_first_token", unit="ms", description="request to first delta"
            ),
            tokens=meter.create_counter("chatd.tokens", description="tokens by kind"),
            cost_usd=meter.create_counter(
                "chatd.cost_usd",
                unit="USD",
                description="what model steps cost at the price table, by model and owner",
            ),
            tool_calls=meter.create_counter("chatd.tool_calls", description="tool calls by tool"),
            tool_errors=meter.create_counter(
                "chatd.tool_errors", description="tool calls that produced an error result"
            ),
            retries=meter.create_counter("chatd.retries", description="model retries by kind"),
            compactions=meter.create_counter("chatd.compactions", description="compactions"),
            active_turns=meter.create_up_down_counter(
                "chatd.active_turns",
                description=(
                    "turns begun and not yet finished; sum it over gateways and workers "
                    "(the one that begins a turn counts it, a worker counts its end)"
                ),
            ),
            stuck_turns=meter.create_counter(
                "chatd.reconciler.stuck_turns",
                description=(
                    "turns the reconciler ended because no workflow ran them, by the "
                    "workflow's status (a bug to investigate: a turn should always end itself)"
                ),
            ),
            sends_queued=meter.create_counter(
                "chatd.sends_queued",
                description=(
                    "sends no worker took in time, queued with a signal-with-start instead "
                    "(a steady rate means too few workers)"
                ),
            ),
        )


METRICS = Metrics.create()


def recording() -> bool:
    """Whether an OpenTelemetry SDK provider is installed for traces or metrics. Without one
    every span and instrument is a no-op, and work done only to feed them can be skipped."""
    return isinstance(trace.get_tracer_provider(), TracerProvider) or isinstance(
        metrics.get_meter_provider(), MeterProvider
    )


def setup_telemetry(service_name: str) -> None:
    """Export traces and metrics with OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    log.info("exporting traces and metrics to %s", os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
