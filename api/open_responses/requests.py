"""The body of `POST /v1/responses`, as Open Responses defines it, less what we refuse.

A field we don't support is refused by name (400), never ignored: a client that asks for
something gets it or learns it can't. Items in `input` are checked here; turning them into
transcript parts is `api.open_responses.inputs`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from api.open_responses.client_tools import model_tools
from chatd.output_format import OutputFormat
from chatd.tool_policy import ToolPolicy
from chatd.tools.names import client_tool_name

__all__ = [
    "AllowedTools",
    "ApprovalResponseItem",
    "AssistantContent",
    "CompactRequest",
    "CompactionItem",
    "CreateResponse",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "FunctionTool",
    "InputItem",
    "ItemReference",
    "McpTool",
    "MessageItem",
    "ReasoningItem",
    "SpecificFunction",
    "ToolChoice",
    "UserContent",
    "WebSearchTool",
]

_STRICT = ConfigDict(extra="forbid")
_DESCRIPTION = 16_384
"""A client tool's description, at most (Codex's `spawn_agent` has some 6,000 characters)."""
_NAME = r"^[A-Za-z0-9_-]+$"


class InputText(BaseModel):
    model_config = _STRICT
    type: Literal["input_text"]
    text: str


class InputImage(BaseModel):
    model_config = _STRICT
    type: Literal["input_image"]
    image_url: str | None = None
    """A `data:image/...;base64,` URL (the server fetches nothing on a client's behalf)."""
    detail: Literal["low", "high", "auto"] | None = None


class InputFile(BaseModel):
    model_config = _STRICT
    type: Literal["input_file"]
    filename: str | None = Field(default=None, max_length=255)
    file_data: str | None = None
    """A `data:<media type>;base64,` URL, or bare base64 with a `filename` to name its type."""


class OutputText(BaseModel):
    model_config = _STRICT
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] = []
    logprobs: list[dict[str, Any]] | None = None


UserContent = Annotated[InputText | InputImage | InputFile, Field(discriminator="type")]
AssistantContent = OutputText


class MessageItem(BaseModel):
    """A message; `type` may be left out."""

    model_config = _STRICT
    type: Literal["message"] = "message"
    id: str | None = None
    status: str | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[UserContent] | list[AssistantContent]
    phase: Literal["commentary", "final_answer"] | None = None

    @model_validator(mode="after")
    def _content_fits_role(self) -> MessageItem:
        if isinstance(self.content, str):
            return self
        kinds = {part.type for part in self.content}
        allowed = {
            "user": {"input_text", "input_image", "input_file"},
            "assistant": {"output_text"},
            "system": {"input_text"},
            "developer": {"input_text"},
        }[self.role]
        if not kinds <= allowed:
            raise ValueError(
                f"a {self.role} message's content holds {sorted(allowed)} only,"
                f" not {sorted(kinds - allowed)}"
            )
        return self


class FunctionCallItem(BaseModel):
    """A function call the model made earlier, given back as history."""

    model_config = _STRICT
    type: Literal["function_call"]
    id: str | None = None
    call_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=64, pattern=_NAME)
    arguments: str
    namespace: str | None = Field(default=None, max_length=64, pattern=_NAME)
    status: str | None = None


class CustomToolCallItem(BaseModel):
    """A call of a custom tool the model made earlier: its freeform `input`."""

    model_config = _STRICT
    type: Literal["custom_tool_call"]
    id: str | None = None
    call_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=64, pattern=_NAME)
    input: str
    namespace: str | None = Field(default=None, max_length=64, pattern=_NAME)
    status: str | None = None


class CustomToolCallOutputItem(BaseModel):
    """The client's result of a custom tool call."""

    model_config = _STRICT
    type: Literal["custom_tool_call_output"]
    id: str | None = None
    call_id: str = Field(min_length=1, max_length=64)
    output: str | list[InputText]
    status: str | None = None


class LocalShellAction(BaseModel):
    type: Literal["exec"] = "exec"
    command: list[str] = Field(max_length=1000)
    working_directory: str | None = None
    timeout_ms: int | None = None
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None


class LocalShellCallItem(BaseModel):
    """A shell command the model asked the client to run earlier."""

    model_config = _STRICT
    type: Literal["local_shell_call"]
    id: str | None = None
    call_id: str = Field(min_length=1, max_length=64)
    action: LocalShellAction
    status: str | None = None


