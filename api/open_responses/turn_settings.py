"""A `POST /v1/responses` request as its turn's settings: the model (with sampling, reasoning,
search and output format), the system prompt, the client's tools and how the model may call
them, and the request fields a Response object repeats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.errors import ApiError
from api.open_responses.client_tools import model_tools
from api.open_responses.requests import AllowedTools, CreateResponse, SpecificFunction
from api.state import GatewayState
from chatd.models import ModelConfig, WebSearchConfig
from chatd.store.chats import DynamicTool
from chatd.tool_policy import PolicyDecision
from chatd.tool_use import ToolUse
from chatd.tools.names import MCP_SEPARATOR

__all__ = [
    "TurnSettings",
    "dynamic_tools_of",
    "echoed_request",
    "mcp_servers_of",
    "request_model",
    "tool_policy_of",
    "tool_use_of",
    "turn_settings_of",
]

_THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
"""Anthropic's thinking budget for a Responses `reasoning.effort`."""


@dataclass(frozen=True)
class TurnSettings:
    """What a request sets for its turn: the model, the system prompt, the client tools,
    how the model may call tools, and when the context is compacted."""

    model: ModelConfig
    system: str | None
    tools: list[DynamicTool]
    tool_use: ToolUse
    compaction_threshold: float


def turn_settings_of(body: CreateResponse, model: ModelConfig, system: list[str]) -> TurnSettings:
    """The request's settings for its turn: `model` is the one its name resolved to, and
    `system` the system messages of its input (and of a stored conversation it restates),
    which follow its `instructions`."""
    given = [body.instructions or "", *system]
    return TurnSettings(
        request_model(body, model),
        "\n\n".join(t for t in given if t) or None,
        dynamic_tools_of(body),
        tool_use_of(body),
        # "auto": compact at 70 % of the window; "disabled": never, so an overflow fails.
        compaction_threshold=0.7 if body.truncation == "auto" else 0.0,
    )


def request_model(body: CreateResponse, model: ModelConfig) -> ModelConfig:
    """The model with the request's sampling, output limit and reasoning effort."""
    effort = body.reasoning.effort if body.reasoning else None
    changes: dict[str, Any] = {
        "max_output_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
    }
    if body.text is not None:
        changes["output_format"] = body.text.output_format()
        changes["verbosity"] = body.text.verbosity
    search = body.web_search()
    if search is not None:
        domains = search.filters.allowed_domains if search.filters else None
        where = search.user_location.model_dump(exclude_none=True) if search.user_location else None
        changes["web_search"] = WebSearchConfig(
            allowed_domains=domains,
            user_location=where,
            search_context_size=search.search_context_size,
        )
        if model.provider == "openai":
            changes["openai_api"] = "responses"  # OpenAI searches on its Responses API only
    if effort and effort != "none":
        if model.provider == "anthropic":
            changes["thinking_budget_tokens"] = _THINKING_BUDGETS[effort]
        else:
            changes["reasoning_effort"] = effort
    return model.model_copy(update={k: v for k, v in changes.items() if v is not None})


def tool_use_of(body: CreateResponse) -> ToolUse:
    """`tool_choice` and `parallel_tool_calls` as the chat keeps them."""
    choice = body.tool_choice
    parallel = body.parallel_tool_calls
    if isinstance(choice, SpecificFunction):
        return ToolUse(mode="required", only=[choice.name], parallel=parallel)
    if isinstance(choice, AllowedTools):
        return ToolUse(mode=choice.mode, only=[t.name for t in choice.tools], parallel=parallel)
    return ToolUse(mode=choice, parallel=parallel)


def dynamic_tools_of(body: CreateResponse) -> list[DynamicTool]:
    """The client's tools as the chat's, under the names the model calls them by."""
    return model_tools(body.client_tools())[0]


def mcp_servers_of(state: GatewayState, body: CreateResponse) -> list[str]:
    """`chatd:mcp_servers` and the `mcp` tools' `server_label`s: servers the operator
    configured, by name."""
    names = [*(body.chatd_mcp_servers or []), *(t.server_label for t in body.mcp_tools())]
    unknown = [n for n in names if n not in state.mcp_servers]
    if unknown:
        raise ApiError(
            400,
            "invalid_request",
            f"unknown MCP servers {unknown}: a chat selects servers the operator configured",
            {"param": "tools", "known": sorted(state.mcp_servers)},
        )
    return list(dict.fromkeys(names))


def tool_policy_of(body: CreateResponse) -> dict[str, PolicyDecision]:
    """`chatd:tool_policy`, with each `mcp` tool's `require_approval` for its server's
    tools."""
    policy: dict[str, PolicyDecision] = {}
    for tool in body.mcp_tools():
        if tool.require_approval is not None:
            decision: PolicyDecision = "ask" if tool.require_approval == "always" else "auto"
            policy[f"{tool.server_label}{MCP_SEPARATOR}*"] = decision
    return {**policy, **(body.chatd_tool_policy or {})}


def echoed_request(body: CreateResponse) -> dict[str, Any]:
    """The request fields a Response object repeats."""
    return {
        "model": body.model,
        "instructions": body.instructions,
        "tools": body.client_tools(),
        "tool_choice": body.tool_choice
        if isinstance(body.tool_choice, str)
        else body.tool_choice.model_dump(),
        "parallel_tool_calls": body.parallel_tool_calls,
        "truncation": body.truncation,
        "max_output_tokens": body.max_output_tokens,
        "reasoning": body.reasoning.model_dump() if body.reasoning else None,
        "include": body.include,
        "metadata": body.metadata,
        "background": body.background,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "text": body.text.model_dump(by_alias=True, exclude_none=True) if body.text else None,
        "service_tier": body.service_tier,
        "prompt_cache_key": body.prompt_cache_key,
        "safety_identifier": body.safety_identifier,
        "user": body.user,
        "chatd:events": body.chatd_events,
    }
