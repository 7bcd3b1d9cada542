"""A real `mcp` client session on a gateway over streamable HTTP, with the list changes it heard."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_servers import GatewayProcess, gateway_argv, gateway_env

FAULTY = Path(__file__).resolve().parent / "faulty_server.py"


def faulty(**settings: Any) -> dict[str, Any]:
    """A config entry for faulty_server.py; FAULTY_* keys go to its environment, the rest to the entry."""
    env = {k: str(v) for k, v in settings.items() if k.startswith("FAULTY_")}
    entry: dict[str, Any] = {"command": sys.executable, "args": [str(FAULTY)]}
    entry.update({k: v for k, v in settings.items() if not k.startswith("FAULTY_")})
    if env:
        entry["env"] = env
    return entry


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


class GatewayClient:
    """A ClientSession plus the tools/list_changed notifications it received."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.changes = 0
        self._changed = anyio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.changes += 1
            self._changed.set()

    async def wait_changed(self, timeout: float = 20) -> None:
        with anyio.fail_after(timeout):
            await self._changed.wait()
        self._changed = anyio.Event()

    async def tools(self) -> dict[str, types.Tool]:
        return {t.name: t for t in (await self.session.list_tools()).tools}

    async def names(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        return await self.session.call_tool(name, arguments or {})

    async def search(self, query: str, **extra: Any) -> types.CallToolResult:
        return await self.call("tool_search", {"query": query, **extra})


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[GatewayClient]:
    holder: list[GatewayClient] = []

    async def handler(message: Any) -> None:
        if holder:
            await holder[0].on_message(message)

    async with streamable_http_client(url) as (read, write), ClientSession(read, write, message_handler=handler) as s:
        client = GatewayClient(s)
        holder.append(client)
        await s.initialize()
        yield client


@asynccontextmanager
async def gateway_client(
    target: GatewayProcess | Path, mode: str, *extra: str, **options: Any
) -> AsyncIterator[Client]:
    """The real `mcp` client in `mode` (`options`: its callbacks): over HTTP to a running gateway, or over stdio to
    one it starts from a config (`extra`: that gateway's options, after `--quiet --backend bm25`)."""
    if isinstance(target, GatewayProcess):
        server: Any = target.url or ""
    else:
        argv = gateway_argv(target, "--quiet", "--backend", "bm25", *extra)
        server = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
    with anyio.fail_after(120):
        async with Client(server, mode=mode, **options) as client:
            yield client


async def wait_for(predicate: Any, timeout: float = 30) -> None:
    """Poll the async `predicate` until it is true; TimeoutError after `timeout` seconds."""
    with anyio.fail_after(timeout):
        while not await predicate():
            await anyio.sleep(0.2)


async def mutate(client: GatewayClient, server: str, **change: Any) -> None:
    """Change faulty_server.py's `echo` through the gateway (its `mutate` tool sends tools/list_changed)."""
    done = await client.call("call_tool", {"name": f"{server}__mutate", "arguments": {"tool": "echo", **change}})
    assert not done.is_error, text(done)


@asynccontextmanager
async def change_events(client: Client) -> AsyncIterator[list[Any]]:
    """The events of a `subscriptions/listen` stream with toolsListChanged, collected while the block runs."""
    events: list[Any] = []
    async with client.listen(tools_list_changed=True) as subscription:

        async def collect() -> None:
            async for event in subscription:
                events.append(event)

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            yield events
            tg.cancel_scope.cancel()
