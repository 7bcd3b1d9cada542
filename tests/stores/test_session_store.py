"""Session stores in one process: atomic updates under threads and asyncio tasks, state validation, layering."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from fakes.long_ids import LONG_ID, assert_quoted_short, check_replaced_and_contended_messages

from toolsearch import SessionManager, SessionStoreError, Tool, ToolIndex, UnknownSessionError
from toolsearch.executor import ExecutorConfig, ahandle_tool_calls
from toolsearch.stores import SessionState, decode_state, encode_state, store_from_url
from toolsearch.stores.memory import InMemorySessionStore

THREADS, PER_THREAD = 8, 40
TASKS, PER_TASK = 8, 20


def _name(kind: str, worker: int, i: int) -> str:
    return f"{kind}_{worker}_{i}"


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    names = [_name("thread", t, i) for t in range(THREADS) for i in range(PER_THREAD)]
    names += [_name("task", t, i) for t in range(TASKS) for i in range(PER_TASK)]
    return ToolIndex.build([Tool(n, "Does " + n.replace("_", " ") + ".") for n in names], backend="regex")


@pytest.fixture()
def busy_interpreter() -> Iterator[None]:
    # Switch threads as often as the interpreter allows, so a read-modify-write that is not atomic
    # is interleaved with others (and loses updates) in every run rather than now and then.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize("serialize", [False, True], ids=["objects", "json"])
def test_one_session_driven_by_threads_and_asyncio_tasks_at_once_loses_nothing(
    index: ToolIndex, serialize: bool, busy_interpreter: None
) -> None:
    store = InMemorySessionStore(serialize=serialize)
    manager = SessionManager(index, store=store)
    manager.create("one")
    errors: list[BaseException] = []

    def thread_worker(t: int) -> None:
        session = manager.get("one")  # a handle per thread, as each request of a server would have
        try:
            for i in range(PER_THREAD):
                session.discover([_name("thread", t, i)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    async def task_worker(t: int) -> None:
        session = manager.get("one")
        config = ExecutorConfig(undiscovered="execute", tool_timeout=None)
        for i in range(PER_TASK):
            name = _name("task", t, i)
            # a call to an undiscovered tool: the turn discovers it and marks it used, in one write
            call = {"type": "tool_use", "id": name, "name": name, "input": {}}
            [result] = await ahandle_tool_calls(session, [call], {name: lambda: "ok"}, config=config)
            assert result.status.value == "ok", result.content
            await asyncio.sleep(0)

    def tasks() -> None:
        async def main() -> None:
            await asyncio.gather(*(task_worker(t) for t in range(TASKS)))

        try:
            asyncio.run(main())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=thread_worker, args=(t,)) for t in range(THREADS)]
    workers.append(threading.Thread(target=tasks))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    state = store.get("one")
    assert state is not None
    assert sorted(state.discovered) == sorted(index.catalog.names)  # every discovered name kept
    thread_changes, task_turns = THREADS * PER_THREAD, TASKS * PER_TASK
    assert state.tick == thread_changes + 2 * task_turns  # each turn: one discovery and one use
    assert state.version == thread_changes + task_turns  # each turn wrote once


def test_a_conflicting_writer_makes_an_update_run_again_on_the_newer_state(index: ToolIndex) -> None:
    store = InMemorySessionStore(serialize=True)
    SessionManager(index, store=store).create("c")
    seen: list[list[str]] = []

    def add(state: SessionState) -> None:
        seen.append(list(state.discovered))
        if len(seen) == 1:  # another writer gets in between this update's read and its write
            store.update("c", lambda other: other.discovered.append("thread_0_0"))
        state.discovered.append("thread_0_1")

    final = store.update("c", add)
    assert seen == [[], ["thread_0_0"]]  # the second run saw the other writer's change
    assert final.discovered == ["thread_0_0", "thread_0_1"] and final.version == 2
    assert store.get("c") == final


def test_update_of_a_missing_session_and_nothing_to_write(index: ToolIndex) -> None:
    store = InMemorySessionStore()
    with pytest.raises(UnknownSessionError, match="expired or was closed"):
        store.update("nobody", lambda state: None)
    store.create(SessionState("s"))
    assert store.update("s", lambda state: None).version == 0  # no change: no write
    assert not store.create(SessionState("s"))  # an id exists once


@pytest.mark.parametrize("serialize", [False, True], ids=["objects", "json"])
def test_a_write_meant_for_a_closed_session_never_lands_on_the_one_created_again(serialize: bool) -> None:
    # Before: the compare-and-set matched the version alone, and each incarnation of an id starts at 0.
    store = InMemorySessionStore(serialize=serialize)
    first = SessionState("s")
    assert store.create(first) and first.incarnation  # create gives a state without an incarnation a fresh one
    stale = store.get("s")
    assert stale is not None and stale.incarnation == first.incarnation
    store.delete("s")
    again = SessionState("s", allowed=frozenset({"calculator"}))
    store.create(again)
    assert again.incarnation not in ("", first.incarnation)
    with pytest.raises(UnknownSessionError, match="'s' was closed and created again"):
        store.update("s", lambda state: state.discovered.append("email_send"), base=stale)
    store.update("s", lambda state: setattr(state, "incarnation", "forged"))  # an update never changes it
    assert store.get("s") == again


def test_get_returns_a_copy_that_changes_nothing_stored() -> None:
    store = InMemorySessionStore()
    created = SessionState("s")
    store.create(created)  # which gives it its incarnation
    got = store.get("s")
    assert got is not None
    got.discovered.append("x")
    assert store.get("s") == created and created.discovered == []


# --- the stored form -----------------------------------------------------------------------------


def test_the_json_form_carries_a_schema_version_and_round_trips() -> None:
    state = SessionState("x", frozenset({"b", "a"}), ("p",), ["a"], {"a": 1}, 1, 2.5, {"team": "t"}, 3, "c0ffee")
    text = encode_state(state)
    assert text.startswith('{"schema":1,"id":"x","version":3,"allowed":["a","b"]')
    assert text.endswith(',"incarnation":"c0ffee"}')
    assert decode_state(text, "here") == state
    # the previous release wrote no incarnation: such a state reads as before, as incarnation ""
    legacy = '{"schema":1,"id":"x","version":3,"allowed":null,"tick":0,"created_at":0,"metadata":{}}'
    assert decode_state(legacy, "here") == SessionState("x", version=3, incarnation="")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "Expecting value"),
        ("null", "expected a JSON object, got NoneType"),
        ('{"id": "x", "schema": 2}', "state schema 2 is not the one this toolsearch reads (1)"),
        ('{"schema": 1}', "field 'id' is missing"),
        ('{"schema": 1, "id": "x", "allowed": "calc"}', "field 'allowed' must be a list of tool names"),
        ('{"schema": 1, "id": "x", "last_used": {"a": "1"}}', "field 'last_used' must map tool names to integers"),
        ('{"schema": 1, "id": "x", "version": 0, "tick": [1]}', "field 'tick' must be an int, got list"),
        ("[" * 100_000 + "]" * 100_000, "maximum recursion depth exceeded"),  # before: a bare RecursionError
        # a store's compare-and-set matches the version as written: without one, every update would be a "conflict"
        ('{"schema": 1, "id": "x"}', "field 'version' is missing"),
        ('{"schema": 1, "id": "x", "version": "0"}', "field 'version' must be an int, got str"),
        ('{"schema": 1, "id": "x", "version": true}', "field 'version' must be an int, got bool"),
        ('{"schema": 1, "id": "x", "version": 0, "created_at": "today"}', "field 'created_at' must be a number"),
        ('{"schema": 1, "id": "x", "version": 0, "incarnation": 7}', "field 'incarnation' must be a string, got int"),
    ],
)
def test_an_unreadable_state_is_a_clear_error(text: str, problem: str) -> None:
    with pytest.raises(SessionStoreError) as error:
        decode_state(text, "session 'x' in the test store")
    message = str(error.value)
    assert message.startswith("session 'x' in the test store does not hold a readable session state: ")
    assert problem in message and "Delete that key" in message


def test_store_from_url_memory_and_bad_urls() -> None:
    store = store_from_url("memory://", ttl_seconds=30, max_sessions=5)
    assert isinstance(store, InMemorySessionStore) and store.ttl_seconds == 30 and store.max_sessions == 5
    with pytest.raises(SessionStoreError, match=r"unknown session store URL 'file:///tmp/x'"):
        store_from_url("file:///tmp/x")


# --- layering ------------------------------------------------------------------------------------


def test_the_state_layer_imports_nothing_of_the_loop_the_meta_tool_or_providers() -> None:
    code = (
        "import sys, toolsearch.session, toolsearch.stores; "
        "print(sorted(m for m in sys.modules if m.startswith(('toolsearch', 'redis'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(eval(out))  # a printed list of module names
    assert not loaded & {"toolsearch.loop", "toolsearch.executor", "toolsearch.metatool", "toolsearch.providers"}
    assert "redis" not in loaded  # redis-py loads only with a Redis store


def test_caps_in_memory_count_the_sessions_the_store_still_holds() -> None:
    from toolsearch.stores.limits import MemoryLimits

    now = [0.0]
    store = InMemorySessionStore(ttl_seconds=10, clock=lambda: now[0])
    limits = MemoryLimits(store, grace_ms=1000)
    for i in range(3):
        assert limits.claim("contexts", "alice", f"s{i}", 3).granted
        store.create(SessionState(f"s{i}"))
    now[0] = 4.0
    assert limits.touch("contexts", "alice", "s2")  # in use: its idle expiry starts again
    refused = limits.claim("contexts", "alice", "s3", 3)
    assert (refused.granted, refused.open, refused.retry_after) == (False, 3, 6.0)
    assert limits.claim("contexts", "bob", "s3", 3).granted
    store.delete("s0")
    assert limits.claim("contexts", "alice", "s3", 3).granted  # s0 is gone, so it stops counting
    now[0] = 12.0  # s1 expired (idle 12 s), s2 not (used at 4), s3 never created (past its grace)
    claim = limits.claim("contexts", "alice", "s4", 3)
    assert (claim.granted, claim.open) == (True, 2)
    assert store.expires_in("s2") == 2.0 and store.expires_in("s1") is None
    assert store.expires_in("s2") == 2.0  # looking is not activity


def test_token_buckets_refill_look_without_spending_and_stay_bounded() -> None:
    from toolsearch.stores.limits import TokenBuckets

    buckets = TokenBuckets(max_keys=2)
    assert [buckets.take("a", 60, 2, now=0.0) for _ in range(3)] == [0.0, 0.0, 1.0]
    assert buckets.take("a", 60, 2, now=0.5, cost=0) == 0.5  # looking spends nothing and says how long
    assert buckets.take("a", 60, 2, now=1.0) == 0.0
    for key in ("b", "c", "d"):
        buckets.take(key, 60, 2, now=2.0)
    assert len(buckets) == 2


# An id of the longest length a session may have: every store message quotes its start and its length only.
@pytest.mark.parametrize("serialize", [False, True], ids=["objects", "json"])
def test_a_long_session_id_is_quoted_short_in_the_memory_stores_messages(serialize: bool) -> None:
    store = InMemorySessionStore(serialize=serialize)
    with pytest.raises(UnknownSessionError) as unknown:
        store.update(LONG_ID, lambda state: state.discovered.append("calculator"))
    assert_quoted_short(str(unknown.value))
    check_replaced_and_contended_messages(store)
