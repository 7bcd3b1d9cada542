"""Pydantic AI: toolsearch as the ToolSearch strategy of a real Agent, through `OpenAIChatModel` and the
real `openai` client against the local wire-format server; every request's exact tools array is checked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Literal

import pytest
from fakes import FakeLLMServer, Turn
from fakes.toy_tools import RAN, create_invoice, get_time, get_weather, send_email
from pydantic_ai import Agent, Tool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition

from toolsearch import InvalidQueryError
from toolsearch.integrations.pydantic_ai import LearningToolSearch, ToolSearchStrategy, tool_search
from toolsearch.usage import UsageLog, UsageRecorder

DEFERRED = [get_weather, send_email, create_invoice]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    RAN.clear()
    with FakeLLMServer() as fake:
        yield fake


def _model(server: FakeLLMServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=server.async_openai()))


def _agent(server: FakeLLMServer, capability: object) -> Agent[None, str]:
    model = _model(server)
    tools = [Tool(get_time), *(Tool(f, defer_loading=True) for f in DEFERRED)]
    return Agent(model, tools=tools, capabilities=[capability])  # type: ignore[list-item]


def _script(server: FakeLLMServer) -> None:
    server.enqueue(
        Turn(tool_calls=[("search_tools", {"queries": ["weather forecast"]}, "s1")]),
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),
                         ("get_weather", {"city": "Paris"}, "c2")]),
        Turn(text="Sunny in Paris."),
    )


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_agent_searches_with_toolsearch(server: FakeLLMServer, mode: str) -> None:
    capability = tool_search(max_results=1)
    agent = _agent(server, capability)
    _script(server)
    if mode == "sync":
        output = agent.run_sync("What's the weather in Paris?").output
    elif mode == "async":
        output = asyncio.run(agent.run("What's the weather in Paris?")).output
    else:

        async def streamed() -> str:
            async with agent.run_stream("What's the weather in Paris?") as run:
                return "".join([piece async for piece in run.stream_text(delta=True)])

        output = asyncio.run(streamed())
    assert output == "Sunny in Paris."
    requests = server.requests
    assert [r.tool_names for r in requests] == [
        ["get_time", "search_tools"],
        ["get_time", "get_weather", "search_tools"],
        ["get_time", "get_weather", "search_tools"],
    ]
    # our index ranked get_weather first; with max_results=1 it alone was found
    assert '"get_weather"' in requests[1].tool_results()[0].text
    refused, ran = requests[2].tool_results()
    assert "send_email" in refused.text and "not available" in refused.text
    assert ran.text == "sunny in Paris"
    assert RAN == ["get_weather"]
    strategy = capability.strategy
    assert isinstance(strategy, ToolSearchStrategy) and strategy.builds == 1


def test_index_is_built_once_per_tool_set() -> None:
    strategy = ToolSearchStrategy(max_results=2)
    defs = [ToolDefinition(name=f.__name__, description=f.__doc__, parameters_json_schema={
        "type": "object", "properties": {}}) for f in DEFERRED]

    def search(queries: list[str], tools: list[ToolDefinition]) -> list[str]:
        return asyncio.run(strategy(None, queries, tools))  # type: ignore[arg-type]  # Pydantic AI awaits it

    assert search(["send an email"], defs) == ["send_email"]
    assert sorted(search(["invoice", "weather"], list(reversed(defs)))) == ["create_invoice", "get_weather"]
    assert strategy.builds == 1  # same tools in another order: same catalog hash, same index
    search(["weather"], defs[:1])
    assert strategy.builds == 2
    assert search(["   "], defs) == []
    with pytest.raises(ValueError, match="max_results"):
        ToolSearchStrategy(max_results=0)


def convert_currency(amount: float, currency: str) -> str:
    """Convert an amount of money into another currency."""
    raise RuntimeError("the exchange rate service is down")


@pytest.mark.parametrize("mode", ["sync", "stream"])
def test_searches_and_successful_calls_land_in_the_usage_log(server: FakeLLMServer, mode: str) -> None:
    usage = UsageRecorder(UsageLog(privacy="raw"))
    capability = tool_search(max_results=1, usage=usage)
    assert isinstance(capability, LearningToolSearch)
    agent = _agent(server, capability)
    server.enqueue(
        Turn(tool_calls=[("search_tools", {"queries": ["weather forecast"]}, "s1")]),
        Turn(tool_calls=[("send_email", {"to": "a@b.c", "subject": "hi"}, "c1"),  # not found: refused
                         ("get_weather", {"city": "Paris"}, "c2"),
                         ("get_time", {"timezone": "UTC"}, "c3")]),  # not deferred, never searched
        Turn(text="Sunny in Paris."),
    )
    if mode == "sync":
        agent.run_sync("What's the weather in Paris?")
    else:

        async def streamed() -> str:
            async with agent.run_stream("What's the weather in Paris?") as run:
                return "".join([piece async for piece in run.stream_text(delta=True)])

        asyncio.run(streamed())
    assert [(e.query, e.called, e.shown) for e in usage.log] == [
        ("weather forecast", "get_weather", ("get_weather",))
    ]
    assert sorted(RAN) == ["get_time", "get_weather"]


def test_a_failing_call_and_a_switched_off_recorder_log_nothing(server: FakeLLMServer) -> None:
    usage = UsageRecorder(UsageLog())
    tools = [Tool(f, defer_loading=True) for f in (convert_currency, *DEFERRED)]
    agent = Agent(_model(server), tools=tools, capabilities=[tool_search(max_results=1, usage=usage)])
    server.enqueue(
        Turn(tool_calls=[("search_tools", {"queries": ["convert currency"]}, "s1")]),
        Turn(tool_calls=[("convert_currency", {"amount": 3, "currency": "EUR"}, "c1")]),
    )
    with pytest.raises(RuntimeError, match="exchange rate service is down"):
        agent.run_sync("3 dollars in euros?")
    assert '"convert_currency"' in server.requests[1].tool_results()[0].text  # found, then it failed
    assert len(usage.log) == 0

    off = UsageRecorder(UsageLog(), enabled=False)
    _script(server)
    _agent(server, tool_search(max_results=1, usage=off)).run_sync("What's the weather in Paris?")
    assert RAN == ["get_weather"] and len(off.log) == 0


def list_books(shelf: Literal["\u06a9\u062a\u0627\u0628\u200c\u0647\u0627", "magazines"]) -> str:
    """List the books on a library shelf."""
    return "none"


def test_a_tool_toolsearch_refuses_is_left_out_and_the_rest_stay_searchable(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    # list_books' Literal holds Persian "books", written with U+200C (zero-width): toolsearch refuses it
    capability = tool_search(max_results=1)
    tools = [Tool(get_weather, defer_loading=True), Tool(list_books, defer_loading=True)]
    agent = Agent(_model(server), tools=tools, capabilities=[capability])
    server.enqueue(
        Turn(tool_calls=[("search_tools", {"queries": ["weather forecast"]}, "s1")]),
        Turn(tool_calls=[("get_weather", {"city": "Paris"}, "c1"),
                         ("search_tools", {"queries": ["books on a shelf"]}, "s2")]),
        Turn(text="Sunny."),
    )
    with caplog.at_level(logging.WARNING, logger="toolsearch.integrations.pydantic_ai"):
        assert agent.run_sync("weather in Paris?").output == "Sunny."
    assert '"get_weather"' in server.requests[1].tool_results()[0].text
    assert RAN == ["get_weather"]
    warnings = [r.getMessage() for r in caplog.records if "list_books" in r.getMessage()]
    assert len(warnings) == 1 and "U+200C" in warnings[0]  # once: the index (and what it left out) is cached
    strategy = capability.strategy
    assert isinstance(strategy, ToolSearchStrategy) and strategy.builds == 1


def test_a_refused_query_tells_the_model_why(server: FakeLLMServer) -> None:
    long_query = "weather forecast for a city " + "with hourly temperature, rain and wind details " * 25
    agent = _agent(server, tool_search())
    server.enqueue(
        Turn(tool_calls=[("search_tools", {"queries": [long_query]}, "s1")]),
        Turn(tool_calls=[("search_tools", {"queries": ["weather\x00", "(unclosed"]}, "s2")]),  # one query left
        Turn(text="ok"),
    )
    agent.run_sync("weather?")
    (refused,) = server.requests[1].tool_results()
    assert "the limit is 1000" in refused.text and "No matching tools" not in refused.text
    (partly,) = server.requests[2].tool_results()
    assert "U+0000" not in partly.text  # one query could be searched: its (empty) result stands

    strategy = ToolSearchStrategy()
    defs = [Tool(get_weather).tool_def]
    with pytest.raises(InvalidQueryError, match="the limit is 1000"):
        strategy.search([long_query], defs)
    assert strategy.search(["weather\x00", "weather"], defs) == ["get_weather"]
