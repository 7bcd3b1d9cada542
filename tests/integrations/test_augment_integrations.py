"""Augmentation in the three framework plug-ins, each in its framework's real agent loop and the real
`openai` client against the strict local server: the tools the model is sent carry the augmented field
(tool_search does not), the consumer gets the values, the tool runs with its own arguments only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from agents import Agent, FunctionTool, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from fakes import FakeLLMServer, Turn, toy_tools
from fakes.augment import REASON, Consumer, Why
from fakes.toy_tools import RAN
from langchain.agents import create_agent
from langchain_core.tools import StructuredTool, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import Tool as PydanticTool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from toolsearch import AugmentationError
from toolsearch.integrations.langchain import ToolSearchMiddleware
from toolsearch.integrations.openai_agents import AgentToolSearch
from toolsearch.integrations.pydantic_ai import augment_tools, tool_search

set_tracing_disabled(True)

WHY = "The user asked about Paris."


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
RECEIVED: list[dict[str, Any]] = []  # what the weather implementations below were really given


def _weather(**arguments: Any) -> str:
    RECEIVED.append(arguments)
    return f"sunny in {arguments.get('city')}"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    RAN.clear()
    RECEIVED.clear()
    with FakeLLMServer() as fake:
        yield fake


def _script(server: FakeLLMServer, search_name: str, search_args: dict[str, Any], *, reason: bool = True) -> None:
    args: dict[str, Any] = {"city": "Paris"}
    if reason:
        args["call_reason"] = WHY
    server.enqueue(
        Turn(tool_calls=[(search_name, search_args, "s1")]),
        Turn(tool_calls=[("get_weather", args, "c1")]),
        Turn(text="Sunny in Paris."),
    )


def _assert_augmented(schema: Any, own: Mapping[str, Any]) -> None:
    """The schema the model was sent: the tool's own, with the augmented field first and required."""
    assert schema["properties"] == {"call_reason": REASON, **own["properties"]}
    assert schema["required"] == ["call_reason", *own.get("required", [])]


# --- LangChain --------------------------------------------------------------------------------------


def _langchain_agent(server: FakeLLMServer, consumer: Consumer, *, streaming: bool = False) -> Any:
    # A dict args_schema: LangChain hands the tool the arguments as they come, so a field left in would show
    weather = StructuredTool.from_function(
        func=_weather, name="get_weather", description="Weather forecast for a city.", args_schema=WEATHER_SCHEMA
    )
    catalog = [tool(toy_tools.get_time), weather, tool(toy_tools.send_email)]
    model = ChatOpenAI(
        model="gpt-test", base_url=server.openai_base_url, api_key="test-key", max_retries=0,  # type: ignore[arg-type]
        streaming=streaming, use_responses_api=False,
    )
    middleware = ToolSearchMiddleware(catalog, pinned=["get_time"], augment=Why, on_augment=consumer)
    return create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream"])
def test_langchain(server: FakeLLMServer, mode: str) -> None:
    consumer = Consumer()
    agent = _langchain_agent(server, consumer, streaming=mode == "stream")
    _script(server, "tool_search", {"query": "weather forecast", "max_results": 1})
    config: Any = {"configurable": {"thread_id": "t1"}}
    payload = {"messages": [{"role": "user", "content": "Weather in Paris?"}]}
    if mode == "invoke":
        agent.invoke(payload, config)
    elif mode == "ainvoke":
        asyncio.run(agent.ainvoke(payload, config))
    else:
        list(agent.stream(payload, config, stream_mode="messages"))

    first, second, third = server.requests
    assert first.tool_names == ["get_time", "tool_search"]
    assert "call_reason" not in json.dumps(first.parameters("tool_search"))
    get_time_schema = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
    _assert_augmented(first.parameters("get_time"), get_time_schema)
    assert second.tool_names == ["get_time", "tool_search", "get_weather"]
    _assert_augmented(second.parameters("get_weather"), WEATHER_SCHEMA)
    assert RECEIVED == [{"city": "Paris"}]
    assert consumer.got == [("get_weather", {"call_reason": WHY}, "c1")]
    assert third.tool_results()[0].text == "sunny in Paris"


def test_langchain_missing_field_and_collision(server: FakeLLMServer) -> None:
    consumer = Consumer()
    agent = _langchain_agent(server, consumer)
    _script(server, "tool_search", {"query": "weather forecast", "max_results": 1}, reason=False)
    agent.invoke({"messages": [{"role": "user", "content": "Weather?"}]}, {"configurable": {"thread_id": "t2"}})
    [answer] = server.requests[2].tool_results()
    assert "'call_reason' is a required property" in answer.text
    assert RECEIVED == [] and consumer.got == []

    @tool
    def close_issue(number: int, call_reason: str) -> str:
        """Close an issue."""
        return "closed"

    with pytest.raises(AugmentationError, match=r"'call_reason' collide.* tool 'close_issue'"):
        ToolSearchMiddleware([close_issue], augment=Why)


