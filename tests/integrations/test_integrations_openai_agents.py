"""OpenAI Agents SDK: AgentToolSearch in a real Agent run, through `OpenAIChatCompletionsModel` and the real
`openai` client against the local wire-format server; every request's exact tools array is checked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from agents.run_config import ToolErrorFormatterArgs
from fakes import FakeLLMServer, Turn, toy_tools
from fakes.toy_tools import RAN

from toolsearch import SessionManager, SessionRequiredError, Tool, ToolIndex
from toolsearch.integrations.openai_agents import AgentToolSearch, tool_from_function_tool
from toolsearch.usage import UsageLog, UsageRecorder

set_tracing_disabled(True)  # no trace exporter: nothing may leave the machine
get_time = function_tool(toy_tools.get_time)
get_weather = function_tool(toy_tools.get_weather)
send_email = function_tool(toy_tools.send_email)
create_invoice = function_tool(toy_tools.create_invoice)


FIRST = ["get_time", "tool_search"]
AFTER_SEARCH = ["get_time", "tool_search", "get_weather"]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    RAN.clear()
    with FakeLLMServer() as fake:
        yield fake


def _setup(server: FakeLLMServer) -> tuple[AgentToolSearch, Agent[Any]]:
    search = AgentToolSearch([get_time, get_weather, send_email, create_invoice], pinned=["get_time"])
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    return search, Agent(name="assistant", model=model, tools=list(search.tools))


def _script(server: FakeLLMServer) -> None:
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1")]),
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),
                         ("get_weather", {"city": "Paris"}, "c2")]),
        Turn(text="Sunny in Paris."),
    )


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_run_sees_pinned_and_search_then_what_it_found(server: FakeLLMServer, mode: str) -> None:
    search, agent = _setup(server)
    _script(server)
    session = search.session("user-1")
    prompt = "What's the weather in Paris?"
    if mode == "sync":
        output = Runner.run_sync(agent, prompt, context=session, run_config=search.run_config()).final_output
    elif mode == "async":
        output = asyncio.run(Runner.run(agent, prompt, context=session, run_config=search.run_config())).final_output
    else:

        async def streamed() -> Any:
            run = Runner.run_streamed(agent, prompt, context=session, run_config=search.run_config())
            events = [e async for e in run.stream_events()]
            assert any(e.type == "raw_response_event" for e in events)
            return run.final_output

        output = asyncio.run(streamed())
    assert output == "Sunny in Paris."
    requests = server.requests
    assert [r.tool_names for r in requests] == [FIRST, AFTER_SEARCH, AFTER_SEARCH]
    assert all(r.stream == (mode == "stream") for r in requests)
    assert "get_weather" in requests[1].tool_results()[0].text
    results = {r.call_id: r.text for r in requests[2].tool_results()}  # the SDK answers found tools first
    refused, ran = results["c1"], results["c2"]
    assert "not loaded yet" in refused and "tool_search" in refused
    assert ran == "sunny in Paris"
    assert RAN == ["get_weather"]
    assert session.discovered == ("get_weather",)


def test_sessions_keep_discoveries_apart_and_across_runs(server: FakeLLMServer) -> None:
    search, agent = _setup(server)
    _script(server)
    Runner.run_sync(agent, "weather?", context=search.session("a"), run_config=search.run_config())
    server.enqueue(Turn(text="again"), Turn(text="fresh"))
    Runner.run_sync(agent, "and tomorrow?", context=search.session("a"), run_config=search.run_config())
    Runner.run_sync(agent, "hello", context=search.session("b"), run_config=search.run_config())
    assert [r.tool_names for r in server.requests[3:]] == [AFTER_SEARCH, FIRST]


def test_a_run_without_a_session_is_told_how_to_give_one(server: FakeLLMServer) -> None:
    _, agent = _setup(server)
    with pytest.raises(SessionRequiredError, match=r"context=search\.session"):
        Runner.run_sync(agent, "hi")
    assert server.requests == []


def test_a_catalog_tool_may_not_take_the_search_tool_name() -> None:
    from toolsearch import InvalidToolError

    @function_tool
    def tool_search(query: str) -> str:
        """A catalog tool that happens to share the search tool's name."""
        return query

    with pytest.raises(InvalidToolError, match="named 'tool_search' like the search tool"):
        AgentToolSearch([get_time, tool_search])
    with pytest.raises(InvalidToolError, match="pinned tool"):
        AgentToolSearch([get_time], pinned=["get_weather"])


@function_tool
def convert_currency(amount: float, currency: str) -> str:
    """Convert an amount of money into another currency."""
    RAN.append("convert_currency")
    raise RuntimeError("the exchange rate service is down")


