"""LangChain: ToolSearchMiddleware inside a real `create_agent`, through `ChatOpenAI` and the real `openai`
client against the local wire-format server; every request's exact tools array is checked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn, toy_tools
from fakes.toy_tools import RAN
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import ToolException, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from toolsearch import Tool, ToolIndex
from toolsearch.integrations.langchain import STATE_KEY, ToolSearchMiddleware
from toolsearch.usage import UsageLog, UsageRecorder

get_time = tool(toy_tools.get_time)
get_weather = tool(toy_tools.get_weather)
send_email = tool(toy_tools.send_email)
create_invoice = tool(toy_tools.create_invoice)
translate_text = tool(toy_tools.translate_text)


CATALOG = [get_time, get_weather, send_email, create_invoice, translate_text]
ARGUMENTS = {  # a valid call of each
    "get_time": {"timezone": "UTC"}, "get_weather": {"city": "Paris"}, "send_email": {"to": "a@b.c", "subject": "hi"},
    "create_invoice": {"customer": "Acme", "amount": 3.0}, "translate_text": {"text": "hi", "language": "fr"},
}
FIRST = ["get_time", "tool_search"]
AFTER_SEARCH = ["get_time", "tool_search", "get_weather"]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    RAN.clear()
    with FakeLLMServer() as fake:
        yield fake


def _agent(server: FakeLLMServer, *, streaming: bool = False) -> Any:
    model = ChatOpenAI(
        model="gpt-test", base_url=server.openai_base_url, api_key="test-key", max_retries=0,  # type: ignore[arg-type]
        streaming=streaming, use_responses_api=False,
    )
    middleware = ToolSearchMiddleware(CATALOG, pinned=["get_time"])
    return create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())


def _script(server: FakeLLMServer) -> None:
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1")]),
        # send_email was never found: refused; get_weather was: it runs
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),
                         ("get_weather", {"city": "Paris"}, "c2")]),
        Turn(text="Sunny in Paris."),
    )


def _drive(agent: Any, mode: str, text: str, thread: str) -> dict[str, Any]:
    config: Any = {"configurable": {"thread_id": thread}}
    payload = {"messages": [{"role": "user", "content": text}]}
    if mode == "invoke":
        return dict(agent.invoke(payload, config))
    if mode == "ainvoke":
        return dict(asyncio.run(agent.ainvoke(payload, config)))
    if mode == "stream":
        chunks = list(agent.stream(payload, config, stream_mode="messages"))
        assert any(getattr(c[0], "content", "") for c in chunks)  # tokens streamed as they came
    else:

        async def collect() -> list[Any]:
            return [c async for c in agent.astream(payload, config, stream_mode="messages")]

        assert asyncio.run(collect())
    return dict(agent.get_state(config).values)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream"])
def test_agent_sees_pinned_and_search_then_what_it_found(server: FakeLLMServer, mode: str) -> None:
    agent = _agent(server, streaming=mode.endswith("stream"))
    _script(server)
    state = _drive(agent, mode, "What's the weather in Paris?", "t1")

    requests = server.requests
    assert [r.tool_names for r in requests] == [FIRST, AFTER_SEARCH, AFTER_SEARCH]
    assert all(r.stream == mode.endswith("stream") for r in requests)
    assert state[STATE_KEY] == ["get_weather"]
    assert state["messages"][-1].content == "Sunny in Paris."
    # the search result, the refusal and the real result went back to the model
    search_result = requests[1].tool_results()
    assert "get_weather" in search_result[0].text
    refused, ran = requests[2].tool_results()
    assert "not loaded yet" in refused.text and "tool_search" in refused.text
    assert ran.text == "sunny in Paris"
    assert RAN == ["get_weather"]  # the undiscovered tool never ran
    server.assert_consumed()


def test_discovered_tools_persist_per_thread(server: FakeLLMServer) -> None:
    agent = _agent(server)
    _script(server)
    _drive(agent, "invoke", "What's the weather in Paris?", "t1")
    server.enqueue(Turn(text="Still sunny."), Turn(text="Hello."))
    _drive(agent, "invoke", "And tomorrow?", "t1")  # the checkpoint remembers get_weather
    state = _drive(agent, "invoke", "Hi", "t2")  # another thread starts from scratch
    assert [r.tool_names for r in server.requests[3:]] == [AFTER_SEARCH, FIRST]
    assert STATE_KEY not in state or state[STATE_KEY] == []


def test_parallel_searches_merge_and_bad_search_is_instructive(server: FakeLLMServer) -> None:
    agent = _agent(server)
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1"),
                         ("tool_search", {"query": "send email", "max_results": 1}, "s2"),
                         ("tool_search", {"max_results": 1}, "s3")]),
        Turn(tool_calls=[("create_invoice", {"customer": "ACME", "amount": 3}, "c1")]),
        Turn(text="Done."),
    )
    state = _drive(agent, "invoke", "weather and mail", "t3")
    assert sorted(state[STATE_KEY]) == ["get_weather", "send_email"]
    assert sorted(server.requests[1].tool_names[2:]) == ["get_weather", "send_email"]
    bad = server.requests[1].tool_results()[2]
    assert "`query` is required" in bad.text
    assert "not loaded yet" in server.requests[2].tool_results()[0].text
    assert RAN == []


def test_middleware_needs_the_index_to_hold_its_tools() -> None:
    from toolsearch import InvalidToolError, ToolIndex
    from toolsearch.integrations.langchain import tool_from_langchain

    index = ToolIndex.build([tool_from_langchain(get_time)], backend="bm25")
    with pytest.raises(InvalidToolError, match="does not hold the tool"):
        ToolSearchMiddleware(CATALOG, index=index)

    @tool
    def tool_search(query: str) -> str:
        """A catalog tool that happens to share the search tool's name."""
        return query

    with pytest.raises(InvalidToolError, match="named 'tool_search' like the search tool"):
        ToolSearchMiddleware([*CATALOG, tool_search])


