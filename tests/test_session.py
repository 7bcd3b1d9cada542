"""Sessions: views over one shared index — isolation, allowed subsets, pinned, caps, expiry, concurrency."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from toolsearch import (
    ArgumentTypeError,
    BackendSpec,
    Ranking,
    SessionError,
    SessionRequiredError,
    Tool,
    ToolIndex,
    ToolNotAllowedError,
    UnknownSessionError,
    register_backend,
)
from toolsearch.executor import ExecutorConfig, handle_tool_calls, tools_for_request
from toolsearch.providers import call, search
from toolsearch.session import InMemorySessionStore, SessionManager, SessionState, SessionStore
from toolsearch.stores import StateUpdate
from toolsearch.tokens import tool_tokens


def _tool(name: str, description: str, namespace: str | None = None, **params: str) -> Tool:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return Tool(name, description, {"type": "object", "properties": props, "required": list(props)}, namespace)


TOOLS = [
    _tool("weather_current", "Current weather conditions for a city.", "weather", city="City name"),
    _tool("weather_forecast", "Multi-day weather forecast for a city.", "weather", city="City name"),
    _tool("email_send", "Send an email message to recipients.", "email", to="Recipient", body="Text"),
    _tool("email_search", "Search the mailbox for email messages.", "email", query="Search words"),
    _tool("github_create_issue", "Open a new issue in a GitHub repository.", "github", title="Issue title"),
    _tool("github_list_issues", "List issues of a GitHub repository.", "github", repo="owner/name"),
    _tool("calculator", "Evaluate an arithmetic expression.", expression="e.g. 2+2"),
    _tool("math.factorial", "Factorial of a non-negative integer.", "math", n="The integer"),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


@pytest.fixture()
def manager(index: ToolIndex) -> SessionManager:
    return SessionManager(index)


class CountingStore(InMemorySessionStore):
    """The in-memory store, recording which store operations a caller makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def get(self, session_id: str) -> SessionState | None:
        self.calls.append("get")
        return super().get(session_id)

    def update(self, session_id: str, fn: StateUpdate, *, base: SessionState | None = None) -> SessionState:
        self.calls.append("update" if base is None else "update from the state read")
        return super().update(session_id, fn, base=base)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- ids -----------------------------------------------------------------------------------------


def test_missing_session_id_is_an_error_never_a_fresh_session(manager: SessionManager) -> None:
    for bad in ("", "   ", None):
        with pytest.raises(SessionRequiredError, match="session id is required"):
            manager.get(bad)  # type: ignore[arg-type]
        with pytest.raises(SessionRequiredError):
            manager.create(bad)  # type: ignore[arg-type]
    with pytest.raises(SessionRequiredError, match="must be a string"):
        manager.get(42)  # type: ignore[arg-type]
    assert len(manager) == 0


def test_unknown_session_id(manager: SessionManager) -> None:
    with pytest.raises(UnknownSessionError, match="unknown session 'nope'"):
        manager.get("nope")
    assert "nope" not in manager


def test_create_get_close(manager: SessionManager) -> None:
    created = manager.create("s1")
    assert manager.get("s1").id == created.id == "s1"
    with pytest.raises(SessionError, match="already exists"):
        manager.create("s1")
    assert manager.get_or_create("s1").id == "s1"
    manager.close("s1")
    manager.close("s1")  # closing twice is fine
    with pytest.raises(UnknownSessionError):
        manager.get("s1")
    with pytest.raises(UnknownSessionError, match="expired or was closed"):
        _ = created.discovered


def test_get_or_create_keeps_existing_settings(manager: SessionManager) -> None:
    manager.create("s", allowed=["calculator"])
    again = manager.get_or_create("s", allowed=None)
    assert again.allowed == frozenset({"calculator"})


# --- views ---------------------------------------------------------------------------------------


def test_sessions_share_the_index_and_are_isolated(manager: SessionManager, index: ToolIndex) -> None:
    a, b = manager.create("a"), manager.create("b")
    assert a.index is b.index is index
    a.search("weather forecast", 2)
    assert set(a.discovered) == {"weather_forecast", "weather_current"}
    assert b.discovered == ()
    assert not b.is_visible("weather_forecast")
    b.search("send email", 1)
    assert b.discovered == ("email_send",)
    assert "email_send" not in a.discovered


