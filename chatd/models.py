"""Model configuration and the structured error shape shared by providers, workflow and API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from chatd.output_format import OutputFormat

__all__ = ["ErrorKind", "ModelConfig", "ModelError", "ProviderName", "WebSearchConfig"]

ProviderName = Literal[
    "anthropic", "openai", "google", "anthropic-bedrock", "anthropic-vertex", "azure-openai", "demo"
]
"""`demo` is the built-in scripted model (the fake provider on the Anthropic wire format);
`anthropic-bedrock`, `anthropic-vertex` and `azure-openai` are Claude on AWS Bedrock and on
Google Vertex AI, and OpenAI on Azure, named by the platform's model ids (an Azure model's
name is its deployment's)."""

_NO_WEB_SEARCH = {
    "anthropic-bedrock": "Claude on Bedrock has no web search tool",
    "azure-openai": "Azure OpenAI has no web search tool",
}
"""Platforms that lack a feature, refused when a chat asks for it, not mid-turn."""

ErrorKind = Literal[
    "rate_limit",
    "overloaded",
    "timeout",
    "startup_timeout",
    "auth",
    "config",
    "context_exceeded",
    "invalid_request",
    "output_format",
    "content_filtered",
    "unavailable",
    "internal",
    "generic",
]
"""`unavailable`: a dependency stayed down past the turn's deadline; `internal`: our own bug;
`output_format`: the model's answer did not fit the chat's structured output format;
`content_filtered`: the provider withheld the answer (a safety block, a recitation)."""


class WebSearchConfig(BaseModel):
    """Opt-in provider-executed web search (Anthropic `web_search`, OpenAI Responses)."""

    allowed_domains: list[str] | None = Field(default=None, max_length=100)
    blocked_domains: list[str] | None = Field(default=None, max_length=100)
    """Anthropic only (OpenAI supports an allow list only)."""
    max_uses: int | None = Field(default=None, ge=1, le=50)
    """Anthropic only: searches per model step."""
    user_location: dict[str, str] | None = None
    """Where the user is, roughly (`type: approximate`, city, region, country, timezone),
    for local results; both providers take it in this shape."""
    search_context_size: Literal["low", "medium", "high"] | None = None
    """OpenAI only: how much of each page the search reads."""


class ModelConfig(BaseModel):
    """Which model a chat uses and how it is called."""

    # The document says what `_platform_has_it` refuses: a schema-valid model is served.
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["provider", "web_search"],
                "properties": {
                    "provider": {"enum": list[JsonValue](sorted(_NO_WEB_SEARCH))},
                    "web_search": {"type": "object"},
                },
            }
        }
    )

    provider: ProviderName = "demo"
    name: str = Field(
        default="demo", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@+-]+$"
    )
    """The provider's model id (`claude-sonnet-4-5`, `ft:gpt-4o:org::id`, `org/model@v1`), in
    the characters real ids use. It reaches Temporal in the `ChatModel` search attribute,
    which has a size limit of its own: bounded here, a bad name is a 400, not a refusal."""
    openai_api: Literal["chat", "responses"] = "chat"
    """Which OpenAI API to stream from (ignored for other providers)."""
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    thinking_budget_tokens: int | None = Field(default=None, ge=1024)
    """Anthropic extended thinking budget."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """OpenAI reasoning effort."""
    context_limit: int | None = Field(default=None, ge=1)
    openai_chain: bool = False
    """OpenAI Responses chain mode: responses are stored (`store: true`) and a turn's first
    step sends `previous_response_id` plus the new messages instead of the whole history."""
    web_search: WebSearchConfig | None = None
    """Let the provider search the web (off unless set)."""
    verbosity: Literal["low", "medium", "high"] | None = None
    """OpenAI's answer length hint (`text.verbosity`); other providers have none."""
    output_format: OutputFormat | None = None
    """The JSON the final answer must be (plain text unless set); it holds for the chat's
    fallback models too."""

    @model_validator(mode="after")
    def _platform_has_it(self) -> ModelConfig:
        lacking = _NO_WEB_SEARCH.get(self.provider)
        if lacking and self.web_search is not None:
            raise ValueError(f"web_search: {lacking}")
        return self

    def for_prose(self) -> ModelConfig:
        """This model for chatd's own requests (titles, summaries, advice): plain text,
        whatever format the chat's answers take."""
        if self.output_format is None:
            return self
        return self.model_copy(update={"output_format": None})

    @property
    def base_name(self) -> str:
        """The model's name without a cloud's prefix (Bedrock's
        `us.anthropic.claude-sonnet-4-5-...-v1:0` is `claude-sonnet-4-5-...-v1:0`), as the
        tables of windows and prices know it."""
        return self.name.rpartition("anthropic.")[2]

    @property
    def label(self) -> str:
        """`provider/name`, as shown in search attributes and activity summaries."""
        return f"{self.provider}/{self.name}"


class ModelError(BaseModel):
    """A classified model/provider error; persisted as the chat's `last_error`."""

    message: str
    kind: ErrorKind = "generic"
    provider: str | None = None
    retryable: bool = False
    status_code: int | None = None
    retry_after_ms: int | None = None
    """The provider's retry-after hint, if it sent one."""
    detail: dict[str, Any] = Field(default_factory=dict)