def test_allowed_limits_what_the_thread_can_find_and_call(server: FakeLLMServer) -> None:
    model = ChatOpenAI(model="gpt-test", base_url=server.openai_base_url, api_key="test-key",  # type: ignore[arg-type]
                       max_retries=0, use_responses_api=False)
    middleware = ToolSearchMiddleware(CATALOG, pinned=["get_time"], allowed=["get_time", "get_weather"])
    agent = create_agent(model, middleware=[middleware])
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "send an email"}, "s1")]),
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1")]),
        Turn(text="I cannot send email."),
    )
    state = agent.invoke({"messages": [{"role": "user", "content": "email Bob"}]})
    assert [r.tool_names for r in server.requests] == [FIRST, FIRST, FIRST]
    assert "send_email" not in server.requests[1].tool_results()[0].text
    assert "is not available" in server.requests[2].tool_results()[0].text
    assert RAN == [] and not state.get(STATE_KEY)


def _learning_agent(server: FakeLLMServer, usage: UsageRecorder, tools: list[Any]) -> Any:
    model = ChatOpenAI(model="gpt-test", base_url=server.openai_base_url, api_key="test-key",  # type: ignore[arg-type]
                       max_retries=0, use_responses_api=False)
    middleware = ToolSearchMiddleware(tools, pinned=["get_time"], usage=usage)
    return create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())


@pytest.mark.parametrize("mode", ["invoke", "astream"])
def test_searches_and_successful_calls_land_in_the_usage_log(server: FakeLLMServer, mode: str) -> None:
    usage = UsageRecorder(UsageLog(privacy="raw"))
    agent = _learning_agent(server, usage, CATALOG)
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1")]),
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),  # not found: refused
                         ("get_weather", {"city": "Paris"}, "c2")]),
        Turn(tool_calls=[("get_weather", {"city": "Rome"}, "c3"),  # the same search: credited once
                         ("get_time", {"timezone": "UTC"}, "c4")]),  # pinned, never searched: teaches nothing
        Turn(text="Sunny in Paris and Rome at noon."),
    )
    _drive(agent, mode, "What's the weather in Paris and Rome?", "t-log")
    assert [(e.query, e.called, e.shown) for e in usage.log] == [
        ("weather forecast", "get_weather", ("get_weather",))
    ]
    assert sorted(RAN) == ["get_time", "get_weather", "get_weather"]


