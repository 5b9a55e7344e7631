"""Continuing a conversation a client keeps itself: a request with no `previous_response_id`
whose input begins with a conversation this owner already has (the input and output of a
stored response, and all before it) continues that response's chat, and only the items
after that prefix are new. A client resending its growing conversation (LangChain,
pydantic-ai, LlamaIndex do by default) then writes only what it added.

Conversations are matched by a rolling digest over their items in a canonical form: the
role and text of each user and assistant message, each function call's id, name and
arguments, each result's id and text. Reasoning, system text and provider tool items don't
count, so a client that drops or keeps them still matches. A response's output is checked
item by item against the input that follows its prefix before anything is continued.

A `store: false` request continues only a `store: false` response's chat, kept hidden for a
while after it ended (`CHATD_UNSTORED_KEEP_SECONDS`): Codex sends its whole session on every
call, and each call then writes only its new items.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from api.errors import ApiError
from api.open_responses.continuation import unstored_deadline
from api.open_responses.inputs import conversation_item, system_texts
from api.open_responses.requests import (
    CreateResponse,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    LocalShellCallItem,
    LocalShellCallOutputItem,
    MessageItem,
)
from api.open_responses.views import current_resource
from api.state import GatewayState
from chatd.store.chats import ChatRecord
from chatd.store.conversation_prefixes import ConversationPrefixes, KnownPrefix
from chatd.store.responses import ResponseRecord

__all__ = [
    "Conversation",
    "PrefixMatch",
    "conversation_of",
    "matched_prefix",
    "remember",
    "retried_response",
]


@dataclass(frozen=True)
class Conversation:
    """A request's input as the digests of its prefixes: `digests[k]` covers its first k + 1
    items that count, the one `at[k]` is the index of."""

    digests: list[bytes]
    at: list[int]


@dataclass(frozen=True)
class PrefixMatch:
    """The chat whose conversation the input begins with, the response it ended at, and the
    input items after it."""

    chat: ChatRecord
    response: ResponseRecord
    rest: list[dict[str, Any]]
    system: list[str]
    """The system and developer text of the input before `rest` (it holds for the turn)."""


def conversation_of(body: CreateResponse) -> Conversation:
    """The digests of the input's prefixes, when the input is the client's whole
    conversation (none otherwise: nothing is matched or remembered). Items that can't be
    read don't count: the request's own checks refuse them."""
    if not _whole_conversation(body):
        return Conversation([], [])
    raw = body.input
    entries = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    digest = hashlib.sha256(b"chatd conversation").digest()
    digests: list[bytes] = []
    at: list[int] = []
    for index, entry in enumerate(entries):
        token = _token(entry)
        if token is not None:
            digest = hashlib.sha256(digest + token.encode()).digest()
            digests.append(digest)
            at.append(index)
    return Conversation(digests, at)


async def matched_prefix(
    state: GatewayState, owner: str, body: CreateResponse, conversation: Conversation
) -> PrefixMatch | None:
    """The stored conversation this request's input continues, if any: its longest known
    prefix (of a few candidates, where conversations share one) whose response is the
    newest of an idle chat and whose output the input repeats after it."""
    if len(conversation.digests) < 2:
        return None
    candidates = await ConversationPrefixes(state.pool).longest(
        owner, conversation.digests[:-1], _CANDIDATES
    )
    for known in candidates:
        matched = await _continues(state, owner, body, conversation, known)
        if matched is not None:
            return matched
    return None


_CANDIDATES = 4
"""How many known conversations sharing the longest prefixes are checked."""

RETRY_WINDOW = timedelta(minutes=2)
"""How long after a response ended the same request of the same session is its retry."""


async def retried_response(
    state: GatewayState, owner: str, body: CreateResponse, conversation: Conversation
) -> ResponseRecord | None:
    """The response this request repeats, if it is a client's retry: the same session
    (`prompt_cache_key`, as Codex sends), model and whole conversation (a retry's
    `client_metadata` differs), the newest of its chat, still running or just ended.
    Codex retries a stream the gateway dropped (it was restarted) this way; it gets that
    turn's response again, streamed from its start, instead of a second model call for
    the same step."""
    if not body.prompt_cache_key or not conversation.digests:
        return None
    known = await ConversationPrefixes(state.pool).longest(
        owner, conversation.digests[-1:], _CANDIDATES
    )
    for candidate in known:
        if candidate.items != len(conversation.digests):
            continue
        response = await state.responses.reread(candidate.response_id)
        if response is None or response.owner != owner:
            continue
        asked = response.request
        same = (asked.get("prompt_cache_key"), asked.get("model")) == (
            body.prompt_cache_key,
            body.model,
        )
        if not same:
            continue
        recent = response.ended_at is None or (datetime.now(UTC) - response.ended_at < RETRY_WINDOW)
        if recent and await state.responses.latest_in_chat(response.chat_id) == response.id:
            return response
    return None


def _whole_conversation(body: CreateResponse) -> bool:
    """Whether the input is the client's whole conversation: nothing else continues it."""
    return not (body.previous_response_id or body.conversation)