class LocalShellCallOutputItem(BaseModel):
    """The client's result of a shell command: `id` names the call (as OpenAI's does)."""

    model_config = _STRICT
    type: Literal["local_shell_call_output"]
    id: str = Field(min_length=1, max_length=64)
    call_id: str | None = Field(default=None, max_length=64)
    output: str
    status: str | None = None


class FunctionCallOutputItem(BaseModel):
    """The client's result of a function call."""

    model_config = _STRICT
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str = Field(min_length=1, max_length=64)
    output: str | list[UserContent]
    """Text, or content parts: text, and an image or a file (Codex's `view_image`)."""
    status: str | None = None

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(part.text for part in self.output if isinstance(part, InputText))

    def media(self) -> InputImage | InputFile | None:
        """The output's image or file, if it has one (the first)."""
        if isinstance(self.output, str):
            return None
        return next((p for p in self.output if not isinstance(p, InputText)), None)


class ApprovalResponseItem(BaseModel):
    """A person's decision on a call waiting for approval (an `mcp_approval_request` item,
    for MCP and built-in tools alike)."""

    model_config = _STRICT
    type: Literal["mcp_approval_response"]
    id: str | None = None
    approval_request_id: str = Field(min_length=1, max_length=200)
    approve: bool
    reason: str | None = Field(default=None, max_length=4000)


class CompactionItem(BaseModel):
    """A summary of earlier context made by `POST /v1/responses/compact`: opaque to the
    client, read only by this server (`api.open_responses.sealing`)."""

    model_config = _STRICT
    type: Literal["compaction"]
    id: str | None = None
    encrypted_content: str = Field(min_length=1, max_length=1_000_000)
    created_by: str | None = None


class ReasoningItem(BaseModel):
    """A model's reasoning, given back: its `encrypted_content` (sealed by this deployment)
    restores the provider's own reasoning state; one this deployment can't read is dropped."""

    model_config = _STRICT
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = Field(default=None, max_length=2_000_000)
    status: str | None = None


class OutputEchoItem(BaseModel):
    """An output item of ours a client gives back with its conversation that the model
    doesn't need again (a provider's search, a tool the workers ran, an approval request):
    taken and dropped."""

    model_config = ConfigDict(extra="allow")
    type: Literal["web_search_call", "mcp_call", "mcp_list_tools", "mcp_approval_request"]
    id: str | None = None


class ItemReference(BaseModel):
    """An earlier output item by id, as clients send their copy of a conversation. Taken
    only where that copy is not needed: before the function results that continue the
    response waiting for them."""

    model_config = _STRICT
    type: Literal["item_reference"]
    id: str = Field(min_length=1, max_length=200)


InputItem = Annotated[
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | CustomToolCallItem
    | CustomToolCallOutputItem
    | LocalShellCallItem
    | LocalShellCallOutputItem
    | ApprovalResponseItem
    | CompactionItem
    | ReasoningItem
    | OutputEchoItem
    | ItemReference,
    Field(discriminator="type"),
]


class FunctionTool(BaseModel):
    """A function the client runs: the model's call ends the response `completed` with a
    `function_call` item, and the client answers with `function_call_output`."""

    model_config = _STRICT
    type: Literal["function"] = "function"
    name: str = Field(min_length=1, max_length=64, pattern=_NAME)
    description: str | None = Field(default=None, max_length=_DESCRIPTION)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _parameters_are_a_schema(self) -> FunctionTool:
        if self.parameters is not None:
            try:
                Draft202012Validator.check_schema(self.parameters)
            except SchemaError as err:
                raise ValueError(f"parameters is not a JSON Schema: {err.message}") from err
            if self.parameters.get("type", "object") != "object":
                raise ValueError("parameters must describe an object")
        return self