def test_a_search_learning_reordered_logs_the_backends_order(server: FakeLLMServer) -> None:
    # The usage log's calibration reads an entry's list as the backend's ranking: a learned order logged there would
    # say the backend ranks right already and turn learning off (toolsearch.learning).
    from toolsearch.integrations.langchain import tool_from_langchain
    from toolsearch.learning import LearnedRanker, LearningIndex

    index = ToolIndex.build([tool_from_langchain(t) for t in CATALOG])
    backend = index.search("weather forecast", 2).names
    log = UsageLog(index.catalog.hash, privacy="raw")
    for i in range(5):
        log.add("weather forecast", backend[1], backend, by=f"voter-{i}")
    learning = LearningIndex(index, LearnedRanker(log, refresh_seconds=0))
    assert learning.search("weather forecast", 2).names == [backend[1], backend[0]]
    usage = UsageRecorder(log)
    model = ChatOpenAI(model="gpt-test", base_url=server.openai_base_url, api_key="test-key",  # type: ignore[arg-type]
                       max_retries=0, use_responses_api=False)
    middleware = ToolSearchMiddleware(CATALOG, index=learning, usage=usage)  # type: ignore[arg-type]
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 2}, "s1")]),
        Turn(tool_calls=[(backend[1], ARGUMENTS[backend[1]], "c1")]),
        Turn(text="Done."),
    )
    _drive(agent, "invoke", "What's the weather like?", "t-learned")
    assert server.requests[1].tool_names[-2:] == [backend[1], backend[0]]  # the model saw learning's order
    assert log.entries()[-1].shown == tuple(backend)  # the log holds the backend's


def test_a_usage_store_that_is_down_costs_learning_never_the_search_or_the_call(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from fakes.usage_stores import DownPending

    agent = _learning_agent(server, UsageRecorder(UsageLog(), pending=DownPending()), CATALOG)
    _script(server)
    with caplog.at_level(logging.WARNING, logger="toolsearch"):
        _drive(agent, "invoke", "What's the weather in Paris?", "t-down")
    assert RAN == ["get_weather"]
    assert server.requests[1].tool_names == AFTER_SEARCH
    assert server.requests[2].tool_results()[1].text == "sunny in Paris"
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("usage of a tool_search not recorded: ConnectionError" in m for m in said), said
    assert any("usage of a call of 'get_weather' not recorded: ConnectionError" in m for m in said), said


def test_a_failing_call_and_a_switched_off_recorder_log_nothing(server: FakeLLMServer) -> None:
    @tool
    def convert_currency(amount: float, currency: str) -> str:
        """Convert an amount of money into another currency."""
        raise ToolException("the exchange rate service is down")

    convert_currency.handle_tool_error = True  # the error goes back to the model as a ToolMessage
    usage = UsageRecorder(UsageLog())
    agent = _learning_agent(server, usage, [*CATALOG, convert_currency])
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "convert currency", "max_results": 1}, "s1")]),
        Turn(tool_calls=[("convert_currency", {"amount": 3, "currency": "EUR"}, "c1")]),
        Turn(text="The service is down."),
    )
    _drive(agent, "invoke", "3 dollars in euros?", "t-fail")
    assert "exchange rate service is down" in server.requests[2].tool_results()[0].text
    assert len(usage.log) == 0

    off = UsageRecorder(UsageLog(), enabled=False)
    agent = _learning_agent(server, off, CATALOG)
    _script(server)
    _drive(agent, "invoke", "What's the weather in Paris?", "t-off")
    assert RAN == ["get_weather"] and len(off.log) == 0


