"""A run's history saved with LoopResult.to_dict() and passed back as the next prompt is the history it was.

Every chat format renders the restored messages into the same wire payload as the live ones: native search
calls and their found tools, a call whose arguments were not JSON, a provider's own items (thinking blocks,
reasoning items, Gemini thought signatures).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolsearch import InvalidArgumentError, Tool, ToolIndex
from toolsearch.loop import LoopResult, run
from toolsearch.providers import Message, ModelTurn, ScriptedModel, ToolCall, search
from toolsearch.session import SessionManager


def weather_forecast(city: str, days: int = 3) -> dict[str, Any]:
    """Weather forecast for a city, day by day."""
    return {"city": city, "days": days, "sky": "sunny"}


def send_email(to: str, subject: str, body: str) -> str:
    """Send an email message to a recipient."""
    return f"sent to {to}"


FUNCTIONS = {"weather_forecast": weather_forecast, "send_email": send_email}
FORMATS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
# What each provider keeps of its own output to replay verbatim (as its parser stores it).
PROVIDER_ITEMS: dict[str, tuple[Any, ...]] = {
    "openai_chat": (),
    "openai_responses": ({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},),
    "anthropic": ({"type": "thinking", "thinking": "Oslo, then.", "signature": "sig=="},),
    "gemini": (("call_2_1", "c2lnbmF0dXJl"),),
}


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build([Tool.from_callable(f) for f in (weather_forecast, send_email)], backend="bm25")


def _first_run(sessions: SessionManager, fmt: str) -> LoopResult:
    forecast = ToolCall("call_2_1", "weather_forecast", {"city": "Oslo"})
    broken = ToolCall("call_2_2", "send_email", {}, "arguments are not valid JSON (Expecting value)")
    thinking = Message("assistant", "", (forecast, broken), provider=fmt, provider_items=PROVIDER_ITEMS[fmt])
    model = ScriptedModel(
        [[search("weather forecast", 1, native=True)], ModelTurn(thinking, None, "tool_calls"), "Sunny in Oslo."],
        format=fmt,
    )
    session = sessions.create("s", pinned=["send_email"])
    return run(model, "Weather in Oslo?", session=session, functions=FUNCTIONS, tool_search_mode="native")


def _next_payload(sessions: SessionManager, fmt: str, history: list[Any]) -> dict[str, Any]:
    model = ScriptedModel(["ok"], format=fmt)
    run(model, [*history, "And tomorrow?"], session=sessions.get("s"), functions=FUNCTIONS, tool_search_mode="native")
    return model.payloads[0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_saved_history_resumes_as_the_same_wire_payload(index: ToolIndex, fmt: str) -> None:
    sessions = SessionManager(index)
    result = _first_run(sessions, fmt)
    assert [r.status.value for r in result.tool_results] == ["search", "ok", "invalid_arguments"]
    saved = json.loads(json.dumps(result.to_dict()))["messages"]  # what an application keeps between turns

    assert [Message.coerce(m) for m in saved] == list(result.messages)
    assert _next_payload(sessions, fmt, saved) == _next_payload(sessions, fmt, list(result.messages))


def test_a_found_tool_saved_by_name_only_is_looked_up_in_the_sessions_catalog(index: ToolIndex) -> None:
    # Histories saved by earlier releases name a search's tools only: a run looks them up in its index.
    sessions = SessionManager(index)
    result = _first_run(sessions, "anthropic")
    saved = json.loads(json.dumps(result.to_dict()))["messages"]
    for message in saved:
        if "tool_references" in message:
            message["tool_references"] = [t["name"] for t in message["tool_references"]]

    assert _next_payload(sessions, "anthropic", saved) == _next_payload(sessions, "anthropic", list(result.messages))
    with pytest.raises(InvalidArgumentError, match="names tool 'weather_forecast', but no catalog was given"):
        Message.coerce(saved[2])


def test_a_history_naming_a_tool_the_index_no_longer_holds_resumes_without_it(index: ToolIndex) -> None:
    # Catalogs change between requests: the saved reference goes, with a warning, and the conversation goes on.
    sessions = SessionManager(index)
    saved = json.loads(json.dumps(_first_run(sessions, "anthropic").to_dict()))["messages"]
    for message in saved:
        if "tool_references" in message:
            message["tool_references"] = [t["name"] for t in message["tool_references"]]
    index.remove(["weather_forecast"])
    with pytest.warns(UserWarning, match="names tool 'weather_forecast', which the index no longer holds"):
        payload = _next_payload(sessions, "anthropic", saved)
    references = [block for message in payload["messages"] if isinstance(message["content"], list)
                  for item in message["content"] if item.get("type") == "tool_result"
                  for block in (item["content"] if isinstance(item.get("content"), list) else [])
                  if block.get("type") == "tool_reference"]
    assert references == []  # Anthropic refuses a reference to a tool the request does not carry


def test_a_saved_call_of_an_unknown_kind_is_refused_with_the_kinds_there_are() -> None:
    with pytest.raises(InvalidArgumentError, match="kind 'web_search'; a kind is 'function'"):
        Message.coerce({"role": "assistant", "tool_calls": [{"id": "c", "name": "x", "kind": "web_search"}]})
    with pytest.raises(InvalidArgumentError, match="lacks a string id"):
        Message.coerce({"role": "assistant", "tool_calls": [{"name": "x", "arguments": {}}]})
