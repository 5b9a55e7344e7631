"""Property-based testing of the served OpenAPI document with schemathesis (bounded,
derandomized: the same requests every CI run, so a failure reproduces).

Every check schemathesis has runs: no 5xx; status codes, content types, headers and bodies
as documented; schema-valid requests accepted and invalid ones refused; a 405 with `Allow`;
no answer without a valid key; a created resource readable at once, a deleted one gone.
First each operation alone (the document's examples, boundary values and undocumented
methods, then random data), then statefully: sequences that follow the document's links
(a created chat's id into its messages, a sent message's id into the queue...).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, get_args

import pytest
import schemathesis
from harness import Stack, StackFactory
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.config._auth import OpenAPIAuthConfig
from schemathesis.engine import events
from schemathesis.specs.openapi.schemas import OpenApiSchema

from chatd.models import ProviderName
from chatd.prices import Prices, TokenPrice
from chatd.store.quotas import LimitOverrides, QuotaStore

pytestmark = pytest.mark.usefixtures("no_pause_after_a_bad_key")
"""The checks probe every operation with a wrong key."""

MAX_EXAMPLES = 6
"""Random cases per operation and kind (valid or invalid data)."""
SCENARIOS = 24
STEPS_PER_SCENARIO = 8
STREAM = "/api/v1/chats/{chat_id}/stream"
WATCH = "/api/v1/stream"
USAGE = "/api/v1/usage"
RESPONSES = "/v1/responses"
COMPACT = "/v1/responses/compact"
_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "derandomize": True,
    "suppress_health_check": list(HealthCheck),
}


def _schema(root: str, key: str) -> OpenApiSchema:
    schema = schemathesis.openapi.from_url(f"{root}/openapi.json")
    schema.config.update(base_url=root, request_timeout=30)
    # Through the document's security scheme: the auth checks then know the key is valid,
    # and probe without it and with a wrong one.
    schema.config.auth.openapi = OpenAPIAuthConfig(schemes={"HTTPBearer": {"bearer": key}})
    schema.config.generation.update(
        max_examples=MAX_EXAMPLES,
        deterministic=True,
        # Postgres can't store U+0000, so a string holding one is a 400 (the document says so).
        allow_x00=False,
    )
    # Only the document's links: links inferred from names alone would send a sent
    # message's id (a UUID) as the integer id of a transcript message.
    schema.config.phases.stateful.inference.algorithms = []
    checks = schema.config.checks
    checks.update(included_check_names=["all"])
    # A key reused with another body is 422 `idempotency_key_reused`, as documented; the
    # generated keys are few and short, so valid requests do reuse them.
    checks.positive_data_acceptance.expected_statuses = [
        *checks.positive_data_acceptance.expected_statuses,
        "422",
    ]
    # Invalid data over the body limit (a string far over its maxLength) is refused with
    # the documented 413 before it is parsed.
    checks.negative_data_rejection.expected_statuses = [
        *checks.negative_data_rejection.expected_statuses,
        "413",
    ]
    return schema


def _each_operation(root: str, key: str) -> tuple[set[str], list[str]]:
    """Run the examples, coverage and fuzzing phases; the operations tested and every
    failure found."""
    # Phases after the first reuse the ids earlier answers held, and a request for an
    # existing chat's event stream would wait for the request timeout: the stream runs alone.
    schema = _schema(root, key).exclude(path=[STREAM, WATCH, USAGE])
    schema = schema.exclude(path=[RESPONSES, COMPACT], method="POST")  # `_responses` runs them
    schema.config.phases.stateful.enabled = False  # the state machine below runs it
    # No crash cache on disk: a run replays only its own derandomized cases.
    schema.config.cache.enabled = False
    tested: set[str] = set()
    failures: list[str] = []
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            tested.add(event.recorder.label)
            failures += _failures(event.recorder)
        elif isinstance(event, events.NonFatalError):
            failures.append(f"{event.label}: {event.value!r}")
        elif isinstance(event, events.FatalError):
            failures.append(f"fatal: {event.exception!r}")
    return tested, failures


def _failures(recorder: schemathesis.engine.recorder.ScenarioRecorder) -> list[str]:
    return [
        f"{recorder.label}: {check.failure_info.failure.title}\n"
        f"{check.failure_info.failure.message}\n{check.failure_info.code_sample}"
        for checks in recorder.checks.values()
        for check in checks
        if check.failure_info is not None
    ]


def _stream(root: str, key: str) -> list[str]:
    """Random valid and invalid requests for the event stream of chats that don't exist
    (an existing chat's stream never ends): its errors, auth and parameters."""
    return _generated(_schema(root, key)[STREAM]["GET"], MAX_EXAMPLES)


def _responses(root: str, key: str) -> list[str]:
    """Creating Open Responses and compactions: a schema-valid request may still be a 400
    when it names a model, a previous response or a conversation that doesn't exist, or
    answers calls that aren't pending (OpenAI answers these with a 400 too); every other
    check holds."""
    schema = _accepting_400(root, key)
    return _generated(schema[RESPONSES]["POST"], MAX_EXAMPLES * 3) + _generated(
        schema[COMPACT]["POST"], MAX_EXAMPLES
    )


def _watch(root: str, key: str) -> list[str]:
    """The watch stream with the key's stream limit at 0 (a valid request is a 429, not a
    stream that never ends); a cursor past the owner's last event is a 400 however valid."""
    return _generated(_accepting_400(root, key)[WATCH]["GET"], MAX_EXAMPLES)


def _usage(root: str, key: str) -> list[str]:
    """Usage reports: a schema-valid period can still be a 400 (`from` after `to`, or over
    366 days)."""
    return _generated(_accepting_400(root, key)[USAGE]["GET"], MAX_EXAMPLES)


def _accepting_400(root: str, key: str) -> OpenApiSchema:
    """The document, its checks taking a 400 for a schema-valid request."""
    schema = _schema(root, key)
    checks = schema.config.checks
    checks.positive_data_acceptance.expected_statuses = [
        *checks.positive_data_acceptance.expected_statuses,
        "400",
    ]
    return schema


def _generated(operation: Any, max_examples: int) -> list[str]:
    """Random valid, then invalid, requests to one operation; each mode's failures."""
    failures: list[str] = []
    for mode in GenerationMode:

        @settings(max_examples=max_examples, phases=[Phase.generate], **_SETTINGS)
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate()

        try:
            check()
        except (Exception, BaseExceptionGroup) as err:  # report both modes' failures
            failures.append(f"{mode.value}: {err}")
    return failures


async def test_the_watch_stream_keeps_its_documented_contract(stack: Stack) -> None:
    await QuotaStore(stack.pool).set_limits("alice", LimitOverrides(streams=0))
    root = stack.base_url.removesuffix("/api/v1")
    failures = await asyncio.to_thread(_watch, root, stack.key)
    assert not failures, "\n\n".join(failures)


async def test_usage_reports_keep_their_documented_contract(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    failures = await asyncio.to_thread(_usage, root, stack.key)
    assert not failures, "\n\n".join(failures)


def _linked_sequences(root: str, key: str) -> None:
    # An event stream never ends, so a linked call to it would hang the scenario.
    machine = _schema(root, key).exclude(path=[STREAM, WATCH]).as_state_machine()
    machine.run(
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS_PER_SCENARIO,
            phases=[Phase.generate],
            **_SETTINGS,
        )
    )


EVERY_MODEL_PRICED = Prices(
    {f"{provider}/": TokenPrice(input=1, output=1) for provider in get_args(ProviderName)}
)
"""A budget on a model with no price is refused (a 400 no schema can tell apart): with
every model priced, a generated budget is served."""


@pytest.fixture
async def stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    async with make_stack(prices=EVERY_MODEL_PRICED) as running:
        yield running


@pytest.fixture(autouse=True)
def _turns_give_up_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated model names have no script at the fake provider: their turns retry, then
    fail in seconds instead of the default 30 minutes, so a response the fuzzer waits for
    ends, and no chat is left running."""
    monkeypatch.setenv("CHATD_RETRY_DEADLINE_S", "3")


async def _no_chat_left_running(stack: Stack) -> None:
    for _ in range(600):
        running = await stack.pool.fetchval("SELECT count(*) FROM chats WHERE status = 'running'")
        if running == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{running} chats still running a minute after the fuzzing")


@pytest.mark.slow
async def test_each_operation_keeps_its_documented_contract(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    tested, failures = await asyncio.to_thread(_each_operation, root, stack.key)
    assert "POST /api/v1/chats" in tested and len(tested) >= 15, tested
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
async def test_creating_responses_keeps_its_documented_contract(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    failures = await asyncio.to_thread(_responses, root, stack.key)
    assert not failures, "\n\n".join(failures)
    await _no_chat_left_running(stack)


async def test_the_event_stream_keeps_its_documented_contract(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    failures = await asyncio.to_thread(_stream, root, stack.key)
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
async def test_linked_sequences_keep_the_documented_contract(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    await asyncio.to_thread(_linked_sequences, root, stack.key)
