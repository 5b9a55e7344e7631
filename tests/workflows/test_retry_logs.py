"""An expected provider error logs one line naming its kind and what happens next (the retry
delay, or that the turn ends with it), with no traceback."""

from __future__ import annotations

import logging

import pytest
from turn_fakes import Turn, model_error


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "model step 0 failed" in r.getMessage()]


async def test_each_retry_logs_one_line_with_its_kind_and_delay(
    turn: Turn, caplog: pytest.LogCaptureFixture
) -> None:
    turn.fakes.stream_script = [
        model_error("overloaded"),
        model_error("rate_limit", retry_after_ms=7_500),
    ]
    with caplog.at_level(logging.INFO):
        await turn.run()
    lines = _lines(caplog)
    assert [r.getMessage().split(" ({")[0] for r in lines] == [
        "model step 0 failed: overloaded (status 529), retrying in 1.0s, attempt 1: overloaded"
        " error",
        "model step 0 failed: rate_limit, retrying in 7.5s, attempt 2: rate_limit error",
    ]
    assert all(r.levelno == logging.WARNING and not r.exc_info for r in lines)


async def test_an_error_not_retried_logs_one_line_that_the_turn_ends(
    turn: Turn, caplog: pytest.LogCaptureFixture
) -> None:
    turn.fakes.stream_script = [model_error("auth", retryable=False)]
    with caplog.at_level(logging.INFO):
        await turn.run()
    (line,) = _lines(caplog)
    assert line.getMessage().startswith("model step 0 failed: auth, not retried: the turn ends")
    assert not line.exc_info
