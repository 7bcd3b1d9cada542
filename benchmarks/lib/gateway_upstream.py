"""The upstream MCP server of `python benchmarks/gateway.py`: the bundled demo catalog over stdio, answering at once.

Run as ``python -m benchmarks.lib.gateway_upstream``. Every tool of the demo catalog (197 tools of
calendars, email, files, ...) is listed with its real schema; a call answers with one line naming the
tool and its arguments, so the benchmark can check that each call reached the tool it asked for and
measures the gateway, not the tool's work.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["reply_text", "main"]


def reply_text(name: str, arguments: dict[str, Any]) -> str:
    """What a call answers: the benchmark compares it with the call it made."""
    return f"{name} called with " + json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def main() -> None:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel.server import NotificationOptions, Server
    from mcp.server.stdio import stdio_server

    from toolsearch.demo import demo_tools

    tools = [types.Tool.model_validate(tool.to_mcp()) for tool in demo_tools()]
    names = {tool.name for tool in tools}

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        if params.name not in names:
            text = f"unknown tool {params.name!r}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        text = reply_text(params.name, arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("bench-upstream", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options(NotificationOptions()))

    anyio.run(serve)


if __name__ == "__main__":
    main()