def send_sms(number: str, text: str) -> str:
    """Send an SMS text message to a phone number."""
    RAN.append("send_sms")
    return "ok"


def _plain_model(server: FakeLLMServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-test", base_url=server.openai_base_url, api_key="test-key",  # type: ignore[arg-type]
                      max_retries=0, use_responses_api=False)


def test_a_larger_index_never_offers_tools_the_agent_lacks(server: FakeLLMServer) -> None:
    from toolsearch import Tool, ToolIndex

    # an application's index that also holds a tool this agent does not have
    tools = [Tool.from_callable(f) for f in (toy_tools.get_weather, toy_tools.send_email, send_sms)]
    index = ToolIndex.build(tools, "bm25")
    middleware = ToolSearchMiddleware([get_weather, send_email], index=index)
    agent = create_agent(_plain_model(server), middleware=[middleware], checkpointer=InMemorySaver())
    _assert_sms_is_never_offered(server, agent, "t-index")


def test_an_unknown_tool_is_refused_without_listing_the_catalog(server: FakeLLMServer) -> None:
    agent = _agent(server)
    server.enqueue(Turn(tool_calls=[("book_flight", {"to": "Paris"}, "c1")]), Turn(text="ok"))
    _drive(agent, "invoke", "fly me to Paris", "t-unknown")
    (answer,) = server.requests[1].tool_results()
    assert "'book_flight' is not available" in answer.text and "tool_search" in answer.text
    assert not any(t.name in answer.text for t in CATALOG)  # the hidden tools stay hidden


def test_a_tool_found_by_a_search_of_the_same_turn_runs(server: FakeLLMServer) -> None:
    agent = _agent(server)
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast city", "max_results": 1}, "s1"),
                         ("get_weather", {"city": "Paris"}, "c1"),
                         ("send_email", {"to": "a@b.c", "subject": "hi"}, "c2")]),  # not found: still refused
        Turn(text="Sunny."),
    )
    state = _drive(agent, "invoke", "weather in Paris", "t-same")
    results = {r.call_id: r.text for r in server.requests[1].tool_results()}
    assert results["c1"] == "sunny in Paris"
    assert "not loaded yet" in results["c2"]
    assert RAN == ["get_weather"] and state[STATE_KEY] == ["get_weather"]


# --- a shared index that changes under the middleware -----------------------------------------------


def _changing(server: FakeLLMServer, **options: Any) -> tuple[Any, Any]:
    """An agent over an index built apart from it (an application's), so a test can change it between turns."""
    from toolsearch import Tool, ToolIndex

    index = ToolIndex.build([Tool.from_callable(f) for f in (toy_tools.get_time, toy_tools.get_weather,
                                                             toy_tools.send_email)], "bm25")
    middleware = ToolSearchMiddleware([get_time, get_weather, send_email], index=index, **options)
    return index, create_agent(_plain_model(server), middleware=[middleware], checkpointer=InMemorySaver())


def test_a_tool_the_shared_index_gains_later_is_never_offered(server: FakeLLMServer) -> None:
    # Before: built while the index held only its tools, the middleware allowed every tool, so search offered
    # send_sms once it was added, and LangGraph's answer to the call listed every registered tool.
    index, agent = _changing(server, pinned=["get_time"])
    index.upsert([Tool.from_callable(send_sms)])
    _assert_sms_is_never_offered(server, agent, "t-grow")


def test_a_pinned_tool_removed_from_the_index_is_left_out(server: FakeLLMServer) -> None:
    # Before: every tool call of every thread raised SessionError "pinned tool 'get_time' is not in the index".
    index, agent = _changing(server, pinned=["get_time"])
    index.remove(["get_time"])
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1")]),
                   Turn(text="ok"))
    state = _drive(agent, "invoke", "weather", "t-unpinned")
    assert [r.tool_names for r in server.requests] == [["tool_search"], ["tool_search", "get_weather"]]
    assert state[STATE_KEY] == ["get_weather"]


