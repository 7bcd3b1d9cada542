"""A tool schema's regular expressions are matched under a timeout: a backtracking pattern cannot hold the process."""

from __future__ import annotations

from typing import Any

import pytest

from toolsearch import Tool
from toolsearch.executor import argument_problems

# `re` takes exponential time on this pair (a run of 'a's that cannot end the match): far past the test's timeout.
_BACKTRACKS = "^(a|aa)+$"
_STUCK = "a" * 60 + "!"


def _tool(name: str, schema: dict[str, Any]) -> Tool:
    return Tool(name=name, description="A tool whose schema holds a pattern.", input_schema=schema)


@pytest.mark.timeout(60)
def test_a_pattern_that_backtracks_is_not_judged_and_does_not_hang() -> None:
    tool = _tool("lookup", {"type": "object", "properties": {"code": {"type": "string", "pattern": _BACKTRACKS}}})
    assert argument_problems(tool, {"code": _STUCK}) == []  # not judged: the tool checks for itself
    assert argument_problems(tool, {"code": "aaa"}) == []
    assert argument_problems(tool, {"code": "b"}) == ["code: 'b' does not match '^(a|aa)+$'"]


@pytest.mark.timeout(60)
def test_pattern_properties_and_their_extras_are_matched_under_the_timeout() -> None:
    schema = {
        "type": "object",
        "patternProperties": {_BACKTRACKS: {"type": "integer"}, "^x_": {"type": "string"}},
        "additionalProperties": False,
    }
    tool = _tool("tagged", schema)
    assert argument_problems(tool, {_STUCK: 1}) == []  # its name cannot be judged: not refused for it
    assert argument_problems(tool, {"aa": 1, "x_note": "ok"}) == []
    assert argument_problems(tool, {"aa": "one"}) == ["aa: 'one' is not of type 'integer'"]
    assert argument_problems(tool, {"zz": 1, "yy": 2}) == [  # jsonschema's words: the key patterns the model may use
        "'yy', 'zz' do not match any of the regexes: '^(a|aa)+$', '^x_'"
    ]
    closed = _tool("closed", {"type": "object", "properties": {"a": {}}, "additionalProperties": False})
    assert argument_problems(closed, {"a": 1, "b": 2}) == ["Additional properties are not allowed ('b' was unexpected)"]
    typed = {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}}
    typed_extras = _tool("typed", typed)
    assert argument_problems(typed_extras, {"a": 1, "b": 2}) == ["b: 2 is not of type 'string'"]


@pytest.mark.timeout(60)
def test_unevaluated_properties_beside_pattern_properties_is_left_to_the_tool() -> None:
    schema = {
        "type": "object",
        "patternProperties": {_BACKTRACKS: {"type": "integer"}},
        "unevaluatedProperties": False,
    }
    assert argument_problems(_tool("open", schema), {_STUCK: 1, "zz": 2}) == []
    # patternProperties it reaches through an applicator are matched with `re` too
    nested = {"type": "object", "allOf": [{"patternProperties": {_BACKTRACKS: {}}}], "unevaluatedProperties": False}
    assert argument_problems(_tool("nested", nested), {_STUCK: 1}) == []
    closed = _tool("closed", {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False})
    assert argument_problems(closed, {"a": 1, "b": 2}) != []  # without patternProperties it still checks


@pytest.mark.timeout(60)
def test_a_subschema_naming_its_own_dialect_is_matched_under_the_timeout_too() -> None:
    # jsonschema checks a subschema with a `$schema` of its own with that dialect's stock validator (`re`, unbounded)
    draft7 = "http://json-schema.org/draft-07/schema#"
    inline = {"type": "object", "properties": {"code": {"$schema": draft7, "type": "string", "pattern": _BACKTRACKS}}}
    referred = {
        "type": "object",
        "$defs": {"code": {"$schema": draft7, "type": "string", "pattern": _BACKTRACKS}},
        "properties": {"code": {"$ref": "#/$defs/code"}, "$schema": {"type": "string"}},  # a property of that name
    }
    for name, schema in (("inline", inline), ("referred", referred)):
        tool = _tool(name, schema)
        assert argument_problems(tool, {"code": _STUCK}) == []
        assert argument_problems(tool, {"code": "b"}) == ["code: 'b' does not match '^(a|aa)+$'"]
    assert argument_problems(_tool("referred", referred), {"$schema": 3}) == ["$schema: 3 is not of type 'string'"]
