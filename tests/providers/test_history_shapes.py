"""A previous conversation passed as the prompt, its tool calls in the shapes applications keep them in.

The loop drives the real provider clients against the strict local server (tests/fakes/llm_server.py),
which checks each request against the provider's API rules: a history whose assistant calls are
OpenAI Chat Completions calls, or neutral calls with their arguments as JSON text, is sent on as the
same calls; any other shape is refused before anything is sent, naming the message, the field and
the shapes that are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn
from fakes.e2e import assert_valid_request, make_model

from toolsearch import InvalidArgumentError, SessionManager, Tool, ToolIndex
from toolsearch.loop import LoopOutcome, run
from toolsearch.providers import Message, ToolCall
from toolsearch.session import Session

GET_TIME = Tool("get_time", "Current time in a time zone.",
                {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]})
ARGUMENTS = '{"tz": "UTC"}'


def chat_history(call: dict[str, Any]) -> list[dict[str, Any]]:
    """A Chat Completions conversation as an application keeps it: user, assistant call, tool result."""
    return [
        {"role": "user", "content": "What time is it in UTC?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_time", "content": "12:00"},
        {"role": "assistant", "content": "It is noon."},
        {"role": "user", "content": "And in an hour?"},
    ]


OPENAI_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": ARGUMENTS}}
TEXT_ARGUMENTS_CALL = {"id": "call_1", "name": "get_time", "arguments": ARGUMENTS}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def session() -> Session:
    return SessionManager(ToolIndex.build([GET_TIME], backend="regex")).create("s", pinned=["get_time"])


@pytest.mark.parametrize("call", [OPENAI_CALL, TEXT_ARGUMENTS_CALL], ids=["openai_chat_shape", "arguments_as_text"])
@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses", "anthropic", "gemini"])
def test_a_history_with_provider_shaped_calls_is_sent_on_as_the_same_calls(
    server: FakeLLMServer, kind: str, call: dict[str, Any]
) -> None:
    server.enqueue(Turn(text="It will be 13:00."))
    result = run(make_model(kind, server), chat_history(call), session=session())
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "It will be 13:00.")
    assert result.messages[1].tool_calls == (ToolCall("call_1", "get_time", {"tz": "UTC"}),)
    (request,) = server.requests
    assert_valid_request(request)  # the provider's rules: each call answered by its result, in order
    sent = json.dumps(request.body)
    assert "get_time" in sent and "12:00" in sent and "UTC" in sent


def test_a_chat_tool_result_without_a_name_is_sent_to_gemini_under_its_calls_name(server: FakeLLMServer) -> None:
    history = chat_history(OPENAI_CALL)
    del history[2]["name"]  # Chat Completions tool messages carry the call's id only
    server.enqueue(Turn(text="It will be 13:00."))
    result = run(make_model("gemini", server), history, session=session())
    assert result.messages[2].name == "get_time"
    (request,) = server.requests
    call, response = request.messages[1]["parts"][0], request.messages[2]["parts"][0]
    assert call["functionCall"]["name"] == response["functionResponse"]["name"] == "get_time"


def test_both_shapes_read_as_the_call_to_dict_writes() -> None:
    neutral = ToolCall("call_1", "get_time", {"tz": "UTC"}).to_dict()
    written = Message.coerce({"role": "assistant", "tool_calls": [neutral]})
    for call in (OPENAI_CALL, TEXT_ARGUMENTS_CALL):
        assert Message.coerce({"role": "assistant", "content": None, "tool_calls": [call]}) == written


def test_arguments_text_that_is_no_json_object_is_kept_as_the_calls_argument_error() -> None:
    broken = {**OPENAI_CALL, "function": {"name": "get_time", "arguments": '{"tz": '}}
    (call,) = Message.coerce({"role": "assistant", "tool_calls": [broken]}).tool_calls
    assert (call.id, call.name, dict(call.arguments)) == ("call_1", "get_time", {})
    assert call.arguments_error is not None and "not valid JSON" in call.arguments_error


SHAPES = r"a ToolCall, a mapping as ToolCall.to_dict\(\) writes it .* or an OpenAI Chat Completions call"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"name": "get_time", "arguments": {}}, "lacks a string id"),
        ({"type": "function", "function": {"name": "get_time", "arguments": ARGUMENTS}}, "lacks a string id"),
        ({"id": "call_1", "type": "function", "function": {"arguments": ARGUMENTS}}, "lacks a string function.name"),
        ({"id": "call_1", "arguments": {}}, "lacks a string name"),
        ({"id": "call_1", "name": "get_time", "arguments": ["UTC"]}, "'s arguments is list"),
        ({"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": 7}},
         "'s function.arguments is int"),
    ],
    ids=["no_id", "openai_no_id", "openai_no_name", "no_name", "arguments_list", "openai_arguments_number"],
)
def test_any_other_call_shape_is_refused_naming_the_message_the_field_and_the_shapes(
    server: FakeLLMServer, call: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"the prompt's message 1's tool_calls\[0\].*{field}.*{SHAPES}"):
        run(make_model("openai_chat", server), chat_history(call), session=session())
    assert server.requests == []  # refused before anything was sent


def test_tool_calls_that_are_no_list_are_refused_naming_the_message(server: FakeLLMServer) -> None:
    history = chat_history(OPENAI_CALL)
    history[1]["tool_calls"] = OPENAI_CALL  # one call, not a list of them
    refused = rf"the prompt's message 1's tool_calls is dict, not a list.*{SHAPES}"
    with pytest.raises(InvalidArgumentError, match=refused):
        run(make_model("openai_chat", server), history, session=session())
    assert server.requests == []