def test_a_discovered_tool_removed_from_the_index_is_no_longer_sent(server: FakeLLMServer) -> None:
    # Before: the thread's next request still carried get_weather, which the index no longer held.
    index, agent = _changing(server, pinned=["get_time"])
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "weather forecast", "max_results": 1}, "s1")]),
                   Turn(text="ok"))
    _drive(agent, "invoke", "weather", "t-removed")
    index.remove(["get_weather"])
    server.enqueue(Turn(tool_calls=[("get_weather", {"city": "Paris"}, "c1")]), Turn(text="ok"))
    _drive(agent, "invoke", "again", "t-removed")
    assert server.requests[2].tool_names == FIRST
    assert "'get_weather' is not available" in server.requests[3].tool_results()[0].text and RAN == []


def test_allowed_without_a_pinned_tool_leaves_the_pin_out(server: FakeLLMServer) -> None:
    # Before: ToolNotAllowedError at construction, naming the pin as if the caller had passed it to a session.
    middleware = ToolSearchMiddleware(CATALOG, pinned=["get_time"], allowed=["get_weather"])
    agent = create_agent(_plain_model(server), middleware=[middleware])
    server.enqueue(Turn(tool_calls=[("get_time", {"timezone": "UTC"}, "c1")]), Turn(text="ok"))
    agent.invoke({"messages": [{"role": "user", "content": "time"}]})
    assert server.requests[0].tool_names == ["tool_search"]
    assert "is not available" in server.requests[1].tool_results()[0].text and RAN == []


def test_a_pin_that_names_no_given_tool_is_refused() -> None:
    from toolsearch import InvalidToolError

    with pytest.raises(InvalidToolError, match=r"pinned tool\(s\) \['get_tme'\] are not among the tools given"):
        ToolSearchMiddleware(CATALOG, pinned=["get_tme"])


def test_the_live_subset_of_an_agents_tools_follows_the_index_and_is_kept_while_it_stands() -> None:
    from toolsearch.integrations._gate import in_index

    index = ToolIndex.build([Tool(name="a_tool", description="does a"), Tool(name="b_tool", description="does b")],
                            backend="bm25")
    names = frozenset({"a_tool", "b_tool", "gone_tool"})
    first = in_index(index, names)
    assert first == {"a_tool", "b_tool"} and in_index(index, names) is first  # kept: a hook asks every model call
    index.remove(["b_tool"])
    assert in_index(index, names) == {"a_tool"}  # a new catalog: worked out again
    mutable = {"a_tool"}
    assert in_index(index, mutable) == {"a_tool"}
    mutable.add("b_tool")
    index.upsert([Tool(name="b_tool", description="does b")])
    assert in_index(index, mutable) == {"a_tool", "b_tool"}


def _assert_sms_is_never_offered(server: FakeLLMServer, agent: Any, thread: str) -> None:
    """The index holds send_sms, the agent does not: a search never names it, and a call of it is refused."""
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "send sms text message", "max_results": 1}, "s1")]),
        Turn(tool_calls=[("send_sms", {"number": "1", "text": "x"}, "c1")]),
        Turn(text="ok"),
    )
    state = _drive(agent, "invoke", "text Bob", thread)
    assert "send_sms" not in server.requests[1].tool_results()[0].text
    assert "'send_sms' is not available" in server.requests[2].tool_results()[0].text
    assert "send_sms" not in state.get(STATE_KEY, []) and RAN == []


# --- caps on a thread's discovered tools: the session's own rule ---------------------------------------


def _capped_agent(server: FakeLLMServer, **caps: int) -> Any:
    model = ChatOpenAI(
        model="gpt-test", base_url=server.openai_base_url, api_key="test-key", max_retries=0,  # type: ignore[arg-type]
        use_responses_api=False,
    )
    middleware = ToolSearchMiddleware(CATALOG, pinned=["get_time"], **caps)
    return create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())


