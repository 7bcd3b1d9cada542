"""Session state kept whole: nested metadata, a view's forget, store settings, unreadable Redis keys, bad ids."""

from __future__ import annotations

import copy
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
    session = SessionManager(index).create("s", metadata={"pair": (1, 2), "3": "three"})
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


@pytest.mark.parametrize(
    "settings",
    [
        {"ttl_seconds": 1},
        {"clock": lambda: 0.0},
        {"ttl_seconds": 5, "clock": max},
        {"max_sessions": 5},
        {"max_sessions": None},  # no bound: given, so refused too
    ],
)
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
    bounded = SessionManager(index, max_sessions=1)  # the bound holds on the default store
    bounded.create("a")
    bounded.create("b")
    assert "a" not in bounded and "b" in bounded


def test_max_sessions_none_leaves_the_default_store_unbounded(index: ToolIndex) -> None:
    unbounded = SessionManager(index, max_sessions=None)
    for i in range(1001):
        unbounded.create(f"s{i}")
    # Before: None was read as "not given", so the 1,001st session evicted the first (the bound of 1,000).
    assert "s0" in unbounded and "s1000" in unbounded
    assert SessionManager(index).store.max_sessions == 1000  # type: ignore[attr-defined]  # not given: the default


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


def test_an_id_no_session_can_have_is_in_no_session_but_get_refuses_it(index: ToolIndex) -> None:
    manager = SessionManager(index)
    for bad in ("", " ", "bad\ud800"):
        assert bad not in manager  # before: SessionRequiredError / SessionError (membership on any input answers)
        with pytest.raises(SessionError):
            manager.get(bad)
        with pytest.raises(SessionError):
            manager.create(bad)
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
    assert "\ud800" not in manager  # no session's id, and never sent to Redis (before: a bare UnicodeEncodeError)
    with pytest.raises(SessionError, match="lone surrogate"):
        manager.get("\ud800")


@pytest.mark.parametrize(
    ("metadata", "where"),
    [
        ({7: "seven"}, r"key 7 \(int\) at metadata\[7\]"),
        ({1: "int one", "1": "text one"}, r"key 1 \(int\) at metadata\[1\]"),
        ({True: "yes", "true": "text"}, r"key True \(bool\) at metadata\[True\]"),
        ({"a": {7: "x"}}, r"key 7 \(int\) at metadata\['a'\]\[7\]"),
        ({"a": [{"ok": 1}, {None: "n"}]}, r"key None \(NoneType\) at metadata\['a'\]\[1\]\[None\]"),
    ],
)
def test_a_metadata_key_that_is_not_text_is_refused_naming_where(
    index: ToolIndex, metadata: dict[Any, Any], where: str
) -> None:
    # Before: json.dumps made 7 into "7" and True into "true" without a word, and merged keys that print alike
    manager = SessionManager(index)
    with pytest.raises(SessionError, match=where + ".*use text keys"):
        manager.create("s", metadata=metadata)
    assert "s" not in manager


def test_state_copies_are_whole_without_deepcopy(index: ToolIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    # copy.deepcopy made every request's cost grow with the metadata (the gateway's pins, one per tool shown)
    def no_deepcopy(value: object, memo: object = None) -> object:
        raise AssertionError("SessionState.copy used copy.deepcopy")

    monkeypatch.setattr(copy, "deepcopy", no_deepcopy)
    manager = SessionManager(index)
    manager.create("s", metadata={"user": {"roles": ["reader"]}, "pins": {"t0": "f0"}})
    turn = manager.get("s").view()  # a view: its snapshot and its base, two copies of the stored state
    turn.discover(["t1"])
    assert turn.state().metadata == manager.get("s").state().metadata
    turn.commit()
    manager.store.update("s", _add_admin)  # a nested edit is still a change, written
    stored = manager.store.get("s")
    assert stored is not None and stored.metadata["user"]["roles"] == ["reader", "admin"]
    copied = stored.copy()
    copied.metadata["user"]["roles"].append("edited in a copy")
    copied.metadata["pins"]["t9"] = "f9"
    assert stored.metadata == {"user": {"roles": ["reader", "admin"]}, "pins": {"t0": "f0"}}
    from toolsearch.stores._state import copy_json  # here: the module imports on trees without it (the old one)

    given = {"a": [1, {"b": (2, [3])}]}
    copied_json = copy_json(given)
    copied_json["a"][1]["b"][1].append(4)
    assert given == {"a": [1, {"b": (2, [3])}]}


def test_values_other_than_json_an_update_puts_in_metadata_are_copied_kind_and_all(index: ToolIndex) -> None:
    from collections import defaultdict

    manager = SessionManager(index)
    manager.create("s")

    def put(state: SessionState) -> None:
        state.metadata["seen"] = {"a"}
        state.metadata["counts"] = defaultdict(int)

    def edit(state: SessionState) -> None:
        state.metadata["seen"].add("b")  # in place: still a change, written with a new version
        state.metadata["counts"]["t0"] += 1  # a defaultdict stays one (a plain dict raised KeyError here)

    manager.store.update("s", put)
    before = manager.store.get("s")
    assert before is not None
    after = manager.store.update("s", edit)
    stored = manager.store.get("s")
    assert stored is not None and after.version == before.version + 1
    assert stored.metadata["seen"] == {"a", "b"} and stored.metadata["counts"] == {"t0": 1}
    stored.metadata["seen"].add("edited in a read copy")
    again = manager.store.get("s")
    assert again is not None and again.metadata["seen"] == {"a", "b"}
