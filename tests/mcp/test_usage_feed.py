"""A gateway whose catalog keeps changing keeps one usage log, carried forward within its bound, not one per catalog."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from redis_server import RedisServer

from toolsearch.mcp.usage_feed import GatewayUsage
from toolsearch.stores.usage_redis import RedisUsageStore
from toolsearch.usage import FileUsageStore, InMemoryUsageStore, UsageLog, UsageStore, stored_logs

SWITCHES = 12


def _store(kind: str, tmp_path: Path, redis_server: RedisServer) -> UsageStore:
    if kind == "file":
        return FileUsageStore(tmp_path / "gw.usage.json")
    if kind == "redis":
        return RedisUsageStore(redis_server.url)
    return InMemoryUsageStore()


def _held(store: UsageStore) -> list[UsageLog]:
    """Every log the store holds (memory cannot list them: its dictionary is read)."""
    logs = stored_logs(store)
    if logs is not None:
        return logs
    assert isinstance(store, InMemoryUsageStore)
    return [UsageLog.from_dict(data) for data in store._logs.values()]


@pytest.mark.parametrize("kind", ["file", "memory", "redis"])
def test_catalog_switches_carry_one_log_forward_not_a_copy_each(
    kind: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    # Before: each switch carried the whole log to the new catalog and kept the old one too: 500 entries after 40
    # switches were stored 41 times (4.4 MB), in the --usage-log file and in mcp serve's default memory alike.
    store = _store(kind, tmp_path, redis_server)
    feed = GatewayUsage("cat-0", store=store)
    for i in range(30):
        feed.searched(f"s{i}", f"request number {i} about weather", ["weather_get"])
        feed.called(f"s{i}", "weather_get", True)
    feed.save()
    for n in range(1, SWITCHES + 1):  # an upstream whose tool list keeps changing
        feed.catalog_changed(f"cat-{n}")
        feed.searched(f"t{n}", f"mail report {n}", ["email_send"])
        feed.called(f"t{n}", "email_send", True)
        feed.save()
    logs = _held(store)
    assert [log.catalog for log in logs] == [f"cat-{SWITCHES}"]
    (log,) = logs
    assert len(log) == 30 + SWITCHES  # every entry, each once
    assert len(feed.log) == 30 + SWITCHES
    if kind == "file":
        stored = json.loads((tmp_path / "gw.usage.json").read_text())
        assert list(stored["logs"]) == [f"cat-{SWITCHES}"]
    feed.enabled = False


def test_the_store_keeps_its_bound_across_switches(tmp_path: Path) -> None:
    store = FileUsageStore(tmp_path / "gw.usage.json")
    store.save(UsageLog("cat-0", max_entries=5, privacy="tokens"))
    feed = GatewayUsage("cat-0", store=store, privacy="tokens")
    for n in range(8):
        feed.searched(f"s{n}", f"request number {n}", ["tool_a"])
        feed.called(f"s{n}", "tool_a", True)
        feed.save()
        feed.catalog_changed(f"cat-{n + 1}")
    (log,) = store.logs()
    assert len(log) == 5 and log.max_entries == 5  # the newest 5, in one log
    assert sum(len(each) for each in store.logs()) <= 5
    feed.enabled = False


def test_a_carry_that_cannot_unite_keeps_both_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # a stored log of the new catalog hashed under another salt: the entries cannot join it, so nothing is deleted
    store = FileUsageStore(tmp_path / "gw.usage.json")
    other = UsageLog("cat-1")
    other.add("weather in rome", "weather_get", ["weather_get"])
    store.save(other)
    feed = GatewayUsage("cat-0", store=store)
    feed.searched("s", "weather in lisbon", ["weather_get"])
    feed.called("s", "weather_get", True)
    feed.save()
    with caplog.at_level(logging.WARNING, logger="toolsearch.mcp"):
        feed.catalog_changed("cat-1")
    assert "could not carry entries over to the new catalog" in caplog.text
    assert sorted(log.catalog for log in store.logs()) == ["cat-0", "cat-1"]
    feed.enabled = False
