"""An MCP server whose tools report progress and ask for input: what a gateway must relay between it and a client.

Run it as ``python tests/mcp_servers/relay_server.py`` (stdio). Its tools:

- ``count_steps`` (``steps``): reports progress once per step (step 2 with a message full of terminal escapes, a bidi
  override, a line end and 3,000 more characters, then once more with the same value), then answers with whether the
  request carried a progress token.
- ``confirm`` (``what``): a 2026-07-28 tool that asks the user first (an ``InputRequiredResult`` with a form
  elicitation, SEP-2322); called again with the answer and the state it returned, it answers with both.
- ``draft``: asks the client's model for a reply in tools mode first (sampling with an empty ``tools`` list: the SDK
  counts any ``tools`` or ``toolChoice`` as asking for tool use, which a client declares as ``sampling.tools``).
- ``sign_in``: reports progress quoting the credential it was given (``API_TOKEN``), then fails with a JSON-RPC
  error quoting it again; both times with a zero-width space in the credential's middle, which a reader does not see.

``RELAY_ERA=handshake`` makes it a server of the initialize era (it refuses the ``server/discover`` probe, as such
servers do), so its client speaks 2025-11-25 to it. ``RELAY_LISTEN=refuse`` makes it offer ``subscriptions/listen``
(2026-07-28) and refuse each one with an error quoting its credential, split likewise.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

NOISY_STEP = "step 2 \x1b[31mred\x1b[0m\u202e\nFAKE LOG LINE " + "x" * 3000
STATE = "relay-state-1"

TOOLS = [
    types.Tool(
        name="count_steps",
        description="Count the given number of steps, reporting progress after each one.",
        input_schema={"type": "object", "properties": {"steps": {"type": "integer"}}, "required": ["steps"]},
    ),
    types.Tool(
        name="confirm",
        description="Wipe something after the user confirms it.",
        input_schema={"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
    ),
    types.Tool(
        name="draft",
        description="Draft a reply with the client's model.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="sign_in",
        description="Sign in to the account service with the configured credential.",
        input_schema={"type": "object", "properties": {}},
    ),
]


def _split_credential() -> str:
    """The credential this server was given, a zero-width space in its middle: one that a scrub of the text as sent
    does not find, and that a cleaning of it (which drops the invisible character) would show whole."""
    token = os.environ.get("API_TOKEN", "")
    return f"{token[: len(token) // 2]}\u200b{token[len(token) // 2 :]}"


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    args = params.arguments or {}
    if params.name == "count_steps":
        steps = int(args["steps"])
        for step in range(1, steps + 1):
            await ctx.session.report_progress(step, steps, NOISY_STEP if step == 2 else f"step {step}")
            if step == 2:
                await ctx.session.report_progress(step, steps, "step 2 again")  # not forward: a client never sees it
            await anyio.sleep(0.05)  # each notification is on its way before the next, and before the answer
        token = (params.meta or {}).get("progress_token")
        return _text(f"{steps} steps done; progress token {'given' if token is not None else 'none'}")
    if params.name == "confirm":
        if params.input_responses:
            answer = params.input_responses["confirm"]
            content = answer.content if isinstance(answer, types.ElicitResult) else None
            return _text(f"wiped {args.get('what')} after {content}; state {params.request_state}")
        form = types.ElicitRequestFormParams(
            message=f"Really wipe the {args.get('what')}?",
            requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
        )
        return types.InputRequiredResult(
            input_requests={"confirm": types.ElicitRequest(params=form)}, request_state=STATE
        )
    if params.name == "draft":
        if params.input_responses:
            return _text(f"drafted: {params.input_responses['draft']}")
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Draft a reply."))
        sampling = types.CreateMessageRequestParams(messages=[message], max_tokens=50, tools=[])
        return types.InputRequiredResult(input_requests={"draft": types.CreateMessageRequest(params=sampling)})
    if params.name == "sign_in":
        await ctx.session.report_progress(1, 2, f"signing in with {_split_credential()}")
        await anyio.sleep(0.05)  # the notification is on its way before the answer
        raise MCPError(code=-32000, message=f"401 Unauthorized: the credential {_split_credential()} was rejected")
    return types.CallToolResult(content=[types.TextContent(type="text", text="unknown tool")], is_error=True)


async def refuse_listen(ctx: Any, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
    raise MCPError(code=-32000, message=f"401 Unauthorized: no subscriptions for {_split_credential()}")


server = Server(
    "relay",
    version="1.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscriptions_listen=refuse_listen if os.environ.get("RELAY_LISTEN") == "refuse" else None,
)


async def _refuse_discover(read_stream: Any, send: Any, write_stream: Any) -> None:
    """In front of the SDK's dual-era loop: `server/discover` is an unknown method, as to a server of that era."""
    async with send:
        async for item in read_stream:
            request = getattr(item, "message", None)
            if isinstance(request, types.JSONRPCRequest) and request.method == "server/discover":
                error = types.ErrorData(code=-32601, message="Method not found: server/discover")
                await write_stream.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request.id, error=error)))
                continue
            await send.send(item)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as tg:
        options = server.create_initialization_options()
        if os.environ.get("RELAY_ERA") != "handshake":
            await server.run(read_stream, write_stream, options)
            return
        send, receive = anyio.create_memory_object_stream[Any](16)
        tg.start_soon(_refuse_discover, read_stream, send, write_stream)
        await server.run(receive, write_stream, options)
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
