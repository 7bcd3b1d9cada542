"""The agent loop driven by the scripted model over a real bm25 index and real Python tools."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from toolsearch import NameMap, Tool, ToolIndex
from toolsearch.executor import ahandle_tool_calls, handle_tool_calls
from toolsearch.loop import LoopConfig, LoopOutcome, ResultStatus, ToolSearchLoop, arun, run
from toolsearch.providers import (
    ChatRequest,
    Message,
    ModelTurn,
    ProviderError,
    ScriptedModel,
    ToolCall,
    Usage,
    call,
    example_arguments,
    search,
    search_and_call,
)
from toolsearch.session import Session, SessionManager
from toolsearch.tokens import count_json_tokens, request_tokens, text_of, without_cache_markers

CALLS: list[tuple[str, dict[str, Any]]] = []
_calls_lock = threading.Lock()


def _log(name: str, **kwargs: Any) -> None:
    with _calls_lock:
        CALLS.append((name, kwargs))


def weather_forecast(city: str, days: int = 3) -> dict[str, Any]:
    """Weather forecast for a city, day by day.

    Args:
        city: City name.
        days: Number of days.
    """
    _log("weather_forecast", city=city, days=days)
    return {"city": city, "days": days, "sky": "sunny"}


def send_email(to: str, subject: str, body: str) -> str:
    """Send an email message to a recipient."""
    _log("send_email", to=to, subject=subject, body=body)
    return f"sent to {to}"


def create_issue(repo: str, title: str) -> dict[str, Any]:
    """Create a new GitHub issue in a repository."""
    _log("create_issue", repo=repo, title=title)
    return {"number": 7, "repo": repo}


def flaky_database_query(sql: str) -> str:
    """Run a SQL query against the analytics database."""
    _log("flaky_database_query", sql=sql)
    raise ConnectionError("database is down")


def slow_report(seconds: float) -> str:
    """Generate a slow quarterly sales report."""
    _log("slow_report", seconds=seconds)
    time.sleep(seconds)
    return "report"


async def async_stock_price(symbol: str) -> float:
    """Look up the latest stock price for a ticker symbol."""
    await asyncio.sleep(0)
    _log("async_stock_price", symbol=symbol)
    return 123.5


async def async_slow_translation(text: str) -> str:
    """Translate text into French, slowly."""
    _log("async_slow_translation", text=text)
    await asyncio.sleep(2)
    return "bonjour"


def final_answer(text: str) -> str:
    """Give the final answer to the user and stop."""
    _log("final_answer", text=text)
    return f"FINAL: {text}"


def delete_all_users(confirm: bool) -> str:
    """Delete every user account in the admin console."""
    _log("delete_all_users", confirm=confirm)
    return "deleted"


FUNCTIONS: list[Callable[..., Any]] = [
    weather_forecast,
    send_email,
    create_issue,
    flaky_database_query,
    slow_report,
    async_stock_price,
    async_slow_translation,
    final_answer,
    delete_all_users,
]
TOOLS = [Tool.from_callable(fn) for fn in FUNCTIONS] + [
    Tool(
        "math.factorial",
        "Compute the factorial of an integer.",
        {"type": "object", "properties": {"n": {"type": "integer"}}},
    )
]
EVERYTHING = {fn.__name__: fn for fn in FUNCTIONS} | {"math.factorial": lambda n: 120}
SAFE = frozenset(t.name for t in TOOLS) - {"delete_all_users"}


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


@pytest.fixture()
def sessions(index: ToolIndex) -> SessionManager:
    CALLS.clear()
    return SessionManager(index)


def _session(sessions: SessionManager, name: str = "s", **kw: Any) -> Session:
    return sessions.create(name, allowed=kw.pop("allowed", SAFE), **kw)


def _tool_messages(result: Any) -> list[Message]:
    return [m for m in result.messages if m.role == "tool"]


# --- discovery -----------------------------------------------------------------------------------


def test_multi_step_discovery_and_the_exact_tools_of_each_request(sessions: SessionManager) -> None:
    model = ScriptedModel(
        [
            search("weather forecast"),
            call("weather_forecast", city="Paris"),
            search("send email"),
            call("send_email", to="bob@example.com", subject="Weather", body="Sunny"),
            "Sent Bob the forecast.",
        ]
    )
    result = run(model, "Email Bob the Paris forecast", session=_session(sessions), functions=EVERYTHING)
    assert result.outcome is LoopOutcome.COMPLETED
    assert result.output == "Sent Bob the forecast."
    assert CALLS == [
        ("weather_forecast", {"city": "Paris", "days": 3}),
        ("send_email", {"to": "bob@example.com", "subject": "Weather", "body": "Sunny"}),
    ]
    tools_per_request = [r.tool_names for r in result.requests]
    assert tools_per_request[0] == ("tool_search",)
    assert tools_per_request[1][0] == "tool_search" and "weather_forecast" in tools_per_request[1]
    assert tools_per_request[3][: len(tools_per_request[1])] == tools_per_request[1]  # appended, order stable
    assert "send_email" in tools_per_request[3]
    # what the provider payload carried is exactly that list
    sent = [[t["function"]["name"] for t in p["tools"]] for p in model.payloads]
    assert [tuple(s) for s in sent] == tools_per_request
    assert [s.query for s in result.searches] == ["weather forecast", "send email"]
    assert all(s.latency_ms >= 0 and s.hits for s in result.searches)
    assert [m.role for m in result.messages] == ["user"] + ["assistant", "tool"] * 4 + ["assistant"]
    json.dumps(result.to_dict())


def test_parallel_searches_in_one_turn_are_all_honoured(sessions: SessionManager) -> None:
    model = ScriptedModel([[search("weather forecast", 1), search("github issue", 1)], "ok"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    assert [s.names for s in result.searches] == [["weather_forecast"], ["create_issue"]]
    assert {"weather_forecast", "create_issue"} <= set(result.requests[1].tool_names)
    assert [m.tool_call_id for m in _tool_messages(result)] == ["call_1_1", "call_1_2"]


def test_a_tool_found_in_a_turn_is_callable_in_that_same_turn(sessions: SessionManager) -> None:
    # The call comes first in the turn; searches run first, so the tool is already visible.
    model = ScriptedModel([[call("create_issue", repo="a/b", title="Bug"), search("github issue")], "done"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    statuses = [r.status for r in result.tool_results]
    assert statuses == [ResultStatus.OK, ResultStatus.SEARCH]
    assert CALLS == [("create_issue", {"repo": "a/b", "title": "Bug"})]
    assert [m.tool_call_id for m in _tool_messages(result)] == ["call_1_1", "call_1_2"]  # call order kept


def test_pinned_tools_are_sent_from_the_first_request(sessions: SessionManager) -> None:
    model = ScriptedModel([call("final_answer", text="hi"), "x"])
    session = _session(sessions, pinned=["final_answer"])
    result = run(model, "x", session=session, functions=EVERYTHING, max_iterations=1)
    assert result.requests[0].tool_names == ("final_answer", "tool_search")
    assert CALLS == [("final_answer", {"text": "hi"})]


# --- failures go back to the model ---------------------------------------------------------------


def test_tool_errors_become_tool_results_and_the_loop_goes_on(sessions: SessionManager) -> None:
    model = ScriptedModel([search("sql analytics database"), call("flaky_database_query", sql="select 1"), "sorry"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    failed = result.tool_results[-1]
    assert failed.status is ResultStatus.ERROR and failed.is_error
    assert failed.content == "Tool 'flaky_database_query' failed: ConnectionError: database is down"
    assert result.messages[-2].is_error and result.outcome is LoopOutcome.COMPLETED


def test_invalid_arguments_are_refused_before_the_tool_runs(sessions: SessionManager) -> None:
    bad_json = ToolCall.from_json("", "weather_forecast", "{city: Paris")
    model = ScriptedModel(
        [
            search("weather forecast"),
            [call("weather_forecast", days="three"), bad_json],
            "giving up",
        ]
    )
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    schema_error, json_error = result.tool_results[-2:]
    assert schema_error.status is ResultStatus.INVALID_ARGUMENTS
    assert "'city' is a required property" in schema_error.content
    assert "days: 'three' is not of type 'integer'" in schema_error.content
    assert json_error.status is ResultStatus.INVALID_ARGUMENTS and "not valid JSON" in json_error.content
    assert CALLS == []


def test_arguments_no_provider_can_send_back_are_refused_before_the_tool_runs(sessions: SessionManager) -> None:
    # Before: NaN and 1e999 reached the tool, and the next request failed to encode them (a bare ValueError from the
    # provider's SDK); arguments nested 500 deep ran the tool, then raised RecursionError counting the request.
    deep = "[" * 200 + "]" * 200
    texts = ['{"city": "Paris", "days": NaN}', '{"city": "Paris", "days": 1e999}',
             '{"city": "Paris", "x": ' + deep + "}"]
    calls = [ToolCall.from_json(f"c{i}", "weather_forecast", text) for i, text in enumerate(texts)]
    model = ScriptedModel([search("weather forecast"), calls, "giving up"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    refused = result.tool_results[-3:]
    assert [r.status for r in refused] == [ResultStatus.INVALID_ARGUMENTS] * 3
    assert "arguments hold nan, which is not a JSON number" in refused[0].content
    assert "arguments hold inf, which is not a JSON number" in refused[1].content
    assert "arguments are nested deeper than 128 levels" in refused[2].content
    assert CALLS == [] and result.outcome is LoopOutcome.COMPLETED


def test_a_tool_call_whose_name_is_not_text_is_a_provider_error() -> None:
    # Before: a bare TypeError from inside the turn (the SDKs build answers without checking them)
    from toolsearch.providers.anthropic import parse_message
    from toolsearch.providers.openai import parse_chat_completion

    chat = {"choices": [{"message": {"tool_calls": [{"id": "1", "function": {"name": 123, "arguments": "{}"}}]}}]}
    with pytest.raises(ProviderError, match="a tool call whose name is int 123, not a string"):
        parse_chat_completion(chat, NameMap([]))
    anthropic = {"content": [{"type": "tool_use", "id": "t", "name": ["weather"], "input": {}}]}
    with pytest.raises(ProviderError, match=r"whose name is list \['weather'\], not a string"):
        parse_message(anthropic, NameMap([]))
    deep: Any = {}
    for _ in range(600):  # a provider hands over parsed input however deep it is
        deep = {"x": deep}
    anthropic = {"content": [{"type": "tool_use", "id": 7, "name": "weather", "input": deep}]}
    (parsed,) = parse_message(anthropic, NameMap([])).message.tool_calls
    assert parsed.id == "7" and parsed.arguments_error is not None and "deeper than 128" in parsed.arguments_error


def test_timeouts_of_sync_and_async_tools(sessions: SessionManager) -> None:
    model = ScriptedModel(
        [
            [search("quarterly sales report", 1), search("translate french", 1)],
            [call("slow_report", seconds=1.5), call("async_slow_translation", text="hello")],
            "too slow",
        ]
    )
    # That timeouts run together (not one after the other) is proven by order of events in
    # tests/fakes/e2e.py (scenario_parallel_errors_and_timeouts), not by a clock here.
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING, tool_timeout=0.3)
    timeouts = result.tool_results[-2:]
    assert [r.status for r in timeouts] == [ResultStatus.TIMEOUT, ResultStatus.TIMEOUT]
    assert "timed out after 0.3 s" in timeouts[0].content


def test_a_tool_that_raises_timeouterror_itself_is_an_error_not_a_timeout(sessions: SessionManager) -> None:
    def upstream(x: str) -> str:
        raise TimeoutError("upstream gateway timed out")

    index = ToolIndex.build([Tool.from_callable(upstream)], backend="bm25")
    session = SessionManager(index).create("u")
    session.discover(["upstream"])
    [result] = handle_tool_calls(session, [call("upstream", x="1", id="c")], {"upstream": upstream})
    assert result.status is ResultStatus.ERROR and "upstream gateway" in result.content


def test_an_async_tool_called_with_an_unknown_argument_is_an_error_result() -> None:
    async def notify(to: str) -> str:
        return f"notified {to}"

    # The schema allows extra properties, so the call reaches the function and fails at call time.
    tool = Tool("notify", "Notify someone", {"type": "object", "properties": {"to": {"type": "string"}}})
    session = SessionManager(ToolIndex.build([tool], backend="bm25")).create("n")
    session.discover(["notify"])
    [result] = asyncio.run(
        ahandle_tool_calls(session, [call("notify", to="a", cc="b", id="c")], {"notify": notify})
    )
    assert result.status is ResultStatus.ERROR and "cc" in result.content


# --- guards and outcomes -------------------------------------------------------------------------


def test_iteration_limit(sessions: SessionManager) -> None:
    model = ScriptedModel(policy=lambda request: [search(f"query number {len(request.messages)}")])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING, max_iterations=3)
    assert result.outcome is LoopOutcome.MAX_ITERATIONS
    assert result.iterations == 3 and len(result.searches) == 3
    assert result.messages[-1].role == "tool"  # the last calls were answered


def test_repeated_identical_calls_stop_the_run(sessions: SessionManager) -> None:
    same = call("weather_forecast", city="Oslo")
    model = ScriptedModel(policy=lambda request: [same] if len(request.messages) > 2 else [search("weather")])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING, max_identical_calls=2)
    assert result.outcome is LoopOutcome.REPEATED_CALL
    assert [c for c in CALLS] == [("weather_forecast", {"city": "Oslo", "days": 3})] * 2
    last = result.tool_results[-1]
    assert last.status is ResultStatus.SKIPPED and "identical arguments more than 2 times" in last.content
    assert result.messages[-1].role == "tool"  # every call of the history has a result


def test_return_direct_by_setting_and_by_tool_metadata(sessions: SessionManager, index: ToolIndex) -> None:
    model = ScriptedModel([search("final answer"), call("final_answer", text="42"), "never reached"])
    result = run(
        model, "x", session=_session(sessions), functions=EVERYTHING, return_direct=frozenset({"final_answer"})
    )
    assert result.outcome is LoopOutcome.RETURN_DIRECT and result.output == "FINAL: 42"
    assert model.remaining == 1

    tagged = Tool(
        "shout", "Shout the answer and finish.", {"type": "object", "properties": {}}, metadata={"return_direct": True}
    )
    session = SessionManager(ToolIndex.build([tagged], backend="bm25")).create("m", pinned=["shout"])
    result = run(ScriptedModel([call("shout"), "no"]), "x", session=session, functions={"shout": lambda: "HEY"})
    assert result.outcome is LoopOutcome.RETURN_DIRECT and result.output == "HEY"


def test_a_tool_outside_the_session_never_runs(sessions: SessionManager) -> None:
    model = ScriptedModel(
        [
            search("delete all users admin"),
            call("delete_all_users", confirm=True),
            call("no_such_tool"),
            "ok",
        ]
    )
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING, undiscovered="execute")
    assert "delete_all_users" not in result.searches[0].names
    refused = result.tool_results[1:3]
    assert [r.status for r in refused] == [ResultStatus.NOT_AVAILABLE] * 2
    # the same answer for a forbidden and an unknown tool: nothing leaks about what exists
    assert refused[0].content.replace("delete_all_users", "X") == refused[1].content.replace("no_such_tool", "X")
    assert all(name != "delete_all_users" for name, _ in CALLS)


def test_an_allowed_but_undiscovered_tool_is_explained_or_executed(sessions: SessionManager) -> None:
    model = ScriptedModel([call("create_issue", repo="a/b", title="t"), "ok"])
    result = run(model, "x", session=_session(sessions, "a"), functions=EVERYTHING)
    first = result.tool_results[0]
    assert first.status is ResultStatus.NOT_DISCOVERED and "query 'create issue'" in first.content
    assert CALLS == []

    model = ScriptedModel([call("create_issue", repo="a/b", title="t"), "ok"])
    session = _session(sessions, "b")
    result = run(model, "x", session=session, functions=EVERYTHING, undiscovered="execute")
    assert result.tool_results[0].status is ResultStatus.OK and "create_issue" in session.discovered


def test_a_visible_tool_without_implementation(sessions: SessionManager) -> None:
    model = ScriptedModel([search("weather forecast", 1), call("weather_forecast", city="Rome"), "ok"])
    result = run(model, "x", session=_session(sessions), functions={})
    assert result.tool_results[-1].status is ResultStatus.NOT_AVAILABLE
    assert "no implementation" in result.tool_results[-1].content


def test_bad_search_arguments_reach_the_model_as_text(sessions: SessionManager) -> None:
    model = ScriptedModel([call("tool_search", max_results=50), "ok"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    [record] = result.searches
    assert record.error and not record.hits and result.tool_results[0].status is ResultStatus.SEARCH_ERROR
    assert "`query` is required" in result.messages[2].content


def test_config_is_validated() -> None:
    for bad in ({"max_iterations": 0}, {"tool_timeout": 0}, {"undiscovered": "maybe"}, {"max_identical_calls": 0}):
        with pytest.raises(ValueError):
            LoopConfig(**bad)


def test_scripted_model_runs_out_of_turns(sessions: SessionManager) -> None:
    with pytest.raises(ProviderError, match="only 1 turn"):
        run(ScriptedModel([search("weather")]), "x", session=_session(sessions), functions=EVERYTHING)


# --- tokens --------------------------------------------------------------------------------------


def test_token_accounting_per_request(sessions: SessionManager) -> None:
    model = ScriptedModel(
        [
            search("weather forecast", 1),
            ModelTurn(Message.assistant("Sunny."), Usage(input_tokens=321, output_tokens=3)),
        ],
        format="anthropic",
    )
    result = run(model, "Weather?", session=_session(sessions), functions=EVERYTHING)
    first, second = result.requests
    assert first.tokens == request_tokens(model.payloads[0])
    assert first.tokens is not None and second.tokens is not None
    assert first.tokens.tools == sum(count_json_tokens(without_cache_markers(t)) for t in model.payloads[0]["tools"])
    assert second.tokens.tools > first.tokens.tools  # the found tool's schema joined the request
    assert first.tokens.system > 0 and second.tokens.messages > first.tokens.messages
    assert second.usage == Usage(input_tokens=321, output_tokens=3)
    assert result.tool_tokens == [first.tokens.tools, second.tokens.tools]
    assert result.total_tokens == first.tokens.total + second.tokens.total


def test_system_prompt_has_the_suffix(sessions: SessionManager) -> None:
    model = ScriptedModel(["hi"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING, system="You are terse.")
    assert result.system is not None and result.system.startswith("You are terse.\n\n")
    assert "`tool_search`" in model.payloads[0]["messages"][0]["content"]
    model = ScriptedModel(["hi"])
    run(model, "x", session=_session(sessions, "t"), functions=EVERYTHING, system_suffix=False)
    assert model.payloads[0]["messages"][0]["role"] == "user"


# --- without tool search: "off" and "auto" -----------------------------------------------------------


def test_tool_search_off_is_a_plain_loop_over_the_allowed_tools(sessions: SessionManager, index: ToolIndex) -> None:
    model = ScriptedModel([call("create_issue", repo="a/b", title="t"), call("delete_all_users", confirm=True), "ok"])
    session = _session(sessions)
    result = run(model, "x", session=session, functions=EVERYTHING, system="Be brief.", tool_search="off")
    names = [t.name for t in index.catalog if t.name in SAFE]  # catalog order, the subset only
    assert [list(r.tool_names) for r in result.requests] == [names, names, names]
    assert all(t["function"]["name"] != "tool_search" for t in model.payloads[0]["tools"])
    assert result.system == "Be brief." and not result.tool_search and not result.searches
    # an allowed tool runs without a search; a tool outside the session still never does
    assert [r.status for r in result.tool_results] == [ResultStatus.OK, ResultStatus.NOT_AVAILABLE]
    assert [name for name, _ in CALLS] == ["create_issue"]


def test_tool_search_auto_sends_every_tool_only_below_the_token_limit(sessions: SessionManager) -> None:
    from toolsearch.loop import session_tool_tokens

    small = _session(sessions, "small", allowed=["weather_forecast", "send_email"])
    cost = session_tool_tokens(small)
    for limit, searches in ((cost, False), (cost - 1, True)):
        model = ScriptedModel(["ok"])
        result = run(model, "x", session=small, functions=EVERYTHING, tool_search="auto", direct_max_tokens=limit)
        assert result.tool_search is searches
        assert list(result.requests[0].tool_names) == (
            ["tool_search"] if searches else ["weather_forecast", "send_email"]
        )
    # the whole (small) catalog fits under the default limit, so auto sends it all
    model = ScriptedModel(["ok"])
    everything = sessions.create("all")
    assert not run(model, "x", session=everything, functions=EVERYTHING, tool_search="auto").tool_search
    big = run(ScriptedModel(["ok"]), "x", session=everything, tool_search="auto", direct_max_tokens=10)
    assert big.tool_search  # 10 tools cannot fit in 10 tokens: decided without counting them


def test_tool_search_mode_is_validated() -> None:
    with pytest.raises(ValueError, match="tool_search must be"):
        LoopConfig(tool_search="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="direct_max_tokens"):
        LoopConfig(direct_max_tokens=-1)


# --- the policy model (for benchmarks) ------------------------------------------------------------


def test_search_and_call_policy_over_several_steps(sessions: SessionManager) -> None:
    policy = search_and_call(
        ["weather forecast for a city", "create a github issue"], expected=[None, "create_issue"], answer="All done."
    )
    model = ScriptedModel(policy=policy)
    result = run(model, "Plan my day", session=_session(sessions), functions=EVERYTHING)
    assert result.outcome is LoopOutcome.COMPLETED and result.output == "All done."
    assert [name for name, _ in CALLS] == ["weather_forecast", "create_issue"]
    assert CALLS[1][1] == {"repo": "example", "title": "example"}


def test_search_and_call_default_step_is_the_user_message(sessions: SessionManager) -> None:
    model = ScriptedModel(policy=search_and_call(max_results=2))
    result = run(model, "stock price for a ticker symbol", session=_session(sessions), functions=EVERYTHING)
    assert result.searches[0].query == "stock price for a ticker symbol"
    assert CALLS == [("async_stock_price", {"symbol": "example"})]


def test_example_arguments_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["a", "b"]},
            "n": {"type": "integer", "minimum": 4},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
            "opt": {"type": "boolean"},
        },
        "required": ["kind", "n", "tags", "maybe"],
    }
    assert example_arguments(schema) == {"kind": "a", "n": 4, "tags": ["example"], "maybe": 1.0}


# --- async and concurrency -----------------------------------------------------------------------


def test_arun_with_async_tools(sessions: SessionManager) -> None:
    model = ScriptedModel([search("stock price ticker", 1), call("async_stock_price", symbol="ACME"), "123.5"])
    result = asyncio.run(arun(model, "x", session=_session(sessions), functions=EVERYTHING))
    assert result.outcome is LoopOutcome.COMPLETED
    assert result.tool_results[-1].content == "123.5"


def test_sync_run_drives_async_tools_too(sessions: SessionManager) -> None:
    model = ScriptedModel([search("stock price ticker", 1), call("async_stock_price", symbol="ACME"), "ok"])
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    assert result.tool_results[-1].content == "123.5"


def test_concurrent_asyncio_runs_keep_sessions_isolated(sessions: SessionManager) -> None:
    loop = ToolSearchLoop(ScriptedModel(policy=search_and_call(max_results=1)), sessions, EVERYTHING)
    tasks = {
        "w": "weather forecast city",
        "e": "send an email message",
        "g": "create github issue repository",
        "s": "stock price ticker symbol",
    }

    async def main() -> list[Any]:
        return await asyncio.gather(*(loop.arun(q, session_id=k) for k, q in tasks.items()))

    results = dict(zip(tasks, asyncio.run(main()), strict=True))
    expected = {"w": "weather_forecast", "e": "send_email", "g": "create_issue", "s": "async_stock_price"}
    for key, result in results.items():
        assert sessions.get(key).discovered == (expected[key],)
        assert result.tool_results[-1].call.name == expected[key]


def test_concurrent_thread_runs_keep_sessions_isolated(sessions: SessionManager) -> None:
    loop = ToolSearchLoop(ScriptedModel(policy=search_and_call(max_results=1)), sessions, EVERYTHING)
    tasks = ["weather forecast city", "send an email message", "create github issue repository"] * 4
    results: dict[int, Any] = {}

    def worker(i: int) -> None:
        results[i] = loop.run(tasks[i], session_id=f"t{i}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(tasks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, query in enumerate(tasks):
        assert results[i].outcome is LoopOutcome.COMPLETED
        assert results[i].searches[0].query == query
        assert len(sessions.get(f"t{i}").discovered) == 1


def test_loop_class_creates_sessions_with_allowed_and_pinned(sessions: SessionManager) -> None:
    loop = ToolSearchLoop(ScriptedModel(["a", "b"]), sessions, EVERYTHING, max_iterations=2)
    loop.run("x", session_id="new", allowed=["final_answer"], pinned=["final_answer"])
    assert sessions.get("new").pinned == ("final_answer",)
    loop.run("y", session_id="new")  # existing session: settings kept
    assert sessions.get("new").allowed == frozenset({"final_answer"})
    assert loop.config.max_iterations == 2


# --- native tool-search forms, checked against the SDKs' own types --------------------------------


def _native_run(sessions: SessionManager, format: str) -> ScriptedModel:
    model = ScriptedModel(
        [
            search("weather forecast", 2, native=format == "openai_responses"),
            call("weather_forecast", city="Oslo"),
            "ok",
        ],
        format=format,
    )
    run(model, "x", session=_session(sessions), functions=EVERYTHING, tool_search_mode="native")
    return model


def test_anthropic_native_form_uses_tool_reference_and_defer_loading(sessions: SessionManager) -> None:
    import anthropic.types as anthropic_types
    from pydantic import TypeAdapter

    model = _native_run(sessions, "anthropic")
    payload = model.payloads[1]
    tools = {t["name"]: t for t in payload["tools"]}
    assert "defer_loading" not in tools["tool_search"]
    assert tools["weather_forecast"]["defer_loading"] is True
    result_block = payload["messages"][-1]["content"][0]
    assert result_block["type"] == "tool_result"
    assert {"type": "tool_reference", "tool_name": "weather_forecast"} in result_block["content"]
    TypeAdapter(anthropic_types.ToolResultBlockParam).validate_python(result_block)
    for tool in payload["tools"]:
        TypeAdapter(anthropic_types.ToolParam).validate_python(tool)
    TypeAdapter(anthropic_types.MessageParam).validate_python(payload["messages"][-1])


def test_openai_responses_native_form_uses_client_tool_search(sessions: SessionManager) -> None:
    import openai.types.responses as responses_types
    from pydantic import TypeAdapter

    model = _native_run(sessions, "openai_responses")
    first, second = model.payloads[:2]
    [search_tool] = first["tools"]
    assert search_tool["type"] == "tool_search" and search_tool["execution"] == "client"
    TypeAdapter(responses_types.ToolSearchToolParam).validate_python(search_tool)
    call_item, output_item = second["input"][1:3]
    assert call_item["type"] == "tool_search_call" and output_item["type"] == "tool_search_output"
    assert next(t["name"] for t in output_item["tools"]) == "weather_forecast"
    for item in second["input"]:
        TypeAdapter(responses_types.ResponseInputItemParam).validate_python(item)
    # the union above is lenient; check the found tools against the exact SDK types as well
    TypeAdapter(responses_types.ResponseToolSearchOutputItemParamParam).validate_python(output_item)
    for tool in output_item["tools"]:
        TypeAdapter(responses_types.FunctionToolParam).validate_python(tool)
    # tools delivered by tool_search_output are not repeated in `tools`
    assert [t.get("name", t["type"]) for t in second["tools"]] == ["tool_search"]


def test_names_are_mapped_to_provider_safe_aliases_and_back(sessions: SessionManager) -> None:
    def policy(request: ChatRequest) -> Any:
        if len(request.messages) == 1:
            return [search("factorial integer", 1)]
        if len(request.messages) == 3:
            return [call("math.factorial", n=5)]
        return "done"

    model = ScriptedModel(policy=policy, format="openai_chat")
    result = run(model, "x", session=_session(sessions), functions=EVERYTHING)
    names = [t["function"]["name"] for t in model.payloads[1]["tools"]]
    assert "math.factorial" not in names and any(n.startswith("math_factorial_") for n in names)
    alias = next(n for n in names if n.startswith("math_factorial_"))
    found_text = model.payloads[1]["messages"][-1]["content"]
    assert f"- {alias} (score" in found_text and "math.factorial" not in found_text  # the callable name
    sent_call = model.payloads[2]["messages"][-2]["tool_calls"][0]["function"]["name"]
    assert sent_call.startswith("math_factorial_")
    assert result.tool_results[-1].content == "120"


def test_openai_responses_native_form_explains_an_empty_search(sessions: SessionManager) -> None:
    import openai.types.responses as responses_types
    from pydantic import TypeAdapter

    model = ScriptedModel([search("zzzqqq", native=True), "ok"], format="openai_responses")
    run(model, "x", session=_session(sessions), functions=EVERYTHING, tool_search_mode="native")
    output, note = model.payloads[1]["input"][2:4]
    assert output["type"] == "tool_search_output" and output["tools"] == []
    assert note["role"] == "developer" and "No tools matched 'zzzqqq'" in note["content"]
    TypeAdapter(responses_types.ResponseInputItemParam).validate_python(note)


def test_history_can_be_given_as_plain_dicts_and_continued(sessions: SessionManager) -> None:
    model = ScriptedModel(["first", "second"], format="anthropic")
    session = _session(sessions)
    first = run(
        model, [{"role": "developer", "content": "Be kind."}, {"role": "user", "content": "hi"}], session=session
    )
    second = run(model, [*first.messages, Message.user("again")], session=session)
    assert second.output == "second"
    assert text_of(model.payloads[1]["system"]).endswith("Be kind.")
    assert [m["role"] for m in model.payloads[1]["messages"]] == ["user", "assistant", "user"]
    with pytest.raises(ValueError, match="message role"):
        run(model, [{"role": "robot", "content": "x"}], session=session)


def test_guessed_alias_and_raw_name_in_one_history_do_not_collide(sessions: SessionManager) -> None:
    from toolsearch import provider_safe_name

    alias = provider_safe_name("math.factorial")
    model = ScriptedModel([[call(alias, n=4), call("math.factorial", n=4)], "cannot"], format="openai_chat")
    session = _session(sessions, allowed=["final_answer"])
    result = run(model, "4!?", session=session, functions=EVERYTHING)
    assert [r.status for r in result.tool_results] == [ResultStatus.NOT_AVAILABLE] * 2
    sent = [c["function"]["name"] for c in model.payloads[1]["messages"][-3]["tool_calls"]]
    assert sent == [alias, alias]