async def _continues(
    state: GatewayState,
    owner: str,
    body: CreateResponse,
    conversation: Conversation,
    known: KnownPrefix,
) -> PrefixMatch | None:
    """The match, if the input goes on from `known` with its response's whole output."""
    assert isinstance(body.input, list)
    response = await state.responses.reread(known.response_id)
    chat = await state.chats.get(known.chat_id, owner)
    if response is None or response.ended_at is None or chat is None:
        return None
    if response.owner != owner or response.store != body.store:
        return None
    if await state.responses.latest_in_chat(chat.id) != response.id:
        return None  # the chat went on since: this is a fork, made as a new chat
    if body.store and chat.discard_at is not None:
        return None  # a deleted conversation
    output = [_token(item) for item in (await current_resource(state, response))["output"]]
    repeated = [token for token in output if token is not None]
    following = _tokens_after(body.input, conversation.at[known.items - 1] + 1)
    if following[: len(repeated)] != repeated or len(following) <= len(repeated):
        return None
    if not body.store and not await state.chats.keep_unstored(chat.id, unstored_deadline()):
        return None  # its deletion is due: the conversation goes to a new chat
    rest_from = conversation.at[known.items + len(repeated)]
    before = body.input[:rest_from]
    return PrefixMatch(chat, response, body.input[rest_from:], system_texts(before))


async def remember(
    state: GatewayState, owner: str, record: ResponseRecord, conversation: Conversation
) -> None:
    """Note that this response's conversation, through its input, is in its chat: the
    whole conversation it was given, or the chain it continues followed by its input."""
    end = (
        (conversation.digests[-1], len(conversation.digests))
        if conversation.digests
        else await _chain_end(state, record)
    )
    if end is None:
        return
    digest, items = end
    known = KnownPrefix(record.chat_id, record.id, items)
    await ConversationPrefixes(state.pool).remember(owner, digest, known)


async def _chain_end(state: GatewayState, record: ResponseRecord) -> tuple[bytes, int] | None:
    """For a `store: false` response chained by `previous_response_id`: the digest of its
    whole conversation, from the previous response's, that response's output and this
    input. So a client that chained on a socket, then resends its session on a new one
    (Codex after a reconnect), still finds its chat. None if the previous one's isn't
    known, and for a stored chain: its client continues it by id, and a stateless client
    with the same words must not take its chat's tip (the chain would fork at each call)."""
    if record.previous_response_id is None or record.store:
        return None
    prefixes = ConversationPrefixes(state.pool)
    start = await prefixes.of_response(record.previous_response_id)
    previous = await state.responses.reread(record.previous_response_id)
    if start is None or previous is None:
        return None
    digest, items = start
    output = (await current_resource(state, previous))["output"]
    for token in (_token(entry) for entry in [*output, *record.input_items]):
        if token is not None:
            digest = hashlib.sha256(digest + token.encode()).digest()
            items += 1
    return digest, items


def _tokens_after(entries: list[dict[str, Any]], start: int) -> list[str]:
    return [t for t in (_token(e) for e in entries[start:]) if t is not None]


def _token(entry: Any) -> str | None:
    """An item's canonical form, or None for one that doesn't count."""
    try:
        item = conversation_item(0, entry)
    except ApiError:
        return None
    return _canonical(item)


def _canonical(item: InputItem) -> str | None:
    if isinstance(item, MessageItem) and item.role in ("user", "assistant"):
        if isinstance(item.content, str):
            text = item.content
        else:
            text = "".join(
                getattr(part, "text", None) or json.dumps(part.model_dump(), sort_keys=True)
                for part in item.content
            )
        return f"{item.role}\x1f{text}"
    if isinstance(item, FunctionCallItem):
        return f"call\x1f{item.call_id}\x1f{item.name}\x1f{item.arguments}"
    if isinstance(item, CustomToolCallItem):
        return f"call\x1f{item.call_id}\x1f{item.name}\x1f{item.input}"
    if isinstance(item, LocalShellCallItem):
        return f"call\x1f{item.call_id}\x1f{item.action.model_dump_json()}"
    if isinstance(item, FunctionCallOutputItem):
        return f"result\x1f{item.call_id}\x1f{item.text()}"
    if isinstance(item, CustomToolCallOutputItem):
        output = (
            item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
        )
        return f"result\x1f{item.call_id}\x1f{output}"
    if isinstance(item, LocalShellCallOutputItem):
        return f"result\x1f{item.id}\x1f{item.output}"
    return None
