"""A response's stream: the chat's events after the response began, as Open Responses events.

The translation is a pure function of the chat's event log, so the same events always get
the same sequence numbers: a client resuming with `starting_after=N` (after a dropped
connection, a gateway restart or a worker crash) gets exactly the events after N.

- Each model step's parts become items: reasoning, assistant messages (`output_text`) and
  the client's function calls. Text and reasoning deltas stream as the model writes them;
  the persisted step closes them with its durable text. A call of the client's tools shows
  only once its step is saved (its arguments in one delta): a step retried after a crashed
  worker never hands the client a call it then replaces, so a client that runs a call as
  soon as its item is done (Codex) never runs one twice or runs one the model took back.
- A provider's web search is a `web_search_call` item, opened (`in_progress`, `searching`)
  when the model's search call arrives and closed by its result.
- Tools the workers ran become items when their results are persisted (`mcp_call` for an
  MCP server's, `chatd:tool_call` for a built-in one).
- A step attempt abandoned by a crashed worker (the chat's `reset`): its open items are
  closed `incomplete` and a `chatd:reset` event names them; the retry streams new items. A
  client that ignores `chatd:` events still ends with the canonical output, because an
  incomplete item is dropped from it (`GET` shows the transcript's items only).
- `retry`, `queue` and `subagent` go out as `chatd:retry`, `chatd:queue` and
  `chatd:subagent`.

`chatd:` events go out only to a client that asked (`"chatd:events": true`): clients that
check every event against the spec's list refuse the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.open_responses.client_tools import ClientTools, call_item, custom_input
from api.open_responses.resource import (
    APPROVAL_PREFIX,
    ItemIds,
    ReasoningShown,
    approval_request_item,
    awaits_approval,
    is_web_search,
    message_item,
    shows_as_tool_run,
    superseded,
    tool_call_item,
    web_search_item,
)
from chatd.output_format import OutputFormat
from chatd.parts import Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from chatd.store.events import ChatEvent
from chatd.store.transcript import StoredMessage

__all__ = ["TERMINAL_CHAT_STATUSES", "TERMINAL_EVENTS", "ResponseEvents"]

TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})
"""The events that end a response's stream (one of them, once)."""

TERMINAL_CHAT_STATUSES = frozenset({"waiting", "requires_action", "error"})
"""The chat statuses that end a response: its turn waits for the client, or ended."""


@dataclass
class _OpenItem:
    """An item whose deltas are streaming."""

    kind: str
    """reasoning, message or function_call."""
    item_id: str
    output_index: int
    text: str = ""
    call: ToolCallPart | None = None
    reasoning: ReasoningPart | None = None
    """A reasoning item's persisted part (its provider state is sealed for the client)."""


