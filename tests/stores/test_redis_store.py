"""RedisSessionStore against a real redis-server: processes racing on one session, outages, TTL, prefixes, bad data."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from fakes.long_ids import LONG_ID, assert_quoted_short, check_replaced_and_contended_messages
from redis_server import RedisServer, require_redis

from toolsearch import SessionManager, SessionStoreError, Tool, ToolIndex, UnknownSessionError
from toolsearch._errors import UsageStoreUnreachableError
from toolsearch.executor import handle_tool_calls
from toolsearch.mcp.shared import RedisCatalogBoard
from toolsearch.stores import SCHEMA_VERSION, InMemorySessionStore, RedisSessionStore, SessionState, store_from_url
from toolsearch.stores.usage_redis import RedisUsageStore

ROOT = Path(__file__).resolve().parents[2]

TOOLS = [
    Tool("weather_current", "Current weather conditions for a city."),
    Tool("weather_forecast", "Multi-day weather forecast for a city."),
    Tool("email_send", "Send an email message to recipients."),
    Tool("email_search", "Search the mailbox for email messages."),
    Tool("github_create_issue", "Open a new issue in a GitHub repository."),
    Tool("calculator", "Evaluate an arithmetic expression."),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


def _store(server: RedisServer, **options: object) -> RedisSessionStore:
    return RedisSessionStore(server.url, **options)  # type: ignore[arg-type]


# --- many workers, one session ------------------------------------------------------------------

PROCESSES, THREADS, PER_THREAD = 2, 8, 8

_WORKER = textwrap.dedent(
    """
    import sys, threading
    from toolsearch import SessionManager, Tool, ToolIndex
    from toolsearch.stores import RedisSessionStore

    url, process, threads, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    names = [f"tool_{p}_{t}_{i}" for p in range(__PROCESSES__) for t in range(threads) for i in range(per)]
    index = ToolIndex.build([Tool(n, "Does " + n.replace("_", " ") + ".") for n in names], backend="regex")
    session = SessionManager(index, store=RedisSessionStore(url, timeout=10, max_connections=threads)).get("shared")
    print("ready", flush=True)
    sys.stdin.readline()  # every worker starts at once

    def work(t):
        for i in range(per):
            session.discover([f"tool_{process}_{t}_{i}"])

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    print("done", flush=True)
    """
).replace("__PROCESSES__", str(PROCESSES))


def test_two_processes_of_eight_threads_keep_every_discovery(redis_server: RedisServer, tmp_path: Path) -> None:
    names = [f"tool_{p}_{t}_{i}" for p in range(PROCESSES) for t in range(THREADS) for i in range(PER_THREAD)]
    index = ToolIndex.build([Tool(n, "Does " + n.replace("_", " ") + ".") for n in names], backend="regex")
    manager = SessionManager(index, store=_store(redis_server))
    manager.create("shared")
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), redis_server.url, str(p), str(THREADS), str(PER_THREAD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(PROCESSES)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        for worker in workers:
            out, _ = worker.communicate(timeout=120)
            assert worker.returncode == 0 and out.strip() == "done"
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    state = manager.get("shared").state()
    assert sorted(state.discovered) == sorted(names)  # every discovered name kept
    assert state.tick == len(names)  # and every discovery counted once
    assert state.version == len(names)  # one write each: no lost and no doubled update


def test_threads_share_one_session_through_redis(redis_server: RedisServer, index: ToolIndex) -> None:
    store = _store(redis_server, max_connections=4)  # fewer connections than threads: callers wait their turn
    names = [t.name for t in TOOLS]
    SessionManager(index, store=store).create("s")

    def work(n: int) -> None:
        session = SessionManager(index, store=store).get("s")
        for _ in range(5):
            session.discover([names[n % len(names)]])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state = store.get("s")
    assert state is not None and sorted(state.discovered) == sorted(names) and state.tick == 60


# --- a turn is one read and one write -----------------------------------------------------------


def test_a_turn_is_one_read_and_one_compare_and_set_on_redis(redis_server: RedisServer, index: ToolIndex) -> None:
    session = SessionManager(index, store=_store(redis_server)).create("turn")
    session.discover(["calculator"])  # loads the compare-and-set script once
    client = redis_server.client()
    client.config_resetstat()
    calls = [
        {"type": "tool_use", "id": "a", "name": "tool_search", "input": {"query": "weather"}},
        {"type": "tool_use", "id": "b", "name": "tool_search", "input": {"query": "send email"}},
        {"type": "tool_use", "id": "c", "name": "calculator", "input": {}},
    ]
    results = handle_tool_calls(session, calls, {"calculator": lambda: 2})
    stats = client.info("commandstats")
    assert [r.status.value for r in results] == ["search", "search", "ok"]
    commands = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
    # one GET by the turn, one EVALSHA (whose script runs one GET and one SET inside Redis)
    assert commands == {"config|resetstat": 1, "get": 2, "evalsha": 1, "set": 1}
    assert {"weather_current", "email_send", "calculator"} <= set(session.discovered)


def test_a_conflicting_update_starts_again_from_the_newer_state_without_reading_it(redis_server: RedisServer) -> None:
    store = _store(redis_server, ttl_seconds=60)
    store.create(SessionState("race"))
    stale = store.get("race")
    assert stale is not None
    store.update("race", lambda state: state.discovered.append("email_send"))  # another worker wrote meanwhile
    client = redis_server.client()
    client.config_resetstat()
    kept = store.update("race", lambda state: state.discovered.append("calculator"), base=stale)
    commands = {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}
    # two compare-and-sets, the first answered with the newer state: no GETEX between them
    assert commands == {"config|resetstat": 1, "evalsha": 2, "get": 2, "pexpire": 1, "set": 1}, commands
    assert kept.discovered == ["email_send", "calculator"] and kept.version == 2
    assert store.get("race") == kept
    assert 0 < client.pttl(store.key("race")) <= 60_000


# --- a conversation reset while a turn runs ------------------------------------------------------


def test_a_turn_on_a_closed_session_never_writes_over_the_session_created_again_on_redis(
    redis_server: RedisServer, index: ToolIndex
) -> None:
    # Before: both incarnations started at version 0, so the compare-and-set of worker A's turn matched the
    # session worker B created again and wrote the old snapshot over it: every tool allowed again, old metadata.
    worker_a = SessionManager(index, store=_store(redis_server, ttl_seconds=600))
    worker_b = SessionManager(index, store=_store(redis_server, ttl_seconds=600))
    worker_a.create("user-7", metadata={"tenant": "old"})  # every tool allowed
    turn = worker_a.get("user-7").view()
    turn.discover(["github_create_issue"])  # pending until the turn commits
    old_handle = worker_a.get("user-7")
    worker_b.close("user-7")
    worker_b.create("user-7", allowed=["calculator"], metadata={"tenant": "new"})
    reset = worker_b.get("user-7").state()
    with pytest.raises(UnknownSessionError, match="'user-7' was closed and created again"):
        turn.commit()
    with pytest.raises(UnknownSessionError, match="'user-7' was closed and created again"):
        old_handle.discover(["email_send"])
    stored = worker_a.get("user-7").state()
    assert stored == reset and stored.allowed == frozenset({"calculator"}) and stored.metadata == {"tenant": "new"}
    assert stored.discovered == [] and stored.version == 0


def test_a_state_written_before_incarnations_still_loads_and_updates(
    redis_server: RedisServer, index: ToolIndex
) -> None:
    # The previous release wrote no incarnation: such a session reads and updates as before (incarnation "").
    legacy = (
        b'{"schema":1,"id":"old","version":4,"allowed":null,"pinned":[],"discovered":["calculator"],'
        b'"last_used":{"calculator":1},"tick":1,"created_at":1.5,"metadata":{"team":"t"}}'
    )
    store = _store(redis_server, ttl_seconds=600)
    redis_server.client().set(store.key("old"), legacy)
    manager = SessionManager(index, store=store)
    session = manager.get("old")
    view = session.view()
    view.discover(["email_send"])
    view.commit()  # the compare-and-set of the first attempt, on the state as read
    session.discover(["weather_current"])  # a plain update
    state = manager.get("old").state()
    assert state.incarnation == "" and state.version == 6 and state.metadata == {"team": "t"}
    assert state.discovered == ["calculator", "email_send", "weather_current"]
    manager.close("old")
    assert manager.create("old").state().incarnation != ""  # created again: an incarnation of its own
    view.discover(["calculator"])  # on the view's snapshot, of the closed legacy session
    with pytest.raises(UnknownSessionError, match="closed and created again"):
        view.commit()


# --- Redis down or slow ---------------------------------------------------------------------------


def test_redis_down_is_a_clear_error_and_the_session_comes_back_with_its_data(tmp_path: Path, index: ToolIndex) -> None:
    server = RedisServer(tmp_path, persistent=True, password="s3cret-pass").start()
    try:
        store = RedisSessionStore(server.url, timeout=0.5)
        session = SessionManager(index, store=store).create("survivor")
        session.discover(["weather_current"])
        server.kill()
        with pytest.raises(SessionStoreError) as down:
            session.discover(["email_send"])
        message = str(down.value)
        assert f"redis://***@127.0.0.1:{server.port}/0" in message and "reachable" in message
        assert "s3cret" not in message and "s3cret" not in repr(store)
        with pytest.raises(SessionStoreError):
            SessionManager(index, store=store).create("newcomer")
        server.start()  # same port, same folder: the append-only file brings the data back
        assert session.discovered == ("weather_current",)  # the failed change was not half written
        session.discover(["email_send"])
        assert SessionManager(index, store=store).get("survivor").discovered == ("weather_current", "email_send")
    finally:
        server.stop()


def test_a_hung_redis_fails_within_the_timeout_and_nothing_is_half_written(
    redis_server: RedisServer, index: ToolIndex
) -> None:
    store = _store(redis_server, timeout=0.3)
    session = SessionManager(index, store=store).create("hung")
    session.discover(["calculator"])
    redis_server.pause()
    try:
        with pytest.raises(SessionStoreError, match=r"TimeoutError.*timeout 0\.3 s"):
            session.discover(["email_send"])
    finally:
        redis_server.resume()
    assert SessionManager(index, store=_store(redis_server)).get("hung").discovered == ("calculator",)


def test_a_view_whose_commit_failed_writes_its_changes_at_the_next_commit(
    redis_server: RedisServer, index: ToolIndex
) -> None:
    # Before: the failed commit dropped the view's changes, and the next commit wrote nothing, silently.
    store = _store(redis_server, timeout=0.3)
    view = SessionManager(index, store=store).create("retry").view()
    view.discover(["calculator"])
    redis_server.pause()
    try:
        with pytest.raises(SessionStoreError, match="TimeoutError"):
            view.commit()
    finally:
        redis_server.resume()
    assert SessionManager(index, store=_store(redis_server)).get("retry").discovered == ()
    view.commit()
    assert SessionManager(index, store=_store(redis_server)).get("retry").discovered == ("calculator",)
    view.commit()  # nothing left to write
    assert view.discovered == ("calculator",)


def test_an_unreachable_redis_at_start_is_a_clear_error(index: ToolIndex) -> None:
    require_redis()
    from redis_server import free_port

    store = RedisSessionStore(f"redis://user:hunter2@127.0.0.1:{free_port()}/3", timeout=0.5)
    with pytest.raises(SessionStoreError, match=r"redis://\*\*\*@127\.0\.0\.1:\d+/3 failed to answer a ping") as error:
        store.ping()
    assert "hunter2" not in str(error.value)


@pytest.mark.parametrize("given", ["a wrong password", "no password"])
def test_refused_credentials_are_said_as_such_never_as_an_unreachable_redis(tmp_path: Path, given: str) -> None:
    # Before: "AuthenticationError: invalid username-password pair or user is disabled. (timeout 0.5 s); check that
    # Redis is running and reachable from this worker", and the usage store said it "cannot be reached"
    server = RedisServer(tmp_path, password="s3cret-pass").start()
    try:
        auth = "alice:wrong-pass-9@" if given == "a wrong password" else ""
        url = f"redis://{auth}127.0.0.1:{server.port}/0"
        with pytest.raises(SessionStoreError) as session_error:
            RedisSessionStore(url, timeout=0.5).ping()
        with pytest.raises(UsageStoreUnreachableError) as usage_error:
            RedisUsageStore(url, timeout=0.5).catalogs()
        with pytest.raises(SessionStoreError) as board_error:  # the gateway's catalog epoch in the same Redis
            RedisCatalogBoard(url, timeout=0.5).read()
        said = "refused the user and password in the URL" if auth else "requires a password and the URL gives none"
        for message in (str(session_error.value), str(usage_error.value), str(board_error.value)):
            assert said in message and "reachable" not in message and "cannot be reached" not in message, message
            assert "wrong-pass" not in message and "s3cret" not in message and "alice" not in message, message
            assert f"127.0.0.1:{server.port}/0" in message
    finally:
        server.stop()


# --- isolation, expiry, prefixes --------------------------------------------------------------------


def test_two_sessions_on_two_workers_never_see_each_others_tools(redis_server: RedisServer, index: ToolIndex) -> None:
    worker_a = SessionManager(index, store=_store(redis_server))
    worker_b = SessionManager(index, store=_store(redis_server))
    alice = worker_a.create("alice", allowed=["weather_current", "weather_forecast", "calculator"])
    bob = worker_b.create("bob")
    handle_tool_calls(alice, [{"type": "tool_use", "id": "1", "name": "tool_search", "input": {"query": "weather"}}])
    handle_tool_calls(bob, [{"type": "tool_use", "id": "2", "name": "tool_search", "input": {"query": "email"}}])
    # each worker answers for the other's session too, and each session holds only its own tools
    assert set(worker_b.get("alice").discovered) == {"weather_current", "weather_forecast"}
    assert set(worker_a.get("bob").discovered) == {"email_send", "email_search"}
    call = {"type": "tool_use", "id": "3", "name": "email_send", "input": {}}
    [refused] = handle_tool_calls(worker_b.get("alice"), [call], {"email_send": print})
    assert refused.status.value == "not_available"


def test_idle_sessions_expire_with_redis_ttls_and_use_renews_them(redis_server: RedisServer, index: ToolIndex) -> None:
    store = _store(redis_server, ttl_seconds=60)
    manager = SessionManager(index, store=store)
    session = manager.create("idle")
    client = redis_server.client()
    key = store.key("idle")
    assert 0 < client.pttl(key) <= 60_000
    client.pexpire(key, 5_000)
    session.discover(["calculator"])  # a write renews the idle time
    assert client.pttl(key) > 5_000
    client.pexpire(key, 5_000)
    assert session.discovered == ("calculator",)  # so does a read
    assert client.pttl(key) > 5_000
    client.pexpire(key, 1)  # let it lapse, then wait well past that millisecond
    time.sleep(0.05)
    with pytest.raises(UnknownSessionError):
        manager.get("idle")
    assert client.exists(key) == 0


def test_a_key_prefix_separates_deployments(redis_server: RedisServer, index: ToolIndex) -> None:
    blue = SessionManager(index, store=_store(redis_server, prefix="blue:"))
    green = SessionManager(index, store=_store(redis_server, prefix="green:"))
    blue.create("same-id").discover(["calculator"])
    green.create("same-id").discover(["email_send"])
    blue.create("only-blue")
    assert blue.get("same-id").discovered == ("calculator",)
    assert green.get("same-id").discovered == ("email_send",)
    assert sorted(blue.ids()) == ["only-blue", "same-id"] and green.ids() == ["same-id"]
    assert sorted(k.decode() for k in redis_server.client().keys("*")) == [
        "blue:session:only-blue",
        "blue:session:same-id",
        "green:session:same-id",
    ]
    blue.close("same-id")
    assert green.get("same-id").discovered == ("email_send",)


# --- bad data ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{not json", "Expecting property name"),
        (b"\xff\xfe", "Expecting value"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"schema": 99, "id": "bad"}', f"state schema 99 is not the one this toolsearch reads ({SCHEMA_VERSION})"),
        (b'{"schema": 1, "id": "bad", "discovered": "calculator"}', "field 'discovered' must be a list"),
        (b'{"schema": 1, "id": "other", "version": 0}', "holds session 'other', not 'bad'"),
        # Before: read as version 0, then every update "conflicted" (1,000 round trips, then a false message)
        (b'{"schema": 1, "id": "bad", "version": "0"}', "field 'version' must be an int, got str"),
        (b'{"schema": 1, "id": "bad"}', "field 'version' is missing"),
        (b'{"schema": 1, "id": "bad", "version": 0, "incarnation": 7}', "field 'incarnation' must be a string"),
    ],
)
def test_an_unreadable_state_is_a_clear_error_never_a_silent_fresh_session(
    redis_server: RedisServer, index: ToolIndex, raw: bytes, problem: str
) -> None:
    store = _store(redis_server, prefix="t:")
    redis_server.client().set("t:session:bad", raw)
    manager = SessionManager(index, store=store)
    for attempt in (lambda: manager.get("bad"), lambda: manager.get_or_create("bad")):
        with pytest.raises(SessionStoreError) as error:
            attempt()
        assert "key 't:session:bad'" in str(error.value) and problem in str(error.value)
        assert "Delete that key" in str(error.value) or "delete that key" in str(error.value)
    assert redis_server.client().get("t:session:bad") == raw  # left as found, for whoever investigates


# --- construction -------------------------------------------------------------------------------------


def test_stores_from_urls(redis_server: RedisServer, index: ToolIndex) -> None:
    assert isinstance(store_from_url("memory://", ttl_seconds=5), InMemorySessionStore)
    store = store_from_url(redis_server.url, prefix="u:", timeout=2)
    assert isinstance(store, RedisSessionStore) and store.prefix == "u:" and store.timeout == 2
    SessionManager(index, store=store).create("x")
    assert redis_server.client().exists("u:session:x")
    with pytest.raises(SessionStoreError, match=r"unknown session store URL 'postgres://\*\*\*@db:5432/x'; use memory://"):
        store_from_url("postgres://admin:pw@db:5432/x")
    with pytest.raises(ValueError, match="timeout"):
        RedisSessionStore(redis_server.url, timeout=0)


def test_a_large_allowed_subset_is_stored_once_and_shared(redis_server: RedisServer) -> None:
    names = [f"tool_{i}" for i in range(200)]
    big = ToolIndex.build([Tool(n, f"Does task {i}.") for i, n in enumerate(names)], backend="regex")
    subset = names[:100]
    worker_a = SessionManager(big, store=_store(redis_server))
    worker_a.create("t1", allowed=subset).discover(["tool_5"])
    worker_a.create("t2", allowed=list(reversed(subset)))
    client = redis_server.client()
    [subset_key] = client.keys("toolsearch:allowed:*")  # one copy for both sessions
    assert len(client.get("toolsearch:session:t1")) < 400  # the session refers to it instead of holding it
    worker_b = SessionManager(big, store=_store(redis_server))  # another worker, nothing cached yet
    t1 = worker_b.get("t1")
    assert t1.allowed == frozenset(subset) and t1.discovered == ("tool_5",)
    assert worker_b.get("t2").allowed is t1.allowed  # one copy per worker too
    call = {"type": "tool_use", "id": "x", "name": "tool_150", "input": {}}
    [refused] = handle_tool_calls(t1, [call], {"tool_150": print})
    assert refused.status.value == "not_available"  # outside the subset, as stored
    client.delete(subset_key)
    missing = r"refers to the allowed subset 'toolsearch:allowed:\w+', which is missing"
    with pytest.raises(SessionStoreError, match=missing):
        SessionManager(big, store=_store(redis_server)).get("t1")


def test_an_update_that_changes_a_large_allowed_subset_keeps_it_readable(redis_server: RedisServer) -> None:
    # Before: only create wrote the subset key, so after this update every read failed "... which is missing".
    store = _store(redis_server, ttl_seconds=600)
    store.create(SessionState("tenant", allowed=frozenset(f"tool_{i}" for i in range(100))))
    narrower = frozenset(f"tool_{i}" for i in range(80))
    store.update("tenant", lambda state: setattr(state, "allowed", narrower))
    for reader in (store, _store(redis_server)):  # this worker, and another with nothing cached
        state = reader.get("tenant")
        assert state is not None and state.allowed == narrower
    assert len(redis_server.client().keys("toolsearch:allowed:*")) == 2  # one key per distinct subset


def test_a_managers_repr_needs_no_redis(tmp_path: Path, index: ToolIndex) -> None:
    # Before: repr counted the sessions with a SCAN, so logging the manager during an outage raised.
    server = RedisServer(tmp_path).start()
    try:
        store = RedisSessionStore(server.url, timeout=0.5)
        manager = SessionManager(index, store=store)
        manager.create("s")
        assert len(manager) == 1  # len still counts, with a scan
        server.kill()
        assert repr(manager) == f"SessionManager({index!r}, store={store!r})"  # no count, so no Redis call
        with pytest.raises(SessionStoreError, match="failed to list sessions"):
            len(manager)
    finally:
        server.stop()


# --- per-caller limits beside the sessions ----------------------------------------------------------


def test_caps_on_a_callers_sessions_are_one_count_for_every_worker(redis_server: RedisServer) -> None:
    from toolsearch.stores.limits import RedisLimits

    stores = [_store(redis_server, ttl_seconds=60), _store(redis_server, ttl_seconds=60)]
    # a grace well above the gap between two calls here, even on a loaded machine
    workers = [RedisLimits(s, grace_ms=1_000) for s in stores]
    for i in range(3):  # claimed on alternating workers, then created
        assert workers[i % 2].claim("sessions", "alice", f"s{i}", 3).granted
        stores[i % 2].create(SessionState(f"s{i}"))
    refused = workers[1].claim("sessions", "alice", "s3", 3)
    assert (refused.granted, refused.open) == (False, 3)
    assert refused.retry_after is not None and 50 < refused.retry_after <= 60  # the soonest idle expiry
    assert workers[0].claim("sessions", "bob", "t0", 3).granted  # another caller's own count
    assert workers[0].claim("sessions", "alice", "s1", 3).granted  # a session already counted is no new one

    time.sleep(1.2)  # past the grace a claim has for its session to be created
    stores[0].delete("s0")  # closed without a release (a worker died): its key is gone, so it stops counting
    assert workers[1].claim("sessions", "alice", "s3", 3).granted
    assert not workers[0].claim("sessions", "alice", "s4", 3).granted
    workers[0].release("sessions", "alice", "s1")
    assert workers[1].claim("sessions", "alice", "s4", 3).granted  # claimed, never created (its worker died) ...
    assert not workers[1].claim("sessions", "alice", "s5", 3).granted  # ... counts during the grace ...
    time.sleep(1.2)
    assert workers[0].claim("sessions", "alice", "s5", 3).granted  # ... and not after it


def test_a_counted_session_in_use_is_never_forgotten(redis_server: RedisServer) -> None:
    from toolsearch.stores.limits import RedisLimits

    store = _store(redis_server, ttl_seconds=60, prefix="t:")
    limits = RedisLimits(store, grace_ms=0)
    for i in range(2):
        store.create(SessionState(f"s{i}"))
        assert limits.claim("sessions", "alice", f"s{i}", 2).granted
    redis_server.client().delete("t:owner:sessions:alice")  # the count lost (expired early, evicted)
    assert limits.touch("sessions", "alice", "s0") and limits.touch("sessions", "alice", "s1")  # both in use
    assert not limits.claim("sessions", "alice", "s2", 2).granted  # counted again
    assert not limits.touch("sessions", "alice", "never-issued")
    assert 115_000 < redis_server.client().pttl("t:owner:sessions:alice") <= 120_000  # outlives what it counts


def test_request_rates_are_one_bucket_for_every_worker(redis_server: RedisServer) -> None:
    from toolsearch.stores.limits import RedisLimits

    workers = [RedisLimits(_store(redis_server)), RedisLimits(_store(redis_server))]
    spent = [workers[i % 2].take("alice", 1, 3) for i in range(4)]
    assert spent[:3] == [0.0, 0.0, 0.0] and 55 < spent[3] <= 60  # one a minute comes back
    assert workers[0].take("bob", 1, 3) == 0.0
    assert workers[1].take("carol", 1, 1, cost=0) == 0.0  # looking spends nothing
    assert workers[0].take("carol", 1, 1) == 0.0 and workers[1].take("carol", 1, 1, cost=0) > 0


def test_limits_on_an_unreachable_redis_are_errors_never_a_pass(tmp_path: Path) -> None:
    from toolsearch.stores.limits import RedisLimits

    server = RedisServer(tmp_path).start()
    limits = RedisLimits(RedisSessionStore(server.url, timeout=0.5))
    server.kill()
    for call in (lambda: limits.take("a", 60, 5), lambda: limits.claim("sessions", "a", "s", 5)):
        with pytest.raises(SessionStoreError, match=r"redis://127\.0\.0\.1"):
            call()
    server.stop()


def test_a_used_context_handle_keeps_its_owners_count_alive_with_few_store_calls(redis_server: RedisServer) -> None:
    from toolsearch.mcp.caps import StoreCaps
    from toolsearch.stores.limits import RedisLimits

    store = _store(redis_server, ttl_seconds=60, prefix="k:")
    caps = StoreCaps(RedisLimits(store, grace_ms=0), "contexts", 2, keep_every=15)
    for i in range(2):
        store.create(SessionState(f"x{i}"))
        assert caps.claim_now("carol", f"x{i}").granted
    client = redis_server.client()
    client.pexpire("k:owner:contexts:carol", 1000)  # as if carol had claimed nothing for a long while
    caps.keep("carol", "x0")  # a use: the count lives on (twice the TTL)
    assert 115_000 < client.pttl("k:owner:contexts:carol") <= 120_000
    client.pexpire("k:owner:contexts:carol", 1000)
    caps.keep("carol", "x1")  # within keep_every of the last: no store call
    assert client.pttl("k:owner:contexts:carol") <= 1000
    assert not caps.claim_now("carol", "x2").granted


# --- long session ids ---------------------------------------------------------------------------------

def test_a_long_session_id_is_quoted_short_in_the_redis_stores_messages(redis_server: RedisServer) -> None:
    # Before: each message quoted the whole id, and the key in it again (256 characters twice, in every log line)
    store = _store(redis_server, prefix="t:")
    short = f"{LONG_ID[:64]!r}... (256 characters)"
    with pytest.raises(UnknownSessionError, match="has expired or was closed") as unknown:
        store.update(LONG_ID, lambda state: state.discovered.append("calculator"))
    assert_quoted_short(str(unknown.value))

    # a key holding another session's state: the key and the id both quoted short
    redis_server.client().set(store.key(LONG_ID), b'{"schema": 1, "id": "other", "version": 0}')
    with pytest.raises(SessionStoreError) as other:
        store.get(LONG_ID)
    message = assert_quoted_short(str(other.value))
    assert f"key {'t:session:' + LONG_ID[:64]!r}... (266 characters)" in message
    assert "holds session 'other', not " + short in message
    redis_server.client().set(store.key("bad"), b'{"schema": 1, "id": "%s", "version": 0}' % LONG_ID.encode())
    with pytest.raises(SessionStoreError) as bad:
        store.get("bad")
    message = assert_quoted_short(str(bad.value))
    assert f"key 't:session:bad' in {store.url} holds session {short}, not 'bad'" in message
    redis_server.client().delete(store.key(LONG_ID))
    check_replaced_and_contended_messages(store)
