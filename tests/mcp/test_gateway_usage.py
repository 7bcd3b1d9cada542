"""The gateway feeds the usage log: a real gateway process, a real upstream, the real `mcp` client."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from mcp_servers import GatewayProcess, gateway_argv, gateway_env, toy, wait_until, write_config
from mcp_servers.clients import connect, text
from redis_server import RedisServer
from tuned_model import tuned_model  # noqa: F401  (a fixture)

from toolsearch.embeddings import ToolsEmbedder
from toolsearch.usage import FileUsageStore, UsageLog
from toolsearch.usage_cli import read_usage

pytestmark = pytest.mark.slow


def _logs(path: Path) -> dict[str, UsageLog]:
    store = FileUsageStore(path)
    return {catalog: log for catalog in store.catalogs() if (log := store.load(catalog)) is not None}


async def test_searches_then_successful_calls_land_in_the_usage_log(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    usage = tmp_path / "usage.json"
    gateway = GatewayProcess(config, "--usage-log", str(usage), "--pin", "toy__echo")
    try:
        async with connect(gateway.wait_ready()) as client:
            found = await client.search("add two integers", max_results=2)
            assert "toy__add_numbers" in text(found)
            summed = await client.call("toy__add_numbers", {"a": 2, "b": 3})
            assert text(summed) == "5"
            again = await client.call("call_tool", {"name": "toy__add_numbers", "arguments": {"a": 1, "b": 1}})
            assert text(again) == "2"  # one search, one credit
            await client.search("always fails with a tool error", max_results=1)
            assert (await client.call("call_tool", {"name": "toy__fail"})).is_error  # failed: teaches nothing
            assert text(await client.call("toy__echo", {"text": "pinned"})) == "pinned"  # no search showed it

            # saved soon after the call (the file holds the empty log from start-up before)
            assert wait_until(lambda: usage.exists() and any(len(lg) for lg in _logs(usage).values()), timeout=20)
            (log,) = _logs(usage).values()
            (entry,) = log.entries()
            assert entry.called == "toy__add_numbers" and "toy__add_numbers" in entry.shown
            assert entry.terms == log.terms("add two integers") and entry.query is None  # hashed words only
            assert "integers" not in usage.read_text()  # no query word is readable in the file

            # an upstream's tools change: the log moves to the new catalog with its entries
            grown = await client.call("call_tool", {"name": "toy__grow", "arguments": {"name": "quokka_census"}})
            assert not grown.is_error
            with anyio.fail_after(30):
                while "toy__quokka_census" not in text(await client.search("quokka census", max_results=1)):
                    await anyio.sleep(0.2)
            assert not (await client.call("toy__quokka_census")).is_error
    finally:
        gateway.stop()
    logs = _logs(usage)
    # the new catalog's log, the old one's entries in it (saved at exit, nothing lost); the old log was moved, not
    # copied (before, every catalog switch left a full copy behind, and the file grew without bound)
    (newest,) = logs.values()
    assert [e.called for e in newest.entries()] == ["toy__add_numbers", "toy__quokka_census"]


async def test_a_raw_log_keeps_request_text_for_tune_and_a_tuned_encoder_serves(
    tmp_path: Path, tuned_model: Path  # noqa: F811
) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    usage = tmp_path / "usage.json"
    gateway = GatewayProcess(config, "--usage-log", str(usage), "--usage-privacy", "raw", "--backend", "hybrid",
                             "--model", str(tuned_model))
    try:
        async with connect(gateway.wait_ready()) as client:
            assert "toy__add_numbers" in text(await client.search("add two integers", max_results=2))
            assert text(await client.call("toy__add_numbers", {"a": 2, "b": 3})) == "5"
            assert wait_until(lambda: usage.exists() and any(len(lg) for lg in _logs(usage).values()), timeout=20)
        ready = next(line for line in gateway.stderr.splitlines() if "gateway ready" in line)
        assert f"hybrid index, model {ToolsEmbedder(query_model=tuned_model).model_id}:" in ready
    finally:
        gateway.stop()
    (entry,) = read_usage(str(usage), "any").entries()  # what `toolsearch tune --usage` learns from
    assert (entry.query, entry.called) == ("add two integers", "toy__add_numbers")
    # the same file under the default setting: a log keeps one setting, so the start is refused, saying why
    done = subprocess.run(gateway_argv(config, "--transport", "http", "--port", "0", "--usage-log", str(usage)),
                          capture_output=True, text=True, env=gateway_env(), timeout=120)
    assert done.returncode == 1 and "keeps requests with privacy 'raw', not 'hashed'" in done.stderr, done.stderr
    assert (entry,) == tuple(read_usage(str(usage), "any").entries())  # and the log is as it was


def test_every_stored_log_must_keep_the_setting_asked_for_before_anything_is_written(tmp_path: Path) -> None:
    from toolsearch.mcp.usage_feed import GatewayUsage
    from toolsearch.usage import UsageError

    # yesterday's raw log of catalog B, then a hashed start on catalog A: when an upstream's tools change back to
    # B, the feed would record request text into B's log although hashing was asked for
    store = FileUsageStore(tmp_path / "usage.json")
    earlier = UsageLog("catalog-b", privacy="raw")
    earlier.add("mail the team", "send_email", [])
    store.save(earlier)
    before = (tmp_path / "usage.json").read_bytes()
    with pytest.raises(UsageError, match=r"catalog catalog-b .* privacy 'raw', not 'hashed'.*another --usage-log"):
        GatewayUsage("catalog-a", store=store)
    assert (tmp_path / "usage.json").read_bytes() == before  # no log of catalog A was started
    feed = GatewayUsage("catalog-a", store=store, privacy="raw")  # the setting the stored logs keep
    assert feed.log.privacy == "raw" and store.catalogs() == ["catalog-a", "catalog-b"]


async def test_no_usage_log_records_nothing(tmp_path: Path, redis_server: RedisServer) -> None:
    # A shared session store keeps the usage log beside the sessions: with --no-usage-log nothing reaches it.
    # (--no-usage-log beside --usage-log FILE is refused as a contradiction: tests/mcp/test_options.py.)
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    redis = redis_server.client()
    for flags, recorded in (((), True), (("--no-usage-log",), False)):
        gateway = GatewayProcess(config, "--session-store", redis_server.url, *flags)
        try:
            async with connect(gateway.wait_ready()) as client:
                await client.search("add two integers", max_results=1)
                assert text(await client.call("toy__add_numbers", {"a": 2, "b": 3})) == "5"
                await anyio.sleep(2)  # longer than the gateway waits before it saves
        finally:
            assert gateway.stop() == 0
        assert bool(redis.keys("toolsearch:usage:*")) is recorded, flags
        redis.flushdb()


def test_catalog_changes_carry_entries_without_duplicates(tmp_path: Path) -> None:
    from toolsearch.mcp.usage_feed import GatewayUsage
    from toolsearch.usage import UsageError

    feed = GatewayUsage.from_file("catalog-a", tmp_path / "usage.json")
    feed.searched("s", "weather in lisbon", ["weather_get"])
    feed.called("s", "weather_get", ok=True)
    feed.catalog_changed("catalog-b")
    feed.searched("s", "send an email", ["email_send"])
    feed.called("s", "email_send", ok=True)
    feed.catalog_changed("catalog-a")  # back: a's log gets b's new entry, not its own again
    feed.save()
    logs = _logs(tmp_path / "usage.json")
    assert [e.called for e in logs["catalog-a"].entries()] == ["weather_get", "email_send"]
    assert "catalog-b" not in logs  # moved on with its entries, not kept as a copy

    off = GatewayUsage.from_file("catalog-a", tmp_path / "off.json", enabled=False)
    off.searched("s", "weather in lisbon", ["weather_get"])
    off.called("s", "weather_get", ok=True)
    off.save()
    assert not (tmp_path / "off.json").exists() and not len(off.log)

    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(UsageError, match=r"bad\.json"):  # at startup, naming the file: never overwritten
        GatewayUsage.from_file("catalog-a", tmp_path / "bad.json")


async def test_a_context_pairs_the_2026_eras_searches_and_calls(tmp_path: Path) -> None:
    from mcp import Client

    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    usage = tmp_path / "usage.json"
    gateway = GatewayProcess(config, "--usage-log", str(usage), "--backend", "bm25")
    try:
        async with Client(gateway.wait_ready(), mode="2026-07-28") as client:
            found = await client.call_tool("tool_search", {"query": "add two integers", "max_results": 2})
            context = (found.structured_content or {})["context"]
            summed = await client.call_tool(
                "call_tool", {"name": "toy__add_numbers", "arguments": {"a": 2, "b": 3}, "context": context}
            )
            assert text(summed) == "5"
            # without the context the call is stateless: it pairs with no search
            await client.call_tool("tool_search", {"query": "echo the given text back", "max_results": 1})
            echoed = await client.call_tool("call_tool", {"name": "toy__echo", "arguments": {"text": "x"}})
            assert text(echoed) == "x"
            assert wait_until(lambda: usage.exists() and any(len(lg) for lg in _logs(usage).values()), timeout=20)
            (log,) = _logs(usage).values()
            (entry,) = log.entries()
            assert entry.called == "toy__add_numbers" and entry.terms == log.terms("add two integers")
    finally:
        gateway.stop()


def test_a_log_cleared_under_a_running_gateway_stays_cleared(tmp_path: Path) -> None:
    from toolsearch.mcp.usage_feed import GatewayUsage

    path = tmp_path / "usage.json"
    feed = GatewayUsage.from_file("catalog-a", path)
    feed.searched("s", "weather in lisbon", ["weather_get"])
    feed.called("s", "weather_get", ok=True)
    feed.save()
    assert [e.called for e in _logs(path)["catalog-a"].entries()] == ["weather_get"]

    FileUsageStore(path).delete("catalog-a")  # what `toolsearch usage clear` does, the gateway still serving
    feed.searched("s", "send an email", ["email_send"])
    feed.called("s", "email_send", ok=True)
    feed.save()  # only what is new since the last save: the cleared entry does not come back
    assert [e.called for e in _logs(path)["catalog-a"].entries()] == ["email_send"]
    feed.save()  # nothing new: nothing written twice
    assert [e.called for e in _logs(path)["catalog-a"].entries()] == ["email_send"]
