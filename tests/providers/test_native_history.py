"""Native tool search across runs of one session: what a request shows is what the session may use now.

With `tool_search_mode="native"` a search result carries the found tools' definitions (an Anthropic
`tool_reference` loads a deferred tool where it stands, a Responses `tool_search_output` holds them whole), and a
saved history (`LoopResult.to_dict()`) keeps them. Through the real `anthropic` / `openai` clients against the
strict fake server:

- a resumed history sends none of a tool the session may no longer use (its rights shrank since) or the index no
  longer holds, and takes each definition it does send from the current catalog;
- a tool an earlier run of the session found is callable in the next run, which holds no reference to it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn
from fakes.llm_server import Request

from toolsearch import LoopConfig, SessionManager, Tool, ToolIndex, ToolSearchLoop
from toolsearch.providers import AnthropicModel, OpenAIResponsesModel

WEATHER = Tool("weather_get", "Weather forecast for a city.",
               {"type": "object", "properties": {"city": {"type": "string"}}})
DELETE = Tool("admin_delete_user", "Delete a user account and all its data (admin only).",
              {"type": "object", "properties": {"user_id": {"type": "string"}}})
FUNCTIONS = {"weather_get": lambda city="": "sunny", "admin_delete_user": lambda user_id="": "deleted"}
NATIVE = LoopConfig(tool_search_mode="native")


def native_model(kind: str, server: FakeLLMServer) -> Any:
    if kind == "anthropic":
        return AnthropicModel(server.anthropic(), "claude-sonnet-4-6")
    return OpenAIResponsesModel(server.openai(), "gpt-4.1")


@pytest.mark.parametrize("kind", ["anthropic", "openai_responses"])
def test_a_resumed_history_shows_no_tool_the_session_may_no_longer_use(kind: str) -> None:
    sessions = SessionManager(ToolIndex.build([WEATHER, DELETE], backend="bm25"))
    with FakeLLMServer(Turn(tool_calls=[("tool_search", {"query": "delete user account"})]), "Found it.",
                       policy=lambda request: "Sunny in Porto.") as server:
        loop = ToolSearchLoop(native_model(kind, server), sessions, FUNCTIONS, config=NATIVE)
        first = loop.run("find the tool to delete a user", session_id="conv-1")  # an admin, then
        assert "admin_delete_user" in json.dumps(server.requests[-1].body)  # the search delivered it
        saved = first.to_dict()["messages"]
        sessions.close("conv-1")  # the rights shrank: the session is created again with the public tool only
        with pytest.warns(UserWarning, match=r"name 1 tool\(s\) this session may not use .*'admin_delete_user'"):
            second = loop.run([*saved, "and the weather in Porto?"], session_id="conv-1", allowed={"weather_get"})
        sent = json.dumps(server.requests[-1].body)
    assert second.output == "Sunny in Porto."
    assert "admin_delete_user" not in sent and "Delete a user account" not in sent
    # the search result that delivered nothing now says so, in place of its text that named the tool
    assert "None of the tools this search found is available any more" in sent


def test_a_resumed_history_sends_the_catalogs_definition_and_nothing_of_a_removed_tool() -> None:
    index = ToolIndex.build([WEATHER, DELETE], backend="bm25")
    sessions = SessionManager(index)
    with FakeLLMServer(Turn(tool_calls=[("tool_search", {"query": "weather forecast delete user"})]), "Found them.",
                       policy=lambda request: "ok") as server:
        loop = ToolSearchLoop(native_model("anthropic", server), sessions, FUNCTIONS, config=NATIVE)
        saved = loop.run("find the weather and delete tools", session_id="conv-2").to_dict()["messages"]
        index.remove(["admin_delete_user"])
        index.upsert([Tool("weather_get", "Weather forecast for a city, hour by hour.", WEATHER.input_schema)])
        with pytest.warns(UserWarning, match="'admin_delete_user'"):
            loop.run([*saved, "and the weather?"], session_id="conv-2")
        body = server.requests[-1].body
    assert "admin_delete_user" not in json.dumps(body)
    [weather] = [t for t in body["tools"] if t["name"] == "weather_get"]
    assert weather["description"] == "Weather forecast for a city, hour by hour." and weather["defer_loading"]


def weather_seeker(request: Request) -> Turn | str:
    """Calls weather_get when the request lets it (sent loaded, or loaded by a reference), else searches for it
    once, else gives up."""
    results = request.tool_results()
    if results and "sunny" in results[-1].text:
        return "Sunny."
    if "weather_get" in request.callable_tool_names:
        return Turn(tool_calls=[("weather_get", {"city": "Porto"})])
    if not results:
        return Turn(tool_calls=[("tool_search", {"query": "weather forecast"})])
    return "I have no weather tool."


def test_a_tool_found_in_an_earlier_run_of_the_session_is_callable_in_the_next() -> None:
    sessions = SessionManager(ToolIndex.build([WEATHER, DELETE], backend="bm25"))
    with FakeLLMServer(policy=weather_seeker) as server:
        loop = ToolSearchLoop(native_model("anthropic", server), sessions, FUNCTIONS, config=NATIVE)
        first = loop.run("Weather in Porto?", session_id="user-7")
        found = len(server.requests)
        second = loop.run("And the weather in Lisbon?", session_id="user-7")
        requests = server.requests
    assert first.output == "Sunny." and requests[found - 1].deferred_tool_names == ["weather_get"]
    assert second.output == "Sunny."
    assert [r.call.name for r in second.tool_results] == ["weather_get"]  # no search needed: it is loaded
    assert requests[found].loaded_tool_names == ["tool_search", "weather_get"]
    assert requests[found].deferred_tool_names == []