# --- OpenAI Agents SDK ------------------------------------------------------------------------------


async def _invoke_weather(ctx: Any, arguments: str) -> str:
    return _weather(**json.loads(arguments))


def _agents_setup(server: FakeLLMServer, consumer: Consumer) -> tuple[AgentToolSearch, Agent[Any]]:
    weather = FunctionTool(
        name="get_weather", description="Weather forecast for a city.", params_json_schema=WEATHER_SCHEMA,
        on_invoke_tool=_invoke_weather, strict_json_schema=False,
    )
    search = AgentToolSearch(
        [function_tool(toy_tools.get_time), weather, function_tool(toy_tools.send_email)],
        pinned=["get_time"], augment=Why, on_augment=consumer,
    )
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    return search, Agent(name="assistant", model=model, tools=list(search.tools))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_openai_agents(server: FakeLLMServer, mode: str) -> None:
    consumer = Consumer()
    search, agent = _agents_setup(server, consumer)
    _script(server, "tool_search", {"query": "weather forecast", "max_results": 1})
    session = search.session("user-1")
    config = search.run_config()
    if mode == "sync":
        output = Runner.run_sync(agent, "Weather?", context=session, run_config=config).final_output
    else:
        output = asyncio.run(Runner.run(agent, "Weather?", context=session, run_config=config)).final_output
    assert output == "Sunny in Paris."
    first, second, _ = server.requests
    assert "call_reason" not in json.dumps(first.parameters("tool_search"))
    # get_time is strict (the SDK's default): the SDK's strict form keeps every property required
    assert first.parameters("get_time")["required"] == ["call_reason", "timezone"]
    _assert_augmented(second.parameters("get_weather"), WEATHER_SCHEMA)
    assert RECEIVED == [{"city": "Paris"}]
    assert consumer.got == [("get_weather", {"call_reason": WHY}, "c1")]


def test_openai_agents_missing_field_and_collision(server: FakeLLMServer) -> None:
    consumer = Consumer()
    search, agent = _agents_setup(server, consumer)
    _script(server, "tool_search", {"query": "weather forecast", "max_results": 1}, reason=False)
    Runner.run_sync(agent, "Weather?", context=search.session("u2"), run_config=search.run_config())
    [answer] = server.requests[2].tool_results()
    assert "'call_reason' is a required property" in answer.text
    assert RECEIVED == [] and consumer.got == []

    @function_tool
    def close_issue(number: int, call_reason: str) -> str:
        """Close an issue."""
        return "closed"

    with pytest.raises(AugmentationError, match=r"'call_reason' collide.* tool 'close_issue'"):
        AgentToolSearch([close_issue], augment=Why)


# --- Pydantic AI ------------------------------------------------------------------------------------


def _pydantic_agent(server: FakeLLMServer, consumer: Consumer) -> PydanticAgent[None, str]:
    model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=server.async_openai()))
    tools = [PydanticTool(toy_tools.get_time), PydanticTool(toy_tools.get_weather, defer_loading=True),
             PydanticTool(toy_tools.send_email, defer_loading=True)]
    capabilities: list[Any] = [tool_search(max_results=1), augment_tools(Why, on_augment=consumer)]
    return PydanticAgent(model, tools=tools, capabilities=capabilities)


def test_pydantic_ai(server: FakeLLMServer) -> None:
    consumer = Consumer()
    agent = _pydantic_agent(server, consumer)
    _script(server, "search_tools", {"queries": ["weather forecast"]})
    assert agent.run_sync("Weather in Paris?").output == "Sunny in Paris."
    first, second, third = server.requests
    assert first.tool_names == ["get_time", "search_tools"]
    assert "call_reason" not in json.dumps(first.parameters("search_tools"))
    assert first.parameters("get_time")["properties"]["call_reason"] == REASON
    weather = second.parameters("get_weather")
    assert weather["properties"]["call_reason"] == REASON and weather["required"][0] == "call_reason"
    assert RAN == ["get_weather"]
    assert consumer.got == [("get_weather", {"call_reason": WHY}, "c1")]
    assert third.tool_results()[0].text == "sunny in Paris"


def test_pydantic_ai_missing_field_asks_for_a_retry(server: FakeLLMServer) -> None:
    consumer = Consumer()
    agent = _pydantic_agent(server, consumer)
    server.enqueue(
        Turn(tool_calls=[("search_tools", {"queries": ["weather forecast"]}, "s1")]),
        Turn(tool_calls=[("get_weather", {"city": "Paris"}, "c1")]),
        Turn(tool_calls=[("get_weather", {"city": "Paris", "call_reason": WHY}, "c2")]),
        Turn(text="Sunny."),
    )
    assert agent.run_sync("Weather?").output == "Sunny."
    [retry] = server.requests[2].tool_results()
    assert "'call_reason' is a required property" in retry.text
    assert RAN == ["get_weather"]
    assert consumer.got == [("get_weather", {"call_reason": WHY}, "c2")]
