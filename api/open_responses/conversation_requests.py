"""The bodies of the `/v1/conversations` routes: the items a client adds to a conversation,
described as precisely as the document can say them (a request it calls valid is one the
gateway takes), and checked as the native API checks what it stores."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import Depends, Query
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)

from api.open_responses.requests import FunctionCallItem, FunctionCallOutputItem
from api.user_parts import (
    MAX_FILE_BYTES,
    MAX_PARTS,
    MAX_TEXT,
    UserFilePart,
    UserPart,
    UserTextPart,
    check_user_parts,
)

__all__ = [
    "MAX_ITEMS",
    "AddItems",
    "ConversationAssistantMessage",
    "ConversationItemInput",
    "ConversationReasoning",
    "ConversationUserMessage",
    "CreateConversation",
    "Includable",
    "Include",
    "Metadata",
    "UpdateConversation",
]

MAX_ITEMS = 20
"""Items one request may add (OpenAI's limit too)."""

_STRICT = ConfigDict(extra="forbid")
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"
_IMAGE_TYPES = "image/(?:png|jpeg|gif|webp)"
_FILE_TYPES = rf"{_IMAGE_TYPES}|application/pdf|text/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*"
_DATA_URL = re.compile(r"^data:(?P<type>[^;,]*);base64,(?P<data>.*)$", re.DOTALL)
_DATA_URL_LENGTH = len("data:;base64,") + 255 + 4 * -(-MAX_FILE_BYTES // 3)
_Status = Literal["in_progress", "completed", "incomplete"]


def _data_url(types: str) -> Any:
    """A data URL of these media types, as the document states it (checked, with a message
    naming the part, when the message is)."""
    return Field(
        max_length=_DATA_URL_LENGTH,
        json_schema_extra={"pattern": f"^data:(?:{types});base64,{_BASE64}$"},
    )


class ConversationInputText(BaseModel):
    model_config = _STRICT
    type: Literal["input_text"]
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class ConversationInputImage(BaseModel):
    """An image as a `data:image/...;base64,` URL (the server fetches nothing)."""

    model_config = _STRICT
    type: Literal["input_image"]
    image_url: str = _data_url(_IMAGE_TYPES)
    detail: Literal["low", "high", "auto"] | None = None


class ConversationInputFile(BaseModel):
    """A file as a `data:<media type>;base64,` URL."""

    model_config = _STRICT
    type: Literal["input_file"]
    file_data: str = _data_url(_FILE_TYPES)
    filename: str | None = Field(default=None, max_length=255)


_UserContent = Annotated[
    ConversationInputText | ConversationInputImage | ConversationInputFile,
    Field(discriminator="type"),
]


class ConversationUserMessage(BaseModel):
    """A user's message: text and files, checked as the native API checks a sent message."""

    model_config = _STRICT
    type: Literal["message"] = "message"
    id: str | None = Field(default=None, max_length=200)
    """Not kept: the item's id is the server's."""
    status: _Status | None = None
    role: Literal["user"]
    content: (
        Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
        | Annotated[list[_UserContent], Field(min_length=1, max_length=MAX_PARTS)]
    )

    @model_validator(mode="after")
    def _parts_are_valid(self) -> ConversationUserMessage:
        check_user_parts(self.user_parts())
        return self

    def user_parts(self) -> list[UserPart]:
        if isinstance(self.content, str):
            return [UserTextPart(type="text", text=self.content)]
        return [_user_part(part) for part in self.content]


class ConversationOutputText(BaseModel):
    model_config = _STRICT
    type: Literal["output_text"]
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    annotations: list[dict[str, Any]] = Field(default_factory=list, max_length=0)
    logprobs: list[dict[str, Any]] | None = Field(default=None, max_length=0)


class ConversationAssistantMessage(BaseModel):
    """A model's message, as a response's output holds it."""

    model_config = _STRICT
    type: Literal["message"] = "message"
    id: str | None = Field(default=None, max_length=200)
    """Not kept: the item's id is the server's."""
    status: _Status | None = None
    role: Literal["assistant"]
    content: (
        Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
        | Annotated[list[ConversationOutputText], Field(min_length=1, max_length=MAX_PARTS)]
    )
    phase: Literal["commentary", "final_answer"] | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ConversationSummaryText(BaseModel):
    model_config = _STRICT
    type: Literal["summary_text"]
    text: str = Field(max_length=MAX_TEXT)


class ConversationReasoningText(BaseModel):
    model_config = _STRICT
    type: Literal["reasoning_text"]
    text: str = Field(max_length=MAX_TEXT)


class ConversationReasoning(BaseModel):
    """A model's reasoning. With the `encrypted_content` this deployment sealed for the
    owner, its provider state is restored; otherwise it is kept for people to read: a
    provider is sent only reasoning it signed, so it never reaches a model."""

    model_config = _STRICT
    type: Literal["reasoning"]
    id: str | None = Field(default=None, max_length=200)
    """Not kept: the item's id is the server's."""
    summary: list[ConversationSummaryText] = Field(default_factory=list, max_length=MAX_PARTS)
    content: list[ConversationReasoningText] | None = Field(default=None, max_length=MAX_PARTS)
    encrypted_content: str | None = Field(default=None, max_length=2_000_000)
    status: _Status | None = None

    def text(self) -> str:
        texts = [part.text for part in self.content or self.summary]
        return "\n\n".join(text for text in texts if text)


def _item_kind(item: Any) -> str | None:
    """A message's kind is its role's (user and model messages hold different content);
    `type` may be left out of a message."""
    if isinstance(item, dict):
        kind, role = item.get("type", "message" if "role" in item else None), item.get("role")
    else:
        kind, role = getattr(item, "type", None), getattr(item, "role", None)
    return f"message:{role}" if kind == "message" else kind


ConversationItemInput = Annotated[
    Annotated[ConversationUserMessage, Tag("message:user")]
    | Annotated[ConversationAssistantMessage, Tag("message:assistant")]
    | Annotated[ConversationReasoning, Tag("reasoning")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(
        _item_kind,
        custom_error_type="invalid_item",
        custom_error_message="an item is a user or assistant message, a reasoning item,"
        " a function_call or a function_call_output",
    ),
]
"""An item a client adds to a conversation."""


def _user_part(
    part: ConversationInputText | ConversationInputImage | ConversationInputFile,
) -> UserPart:
    if isinstance(part, ConversationInputText):
        return UserTextPart(type="text", text=part.text)
    if isinstance(part, ConversationInputImage):
        url, name, field = part.image_url, None, "image_url"
    else:
        url, name, field = part.file_data, part.filename, "file_data"
    found = _DATA_URL.match(url)
    if found is None:
        raise ValueError(f"{field} must be a data: URL (base64); URLs are not fetched")
    return UserFilePart(type="file", media_type=found["type"], data=found["data"], name=name)


Metadata = Annotated[
    dict[
        Annotated[str, StringConstraints(max_length=64)],
        Annotated[str, StringConstraints(max_length=512)],
    ],
    Field(max_length=16),
]
"""Up to 16 pairs of strings, keys up to 64 characters, values up to 512 (as OpenAI's)."""
Includable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]
_INCLUDE = (
    "`reasoning.encrypted_content`: reasoning items carry the provider's reasoning state,"
    " sealed (given back, in a conversation's items or a response's input, it is restored)."
    " The others are accepted: items hold all they have."
)


def _included(
    include: Annotated[list[Includable], Query(description=_INCLUDE)] = [],  # noqa: B006
    include_brackets: Annotated[
        list[Includable],
        Query(alias="include[]", description="`include`, as OpenAI's SDKs send it"),
    ] = [],  # noqa: B006
) -> list[Includable]:
    return [*include, *include_brackets]


Include = Annotated[list[Includable], Depends(_included)]
"""What a request asks items to include (`include` or `include[]`)."""


class CreateConversation(BaseModel):
    """Body of `POST /v1/conversations`."""

    model_config = _STRICT
    items: list[ConversationItemInput] | None = Field(default=None, max_length=MAX_ITEMS)
    """The conversation's first items: history, with no turn started."""
    metadata: Metadata | None = None


class UpdateConversation(BaseModel):
    """Body of `POST /v1/conversations/{id}`: the metadata that replaces the old."""

    model_config = _STRICT
    metadata: Metadata | None


class AddItems(BaseModel):
    """Body of `POST /v1/conversations/{id}/items`."""

    model_config = _STRICT
    items: list[ConversationItemInput] = Field(max_length=MAX_ITEMS)
