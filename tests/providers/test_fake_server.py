"""The fake LLM server answers in exactly the shapes the real openai/anthropic SDK types describe."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from fakes import (
    ANTHROPIC_MESSAGES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    ErrorTurn,
    FakeLLMServer,
    Request,
    ToolCall,
    Turn,
)
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

WEATHER_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_RESPONSES = {"type": "function", **WEATHER_CHAT["function"]}
WEATHER_ANTHROPIC = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": WEATHER_CHAT["function"]["parameters"],
}
USER = [{"role": "user", "content": "weather in Paris?"}]
TIME_DEFERRED = {
    "name": "get_time",
    "description": "Current time in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "defer_loading": True,
}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


# --- strict shape checks ----------------------------------------------------------------------


def _assert_no_extra(value: Any, where: str = "$") -> None:
    """The SDK models allow unknown keys; a key the SDK does not know is a shape bug here."""
    if isinstance(value, pydantic.BaseModel):
        extra = value.model_extra or {}
        assert not extra, f"{where}: fields unknown to {type(value).__name__}: {sorted(extra)}"
        for name in type(value).model_fields:
            _assert_no_extra(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _assert_no_extra(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _assert_no_extra(item, f"{where}.{key}")


def strict(model: Any, data: Any) -> Any:
    """Validate (not construct) `data` against an SDK type, rejecting unknown fields."""
    parsed = pydantic.TypeAdapter(model).validate_python(data)
    _assert_no_extra(parsed)
    return parsed


def post_raw(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers.items())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers.items())


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        events.append((name, "\n".join(data)))
    return events


# --- Chat Completions -------------------------------------------------------------------------


def test_chat_completion_text_and_tool_calls_parse_as_sdk_types(server: FakeLLMServer) -> None:
    server.enqueue(
        Turn(text="It is sunny."),
        Turn(tool_calls=[("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"}, id="call_x")]),
    )
    client = server.openai()
    raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=USER, tools=[WEATHER_CHAT])
    first = strict(ChatCompletion, json.loads(raw.http_response.text))
    assert first.object == "chat.completion"
    assert first.model == "gpt-test"
    assert first.choices[0].message.content == "It is sunny."
    assert first.choices[0].finish_reason == "stop"
    assert first.choices[0].message.tool_calls is None

    second = client.chat.completions.create(model="gpt-test", messages=USER, tools=[WEATHER_CHAT])
    strict(ChatCompletion, second.model_dump(mode="json", exclude_unset=True))
    assert second.choices[0].finish_reason == "tool_calls"
    calls = second.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    assert calls[1].id == "call_x"
    assert calls[0].id.startswith("call_") and calls[0].id != calls[1].id
    assert second.choices[0].message.content is None


def test_chat_usage_is_deterministic(server: FakeLLMServer) -> None:
    server.enqueue(Turn(text="abcdefgh"), Turn(text="x", usage=(123, 45)))
    client = server.openai()
    first = client.chat.completions.create(model="m", messages=USER)
    assert first.usage.prompt_tokens == len(server.requests[0].raw) // 4
    assert first.usage.completion_tokens == 2
    assert first.usage.total_tokens == first.usage.prompt_tokens + 2
    second = client.chat.completions.create(model="m", messages=USER)
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (123, 45)


def test_chat_stream_chunks_are_valid_and_accumulate(server: FakeLLMServer) -> None:
    turn = Turn(text="Checking the weather now.", tool_calls=[("get_weather", {"city": "Paris, France"})])
    server.enqueue(turn, turn)
    body = {
        "model": "m",
        "messages": USER,
        "tools": [WEATHER_CHAT],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, raw, headers = post_raw(f"{server.openai_base_url}/chat/completions", body)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert events[-1] == (None, "[DONE]")
    chunks = [strict(ChatCompletionChunk, json.loads(data)) for _, data in events[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == len(server.requests[0].raw) // 4
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == "Checking the weather now."

    # The SDK's own accumulator rebuilds the full message from the same stream.
    client = server.openai()
    with client.chat.completions.stream(
        model="m", messages=USER, tools=[WEATHER_CHAT], stream_options={"include_usage": True}
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Checking the weather now."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("get_weather", {"city": "Paris, France"})
    ]
    assert final.choices[0].finish_reason == "tool_calls"
    assert server.requests[1].stream is True


def test_chat_stream_raw_iteration_with_sdk(server: FakeLLMServer) -> None:
    server.enqueue(Turn(tool_calls=[("a", {"x": 1}), ("b", {"y": "two"})]))
    stream = server.openai().chat.completions.create(model="m", messages=USER, stream=True)
    args: dict[int, str] = {}
    names: dict[int, str] = {}
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            args[delta.index] = args.get(delta.index, "") + (delta.function.arguments or "")
            if delta.function.name:
                names[delta.index] = delta.function.name
    assert names == {0: "a", 1: "b"}
    assert {i: json.loads(a) for i, a in args.items()} == {0: {"x": 1}, 1: {"y": "two"}}


def test_stop_reason_override(server: FakeLLMServer) -> None:
    server.enqueue(Turn(text="cut", stop_reason="length"), Turn(text="cut", stop_reason="max_tokens"))
    assert server.openai().chat.completions.create(model="m", messages=USER).choices[0].finish_reason == "length"
    message = server.anthropic().messages.create(model="claude", max_tokens=10, messages=USER)
    assert message.stop_reason == "max_tokens"


def test_responses_incomplete(server: FakeLLMServer) -> None:
    cut = Turn(text="cut", stop_reason="max_output_tokens")
    server.enqueue(cut, cut)
    raw = server.openai().responses.with_raw_response.create(model="m", input="x")
    response = strict(Response, json.loads(raw.http_response.text))
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    status, body, _ = post_raw(f"{server.openai_base_url}/responses", {"model": "m", "input": "x", "stream": True})
    assert status == 200
    events = [strict(ResponseStreamEvent, json.loads(data)) for _, data in sse_events(body)]
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"


# --- Responses --------------------------------------------------------------------------------


def test_responses_text_and_function_calls_parse_as_sdk_types(server: FakeLLMServer) -> None:
    server.enqueue(
        Turn(text="Let me check.", tool_calls=[("get_weather", {"city": "Paris"})]),
        Turn(text="Sunny."),
    )
    client = server.openai()
    raw = client.responses.with_raw_response.create(
        model="gpt-test", input="weather in Paris?", instructions="be brief", tools=[WEATHER_RESPONSES]
    )
    response = strict(Response, json.loads(raw.http_response.text))
    assert response.object == "response" and response.status == "completed"
    assert [item.type for item in response.output] == ["message", "function_call"]
    call = response.output[1]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert response.output_text == "Let me check."
    assert response.instructions == "be brief"
    assert [t.name for t in response.tools] == ["get_weather"]
    assert response.usage.input_tokens == len(server.requests[0].raw) // 4

    follow_up = client.responses.create(
        model="gpt-test",
        input=[
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "22C"},
        ],
        tools=[WEATHER_RESPONSES],
    )
    assert follow_up.output_text == "Sunny."
    recorded = server.requests[1]
    assert recorded.provider == OPENAI_RESPONSES
    assert [(r.call_id, r.text) for r in recorded.tool_results()] == [(call.call_id, "22C")]
    assert recorded.assistant_turns == 1
    assert [c.name for c in recorded.history_calls()] == ["get_weather"]


def test_responses_client_executed_tool_search_call(server: FakeLLMServer) -> None:
    tools = [
        {
            "type": "tool_search",
            "execution": "client",
            "description": "Find tools.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
        {**WEATHER_RESPONSES, "defer_loading": True},
    ]
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "weather"})]), Turn(text="ok"))
    client = server.openai()
    raw = client.responses.with_raw_response.create(model="m", input="weather?", tools=tools)
    response = strict(Response, json.loads(raw.http_response.text))
    item = response.output[0]
    assert item.type == "tool_search_call" and item.execution == "client"
    assert item.arguments == {"query": "weather"}
    recorded = server.requests[0]
    assert recorded.tool_names == ["tool_search", "get_weather"]
    assert recorded.deferred_tool_names == ["get_weather"]
    assert recorded.loaded_tool_names == ["tool_search"]

    client.responses.create(
        model="m",
        input=[
            {"role": "user", "content": "weather?"},
            {
                "type": "tool_search_call",
                "call_id": item.call_id,
                "execution": "client",
                "arguments": item.arguments,
                "status": "completed",
            },
            {
                "type": "tool_search_output",
                "call_id": item.call_id,
                "execution": "client",
                "status": "completed",
                "tools": [WEATHER_RESPONSES],
            },
        ],
        tools=tools,
    )
    results = server.requests[1].tool_results()
    assert [(r.call_id, r.references) for r in results] == [(item.call_id, ("get_weather",))]


def test_responses_stream_events_are_valid_and_accumulate(server: FakeLLMServer) -> None:
    turn = Turn(text="Looking it up.", tool_calls=[("get_weather", {"city": "Oslo"})])
    server.enqueue(turn, turn)
    status, raw, _ = post_raw(
        f"{server.openai_base_url}/responses",
        {"model": "m", "input": "hi", "tools": [WEATHER_RESPONSES], "stream": True},
    )
    assert status == 200
    events = sse_events(raw)
    parsed = [strict(ResponseStreamEvent, json.loads(data)) for _, data in events]
    assert [name for name, _ in events] == [e.type for e in parsed]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert parsed[0].type == "response.created" and parsed[-1].type == "response.completed"
    assert parsed[-1].response.output_text == "Looking it up."

    with server.openai().responses.stream(model="m", input="hi", tools=[WEATHER_RESPONSES]) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Looking it up."
    call = final.output[1]
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "get_weather", {"city": "Oslo"})


# --- Anthropic Messages -----------------------------------------------------------------------


def test_anthropic_message_text_and_tool_use_parse_as_sdk_types(server: FakeLLMServer) -> None:
    server.enqueue(Turn(text="Checking.", tool_calls=[("get_weather", {"city": "Paris"})]), Turn(text="Sunny."))
    client = server.anthropic()
    raw = client.messages.with_raw_response.create(
        model="claude-test", max_tokens=100, system="be brief", messages=USER, tools=[WEATHER_ANTHROPIC]
    )
    message = strict(Message, json.loads(raw.http_response.text))
    assert message.type == "message" and message.role == "assistant" and message.model == "claude-test"
    assert [b.type for b in message.content] == ["text", "tool_use"]
    tool_use = message.content[1]
    assert (tool_use.name, tool_use.input) == ("get_weather", {"city": "Paris"})
    assert tool_use.id.startswith("toolu_")
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == len(server.requests[0].raw) // 4

    answer = client.messages.create(
        model="claude-test",
        max_tokens=100,
        messages=[
            *USER,
            {
                "role": "assistant",
                "content": [
                    *(b.model_dump(exclude_none=True) for b in message.content),
                    {"type": "tool_use", "id": "toolu_other", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "22C", "is_error": False},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_other",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "boom"},
                            {"type": "tool_reference", "tool_name": "get_time"},
                        ],
                    },
                ],
            },
        ],
        tools=[WEATHER_ANTHROPIC, TIME_DEFERRED],
    )
    assert answer.stop_reason == "end_turn" and answer.content[0].text == "Sunny."
    recorded = server.requests[1]
    assert recorded.provider == ANTHROPIC_MESSAGES
    results = recorded.tool_results()
    assert [(r.call_id, r.text, r.is_error, r.references) for r in results] == [
        (tool_use.id, "22C", False, ()),
        ("toolu_other", "boom", True, ("get_time",)),
    ]
    assert recorded.assistant_turns == 1
    assert recorded.user_text == "weather in Paris?"
    assert server.requests[0].system == "be brief"


def test_anthropic_stream_events_are_valid_and_accumulate(server: FakeLLMServer) -> None:
    turn = Turn(text="Let me look.", tool_calls=[("get_weather", {"city": "Lima", "units": "metric"})])
    server.enqueue(turn, turn)
    status, raw, headers = post_raw(
        f"{server.anthropic_base_url}/v1/messages",
        {"model": "claude", "max_tokens": 10, "messages": USER, "stream": True},
        {"anthropic-version": "2023-06-01"},
    )
    assert status == 200 and "request-id" in {k.lower() for k in headers}
    events = sse_events(raw)
    assert ("ping", '{"type":"ping"}') in events
    parsed = [strict(RawMessageStreamEvent, json.loads(data)) for name, data in events if name != "ping"]
    assert [name for name, _ in events if name != "ping"] == [e.type for e in parsed]
    assert parsed[0].type == "message_start" and parsed[-1].type == "message_stop"
    assert parsed[-2].delta.stop_reason == "tool_use"

    with server.anthropic().messages.stream(model="claude", max_tokens=10, messages=USER) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Let me look."
    assert final.content[1].input == {"city": "Lima", "units": "metric"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == parsed[-2].usage.output_tokens


def test_anthropic_count_tokens(server: FakeLLMServer) -> None:
    count = server.anthropic().messages.count_tokens(model="claude", messages=USER)
    assert count.input_tokens == len(server.requests[0].raw) // 4


# --- async clients ----------------------------------------------------------------------------


async def test_async_clients(server: FakeLLMServer) -> None:
    server.policy = lambda request: Turn(text=f"{request.provider}:{request.user_text}")
    openai_client, anthropic_client = server.async_openai(), server.async_anthropic()
    chat, response, message = await asyncio.gather(
        openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}]),
        openai_client.responses.create(model="m", input="b"),
        anthropic_client.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "c"}]),
    )
    assert chat.choices[0].message.content == "openai.chat:a"
    assert response.output_text == "openai.responses:b"
    assert message.content[0].text == "anthropic:c"
    stream = await anthropic_client.messages.create(model="c", max_tokens=5, messages=USER, stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


# --- errors -----------------------------------------------------------------------------------


def test_scripted_errors_use_each_providers_error_shape(server: FakeLLMServer) -> None:
    server.enqueue(
        ErrorTurn(429, "slow down"),
        ErrorTurn(400, "bad tools", code="invalid_value"),
        ErrorTurn(529, "overloaded"),
        ErrorTurn(429, "slow down", headers={"retry-after": "7"}),
    )
    with pytest.raises(openai.RateLimitError) as rate:
        server.openai().chat.completions.create(model="m", messages=USER)
    assert rate.value.status_code == 429
    assert rate.value.body == {"message": "slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}
    assert rate.value.request_id.startswith("req_")
    with pytest.raises(openai.BadRequestError) as bad:
        server.openai().responses.create(model="m", input="x", stream=True)
    assert bad.value.code == "invalid_value" and bad.value.type == "invalid_request_error"

    with pytest.raises(anthropic.APIStatusError) as overloaded:
        server.anthropic().messages.create(model="c", max_tokens=5, messages=USER)
    assert overloaded.value.status_code == 529
    body = strict(ErrorResponse, overloaded.value.body)
    assert body.error.type == "overloaded_error" and body.error.message == "overloaded"
    with pytest.raises(anthropic.RateLimitError) as limited:
        server.anthropic().messages.create(model="c", max_tokens=5, messages=USER, stream=True)
    assert limited.value.response.headers["retry-after"] == "7"
    assert [r.status for r in server.requests] == [429, 400, 529, 429]


def test_unknown_route_is_a_404_in_the_provider_shape(server: FakeLLMServer) -> None:
    with pytest.raises(openai.NotFoundError):
        server.openai().embeddings.create(model="m", input="x")
    assert server.errors == []


def test_missing_script_fails_the_request_and_the_with_block() -> None:
    with pytest.raises(AssertionError, match="no scripted turn left"), FakeLLMServer() as fake:  # noqa: SIM117
        with pytest.raises(openai.InternalServerError, match="no scripted turn left"):
            fake.openai().chat.completions.create(model="m", messages=USER)


def test_broken_policy_is_reported() -> None:
    def policy(request: Request) -> Turn:
        raise ValueError("policy bug")

    with pytest.raises(AssertionError, match="policy bug"), FakeLLMServer(policy=policy) as fake:  # noqa: SIM117
        with pytest.raises(anthropic.InternalServerError):
            fake.anthropic().messages.create(model="c", max_tokens=5, messages=USER)


def test_anthropic_requires_object_arguments(server: FakeLLMServer) -> None:
    server.enqueue(Turn(tool_calls=[("f", "not json")]))
    with pytest.raises(anthropic.InternalServerError, match="cannot render"):
        server.anthropic().messages.create(model="c", max_tokens=5, messages=USER)
    server.errors.clear()


# --- recording and policies -------------------------------------------------------------------


def test_records_path_headers_and_body(server: FakeLLMServer) -> None:
    server.policy = lambda request: Turn(text="ok")
    server.openai().chat.completions.create(model="gpt-x", messages=USER, tools=[WEATHER_CHAT])
    server.anthropic().messages.create(model="claude-x", max_tokens=9, messages=USER, tools=[WEATHER_ANTHROPIC])
    chat, messages = server.requests
    assert (chat.method, chat.path, chat.provider) == ("POST", "/v1/chat/completions", OPENAI_CHAT)
    assert chat.headers["authorization"] == "Bearer test-key"
    assert chat.body["model"] == "gpt-x" and chat["messages"] == USER
    assert chat.tool_names == ["get_weather"]
    assert chat.parameters("get_weather") == WEATHER_CHAT["function"]["parameters"]
    assert chat.parameters("missing") is None
    assert (messages.path, messages.provider) == ("/v1/messages", ANTHROPIC_MESSAGES)
    # this SDK version sends the key as a bearer token; older ones as x-api-key
    assert "test-key" in (
        messages.headers.get("x-api-key"),
        messages.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert "anthropic-version" in messages.headers
    assert messages.tool_names == ["get_weather"]
    assert messages.parameters("get_weather") == WEATHER_ANTHROPIC["input_schema"]
    assert server.requests_for(ANTHROPIC_MESSAGES) == [messages]


def test_queued_turns_then_policy_reacting_to_the_tools_array(server: FakeLLMServer) -> None:
    def call_weather(request: Request) -> Turn:
        name = request.find_tool("weather")
        return Turn(tool_calls=[(name, {"city": "Paris"})]) if name else Turn(text="no weather tool")

    server.enqueue(Turn(text="first"), call_weather)
    server.policy = lambda request: "fallback"
    client = server.openai()
    assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "first"
    reply = client.chat.completions.create(model="m", messages=USER, tools=[WEATHER_CHAT])
    assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "fallback"
    assert server.pending == 0
    server.assert_consumed()
    assert isinstance(server.requests[1].reply, Turn) and server.requests[1].reply.calls[0].name == "get_weather"


def test_chat_history_helpers(server: FakeLLMServer) -> None:
    server.enqueue(Turn(text="ok"))
    server.openai().chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "sys"},
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "tool_search", "arguments": '{"query":"w"}'}},
                    {"id": "c2", "type": "function", "function": {"name": "tool_search", "arguments": '{"query":"t"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found get_weather"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "found get_time"}]},
        ],
    )
    request = server.requests[0]
    assert request.system == "sys"
    assert request.assistant_turns == 1
    assert [(c.id, c.arguments) for c in request.history_calls()] == [("c1", '{"query":"w"}'), ("c2", '{"query":"t"}')]
    assert [(r.call_id, r.text) for r in request.tool_results()] == [
        ("c1", "found get_weather"),
        ("c2", "found get_time"),
    ]


def test_concurrent_requests_are_all_answered_and_recorded(server: FakeLLMServer) -> None:
    server.policy = lambda request: Turn(text=request.user_text.upper(), delay=0.01)
    client = server.openai()
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
        answers[i] = reply.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {i: f"Q{i}" for i in range(24)}
    assert sorted(r.user_text for r in server.requests) == sorted(f"q{i}" for i in range(24))


def test_stop_closes_keep_alive_connections() -> None:
    fake = FakeLLMServer(policy=lambda request: "ok").start()
    client = fake.openai()
    client.chat.completions.create(model="m", messages=USER)  # leaves a pooled keep-alive connection
    fake.stop()
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER)


# --- the provider rules: each invalid request is refused with the SDK's real error -------------
#
# Every case is a pair: a valid request, and the same request with one defect. The valid one must
# be answered (so the rule, not something else, refuses the other); the invalid one must make the
# real SDK raise its BadRequestError and be recorded as a violation of that rule.

CHAT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
}
CHAT_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "22C"}
RESP_CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
RESP_RESULT = {"type": "function_call_output", "call_id": "call_1", "output": "22C"}
RESP_SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Find tools.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}
RESP_SEARCH_CALL = {"type": "tool_search_call", "call_id": "ts_1", "execution": "client", "arguments": {"query": "x"}}
RESP_SEARCH_OUTPUT = {
    "type": "tool_search_output",
    "call_id": "ts_1",
    "execution": "client",
    "status": "completed",
    "tools": [{**WEATHER_RESPONSES, "strict": False}],
}
ANT_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
ANT_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22C"}
ANT_CALL_TURNS = [*USER, {"role": "assistant", "content": [ANT_USE]}]


def _renamed(tool: dict[str, Any], name: str) -> dict[str, Any]:
    if "function" in tool:
        return {**tool, "function": {**tool["function"], "name": name}}
    return {**tool, "name": name}


def _schema(tool: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "function" in tool:
        return {**tool, "function": {**tool["function"], "parameters": schema}}
    key = "input_schema" if "input_schema" in tool else "parameters"
    return {**tool, key: schema}


def _ant_results(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [*ANT_CALL_TURNS, {"role": "user", "content": list(blocks)}]


_CHAT = {"model": "gpt-test", "messages": USER, "tools": [WEATHER_CHAT]}
_RESP = {"model": "gpt-test", "input": USER, "tools": [WEATHER_RESPONSES]}
_ANT = {"model": "claude-test", "max_tokens": 100, "messages": USER, "tools": [WEATHER_ANTHROPIC]}
_DEFERRED_TIME = {**TIME_DEFERRED}
_TIME_LOADED = {k: v for k, v in TIME_DEFERRED.items() if k != "defer_loading"}
_REFERENCE = {**ANT_RESULT, "content": [{"type": "tool_reference", "tool_name": "get_time"}]}
_CACHE = {"type": "ephemeral"}
_CACHED_SYSTEM = [{"type": "text", "text": "Be brief.", "cache_control": _CACHE}]

# (test id, provider, valid request, invalid request, rule)
RULE_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    # OpenAI Chat Completions
    (
        "chat-tool-name",
        OPENAI_CHAT,
        _CHAT,
        {**_CHAT, "tools": [_renamed(WEATHER_CHAT, "math.factorial & x")]},
        "tool-name",
    ),
    (
        "chat-tool-names-unique",
        OPENAI_CHAT,
        _CHAT,
        {**_CHAT, "tools": [WEATHER_CHAT, WEATHER_CHAT]},
        "tool-names-unique",
    ),
    (
        "chat-parameters-object",
        OPENAI_CHAT,
        _CHAT,
        {**_CHAT, "tools": [_schema(WEATHER_CHAT, {"type": "array", "items": {"type": "string"}})]},
        "schema-object",
    ),
    (
        "chat-tool-choice-exists",
        OPENAI_CHAT,
        {**_CHAT, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {**_CHAT, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
        "tool-choice",
    ),
    (
        "chat-tool-call-answered",
        OPENAI_CHAT,
        {**_CHAT, "messages": [*USER, CHAT_CALL, CHAT_RESULT]},
        {**_CHAT, "messages": [*USER, CHAT_CALL, {"role": "user", "content": "and?"}]},
        "call-answered",
    ),
    (
        "chat-result-answers-a-call",
        OPENAI_CHAT,
        {**_CHAT, "messages": [*USER, CHAT_CALL, CHAT_RESULT]},
        {**_CHAT, "messages": [*USER, CHAT_CALL, CHAT_RESULT, {**CHAT_RESULT, "tool_call_id": "call_unknown"}]},
        "result-answers-call",
    ),
    ("chat-messages-required", OPENAI_CHAT, _CHAT, {**_CHAT, "messages": []}, "required-fields"),
    (
        "chat-assistant-content-required",
        OPENAI_CHAT,
        {**_CHAT, "messages": [*USER, {"role": "assistant", "content": ""}, *USER]},
        {**_CHAT, "messages": [*USER, {"role": "assistant", "content": None}, *USER]},
        "required-fields",
    ),
    # OpenAI Responses
    (
        "responses-tool-name",
        OPENAI_RESPONSES,
        _RESP,
        {**_RESP, "tools": [_renamed(WEATHER_RESPONSES, "math.factorial")]},
        "tool-name",
    ),
    (
        "responses-tool-names-unique",
        OPENAI_RESPONSES,
        _RESP,
        {**_RESP, "tools": [WEATHER_RESPONSES, WEATHER_RESPONSES]},
        "tool-names-unique",
    ),
    (
        "responses-parameters-object",
        OPENAI_RESPONSES,
        _RESP,
        {**_RESP, "tools": [_schema(WEATHER_RESPONSES, {"type": "array"})]},
        "schema-object",
    ),
    (
        "responses-tool-choice-exists",
        OPENAI_RESPONSES,
        {**_RESP, "tool_choice": {"type": "function", "name": "get_weather"}},
        {**_RESP, "tool_choice": {"type": "function", "name": "get_time"}},
        "tool-choice",
    ),
    (
        "responses-call-answered",
        OPENAI_RESPONSES,
        {**_RESP, "input": [*USER, RESP_CALL, RESP_RESULT]},
        {**_RESP, "input": [*USER, RESP_CALL]},
        "call-answered",
    ),
    (
        "responses-output-answers-a-call",
        OPENAI_RESPONSES,
        {**_RESP, "input": [*USER, RESP_CALL, RESP_RESULT]},
        {**_RESP, "input": [*USER, RESP_CALL, RESP_RESULT, {**RESP_RESULT, "call_id": "call_unknown"}]},
        "result-answers-call",
    ),
    (
        "responses-search-output-answers-a-search",
        OPENAI_RESPONSES,
        {**_RESP, "tools": [RESP_SEARCH], "input": [*USER, RESP_SEARCH_CALL, RESP_SEARCH_OUTPUT]},
        {**_RESP, "tools": [RESP_SEARCH], "input": [*USER, RESP_SEARCH_OUTPUT]},
        "result-answers-call",
    ),
    (
        "responses-search-call-needs-search-tool",
        OPENAI_RESPONSES,
        {**_RESP, "tools": [RESP_SEARCH], "input": [*USER, RESP_SEARCH_CALL, RESP_SEARCH_OUTPUT]},
        {**_RESP, "tools": [WEATHER_RESPONSES], "input": [*USER, RESP_SEARCH_CALL, RESP_SEARCH_OUTPUT]},
        "tool-search-declared",
    ),
    # Anthropic Messages
    (
        "anthropic-tool-name",
        ANTHROPIC_MESSAGES,
        _ANT,
        {**_ANT, "tools": [_renamed(WEATHER_ANTHROPIC, "math.factorial & x")]},
        "tool-name",
    ),
    (
        "anthropic-tool-names-unique",
        ANTHROPIC_MESSAGES,
        _ANT,
        {**_ANT, "tools": [WEATHER_ANTHROPIC, WEATHER_ANTHROPIC]},
        "tool-names-unique",
    ),
    (
        "anthropic-input-schema-object",
        ANTHROPIC_MESSAGES,
        _ANT,
        {**_ANT, "tools": [_schema(WEATHER_ANTHROPIC, {"type": "array"})]},
        "schema-object",
    ),
    (
        "anthropic-tool-choice-exists",
        ANTHROPIC_MESSAGES,
        {**_ANT, "tool_choice": {"type": "tool", "name": "get_weather"}},
        {**_ANT, "tool_choice": {"type": "tool", "name": "get_time"}},
        "tool-choice",
    ),
    (
        "anthropic-max-tokens-required",
        ANTHROPIC_MESSAGES,
        _ANT,
        {k: v for k, v in _ANT.items() if k != "max_tokens"},
        "required-fields",
    ),
    (
        "anthropic-no-empty-text-block",
        ANTHROPIC_MESSAGES,
        {**_ANT, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {
            **_ANT,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": ""}]}],
        },
        "non-empty",
    ),
    (
        "anthropic-roles-alternate",
        ANTHROPIC_MESSAGES,
        {
            **_ANT,
            "messages": [
                *USER,
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": "c"},
            ],
        },
        {**_ANT, "messages": [*USER, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "c"}]},
        "alternation",
    ),
    (
        "anthropic-tool-use-answered-next-turn",
        ANTHROPIC_MESSAGES,
        {**_ANT, "messages": _ant_results(ANT_RESULT)},
        {**_ANT, "messages": [*ANT_CALL_TURNS, {"role": "assistant", "content": "done"}]},
        "call-answered",
    ),
    (
        "anthropic-tool-results-first",
        ANTHROPIC_MESSAGES,
        {**_ANT, "messages": _ant_results(ANT_RESULT, {"type": "text", "text": "here"})},
        {**_ANT, "messages": _ant_results({"type": "text", "text": "here"}, ANT_RESULT)},
        "results-first",
    ),
    (
        "anthropic-result-id-in-previous-turn",
        ANTHROPIC_MESSAGES,
        {**_ANT, "messages": _ant_results(ANT_RESULT)},
        {**_ANT, "messages": _ant_results(ANT_RESULT, {**ANT_RESULT, "tool_use_id": "toolu_unknown"})},
        "result-answers-call",
    ),
    (
        "anthropic-one-result-per-call",
        ANTHROPIC_MESSAGES,
        {**_ANT, "messages": _ant_results(ANT_RESULT)},
        {**_ANT, "messages": _ant_results(ANT_RESULT, ANT_RESULT)},
        "result-answers-call",
    ),
    (
        "anthropic-tool-blocks-need-tools",
        ANTHROPIC_MESSAGES,
        {**_ANT, "messages": _ant_results(ANT_RESULT)},
        {k: v for k, v in {**_ANT, "messages": _ant_results(ANT_RESULT)}.items() if k != "tools"},
        "tools-defined",
    ),
    (
        "anthropic-tool-reference-in-tools",
        ANTHROPIC_MESSAGES,
        {**_ANT, "tools": [WEATHER_ANTHROPIC, _DEFERRED_TIME], "messages": _ant_results(_REFERENCE)},
        {**_ANT, "tools": [WEATHER_ANTHROPIC], "messages": _ant_results(_REFERENCE)},
        "tool-reference",
    ),
    (
        "anthropic-at-most-four-cache-breakpoints",
        ANTHROPIC_MESSAGES,
        {**_ANT, "tools": [{**WEATHER_ANTHROPIC, "cache_control": _CACHE}], "system": _CACHED_SYSTEM * 2,
         "messages": _ant_results({**ANT_RESULT, "cache_control": _CACHE})},
        {**_ANT, "tools": [{**WEATHER_ANTHROPIC, "cache_control": _CACHE}], "system": _CACHED_SYSTEM * 2,
         "messages": _ant_results({**ANT_RESULT, "cache_control": _CACHE}), "cache_control": _CACHE},
        "cache-breakpoints",
    ),
    (
        "anthropic-no-cache-control-on-a-deferred-tool",
        ANTHROPIC_MESSAGES,
        {**_ANT, "tools": [{**WEATHER_ANTHROPIC, "cache_control": _CACHE}, _DEFERRED_TIME]},
        {**_ANT, "tools": [WEATHER_ANTHROPIC, {**_DEFERRED_TIME, "cache_control": _CACHE}]},
        "cache-control-deferred",
    ),
    (
        "anthropic-tool-reference-deferred",
        ANTHROPIC_MESSAGES,
        {**_ANT, "tools": [WEATHER_ANTHROPIC, _DEFERRED_TIME], "messages": _ant_results(_REFERENCE)},
        {**_ANT, "tools": [WEATHER_ANTHROPIC, _TIME_LOADED], "messages": _ant_results(_REFERENCE)},
        "tool-reference",
    ),
]


def _send(server: FakeLLMServer, provider: str, body: dict[str, Any]) -> Any:
    """Send `body` through the real SDK client; `post` so a body without a required field still goes out."""
    if provider == ANTHROPIC_MESSAGES:
        return server.anthropic().post("/v1/messages", cast_to=Message, body=body)
    path = "/chat/completions" if provider == OPENAI_CHAT else "/responses"
    cast = ChatCompletion if provider == OPENAI_CHAT else Response
    return server.openai().post(path, cast_to=cast, body=body)


@pytest.mark.parametrize(
    ("valid", "invalid", "provider", "rule"),
    [pytest.param(valid, invalid, provider, rule, id=name) for name, provider, valid, invalid, rule in RULE_CASES],
)
def test_the_provider_rule_refuses_the_invalid_request(
    server: FakeLLMServer, provider: str, valid: dict[str, Any], invalid: dict[str, Any], rule: str
) -> None:
    server.enqueue(Turn(text="ok"))
    assert _send(server, provider, valid) is not None
    assert server.requests[-1].status == 200 and not server.violations

    error_type = anthropic.BadRequestError if provider == ANTHROPIC_MESSAGES else openai.BadRequestError
    with pytest.raises(error_type) as raised:
        _send(server, provider, invalid)
    assert raised.value.status_code == 400
    body = raised.value.body
    error = body["error"] if provider == ANTHROPIC_MESSAGES or "error" in body else body
    assert error["type"] == "invalid_request_error"
    if provider == ANTHROPIC_MESSAGES:
        assert json.loads(raised.value.response.text)["type"] == "error"
    [violation] = server.take_violations()
    assert violation.rule == rule
    assert server.requests[-1].violation is violation and server.requests[-1].status == 400


def test_every_rule_has_a_test_and_a_row_in_the_docs() -> None:
    source = (Path(__file__).parents[1] / "fakes" / "provider_rules.py").read_text()
    rules = set(re.findall(r'(?:Violation|_check_\w+)\(\s*"([a-z-]+)"', source))
    tested = {rule for *_, rule in RULE_CASES} | {rule for *_, rule in GEMINI_RULE_CASES}
    assert rules <= tested, sorted(rules - tested)
    docs = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    assert all(f"`{rule}`" in docs for rule in rules), sorted(r for r in rules if f"`{r}`" not in docs)


def test_a_violation_the_client_swallowed_still_fails_the_with_block() -> None:
    fake = FakeLLMServer(Turn(text="unused"))
    with pytest.raises(AssertionError, match="real API refuses"), fake, contextlib.suppress(openai.BadRequestError):
        fake.openai().chat.completions.create(model="gpt-test", messages=[])


# --- Gemini generateContent: the same check through the google-genai client ---------------------

_GEMINI_WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
                   "parameters_json_schema": WEATHER_CHAT["function"]["parameters"]}
_GEMINI_USER = {"role": "user", "parts": [{"text": "weather in Paris and Rome?"}]}
_GEMINI_CALLS = {"role": "model", "parts": [
    {"function_call": {"name": "get_weather", "args": {"city": "Paris"}}},
    {"function_call": {"name": "get_weather", "args": {"city": "Rome"}}},
]}
_GEMINI_ANSWERS = {"role": "user", "parts": [
    {"function_response": {"name": "get_weather", "response": {"output": "sunny"}}},
    {"function_response": {"name": "get_weather", "response": {"output": "rain"}}},
]}


def _gemini(contents: list[Any], *declarations: dict[str, Any]) -> dict[str, Any]:
    tools = [{"function_declarations": list(declarations or [_GEMINI_WEATHER])}]
    return {"contents": contents, "config": {"tools": tools}}


GEMINI_RULE_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("gemini-function-name", _gemini([_GEMINI_USER]),
     _gemini([_GEMINI_USER], {**_GEMINI_WEATHER, "name": "3d-weather"}), "tool-name"),
    ("gemini-function-names-unique", _gemini([_GEMINI_USER]),
     _gemini([_GEMINI_USER], _GEMINI_WEATHER, _GEMINI_WEATHER), "tool-names-unique"),
    ("gemini-parameters-object", _gemini([_GEMINI_USER]),
     _gemini([_GEMINI_USER], {**_GEMINI_WEATHER, "parameters_json_schema": {"type": "array"}}), "schema-object"),
    ("gemini-contents-required", _gemini([_GEMINI_USER]), _gemini([]), "required-fields"),
    ("gemini-parts-non-empty", _gemini([_GEMINI_USER]), _gemini([{"role": "user", "parts": []}]), "non-empty"),
    ("gemini-role", _gemini([_GEMINI_USER]), _gemini([{**_GEMINI_USER, "role": "assistant"}]), "alternation"),
    ("gemini-call-after-user-turn", _gemini([_GEMINI_USER, _GEMINI_CALLS, _GEMINI_ANSWERS]),
     _gemini([_GEMINI_USER, {"role": "model", "parts": [{"text": "let me look"}]}, _GEMINI_CALLS, _GEMINI_ANSWERS]),
     "alternation"),
    ("gemini-every-call-answered", _gemini([_GEMINI_USER, _GEMINI_CALLS, _GEMINI_ANSWERS]),
     _gemini([_GEMINI_USER, _GEMINI_CALLS, {"role": "user", "parts": _GEMINI_ANSWERS["parts"][:1]}]),
     "call-answered"),
    ("gemini-response-after-call", _gemini([_GEMINI_USER]), _gemini([_GEMINI_USER, _GEMINI_ANSWERS]),
     "result-answers-call"),
]


@pytest.mark.parametrize(
    ("valid", "invalid", "rule"),
    [pytest.param(valid, invalid, rule, id=name) for name, valid, invalid, rule in GEMINI_RULE_CASES],
)
def test_the_gemini_rule_refuses_the_invalid_request(
    server: FakeLLMServer, valid: dict[str, Any], invalid: dict[str, Any], rule: str
) -> None:
    from google.genai import errors, types

    client = server.gemini()
    server.enqueue(Turn(text="ok"))
    reply = client.models.generate_content(model="gemini-test", **valid)
    assert isinstance(reply, types.GenerateContentResponse) and reply.text == "ok"
    assert server.requests[-1].status == 200 and not server.violations

    if not invalid["contents"]:  # the SDK refuses empty contents itself: send the body as it would
        status, raw, _ = post_raw(f"{server.url}/v1beta/models/gemini-test:generateContent", {"contents": []})
        error = json.loads(raw)["error"]
        assert (status, error["code"], error["status"]) == (400, 400, "INVALID_ARGUMENT")
        message = error["message"]
    else:
        with pytest.raises(errors.ClientError) as raised:
            client.models.generate_content(model="gemini-test", **invalid)
        assert raised.value.code == 400 and raised.value.status == "INVALID_ARGUMENT"
        message = raised.value.message
    [violation] = server.take_violations()
    assert violation.rule == rule and message == violation.message
    assert server.requests[-1].violation is violation and server.requests[-1].status == 400


def test_gemini_responses_parse_as_the_sdk_types(server: FakeLLMServer) -> None:
    """JSON and each SSE chunk validate against `GenerateContentResponse`, unknown fields refused."""
    from google.genai import types

    server.enqueue(Turn(text="Paris is sunny.", tool_calls=[("get_weather", {"city": "Paris"})]),
                   Turn(text="streamed text", tool_calls=[("get_weather", {"city": "Rome"}, "fc-1")]))
    base = f"{server.url}/v1beta/models/gemini-test"
    status, raw, _ = post_raw(f"{base}:generateContent", _gemini_body())
    assert status == 200
    reply = strict(types.GenerateContentResponse, json.loads(raw))
    assert reply.text == "Paris is sunny." and reply.function_calls[0].args == {"city": "Paris"}
    assert reply.function_calls[0].id is None  # the API sends no id unless one was scripted
    status, raw, headers = post_raw(f"{base}:streamGenerateContent?alt=sse", _gemini_body())
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    chunks = [strict(types.GenerateContentResponse, json.loads(data)) for _, data in sse_events(raw)]
    assert "".join(c.text or "" for c in chunks if not c.function_calls) == "streamed text"
    assert chunks[-1].function_calls[0].id == "fc-1" and chunks[-1].candidates[0].finish_reason == "STOP"


def _gemini_body() -> dict[str, Any]:
    """The REST body the SDK would send (camelCase)."""
    return {"contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
            "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "w"}]}]}