@dataclass
class ResponseEvents:
    """Turns chat events into the response's events, numbering them from 0."""

    response_id: str
    turn_id: str
    client_tools: ClientTools
    answered_call_ids: set[str]
    extensions: bool = False
    """Whether the client asked for `chatd:` events (`chatd:events`)."""
    reasoning: ReasoningShown = field(default_factory=ReasoningShown)
    """Reasoning as a summary or as content, with its state sealed or not."""
    output_format: OutputFormat | None = None
    """The response's structured output format: a final answer that misses it is closed
    `incomplete` (the model is asked again, or the response fails)."""
    ended: bool = False
    _sequence: int = 0
    _ids: ItemIds = field(init=False)
    _outputs: int = 0
    _open: dict[int, _OpenItem] = field(default_factory=dict)
    _searches: dict[str, _OpenItem] = field(default_factory=dict)
    """Web searches opened and not yet closed, by call id."""
    _searched: set[str] = field(default_factory=set)
    _calls: dict[str, ToolCallPart] = field(default_factory=dict)
    _results: set[str] = field(default_factory=set)
    _began: bool = False
    _awaits_client: bool = False
    """The turn stopped for the client (its function results or a person's approvals)."""

    def __post_init__(self) -> None:
        self._ids = ItemIds(self.response_id)

    def opening(self, resource: dict[str, Any]) -> list[dict[str, Any]]:
        """`response.created` (and `response.queued` for a queued response)."""
        events = [self._event("response.created", response=resource)]
        if resource["status"] == "queued":
            events.append(self._event("response.queued", response=resource))
        return events

    def feed(self, event: ChatEvent, resource: dict[str, Any]) -> list[dict[str, Any]]:
        """The response's events for one chat event; `resource` is the response as of now
        (the in-progress snapshot `response.in_progress` carries)."""
        data = event.data
        match event.event:
            case "status":
                return self._status(data, resource)
            case "message_part" if data.get("role") == "assistant":
                return self._delta(data.get("part") or {})
            case "message":
                # Published without its empty fields (a user message has no usage).
                return self._message(StoredMessage.model_validate({"usage": None, **data}))
            case "reset":
                return self._reset()
            case "retry" | "queue" | "subagent" if self.extensions:
                return [self._event(f"chatd:{event.event}", data=data)]
        return []

    def closing(self, resource: dict[str, Any]) -> list[dict[str, Any]]:
        """The terminal event for the response as it ended (its items are closed already)."""
        kind = {
            "completed": "response.completed",
            "failed": "response.failed",
        }.get(resource["status"], "response.incomplete")
        events = self._close_all("incomplete")
        if self._awaits_client:
            for call in self._calls.values():
                if not awaits_approval(call, self.client_tools, self._results):
                    continue
                item = _OpenItem("mcp_approval_request", APPROVAL_PREFIX + call.id, self._outputs)
                self._outputs += 1
                request = approval_request_item(call)
                events.append(self._item_event("response.output_item.added", item, request))
                events.append(self._item_event("response.output_item.done", item, request))
        return [*events, self._event(kind, response=resource)]

    def _status(self, data: dict[str, Any], resource: dict[str, Any]) -> list[dict[str, Any]]:
        if data.get("turn_id") != self.turn_id:
            return []
        if data.get("status") == "running" and not self._began:
            self._began = True
            return [self._event("response.in_progress", response=resource)]
        if data.get("status") in TERMINAL_CHAT_STATUSES:
            self.ended = True
            self._awaits_client = data.get("status") == "requires_action"
        return []

    def _delta(self, part: dict[str, Any]) -> list[dict[str, Any]]:
        index = part.get("index")
        if not isinstance(index, int):
            return []  # a compaction's progress: not an output item
        whole = part.get("part")
        if isinstance(whole, dict) and whole.get("provider_executed"):
            return self._provider_tool(_PROVIDER_PARTS[str(part.get("type"))].model_validate(whole))
        events: list[dict[str, Any]] = []
        item = self._open.get(index)
        kind = part.get("type")
        if item is None:
            if kind == "tool_call":
                return []  # a worker's tool, or a client's, shown once its step is saved
            opened = self._begin(kind, part)
            if opened is None:
                return []
            item, events = opened
            self._open[index] = item
        if kind in ("text", "reasoning") and part.get("text"):
            item.text += part["text"]
            events += self._delta_of(kind, item, part["text"])
        return events

    def _begin(
        self, kind: Any, part: dict[str, Any]
    ) -> tuple[_OpenItem, list[dict[str, Any]]] | None:
        """Open an item: its `output_item.added` (and `content_part.added`)."""
        output_index = self._outputs
        if kind == "text":
            item = _OpenItem("message", self._ids.next("msg"), output_index)
            added = message_item(item.item_id, "", "in_progress")
            content: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
        elif kind == "reasoning":
            item = _OpenItem("reasoning", self._ids.next("rs"), output_index)
            added = self.reasoning.item(item.item_id, "")
            content = {"type": self._reasoning_kind, "text": ""}
        elif kind == "tool_call":
            call = ToolCallPart(id=part.get("id") or "", name=part.get("name") or "")
            item = _OpenItem("function_call", self._ids.next("fc"), output_index, call=call)
            added = call_item(item.item_id, call, "in_progress", self.client_tools.get(call.name))
            self._outputs += 1
            return item, [self._item_event("response.output_item.added", item, added)]
        else:
            return None
        self._outputs += 1
        return item, [
            self._item_event("response.output_item.added", item, added),
            self._part_event(self._part_added(item), item, part=content),
        ]

    def _message(self, message: StoredMessage) -> list[dict[str, Any]]:
        """A persisted message: a model step closes its items with the durable parts; a
        tool message adds an item per result of a tool the workers ran."""
        if message.turn_id != self.turn_id:
            return []
        events: list[dict[str, Any]] = []
        if superseded(message, self.output_format):
            return self._close_all("incomplete")
        if message.role == "assistant":
            for index, part in enumerate(message.parts):
                events += self._persisted(index, part)
            events += self._close_all("incomplete")  # streamed, then not kept
        elif message.role == "tool":
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    self._results.add(part.tool_call_id)
                if isinstance(part, ToolResultPart) and shows_as_tool_run(
                    part, self.client_tools, self.answered_call_ids
                ):
                    item_id = self._ids.next("tc")
                    done = tool_call_item(item_id, self._calls.get(part.tool_call_id), part)
                    item = _OpenItem(done["type"], item_id, self._outputs)
                    self._outputs += 1
                    events.append(self._item_event("response.output_item.added", item, done))
                    events.append(self._item_event("response.output_item.done", item, done))
        return events

    def _persisted(self, index: int, part: Part) -> list[dict[str, Any]]:
        """Close the item of a step's part (opening it first if nothing streamed)."""
        if isinstance(part, ToolCallPart | ToolResultPart) and part.provider_executed:
            return self._provider_tool(part)
        if isinstance(part, ToolCallPart):
            self._calls[part.id] = part
        shown = self._shown(part)
        if shown is None:
            return []
        kind, text = shown
        events: list[dict[str, Any]] = []
        item = self._open.pop(index, None)
        if item is None or item.kind != _KINDS[kind]:
            if item is not None:
                events += self._close(item, "incomplete")
            opened = self._begin(kind, part.model_dump())
            assert opened is not None
            item, events_added = opened
            events += events_added
        streams = kind != "tool_call" or self._streams_arguments(getattr(part, "name", None))
        if text != item.text and streams:  # the durable text completes what streamed
            rest = text.removeprefix(item.text) if text.startswith(item.text) else text
            events += self._delta_of(kind, item, rest)
        item.text = text
        if isinstance(part, ToolCallPart):
            item.call = part
        if isinstance(part, ReasoningPart):
            item.reasoning = part
        return events + self._close(item, "completed")

    def _streams_arguments(self, name: Any) -> bool:
        """Whether a call's arguments go out as a delta: a client's function's do; a custom
        tool's input and a shell command show once whole."""
        tool = self.client_tools.get(name) if isinstance(name, str) else None
        return tool is not None and tool.kind == "function"

    def _shown(self, part: Part) -> tuple[str, str] | None:
        """The kind of item a step's part is, and its text (None: it is no item)."""
        if isinstance(part, ToolCallPart):
            return ("tool_call", part.arguments) if part.name in self.client_tools else None
        if isinstance(part, TextPart):
            return "text", part.text
        if isinstance(part, ReasoningPart):
            return "reasoning", part.text
        return None

    def _provider_tool(self, part: ToolCallPart | ToolResultPart) -> list[dict[str, Any]]:
        """A provider's web search: its call opens the item (once, whether it streamed or
        only came persisted), its result closes it. Other provider tools show no item."""
        if isinstance(part, ToolResultPart):
            item = self._searches.pop(part.tool_call_id, None)
            return [] if item is None else self._close_search(item, part)
        if not is_web_search(part) or part.id in self._searched:
            return []
        self._searched.add(part.id)
        item = _OpenItem("web_search_call", self._ids.next("ws"), self._outputs, call=part)
        self._outputs += 1
        self._searches[part.id] = item
        return [
            self._item_event(
                "response.output_item.added", item, web_search_item(item.item_id, part, None)
            ),
            self._search_event("response.web_search_call.in_progress", item),
            self._search_event("response.web_search_call.searching", item),
        ]

    def _close_search(
        self, item: _OpenItem, result: ToolResultPart | None, status: str | None = None
    ) -> list[dict[str, Any]]:
        assert item.call is not None
        done = web_search_item(item.item_id, item.call, result, status)
        events = []
        if done["status"] == "completed":
            events.append(self._search_event("response.web_search_call.completed", item))
        return [*events, self._item_event("response.output_item.done", item, done)]

    def _close_all(self, status: str) -> list[dict[str, Any]]:
        """Close every open item (and search) as `status`."""
        events = [e for item in self._open.values() for e in self._close(item, status)]
        events += [e for s in self._searches.values() for e in self._close_search(s, None, status)]
        self._open.clear()
        self._searches.clear()
        return events

    def _delta_of(self, kind: str, item: _OpenItem, delta: str) -> list[dict[str, Any]]:
        if kind == "tool_call":
            return [
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item.item_id,
                    output_index=item.output_index,
                    delta=delta,
                )
            ]
        if kind == "text":
            return [self._part_event("response.output_text.delta", item, delta=delta)]
        if self.reasoning.as_summary:
            return [self._part_event("response.reasoning_summary_text.delta", item, delta=delta)]
        return [self._part_event("response.reasoning.delta", item, delta=delta)]

    def _close(self, item: _OpenItem, status: str) -> list[dict[str, Any]]:
        """The `done` events of an item (and of its content part)."""
        if item.kind == "function_call":
            assert item.call is not None
            call = item.call.model_copy(update={"arguments": item.text})
            tool = self.client_tools.get(call.name)
            done = call_item(item.item_id, call, status, tool)
            if tool is None or tool.kind == "function":
                finished = self._event(
                    "response.function_call_arguments.done",
                    item_id=item.item_id,
                    output_index=item.output_index,
                    arguments=item.text,
                )
            elif tool.kind == "custom":
                finished = self._event(
                    "response.custom_tool_call_input.done",
                    item_id=item.item_id,
                    output_index=item.output_index,
                    input=custom_input(item.text),
                )
            else:
                return [self._item_event("response.output_item.done", item, done)]
            return [finished, self._item_event("response.output_item.done", item, done)]
        if item.kind == "message":
            content = {"type": "output_text", "text": item.text, "annotations": []}
            done = message_item(item.item_id, item.text, status)
            text_done = self._part_event("response.output_text.done", item, text=item.text)
        else:
            content = {"type": self._reasoning_kind, "text": item.text}
            done = self.reasoning.item(item.item_id, item.text, item.reasoning)
            name = (
                "response.reasoning_summary_text.done"
                if self.reasoning.as_summary
                else "response.reasoning.done"
            )
            text_done = self._part_event(name, item, text=item.text)
        return [
            text_done,
            self._part_event(self._part_added(item).replace(".added", ".done"), item, part=content),
            self._item_event("response.output_item.done", item, done),
        ]

    @property
    def _reasoning_kind(self) -> str:
        return "summary_text" if self.reasoning.as_summary else "reasoning_text"

    def _part_added(self, item: _OpenItem) -> str:
        """The event that opens an item's part: a reasoning summary's is a summary part."""
        if item.kind == "reasoning" and self.reasoning.as_summary:
            return "response.reasoning_summary_part.added"
        return "response.content_part.added"

    def _reset(self) -> list[dict[str, Any]]:
        abandoned = [*self._open.values(), *self._searches.values()]
        events = self._close_all("incomplete")
        if self.extensions:
            events.append(self._event("chatd:reset", item_ids=[i.item_id for i in abandoned]))
        return events

    def _item_event(self, kind: str, item: _OpenItem, body: dict[str, Any]) -> dict[str, Any]:
        return self._event(kind, output_index=item.output_index, item=body)

    def _search_event(self, kind: str, item: _OpenItem) -> dict[str, Any]:
        return self._event(kind, output_index=item.output_index, item_id=item.item_id)

    def _part_event(self, kind: str, item: _OpenItem, **fields: Any) -> dict[str, Any]:
        summary = kind.startswith("response.reasoning_summary")
        index = "summary_index" if summary else "content_index"
        return self._event(
            kind, item_id=item.item_id, output_index=item.output_index, **{index: 0}, **fields
        )

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event


_KINDS = {"text": "message", "reasoning": "reasoning", "tool_call": "function_call"}
_PROVIDER_PARTS: dict[str, type[ToolCallPart] | type[ToolResultPart]] = {
    "tool_call": ToolCallPart,
    "tool_result": ToolResultPart,
}