@pytest.mark.parametrize("mode", ["sync", "stream"])
def test_searches_and_successful_calls_land_in_the_usage_log(server: FakeLLMServer, mode: str) -> None:
    usage = UsageRecorder(UsageLog(privacy="raw"))
    search = AgentToolSearch([get_time, get_weather, send_email, convert_currency], pinned=["get_time"], usage=usage)
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1"),
                         ("tool_search", {"query": "convert currency", "max_results": 1}, "s2")]),
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),  # not found: refused
                         ("get_weather", {"city": "Paris"}, "c2"),
                         ("convert_currency", {"amount": 3, "currency": "EUR"}, "c3"),  # fails: not learned
                         ("get_time", {"timezone": "UTC"}, "c4")]),  # pinned, never searched: teaches nothing
        Turn(text="Sunny in Paris."),
    )
    session = search.session("user-log")
    if mode == "sync":
        Runner.run_sync(agent, "weather and euros?", context=session, run_config=search.run_config())
    else:

        async def streamed() -> None:
            run = Runner.run_streamed(agent, "weather and euros?", context=session, run_config=search.run_config())
            async for _ in run.stream_events():
                pass

        asyncio.run(streamed())
    results = {r.call_id: r.text for r in server.requests[2].tool_results()}
    assert set(session.discovered) == {"get_weather", "convert_currency"}
    assert "error" in results["c3"].lower() and "not loaded yet" not in results["c3"]  # it ran and failed
    assert [(e.query, e.called, e.shown) for e in usage.log] == [
        ("weather forecast", "get_weather", ("get_weather",))
    ]
    assert sorted(RAN) == ["convert_currency", "get_time", "get_weather"]


def test_a_switched_off_recorder_logs_nothing(server: FakeLLMServer) -> None:
    usage = UsageRecorder(UsageLog(), enabled=False)
    search = AgentToolSearch([get_time, get_weather, send_email], pinned=["get_time"], usage=usage)
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    _script(server)
    Runner.run_sync(agent, "weather?", context=search.session("off"), run_config=search.run_config())
    assert RAN == ["get_weather"] and len(usage.log) == 0


def get_status() -> str:
    """Service status dashboard: uptime and incidents."""
    RAN.append("get_status")
    return "all green"


def send_sms(number: str, text: str) -> str:
    """Send an SMS text message to a phone number."""
    RAN.append("send_sms")
    return "ok"


def test_a_tool_called_in_the_turn_of_its_search_is_told_to_call_it_again(server: FakeLLMServer) -> None:
    # The SDK answers "tool not found" after the turn's tools ran, so the tool is visible by then:
    # its arguments (never sent to the formatter) must not be checked, and the answer must say why.
    search = AgentToolSearch([get_weather, send_email, function_tool(get_status)])
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast city"}, "s1"),
                         ("get_weather", {"city": "Paris"}, "c1"),
                         ("get_status", {}, "c2"),  # not found by this turn's search: still refused
                         ("no_such_tool", {}, "c3")]),
        Turn(text="ok"),
    )
    Runner.run_sync(agent, "weather in Paris", context=search.session("u1"), run_config=search.run_config())
    results = {r.call_id: r.text for r in server.requests[1].tool_results()}
    assert "just loaded by tool_search" in results["c1"] and "again" in results["c1"]
    assert "Invalid arguments" not in results["c1"]
    assert "not loaded yet" in results["c2"]
    assert "is not available" in results["c3"]
    assert RAN == []


def _app_manager(max_sessions: int = 1000) -> SessionManager:
    # An application's index that also holds a tool this agent does not have (another agent's, say).
    tools = [Tool.from_callable(f) for f in (toy_tools.get_weather, toy_tools.send_email, send_sms)]
    return SessionManager(ToolIndex.build(tools, "bm25"), max_sessions=max_sessions)


def test_a_shared_manager_never_offers_tools_the_agent_lacks(server: FakeLLMServer) -> None:
    manager = _app_manager()
    search = AgentToolSearch([get_weather, send_email], sessions=manager)
    assert search.sessions is manager  # an empty manager is falsy, and still the one to use
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "send text message sms", "max_results": 1}, "s1")]),
        Turn(tool_calls=[("send_sms", {"number": "1", "text": "hi"}, "c1")]),
        Turn(text="done"),
    )
    session = search.session("u1")
    Runner.run_sync(agent, "text Bob", context=session, run_config=search.run_config())
    assert "send_sms" not in server.requests[1].tool_results()[0].text
    assert "is not available" in server.requests[2].tool_results()[0].text
    assert "send_sms" not in session.discovered and RAN == []
    assert set(search.session("u2", allowed=["get_weather", "send_sms"]).allowed or ()) == {"get_weather"}