def test_discovered_is_ordered_and_deduplicated(manager: SessionManager) -> None:
    s = manager.create("s")
    update = s.discover(["calculator", "email_send", "calculator"])
    assert update.added == ("calculator", "email_send")
    again = s.discover(["email_send", "weather_current"])
    assert again.refreshed == ("email_send",) and again.added == ("weather_current",)
    assert s.discovered == ("calculator", "email_send", "weather_current")
    assert [t.name for t in s.visible_tools()] == list(s.discovered)


def test_search_hits_become_discovered_unless_not_recorded(manager: SessionManager) -> None:
    s = manager.create("s")
    result = s.search("github issue", 5, record=False)
    assert result.names and s.discovered == ()
    s.search("github issue", 5)
    assert set(s.discovered) == set(result.names)


def test_allowed_subset_is_enforced_in_search_visibility_and_discovery(manager: SessionManager) -> None:
    s = manager.create("t", allowed=["weather_current", "email_send", "calculator"])
    result = s.search("weather forecast city", 10)
    assert "weather_forecast" not in result.names
    assert set(result.names) <= {"weather_current", "email_send", "calculator"}
    assert s.is_allowed("weather_current") and not s.is_allowed("weather_forecast")
    with pytest.raises(ToolNotAllowedError, match="weather_forecast"):
        s.discover(["weather_current", "weather_forecast"])
    assert s.discovered == tuple(n for n in result.names)  # the failed discover changed nothing
    with pytest.raises(ToolNotAllowedError):
        s.tool("weather_forecast")
    assert s.namespaces == ["weather", "email"]


def test_allowed_and_pinned_names_are_checked(manager: SessionManager) -> None:
    with pytest.raises(SessionError, match="not in the index"):
        manager.create("x", allowed=["calculator", "no_such_tool"])
    with pytest.raises(SessionError, match="pinned tool 'ghost'"):
        manager.create("x", pinned=["ghost"])
    with pytest.raises(ToolNotAllowedError, match="pinned tool 'email_send'"):
        manager.create("x", allowed=["calculator"], pinned=["email_send"])
    with pytest.raises(SessionError, match="not a single string"):
        manager.create("x", allowed="calculator")
    assert "x" not in manager


def test_pinned_tools_are_always_visible_first_and_never_discovered(index: ToolIndex) -> None:
    manager = SessionManager(index, max_discovered=1)
    s = manager.create("p", pinned=["calculator"])
    assert s.is_visible("calculator") and [t.name for t in s.visible_tools()] == ["calculator"]
    s.discover(["calculator", "email_send"])
    s.discover(["weather_current"])
    assert s.discovered == ("weather_current",)
    assert [t.name for t in s.visible_tools()] == ["calculator", "weather_current"]


def test_count_cap_evicts_least_recently_used_and_refinding_refreshes(index: ToolIndex) -> None:
    manager = SessionManager(index, max_discovered=3)
    s = manager.create("c")
    s.discover(["calculator"])
    s.discover(["email_send"])
    s.discover(["email_search"])
    s.discover(["calculator"])  # re-found: now the most recent
    update = s.discover(["weather_current"])
    assert update.evicted == ("email_send",)
    assert s.discovered == ("calculator", "email_search", "weather_current")  # first-discovery order kept
    s.touch(["email_search"])  # a call refreshes too
    assert s.discover(["github_list_issues"]).evicted == ("calculator",)


def test_count_cap_keeps_the_best_ranked_names_of_one_batch(index: ToolIndex) -> None:
    s = SessionManager(index, max_discovered=2).create("c")
    update = s.discover(["email_send", "email_search", "calculator"])  # best first
    assert update.evicted == ("calculator",) and update.added == ("email_send", "email_search")
    assert s.discovered == ("email_send", "email_search")


def test_token_budget_cap(index: ToolIndex) -> None:
    catalog = index.catalog
    one = tool_tokens(catalog["email_send"])
    budget = one + tool_tokens(catalog["calculator"])
    s = SessionManager(index, max_discovered_tokens=budget).create("b")
    s.discover(["email_send"])
    s.discover(["calculator"])
    assert set(s.discovered) == {"email_send", "calculator"}
    update = s.discover(["weather_forecast"])
    assert "email_send" in update.evicted
    assert sum(tool_tokens(catalog[n]) for n in s.discovered) <= budget or len(s.discovered) == 1


