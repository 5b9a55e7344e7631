"""A response's `input` items as the chat sees them: system text, history to seed the
transcript with, the user message that starts the turn, or the client's function results.

Every refusal is a 400 naming the item (`input[2]`), raised before anything is stored."""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from api.errors import ApiError
from api.open_responses.client_tools import LOCAL_SHELL, model_name
from api.open_responses.requests import (
    ApprovalResponseItem,
    CompactionItem,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputFile,
    InputImage,
    InputItem,
    InputText,
    ItemReference,
    LocalShellCallItem,
    LocalShellCallOutputItem,
    MessageItem,
    OutputEchoItem,
    ReasoningItem,
)
from api.open_responses.sealing import SealedKind
from api.schemas import SendMessage
from api.user_parts import UserFilePart, UserPart, UserTextPart
from chatd.context import SUMMARY_PREAMBLE
from chatd.parts import Part, ReasoningPart, Role, TextPart, ToolCallPart, ToolResultPart

__all__ = [
    "HistoryMessage",
    "ParsedInput",
    "Unseal",
    "conversation_item",
    "parse_input",
    "parse_window",
    "restart_from_copy",
    "result_media",
    "system_texts",
]

Unseal = Callable[[str, SealedKind], str]
"""Opens an item's `encrypted_content` sealed as that kind (ValueError if it can't)."""

_ITEMS: TypeAdapter[InputItem] = TypeAdapter(InputItem)
_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)


@dataclass
class HistoryMessage:
    """An earlier message given inline, stored in the transcript before the turn."""

    role: Role
    parts: list[Part]


@dataclass
class ParsedInput:
    """What `input` asks of the chat."""

    system: list[str] = field(default_factory=list)
    """System and developer messages' text, in order (after `instructions`)."""
    history: list[HistoryMessage] = field(default_factory=list)
    message: SendMessage | None = None
    """The user message that starts the turn; None when `input` answers function calls."""
    outputs: list[FunctionCallOutputItem] = field(default_factory=list)
    """Function results for the calls the chat waits on (a continuation's answer)."""
    approvals: list[ApprovalResponseItem] = field(default_factory=list)
    """Decisions on the calls waiting for approval (a continuation's answer)."""
    items: list[dict[str, Any]] = field(default_factory=list)
    """The items as `input_items` lists them: each with an id and a status."""
    restated: bool = False
    """The answers came after the client's own copy of the conversation (not used while a
    chat waits on them)."""
    copy: list[InputItem] = field(default_factory=list)
    """That copy, for a turn that begins from it when no chat waits (`restart_from_copy`)."""
    results: list[ToolResultPart] = field(default_factory=list)
    """The answers as the tool message such a turn begins with."""


def parse_input(raw: str | list[dict[str, Any]], response_hex: str, unseal: Unseal) -> ParsedInput:
    """Check and sort the items. The last item is the new user message, or the last items
    are function results (the answer to the calls a response waits on). `unseal` reads a
    `compaction` item's summary (ValueError if this server did not make it)."""
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    given = [_item(index, entry) for index, entry in enumerate(raw)]
    parsed = ParsedInput()
    parsed.items = [_listed(item, f"{response_hex}_{i}") for i, item in enumerate(given)]
    items = [_as_function_item(item) for item in given]
    answers = (FunctionCallOutputItem, ApprovalResponseItem)
    first_answer = len(items)
    while first_answer and isinstance(items[first_answer - 1], answers):
        first_answer -= 1
    if first_answer < len(items):
        # Clients that keep the conversation themselves send all of it each time: what
        # comes before the answers is their copy of what the waiting chat already holds.
        answered = items[first_answer:]
        parsed.outputs = [item for item in answered if isinstance(item, FunctionCallOutputItem)]
        parsed.approvals = [item for item in answered if isinstance(item, ApprovalResponseItem)]
        parsed.restated = first_answer > 0
        parsed.copy = items[:first_answer]
        return parsed
    if not items:
        return parsed  # nothing new: only a turn paused on its budget takes it
    last = items[-1]
    if not (isinstance(last, MessageItem) and last.role == "user"):
        raise _refusal(
            len(items) - 1,
            "the last input item must be a user message (or every item a"
            " function_call_output or mcp_approval_response)",
        )
    call_names: dict[str, str] = {}
    for index, item in enumerate(items[:-1]):
        _add_history(parsed, index, item, call_names, unseal)
    parsed.message = _user_message(len(items) - 1, last)
    return parsed


