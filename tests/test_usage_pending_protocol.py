"""A pending-search store written to the earlier protocol still feeds the log (adapted, with a warning), and a usage
store that fails never fails the tool calls whose usage it was recording."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Sequence
from typing import Literal

import pytest
from fakes.usage_stores import DownPending

from toolsearch import Tool, ToolIndex
from toolsearch.executor import ResultStatus, ToolResult, ahandle_tool_calls, handle_tool_calls
from toolsearch.providers import call, search
from toolsearch.session import SessionManager
from toolsearch.usage import UsageLog, UsageRecorder


class EarlierPending:
    """A third party's pending store, written to the protocol before `PendingSearch` (as its docs asked)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[str, tuple[str, ...], set[str]]]] = {}

    def add(self, session_id: str, query: str, shown: Sequence[str]) -> None:
        self.rows.setdefault(session_id, []).append((query, tuple(shown), set()))

    def credit(self, session_id: str, tool: str) -> tuple[str, tuple[str, ...]] | None:
        for query, shown, credited in reversed(self.rows.get(session_id, [])):
            if tool in shown:
                if tool in credited:
                    return None
                credited.add(tool)
                return query, shown
        return None

    def forget(self, session_id: str) -> None:
        self.rows.pop(session_id, None)


def test_a_pending_store_of_the_earlier_protocol_still_feeds_the_log() -> None:
    # Before: TypeError "EarlierPending.add() missing 1 required positional argument: 'shown'", out of every search.
    class MyPending(EarlierPending):  # a class of its own: the warning comes once per class
        pass

    log = UsageLog("cat", privacy="tokens")
    with pytest.warns(DeprecationWarning, match=r"MyPending implements the earlier PendingSearches protocol"):
        recorder = UsageRecorder(log, pending=MyPending())  # type: ignore[arg-type]  # the earlier protocol
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        UsageRecorder(UsageLog("cat"), pending=MyPending())  # type: ignore[arg-type]  # warned once, not at every recorder
    shown, ranked = ["weather_now", "weather_get"], ["weather_get", "weather_now"]  # learning put weather_now first
    recorder.record_search("s", "weather in lisbon", shown, ranked=ranked)
    entry = recorder.record_call("s", "weather_now", True)
    assert entry is not None and entry.terms == log.terms("weather in lisbon")
    assert entry.shown == ("weather_get", "weather_now")  # the backend's order, as with a store of this protocol
    assert recorder.record_call("s", "weather_now", True) is None  # once per search and tool, as the store says
    recorder.forget("s")
    assert recorder.record_call("s", "weather_get", True) is None


WEATHER = Tool("weather_get", "Get the current weather for a city.", {"properties": {"city": {"type": "string"}}})
EMAIL = Tool("email_send", "Send an email to someone.", {"properties": {"to": {"type": "string"}}})
FUNCTIONS = {"weather_get": lambda city: f"sunny in {city}", "email_send": lambda to: f"sent to {to}"}


def _batch(driver: Literal["sync", "async"], recorder: UsageRecorder) -> list[ToolResult]:
    session = SessionManager(ToolIndex.build([WEATHER, EMAIL], backend="bm25")).create(f"chat-{driver}")
    session.discover(["email_send"])
    calls = [search("weather in lisbon", id="s"), call("weather_get", city="Lisbon", id="w"),
             call("email_send", to="bob", id="e")]
    if driver == "sync":
        return handle_tool_calls(session, calls, FUNCTIONS, usage=recorder)
    return asyncio.run(ahandle_tool_calls(session, calls, FUNCTIONS, usage=recorder))


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_failing_usage_store_never_fails_the_tool_calls(
    driver: Literal["sync", "async"], caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the store's error came out of the executor, and the whole batch (the calls had run) failed with it.
    with caplog.at_level(logging.WARNING, logger="toolsearch"):
        results = _batch(driver, UsageRecorder(UsageLog("cat"), pending=DownPending()))
    assert [(r.call.id, r.status) for r in results] == [
        ("s", ResultStatus.SEARCH), ("w", ResultStatus.OK), ("e", ResultStatus.OK)]
    assert [r.content for r in results[1:]] == ["sunny in Lisbon", "sent to bob"]
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "usage of a batch of tool calls not recorded: ConnectionError: pending.internal:7000 refused" in said
    assert "(pending searches in DownPending('tcp://pending.internal:7000')); the results stand" in said


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_executor_records_through_a_pending_store_of_the_earlier_protocol(
    driver: Literal["sync", "async"]
) -> None:
    log = UsageLog("cat", privacy="raw")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        recorder = UsageRecorder(log, pending=EarlierPending())  # type: ignore[arg-type]  # the earlier protocol
    results = _batch(driver, recorder)
    assert [r.status for r in results] == [ResultStatus.SEARCH, ResultStatus.OK, ResultStatus.OK]
    assert [(e.query, e.called) for e in log] == [("weather in lisbon", "weather_get")]