def test_a_single_tool_over_budget_still_stays(index: ToolIndex) -> None:
    s = SessionManager(index, max_discovered_tokens=1).create("b")
    s.discover(["email_send"])
    assert s.discovered == ("email_send",)


def test_forget(manager: SessionManager) -> None:
    s = manager.create("f")
    s.discover(["calculator", "email_send"])
    s.forget(["calculator"])
    assert s.discovered == ("email_send",)
    s.forget()
    assert s.discovered == ()


def test_pin_and_unpin_go_through_the_store(manager: SessionManager) -> None:
    s = manager.create("p", allowed=["calculator", "email_send", "email_search"])
    s.discover(["email_send", "email_search"])
    s.pin(["email_send", "calculator"])  # a discovered tool becomes pinned instead
    other = manager.get("p")  # another handle (another worker) sees the change
    assert other.pinned == ("email_send", "calculator") and other.discovered == ("email_search",)
    assert [t.name for t in other.visible_tools()] == ["email_send", "calculator", "email_search"]
    other.unpin(["email_send"])
    assert s.pinned == ("calculator",) and not s.is_visible("email_send")
    with pytest.raises(ToolNotAllowedError, match="'weather_current' is not in the session's allowed tools"):
        s.pin(["weather_current"])
    with pytest.raises(SessionError, match="collection of tool names"):
        s.pin("calculator")


def test_a_view_answers_from_one_read_and_commits_once(manager: SessionManager) -> None:
    s = manager.create("v")
    view = s.view()
    view.discover(["calculator"])
    assert view.is_visible("calculator") and not s.is_visible("calculator")  # not written yet
    s.discover(["email_send"])  # meanwhile, another change reaches the store
    view.commit()
    assert s.discovered == ("email_send", "calculator")  # both kept: the view replayed on the newer state
    view.commit()  # nothing left to write
    assert s.state().version == 2


# --- a conversation reset while a turn runs -------------------------------------------------------


def _reset(manager: SessionManager, session_id: str) -> SessionState:
    """Close the session and start it again with only the calculator allowed; the new state as stored."""
    manager.close(session_id)
    manager.create(session_id, allowed=["calculator"], metadata={"tenant": "new"})
    return manager.get(session_id).state()


@pytest.mark.parametrize("serialize", [False, True], ids=["objects", "json"])
def test_a_turn_on_a_closed_session_never_writes_over_the_session_created_again(
    index: ToolIndex, serialize: bool
) -> None:
    # Before: both incarnations started at version 0, so the old turn's compare-and-set matched the new
    # session and wrote the old snapshot over it, its wider rights (every tool allowed) and metadata included.
    store = InMemorySessionStore(serialize=serialize)
    worker_a, worker_b = SessionManager(index, store=store), SessionManager(index, store=store)
    worker_a.create("user-7", metadata={"tenant": "old"})  # every tool allowed
    turn = worker_a.get("user-7").view()
    turn.discover(["github_create_issue"])  # pending until the turn commits
    reset = _reset(worker_b, "user-7")
    with pytest.raises(UnknownSessionError, match="'user-7' was closed and created again"):
        turn.commit()
    assert worker_b.get("user-7").state() == reset  # the new session exactly as created
    assert reset.allowed == frozenset({"calculator"}) and reset.metadata == {"tenant": "new"}
    assert reset.discovered == [] and reset.version == 0


def test_a_handle_on_a_closed_session_never_changes_the_session_created_again(manager: SessionManager) -> None:
    # Before: the old handle kept its wider allowed set and discovered a tool the new session does not allow.
    old = manager.create("user-8")  # every tool allowed
    reset = _reset(manager, "user-8")
    for use in (lambda: old.discover(["email_send"]), lambda: old.pin(["email_send"]), lambda: old.discovered):
        with pytest.raises(UnknownSessionError, match="'user-8' was closed and created again"):
            use()
    assert manager.get("user-8").state() == reset
    assert manager.get("user-8").discover(["calculator"]).added == ("calculator",)  # a new handle works


# --- expiry and bounds ---------------------------------------------------------------------------


def test_ttl_expiry_with_an_injected_clock(index: ToolIndex) -> None:
    clock = FakeClock()
    manager = SessionManager(index, ttl_seconds=60, clock=clock)
    manager.create("old")
    manager.create("young")
    clock.now += 50
    manager.get("young")  # access renews the TTL
    clock.now += 20
    with pytest.raises(UnknownSessionError):
        manager.get("old")
    assert manager.get("young").id == "young"
    clock.now += 61
    assert manager.ids() == []


