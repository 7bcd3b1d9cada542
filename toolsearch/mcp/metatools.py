"""The gateway's own tools, shared by both protocol eras: the `call_tool` proxy, found definitions, argument checks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from ..executor import argument_problems
from ..metatool import ToolSearchMetaTool
from ..tools import Tool
from .source import error_result, mcp_definition, upstream_of

__all__ = [
    "CALL_TOOL",
    "CONTEXT_ARGUMENT",
    "MODERN_SEARCH_DESCRIPTION",
    "call_tool_definition",
    "call_tool_target",
    "compact_schema",
    "found_definition",
    "schema_problems",
    "text_result",
    "with_text",
]

CALL_TOOL = "call_tool"
CONTEXT_ARGUMENT = "context"

MODERN_SEARCH_DESCRIPTION = (
    "Search the tool catalog for tools you do not have yet. Returns the best-matching tools' full definitions "
    "(name, server, description, input schema, annotations); call one next through `call_tool` with its name and "
    "arguments. "
    "Call it whenever you need a capability none of your current tools provides; you may call it several times "
    "with different queries. Pass the `context` it returns to later tool_search and call_tool calls."
)


def text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


def compact_schema(tool: Tool) -> str:
    return json.dumps(dict(tool.input_schema), separators=(",", ":"), ensure_ascii=False)


def call_tool_definition(metatool: ToolSearchMetaTool, *, context: bool = False) -> Tool:
    """The `call_tool` proxy: reaches any tool the caller may use, by the name `tool_search` gave."""
    properties: dict[str, Any] = {
        "name": {"type": "string", "description": f"The tool's name as {metatool.name} returned it"},
        "arguments": {"type": "object", "description": "The tool's arguments, matching its input schema"},
    }
    if context:
        properties[CONTEXT_ARGUMENT] = {
            "type": "string",
            "description": f"The context {metatool.name} returned (optional)",
        }
    return Tool(
        name=CALL_TOOL,
        description=(
            f"Call a tool that {metatool.name} found, by name. Use it when found tools do not appear "
            "in your tool list; a call with wrong arguments returns the tool's input schema."
        ),
        input_schema={"type": "object", "properties": properties, "required": ["name"]},
    )


def modern_search_definition(tool: Tool) -> Tool:
    """`tool_search` as the 2026-07-28 era lists it: the same search, plus the optional `context` handle."""
    schema = dict(tool.input_schema)
    properties = dict(schema.get("properties") or {})
    properties[CONTEXT_ARGUMENT] = {
        "type": "string",
        "description": "The context an earlier tool_search returned (optional): keeps what this conversation found",
    }
    schema["properties"] = properties
    return Tool(name=tool.name, description=MODERN_SEARCH_DESCRIPTION, input_schema=schema)


def call_tool_target(
    metatool: ToolSearchMetaTool, arguments: Mapping[str, Any]
) -> tuple[str, dict[str, Any]] | types.CallToolResult:
    """(tool name, its arguments) from `call_tool`'s arguments, or the tool error explaining what is wrong."""
    target = arguments.get("name")
    inner = arguments.get("arguments")
    if inner is None:
        inner = {}
    if not isinstance(target, str) or not target:
        return error_result(f'{CALL_TOOL} needs "name": the name of a tool {metatool.name} found.')
    if not isinstance(inner, Mapping):
        return error_result(f'{CALL_TOOL}: "arguments" must be a JSON object of the tool\'s arguments.')
    if target in (metatool.name, CALL_TOOL):
        return error_result(f"{target} cannot be called through {CALL_TOOL}; call it directly.")
    return target, dict(inner)


def schema_problems(tool: Tool, arguments: Mapping[str, Any]) -> types.CallToolResult | None:
    """The executor's argument check against the upstream schema; the error carries the schema."""
    problems = argument_problems(tool, arguments)
    if not problems:
        return None
    return error_result(
        f"Arguments for {tool.name!r} do not match its input schema: {'; '.join(problems)}. Fix them and call "
        f"it again. Schema: {compact_schema(tool)}"
    )


def found_definition(tool: Tool) -> dict[str, Any]:
    """What a modern `tool_search` returns for one found tool: its server and its full definition, as a
    handshake-era client's tool list shows it (`mcp_definition`: the title, annotations and output schema the
    upstream gave, cleaned and bounded when it was listed), so a 2026 client can confirm a destructive tool or check
    a result's structured content as well."""
    origin = upstream_of(tool)
    shown = mcp_definition(tool).model_dump(by_alias=True, exclude_none=True, mode="json")
    entry: dict[str, Any] = {"name": tool.name, "server": origin[0] if origin else None}
    for key in ("title", "description", "inputSchema", "outputSchema", "annotations"):
        if key in shown:
            entry[key] = shown[key]
    return entry


def found_text(entry: Mapping[str, Any]) -> str:
    """One found tool as the search's text shows it: its description on one line, so an upstream's text cannot
    begin a line that looks like the gateway's (another tool's entry, a context to pass); the structured
    content keeps it as written."""
    server = f" (server {entry['server']})" if entry.get("server") else ""
    schema = json.dumps(entry["inputSchema"], separators=(",", ":"), ensure_ascii=False)
    description = " ".join(str(entry["description"]).split())
    text = f"- {entry['name']}{server}: {description}\n  input schema: {schema}"
    if entry.get("annotations"):  # the upstream's hints (destructive, read-only...): the model weighs a call by them
        text += f"\n  annotations: {json.dumps(entry['annotations'], separators=(',', ':'), ensure_ascii=False)}"
    return text


def with_text(result: types.CallToolResult) -> types.CallToolResult:
    """A result whose only content is structured gets it as text too (a proxied call is read as text)."""
    if result.structured_content is not None and not result.content:
        text = json.dumps(result.structured_content, ensure_ascii=False)
        return result.model_copy(update={"content": [types.TextContent(type="text", text=text)]})
    return result
