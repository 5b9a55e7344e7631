"""`item_reference` items in a client's conversation: an item of one of this owner's stored
responses (an output item, or an input item it listed), by the id the response gave it,
read back as the item itself before the input is parsed.

Ids are `<kind>_<response hex>_<n>` (`resource.ItemIds`, `inputs._listed`), so the response
an id belongs to is found without a search.
"""

from __future__ import annotations

from typing import Any

from api.open_responses.views import current_resource
from api.state import GatewayState

__all__ = ["with_references_resolved"]


async def with_references_resolved(
    state: GatewayState, owner: str, raw: str | list[dict[str, Any]]
) -> str | list[dict[str, Any]]:
    """The input with each `item_reference` replaced by the item it names, where one of this
    owner's stored responses holds it. Others stay references: the input's own checks take
    them where the chat already holds what they stand for (before the results that answer
    a waiting response), and refuse them elsewhere."""
    if isinstance(raw, str) or not any(_reference(entry) for entry in raw):
        return raw
    items: dict[str, dict[str, Any]] = {}
    looked_up: set[str] = set()
    resolved: list[dict[str, Any]] = []
    for entry in raw:
        item_id = _reference(entry)
        if item_id is not None and item_id not in items:
            response_id = _response_of(item_id)
            if response_id is not None and response_id not in looked_up:
                looked_up.add(response_id)
                items.update(await _items_of_response(state, owner, response_id))
        resolved.append(items.get(item_id, entry) if item_id is not None else entry)
    return resolved


def _reference(entry: Any) -> str | None:
    """The id an `item_reference` (or an item of only an id, the specification's default)
    names."""
    if not isinstance(entry, dict):
        return None
    kind = entry.get("type")
    if kind == "item_reference" or (kind is None and "role" not in entry and "id" in entry):
        item_id = entry.get("id")
        return item_id if isinstance(item_id, str) else None
    return None


def _response_of(item_id: str) -> str | None:
    """The response an item id of ours belongs to (`<kind>_<response hex>_<n>`)."""
    _, _, rest = item_id.partition("_")
    response_hex, _, _ = rest.rpartition("_")
    return f"resp_{response_hex}" if response_hex else None


async def _items_of_response(
    state: GatewayState, owner: str, response_id: str
) -> dict[str, dict[str, Any]]:
    """The items, by id, of one of this owner's stored responses (none if no such)."""
    record = await state.responses.get(owner, response_id)
    if record is None:
        return {}
    output = (await current_resource(state, record))["output"]
    return {item["id"]: _as_input(item) for item in [*record.input_items, *output]}


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An item as input: without the status an output item carries."""
    return {key: value for key, value in item.items() if key != "status"}
