"""End to end through the real `anthropic` clients (Messages API) against a local fake server.

The toolsearch loop drives `anthropic.Anthropic` / `anthropic.AsyncAnthropic` (base_url on 127.0.0.1,
max_retries=0); the server records every request and replays scripted model turns, so each test
checks the exact `tools` array each request carried and the `tool_result` blocks sent back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import anthropic
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

KIND = "anthropic"


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


# --- scenarios from the issue -------------------------------------------------------------------


def test_multi_step_discovery(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_multi_step_discovery(KIND, server, index)


def test_parallel_searches_in_one_turn(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_parallel_searches(KIND, server, index)
    # Both results travel in ONE user message, as the Messages API requires.
    last = server.requests[1]["messages"][-1]
    assert last["role"] == "user" and [b["type"] for b in last["content"]] == ["tool_result", "tool_result"]


def test_tool_called_in_the_turn_it_was_found(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_same_turn_call(KIND, server, index)


def test_dotted_names_travel_as_safe_aliases(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_dotted_names(KIND, server, index)


def test_tool_errors_become_tool_results(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_tool_errors(KIND, server, index, raw_arguments=False)


def test_iteration_and_repeated_call_guards(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_iteration_guard(KIND, server, index)


def test_eviction_of_least_recently_used_tools(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_eviction(KIND, server, index)


def test_evicted_dotted_tool_called_again_by_alias(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_evicted_alias_called_again(KIND, server, index)


def test_session_outside_its_allowed_subset(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_allowed_subset(KIND, server, index)


def test_auto_sends_a_small_subset_whole(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_auto_sends_a_small_subset_whole(KIND, server, index)


def test_search_result_names_the_alias_the_model_can_call(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(search("factorial"), "ok")
    run(make_model(KIND, server), "5!", session=SessionManager(index).create("alias-text"))
    text = server.requests[1].tool_results()[0].text
    assert provider_safe_name("math.factorial") in text  # the name in the tools array, not math.factorial


# --- concurrency --------------------------------------------------------------------------------


def test_concurrent_sessions_in_threads(server: FakeLLMServer, index: ToolIndex) -> None:
    n = 12
    server.policy = concurrent_policy
    sessions = SessionManager(index)
    loop = ToolSearchLoop(make_model(KIND, server), sessions, implementations(Calls()))
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda i: loop.run(concurrent_prompt(i), session_id=f"user-{i}"), range(n)))
    check_concurrent_sessions(server, index, sessions, results, n)


async def test_concurrent_sessions_with_asyncio(server: FakeLLMServer, index: ToolIndex) -> None:
    n = 12
    server.policy = concurrent_policy
    sessions = SessionManager(index)
    loop = ToolSearchLoop(make_model(KIND, server, asynchronous=True), sessions, implementations(Calls()))
    results = await asyncio.gather(*(loop.arun(concurrent_prompt(i), session_id=f"user-{i}") for i in range(n)))
    check_concurrent_sessions(server, index, sessions, results, n)


async def test_arun_with_async_client_and_async_tool(server: FakeLLMServer, index: ToolIndex) -> None:
    calls = Calls()
    server.enqueue(search("greatest common divisor", max_results=1), call_found(("math.gcd", {"a": 12, "b": 18})), "6")
    session = SessionManager(index).create("async")
    result = await arun(
        make_model(KIND, server, asynchronous=True), "gcd(12, 18)?", session=session, functions=implementations(calls)
    )
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "6")
    assert server.requests[2].tool_results()[0].text == "6"
    assert calls.log == [("math.gcd", {"a": 12, "b": 18})]


# --- provider errors ----------------------------------------------------------------------------


def test_provider_error_is_a_toolsearch_error(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(search("weather"), ErrorTurn(529, "Overloaded"))
    session = SessionManager(index).create("errors")
    with pytest.raises(ProviderError, match="Overloaded") as caught:
        run(make_model(KIND, server), "weather?", session=session)
    assert isinstance(caught.value.__cause__, anthropic.APIStatusError)
    assert caught.value.__cause__.status_code == 529
    assert len(server.requests) == 2  # max_retries=0: no hidden retry


# --- Messages wire format -----------------------------------------------------------------------


def test_messages_wire_format(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(
        Turn(text="Searching.", tool_calls=[("tool_search", {"query": "factorial"})]),
        call_found(("math.factorial", {"n": 4})),
        "24",
    )
    session = SessionManager(index).create("wire")
    run(make_model(KIND, server), "4!", session=session, system="Be brief.", functions=implementations(Calls()))
    third = server.requests[2]
    assert third.system.startswith("Be brief.") and "tool_search" in third.system  # one cached text block
    assert third["max_tokens"] == 512 and third["model"] == "claude-test"
    messages = third["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == "4!"
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use"]  # the text is kept with the call
    assert messages[1]["content"][0]["text"] == "Searching."
    tool_use = messages[3]["content"][0]
    assert tool_use["name"] == provider_safe_name("math.factorial") and tool_use["input"] == {"n": 4}
    cached = {"cache_control": {"type": "ephemeral"}}  # prompt caching: a breakpoint on the conversation's last block
    assert messages[4]["content"] == [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "24", **cached}]


def test_messages_bodies_match_sdk_param_types(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_sdk_param_types(KIND, server, index)


def test_native_bodies_match_sdk_param_types(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_sdk_param_types(KIND, server, index, native=True)


# --- native tool search: defer_loading + tool_reference -----------------------------------------


def test_native_tool_reference_results(server: FakeLLMServer, index: ToolIndex) -> None:
    """Native form: found tools are sent deferred, and the search result is `tool_reference` blocks."""
    catalog = index.catalog
    found = hits(index, "weather forecast", 2)
    calls = Calls()
    server.enqueue(
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Bergen", "days": 1})),
        "Rainy.",
    )
    session = SessionManager(index).create("native")
    result = run(
        make_model(KIND, server),
        "Weather in Bergen?",
        session=session,
        functions=implementations(calls),
        tool_search_mode="native",
    )
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "Rainy.")
    first, second, third = server.requests
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(first, search=meta)
    assert_tools(second, search=meta, deferred=[catalog[n] for n in found])
    assert_tools(third, search=meta, deferred=[catalog[n] for n in found])
    assert second.deferred_tool_names == [provider_safe_name(n) for n in found]
    [search_result] = second.tool_results()
    assert search_result.references == tuple(provider_safe_name(n) for n in found)
    block = search_result.raw
    assert block["content"] == [{"type": "tool_reference", "tool_name": provider_safe_name(n)} for n in found]
    assert not block.get("is_error")
    # every tool_reference names a tool present in `tools` (the API rejects unknown references)
    for request in (second, third):
        for result_ in request.tool_results():
            assert set(result_.references) <= set(request.deferred_tool_names)
    assert calls.log == [("weather_get_forecast", {"location": "Bergen", "days": 1, "units": "metric"})]


def test_native_dotted_tool_reference_uses_the_alias(server: FakeLLMServer, index: ToolIndex) -> None:
    catalog = index.catalog
    calls = Calls()
    server.enqueue(search("factorial"), call_found(("math.factorial", {"n": 6})), "720")
    session = SessionManager(index).create("native-dotted")
    result = run(
        make_model(KIND, server), "6!", session=session, functions=implementations(calls), tool_search_mode="native"
    )
    assert result.output == "720"
    second = server.requests[1]
    alias = provider_safe_name("math.factorial")
    assert second.tool_results()[0].references == (alias,)
    assert_tools(second, search=ToolSearchMetaTool().definition(session), deferred=[catalog["math.factorial"]])
    assert calls.log == [("math.factorial", {"n": 6})]


def test_native_empty_or_failed_search_is_text(server: FakeLLMServer, index: ToolIndex) -> None:
    """A search that finds nothing (or is malformed) answers with text, never an empty reference list."""
    weather = [t.name for t in index.catalog if t.namespace == "weather"]
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "factorial"}), ("tool_search", {})]), "nothing")
    session = SessionManager(index).create("native-empty", allowed=weather)
    run(make_model(KIND, server), "6!", session=session, tool_search_mode="native")
    empty, malformed = server.requests[1].tool_results()
    assert empty.references == () and "No tools matched" in empty.text
    assert malformed.references == () and "query" in malformed.text and malformed.is_error
    assert server.requests[1].deferred_tool_names == []


def test_native_mode_with_eviction_keeps_referenced_tools_defined(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_native_eviction(KIND, server, index)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "arun"])
def test_parallel_calls_with_mixed_errors_and_timeouts(
    asynchronous: bool, server: FakeLLMServer, index: ToolIndex
) -> None:
    scenario_parallel_errors_and_timeouts(KIND, server, index, asynchronous=asynchronous)


def test_empty_reply_then_a_follow_up(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_empty_reply_then_continue(KIND, server, index)
