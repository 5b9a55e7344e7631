"""Tool approval policy (chatd.tool_policy): the most specific rule wins, the cautious one at
equal specificity, and a policy is validated key by key."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chatd.tool_policy import (
    MAX_RULES,
    PolicyDecision,
    decide,
    match,
    operator_policy_from_env,
    validate_tool_policy,
)

DECISIONS: tuple[PolicyDecision, ...] = get_args(PolicyDecision)
SEVERITY: dict[PolicyDecision, int] = {"auto": 0, "ask": 1, "deny": 2}
QUICK = settings(max_examples=300, derandomize=True, database=None)

names = st.from_regex(r"[a-zA-Z0-9_-]{2,30}", fullmatch=True)
decisions = st.sampled_from(DECISIONS)
keys = st.from_regex(r"[A-Za-z0-9_.*?-]{1,128}", fullmatch=True)
_ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.*?-")


def _has_another_character(key: str) -> bool:
    return any(c not in _ALLOWED for c in key)


@st.composite
def name_and_glob(draw: st.DrawFn) -> tuple[str, str]:
    """A tool name and a glob that matches it: a prefix or suffix of it with `*`, some of its
    characters turned into `?`."""
    name = draw(names)
    cut = draw(st.integers(0, len(name)))
    glob = name[:cut] + "*" if draw(st.booleans()) else "*" + name[cut:]
    wild = draw(st.sets(st.integers(0, len(glob) - 1)))
    return name, "".join("?" if i in wild and c != "*" else c for i, c in enumerate(glob))


@QUICK
@given(name_and_glob(), decisions, decisions)
def test_an_exact_name_beats_any_glob(
    pair: tuple[str, str], exact: PolicyDecision, glob: PolicyDecision
) -> None:
    name, pattern = pair
    assume(pattern != name)
    assert match({pattern: glob, name: exact}, name) == exact


@QUICK
@given(names, st.data(), decisions, decisions)
def test_a_longer_matching_glob_beats_a_shorter_one(
    name: str, data: st.DataObject, longer: PolicyDecision, shorter: PolicyDecision
) -> None:
    cut = data.draw(st.integers(1, len(name)))
    short_cut = data.draw(st.integers(0, cut - 1))
    policy = {name[:cut] + "*": longer, name[:short_cut] + "*": shorter}
    assert match(policy, name) == longer
    flipped = {"*" + name[-cut:]: longer, "*" + name[len(name) - short_cut :]: shorter}
    assert match(flipped, name) == longer


@QUICK
@given(names, st.data(), decisions, decisions)
def test_at_equal_length_deny_beats_ask_beats_auto(
    name: str, data: st.DataObject, first: PolicyDecision, second: PolicyDecision
) -> None:
    cut = data.draw(st.integers(1, len(name) - 1))
    prefix, suffix = name[:cut] + "*", "*" + name[len(name) - cut :]
    assume(prefix != suffix)
    expected = max(first, second, key=SEVERITY.__getitem__)
    assert match({prefix: first, suffix: second}, name) == expected
    assert match({suffix: first, prefix: second}, name) == expected


@QUICK
@given(
    st.dictionaries(st.from_regex(r"[abc*?]*[abc][abc*?]*", fullmatch=True), decisions),
    st.from_regex(r"[xyz]{1,10}", fullmatch=True),
)
def test_a_tool_no_rule_matches_gets_none(policy: dict[str, PolicyDecision], name: str) -> None:
    assert match(policy, name) is None


def test_a_key_without_glob_characters_matches_only_that_name() -> None:
    assert match({"read": "deny"}, "read_file") is None
    assert match({"read*": "deny", "read_file": "auto"}, "read_file") == "auto"
    assert match({"read_?ile": "ask"}, "read_file") == "ask"
    assert match({"*": "ask", "github__*": "deny"}, "github__delete_repo") == "deny"


def test_the_chats_rule_then_the_operators_then_the_tools_default() -> None:
    operator: dict[str, PolicyDecision] = {"github__*": "ask", "execute": "deny"}
    chat: dict[str, PolicyDecision] = {"execute": "auto"}
    assert decide("execute", chat, operator, "ask") == "auto"
    assert decide("github__list", chat, operator, "auto") == "ask"
    assert decide("read_file", chat, operator, "auto") == "auto"
    assert decide("fs__rm", {}, {}, "ask") == "ask"


@QUICK
@given(st.dictionaries(keys, decisions, max_size=MAX_RULES))
def test_a_valid_policy_is_accepted_as_it_is(policy: dict[str, PolicyDecision]) -> None:
    assert validate_tool_policy(policy) == policy


@QUICK
@given(
    st.dictionaries(keys, decisions, max_size=5),
    st.text(min_size=1, max_size=20).filter(_has_another_character),
)
def test_a_key_with_another_character_is_refused_by_name(
    policy: dict[str, PolicyDecision], bad: str
) -> None:
    with pytest.raises(ValueError, match="tool policy") as refused:
        validate_tool_policy({**policy, bad: "auto"})
    assert repr(bad) in str(refused.value)


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"": "auto"}, "''"),
        ({"a" * 129: "auto"}, "'" + "a" * 129 + "'"),
        ({"tool[ab]": "deny"}, "'tool[ab]'"),
        ({"read_file": "allow"}, "read_file: Input should be 'auto', 'ask' or 'deny'"),
        ({"read_file": None}, "read_file"),
        ({f"t{i}": "auto" for i in range(MAX_RULES + 1)}, f"at most {MAX_RULES} entries"),
        (["read_file"], "valid dictionary"),
    ],
)
def test_a_bad_policy_is_refused_saying_what_is_wrong(policy: object, says: str) -> None:
    with pytest.raises(ValueError, match="invalid tool policy") as refused:
        validate_tool_policy(policy)
    assert says in str(refused.value)


def test_a_key_of_128_characters_is_accepted() -> None:
    assert validate_tool_policy({"a" * 128: "ask"}) == {"a" * 128: "ask"}


def test_the_operator_policy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATD_TOOL_POLICY", raising=False)
    assert operator_policy_from_env() == {}
    monkeypatch.setenv("CHATD_TOOL_POLICY", '{"github__*": "ask", "execute": "deny"}')
    assert operator_policy_from_env() == {"github__*": "ask", "execute": "deny"}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{github: ask}", "CHATD_TOOL_POLICY is not valid JSON"),
        ('["execute"]', "CHATD_TOOL_POLICY must be a JSON object"),
        ('{"exec ute": "deny"}', "CHATD_TOOL_POLICY: invalid tool policy: tool policy key 'exec"),
        ('{"execute": "never"}', "CHATD_TOOL_POLICY: invalid tool policy: execute"),
    ],
)
def test_a_malformed_operator_policy_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv("CHATD_TOOL_POLICY", value)
    with pytest.raises(ValueError) as refused:
        operator_policy_from_env()
    assert says in str(refused.value)