def restart_from_copy(parsed: ParsedInput, unseal: Unseal) -> None:
    """Read the client's copy of the conversation as history, and its function results as
    the tool message a new turn begins with: a stateless client (`store: false`, no
    `previous_response_id`) answers calls no chat waits on. Approvals can't begin a turn."""
    if parsed.approvals or not parsed.copy:
        raise ApiError(
            400,
            "no_pending_calls",
            "no response waits for these answers: give the whole conversation, with the"
            " function_call items they answer, or continue with previous_response_id",
            {"param": "input"},
        )
    call_names: dict[str, str] = {}
    for index, item in enumerate(parsed.copy):
        _add_history(parsed, index, item, call_names, unseal)
    for offset, output in enumerate(parsed.outputs):
        index = len(parsed.copy) + offset
        scratch: list[HistoryMessage] = []
        _add_result(scratch, index, output, call_names)
        parsed.results += [p for p in scratch[0].parts if isinstance(p, ToolResultPart)]


def parse_window(raw: str | list[dict[str, Any]], unseal: Unseal) -> list[HistoryMessage]:
    """Every item as history, for a summary (`POST /v1/responses/compact`): system text
    becomes a user message (the summary request has its own instructions)."""
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    parsed = ParsedInput()
    call_names: dict[str, str] = {}
    for index, entry in enumerate(raw):
        _add_history(parsed, index, _as_function_item(_item(index, entry)), call_names, unseal)
    system = [HistoryMessage("user", [TextPart(text=text)]) for text in parsed.system]
    return system + parsed.history


def system_texts(entries: list[dict[str, Any]]) -> list[str]:
    """The text of the system and developer messages among `entries`, in order."""
    texts: list[str] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and entry.get("role") in ("system", "developer"):
            item = conversation_item(index, entry)
            if isinstance(item, MessageItem):
                texts.append(_plain_text(item))
    return texts


def conversation_item(index: int, entry: Any) -> InputItem:
    """An input item (or an output item given back) as the chat reads it: checked, and a
    client tool's call or output as a function's. A 400 naming the item if it can't be."""
    return _as_function_item(_item(index, entry))


def _item(index: int, entry: Any) -> InputItem:
    if isinstance(entry, dict) and "type" not in entry and "role" in entry:
        entry = {**entry, "type": "message"}
    if isinstance(entry, dict) and "type" not in entry and "id" in entry:
        entry = {**entry, "type": "item_reference"}  # the specification's default
    try:
        return _ITEMS.validate_python(entry)
    except ValidationError as err:
        first = err.errors()[0]
        where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"])
        raise _refusal(index, f"{where.lstrip('.')}: {first['msg']}".lstrip(": ")) from err


def _as_function_item(item: InputItem) -> InputItem:
    """A call of a client's tool, or its output, as the chat holds it: a function call
    under the name the model calls the tool by (`api.open_responses.client_tools`)."""
    if isinstance(item, FunctionCallItem) and item.namespace:
        name = model_name(item.name, item.namespace)
        return item.model_copy(update={"name": name, "namespace": None})
    if isinstance(item, CustomToolCallItem):
        arguments = json.dumps({"input": item.input})
        return _call(item.call_id, model_name(item.name, item.namespace), arguments)
    if isinstance(item, LocalShellCallItem):
        action = item.action.model_dump(exclude_none=True, exclude={"type"})
        return _call(item.call_id, LOCAL_SHELL, json.dumps(action))
    if isinstance(item, CustomToolCallOutputItem):
        return FunctionCallOutputItem(
            type="function_call_output", call_id=item.call_id, output=item.output
        )
    if isinstance(item, LocalShellCallOutputItem):
        call_id = item.call_id or item.id
        return FunctionCallOutputItem(
            type="function_call_output", call_id=call_id, output=item.output
        )
    return item


