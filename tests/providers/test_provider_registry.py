"""The provider registry: every wire format renders tools, reads calls and renders results in one place."""

from __future__ import annotations

import json

import pytest

from toolsearch import NameMap, Tool
from toolsearch.providers import ChatRequest, Message, ScriptedModel, ToolCall
from toolsearch.providers.registry import (
    WireFormat,
    chat_format_names,
    format_names,
    get_format,
    parse_tool_call,
    register_format,
    render_result,
    render_tools,
    request_payload,
)
from toolsearch.tokens import payload_tools

WEATHER = Tool(
    "weather.get",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CALL = ToolCall("c1", "get_weather", {"city": "Paris"})


def test_every_format_is_listed_and_chat_formats_render_requests() -> None:
    assert format_names() == ["openai_chat", "openai_responses", "anthropic", "gemini", "mcp", "json"]
    assert chat_format_names() == ["openai_chat", "openai_responses", "anthropic", "gemini"]
    request = ChatRequest((Message.user("hi"),), pinned=(WEATHER,))
    for name in chat_format_names():
        payload = request_payload(name, request, "m")
        assert payload["model"] == "m" and len(payload_tools(payload)) == 1
    with pytest.raises(ValueError, match="not a chat API"):
        request_payload("mcp", request, "m")


def test_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown tool format 'cohere'; use one of: openai_chat"):
        get_format("cohere")
    with pytest.raises(ValueError, match="format must be one of openai_chat"):
        ScriptedModel(["x"], format="mcp")


def test_render_tools_uses_provider_safe_aliases_per_format() -> None:
    names = NameMap()
    alias = names.add(WEATHER.name)
    assert alias != WEATHER.name  # the dot is not accepted by providers
    assert render_tools("openai_chat", [WEATHER], names) == [
        {"type": "function", "function": {"name": alias, "description": WEATHER.description,
                                          "parameters": WEATHER.input_schema}}
    ]
    assert render_tools("openai_responses", [WEATHER], names)[0]["name"] == alias
    assert render_tools("anthropic", [WEATHER], names)[0]["input_schema"] == WEATHER.input_schema
    assert render_tools("gemini", [WEATHER], names)[0] == {
        "name": alias, "description": WEATHER.description, "parameters_json_schema": WEATHER.input_schema}
    assert render_tools("mcp", [WEATHER], names)[0]["inputSchema"] == WEATHER.input_schema
    assert render_tools("json", [WEATHER], names)[0] == {**WEATHER.to_dict(), "name": alias}
    assert names.original(alias) == WEATHER.name


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}, CALL),
        ({"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'}, CALL),
        ({"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}, CALL),
        ({"id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}, CALL),
        (
            {"type": "tool_search_call", "call_id": "s1", "arguments": {"query": "weather"}},
            ToolCall("s1", "find", {"query": "weather"}, kind="tool_search"),
        ),
    ],
)
def test_parse_tool_call_reads_every_format(raw: dict[str, object], expected: ToolCall) -> None:
    assert parse_tool_call(raw, search_name="find") == expected


def test_parse_tool_call_reports_bad_input() -> None:
    bad = parse_tool_call({"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}})
    assert bad.arguments == {} and bad.arguments_error and "not valid JSON" in bad.arguments_error
    with pytest.raises(TypeError, match="needs at least a 'name'"):
        parse_tool_call({"id": "c"})
    with pytest.raises(TypeError, match="cannot read a tool call from int"):
        parse_tool_call(3)


def test_render_result_per_format() -> None:
    assert render_result("openai_chat", CALL, "sunny") == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert render_result("openai_responses", CALL, "sunny") == {
        "type": "function_call_output", "call_id": "c1", "output": "sunny"}
    assert render_result("anthropic", CALL, "boom", is_error=True) == {
        "type": "tool_result", "tool_use_id": "c1", "content": "boom", "is_error": True}
    assert render_result("mcp", CALL, "sunny") == {"content": [{"type": "text", "text": "sunny"}], "isError": False}
    assert json.loads(json.dumps(render_result("json", CALL, "sunny")))["name"] == "get_weather"


def test_a_new_format_is_one_registration() -> None:
    fmt = WireFormat(
        name="test_upper",
        label="upper",
        render_tool=lambda tool, alias: {"NAME": alias},
        parse_call=lambda data, search: None,
        render_result=lambda call, content, is_error: {"ID": call.id, "TEXT": content.upper()},
    )
    register_format(fmt)
    try:
        assert render_tools("test_upper", [WEATHER])[0]["NAME"].startswith("weather_get")
        assert render_result("test_upper", CALL, "ok") == {"ID": "c1", "TEXT": "OK"}
        assert "test_upper" in format_names() and "test_upper" not in chat_format_names()
    finally:
        from toolsearch.providers import registry

        registry.FORMATS.unregister("test_upper")
