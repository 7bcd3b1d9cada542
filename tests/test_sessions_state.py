"""Session state kept whole: nested metadata, a view's forget, store settings, unreadable Redis keys, bad ids."""

from __future__ import annotations

import math
from typing import Any

import pytest
from redis_server import RedisServer

from toolsearch import InvalidArgumentError, SessionError, SessionStoreError, Tool, ToolIndex
from toolsearch.session import SessionManager
from toolsearch.stores import InMemorySessionStore, RedisSessionStore, SessionState, SessionStore, store_from_url

TOOLS = [Tool(f"t{i}", f"tool number {i}") for i in range(4)]
NESTED = {"user": {"roles": ["reader"]}}


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="regex")


def _add_admin(state: SessionState) -> None:
    state.metadata["user"]["roles"].append("admin")


def _check_nested_metadata_is_kept_whole(manager: SessionManager, store: SessionStore) -> None:
    given = {"user": {"roles": ["reader"]}}
    manager.create("s", metadata=given)
    given["user"]["roles"].append("changed later by the caller")  # the session holds none of the caller's objects
    snapshot = manager.get("s").state()
    snapshot.metadata["user"]["roles"].append("edited in a snapshot")  # a copy: nothing stored changes
    assert manager.get("s").state().metadata == NESTED
    out = store.update("s", _add_admin)  # a change inside a nested value is a change: it is written
    stored = store.get("s")
    assert stored is not None
    assert out.metadata == stored.metadata == {"user": {"roles": ["reader", "admin"]}} and stored.version == 1


@pytest.mark.parametrize("serialize", [False, True])
def test_nested_metadata_is_copied_and_its_changes_kept_in_memory(index: ToolIndex, serialize: bool) -> None:
    # Before: SessionState.copy() copied metadata one level deep, so a snapshot edit changed the stored session
    store = InMemorySessionStore(serialize=serialize)
    _check_nested_metadata_is_kept_whole(SessionManager(index, store=store), store)


@pytest.mark.slow
def test_nested_metadata_changes_are_written_to_redis(index: ToolIndex, redis_server: RedisServer) -> None:
    # Before: the update compared equal to its shallow "before" copy, so Redis silently kept the old metadata
    store = RedisSessionStore(redis_server.url)
    _check_nested_metadata_is_kept_whole(SessionManager(index, store=store), store)


def test_metadata_is_kept_in_its_json_form(index: ToolIndex) -> None:
    session = SessionManager(index).create("s", metadata={"pair": (1, 2), 3: "three"})
    assert session.state().metadata == {"pair": [1, 2], "3": "three"}  # as a shared store would give it back


def test_a_views_forget_all_keeps_what_another_worker_discovered_meanwhile(index: ToolIndex) -> None:
    manager = SessionManager(index)
    manager.create("s").discover(["t0", "t1"])
    turn = manager.get("s").view()
    turn.forget()  # forgets what the view saw: t0, t1
    assert turn.discovered == () and turn.visible_tools() == []
    manager.get("s").discover(["t3"])  # another worker, after the view's snapshot
    turn.commit()
    assert manager.get("s").discovered == ("t3",)  # before: () (t3 was wiped too)
    plain = manager.get("s")
    plain.forget()  # a plain handle forgets everything discovered when it runs, as documented
    assert plain.discovered == ()


@pytest.mark.parametrize("settings", [{"ttl_seconds": 1}, {"clock": lambda: 0.0}, {"ttl_seconds": 5, "clock": max}])
def test_settings_of_the_default_store_are_refused_beside_another_store(
    index: ToolIndex, settings: dict[str, Any]
) -> None:
    # Before: ignored without a word, so sessions meant to expire after a second lived on
    with pytest.raises(InvalidArgumentError, match=r"of the default in-memory store, ignored beside store=") as caught:
        SessionManager(index, store=InMemorySessionStore(), **settings)
    assert "pass" in str(caught.value) and "store_from_url(url, ttl_seconds=...)" in str(caught.value)
    for name in settings:
        assert name in str(caught.value)
    # what the docs show keeps working: the settings on the default store, or on the store itself
    clock = [0.0]
    SessionManager(index, ttl_seconds=3600, max_sessions=1000, max_discovered=20)
    manager = SessionManager(index, store=InMemorySessionStore(ttl_seconds=1, clock=lambda: clock[0]))
    manager.create("a")
    clock[0] = 2.0
    assert "a" not in manager


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinite_store_settings_are_refused_naming_the_option(index: ToolIndex, value: float) -> None:
    # Before: a NaN TTL was kept (no session ever expired); Redis failed later with a bare ValueError/OverflowError
    finite = r"must be a finite number of seconds above 0"
    for make in (
        lambda: SessionManager(index, ttl_seconds=value),
        lambda: InMemorySessionStore(ttl_seconds=value),
        lambda: store_from_url("memory://", ttl_seconds=value),
        lambda: RedisSessionStore("redis://127.0.0.1:1/0", ttl_seconds=value),
    ):
        with pytest.raises(InvalidArgumentError, match=rf"ttl_seconds {finite}"):
            make()
    for options in ({"timeout": value}, {"connect_timeout": value}):
        with pytest.raises(InvalidArgumentError, match=r"timeout and connect_timeout must be finite numbers"):
            RedisSessionStore("redis://127.0.0.1:1/0", **options)  # type: ignore[arg-type]


def test_an_id_no_session_can_have_is_refused_by_in_as_by_get(index: ToolIndex) -> None:
    manager = SessionManager(index)
    with pytest.raises(SessionError, match="lone surrogate"):
        "\ud800" in manager  # noqa: B015
    assert 7 not in manager and None not in manager and "nope" not in manager


@pytest.mark.slow
def test_a_redis_key_of_another_type_is_an_unreadable_key_not_an_outage(
    index: ToolIndex, redis_server: RedisServer
) -> None:
    store = RedisSessionStore(redis_server.url, prefix="t:", ttl_seconds=60)
    manager = SessionManager(index, store=store)
    turn = manager.create("foreign").view()
    turn.discover(["t1"])
    client = redis_server.client()
    client.delete("t:session:foreign")
    client.hset("t:session:foreign", "a", 1)  # another application's hash under the session prefix
    expected = (r"key 't:session:foreign' in redis://127\.0\.0\.1:\d+/0 does not hold a readable session state: "
                r"it holds a Redis value of another type than a string \(WRONGTYPE\)\. Delete that key")
    for act in (lambda: manager.get("foreign"), turn.commit, lambda: "foreign" in manager):
        with pytest.raises(SessionStoreError, match=expected) as caught:  # before: "check that Redis is running"
            act()
        assert "running" not in str(caught.value)
    with pytest.raises(SessionError, match="lone surrogate"):  # before: a bare UnicodeEncodeError
        "\ud800" in manager  # noqa: B015