def test_building_on_a_full_shared_manager_keeps_its_sessions() -> None:
    manager = _app_manager(max_sessions=2)
    manager.create("alice")
    manager.create("bob")
    AgentToolSearch([get_weather, send_email], sessions=manager)
    assert sorted(manager.ids()) == ["alice", "bob"]


def test_an_evicted_session_is_created_again_with_its_pins(server: FakeLLMServer) -> None:
    tools = [get_time, get_weather, send_email]
    index = ToolIndex.build([tool_from_function_tool(t) for t in tools], "bm25")
    search = AgentToolSearch(tools, pinned=["get_time"], sessions=SessionManager(index, max_sessions=1))
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    alice = search.session("alice")
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "weather forecast"}, "s1")]), Turn(text="ok"))
    Runner.run_sync(agent, "weather", context=alice, run_config=search.run_config())
    assert alice.discovered == ("get_weather",)
    search.session("bob")  # another conversation takes alice's place in the store
    server.enqueue(Turn(tool_calls=[("get_weather", {"city": "Paris"}, "c1")]), Turn(text="ok"))
    Runner.run_sync(agent, "and tomorrow?", context=alice, run_config=search.run_config())
    assert server.requests[2].tool_names == FIRST  # pinned again; the discovery was lost with the session
    assert "not loaded yet" in server.requests[3].tool_results()[0].text
    assert search.session("alice").pinned == ("get_time",) and RAN == []


def test_run_config_chains_the_callers_error_formatter(server: FakeLLMServer) -> None:
    seen: list[str] = []

    def mine(args: ToolErrorFormatterArgs[Any]) -> str:
        seen.append(args.kind)
        return f"custom {args.kind}"

    search = AgentToolSearch([get_time, get_weather, send_email, convert_currency], pinned=["convert_currency"])
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    server.enqueue(
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),  # ours: not loaded yet
                         ("convert_currency", {"amount": 3, "currency": "EUR"}, "c2")]),  # theirs: it failed
        Turn(text="ok"),
    )
    config = search.run_config(tool_error_formatter=mine, workflow_name="chained")
    assert config.workflow_name == "chained"
    Runner.run_sync(agent, "mail and euros", context=search.session("u1"), run_config=config)
    results = {r.call_id: r.text for r in server.requests[1].tool_results()}
    assert "not loaded yet" in results["c1"]
    assert results["c2"] == "custom tool_exception" and seen == ["tool_exception"]


# --- a session's rights: asked again, closed, and over a shared index that changes --------------------


def _own_index() -> ToolIndex:
    # An index built apart from the agent (an application's, say), so a test can change it under the agent.
    return ToolIndex.build([Tool.from_callable(f) for f in (toy_tools.get_time, toy_tools.get_weather,
                                                             toy_tools.send_email)], "bm25")


def _agent(server: FakeLLMServer, search: AgentToolSearch) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    return Agent(name="assistant", model=model, tools=list(search.tools))


def test_a_session_asked_again_with_fewer_tools_is_refused_as_the_loop_refuses_it(server: FakeLLMServer) -> None:
    # Before: the stored session (every tool) was returned as it was, and the narrowed caller's run sent an email.
    from toolsearch import SessionError

    search = AgentToolSearch([get_time, get_weather, send_email], pinned=["get_time"])
    search.session("conv-1")  # an admin's request: every tool
    with pytest.raises(SessionError, match=r"'conv-1' already exists with other tools .* also allows 'send_email'"):
        search.session("conv-1", allowed=["get_time", "get_weather"])
    stored = search.session("conv-1")  # allowed=None: the stored ones as they are
    assert stored.allowed == frozenset({"get_time", "get_weather", "send_email"})
    narrow = search.session("conv-2", allowed=["get_time", "get_weather"])
    assert search.session("conv-2", allowed=["get_weather", "get_time"]).allowed == narrow.allowed  # the same set
    server.enqueue(Turn(tool_calls=[("send_email", {"to": "x@y.z", "subject": "hi"}, "c1")]), Turn(text="no"))
    Runner.run_sync(_agent(server, search), "mail", context=narrow, run_config=search.run_config())
    assert "is not available" in server.requests[1].tool_results()[0].text and RAN == []