def _call(call_id: str, name: str, arguments: str) -> FunctionCallItem:
    return FunctionCallItem(type="function_call", call_id=call_id, name=name, arguments=arguments)


def _add_history(
    parsed: ParsedInput,
    index: int,
    item: InputItem,
    call_names: dict[str, str],
    unseal: Unseal,
) -> None:
    """An earlier item into the history (or the system text), merging a model's calls into
    its message and a run of results into one tool message, as the transcript holds them."""
    history = parsed.history
    if isinstance(item, CompactionItem | ItemReference):
        history.append(_summary(index, item, unseal))
    elif isinstance(item, ReasoningItem):
        reasoning = _reasoning(item, unseal)
        if reasoning is not None:
            _add_to_step(history, reasoning)
    elif isinstance(item, OutputEchoItem):
        return  # what the model did then is in its messages; the item itself isn't needed
    elif isinstance(item, MessageItem):
        _add_message(parsed, index, item)
    elif isinstance(item, ApprovalResponseItem):
        raise _refusal(index, "an mcp_approval_response answers the previous response only")
    elif isinstance(item, FunctionCallItem):
        call = ToolCallPart(id=item.call_id, name=item.name, arguments=item.arguments)
        call_names[item.call_id] = item.name
        _add_to_step(history, call)
    elif isinstance(item, FunctionCallOutputItem):
        _add_result(history, index, item, call_names)
    else:  # a client tool's item `_as_function_item` did not make a function's
        raise _refusal(index, f"a {item.type} item can't be read here")


def _add_message(parsed: ParsedInput, index: int, item: MessageItem) -> None:
    """A message into the history; system and developer text into the system prompt."""
    if item.role in ("system", "developer"):
        parsed.system.append(_plain_text(item))
    elif item.role == "assistant":
        parsed.history.append(HistoryMessage("assistant", [TextPart(text=_plain_text(item))]))
    else:
        parsed.history.append(HistoryMessage("user", list(_user_message(index, item).user_parts())))


def _add_result(
    history: list[HistoryMessage],
    index: int,
    item: FunctionCallOutputItem,
    call_names: dict[str, str],
) -> None:
    """A call's result, in one tool message with the results before it."""
    if item.call_id not in call_names:
        raise _refusal(index, f"no function_call with call_id {item.call_id!r} before it")
    media = result_media(index, item)
    result = ToolResultPart(
        tool_call_id=item.call_id,
        name=call_names[item.call_id],
        output=item.text(),
        media_type=media.media_type if media else None,
        data=media.data if media else None,
    )
    if history and history[-1].role == "tool":
        history[-1].parts.append(result)
    else:
        history.append(HistoryMessage("tool", [result]))


def _add_to_step(history: list[HistoryMessage], part: Part) -> None:
    """A part of the model's step: with the model's message before it, if any."""
    if history and history[-1].role == "assistant":
        history[-1].parts.append(part)
    else:
        history.append(HistoryMessage("assistant", [part]))


def _reasoning(item: ReasoningItem, unseal: Unseal) -> ReasoningPart | None:
    """The reasoning state a reasoning item holds, if this deployment sealed it for this
    owner; None for any other (another server's, or a summary alone): it is dropped."""
    if not item.encrypted_content:
        return None
    try:
        return ReasoningPart.model_validate_json(unseal(item.encrypted_content, "reasoning"))
    except ValueError:
        return None


