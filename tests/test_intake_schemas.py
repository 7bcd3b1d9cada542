"""Intake of tool definitions (audit 53): shapes and keys, NaN, converters' fields, Anthropic folding's work."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from toolsearch import InvalidToolError, Tool, load_tools
from toolsearch.tools import anthropic_input_schema

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

# --- F3: NaN and Infinity ---------------------------------------------------------------------------------------------


def test_nan_in_a_tool_file_is_refused_naming_the_line_the_tool_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "tools.jsonl"
    path.write_text(
        '{"name": "send_email", "description": "Send an email"}\n'
        '{"name": "get_weather", "description": "Weather forecast", "input_schema": {"type": "object", '
        '"properties": {"lat": {"type": "number", "default": NaN}}}}\n'
    )
    # Before: loaded; every request showing the tool then failed in the SDK ("Out of range float values are not
    # JSON compliant"), naming no tool.
    with pytest.raises(InvalidToolError, match=r"tools\.jsonl:2: tool 'get_weather': "
                       r"input_schema\.properties\.lat\.default is NaN, which JSON cannot carry"):
        load_tools(path)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"input_schema": {"type": "object", "properties": {"n": {"type": "number", "maximum": math.inf}}}},
         r"input_schema\.properties\.n\.maximum is Infinity"),
        ({"input_schema": {"type": "object", "properties": {"n": {"enum": [1, -math.inf]}}}},
         r"input_schema\.properties\.n\.enum\[1\] is -Infinity"),
        ({"metadata": {"w": math.nan}}, r"metadata\.w is NaN"),
        ({"metadata": {"weights": {"a b": [0.5, math.nan]}}}, r"metadata\.weights\['a b'\]\[1\] is NaN"),
    ],
)
def test_nan_and_infinity_are_refused_at_creation(kwargs: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidToolError, match=rf"tool 't': {said}, which JSON cannot carry"):
        Tool("t", "d", **kwargs)


def test_a_nan_default_of_a_python_function_is_refused_by_name() -> None:
    def scale(factor: float = math.nan) -> float:
        """Scale by a factor."""
        return factor

    with pytest.raises(InvalidToolError, match=r"tool 'scale': input_schema\.properties\.factor\.default is NaN"):
        Tool.from_callable(scale)


# --- F5: schemas under other keys; tools that are not function tools -------------------------------------------------


@pytest.mark.parametrize("key", ["input_shema", "args_schema", "schema", "inputschema"])
def test_a_schema_under_a_key_no_shape_reads_is_refused_by_the_keys_name(tmp_path: Path, key: str) -> None:
    path = tmp_path / "tools.jsonl"
    path.write_text(json.dumps({"name": "weather", "description": "Weather", key: SCHEMA}) + "\n")
    # Before: a tool with no parameters, the schema in metadata, no error or warning.
    with pytest.raises(InvalidToolError, match=rf"tools\.jsonl:1: tool 'weather': '{key}' holds a JSON schema, but "
                       "a tool's parameters are read only from 'input_schema'"):
        load_tools(path)


@pytest.mark.parametrize("key", ["parametersJsonSchema", "parameters_json_schema"])
def test_a_gemini_declarations_json_schema_is_read(key: str) -> None:
    tool = Tool.from_dict({"name": "weather", "description": "Weather", key: SCHEMA, "behavior": "BLOCKING"})
    assert tool.input_schema == SCHEMA and tool.metadata == {"behavior": "BLOCKING"}


def test_other_keys_still_go_into_metadata_and_output_schemas_are_not_parameters() -> None:
    output = {"type": "object", "properties": {"temp": {"type": "number"}}}
    tool = Tool.from_dict({"name": "weather", "input_schema": SCHEMA, "category": "travel", "output_schema": output,
                           "response": output, "required_parameters": [{"name": "city"}]})
    assert tool.input_schema == SCHEMA
    assert set(tool.metadata) == {"category", "output_schema", "response", "required_parameters"}
    bare = Tool.from_dict({"name": "now", "description": "Current time", "returns": output})
    assert bare.input_schema == {"type": "object", "properties": {}} and bare.metadata == {"returns": output}


@pytest.mark.parametrize(
    "row",
    [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "web_search", "name": "search"},
    ],
)
def test_a_providers_built_in_tool_is_refused(row: dict[str, Any]) -> None:
    # Before: an ordinary function tool with an empty schema.
    with pytest.raises(InvalidToolError, match=rf"'type' is '{row['type']}', not a function tool"):
        Tool.from_dict(row)
    with pytest.raises(InvalidToolError, match="not a function tool"):
        Tool.from_anthropic(row)


def test_an_openai_custom_tool_is_refused_and_an_anthropic_custom_tool_is_read() -> None:
    with pytest.raises(InvalidToolError, match="'type' is 'custom' with no JSON schema: an OpenAI custom tool"):
        Tool.from_dict({"type": "custom", "name": "code_exec", "description": "Run code",
                        "format": {"type": "grammar"}})
    tool = Tool.from_anthropic({"type": "custom", "name": "weather", "input_schema": SCHEMA,
                                "cache_control": {"type": "ephemeral"}})
    assert tool.input_schema == SCHEMA and tool.metadata == {"cache_control": {"type": "ephemeral"}}
    assert Tool.from_dict({"type": "function", "name": "f", "description": "d"}).metadata == {}


# --- F8: what the converters keep ---------------------------------------------------------------------------------


def test_an_mcp_row_keeps_its_namespace_tags_and_metadata_as_the_other_shapes_do() -> None:
    mcp = Tool.from_dict({"name": "a", "inputSchema": SCHEMA, "namespace": "gh", "tags": ["x"], "metadata": {"o": 1}})
    anthropic = Tool.from_dict({"name": "a", "input_schema": SCHEMA, "namespace": "gh", "tags": ["x"],
                                "metadata": {"o": 1}})
    # Before: the MCP row lost its namespace and tags.
    assert (mcp.namespace, mcp.tags, mcp.metadata) == ("gh", ("x",), {"o": 1}) and mcp == anthropic


def test_an_openai_row_keeps_its_tags_metadata_and_strict() -> None:
    row = {"type": "function", "function": {"name": "a", "parameters": SCHEMA, "strict": True},
           "namespace": "gh", "tags": ["x"], "metadata": {"owner": "ops"}}
    tool = Tool.from_dict(row)
    # Before: tags () and metadata {}: strict, tags and metadata were dropped.
    assert tool.tags == ("x",) and tool.metadata == {"owner": "ops", "strict": True}
    assert Tool.from_dict(tool.to_dict()) == tool
    responses = Tool.from_openai({"type": "function", "name": "a", "parameters": SCHEMA, "strict": True})
    assert responses.metadata == {"strict": True}


def test_an_mcp_tool_keeps_its_output_schema_and_writes_back_title_and_annotations() -> None:
    import mcp.types as types

    output = {"type": "object", "properties": {"t": {"type": "number"}}}
    sdk = types.Tool.model_validate({"name": "a", "description": "d", "inputSchema": SCHEMA, "title": "T",
                                     "outputSchema": output, "annotations": {"readOnlyHint": True}, "_meta": {"k": 1}})
    tool = Tool.from_mcp(sdk)
    # Before: only the title was kept; to_mcp wrote name, description and inputSchema. `_meta` is protocol metadata
    # a server may stamp on each listing: kept, it would change the fingerprint of an unchanged definition.
    assert tool.metadata == {"title": "T", "outputSchema": output, "annotations": {"readOnlyHint": True}}
    relisted = {**sdk.model_dump(by_alias=True, exclude_none=True, mode="json"), "_meta": {"k": 2}}
    assert Tool.from_mcp(relisted).fingerprint == tool.fingerprint
    shown = tool.to_mcp()
    assert shown == {"name": "a", "description": "d", "inputSchema": SCHEMA, "title": "T",
                     "annotations": {"readOnlyHint": True}}
    assert types.Tool.model_validate(shown).title == "T"
    assert Tool.from_dict(tool.to_dict()) == tool


# --- F2: folding a schema for Anthropic is bounded work ------------------------------------------------------------


def _chain(depth: int, branches: int = 2, *, siblings: bool = False) -> dict[str, Any]:
    """`$defs` whose entries each point `branches` times at the next: 2^depth paths through them."""
    def ref(i: int, b: int) -> dict[str, Any]:
        return {"$ref": f"#/$defs/D{i + 1}", **({"title": f"via {b}"} if siblings else {})}

    defs: dict[str, Any] = {
        f"D{i}": {"anyOf": [ref(i, b) for b in range(branches)], "properties": {f"p{i}": {"type": "string"}}}
        for i in range(depth)
    }
    defs[f"D{depth}"] = {"properties": {"z": {"type": "string"}}}
    return {"type": "object", "$defs": defs, "anyOf": [{"$ref": "#/$defs/D0"}]}


@pytest.mark.parametrize("siblings", [False, True])
def test_a_schema_with_two_paths_through_each_definition_folds_without_exponential_work(siblings: bool) -> None:
    # Before: 2^depth work (16 levels took 1.6 s, 20 levels 34 s) on every Anthropic request showing the tool; at
    # 60 levels it never finished. No timing is asserted: the test's own timeout catches a regression.
    tool = Tool("deep", "A tool from some MCP server", _chain(60, siblings=siblings))
    folded = tool.to_anthropic()["input_schema"]
    assert folded["type"] == "object" and not {"anyOf", "oneOf", "allOf"} & set(folded)
    assert {"p0", "p1", "p30"} <= set(folded["properties"])  # the first levels are folded in
    assert len(folded["description"]) <= 2_000 and len(json.dumps(folded)) < 100_000
    assert tool.to_anthropic()["input_schema"] is folded  # folded once per definition


def test_a_small_union_folds_as_before() -> None:
    schema = {
        "type": "object",
        "$defs": {"ByCity": {"properties": {"city": {"type": "string"}}, "required": ["city"]},
                  "ByPoint": {"allOf": [{"$ref": "#/$defs/Lat"}, {"properties": {"lon": {"type": "number"}}}]},
                  "Lat": {"properties": {"lat": {"type": "number"}}, "required": ["lat"]}},
        "oneOf": [{"$ref": "#/$defs/ByCity"}, {"$ref": "#/$defs/ByPoint"}],
    }
    folded = anthropic_input_schema(schema)
    assert set(folded["properties"]) == {"city", "lat", "lon"} and "required" not in folded
    assert "$defs" not in folded and folded["description"].startswith("The arguments must match oneOf")
    assert '(1) {"properties":{"city":{"type":"string"}},"required":["city"]}' in folded["description"]


@pytest.mark.parametrize(("types", "levels"), [(80, 2), (30, 3), (400, 3)])
def test_an_openapi_union_of_many_subtypes_keeps_every_subtypes_fields(types: int, levels: int) -> None:
    # OpenAPI polymorphism: a top-level oneOf over event types, each `allOf` its parent and its own fields, the
    # parents chained. Each parent is folded once, however many types name it; a bound of 64 folds per schema (this
    # stop's first fix) dropped the fields of every type past the 64th, and the required ones.
    defs: dict[str, Any] = {"Base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}
    parent = "Base"
    for level in range(1, levels):
        defs[f"Mid{level}"] = {"allOf": [{"$ref": f"#/$defs/{parent}"},
                                         {"properties": {f"mid{level}": {"type": "string"}}}]}
        parent = f"Mid{level}"
    for i in range(types):
        defs[f"Event{i}"] = {"allOf": [{"$ref": f"#/$defs/{parent}"},
                                       {"properties": {f"field{i}": {"type": "string"}}, "required": [f"field{i}"]}]}
    schema = {"type": "object", "oneOf": [{"$ref": f"#/$defs/Event{i}"} for i in range(types)], "$defs": defs}
    folded = Tool("send_event", "Send one event.", schema).to_anthropic()["input_schema"]
    assert {f"field{i}" for i in range(types)} | {"id"} <= set(folded["properties"])
    assert folded["required"] == ["id"]  # what every type requires
