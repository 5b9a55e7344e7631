"""The parts a user may send: text and files, checked before they are stored.

A user message holds `text` and `file` parts only (docs/architecture.md, rule 9): tool calls, tool
results and reasoning are the model's and the tools' to write, and a forged one would reach
the provider as if they had written it. A stored user part is read by every later step of
the chat; a part the provider request can't be built from (a file that isn't base64, say)
would fail each of them, so the gateway refuses it with a 400 instead. Every refusal names
the part (`parts[2]`) and says why.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic_core import PydanticCustomError

from chatd.parts import FilePart, TextPart
from chatd.settings import max_file_bytes, max_message_bytes

__all__ = [
    "FILE_MEDIA_TYPES",
    "MAX_FILE_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_PARTS",
    "MAX_TEXT",
    "UserFilePart",
    "UserPart",
    "UserTextPart",
    "check_message_size",
    "check_user_parts",
    "refuse_foreign_parts",
    "text_bytes",
]

MAX_TEXT = 200_000
"""Characters in one text part (or `content`)."""
MAX_PARTS = 100
MAX_FILE_BYTES = max_file_bytes()
MAX_MESSAGE_BYTES = max_message_bytes()

FILE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf")
"""The media types of files a provider reads, besides `text/*`."""
_MEDIA_TYPE = re.compile(
    r"^(image/(png|jpeg|gif|webp)|application/pdf|text/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)$"
)
"""`FILE_MEDIA_TYPES` or `text/<subtype>` (a subtype in the characters RFC 6838 allows)."""


_BASE64 = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
"""Strict base64: the standard alphabet, padded, no whitespace."""


def _base64_length(size: int) -> int:
    return 4 * -(-size // 3)


_STRICT = ConfigDict(extra="forbid", strict=True)


class UserTextPart(TextPart):
    """Text written by the user."""

    model_config = _STRICT

    type: Literal["text"]
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class UserFilePart(FilePart):
    """A file sent by the user: an allowed media type and non-empty base64 data."""

    model_config = _STRICT

    type: Literal["file"]
    media_type: str = Field(
        max_length=255,
        # Stated in the document; checked with the part's index (see `check_user_parts`).
        json_schema_extra={"pattern": _MEDIA_TYPE.pattern},
    )
    data: str = Field(
        min_length=1,
        json_schema_extra={"pattern": _BASE64.pattern, "maxLength": _base64_length(MAX_FILE_BYTES)},
    )
    """Strict base64 of at most `MAX_FILE_BYTES` (checked with the part's index)."""
    name: str | None = Field(default=None, max_length=255)


UserPart = Annotated[UserTextPart | UserFilePart, Field(discriminator="type")]
"""What a user message is made of: no tool calls or results, no reasoning."""

_FIELDS = {"text": set(UserTextPart.model_fields), "file": set(UserFilePart.model_fields)}


def refuse_foreign_parts(parts: Any) -> None:
    """Raise a validation error naming the first part that isn't a user's to send: a kind
    other than text and file, or a field those kinds don't have (a `signature`, say).

    Run on the raw input, before the parts are validated, so the message says which part
    it is and why instead of listing the union's expected tags."""
    if not isinstance(parts, list):
        return
    for index, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            continue
        kind = part["type"]
        if kind not in _FIELDS:
            raise PydanticCustomError(
                "user_part_kind",
                "parts[{index}] is a {kind} part: a user message holds text and file parts only",
                {"index": index, "kind": kind},
            )
        unknown = sorted(set(part) - _FIELDS[kind])
        if unknown:
            raise PydanticCustomError(
                "user_part_field",
                "parts[{index}].{field} is not a field of a {kind} part",
                {"index": index, "field": unknown[0], "kind": kind},
            )


def check_user_parts(parts: list[UserPart]) -> None:
    """Raise a validation error naming the first file part with a media type off the
    allow-list, data that isn't strict base64, or more than `MAX_FILE_BYTES`; or saying the
    parts together exceed `MAX_MESSAGE_BYTES`."""
    total = 0
    for index, part in enumerate(parts):
        if isinstance(part, UserFilePart):
            _check_file(index, part)
            total += _decoded_size(part.data)
        else:
            total += text_bytes(part.text)
    check_message_size(total)


def check_message_size(total: int) -> None:
    """Raise a validation error if a message of `total` bytes is over `MAX_MESSAGE_BYTES`."""
    if total > MAX_MESSAGE_BYTES:
        raise PydanticCustomError(
            "message_too_large",
            "the message is {size} bytes (text and decoded files); the limit is {limit}",
            {"size": total, "limit": MAX_MESSAGE_BYTES},
        )


def text_bytes(text: str) -> int:
    """The UTF-8 size of `text` (a lone surrogate counted as the 3 bytes it would take)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _check_file(index: int, part: UserFilePart) -> None:
    if not _MEDIA_TYPE.fullmatch(part.media_type):
        raise PydanticCustomError(
            "media_type_not_allowed",
            "parts[{index}].media_type '{media_type}' is not allowed: send {allowed} or text/*",
            {
                "index": index,
                "media_type": part.media_type,
                "allowed": ", ".join(FILE_MEDIA_TYPES),
            },
        )
    if not _BASE64.fullmatch(part.data):
        raise PydanticCustomError(
            "invalid_base64", "parts[{index}].data is not valid base64", {"index": index}
        )
    size = _decoded_size(part.data)
    if size > MAX_FILE_BYTES:
        raise PydanticCustomError(
            "file_too_large",
            "parts[{index}] is a file of {size} bytes; the limit is {limit}",
            {"index": index, "size": size, "limit": MAX_FILE_BYTES},
        )


def _decoded_size(data: str) -> int:
    """The size of strict base64 `data` once decoded, without decoding it."""
    return len(data) // 4 * 3 - data[-2:].count("=")
