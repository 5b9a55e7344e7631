"""Faults injected into a real worker's activities, for the fault-matrix tests.

An activity interceptor that only tests register (`Worker(interceptors=[FaultInjector()])`):
it makes chosen attempts of chosen activities fail in one of four ways before (or instead
of) running the real activity. Postgres, Temporal and the provider stay real.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

__all__ = ["INJECTED", "Fault", "FaultInjector", "FaultKind"]

FaultKind = Literal["fatal", "forever", "unexpected", "hang"]
"""- fatal: a non-retryable error;
- forever: a retryable error, on every attempt;
- unexpected: the real activity runs on a corrupted input, so our own code raises an
  exception nobody classified (a chat id that is no UUID);
- hang: the attempt never answers and never heartbeats."""

INJECTED = "injected fault"
"""In the message of every error this module raises."""


@dataclass
class Fault:
    """Fail the attempts of `activity` whose input `matches`."""

    activity: str
    kind: FaultKind
    matches: Callable[[Any], bool] = lambda _: True
    hits: int = 0


class FaultInjector(Interceptor):
    """Holds the faults in force; tests set and clear them between turns."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)

    def find(self, name: str, arg: Any) -> Fault | None:
        return next((f for f in self.faults if f.activity == name and f.matches(arg)), None)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, injector: FaultInjector) -> None:
        super().__init__(next)
        self._injector = injector

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        fault = self._injector.find(name, input.args[0] if input.args else None)
        if fault is None:
            return await self.next.execute_activity(input)
        fault.hits += 1
        if fault.kind == "fatal":
            raise ApplicationError(f"{INJECTED}: {name} fails for good", non_retryable=True)
        if fault.kind == "forever":
            raise ApplicationError(f"{INJECTED}: {name} keeps failing", type="InjectedFault")
        if fault.kind == "hang":
            await asyncio.sleep(120)  # the attempt times out long before
            raise ApplicationError(f"{INJECTED}: {name} hung")
        corrupted = dataclasses.replace(input, args=[_with_bad_chat_id(input.args[0])])
        return await self.next.execute_activity(corrupted)


def _with_bad_chat_id(payload: Any) -> Any:
    """The activity's input with a chat id our code cannot parse."""
    return payload.model_copy(update={"chat_id": f"{INJECTED}: not a chat id"})
