"""An MCP server whose tools answer with the arguments they were called with, as JSON.

Run it as ``python tests/mcp_servers/args_server.py``. With ``ARGS_PARAMETER=<name>`` its
`forecast` tool also takes a parameter of that name (to test a gateway refusing a colliding field).
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

_PROPERTIES: dict[str, Any] = {"city": {"type": "string", "description": "The city"}}
if os.environ.get("ARGS_PARAMETER"):
    _PROPERTIES[os.environ["ARGS_PARAMETER"]] = {"type": "string"}
TOOLS = [
    types.Tool(
        name="forecast",
        description="Weather forecast for a city; answers with the arguments it received.",
        input_schema={"type": "object", "properties": _PROPERTIES, "required": ["city"]},
    )
]


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    received = json.dumps(params.arguments or {}, sort_keys=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=received)])


server = Server("args", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
