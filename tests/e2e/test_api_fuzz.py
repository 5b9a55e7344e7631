"""Property-based fuzzing of the served OpenAPI document (schemathesis, bounded examples).

No request may produce a 5xx, and every response must match the documented status codes,
content types and schemas.
"""

from __future__ import annotations

import asyncio

import schemathesis
from harness import Stack
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

MAX_EXAMPLES = 20
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _fuzz(root: str, key: str) -> tuple[list[str], list[str]]:
    schema = schemathesis.openapi.from_url(f"{root}/openapi.json")
    tested: list[str] = []
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        tested.append(operation.label)

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,  # the same examples every CI run: a failure reproduces
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(
                base_url=root,
                headers={"Authorization": f"Bearer {key}"},
                checks=CHECKS,
                timeout=30,
            )

        try:
            check()
        except Exception as err:  # collect every operation's failure, then report them all
            failures.append(f"{operation.label}: {err}")
    return tested, failures


async def test_the_api_survives_fuzzing_within_its_documented_contract(stack: Stack) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    tested, failures = await asyncio.to_thread(_fuzz, root, stack.key)
    assert "POST /api/v1/chats" in tested and len(tested) >= 12
    assert failures == []
