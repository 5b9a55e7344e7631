"""Conversation items: the items a client adds to a conversation, as transcript messages,
and the transcript's messages as items.

An item's id names where it lives: `<kind>_<message id>_<part index>` (`msg`, `rs`, `fc`,
`fco`, `ws`), the index counting the message's parts as they were first stored, so an id
stays the same when another part of the message is deleted. A user message is one item,
whatever parts it holds (index 0); a model's message is an item per part (its reasoning,
text and calls); a tool message an item per result.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from api.open_responses.conversation_requests import (
    ConversationAssistantMessage,
    ConversationItemInput,
    ConversationReasoning,
    ConversationUserMessage,
    Includable,
)
from api.open_responses.inputs import HistoryMessage
from api.open_responses.requests import FunctionCallItem, FunctionCallOutputItem
from api.open_responses.resource import (
    ReasoningShown,
    function_call_item,
    is_web_search,
    message_item,
    web_search_item,
)
from api.state import GatewayState
from chatd.parts import FilePart, Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from chatd.store.conversations import ConversationStore, ItemMessage, original_indices
from chatd.store.events import Conn

__all__ = [
    "ITEM_ID_PATTERN",
    "Item",
    "append",
    "find",
    "item_position",
    "message_items",
    "page",
    "reasoning_shown",
    "transcript_messages",
]

ITEM_ID_PATTERN = r"^(msg|rs|fc|fco|ws)_[0-9]{1,18}_[0-9]{1,4}$"
_ITEM_ID = re.compile(ITEM_ID_PATTERN)
_PLAIN = ReasoningShown()


async def reasoning_shown(
    state: GatewayState, owner: str, include: list[Includable]
) -> ReasoningShown:
    """Reasoning as a request asks to see it: with `reasoning.encrypted_content`, its
    provider state sealed for the owner (given back as an item or as a response's input,
    it is restored)."""
    if "reasoning.encrypted_content" not in include:
        return _PLAIN
    seal = await state.compaction_seal()
    return ReasoningShown(seal=lambda part: seal.seal(owner, part.model_dump_json(), "reasoning"))


async def append(
    state: GatewayState,
    conn: Conn,
    chat_id: uuid.UUID,
    owner: str,
    items: list[ConversationItemInput],
) -> list[ItemMessage]:
    """Append the items to the owner's chat's transcript within `conn`'s transaction, as
    one batch of no turn; the messages stored."""
    answered = [i.call_id for i in items if isinstance(i, FunctionCallOutputItem)]
    names = await ConversationStore(state.pool).call_names(chat_id, answered, conn)
    messages = transcript_messages(items, names, await _restorer(state, owner))
    batch = f"items:{uuid.uuid4()}"
    saved = [
        await state.transcript.save(
            chat_id,
            turn_id=batch,
            step_key=str(index),
            role=message.role,
            parts=message.parts,
            conn=conn,
        )
        for index, message in enumerate(messages)
    ]
    return [ItemMessage(id=m.id, role=m.role, parts=m.parts, removed=[]) for m in saved]


async def _restorer(state: GatewayState, owner: str) -> Callable[[str], ReasoningPart | None]:
    """What opens a reasoning item's `encrypted_content`: the provider state this
    deployment sealed for the owner, or None."""
    seal = await state.compaction_seal()

    def restore(sealed: str) -> ReasoningPart | None:
        try:
            return ReasoningPart.model_validate_json(seal.open(owner, sealed, "reasoning"))
        except ValueError:
            return None

    return restore


async def page(
    store: ConversationStore,
    chat_id: uuid.UUID,
    after: str | None,
    limit: int,
    descending: bool,
    shown: ReasoningShown,
) -> list[Item]:
    """Up to `limit + 1` items past the item `after` (an item id, deleted or not: it marks a
    place), oldest or newest first; one more than `limit` tells that more follow."""
    cursor = item_position(after) if after else None
    items: list[Item] = []
    from_id = cursor[0] if cursor else None
    while len(items) <= limit:
        wanted = limit + 1 - len(items)
        batch = await store.messages(chat_id, from_id=from_id, descending=descending, limit=wanted)
        for message in batch:
            rendered = message_items(message, shown)
            if descending:
                rendered.reverse()
            items += [i for i in rendered if _past(i.position, cursor, descending)]
        if len(batch) < wanted:
            break
        from_id = batch[-1].id - 1 if descending else batch[-1].id + 1
    return items


def _past(position: tuple[int, int], cursor: tuple[int, int] | None, descending: bool) -> bool:
    if cursor is None:
        return True
    return position < cursor if descending else position > cursor


async def find(
    store: ConversationStore, chat_id: uuid.UUID, item_id: str, shown: ReasoningShown = _PLAIN
) -> tuple[Item, int] | None:
    """The chat's item of this id and the id of the message it is in, if it has one."""
    position = item_position(item_id)
    message = await store.message(chat_id, position[0]) if position else None
    if position is None or message is None:
        return None
    found = [item for item in message_items(message, shown) if item.body["id"] == item_id]
    return (found[0], position[0]) if found else None


