"""Regressions of the upstream side (MCPToolSource) met by real upstream servers (tests/fakes/hostile_upstream.py):
one HTTP stream cut is one failed call, `changedTools: block` holds calls only while a listing runs, and a call's
own max_result_bytes reaches the stdio reader."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from fakes.hostile_upstream import hostile, hostile_over_http

from toolsearch.mcp.source import MCPToolSource

pytestmark = pytest.mark.slow


def said(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_an_http_stream_cut_fails_that_call_only_and_the_server_is_not_restarted() -> None:
    # Before: the cut call restarted the whole upstream ("stopped (connection closed) ... being restarted"), the
    # unrelated `sleep` in flight was killed by that restart, and its own failure then marked the NEW connection
    # crashed as well (a second restart): state "crashed", and each cut made every caller wait longer.
    with hostile_over_http(HOSTILE_ERA="handshake") as (_proc, url):
        async with MCPToolSource({"mcpServers": {"remote": {"url": url, "startupTimeout": 5}}}) as source:
            upstream = source.servers["remote"]
            pid = said(await source.call_tool("remote__pid"))
            out: dict[str, types.CallToolResult] = {}

            async def call(name: str, arguments: dict[str, float] | None = None) -> None:
                out[name] = await source.call_tool(f"remote__{name}", arguments)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "sleep", {"seconds": 1.5})
                await anyio.sleep(0.3)
                tg.start_soon(call, "cut")
            cut = said(out["cut"])
            assert out["cut"].is_error and "never came" in cut and "it may have run" in cut, cut
            assert "restart" not in cut
            assert (out["sleep"].is_error, said(out["sleep"])) == (False, "awake"), said(out["sleep"])
            for _ in range(3):  # repeated cuts cost nothing either
                assert "never came" in said(await source.call_tool("remote__cut"))
                assert said(await source.call_tool("remote__echo", {"text": "on"})) == "on"
            assert (upstream.state, upstream.restarts, upstream.next_restart) == ("ready", 0, None)
            assert said(await source.call_tool("remote__pid")) == pid


async def test_an_announcement_inside_the_relist_gap_does_not_hold_calls_until_its_listing_runs() -> None:
    # Before: an announcement within RELIST_GAP of the last re-listing marked the server "changing" at once, so in
    # `changedTools: block` every call to it was refused for up to a second (a server that announces after each
    # call had most calls refused), though nothing was being listed yet.
    config = {"mcpServers": {"srv": hostile(HOSTILE_ERA="handshake")}}
    async with MCPToolSource(config) as source:
        upstream = source.servers["srv"]
        assert said(await source.call_tool("srv__mutate")) == "mutated"
        with anyio.fail_after(10):
            while getattr(source.definition("srv__other"), "description", None) != "Changed tool.":
                await anyio.sleep(0.02)
        listings = int(said(await source.call_tool("srv__listings")))
        assert said(await source.call_tool("srv__mutate")) == "mutated"  # announces again, within the gap
        await anyio.sleep(0.1)
        assert upstream._refresh_lock.locked(), "a re-listing should be waiting out the gap"
        assert not source.changing("srv"), "calls are held while no listing runs"
        echoed = await source.call_tool("srv__echo", {"text": "on"})
        assert (echoed.is_error, said(echoed)) == (False, "on")
        with anyio.fail_after(10):  # the announcement is still re-listed, after the gap
            while int(said(await source.call_tool("srv__listings"))) == listings:
                await anyio.sleep(0.1)
        assert not source.changing("srv")


async def test_a_calls_own_max_result_bytes_above_the_sources_reaches_the_stdio_reader() -> None:
    # Before: `call_tool(..., max_result_bytes=20_000_000)` (the documented Python API) on a stdio server got "its
    # result (over 3,065,536 bytes) is larger than this gateway passes on (20,000,000 bytes)": the line reader
    # stopped at 3 times the source's own limit whatever the call allowed.
    async with MCPToolSource({"mcpServers": {"srv": hostile()}}) as source:  # the library default: 1,000,000
        assert source.servers["srv"].config.max_result_bytes is None
        big = await source.call_tool("srv__huge", {"bytes": 5_000_000}, max_result_bytes=20_000_000)
        assert not big.is_error and len(said(big)) == 5_000_000, said(big)[:300]
        over = said(await source.call_tool("srv__huge", {"bytes": 5_000_000}))  # its own limit still holds
        assert "is larger than this gateway passes on (1,000,000 bytes)" in over, over