class CustomTool(BaseModel):
    """A tool whose input is freeform text (or text a grammar accepts), run by the client:
    the model sees a function of one string, and calls come back as `custom_tool_call`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["custom"]
    name: str = Field(min_length=1, max_length=64, pattern=_NAME)
    description: str | None = Field(default=None, max_length=_DESCRIPTION)
    format: dict[str, Any] | None = None
    defer_loading: bool | None = None


class NamespaceTool(BaseModel):
    """Function and custom tools grouped under a name (Codex groups its sub-agent tools so):
    the model sees each, as `<namespace>_<name>`; calls come back with their `namespace`."""

    model_config = _STRICT
    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=32, pattern=_NAME)
    description: str = Field(default="", max_length=_DESCRIPTION)
    tools: list[Annotated[FunctionTool | CustomTool, Field(discriminator="type")]] = Field(
        min_length=1, max_length=64
    )


class LocalShellTool(BaseModel):
    """Shell commands the client runs: calls come back as `local_shell_call` items."""

    model_config = _STRICT
    type: Literal["local_shell"]


class McpTool(BaseModel):
    """An MCP server the operator configured, by its name (`server_label`): the chat offers
    its tools; `require_approval: always` asks a person before each call."""

    model_config = _STRICT
    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=100)
    require_approval: Literal["always", "never"] | None = None


class WebSearchFilters(BaseModel):
    model_config = _STRICT
    allowed_domains: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        default=None, max_length=100
    )


class UserLocation(BaseModel):
    model_config = _STRICT
    type: Literal["approximate"] = "approximate"
    city: str | None = Field(default=None, max_length=200)
    region: str | None = Field(default=None, max_length=200)
    country: str | None = Field(default=None, max_length=2)
    timezone: str | None = Field(default=None, max_length=100)


class WebSearchTool(BaseModel):
    """The provider's own web search (Anthropic's or OpenAI's), run while the model streams:
    each search is a `web_search_call` output item."""

    model_config = _STRICT
    type: Literal["web_search", "web_search_preview", "web_search_2025_08_26"]
    filters: WebSearchFilters | None = None
    user_location: UserLocation | None = None
    search_context_size: Literal["low", "medium", "high"] | None = None
    """OpenAI's hint of how much of each page to read (Anthropic has none)."""
    external_web_access: bool | None = None
    """Accepted: the providers' searches here are always live."""
    search_content_types: list[Literal["text", "image"]] | None = Field(default=None, max_length=2)
    """Accepted: what a search returns is the provider's choice."""


class SpecificFunction(BaseModel):
    """`tool_choice` naming one function: the model must call it."""

    model_config = _STRICT
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=_NAME)


class AllowedTools(BaseModel):
    """`tool_choice` limiting the model to some function tools, in a mode."""

    model_config = _STRICT
    type: Literal["allowed_tools"]
    tools: list[SpecificFunction] = Field(min_length=1, max_length=128)
    mode: Literal["auto", "required", "none"] = "auto"


ToolChoice = (
    Literal["auto", "none", "required"]
    | Annotated[SpecificFunction | AllowedTools, Field(discriminator="type")]
)


class Reasoning(BaseModel):
    model_config = _STRICT
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class TextFormat(BaseModel):
    model_config = _STRICT
    type: Literal["text"]


class JsonSchemaFormat(BaseModel):
    """Structured output: the final answer is JSON that fits `schema` (checked when
    `strict`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[\w-]+$")
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = Field(default=None, max_length=4096)
    strict: bool | None = None

    @field_validator("json_schema")
    @classmethod
    def _is_a_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as err:
            raise ValueError(f"schema is not a JSON Schema: {err.message}") from err
        return schema

    def output_format(self) -> OutputFormat:
        return OutputFormat(
            type="json_schema",
            name=self.name,
            description=self.description,
            schema=self.json_schema,
            strict=bool(self.strict),
        )


class JsonObjectFormat(BaseModel):
    """JSON mode: the final answer is a JSON object."""

    model_config = _STRICT
    type: Literal["json_object"]


class TextOptions(BaseModel):
    """The answer's format (text, or structured output) and OpenAI's verbosity hint."""

    model_config = _STRICT
    format: (
        Annotated[TextFormat | JsonSchemaFormat | JsonObjectFormat, Field(discriminator="type")]
        | None
    ) = None
    verbosity: Literal["low", "medium", "high"] | None = None

    def output_format(self) -> OutputFormat | None:
        """The format as the chat's model keeps it (None: plain text)."""
        if isinstance(self.format, JsonSchemaFormat):
            return self.format.output_format()
        if isinstance(self.format, JsonObjectFormat):
            return OutputFormat(type="json_object")
        return None


HOSTED_TOOLS = frozenset(
    {
        "file_search",
        "image_generation",
        "code_interpreter",
        "computer",
        "computer_use",
        "computer_use_preview",
        "tool_search",
        "programmatic_tool_calling",
        "shell",
        "apply_patch",
    }
)
"""Tools OpenAI runs (or whose calls need its own item kinds), which no provider here has."""

Includable = Literal[
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "web_search_call.action.sources",
    "web_search_call.results",
    "file_search_call.results",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
]


_NOT_SERVED = {
    "max_tool_calls": "not honoured here: a turn's tool calls are bounded by its step limit"
    " (the chat's max_steps); leave it out",
    "moderation": "no moderation runs on this deployment; leave it out",
    "prompt": "this deployment holds no prompt templates; send the prompt as `instructions`",
}


