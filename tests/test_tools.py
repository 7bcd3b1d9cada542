"""Tool records (toolsearch.tools): validation, cleaning, converters from every format, load_tools, safe names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from fakes.core import SCHEMA, weather

from toolsearch import (
    DuplicateToolError,
    InvalidToolError,
    NameMap,
    Tool,
    ToolIndex,
    ToolSearchError,
    load_tools,
    provider_safe_name,
)
from toolsearch.text import tool_text


def test_tool_defaults_and_fingerprint() -> None:
    tool = Tool("ping")
    assert tool.description == "" and tool.input_schema == {"type": "object", "properties": {}}
    assert tool.tags == () and tool.metadata == {} and tool.namespace is None
    assert Tool("ping").fingerprint == tool.fingerprint and hash(Tool("ping")) == hash(tool)
    assert Tool("ping", "other").fingerprint != tool.fingerprint
    assert Tool("ping", None).description == ""  # type: ignore[arg-type]

def test_tool_is_immutable_and_copies_its_schema() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    tool = Tool("t", input_schema=schema)
    schema["properties"]["b"] = {"type": "string"}
    assert "b" not in tool.input_schema["properties"]
    with pytest.raises(AttributeError):
        tool.name = "other"  # type: ignore[misc]

@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "non-empty string"),
        ({"name": "   "}, "non-empty string"),
        ({"name": 5}, "non-empty string"),
        ({"name": "x" * 257}, "limit is 256"),
        ({"name": "t", "description": 3}, "'description' must be a string"),
        ({"name": "t", "description": "x" * 64_001}, "limit is 64000"),
        ({"name": "t", "namespace": ""}, "'namespace'"),
        ({"name": "t", "namespace": 7}, "'namespace'"),
        ({"name": "t", "tags": "a,b"}, "'tags'"),
        ({"name": "t", "tags": ["a", 1]}, "'tags'"),
        ({"name": "t", "input_schema": []}, "must be a JSON object"),
        ({"name": "t", "input_schema": {"type": "array"}}, "'type' must be 'object'"),
        ({"name": "t", "input_schema": {"properties": []}}, "'properties' must be an object"),
        ({"name": "t", "input_schema": {"properties": {"a": "string"}}}, "parameter 'a' schema"),
        ({"name": "t", "input_schema": {"properties": {"a": {"type": "str"}}}}, "unknown JSON type 'str'"),
        ({"name": "t", "input_schema": {"properties": {}, "required": "a"}}, "'required'"),
        ({"name": "t", "input_schema": {"properties": {"a": {"default": {1, 2}}}}}, "not JSON-serialisable"),
        ({"name": "t", "metadata": {"f": object()}}, "'metadata'"),
        # before: any size (one 3.9 MB schema broke a gateway's clients at the protocol level)
        ({"name": "t", "input_schema": {"properties": {"a": {"description": "x" * 256_000}}}},
         "input schema is 256,042 characters of JSON; the limit is 256,000"),
    ],
)
def test_invalid_tools(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidToolError, match=re.escape(message)):
        Tool(**kwargs)

def test_invalid_tool_errors_are_toolsearch_errors() -> None:
    with pytest.raises(ToolSearchError):
        Tool("")
    with pytest.raises(ValueError):
        Tool("")

def test_schema_type_list_and_missing_type_are_accepted() -> None:
    tool = Tool("t", input_schema={"properties": {"a": {"type": ["string", "null"]}}})
    assert tool.input_schema["type"] == "object"

def test_openai_chat_and_responses_shapes_round_trip() -> None:
    tool = weather()
    chat = tool.to_openai()
    assert chat == {
        "type": "function",
        "function": {"name": "get_weather", "description": tool.description, "parameters": SCHEMA},
    }
    responses = tool.to_openai(responses=True, name="alias")
    assert responses["type"] == "function" and responses["name"] == "alias" and "function" not in responses
    assert Tool.from_openai(chat, namespace="weather") == tool
    assert Tool.from_openai(tool.to_openai(responses=True), namespace="weather") == tool
    assert Tool.from_dict(chat).name == "get_weather"
    assert Tool.from_dict(tool.to_openai(responses=True)).input_schema == SCHEMA

def test_openai_without_parameters_or_description() -> None:
    tool = Tool.from_openai({"type": "function", "function": {"name": "now"}})
    assert tool.description == "" and tool.input_schema == {"type": "object", "properties": {}}

def test_anthropic_shape_round_trip() -> None:
    tool = weather(namespace=None)
    data = tool.to_anthropic()
    assert data == {"name": "get_weather", "description": tool.description, "input_schema": SCHEMA}
    assert Tool.from_anthropic(data) == tool
    assert Tool.from_dict(data) == tool
    assert Tool.from_anthropic(data, namespace="w").namespace == "w"

def test_mcp_dict_shape() -> None:
    data = {
        "name": "get_weather",
        "title": "Weather",
        "description": "Current weather.",
        "inputSchema": SCHEMA,
        "annotations": {"readOnlyHint": True},
    }
    tool = Tool.from_mcp(data, namespace="srv")
    assert tool.input_schema == SCHEMA and tool.namespace == "srv"
    assert tool.metadata == {"title": "Weather", "annotations": {"readOnlyHint": True}}
    assert Tool.from_dict(data).metadata["title"] == "Weather"
    assert tool.to_mcp() == {"name": "get_weather", "description": "Current weather.", "inputSchema": SCHEMA,
                             "title": "Weather", "annotations": {"readOnlyHint": True}}  # kept both ways

def test_mcp_sdk_object() -> None:
    import mcp.types as types
    sdk_tool = types.Tool(name="echo", description="Echo text back.", inputSchema=SCHEMA)
    tool = Tool.from_mcp(sdk_tool, namespace="srv")
    assert (tool.name, tool.description, tool.input_schema, tool.namespace) == (
        "echo",
        "Echo text back.",
        SCHEMA,
        "srv",
    )

def test_dataset_shape_keeps_source_and_extra_keys_as_metadata() -> None:
    tool = Tool.from_dict(
        {"name": "t", "description": "d", "input_schema": SCHEMA, "source": "bfcl/simple", "tags": ["x"], "v": 2}
    )
    assert tool.metadata == {"source": "bfcl/simple", "v": 2} and tool.tags == ("x",)
    assert Tool.from_dict(tool.to_dict()) == tool

@pytest.mark.parametrize("bad", [[], "tool", 3, None])
def test_converters_reject_non_objects(bad: object) -> None:
    for convert in (Tool.from_dict, Tool.from_openai, Tool.from_anthropic, Tool.from_mcp):
        with pytest.raises(InvalidToolError, match="must be a JSON object"):
            convert(bad)  # type: ignore[arg-type]

def test_from_callable_reads_hints_and_docstring() -> None:
    def forecast(
        city: str, days: int = 3, units: Literal["metric", "imperial"] = "metric", note: str | None = None
    ) -> str:
        """Weather forecast for a city.

        Args:
            city: The city name.
            days (int): How many days
                ahead to look.
            units: Unit system.

        Returns:
            A text summary.
        """
        return ""

    tool = Tool.from_callable(forecast, namespace="weather")
    assert tool.name == "forecast" and tool.namespace == "weather"
    assert tool.description == "Weather forecast for a city."
    props = tool.input_schema["properties"]
    assert props["city"] == {"type": "string", "description": "The city name."}
    assert props["days"]["description"] == "How many days ahead to look." and props["days"]["default"] == 3
    assert props["units"]["enum"] == ["metric", "imperial"]
    assert tool.input_schema["required"] == ["city"]
    assert "title" not in tool.input_schema and all("title" not in p for p in props.values())

def test_from_callable_edge_cases() -> None:
    def untyped(a, *args, b=1, **kwargs):  # type: ignore[no-untyped-def]
        return a

    tool = Tool.from_callable(untyped, name="renamed")
    assert tool.name == "renamed" and set(tool.input_schema["properties"]) == {"a", "b"}
    assert tool.description == ""

    class Service:
        def method(self, query: str) -> None:
            """Search."""

    assert list(Tool.from_callable(Service().method).input_schema["properties"]) == ["query"]
    with pytest.raises(InvalidToolError, match="not callable"):
        Tool.from_callable(42)  # type: ignore[arg-type]

    class Opaque:
        pass

    def bad(x: Opaque) -> None: ...

    with pytest.raises(InvalidToolError, match="cannot derive a JSON schema"):
        Tool.from_callable(bad)

def test_load_tools_formats(tmp_path: Path) -> None:
    tool = weather()
    jsonl = tmp_path / "tools.jsonl"
    jsonl.write_text(
        json.dumps(tool.to_dict()) + "\n\n" + json.dumps(tool.to_openai() | {"x": 1}).replace("get_", "set_") + "\n"
    )
    assert [t.name for t in load_tools(jsonl)] == ["get_weather", "set_weather"]

    array = tmp_path / "tools.json"
    array.write_text(json.dumps([tool.to_anthropic(), tool.to_mcp() | {"name": "b"}], indent=2))
    assert [t.name for t in load_tools(array, namespace="ns")] == ["get_weather", "b"]
    assert {t.namespace for t in load_tools(array, namespace="ns")} == {"ns"}

    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"tools": [tool.to_dict()]}))
    assert load_tools(wrapped) == [tool]

    single = tmp_path / "one.json"
    single.write_text(json.dumps(tool.to_dict(), indent=2))
    assert load_tools(single) == [tool]

    unsuffixed_jsonl = tmp_path / "tools.txt"
    unsuffixed_jsonl.write_text(json.dumps(tool.to_dict()) + "\n" + json.dumps(tool.to_mcp() | {"name": "c"}) + "\n")
    assert len(load_tools(unsuffixed_jsonl)) == 2

def test_load_tools_errors_name_file_and_line(tmp_path: Path) -> None:
    good = json.dumps(weather().to_dict())
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(good + "\n" + "{oops\n")
    with pytest.raises(InvalidToolError, match=re.escape(f"{jsonl}:2: invalid JSON")):
        load_tools(jsonl)
    jsonl.write_text(good + "\n\n" + json.dumps({"name": "", "description": "x"}) + "\n")
    with pytest.raises(InvalidToolError, match=re.escape(f"{jsonl}:3: tool")):
        load_tools(jsonl)

    array = tmp_path / "bad.json"
    array.write_text(json.dumps([weather().to_dict(), {"name": "t", "input_schema": {"type": "array"}}]))
    with pytest.raises(InvalidToolError, match=re.escape(f"{array} (item 2)")):
        load_tools(array)
    array.write_text('[\n  {"name": "a"},\n  {"name": \n]')
    with pytest.raises(InvalidToolError, match=re.escape(f"{array}:4: invalid JSON")):
        load_tools(array)
    array.write_text('"just a string"')
    with pytest.raises(InvalidToolError, match="expected a list of tools"):
        load_tools(array)
    with pytest.raises(InvalidToolError, match="file not found"):
        load_tools(tmp_path / "missing.json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidToolError, match=r"not UTF-8 text \(byte 0xFF at offset 0\); save it as UTF-8"):
        load_tools(binary)

def test_provider_safe_name() -> None:
    assert provider_safe_name("get_weather") == "get_weather"
    assert provider_safe_name("a-b_C9") == "a-b_C9"
    for name in ["math.factorial", "Get Weather & Time", "x" * 100, "...", "天気"]:
        safe = provider_safe_name(name)
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", safe), safe
        assert provider_safe_name(name) == safe  # stable
    assert provider_safe_name("math.factorial").startswith("math_factorial_")
    assert provider_safe_name("a.b") != provider_safe_name("a b")
    assert provider_safe_name("x" * 64) == "x" * 64 and provider_safe_name("x" * 65) != "x" * 65

def test_name_map_is_reversible_and_detects_collisions() -> None:
    names = NameMap(["get_weather", "math.factorial"])
    alias = names.safe("math.factorial")
    assert names.original(alias) == "math.factorial" and names.original("get_weather") == "get_weather"
    assert names.original("unknown") is None
    assert names.safe("new.name") == provider_safe_name("new.name")
    assert names.add("math.factorial") == alias
    with pytest.raises(DuplicateToolError, match="map to the same provider name") as err:
        names.add(alias + "")  # a real tool that is literally named like the alias
        names.add("x")
    assert set(err.value.names) == {"math.factorial", alias}

@pytest.mark.parametrize(
    ("kind", "dirty", "clean"),
    [
        ("zero-width space", "Send\u200b an\u200c email\u200d now\u2060\ufeff", "Send an email now"),
        ("bidi override", "Pay \u202eeciovni\u202c the \u2066invoice\u2069 \u200fnow\u200e",
         "Pay eciovni the invoice now"),
        ("ANSI escape", "\x1b[31mRed\x1b[0m \x1b]8;;http://evil\x07link\x1b]8;;\x07 \x1b[2J\x1bcok", "Red link ok"),
        ("control character", "bell\x07 back\x08space\x00 nul\x7f del\x85 nel", "bell backspace nul del nel"),
        ("invisible tag characters", "weather\U000e0049\U000e0067\U000e006e\U000e006f\U000e0072\U000e0065", "weather"),
        ("soft hyphen", "in\u00advisible", "invisible"),
        ("line ends", "one\r\ntwo\rthree\tfour", "one\ntwo\nthree\tfour"),
    ],
)
def test_descriptions_are_cleaned_of_invisible_characters(kind: str, dirty: str, clean: str) -> None:
    schema = {"type": "object", "title": dirty,
              "properties": {"to": {"type": "string", "description": dirty,
                                    "items": {"type": "object", "description": dirty}}}}
    tool = Tool("send_email", dirty, schema)
    assert tool.description == clean, kind
    assert tool.input_schema["title"] == clean
    assert tool.input_schema["properties"]["to"]["description"] == clean
    assert tool.input_schema["properties"]["to"]["items"]["description"] == clean
    for shown in (tool.to_openai(), tool.to_anthropic(), tool.to_mcp(), tool_text(tool).joined()):
        text = json.dumps(shown, ensure_ascii=False) if not isinstance(shown, str) else shown
        assert not any(c in text for c in "\u200b\u202e\u2066\x1b\x07\x00\U000e0049\u00ad"), kind
    # what is indexed is what is shown: a search for the visible word finds the tool
    index = ToolIndex.build([tool, Tool("other", "Something unrelated.")], backend="bm25")
    assert index.search(clean.split()[0], 1).names == ["send_email"]


@pytest.mark.parametrize("name", [" send_email", "send_email ", "send_email\n", "\tsend_email"])
def test_a_name_with_surrounding_whitespace_is_refused(name: str) -> None:
    with pytest.raises(InvalidToolError, match=r"tool .*send_email.*starts or ends with whitespace.*'send_email'"):
        Tool(name, "Send an email")
    assert Tool("send email", "inner spaces stay allowed").name == "send email"


def test_a_name_far_over_the_limit_is_quoted_only_up_to_it() -> None:
    # before: the whole name quoted, a 100 KB error line
    with pytest.raises(InvalidToolError) as caught:
        Tool("a" * 100_000, "x")
    message = str(caught.value)
    assert message == f"tool '{'a' * 256}'...: name is 100000 chars; the limit is 256"