def _find(query: str, call_id: str) -> Turn:
    return Turn(tool_calls=[("tool_search", {"query": query, "max_results": 1}, call_id)])


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_max_discovered_unloads_the_least_recently_used_tool(server: FakeLLMServer, mode: str) -> None:
    agent = _capped_agent(server, max_discovered=2)
    server.enqueue(
        _find("weather forecast", "s1"),
        _find("send email message", "s2"),
        Turn(tool_calls=[("get_weather", ARGUMENTS["get_weather"], "c1")]),  # get_weather is now the most recent
        _find("create invoice", "s3"),  # a third tool: send_email, the least recently used, is unloaded
        Turn(tool_calls=[("send_email", ARGUMENTS["send_email"], "c2")]),
        Turn(text="Done."),
    )
    state = _drive(agent, mode, "weather, mail and an invoice", "capped")
    loaded = [r.tool_names[len(FIRST):] for r in server.requests]
    assert loaded == [
        [], ["get_weather"], ["get_weather", "send_email"], ["get_weather", "send_email"],
        ["get_weather", "create_invoice"], ["get_weather", "create_invoice"],
    ]
    refused = server.requests[5].tool_results()[0].text
    assert "not loaded yet" in refused and RAN == ["get_weather"]  # the unloaded tool's call never ran
    assert state[STATE_KEY] == ["get_weather", "send_email", "create_invoice"]  # every tool the thread found
    server.assert_consumed()


def test_a_call_in_a_searching_turn_runs_though_the_search_takes_the_one_slot(server: FakeLLMServer) -> None:
    agent = _capped_agent(server, max_discovered=1)
    server.enqueue(
        _find("weather forecast", "s1"),
        Turn(tool_calls=[("tool_search", {"query": "send email message", "max_results": 1}, "s2"),
                         ("get_weather", ARGUMENTS["get_weather"], "c1")]),
        Turn(text="Done."),
    )
    _drive(agent, "invoke", "weather, then mail", "one-slot")
    assert [r.tool_names[len(FIRST):] for r in server.requests] == [[], ["get_weather"], ["send_email"]]
    assert RAN == ["get_weather"]  # the request carried it: it ran, as the core executor runs it


def test_a_token_cap_is_the_sessions_and_a_bad_cap_is_refused_by_the_session_manager(server: FakeLLMServer) -> None:
    from toolsearch import InvalidArgumentError
    from toolsearch.integrations.langchain import tool_from_langchain
    from toolsearch.tokens import tool_tokens

    weather = tool_tokens(tool_from_langchain(get_weather), "o200k_base")
    agent = _capped_agent(server, max_discovered_tokens=weather)  # room for get_weather alone
    server.enqueue(_find("weather forecast", "s1"), _find("send email message", "s2"), Turn(text="Done."))
    _drive(agent, "invoke", "weather, then mail", "tokens")
    assert [r.tool_names[len(FIRST):] for r in server.requests] == [[], ["get_weather"], ["send_email"]]
    with pytest.raises(InvalidArgumentError, match="max_discovered must be at least 1"):
        ToolSearchMiddleware(CATALOG, max_discovered=0)