def test_lru_bound_on_sessions(index: ToolIndex) -> None:
    manager = SessionManager(index, max_sessions=2)
    manager.create("a")
    manager.create("b")
    manager.get("a")  # a is now more recent than b
    manager.create("c")
    assert sorted(manager.ids()) == ["a", "c"]
    with pytest.raises(UnknownSessionError):
        manager.get("b")


def test_store_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        InMemorySessionStore(ttl_seconds=0)
    with pytest.raises(ValueError):
        InMemorySessionStore(max_sessions=0)


# --- stores --------------------------------------------------------------------------------------


def test_a_serialising_store_works_through_the_same_interface(index: ToolIndex) -> None:
    store = InMemorySessionStore(serialize=True)  # states kept only as JSON text, as Redis keeps them
    assert isinstance(store, SessionStore)
    manager = SessionManager(index, store=store, max_discovered=2)
    s = manager.create("j", allowed=["calculator", "email_send", "email_search"], pinned=["calculator"])
    s.discover(["email_send", "email_search"])
    s.discover(["email_send"])
    # A second manager over the same store (another worker process) sees the same session.
    other = SessionManager(index, store=store).get("j")
    assert other.discovered == ("email_send", "email_search")
    assert other.allowed == frozenset({"calculator", "email_send", "email_search"})
    assert other.pinned == ("calculator",)
    assert other.state().allowed == frozenset({"calculator", "email_search", "email_send"})
    manager.close("j")
    assert store.ids() == []


def test_state_round_trip() -> None:
    state = SessionState("x", frozenset({"a"}), ("p",), ["a"], {"a": 3}, 3, 1.5, {"user": "u"}, 7)
    assert SessionState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


# --- cost and concurrency ------------------------------------------------------------------------


def test_creating_a_session_does_no_indexing(index: ToolIndex) -> None:
    # A backend that counts the tools it is asked to index: sessions must not add a single one.
    # (How fast a session is created is measured by the benchmarks, not asserted here.)
    added: list[int] = []

    class Counting:
        name = "counting-sessions"

        def add(self, tools: Any) -> None:
            added.append(len(list(tools)))

        def remove(self, names: Any) -> None:
            pass

        def search(self, query: str, k: int, allowed: Any = None) -> Ranking:
            return Ranking([])

        def describe(self) -> dict[str, Any]:
            return {}

        def save(self, folder: Any) -> None:
            pass

    register_backend(BackendSpec(Counting.name, create=lambda **o: Counting(), load=lambda f, t, **o: Counting()))
    big = ToolIndex.build(
        [_tool(f"tool_{i}", f"Does task number {i} for widgets.", f"ns{i % 20}", x="An input") for i in range(2000)],
        backend=Counting.name,
    )
    assert added == [2000]
    manager = SessionManager(big, max_sessions=10_000)
    allowed = frozenset(f"tool_{i}" for i in range(1000))
    for i in range(300):
        manager.create(f"s{i}", allowed=allowed if i % 2 else None)
    assert added == [2000]  # 300 sessions later, nothing was indexed again
    assert manager.get("s1").allowed is manager.get("s3").allowed  # one shared copy of the subset


