"""Tool approval policy: which calls run by themselves (`auto`), wait for a person (`ask`) or
are refused (`deny`).

Pure and without I/O, so workflow code can import it: a policy is a small dict of tool
names or globs, and resolving one is deterministic.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import AfterValidator, TypeAdapter, ValidationError, WithJsonSchema

__all__ = [
    "MAX_RULES",
    "OPERATOR_POLICY_ENV",
    "PolicyDecision",
    "ToolPolicy",
    "decide",
    "match",
    "operator_policy_from_env",
    "validate_tool_policy",
]

PolicyDecision = Literal["auto", "ask", "deny"]

MAX_RULES = 100
"""Entries a policy may hold: each call's resolution reads them all."""
MAX_KEY_LENGTH = 128
OPERATOR_POLICY_ENV = "CHATD_TOOL_POLICY"

# `[` is left out on purpose: fnmatch would read it as a character class, and a key says
# either a name or a `*`/`?` glob, nothing more.
_KEY = re.compile(rf"[A-Za-z0-9_.*?-]{{1,{MAX_KEY_LENGTH}}}")
_SEVERITY: dict[PolicyDecision, int] = {"auto": 0, "ask": 1, "deny": 2}


def _check_rules(policy: dict[str, PolicyDecision]) -> dict[str, PolicyDecision]:
    """The keys and size rules that the value type alone can't say."""
    if len(policy) > MAX_RULES:
        raise ValueError(f"a tool policy holds at most {MAX_RULES} entries, not {len(policy)}")
    for key in policy:
        if not _KEY.fullmatch(key):
            raise ValueError(
                f"tool policy key {key!r} must be 1 to {MAX_KEY_LENGTH} characters of"
                " letters, digits, '_', '.', '-' and the globs '*' and '?'"
            )
    return policy


ToolPolicy = Annotated[
    dict[str, PolicyDecision],
    AfterValidator(_check_rules),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_RULES,
            "propertyNames": {"pattern": f"^{_KEY.pattern}$"},
            "additionalProperties": {"enum": ["auto", "ask", "deny"]},
        }
    ),
]
"""A validated policy, `{"<tool name or glob>": "auto" | "ask" | "deny"}`: use it as the type
of a request field, or `validate_tool_policy` elsewhere."""

_policy_adapter: TypeAdapter[dict[str, PolicyDecision]] = TypeAdapter(ToolPolicy)


def validate_tool_policy(data: object) -> dict[str, PolicyDecision]:
    """`data` as a policy, or ValueError saying which key (or value) is wrong."""
    try:
        return _policy_adapter.validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        what = str(first["msg"]).removeprefix("Value error, ")
        raise ValueError(f"invalid tool policy: {where + ': ' if where else ''}{what}") from None


def match(policy: Mapping[str, PolicyDecision], tool_name: str) -> PolicyDecision | None:
    """The decision of the policy's most specific rule for the tool, or None if none matches.

    An exact key beats any glob, a longer glob (by its length) a shorter one, and at equal
    specificity `deny` beats `ask` beats `auto`: when two rules are as specific, the
    cautious one holds.
    """
    best: tuple[int, int, int] | None = None
    found: PolicyDecision | None = None
    for key, decision in policy.items():
        if key == tool_name:
            specificity = (1, len(key))
        elif fnmatchcase(tool_name, key):  # a key without `*` or `?` matches only itself
            specificity = (0, len(key))
        else:
            continue
        rank = (*specificity, _SEVERITY[decision])
        if best is None or rank > best:
            best, found = rank, decision
    return found


def decide(
    tool_name: str,
    chat_policy: Mapping[str, PolicyDecision],
    operator_policy: Mapping[str, PolicyDecision],
    default: PolicyDecision,
) -> PolicyDecision:
    """The effective decision for a call: the chat's policy if a rule of it matches, else the
    operator's, else the tool's own `default`."""
    return match(chat_policy, tool_name) or match(operator_policy, tool_name) or default


def operator_policy_from_env() -> dict[str, PolicyDecision]:
    """The operator's policy from `CHATD_TOOL_POLICY` (a JSON object; unset or empty: none).

    Read when the worker starts: a malformed value is a ValueError naming the variable, so
    the worker refuses to start rather than run every tool under the wrong policy.
    """
    raw = os.environ.get(OPERATOR_POLICY_ENV, "").strip()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{OPERATOR_POLICY_ENV} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{OPERATOR_POLICY_ENV} must be a JSON object of tool name to decision")
    try:
        return validate_tool_policy(data)
    except ValueError as err:
        raise ValueError(f"{OPERATOR_POLICY_ENV}: {err}") from None
