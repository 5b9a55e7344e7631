"""How an MCP server's tools and tool results map onto ours.

Pure functions over the SDK's types: a listed tool becomes an `McpTool` (named
`<server>__<tool>` for the model, with the MCP annotation defaults applied), a call's result an
`McpResult` whose output is one of our `ToolOutput` shapes.
"""

from __future__ import annotations

import json
import logging

import mcp.types as mcp_types

from chatd.mcp.tools import QUALIFIED_NAME, McpResult, McpTool, qualified_name
from chatd.tools.base import MediaOutput

__all__ = ["mcp_result", "mcp_tool"]

log = logging.getLogger(__name__)


def mcp_tool(server: str, tool: mcp_types.Tool) -> McpTool | None:
    """Our view of a listed tool; None (with a warning) if its name can't reach a model."""
    name = qualified_name(server, tool.name)
    if not tool.name or not QUALIFIED_NAME.match(name):
        log.warning(
            "MCP server %r: skipping tool %r: %r is not a valid tool name for models "
            "(1 to 64 letters, digits, '_' or '-')",
            server,
            tool.name,
            name,
        )
        return None
    hints = tool.annotations or mcp_types.ToolAnnotations()
    read_only = hints.read_only_hint is True
    return McpTool(
        server=server,
        name=tool.name,
        qualified_name=name,
        description=tool.description or "",
        input_schema=tool.input_schema,
        read_only=read_only,
        destructive=not read_only and hints.destructive_hint is not False,
        idempotent=read_only or hints.idempotent_hint is True,
    )


def mcp_result(result: mcp_types.CallToolResult) -> McpResult:
    """Our output for a call's result.

    - structured content (an object or array) is the output as is, unless the call failed
      (an error reads better as its text);
    - a result whose only content is one image is a `MediaOutput`; so is the first image when
      no content is text (any other images are dropped: one output holds one image);
    - otherwise the text contents joined by newlines, with a one-line note for each content
      left out (images, audio, resource links). A text holding JSON stays a string: the model
      reads it just as well, and we don't guess at the server's intent.
    """
    structured = result.structured_content
    if isinstance(structured, dict | list) and not result.is_error:
        return McpResult(output=structured)
    if structured is not None and not result.is_error and not result.content:
        return McpResult(output=json.dumps(structured))
    images = [block for block in result.content if isinstance(block, mcp_types.ImageContent)]
    texts = [_text_of(block) for block in result.content]
    if images and all(text is None for text in texts):
        first = images[0]
        return McpResult(
            output=MediaOutput(media_type=first.mime_type, data=first.data),
            is_error=result.is_error,
        )
    lines = [
        text if text is not None else _left_out(block)
        for block, text in zip(result.content, texts, strict=True)
    ]
    return McpResult(output="\n".join(lines), is_error=result.is_error)


def _text_of(block: mcp_types.ContentBlock) -> str | None:
    """The block's text, for text and embedded text resources; None for anything else."""
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.EmbeddedResource) and isinstance(
        block.resource, mcp_types.TextResourceContents
    ):
        return block.resource.text
    return None


def _left_out(block: mcp_types.ContentBlock) -> str:
    """A note standing for content a text output can't carry."""
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return f"[{block.type} ({block.mime_type}) left out]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.uri}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        return f"[binary resource {block.resource.uri} ({block.resource.mime_type}) left out]"
    return f"[{block.type} content left out]"