def test_thread_safety_no_lost_discoveries(index: ToolIndex) -> None:
    manager = SessionManager(index)
    names = [t.name for t in TOOLS]
    shared = manager.create("shared")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            own = manager.create(f"own{n}")
            for _ in range(50):
                shared.discover([names[n % len(names)]])
                own.discover([names[(n + 1) % len(names)]])
                own.search("email", 2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(shared.discovered) == sorted(names)
    state = shared.state()
    assert state.tick == 50 * len(names)  # every discovery was counted: no lost updates
    for n in range(len(names)):
        own = manager.get(f"own{n}")
        assert names[(n + 1) % len(names)] in own.discovered
        assert set(own.discovered) <= {names[(n + 1) % len(names)], "email_send", "email_search"}


def test_asyncio_tasks_keep_sessions_apart(index: ToolIndex) -> None:
    manager = SessionManager(index)
    queries = {"w": "weather forecast", "e": "send email", "g": "github issue"}

    async def task(key: str) -> tuple[str, ...]:
        session = manager.create(f"task-{key}")
        for _ in range(5):
            session.search(queries[key], 2)
            await asyncio.sleep(0)
        return session.discovered

    async def main() -> list[tuple[str, ...]]:
        return await asyncio.gather(*(task(k) for k in queries))

    results = dict(zip(queries, asyncio.run(main()), strict=True))
    assert all(n.startswith("weather") for n in results["w"])
    assert all(n.startswith("email") for n in results["e"])
    assert all(n.startswith("github") for n in results["g"])


# --- bring-your-own-loop helpers -----------------------------------------------------------------


def test_tools_for_request_in_every_format_with_safe_names(manager: SessionManager) -> None:
    s = manager.create("f", pinned=["calculator"])
    s.discover(["math.factorial"])
    chat = tools_for_request(s, "openai_chat")
    names = [t["function"]["name"] for t in chat]
    assert names[0] == "calculator" and names[1] == "tool_search"
    alias = names[2]
    assert alias != "math.factorial" and alias.startswith("math_factorial")
    assert s.resolve_name(alias) == "math.factorial"
    assert [t["name"] for t in tools_for_request(s, "openai_responses")] == names
    anthropic = tools_for_request(s, "anthropic")
    assert [t["name"] for t in anthropic] == names and "input_schema" in anthropic[0]
    assert "inputSchema" in tools_for_request(s, "mcp")[0]
    with pytest.raises(ValueError, match="unknown tool format"):
        tools_for_request(s, "cohere")  # type: ignore[arg-type]


def test_handle_tool_calls_with_provider_shaped_calls(manager: SessionManager) -> None:
    s = manager.create("byo")
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "tool_search", "arguments": '{"query": "factorial"}'}},
    ]
    [found] = handle_tool_calls(s, calls)
    alias = tools_for_request(s, "openai_chat")[-1]["function"]["name"]
    assert f"- {alias} (score" in found.content and "math.factorial" in s.discovered
    results = handle_tool_calls(
        s,
        [
            {"type": "tool_use", "id": "t1", "name": alias, "input": {"n": "5"}},
            {"type": "function_call", "call_id": "r1", "name": "calculator", "arguments": '{"expression": "1"}'},
        ],
        {"math.factorial": lambda n: int(n) * 24, "calculator": lambda expression: 1},
    )
    assert results[0].content == "120" and results[0].to_anthropic()["tool_use_id"] == "t1"
    assert results[1].status.value == "not_discovered"
    assert results[1].to_openai_responses()["call_id"] == "r1"


def test_the_session_methods_still_work_and_say_where_the_helpers_went(manager: SessionManager) -> None:
    s = manager.create("old")
    with pytest.warns(DeprecationWarning, match=r"toolsearch\.handle_tool_calls\(session"):
        [found] = s.handle_tool_calls([{"type": "tool_use", "id": "t", "name": "tool_search", "input": {"query": "x"}}])
    assert found.status.value == "search"
    with pytest.warns(DeprecationWarning, match="tools_for_request"):
        assert s.tools_for_request("anthropic")[0]["name"] == "tool_search"
    with pytest.warns(DeprecationWarning, match="ahandle_tool_calls"):
        assert asyncio.run(s.ahandle_tool_calls([])) == []


def test_a_turn_reads_the_session_once_and_writes_it_once(index: ToolIndex) -> None:
    store = CountingStore()
    s = SessionManager(index, store=store).create("turn")
    calls = [
        {"type": "tool_use", "id": "a", "name": "tool_search", "input": {"query": "weather"}},
        {"type": "tool_use", "id": "b", "name": "tool_search", "input": {"query": "email"}},
        {"type": "tool_use", "id": "c", "name": "calculator", "input": {"expression": "1+1"}},
    ]
    store.calls.clear()
    config = ExecutorConfig(undiscovered="execute")
    results = handle_tool_calls(s, calls, {"calculator": lambda expression: 2}, config=config)
    assert [r.status.value for r in results] == ["search", "search", "ok"]
    assert store.calls == ["get", "update from the state read"]
    assert {"weather_current", "email_send", "calculator"} <= set(s.discovered)


