"""The session rules every entry point shares: id length, closes that stay closed, asked-again settings, pins."""

from __future__ import annotations

import pytest

from toolsearch import SessionError, Tool, ToolIndex, ToolNotAllowedError, UnknownSessionError
from toolsearch.session import (
    MAX_SESSION_ID_LENGTH,
    InMemorySessionStore,
    SessionManager,
    check_session_settings,
    pinned_in,
)


def _tool(name: str, description: str) -> Tool:
    return Tool(name, description, {"type": "object", "properties": {}})


TOOLS = [
    _tool("weather_current", "Current weather conditions for a city."),
    _tool("email_send", "Send an email message to recipients."),
    _tool("calculator", "Evaluate an arithmetic expression."),
]


@pytest.fixture()
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


@pytest.fixture()
def manager(index: ToolIndex) -> SessionManager:
    return SessionManager(index)


# --- session ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["create", "get_or_create"])
def test_an_id_over_the_limit_is_refused_and_never_quoted_whole(manager: SessionManager, call: str) -> None:
    # Before: any length was taken (a 2 MB Redis key), and an unknown one came back in a 1 MB message.
    long_id = "q" * 2_000_000
    with pytest.raises(SessionError, match=f"longer than the {MAX_SESSION_ID_LENGTH} characters") as raised:
        getattr(manager, call)(long_id)
    assert len(str(raised.value)) < 300 and "2000000 characters" in str(raised.value)
    assert manager.ids() == []


def test_an_unknown_id_over_the_limit_is_never_quoted_whole(manager: SessionManager) -> None:
    long_id = "q" * 2_000_000
    with pytest.raises(UnknownSessionError) as raised:
        manager.get(long_id)
    assert len(str(raised.value)) < 300 and "2000000 characters" in str(raised.value)
    manager.close(long_id)  # closing an unknown id is no error, whatever its length


def test_an_id_at_the_limit_works_and_messages_cut_it_short(manager: SessionManager) -> None:
    longest = "q" * MAX_SESSION_ID_LENGTH
    handle = manager.create(longest)
    assert manager.get(longest).id == longest and len(repr(handle)) < 150
    with pytest.raises(SessionError, match="already exists") as exists:
        manager.create(longest)
    with pytest.raises(ToolNotAllowedError, match="not available in session") as refused:
        handle.discover(["no_such_tool"])
    manager.close(longest)
    with pytest.raises(UnknownSessionError, match="has expired or was closed") as gone:
        handle.pinned_tools()
    with pytest.raises(UnknownSessionError, match="unknown session") as unknown:
        manager.get(longest)
    for error in (exists, refused, gone, unknown):
        assert longest not in str(error.value) and f"({MAX_SESSION_ID_LENGTH} characters)" in str(error.value)


# --- closes and drops ---------------------------------------------------------------------------


def test_a_closed_session_reads_as_closed_and_a_dropped_one_does_not(index: ToolIndex) -> None:
    manager = SessionManager(index, max_sessions=1)
    alice = manager.create("alice")
    assert not manager.was_closed(alice)  # live
    manager.create("bob")  # the store drops alice for bob
    assert "alice" not in manager and not manager.was_closed(alice)
    bob = manager.get("bob")
    manager.close("bob")
    assert manager.was_closed(bob)
    again = manager.create("bob", allowed=["calculator"])  # started again after the close: a new session
    assert not manager.was_closed(again) and manager.was_closed(bob)
    manager.close("alice")  # closing a session the store had dropped already still ends it
    assert manager.was_closed(alice)


def test_a_close_is_seen_by_every_handle_of_the_manager_that_closed_it(index: ToolIndex) -> None:
    store = InMemorySessionStore()
    here, there = SessionManager(index, store=store), SessionManager(index, store=store)
    handle = here.create("u")
    there.close("u")  # another manager (another process) closes it: no trace in the store
    assert not here.was_closed(handle) and there.was_closed(handle)


# --- a session asked for again ------------------------------------------------------------------


def test_other_allowed_tools_for_an_existing_session_are_refused(manager: SessionManager) -> None:
    wide = manager.create("wide")
    with pytest.raises(SessionError, match=r"'wide' already exists .*the stored session allows every tool, this run "
                                           r"passed 1\)\. .*sessions\.close\('wide'\)"):
        check_session_settings(wide, ["calculator"], ())
    narrow = manager.create("narrow", allowed=["calculator", "email_send"])
    with pytest.raises(SessionError, match="also allows 'email_send' and this run also passed 'weather_current'"):
        check_session_settings(narrow, ["calculator", "weather_current"], ())
    check_session_settings(narrow, ["email_send", "calculator"], ())  # the same set
    check_session_settings(narrow, None, ["calculator"])  # None takes the stored ones; a missing pin is pinned
    assert narrow.pinned == ("calculator",)
    with pytest.raises(ToolNotAllowedError):
        check_session_settings(narrow, None, ["weather_current"])
    with pytest.raises(SessionError, match=r"not a single string; pass \['calculator'\]"):
        check_session_settings(narrow, "calculator", ())


def test_pins_a_new_session_can_start_with(index: ToolIndex) -> None:
    assert pinned_in(["calculator", "gone", "calculator", "email_send"], index) == ["calculator", "email_send"]
    assert pinned_in(["calculator", "email_send"], index, allowed={"email_send"}) == ["email_send"]
    index.remove(["calculator"])
    assert pinned_in(["calculator", "email_send"], index) == ["email_send"]


def test_a_handle_within_fewer_tools_searches_sees_and_admits_only_those(manager: SessionManager) -> None:
    stored = manager.create("u")  # every tool allowed
    within = stored.within(["weather_current", "calculator"])
    assert within.allowed == frozenset({"weather_current", "calculator"}) and stored.allowed is None
    assert within.search("send an email").names == [] and not within.is_allowed("email_send")
    assert within.view().allowed == within.allowed  # a turn's view keeps the limit
    within.discover(["calculator"])
    assert stored.discovered == ("calculator",)  # the same session
    assert within.within(["calculator", "weather_current", "email_send"]) is within


def test_a_session_stored_under_a_longer_id_can_still_be_read_and_closed() -> None:
    # the 256-character cap holds for new sessions; before, get and close refused a longer id too, so a session an
    # earlier release stored under one could not even be deleted
    sessions = SessionManager(ToolIndex.build(TOOLS, backend="bm25"))
    long_id = "t" * 300
    with pytest.raises(UnknownSessionError):
        sessions.get(long_id)
    sessions.close(long_id)
    with pytest.raises(SessionError, match="longer than the 256 characters"):
        sessions.create(long_id)


def test_a_session_created_again_elsewhere_is_not_taken_for_the_closed_one_whatever_the_clocks() -> None:
    # Before: was_closed compared wall-clock times, so a session another host created again after the close, with
    # a clock behind this one's, read as closed and could not be created again once the store dropped it
    sessions = SessionManager(ToolIndex.build(TOOLS, backend="bm25"))
    first = sessions.create("conv")
    sessions.close("conv")
    again = sessions.create("conv")
    again.created_at = first.created_at - 2.0  # a host whose clock is behind
    assert sessions.was_closed(first) and not sessions.was_closed(again)
