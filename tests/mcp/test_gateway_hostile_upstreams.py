"""Upstream servers that treat the gateway badly (tests/fakes/hostile_upstream.py, the real MCP SDK's server) met
by the gateway's real upstream side (MCPToolSource): each fault costs at most the call it hits, the model and the
log never see what the server was configured with, and the server keeps serving or is restarted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import mcp_types as types
import pytest
from fakes.hostile_upstream import hostile, hostile_over_http

from toolsearch.mcp.source import RELIST_GAP, MCPToolSource

pytestmark = pytest.mark.slow

SECRET = "sk-live-Zq8xSECRET4242"


def said(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="toolsearch.mcp"):
        yield caplog


def lines(log: pytest.LogCaptureFixture, *, server: str | None = None) -> list[str]:
    return [r.getMessage() for r in log.records if server is None or f"'{server}'" in r.getMessage()]


# --- F12: a stray stdout line --------------------------------------------------------------------------------------


async def test_a_stray_line_with_a_bad_json_escape_costs_nothing_and_the_server_serves_on() -> None:
    # Before: `"id": "C:\Users..."` (no JSON escape) raised in the gateway's own reading of the line: the connection
    # was dropped, the call in flight reported a crash, and a line written while idle left the server "ready" but
    # dead ("not available (ready)") for as long as the gateway ran, its process still running.
    config = {"mcpServers": {"old": hostile(HOSTILE_ERA="handshake"), "new": hostile()}}
    async with MCPToolSource(config) as source:
        assert source.servers["new"].protocol_version == "2026-07-28"
        assert source.servers["old"].protocol_version == "2025-11-25"
        for name in ("old", "new"):
            pid = said(await source.call_tool(f"{name}__pid"))
            during = await source.call_tool(f"{name}__poison")  # the line comes before the call's answer
            assert (during.is_error, said(during)) == (False, "poisoned"), said(during)
            idle = await source.call_tool(f"{name}__poison", {"delay": 0.1})  # ... and while nothing is asked
            assert said(idle) == "will poison"
            await anyio.sleep(0.5)
            echoed = await source.call_tool(f"{name}__echo", {"text": "after"})
            assert (echoed.is_error, said(echoed)) == (False, "after"), said(echoed)
            assert said(await source.call_tool(f"{name}__pid")) == pid  # the same process: nothing was restarted


# --- F1 and F11: what the server was configured with --------------------------------------------------------------


async def test_a_credential_the_server_echoes_reaches_neither_the_model_nor_the_log(
    log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: "rejected the call to 'login': 401 Unauthorized: the credential 'sk-live-...' was rejected", to the
    # model, and the same at start-up to the log.
    monkeypatch.setenv("ACCT_TOKEN", SECRET)
    config = {
        "mcpServers": {
            "acct": hostile(API_TOKEN="${ACCT_TOKEN}"),
            "broken": hostile(API_TOKEN="${ACCT_TOKEN}", HOSTILE_LIST="fail"),
        }
    }
    async with MCPToolSource(config) as source:
        rejected = said(await source.call_tool("acct__login"))
        assert (
            rejected == "MCP server 'acct' rejected the call to 'login': 401 Unauthorized: the credential '***' "
            "was rejected"
        )
        failed = await source.call_tool("acct__login_result")
        assert failed.is_error and said(failed) == "401 Unauthorized: the credential '***' was rejected"
        assert (
            SECRET not in source.failures["broken"] and "the credential '***' was rejected" in source.failures["broken"]
        )
    assert SECRET not in log.text and "MCP server 'broken' skipped" in log.text


async def test_an_http_servers_header_and_url_path_secrets_stay_hidden(
    log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the Authorization header came back in the call's error, and once the server was gone the model and
    # the log got "cannot reach http://127.0.0.1:PORT/s/<the key>/mcp" (docs: "as written, variables unexpanded").
    key = "sk-ak-PATHSECRET777"
    monkeypatch.setenv("SERVICE_KEY", key)
    monkeypatch.setenv("ACCT_TOKEN", SECRET)
    with hostile_over_http(HOSTILE_HTTP_PATH=f"/s/{key}/mcp") as (proc, url):
        written = url.replace(key, "${SERVICE_KEY}")
        entry = {"url": written, "headers": {"Authorization": "Bearer ${ACCT_TOKEN}"}, "startupTimeout": 5}
        async with MCPToolSource({"mcpServers": {"hosted": entry}}) as source:
            rejected = said(await source.call_tool("hosted__login"))
            assert rejected.endswith("401 Unauthorized: the credential '***' was rejected"), rejected
            proc.kill()
            proc.wait(10)
            await source.call_tool("hosted__echo", {"text": "x"})  # finds it gone: restarted, and fails to start
            down = said(await source.call_tool("hosted__echo", {"text": "x"}))
            assert "cannot reach http://127.0.0.1" in down and "/s/${SERVICE_KEY}/mcp" in down, down
    assert key not in log.text and SECRET not in log.text
    assert "/s/${SERVICE_KEY}/mcp" in log.text


# --- F3, F4 and F6: re-listings --------------------------------------------------------------------------------------


async def test_a_relisting_that_never_answers_ends_at_the_startup_timeout(log: pytest.LogCaptureFixture) -> None:
    # Before: the hung tools/list held every call to the server (changedTools: block) forever, and a later change
    # was never read; nothing was logged.
    entry = hostile(HOSTILE_LIST="hang-after-mutate", HOSTILE_ERA="handshake", startupTimeout=4)
    async with MCPToolSource({"mcpServers": {"srv": entry}}) as source:
        upstream = source.servers["srv"]
        changed = anyio.Event()

        async def listener(_source: MCPToolSource, _server: str) -> None:
            changed.set()

        source.add_listener(listener)
        assert said(await source.call_tool("srv__mutate")) == "mutated"
        with anyio.fail_after(1):
            while not source.changing("srv"):
                await anyio.sleep(0.02)
        with anyio.fail_after(20):
            while source.changing("srv"):  # the hold ends when the re-listing runs out
                await anyio.sleep(0.1)
        assert "re-listing its tools got no answer within 4 s (startupTimeout)" in log.text
        assert said(await source.call_tool("srv__echo", {"text": "usable"})) == "usable"
        assert said(await source.call_tool("srv__mutate")) == "mutated"  # this change's listing is answered
        with anyio.fail_after(20):
            await changed.wait()
        other = source.definition("srv__other")
        assert other is not None and other.description == "Changed tool."
        assert upstream.ready


async def test_a_flood_of_change_announcements_is_coalesced_and_applied_as_it_goes(
    log: pytest.LogCaptureFixture,
) -> None:
    # Before: the gateway re-listed back to back for as long as announcements came (403 listings in 10 s, 80,600
    # log lines) and announced the change only once they stopped: never, for a server that keeps announcing.
    count, every = 150, 0.01  # 1.5 s of announcements
    async with MCPToolSource({"mcpServers": {"loud": hostile(HOSTILE_ERA="handshake")}}) as source:
        changes: list[str] = []
        flooding_when_announced = anyio.Event()

        async def listener(src: MCPToolSource, server: str) -> None:
            tool = src.definition("loud__t0")
            changes.append(tool.description if tool else "")
            if said(await src.call_tool("loud__flooding")) == "yes":
                flooding_when_announced.set()

        source.add_listener(listener)
        before = int(said(await source.call_tool("loud__listings")))
        assert said(await source.call_tool("loud__flood", {"n": count, "every": every})) == "flooding"
        with anyio.fail_after(10):
            await flooding_when_announced.wait()  # a change is applied while the flood goes on
        with anyio.fail_after(20):
            while not changes or changes[-1] != f"Flood tool 0, version {count}.":
                await anyio.sleep(0.1)  # ... and the last one once it ends
        listings = int(said(await source.call_tool("loud__listings"))) - before - 1
        took = float(said(await source.call_tool("loud__flooding")).split()[-2])  # as long as a loaded machine makes it
    # about one a second (and one for the last announcement), not one per announcement
    assert listings <= took / RELIST_GAP + 3, (listings, took)
    logged = lines(log, server="loud")
    assert sum("changed the definition of tool" in line for line in logged) <= 10 * (listings + 1)
    assert any("changed the definitions of 10 more tools" in line for line in logged)
    assert sum("announces tool changes less than" in line for line in logged) == 1


async def test_a_relisting_error_and_a_repeated_cursor_are_logged_on_one_short_line(
    log: pytest.LogCaptureFixture,
) -> None:
    # Before: logged raw: a forged line of the gateway's own, a terminal escape, and 200,000 characters on one line.
    config = {
        "mcpServers": {
            "bank": hostile(HOSTILE_LIST="error-after-mutate", HOSTILE_ERA="handshake"),
            "loops": hostile(HOSTILE_LIST="cursor"),
        }
    }
    async with MCPToolSource(config) as source:
        await source.call_tool("bank__mutate")
        with anyio.fail_after(10):
            while not any("re-listing tools failed" in line for line in lines(log, server="bank")):
                await anyio.sleep(0.05)
        assert source.servers["bank"].ready
        assert "repeated the cursor 'cccc" in source.failures["loops"]
    for line in lines(log):
        assert "\n" not in line and "\x1b" not in line and len(line) < 2_500, line[:200]


# --- F9 and F8: HTTP --------------------------------------------------------------------------------------------------


async def test_an_http_server_that_dies_mid_call_is_a_crash_and_is_restarted() -> None:
    # Before: "rejected the call to 'sleep': SSE stream ended without a response", no restart, and the next call,
    # which never reached the server, was the one told it "stopped while running".
    with hostile_over_http(HOSTILE_ERA="handshake") as (proc, url):
        async with MCPToolSource({"mcpServers": {"remote": {"url": url, "startupTimeout": 5}}}) as source:
            upstream = source.servers["remote"]

            async def kill() -> None:
                await anyio.sleep(0.5)
                proc.kill()

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill)
                dropped = said(await source.call_tool("remote__sleep", {"seconds": 30}))
            assert "stopped (connection closed) while running 'sleep'; the call did not finish" in dropped, dropped
            assert "check whether the call had an effect" in dropped
            assert upstream.state == "crashed" and upstream.next_restart is not None
            later = said(await source.call_tool("remote__echo", {"text": "x"}))
            assert "while running 'echo'" not in later and "not available" in later, later


async def test_an_http_result_is_limited_by_max_result_bytes_not_by_the_sdks_1_mib() -> None:
    # Before: any HTTP result over 1 MiB was "rejected ... SSE stream failed: Server-sent event exceeded the
    # 1048576 byte limit", whatever maxResultBytes said; and one that did run read as rejected, inviting a retry.
    with hostile_over_http() as (_proc, url):
        config = {
            "mcpServers": {
                "roomy": {"url": url, "maxResultBytes": 1_500_000},
                "tight": {"url": url, "maxResultBytes": 5_000},
            }
        }
        async with MCPToolSource(config) as source:
            fits = await source.call_tool("roomy__huge", {"bytes": 1_200_000})
            assert not fits.is_error and len(said(fits)) == 1_200_000, said(fits)[:300]
            # answered as an SSE event (the handshake era): read no further than the event limit
            over = said(await source.call_tool("tight__huge", {"bytes": 1_100_000}))
            assert "on MCP server 'tight' ran, but its result (over 1,048,576 bytes)" in over, over
            assert "Do not repeat the same call" in over and "rejected" not in over
            assert said(await source.call_tool("tight__echo", {"text": "on"})) == "on"


# --- F2: the parts of a tool beside its input schema ---------------------------------------------------------------


async def test_an_oversized_output_schema_title_or_annotations_leaves_that_tool_out(
    log: pytest.LogCaptureFixture,
) -> None:
    # Before: listed, with no warning: a client that found the tool then failed on every tools/list.
    config = {
        "mcpServers": {where.lower(): hostile(HOSTILE_BIG=where) for where in ("outputSchema", "title", "annotations")}
    }
    async with MCPToolSource(config) as source:
        names = {t.name for t in source.tools()}
        for server, said_what in [
            ("outputschema", "output schema is 300,"),
            ("title", "title is 300,"),
            ("annotations", "annotations is 300,"),
        ]:
            assert f"{server}__big" not in names and f"{server}__echo" in names
            warning = next(line for line in lines(log, server=server) if "skipped a tool" in line)
            assert said_what in warning and "the limit is" in warning, warning


# --- F5: a stdio answer larger than anything passed on ---------------------------------------------------------------


async def test_a_stdio_answer_is_not_read_past_its_limit_and_the_call_fails_at_once() -> None:
    # Before: the whole line was read, at a cost that grows with the square of its length; a line that never ends
    # held the call until callTimeout.
    config = {
        "mcpServers": {
            "endless": hostile(maxResultBytes=5_000, callTimeout=60),
            "whole": hostile(maxResultBytes=5_000),
        }
    }
    async with MCPToolSource(config) as source:
        with anyio.fail_after(30):  # on the old code: until callTimeout, 60 s
            endless = said(await source.call_tool("endless__endless", {"bytes": 4_000_000}))
        assert "on MCP server 'endless' ran, but its result (over 1,048,576 bytes)" in endless, endless
        assert "Do not repeat the same call" in endless
        # a line whose id comes last (as the TypeScript SDK writes it) is refused at its end; the next line is read
        pid = said(await source.call_tool("whole__pid"))
        last = said(await source.call_tool("whole__endless", {"bytes": 1_200_000, "id_last": True}))
        assert "ran, but its result (over 1,048,576 bytes)" in last, last
        assert said(await source.call_tool("whole__echo", {"text": "on"})) == "on"
        assert said(await source.call_tool("whole__pid")) == pid


# --- F10: an unchanged listing --------------------------------------------------------------------------------------


async def test_an_unchanged_relisting_converts_nothing_again() -> None:
    # Before: every re-listing validated and converted every definition again, on the event loop (a static server
    # of 15,000 tools stalled every client for 1.5 s each time).
    async with MCPToolSource({"mcpServers": {"calm": hostile()}}) as source:
        upstream = source.servers["calm"]
        before = upstream.tools
        assert not await upstream.refresh(announced=False)
        assert len(upstream.tools) == len(before) and all(a is b for a, b in zip(upstream.tools, before, strict=True))
        await source.call_tool("calm__mutate")
        with anyio.fail_after(10):
            while (other := source.definition("calm__other")) is None or other.description != "Changed tool.":
                await anyio.sleep(0.05)
        kept = {t.name: t for t in before}
        for tool in upstream.tools:  # one definition changed: only that one is new
            assert (tool is kept[tool.name]) == (tool.name != "calm__other"), tool.name