def test_executor_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="tool_timeout"):
        ExecutorConfig(tool_timeout=0)
    with pytest.raises(ValueError, match="undiscovered"):
        ExecutorConfig(undiscovered="run")  # type: ignore[arg-type]
    assert ExecutorConfig(return_direct={"a"}).return_direct == frozenset({"a"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda m: m.create("user-\ud800"), r"session id 'user-\\ud800' holds a lone surrogate"),
        (lambda m: m.create("u1", metadata={"since": object()}), "session metadata must be plain JSON"),
        (lambda m: m.create("u1", metadata={"name": "x\udc80"}), "session metadata must be plain JSON.*surrogate"),
        (lambda m: m.create("u1", metadata={"score": float("nan")}), "session metadata must be plain JSON"),
    ],
)
def test_what_no_store_can_keep_is_refused_at_create_on_every_store(index: ToolIndex, call: Any, said: str) -> None:
    # Before: accepted by the in-memory store, and a bare UnicodeEncodeError or TypeError from a shared one
    for store in (InMemorySessionStore(), InMemorySessionStore(serialize=True)):
        manager = SessionManager(index, store=store)
        with pytest.raises(SessionError, match=said):
            call(manager)


def test_caps_must_be_whole_numbers(index: ToolIndex) -> None:
    # Before: "5" gave a bare TypeError naming nothing, and True was taken as a cap of 1.
    for setting in ({"max_discovered": "5"}, {"max_discovered": True}, {"max_discovered_tokens": "2000"},
                    {"max_discovered_tokens": 2.5e3}):
        (name,) = setting
        with pytest.raises(ArgumentTypeError, match=f"SessionManager: {name} must be a whole number"):
            SessionManager(index, **setting)  # type: ignore[arg-type]
    assert SessionManager(index, max_discovered=5).max_discovered == 5
    import numpy as np

    assert SessionManager(index, max_discovered=np.int64(5)).max_discovered == 5  # a numpy integer is a whole number


def test_one_name_as_a_string_is_refused_by_discover_touch_and_forget(manager: SessionManager) -> None:
    # Before: forget("email_send") and touch(...) did nothing, discover("calculator") named the tool 'c'.
    s = manager.create("one-name")
    s.discover(["calculator", "email_send"])
    before = s.state().last_used
    for method in (s.discover, s.touch, s.forget):
        said = rf"{method.__name__} takes a collection of tool names.*\['email_send'\]"
        with pytest.raises(SessionError, match=said):
            method("email_send")
    assert s.state().last_used == before and s.discovered == ("calculator", "email_send")


def test_a_tool_removed_from_the_index_holds_no_slot_under_the_cap(index: ToolIndex) -> None:
    # Before: the removed tool still counted against max_discovered, so a live tool was evicted in its place.
    own = ToolIndex.build(TOOLS, backend="bm25")
    s = SessionManager(own, max_discovered=2).create("removed")
    s.discover(["email_send"])
    s.discover(["calculator"])
    own.remove(["calculator"])
    update = s.discover(["weather_current"])
    assert update.evicted == () and s.discovered == ("email_send", "weather_current")
    assert s.discover(["github_list_issues"]).evicted == ("email_send",)  # the live ones still count


def test_a_tool_called_with_a_search_of_the_same_turn_runs_and_is_evicted_last(index: ToolIndex) -> None:
    # Before: the turn's search evicted the tool first, and its call was refused as "not loaded yet".
    s = SessionManager(index, max_discovered=2).create("spare")
    s.discover(["weather_current"])
    s.discover(["calculator"])  # weather_current is the least recently used
    calls = [call("weather_current", city="Porto"), search("send an email", 1)]
    ran: list[str] = []
    results = handle_tool_calls(s, calls, {"weather_current": lambda city: ran.append(city) or "sunny"})
    assert [r.status.value for r in results] == ["ok", "search"] and ran == ["Porto"]
    assert results[1].search is not None and results[1].search.evicted == ("calculator",)
    assert s.discovered == ("weather_current", "email_send")


def test_with_one_slot_a_tool_called_with_a_search_still_runs(index: ToolIndex) -> None:
    s = SessionManager(index, max_discovered=1).create("one-slot")
    s.discover(["weather_current"])
    calls = [call("weather_current", city="Porto"), search("send an email", 1)]
    results = handle_tool_calls(s, calls, {"weather_current": lambda city: "sunny"})
    assert [r.status.value for r in results] == ["ok", "search"]
    assert s.discovered == ("email_send",)  # the search's hit takes the one slot: the cap holds
