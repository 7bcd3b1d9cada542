"""A handshake-era session's tool list stays within what the MCP SDK's client reads of one message.

The real `mcp` client reads at most 1 MiB of one server-sent event, and a `tools/list` answer is one event. Before
the bound, five found tools of 250 kB each (every one under the gateway's limit on one schema) made the session's
list 1.25 MB: from then on every `tools/list` of that session failed ("Server-sent event exceeded the 1048576 byte
limit"), and so did every call of a found tool by name (the client lists again to check a result against the tool's
output schema), with no word from the gateway. Now the least recently used found tools are unloaded until the list
fits (`LIST_BYTES`), and the search that loaded them says which and why. A real gateway process over streamable HTTP,
in front of tests/mcp_servers/sized_server.py, driven by the real `mcp` client.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.shared.message import SessionMessage
from mcp_servers import HERE, http_gateway, toy, write_config
from mcp_servers.clients import connect, text

from toolsearch.mcp.gateway import Gateway
from toolsearch.mcp.handshake import LIST_BYTES
from toolsearch.mcp.settings import GatewaySettings
from toolsearch.mcp.source import MCPToolSource
from toolsearch.stores import InMemorySessionStore, SessionState, StateUpdate

pytestmark = pytest.mark.slow

NAMES = ["alpha", "bravo", "charlie", "delta", "echo"]  # five tools of about 250 kB each: four pass the bound
META = ["tool_search", "call_tool"]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = [str(HERE / "sized_server.py")]
    entry = {"command": sys.executable, "args": server, "env": {"SIZED_TOOLS": ",".join(NAMES)}}
    config = write_config(tmp_path_factory.mktemp("sized") / "servers.json", {"big": entry})
    with http_gateway(config, "--backend", "bm25") as gateway:
        yield gateway.url or ""


def _size(tools: list[types.Tool]) -> int:
    return sum(len(t.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")) + 1 for t in tools)


async def test_a_search_that_finds_more_than_the_list_holds_loads_what_fits_and_says_what_it_did_not(url: str) -> None:
    async with connect(url) as client:
        found = await client.search("ledger export", max_results=5)
        said = text(found)
        assert not found.is_error and said.startswith("Found 5 tool(s)")
        listed = (await client.session.list_tools()).tools  # before: MCPError, the event exceeded 1048576 bytes
        names = [t.name for t in listed]
        assert names[:2] == META and len(names) == 2 + 3  # three of 250 kB fit under the bound, four do not
        assert _size(listed) <= LIST_BYTES
        left_out = [f"big__{n}_export" for n in NAMES if f"big__{n}_export" not in names]
        assert len(left_out) == 2
        # said in the opening sentence, which names what it loaded (before: "They are now available", then a note)
        loaded_part, _, left_out_part = said.splitlines()[0].partition(" Not added to your tool list, as ")
        assert loaded_part.startswith("Found 5 tool(s) for 'ledger export'. Now available, call them by name: ")
        assert all(name in loaded_part for name in names[2:]) and not any(name in loaded_part for name in left_out)
        assert left_out_part.startswith(f"this session's tool list is kept under {LIST_BYTES:,} bytes")
        assert all(name in left_out_part for name in left_out) and left_out_part.endswith("through `call_tool`.")
        assert "They are now available" not in said and "Note: not loaded" not in said

        loaded = names[2]
        by_name = await client.call(loaded, {"filter": "x"})  # the client lists again here: before, it failed too
        assert not by_name.is_error and text(by_name) == f"{loaded.removeprefix('big__')} ran"
        through = await client.call("call_tool", {"name": left_out[0], "arguments": {"filter": "x"}})
        assert not through.is_error and text(through) == f"{left_out[0].removeprefix('big__')} ran"
        after = (await client.session.list_tools()).tools  # the called tool joined; the list still fits
        assert left_out[0] in [t.name for t in after] and _size(after) <= LIST_BYTES


async def test_the_least_recently_used_found_tool_is_unloaded_first(url: str) -> None:
    async with connect(url) as client:
        for name in ("alpha", "bravo", "charlie"):  # loaded in this order: alpha is the oldest
            found = await client.search(name, max_results=1)
            assert "Note:" not in text(found), text(found)
        used = await client.call("big__alpha_export", {"filter": "x"})  # a call makes alpha the most recent
        assert not used.is_error
        found = await client.search("delta", max_results=1)
        note = next(line for line in text(found).splitlines() if line.startswith("Note: unloaded"))
        assert "big__bravo_export" in note and "search again to reload one" in note
        names = await client.names()
        assert names == [*META, "big__alpha_export", "big__charlie_export", "big__delta_export"]


async def test_a_search_whose_found_tool_the_pinned_tools_leave_no_room_for_says_so_in_its_first_sentence(
    tmp_path: Path,
) -> None:
    # Before: "Found 1 tool(s) ... They are now available: call them by name.", then "Note: not loaded, as ...":
    # the note took back the first sentence, on every search while the pinned tools alone fill the list.
    sized = {"command": sys.executable, "args": [str(HERE / "sized_server.py")], "env": {"SIZED_TOOLS": "a,b,c,d"}}
    config = write_config(tmp_path / "servers.json", {"big": sized, "toy": toy()})
    with http_gateway(config, "--backend", "bm25", "--pin", "big__*") as gateway:
        async with connect(gateway.url or "") as client:
            found = await client.search("echo the given text", max_results=1)
    said = text(found)
    opening = said.splitlines()[0]
    assert not found.is_error and "toy__echo" in said
    assert opening == (
        "Found 1 tool(s) for 'echo the given text'. Not added to your tool list, as this session's tool list is kept "
        f"under {LIST_BYTES:,} bytes (MCP clients read 1 MiB of one message): call them through `call_tool`."
    ), said
    assert "now available" not in said.lower() and "Note: not loaded" not in said


class CountingStore(InMemorySessionStore):
    """The gateway's own in-memory session store, counting the updates it is asked for."""

    def __init__(self) -> None:
        super().__init__(max_sessions=100)
        self.updates = 0

    def update(self, session_id: str, fn: StateUpdate, *, base: SessionState | None = None) -> SessionState:
        self.updates += 1
        return super().update(session_id, fn, base=base)


async def test_a_list_the_pinned_tools_alone_fill_asks_the_session_store_for_no_update() -> None:
    # Before: each tools/list "unloaded" an empty list of found tools (none to drop: the pinned tools alone are over
    # the bound), which still queued a change, so every listing of every such session was a store update (with
    # Redis, a compare-and-set script run).
    sized = {"command": sys.executable, "args": [str(HERE / "sized_server.py")], "env": {"SIZED_TOOLS": "a,b,c,d"}}
    store = CountingStore()
    settings = GatewaySettings(backend="bm25", pinned=("big__*",))
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"big": sized}}, errlog=quiet) as source:
            gateway = await anyio.to_thread.run_sync(lambda: Gateway(source, settings, store=store))
            to_gateway, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](4)
            write_stream, from_gateway = anyio.create_memory_object_stream[SessionMessage](4)
            async with anyio.create_task_group() as tg:
                tg.start_soon(gateway.serve_streams, read_stream, write_stream)
                with anyio.fail_after(60):
                    async with ClientSession(from_gateway, to_gateway) as client:
                        await client.initialize()
                        first = await client.list_tools()
                        before = store.updates
                        for _ in range(3):
                            assert (await client.list_tools()).tools == first.tools
                tg.cancel_scope.cancel()
    assert [t.name for t in first.tools] == [*META, "big__a_export", "big__b_export", "big__c_export", "big__d_export"]
    assert store.updates == before, store.updates - before  # before: 3 more
