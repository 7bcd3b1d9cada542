"""A tiny MCP server for tests: pages its tool list, grows on demand, fails and crashes on request.

Run it as ``python tests/mcp_servers/toy_server.py``; behaviour is set with environment variables:

- ``TOY_PAGE_SIZE``: tools per ``tools/list`` page (default 2, so listing always paginates)
- ``TOY_EXTRA_TOOLS``: how many filler tools (``filler_0``...) to add to the catalog
- ``TOY_STARTUP``: ``hang`` never answers ``initialize``; ``exit`` exits before speaking
- ``TOY_STDERR``: write this line to stderr at startup (to check who gets to see it)
- ``TOY_HTTP_PORT``: serve streamable HTTP on 127.0.0.1 at this port (0 picks one) instead of stdio;
  the URL is printed to stderr as ``toy server listening on <url>``
- ``TOY_LISTEN=1``: serve ``subscriptions/listen`` (2026-07-28), where ``grow`` announces its new tool
- ``TOY_ERA`` (stdio): ``dual`` (default, the SDK's own: the client's first request picks the era);
  ``handshake``: a server of the initialize era, which knows no ``server/discover`` and refuses
  2026-07-28 requests (-32601, as servers of that era answer an unknown method); ``modern``: a
  2026-07-28-only server, which refuses ``initialize`` naming the versions it speaks (-32022)
- ``TOY_PROBE`` (stdio): how a ``server/discover`` probe is met: ``close`` exits at once (as some
  servers of the initialize era do on an unknown method); ``garbage`` answers it with a line that is
  not JSON-RPC, then serves the handshake; ``garbage-all`` answers every request that way; ``silent``
  never answers it (and serves the handshake)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

PAGE_SIZE = max(1, int(os.environ.get("TOY_PAGE_SIZE", "2")))


def _tool(name: str, description: str, properties: dict[str, Any] | None = None) -> types.Tool:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if properties:
        schema["required"] = list(properties)
    return types.Tool(name=name, description=description, input_schema=schema)


TOOLS: dict[str, types.Tool] = {
    tool.name: tool
    for tool in (
        _tool(
            "echo", "Echo the given text back unchanged.", {"text": {"type": "string", "description": "Text to echo"}}
        ),
        _tool(
            "add_numbers",
            "Add two integers and return their sum.",
            {"a": {"type": "integer"}, "b": {"type": "integer"}},
        ),
        _tool("fail", "Always fails with a tool error, for testing error propagation."),
        _tool("crash", "Terminate this server process immediately, for testing crash handling."),
        _tool(
            "grow",
            "Register a new tool with the given name and announce it with tools/list_changed.",
            {"name": {"type": "string", "description": "Name of the new tool"}},
        ),
        _tool("pid", "Return the process id of this server."),
        _tool("sleep", "Wait the given number of seconds, then answer.", {"seconds": {"type": "number"}}),
    )
}
for _i in range(int(os.environ.get("TOY_EXTRA_TOOLS", "0"))):
    TOOLS[f"filler_{_i}"] = _tool(f"filler_{_i}", f"Filler tool number {_i} that does nothing useful.")


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    names = list(TOOLS)
    start = int(params.cursor) if params is not None and params.cursor else 0
    page = names[start : start + PAGE_SIZE]
    more = start + PAGE_SIZE < len(names)
    return types.ListToolsResult(tools=[TOOLS[n] for n in page], next_cursor=str(start + PAGE_SIZE) if more else None)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    name = params.name
    if name == "echo":
        return _text(str(args.get("text", "")))
    if name == "add_numbers":
        return _text(str(int(args["a"]) + int(args["b"])))
    if name == "fail":
        return _text("this tool always fails", error=True)
    if name == "crash":
        sys.stderr.write("toy server: crashing on request\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "grow":
        new = str(args.get("name") or f"grown_{len(TOOLS)}")
        TOOLS[new] = _tool(new, f"A tool named {new}, added at run time.")
        await ctx.session.send_tool_list_changed()
        await BUS.publish(ToolsListChanged())
        return _text(f"added {new}")
    if name == "pid":
        return _text(str(os.getpid()))
    if name == "sleep":
        await anyio.sleep(float(args.get("seconds", 1)))
        return _text("awake")
    if name in TOOLS:
        return _text(f"{name} did nothing")
    return _text(f"unknown tool {name!r}", error=True)


BUS = InMemorySubscriptionBus()
WIRE = 1
server = Server(
    "toy",
    version="1.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscriptions_listen=ListenHandler(BUS) if os.environ.get("TOY_LISTEN") == "1" else None,
)


async def main() -> None:
    startup = os.environ.get("TOY_STARTUP", "")
    if "TOY_STDERR" in os.environ:
        sys.stderr.write(os.environ["TOY_STDERR"] + "\n")
        sys.stderr.flush()
    if startup == "exit":
        sys.stderr.write("toy server: exiting at startup on request\n")
        sys.exit(2)
    if startup == "hang":
        time.sleep(3600)
    if "TOY_HTTP_PORT" in os.environ:
        await serve_http(int(os.environ["TOY_HTTP_PORT"]))
        return
    global WIRE
    WIRE = os.dup(1)  # the pipe to the client, before stdio_server diverts fd 1
    async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as tg:
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        era, probe = os.environ.get("TOY_ERA", "dual"), os.environ.get("TOY_PROBE", "")
        if era == "dual" and not probe:
            await server.run(read_stream, write_stream, options)
            return
        # A filter in front of the SDK's dual-era loop turns it into a one-era (or misbehaving) server.
        send, receive = anyio.create_memory_object_stream[Any](16)
        tg.start_soon(_filter, read_stream, send, write_stream, era, probe)
        await server.run(receive, write_stream, options)
        tg.cancel_scope.cancel()


def _refuse(request: types.JSONRPCRequest, code: int, message: str, data: Any = None) -> Any:
    from mcp.shared.message import SessionMessage

    error = types.ErrorData(code=code, message=message, data=data)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request.id, error=error))


async def _filter(read_stream: Any, send: Any, write_stream: Any, era: str, probe: str) -> None:
    async with send:
        async for item in read_stream:
            request = getattr(item, "message", None)
            if not isinstance(request, types.JSONRPCRequest):
                await send.send(item)
                continue
            meta = (request.params or {}).get("_meta") or {}
            modern = request.method == "server/discover" or "io.modelcontextprotocol/protocolVersion" in meta
            if probe == "garbage-all" or (probe == "garbage" and request.method == "server/discover"):
                os.write(WIRE, b"toy server: this line is not JSON-RPC\n")  # the SDK diverts sys.stdout to stderr
            elif probe == "close" and request.method == "server/discover":
                os._exit(0)
            elif probe == "silent" and request.method == "server/discover":
                continue
            elif era == "handshake" and modern:
                await write_stream.send(_refuse(request, -32601, f"Method not found: {request.method}"))
            elif era == "modern" and request.method == "initialize":
                supported = {"supported": ["2026-07-28"], "requested": (request.params or {}).get("protocolVersion")}
                await write_stream.send(_refuse(request, -32022, "this server speaks only 2026-07-28", supported))
            else:
                await send.send(item)


async def serve_http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve)
        while not http.started:
            await anyio.sleep(0.01)
        bound = http.servers[0].sockets[0].getsockname()[1]
        sys.stderr.write(f"toy server listening on http://127.0.0.1:{bound}/mcp\n")
        sys.stderr.flush()


if __name__ == "__main__":
    anyio.run(main)
