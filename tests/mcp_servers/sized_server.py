"""An MCP server (stdio, the real SDK) whose tools are as large as a test asks: for a gateway's bound on a tool list.

Run it as ``python tests/mcp_servers/sized_server.py``. ``SIZED_TOOLS``: a comma-separated list of tool names (default
``alpha,bravo,charlie,delta``); each tool ``<name>_export`` ("Export the <name> ledger ...") has one parameter whose
description is padded to ``SIZED_BYTES`` characters (default 250,000: under the gateway's 256,000-character limit on
one schema, so each tool is listed). A call answers with the tool's name.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

NAMES = [n for n in os.environ.get("SIZED_TOOLS", "alpha,bravo,charlie,delta").split(",") if n]
PADDING = int(os.environ.get("SIZED_BYTES", "250000"))


def _tool(name: str) -> types.Tool:
    filler = f"the {name} ledger filter " + "z" * PADDING
    schema = {"type": "object", "properties": {"filter": {"type": "string", "description": filler}}}
    return types.Tool(name=f"{name}_export", description=f"Export the {name} ledger as a file.", input_schema=schema)


TOOLS = {tool.name: tool for tool in map(_tool, NAMES)}


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=list(TOOLS.values()))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} ran")])


server = Server("sized", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