def test_a_search_unloads_the_tools_its_turn_calls_last(server: FakeLLMServer) -> None:
    agent = _capped_agent(server, max_discovered=2)
    server.enqueue(
        _find("weather forecast", "s1"),
        _find("send email message", "s2"),
        # get_weather is the least recently used, but this turn calls it: send_email makes room instead
        Turn(tool_calls=[("tool_search", {"query": "create invoice", "max_results": 1}, "s3"),
                         ("get_weather", ARGUMENTS["get_weather"], "c1")]),
        Turn(text="Done."),
    )
    _drive(agent, "invoke", "weather, mail and an invoice", "spared")
    assert server.requests[-1].tool_names[len(FIRST):] == ["get_weather", "create_invoice"]
    assert RAN == ["get_weather"]


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_a_search_of_several_hits_unloads_its_weaker_hit_before_a_tool_its_turn_calls(
    server: FakeLLMServer, how: str
) -> None:
    # Before: the turn's called tool was only marked used before the search, so two hits under max_discovered=2
    # unloaded it (['send_email', 'create_invoice']), and its next call was refused as not loaded; the core keeps it.
    agent = _capped_agent(server, max_discovered=2)
    server.enqueue(
        _find("weather forecast", "s1"),
        Turn(tool_calls=[("tool_search", {"query": "send email message invoice", "max_results": 2}, "s2"),
                         ("get_weather", ARGUMENTS["get_weather"], "c1")]),
        Turn(tool_calls=[("get_weather", ARGUMENTS["get_weather"], "c2")]),
        Turn(text="Done."),
    )
    _drive(agent, how, "weather, then mail and an invoice", f"several-{how}")
    assert server.requests[2].tool_names[len(FIRST):] == ["get_weather", "send_email"]
    assert RAN == ["get_weather", "get_weather"]  # the third turn's call ran: still loaded


def test_an_agent_without_a_cap_keeps_the_state_it_kept(server: FakeLLMServer) -> None:
    # Before: every agent's result and checkpoint gained `toolsearch_recent: []`, the capped agents' key, since
    # LangGraph gives every declared list key an empty list.
    server.enqueue(_find("weather forecast", "s1"), Turn(text="Done."))
    result = _drive(_agent(server), "invoke", "weather", "no-cap")
    assert set(result) == {"messages", "toolsearch_discovered"}, set(result)
    server.enqueue(_find("weather forecast", "s1"), Turn(text="Done."))
    capped = _drive(_capped_agent(server, max_discovered=2), "invoke", "weather", "cap")
    assert capped["toolsearch_recent"] == ["get_weather"]


class _CountedState(dict[str, Any]):
    """The agent state a tool call's request carries, counting how often its messages are read."""

    def __init__(self, state: Any) -> None:
        super().__init__(state)
        self.message_reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.message_reads += key == "messages"
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.message_reads += key == "messages"
        return super().__getitem__(key)


class _MessageReads(AgentMiddleware):  # type: ignore[type-arg]
    """A middleware before ToolSearchMiddleware: it hands each tool call a state that counts its message reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        state = _CountedState(request.state)
        outcome = handler(request.override(state=state))
        self.reads[request.tool_call["id"]] = state.message_reads
        return outcome

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        state = _CountedState(request.state)
        outcome = await handler(request.override(state=state))
        self.reads[request.tool_call["id"]] = state.message_reads
        return outcome


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_capped_call_scans_its_turns_messages_once(server: FakeLLMServer, mode: str) -> None:
    # Before: under a cap a search read the thread's messages twice (sparing its turn's calls, then its update),
    # and so did a call its turn's search found (settling that search, then its answer): {2, 2, 2}.
    reads = _MessageReads()
    model = ChatOpenAI(
        model="gpt-test", base_url=server.openai_base_url, api_key="test-key", max_retries=0,  # type: ignore[arg-type]
        use_responses_api=False,
    )
    middleware = ToolSearchMiddleware(CATALOG, pinned=["get_time"], max_discovered=2)
    agent = create_agent(model, middleware=[reads, middleware], checkpointer=InMemorySaver())
    server.enqueue(
        _find("weather forecast", "s1"),
        Turn(tool_calls=[("tool_search", {"query": "send email message", "max_results": 1}, "s2"),
                         ("send_email", ARGUMENTS["send_email"], "c1")]),
        Turn(text="Done."),
    )
    state = _drive(agent, mode, "weather, then mail", f"scans-{mode}")
    assert reads.reads == {"s1": 1, "s2": 1, "c1": 1}
    # and the calls behave as they did: the searches load their tools and the call the second one found runs
    assert server.requests[-1].tool_names[len(FIRST):] == ["get_weather", "send_email"]
    assert RAN == ["send_email"] and state[STATE_KEY] == ["get_weather", "send_email"]
    server.assert_consumed()
