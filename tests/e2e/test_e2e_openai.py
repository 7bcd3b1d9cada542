"""End to end through the real `openai` clients (Chat Completions and Responses) against a local fake server.

The toolsearch loop drives `openai.OpenAI` / `openai.AsyncOpenAI` (base_url on 127.0.0.1, max_retries=0);
the server records every request and replays scripted model turns, so each test checks the exact
`tools` array each request carried and what went back to the model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from fakes import ErrorTurn, FakeLLMServer, Turn
from fakes.e2e import (
    Calls,
    assert_tools,
    call_found,
    catalog_tools,
    check_concurrent_sessions,
    concurrent_policy,
    concurrent_prompt,
    hits,
    implementations,
    make_model,
    scenario_allowed_subset,
    scenario_auto_sends_a_small_subset_whole,
    scenario_dotted_names,
    scenario_empty_reply_then_continue,
    scenario_evicted_alias_called_again,
    scenario_eviction,
    scenario_iteration_guard,
    scenario_multi_step_discovery,
    scenario_native_eviction,
    scenario_parallel_errors_and_timeouts,
    scenario_parallel_searches,
    scenario_same_turn_call,
    scenario_sdk_param_types,
    scenario_tool_errors,
    search,
)

from toolsearch import Tool, ToolIndex, provider_safe_name
from toolsearch.loop import LoopOutcome, ToolSearchLoop, arun, run
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import ProviderError
from toolsearch.session import SessionManager

FORMATS = ["openai_chat", "openai_responses"]


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


# --- scenarios from the issue, on both OpenAI APIs ----------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_multi_step_discovery(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_multi_step_discovery(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_parallel_searches_in_one_turn(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_parallel_searches(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_tool_called_in_the_turn_it_was_found(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_same_turn_call(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_dotted_names_travel_as_safe_aliases(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_dotted_names(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_tool_errors_become_tool_results(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_tool_errors(kind, server, index, raw_arguments=True)


@pytest.mark.parametrize("kind", FORMATS)
def test_iteration_and_repeated_call_guards(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_iteration_guard(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_eviction_of_least_recently_used_tools(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_eviction(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_evicted_dotted_tool_called_again_by_alias(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_evicted_alias_called_again(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_session_outside_its_allowed_subset(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_allowed_subset(kind, server, index)


@pytest.mark.parametrize("kind", FORMATS)
def test_auto_sends_a_small_subset_whole(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_auto_sends_a_small_subset_whole(kind, server, index)


# --- concurrency --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_concurrent_sessions_in_threads(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    n = 12
    server.policy = concurrent_policy
    sessions = SessionManager(index)
    loop = ToolSearchLoop(make_model(kind, server), sessions, implementations(Calls()))
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda i: loop.run(concurrent_prompt(i), session_id=f"user-{i}"), range(n)))
    check_concurrent_sessions(server, index, sessions, results, n)


@pytest.mark.parametrize("kind", FORMATS)
async def test_concurrent_sessions_with_asyncio(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    n = 12
    server.policy = concurrent_policy
    sessions = SessionManager(index)
    loop = ToolSearchLoop(make_model(kind, server, asynchronous=True), sessions, implementations(Calls()))
    results = await asyncio.gather(*(loop.arun(concurrent_prompt(i), session_id=f"user-{i}") for i in range(n)))
    check_concurrent_sessions(server, index, sessions, results, n)


@pytest.mark.parametrize("kind", FORMATS)
async def test_arun_with_async_client_and_async_tool(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    calls = Calls()
    server.enqueue(search("greatest common divisor", max_results=1), call_found(("math.gcd", {"a": 12, "b": 18})), "6")
    session = SessionManager(index).create("async")
    model = make_model(kind, server, asynchronous=True)
    result = await arun(model, "gcd(12, 18)?", session=session, functions=implementations(calls))
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "6")
    assert server.requests[2].tool_results()[0].text == "6"
    assert calls.log == [("math.gcd", {"a": 12, "b": 18})]


def test_sync_client_driven_from_arun(server: FakeLLMServer, index: ToolIndex) -> None:
    """A sync client under `arun` runs in a worker thread; the event loop keeps serving other sessions."""
    server.policy = concurrent_policy
    sessions = SessionManager(index)
    loop = ToolSearchLoop(make_model("openai_chat", server), sessions, implementations(Calls()))

    async def main() -> list[object]:
        return await asyncio.gather(*(loop.arun(concurrent_prompt(i), session_id=f"user-{i}") for i in range(6)))

    check_concurrent_sessions(server, index, sessions, asyncio.run(main()), 6)


# --- provider errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_provider_error_is_a_toolsearch_error(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(search("weather"), ErrorTurn(429, "Rate limit reached"))
    session = SessionManager(index).create("errors")
    with pytest.raises(ProviderError, match="Rate limit reached") as caught:
        run(make_model(kind, server), "weather?", session=session)
    assert isinstance(caught.value.__cause__, openai.RateLimitError)
    assert len(server.requests) == 2  # max_retries=0: no hidden retry


# --- Chat Completions specifics -----------------------------------------------------------------


def test_chat_wire_format_of_tool_calls_and_results(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(search("factorial"), call_found(("math.factorial", {"n": 4})), "24")
    session = SessionManager(index).create("chat-wire")
    run(
        make_model("openai_chat", server), "4!", session=session, system="Be brief.", functions=implementations(Calls())
    )
    third = server.requests[2]
    messages = third["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[0]["content"].startswith("Be brief.")
    call = messages[4]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == provider_safe_name("math.factorial")
    assert json.loads(call["function"]["arguments"]) == {"n": 4}
    assert messages[5] == {"role": "tool", "tool_call_id": call["id"], "content": "24"}


def test_chat_native_mode_falls_back_to_schema_injection(server: FakeLLMServer, index: ToolIndex) -> None:
    """Chat Completions has no native tool search: "native" must still send plain function tools."""
    catalog = index.catalog
    found = hits(index, "weather forecast", 2)
    server.enqueue(search("weather forecast", max_results=2), "ok")
    session = SessionManager(index).create("chat-native")
    run(make_model("openai_chat", server), "weather", session=session, tool_search_mode="native")
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(server.requests[0], search=meta)
    assert_tools(server.requests[1], search=meta, discovered=[catalog[n] for n in found])


# --- Responses specifics ------------------------------------------------------------------------


def test_responses_wire_format_is_stateless(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(search("factorial"), call_found(("math.factorial", {"n": 4})), "24")
    session = SessionManager(index).create("responses-wire")
    run(
        make_model("openai_responses", server),
        "4!",
        session=session,
        system="Be brief.",
        functions=implementations(Calls()),
    )
    third = server.requests[2]
    assert "previous_response_id" not in third.body
    assert third["instructions"].startswith("Be brief.")
    kinds = [item.get("type") or item.get("role") for item in third["input"]]
    assert kinds == ["user", "function_call", "function_call_output", "function_call", "function_call_output"]
    call, output = third["input"][3], third["input"][4]
    assert call["name"] == provider_safe_name("math.factorial") and json.loads(call["arguments"]) == {"n": 4}
    assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": "24"}


def test_responses_native_client_executed_tool_search(server: FakeLLMServer, index: ToolIndex) -> None:
    """Native form: a client-executed `tool_search` tool; found tools come back in `tool_search_output`."""
    catalog = index.catalog
    found = hits(index, "weather forecast", 2)
    calls = Calls()
    server.enqueue(
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Bergen", "days": 1})),
        "Rainy.",
    )
    session = SessionManager(index).create("responses-native")
    meta = ToolSearchMetaTool()
    result = run(
        make_model("openai_responses", server),
        "Weather in Bergen?",
        session=session,
        functions=implementations(calls),
        tool_search_mode="native",
    )
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "Rainy.")
    first, second, third = server.requests
    definition = meta.definition(session)
    native_search = {
        "type": "tool_search",
        "execution": "client",
        "description": definition.description,
        "parameters": dict(definition.input_schema),
    }
    assert first.tools == [native_search]
    assert first.reply is not None
    # the server answered with a `tool_search_call` item; the loop ran it and sent a `tool_search_output`
    search_call, search_output = second["input"][1], second["input"][2]
    assert search_call["type"] == "tool_search_call" and search_call["arguments"]["query"] == "weather forecast"
    assert search_output["type"] == "tool_search_output" and search_output["call_id"] == search_call["call_id"]
    assert [t["name"] for t in search_output["tools"]] == [provider_safe_name(n) for n in found]
    assert [t["parameters"] for t in search_output["tools"]] == [catalog[n].input_schema for n in found]
    assert [r.references for r in second.tool_results()] == [tuple(found)]
    # the found tools are delivered by the output item, not repeated in `tools`
    assert second.tools == [native_search] == third.tools
    assert_tools(second, search=native_search)
    assert calls.log == [("weather_get_forecast", {"location": "Bergen", "days": 1, "units": "metric"})]
    assert [s.names for s in result.searches] == [found]


def test_responses_reply_with_text_and_calls_keeps_the_text(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(Turn(text="Let me look that up.", tool_calls=[("tool_search", {"query": "weather"})]), "done")
    session = SessionManager(index).create("text-and-calls")
    result = run(make_model("openai_responses", server), "weather", session=session)
    assert result.messages[1].content == "Let me look that up."
    second = server.requests[1]
    assert second["input"][1] == {"role": "assistant", "content": "Let me look that up."}


# --- request bodies against the SDK's own parameter types ---------------------------------------


def test_chat_bodies_match_sdk_param_types(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_sdk_param_types("openai_chat", server, index)


@pytest.mark.parametrize("native", [False, True], ids=["schema", "native"])
def test_responses_bodies_match_sdk_param_types(native: bool, server: FakeLLMServer, index: ToolIndex) -> None:
    # FunctionToolParam requires `strict`; a missing one means strict mode, which catalog schemas fail
    scenario_sdk_param_types("openai_responses", server, index, native=native)
    for request in server.requests:
        assert all(t.get("strict") is False for t in request.tools if t.get("type") == "function")


# --- naming ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_search_result_names_the_alias_the_model_can_call(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(search("factorial"), "ok")
    run(make_model(kind, server), "5!", session=SessionManager(index).create("alias-text"))
    text = server.requests[1].tool_results()[0].text
    assert provider_safe_name("math.factorial") in text  # the name in the tools array, not math.factorial


@pytest.mark.parametrize("kind", FORMATS)
def test_guessed_alias_and_dotted_name_in_one_history(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    """Model output naming a tool both ways (alias and catalog name) never crashes the run."""
    alias = provider_safe_name("math.factorial")
    session = SessionManager(index).create("alias-and-name", allowed=["weather_get_forecast"])
    server.enqueue(Turn(tool_calls=[(alias, {"n": 4}), ("math.factorial", {"n": 4})]), "done")
    result = run(make_model(kind, server), "4!", session=session)
    assert result.output == "done"
    assert [r.status.value for r in result.tool_results] == ["not_available", "not_available"]
    second = server.requests[1]
    assert [c.name for c in second.history_calls()] == [alias, alias]
    assert second.tool_names == ["tool_search"]


def test_responses_native_mode_with_eviction(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_native_eviction("openai_responses", server, index)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "arun"])
@pytest.mark.parametrize("kind", FORMATS)
def test_parallel_calls_with_mixed_errors_and_timeouts(
    kind: str, asynchronous: bool, server: FakeLLMServer, index: ToolIndex
) -> None:
    scenario_parallel_errors_and_timeouts(kind, server, index, asynchronous=asynchronous)


@pytest.mark.parametrize("kind", FORMATS)
def test_empty_reply_then_a_follow_up(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_empty_reply_then_continue(kind, server, index)
