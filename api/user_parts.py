"""The parts a user may send: text and files, checked before they are stored.

A stored user part is read by every later step of the chat; a part the provider request
can't be built from (a file that isn't base64, say) would fail each of them, so the
gateway refuses it with a 400 instead.
"""

from __future__ import annotations

import binascii
from typing import Annotated, Literal

from pydantic import Field
from pydantic_core import PydanticCustomError

from chatd.parts import FilePart, TextPart

__all__ = ["MAX_TEXT", "UserFilePart", "UserPart", "UserTextPart", "check_file_data"]

MAX_TEXT = 200_000

_MEDIA_TYPE = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$"
"""`type/subtype`, with the characters RFC 6838 allows in either name."""


class UserTextPart(TextPart):
    """Text written by the user."""

    type: Literal["text"] = "text"
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class UserFilePart(FilePart):
    """A file sent by the user: a media type and non-empty base64 data."""

    type: Literal["file"] = "file"
    media_type: str = Field(max_length=255, pattern=_MEDIA_TYPE)
    data: str = Field(min_length=1)
    """Strict base64 (checked with the part's index, see `check_file_data`)."""
    name: str | None = Field(default=None, max_length=255)


UserPart = Annotated[UserTextPart | UserFilePart, Field(discriminator="type")]
"""What a user message is made of: no tool calls or results, no reasoning."""


def check_file_data(parts: list[UserPart]) -> None:
    """Raise a validation error naming the first file part whose data is not strict base64."""
    for index, part in enumerate(parts):
        if isinstance(part, UserFilePart) and not _is_base64(part.data):
            raise PydanticCustomError(
                "invalid_base64",
                "parts[{index}].data is not valid base64",
                {"index": index},
            )


def _is_base64(data: str) -> bool:
    try:
        binascii.a2b_base64(data.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        return False
    return True