class ConversationRef(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1, max_length=200)


class CreateResponse(BaseModel):
    """Body of `POST /v1/responses`. Extensions are the `chatd:`-prefixed fields."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    model: str = Field(min_length=1, max_length=200)
    input: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[dict[str, Any]], Field(max_length=1000)]
    )
    """Checked item by item in `api.open_responses.inputs` (so an error names the item).
    Empty only to carry on a turn paused on its budget (`chatd:max_cost_usd`)."""
    instructions: str | None = Field(default=None, max_length=200_000)
    tools: list[
        Annotated[
            FunctionTool | NamespaceTool | CustomTool | LocalShellTool | McpTool | WebSearchTool,
            Field(discriminator="type"),
        ]
    ] = Field(default_factory=list, max_length=64)
    tool_choice: ToolChoice = "auto"
    """A forced choice (`required`, a named function) binds the response's first model step;
    later steps of the same response, after tools the workers ran, are `auto`."""
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=16, le=1_000_000)
    reasoning: Reasoning | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    metadata: dict[str, Annotated[str, Field(max_length=512)]] = Field(
        default_factory=dict, max_length=16
    )
    store: bool = True
    """False: once the response has ended its chat is readable through no API and is
    deleted; only a continuation on the WebSocket that made it may reference it."""
    background: bool = False
    stream: bool = False
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=200)
    conversation: Annotated[str, Field(min_length=1, max_length=200)] | ConversationRef | None = (
        None
    )
    """A chat id (or `{"id": ...}`): the response continues that chat."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    text: TextOptions | None = None
    include: list[Includable] = Field(default_factory=list)
    """Extra output to include. `reasoning.encrypted_content` gives each reasoning item the
    sealed state that restores it as input; logprobs come back empty; the rest name output
    of tools this deployment doesn't run, or parts it always includes."""
    prompt_cache_key: str | None = Field(default=None, max_length=200)
    """A provider cache hint: accepted and not used (the providers' own caching applies)."""
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: dict[str, Any] | None = None
    """Cache lifetimes and breakpoints: accepted and not used, as `prompt_cache_key`."""
    safety_identifier: str | None = Field(default=None, max_length=200)
    user: str | None = Field(default=None, max_length=200)
    """End-user identifiers for a provider's abuse checks: accepted and not forwarded."""
    service_tier: str | None = Field(default=None, max_length=32)
    """Accepted; every response is served at the one tier this deployment has (`default`)."""
    client_metadata: dict[str, Any] | None = None
    """A client's own bookkeeping (Codex sends it): accepted and not used."""
    stream_options: dict[str, Any] | None = None
    """Stream options (`include_obfuscation`): events carry no obfuscation padding here."""
    background_options: dict[str, Any] | None = None
    """Completion windows for background work: a background response here runs at once."""
    context_management: list[dict[str, Any]] | None = Field(default=None, max_length=8)
    """OpenAI's own context compaction settings: accepted; this deployment compacts as
    `truncation` says."""
    access_programs: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    """Options of programs and image tools this deployment doesn't have: accepted, unused."""
    top_logprobs: int | None = Field(default=None, ge=0, le=0)
    """Only 0: no provider's log probabilities are passed on."""
    max_tool_calls: Any = None
    """Refused when set: the model's calls are limited per turn by the chat's step limit."""
    moderation: Any = None
    """Refused when set: no moderation runs on this deployment."""
    prompt: Any = None
    """Refused when set: this deployment holds no prompt templates; send `instructions`."""

    @field_validator("max_tool_calls", "moderation", "prompt")
    @classmethod
    def _not_served(cls, value: Any, info: ValidationInfo) -> Any:
        """Fields whose answer this deployment can't give: served without them, the answer
        would silently differ."""
        if value is not None:
            raise ValueError(_NOT_SERVED[str(info.field_name)])
        return value

    chatd_tool_policy: ToolPolicy | None = Field(default=None, alias="chatd:tool_policy")
    chatd_tools: list[str] | None = Field(default=None, alias="chatd:tools", max_length=64)
    """Built-in tools the chat offers (none unless named), run by the workers."""
    chatd_mcp_servers: list[str] | None = Field(
        default=None, alias="chatd:mcp_servers", max_length=32
    )
    chatd_subagents: bool = Field(default=False, alias="chatd:subagents")
    chatd_fallback_models: list[str] | None = Field(
        default=None, alias="chatd:fallback_models", max_length=8
    )
    chatd_max_cost_usd: float | None = Field(
        default=None, alias="chatd:max_cost_usd", gt=0, le=1_000_000
    )
    """What the turn may spend (its subagents included): it pauses, the response ending
    `incomplete` (reason `budget`), rather than go over; a continuation with a higher one
    carries on the same turn."""
    chatd_events: bool = Field(default=False, alias="chatd:events")
    """Stream `chatd:` events too (`chatd:retry`, `chatd:queue`, `chatd:reset`): off by
    default, as clients that validate every event against the spec refuse unknown ones."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """An optional field sent as `null` takes its default, as OpenAI takes it (clients
        that send every field, LlamaIndex's, send nulls)."""
        if isinstance(data, dict):
            return {name: value for name, value in data.items() if value is not None}
        return data

    @field_validator("tools", mode="before")
    @classmethod
    def _function_by_default(cls, tools: Any) -> Any:
        """A tool without a `type` is a function (as the specification's default says); a
        hosted tool this deployment can't run is refused by name."""
        if not isinstance(tools, list):
            return tools
        for index, tool in enumerate(tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind in HOSTED_TOOLS:
                raise ValueError(
                    f"tools[{index}]: `{kind}` is a tool OpenAI hosts, which this deployment"
                    " doesn't run; offer a function tool instead"
                )
        return [
            {**t, "type": "function"} if isinstance(t, dict) and "type" not in t else t
            for t in tools
        ]

    @model_validator(mode="after")
    def _tool_names_are_the_client_s(self) -> CreateResponse:
        """Each client tool's name as the model calls it is unique, and not one of the
        worker's (ValueError)."""
        for name in model_tools(self.client_tools())[1]:
            client_tool_name(name)
        return self

    @model_validator(mode="after")
    def _tool_choice_names_tools(self) -> CreateResponse:
        """A tool choice names function tools of this request, and `required` needs a tool."""
        choice = self.tool_choice
        named = [choice] if isinstance(choice, SpecificFunction) else []
        named += choice.tools if isinstance(choice, AllowedTools) else []
        functions = {tool.name for tool in self.function_tools()}
        unknown = [f.name for f in named if f.name not in functions]
        if unknown:
            raise ValueError(
                f"tool_choice names {unknown}, which are not function tools of this request"
            )
        offers_tools = self.tools or self.chatd_tools or self.chatd_mcp_servers
        if choice == "required" and not (offers_tools or self.chatd_subagents):
            raise ValueError("tool_choice 'required' needs tools to choose from")
        return self

    def conversation_id(self) -> str | None:
        """The conversation the response continues, given as a string or an object."""
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation

    def web_search(self) -> WebSearchTool | None:
        return next((t for t in self.tools if isinstance(t, WebSearchTool)), None)

    def function_tools(self) -> list[FunctionTool]:
        """The client's functions, those in namespaces too."""
        functions = [tool for tool in self.tools if isinstance(tool, FunctionTool)]
        for group in self.tools:
            if isinstance(group, NamespaceTool):
                functions += [t for t in group.tools if isinstance(t, FunctionTool)]
        return functions

    def client_tools(self) -> list[dict[str, Any]]:
        """The tools the client runs, as the request gave them."""
        kinds = (FunctionTool, NamespaceTool, CustomTool, LocalShellTool)
        return [tool.model_dump() for tool in self.tools if isinstance(tool, kinds)]

    def mcp_tools(self) -> list[McpTool]:
        return [tool for tool in self.tools if isinstance(tool, McpTool)]

    @model_validator(mode="after")
    def _one_way_to_continue(self) -> CreateResponse:
        if self.previous_response_id and self.conversation:
            raise ValueError("give `previous_response_id` or `conversation`, not both")
        if not self.store and self.background:
            raise ValueError("a background response is read later, so it needs `store: true`")
        if not self.store and self.conversation:
            raise ValueError(
                "`store: false` can't add to a stored conversation: continue it with"
                " `previous_response_id` (the new response then forks it)"
            )
        return self


class CompactRequest(BaseModel):
    """Body of `POST /v1/responses/compact`: the conversation to summarise is
    `previous_response_id`'s, then `input`'s items."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=200)
    input: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1000)]
        | None
    ) = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=200)
    instructions: str | None = Field(default=None, max_length=200_000)
    """Accepted for the request's shape; the summary is written with our own prompt."""
    prompt_cache_key: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _something_to_compact(self) -> CompactRequest:
        if self.input is None and self.previous_response_id is None:
            raise ValueError("give `input`, `previous_response_id`, or both")
        return self