def test_a_session_the_application_closed_is_never_brought_back_by_a_run(server: FakeLLMServer) -> None:
    # Before: the run's old handle created the session again with its own rights (every tool), and the
    # application's next session(id, allowed=narrow) got those instead of its narrow set.
    from toolsearch import UnknownSessionError

    search = AgentToolSearch([get_time, get_weather, send_email], pinned=["get_time"])
    handle = search.session("conv-1")  # a run in flight holds this handle
    search.sessions.close("conv-1")  # the application ends the conversation
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "send an email"}, "s1")]), Turn(text="ok"))
    with pytest.raises(UnknownSessionError, match="'conv-1' has expired or was closed"):
        Runner.run_sync(_agent(server, search), "mail", context=handle, run_config=search.run_config())
    assert "conv-1" not in search.sessions and RAN == []
    again = search.session("conv-1", allowed=["get_time"])  # started again with fewer rights
    assert again.allowed == frozenset({"get_time"}) and again.pinned == ("get_time",)
    with pytest.raises(UnknownSessionError):  # the old handle stays on the closed session
        Runner.run_sync(_agent(server, search), "mail", context=handle, run_config=search.run_config())
    assert search.sessions.get("conv-1").allowed == frozenset({"get_time"})


def test_a_tool_the_shared_index_gains_later_is_never_offered(server: FakeLLMServer) -> None:
    # Before: a session made while the index held only the agent's tools allowed every tool, so a tool added
    # to the index afterwards was offered by search and the model was told to call it again, and again.
    index = _own_index()
    search = AgentToolSearch([get_time, get_weather, send_email], index=index, pinned=["get_time"])
    session = search.session("conv-1")
    stored_wide = search.sessions.create("made-elsewhere")  # every tool allowed, as earlier releases stored it
    index.upsert([Tool.from_callable(send_sms)])
    for context in (session, stored_wide):
        server.requests.clear()
        server.enqueue(
            Turn(tool_calls=[("tool_search", {"query": "send sms text message", "max_results": 1}, "s1")]),
            Turn(tool_calls=[("send_sms", {"number": "1", "text": "x"}, "c1")]),
            Turn(text="ok"),
        )
        Runner.run_sync(_agent(server, search), "sms", context=context, run_config=search.run_config())
        assert "send_sms" not in server.requests[1].tool_results()[0].text
        assert "'send_sms' is not available" in server.requests[2].tool_results()[0].text
        assert "send_sms" not in context.discovered and RAN == []


def test_a_pinned_tool_removed_from_the_index_leaves_sessions_working(server: FakeLLMServer) -> None:
    # Before: every new session (and the re-creation of an evicted one) raised "pinned tool 'get_time' is not
    # in the index" once an upstream removed the pinned tool.
    index = _own_index()
    search = AgentToolSearch([get_time, get_weather, send_email], pinned=["get_time"],
                             sessions=SessionManager(index, max_sessions=1))
    alice = search.session("alice")
    index.remove(["get_time"])
    bob = search.session("bob")  # takes alice's place in the store
    assert bob.pinned == () and bob.allowed == frozenset({"get_weather", "send_email"})
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1")]),
                   Turn(text="ok"))
    Runner.run_sync(_agent(server, search), "weather", context=alice, run_config=search.run_config())
    assert [r.tool_names for r in server.requests] == [["tool_search"], ["tool_search", "get_weather"]]
    assert search.sessions.get("alice").discovered == ("get_weather",)


def test_allowed_without_the_agents_pin_leaves_the_pin_out(server: FakeLLMServer) -> None:
    # Before: ToolNotAllowedError naming a pin the caller never passed; now the pin is not shown, as a
    # gateway caller is not shown a pinned tool its token does not allow.
    search = AgentToolSearch([get_time, get_weather, send_email], pinned=["get_time"])
    session = search.session("u", allowed=["get_weather"])
    assert session.allowed == frozenset({"get_weather"}) and session.pinned == ()
    assert search.session("u", allowed=["get_weather"]).pinned == ()
    server.enqueue(Turn(tool_calls=[("get_time", {"timezone": "UTC"}, "c1")]), Turn(text="ok"))
    Runner.run_sync(_agent(server, search), "time", context=session, run_config=search.run_config())
    assert server.requests[0].tool_names == ["tool_search"]
    assert "is not available" in server.requests[1].tool_results()[0].text and RAN == []


def test_a_pin_the_conversation_took_off_stays_off_and_within_answers_from_its_cache() -> None:
    # Before: session(id) pinned the agent's pins again on every turn, undoing Session.unpin
    search = AgentToolSearch([get_time, get_weather, send_email], pinned=["get_weather"])
    session = search.session("conv-1")
    session.unpin(["get_weather"])
    assert search.session("conv-1").pinned == ()
    # a framework asks per tool per turn: the same names give the same handle, not another walk over them
    names = frozenset({"get_time", "get_weather"})
    assert session.within(names) is session.within(names)
