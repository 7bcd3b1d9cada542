"""The Redis round trips of each gateway request, counted on a real redis-server (MONITOR) behind a real gateway.

A request reads its session once and writes it at most once, so the round trips a request makes are few and
named here, per protocol era: a regression (a write beside the session's one commit, a read repeated) shows as a
list that grew. Each round trip is one line of the server's MONITOR stream from a client connection (a command
run inside a Lua script is the script's; MULTI...EXEC is one), named by its command and the kind of key it
touches. What a gateway does on its own clock (the catalog board's poll, the usage log's batched save) is left
out by key; a test client's ECHO marks where each request starts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, toy, write_config
from redis_server import RedisServer

pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
PREFIX = "toolsearch:"
BACKGROUND = (f"{PREFIX}catalog", f"{PREFIX}usage:")  # the board's poll, the usage log's save: not a request's
SETUP = {"HELLO", "CLIENT", "SCRIPT", "SELECT", "PING", "MONITOR"}  # a connection's first commands, a script's load


def _kind(key: str) -> str:
    """`toolsearch:session:h-1f...` -> `session`; `toolsearch:owner:sessions:addr:...` -> `owner`."""
    return key.removeprefix(PREFIX).split(":", 1)[0]


class Monitor:
    """Every command the server runs, from MONITOR, split into requests at the test's `ECHO mark:<name>`."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.entries: list[dict[str, Any]] = []
        self._started = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._marker = server.client()

    def _listen(self) -> None:
        with self.server.client().monitor() as monitor:
            self._started.set()
            for entry in monitor.listen():
                self.entries.append(entry)
                if entry["command"] == "ECHO mark:end":
                    self._done.set()
                    return

    def __enter__(self) -> Monitor:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.mark("end")
        self._done.wait(10)
        self._marker.close()

    def mark(self, name: str) -> None:
        self._marker.echo(f"mark:{name}")

    def round_trips(self) -> dict[str, list[str]]:
        """{request name: its round trips in order}, each `COMMAND key-kind` (a MULTI block by its first key)."""
        assert self._done.wait(10), "MONITOR never saw the end mark"
        requests: dict[str, list[str]] = {}
        current: list[str] | None = None
        multi: dict[str, list[str]] = {}  # per connection: the MULTI block being read
        for entry in self.entries:
            words = entry["command"].split()
            command = words[0].upper()
            if command == "ECHO" and len(words) > 1 and words[1].startswith("mark:"):
                current = requests.setdefault(words[1].removeprefix("mark:"), [])
                continue
            if entry["client_type"] == "lua" or command in SETUP or current is None:
                continue
            connection = f"{entry['client_address']}:{entry['client_port']}"
            if command == "MULTI":
                multi[connection] = []
                continue
            if command == "EXEC":
                block = multi.pop(connection, [])
                if block and not block[0].startswith(BACKGROUND):
                    current.append(f"MULTI {_kind(block[0])}")
                continue
            keys = words[3 : 3 + int(words[2])] if command in ("EVALSHA", "EVAL") else words[1:2]
            if connection in multi:
                multi[connection] += keys
                continue
            if keys and keys[0].startswith(BACKGROUND):
                continue
            current.append(f"{command} {'+'.join(_kind(k) for k in keys)}")
        return requests


@contextmanager
def _gateway(tmp_path: Path) -> Iterator[tuple[str, RedisServer]]:
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis").start()
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    gateway = GatewayProcess(config, "--session-store", redis.url, "--backend", "bm25")
    try:
        yield gateway.wait_ready(120), redis
    finally:
        gateway.stop()
        redis.stop()


def _found(result: Any) -> str:
    names = re.findall(r"^- (\S+) \(score", result.content[0].text, re.MULTILINE)
    assert len(names) == 1, result.content[0].text
    return names[0]


async def test_a_handshake_era_request_makes_few_round_trips(tmp_path: Path) -> None:
    with _gateway(tmp_path) as (url, redis):
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            # warm-up: the worker's connections opened and its scripts loaded
            echo = _found(await client.call_tool("tool_search", {"query": "echo text back", "max_results": 1}))
            await client.list_tools()
            await client.call_tool(echo, {"text": "hi"})
            with Monitor(redis) as monitor:
                monitor.mark("search")
                add = _found(await client.call_tool("tool_search", {"query": "add two integers", "max_results": 1}))
                monitor.mark("list")
                assert add in {t.name for t in (await client.list_tools()).tools}
                monitor.mark("call")
                assert (await client.call_tool(add, {"a": 2, "b": 3})).content[0].text == "5"
        trips = monitor.round_trips()
    check = "EVALSHA session+owner"  # the gateway-issued session id checked, its TTL and its owner's count renewed
    read, write = "GETEX session", "EVALSHA session"  # the session read once; one compare-and-set of what changed
    assert trips["search"] == [check, read, "MULTI usage-pending2", write], trips  # + the search kept for the usage log
    assert trips["list"] == [check, read], trips
    # + the call credited to its search
    assert trips["call"] == [check, read, write, "EVALSHA usage-pending2+usage-pending"], trips


async def test_a_modern_era_request_makes_few_round_trips(tmp_path: Path) -> None:
    with _gateway(tmp_path) as (url, redis):
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode=MODERN) as modern,
        ):
            client = modern.session
            found = await client.call_tool("tool_search", {"query": "echo text back", "max_results": 1})
            context = (found.structured_content or {})["context"]
            echo = found.structured_content["tools"][0]["name"]
            await client.call_tool("call_tool", {"name": echo, "arguments": {"text": "hi"}, "context": context})
            with Monitor(redis) as monitor:
                monitor.mark("search")
                arguments = {"query": "add two integers", "max_results": 1, "context": context}
                found = await client.call_tool("tool_search", arguments)
                add = found.structured_content["tools"][0]["name"]
                monitor.mark("list")
                await client.list_tools()
                monitor.mark("call")
                call = {"name": add, "arguments": {"a": 2, "b": 3}, "context": context}
                assert (await client.call_tool("call_tool", call)).content[0].text == "5"
        trips = monitor.round_trips()
    # A context's owner count is kept alive at most every 15 s (its own clock): not a request's round trip.
    trips = {op: [t for t in found_trips if t != "EVALSHA session+owner"] for op, found_trips in trips.items()}
    read, write = "GETEX session", "EVALSHA session"
    assert trips["search"] == [read, "MULTI usage-pending2", write], trips
    assert trips["list"] == [], trips  # the stable list: no session
    assert trips["call"] == [read, write, "EVALSHA usage-pending2+usage-pending"], trips