def _summary(index: int, item: CompactionItem | ItemReference, unseal: Unseal) -> HistoryMessage:
    """A compaction item's summary, as the transcript holds a summary: a user message."""
    if isinstance(item, ItemReference):
        raise _refusal(
            index,
            "an item_reference is taken only before the function_call_output items that"
            " continue a response: send the item itself",
        )
    try:
        summary = unseal(item.encrypted_content, "compaction")
    except ValueError as err:
        raise _refusal(index, f"encrypted_content: {err}") from err
    return HistoryMessage("user", [TextPart(text=f"{SUMMARY_PREAMBLE}\n\n{summary}")])


def _plain_text(item: MessageItem) -> str:
    if isinstance(item.content, str):
        return item.content
    return "".join(getattr(part, "text", "") for part in item.content)


def result_media(index: int, item: FunctionCallOutputItem) -> UserFilePart | None:
    """A function result's image or file, checked as a user's file is."""
    media = item.media()
    if isinstance(media, InputImage):
        return _file(index, media.image_url, None, "image_url")
    if isinstance(media, InputFile):
        return _file(index, media.file_data, media.filename, "file_data")
    return None


def _user_message(index: int, item: MessageItem) -> SendMessage:
    """The user message's parts, checked as the native API checks a sent message."""
    content = item.content
    if isinstance(content, str):
        parts: list[UserPart] = [UserTextPart(type="text", text=content)] if content else []
    else:
        parts = [_user_part(index, part) for part in content]
    try:
        return SendMessage(parts=parts)
    except ValidationError as err:
        message = str(err.errors()[0]["msg"]).removeprefix("Value error, ")
        raise _refusal(index, message) from err


def _user_part(index: int, part: Any) -> UserPart:
    if isinstance(part, InputText):
        return UserTextPart(type="text", text=part.text)
    if isinstance(part, InputImage):
        return _file(index, part.image_url, None, "image_url")
    if isinstance(part, InputFile):
        return _file(index, part.file_data, part.filename, "file_data")
    raise _refusal(index, f"a user message can't hold {getattr(part, 'type', part)!r}")


def _file(index: int, data: str | None, filename: str | None, name: str) -> UserFilePart:
    """A data URL (or bare base64 named by `filename`) as a file part; URLs to fetch are
    refused: the server fetches nothing on a client's behalf."""
    if not data:
        raise _refusal(index, f"{name} is required (a data: URL)")
    found = _DATA_URL.match(data)
    if found:
        media_type, payload = found["type"], found["data"]
    elif filename and not data.startswith(("http://", "https://")):
        media_type, payload = mimetypes.guess_type(filename)[0] or "", data
    else:
        raise _refusal(index, f"{name} must be a data: URL (base64); URLs are not fetched")
    try:
        return UserFilePart(type="file", media_type=media_type, data=payload, name=filename)
    except ValidationError as err:
        raise _refusal(index, str(err.errors()[0]["msg"])) from err


def _listed(item: InputItem, item_id: str) -> dict[str, Any]:
    """The item as `input_items` shows it: with an id and a status, content as parts."""
    listed = item.model_dump(exclude_none=True)
    listed.setdefault("id", f"{_PREFIXES[item.type]}_{item_id}")
    listed.setdefault("status", "completed")
    if isinstance(item, MessageItem) and isinstance(item.content, str):
        kind = "output_text" if item.role == "assistant" else "input_text"
        part: dict[str, Any] = {"type": kind, "text": item.content}
        if kind == "output_text":
            part["annotations"] = []
        listed["content"] = [part]
    return listed


_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "mcp_approval_response": "mcpr",
    "compaction": "cmp",
    "item_reference": "ref",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "local_shell_call": "lsc",
    "local_shell_call_output": "lsco",
    "reasoning": "rs",
    "web_search_call": "ws",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcpl",
    "mcp_approval_request": "mcpr",
}


def _refusal(index: int, message: str) -> ApiError:
    return ApiError(
        400, "invalid_request", f"input[{index}]: {message}", {"param": f"input[{index}]"}
    )