def transcript_messages(
    items: Sequence[ConversationItemInput],
    call_names: Mapping[str, str],
    restore: Callable[[str], ReasoningPart | None],
) -> list[HistoryMessage]:
    """The items as transcript messages: a model's reasoning, text and calls merged into
    its message, a run of results into one tool message, as turns store them. A result's
    tool is named by its call (in `items`, or `call_names`: the conversation's); `restore`
    opens a reasoning item's `encrypted_content` (None if this deployment can't)."""
    names = dict(call_names)
    history: list[HistoryMessage] = []
    for item in items:
        if isinstance(item, ConversationUserMessage):
            history.append(HistoryMessage("user", list(item.user_parts())))
        elif isinstance(item, ConversationAssistantMessage):
            _append(history, "assistant", TextPart(text=item.text()))
        elif isinstance(item, ConversationReasoning):
            sealed = item.encrypted_content
            restored = restore(sealed) if sealed else None
            _append(history, "assistant", restored or ReasoningPart(text=item.text()))
        elif isinstance(item, FunctionCallItem):
            names[item.call_id] = item.name
            call = ToolCallPart(id=item.call_id, name=item.name, arguments=item.arguments)
            _append(history, "assistant", call)
        else:
            # A result whose call the conversation doesn't hold is kept, as OpenAI keeps it:
            # the model refuses the conversation until the client deletes one or the other.
            name = names.get(item.call_id, "")
            result = ToolResultPart(tool_call_id=item.call_id, name=name, output=item.text())
            _append(history, "tool", result)
    return history


def _append(history: list[HistoryMessage], role: Literal["assistant", "tool"], part: Part) -> None:
    if history and history[-1].role == role:
        history[-1].parts.append(part)
    else:
        history.append(HistoryMessage(role, [part]))


@dataclass(frozen=True)
class Item:
    """A conversation item and where it lives in the transcript."""

    position: tuple[int, int]
    """(message id, part index): the items' order."""
    parts: frozenset[int]
    """The message's parts it is made of, by original index."""
    body: dict[str, Any]


def item_position(item_id: str) -> tuple[int, int] | None:
    """Where an item id says its item lives; None if it is no item id of ours."""
    if not _ITEM_ID.match(item_id):
        return None
    _kind, message_id, index = item_id.split("_")
    return int(message_id), int(index)


def message_items(message: ItemMessage, shown: ReasoningShown = _PLAIN) -> list[Item]:
    """The message's items, in order; reasoning `shown` as the request asks."""
    indices = original_indices(len(message.parts), message.removed)
    if message.role == "user":
        return [_user_item(message, indices)]
    searched = {
        part.tool_call_id: (index, part)
        for index, part in zip(indices, message.parts, strict=True)
        if isinstance(part, ToolResultPart) and part.provider_executed
    }
    items: list[Item] = []
    for index, part in zip(indices, message.parts, strict=True):
        ids = partial(_item_id, message.id, index)
        covered = {index}
        body: dict[str, Any] | None
        if isinstance(part, ToolCallPart) and is_web_search(part):
            result_index, result = searched.get(part.id, (None, None))
            body = web_search_item(ids("ws"), part, result)
            covered |= {result_index} if result_index is not None else set()
        else:
            body = _part_item(part, message.role, ids, shown)
        if body is not None:
            items.append(Item((message.id, index), frozenset(covered), body))
    return items


def _user_item(message: ItemMessage, indices: list[int]) -> Item:
    """A user message: one item, whatever parts it holds."""
    first = indices[0] if indices else 0
    content = [_user_content(p) for p in message.parts if isinstance(p, TextPart | FilePart)]
    body = {
        "type": "message",
        "id": _item_id(message.id, first, "msg"),
        "status": "completed",
        "role": "user",
        "content": content,
    }
    return Item((message.id, first), frozenset(indices), body)


def _item_id(message_id: int, index: int, prefix: str) -> str:
    return f"{prefix}_{message_id}_{index}"


def _part_item(
    part: Part, role: str, ids: Callable[[str], str], shown: ReasoningShown
) -> dict[str, Any] | None:
    """The item a model's or a tool message's part is; None for a part that is no item of
    its own (a source; a provider's search result, which its call's item carries)."""
    if role == "tool" and isinstance(part, ToolResultPart) and not part.provider_executed:
        return {
            "type": "function_call_output",
            "id": ids("fco"),
            "call_id": part.tool_call_id,
            "output": _output_text(part),
            "status": "completed",
        }
    if role != "assistant":
        return None
    if isinstance(part, ReasoningPart):
        return shown.item(ids("rs"), part.text, part)
    if isinstance(part, TextPart):
        return message_item(ids("msg"), part.text, "completed")
    if isinstance(part, ToolCallPart) and not part.provider_executed:
        return function_call_item(ids("fc"), part, "completed")
    return None


def _output_text(part: ToolResultPart) -> str:
    """A result's output as the text a `function_call_output` holds (JSON if structured)."""
    if isinstance(part.output, str):
        return part.output
    if part.output is None:
        return f"[{part.media_type} result]" if part.media_type else ""
    return json.dumps(part.output)


def _user_content(part: TextPart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    url = f"data:{part.media_type};base64,{part.data}"
    if part.media_type.startswith("image/"):
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    return {"type": "input_file", "filename": part.name, "file_data": url}
