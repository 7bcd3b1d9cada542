"""The per-definition render cache: counts equal rendering every request from scratch, and content changes show."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from toolsearch import Tool
from toolsearch.cost import CacheRules, request_blocks
from toolsearch.providers import ChatRequest, Message, ToolCall
from toolsearch.providers.registry import request_payload
from toolsearch.tokens import (
    compact_json,
    content_key,
    count_tokens,
    definition_json,
    request_tokens,
    without_cache_markers,
)

FORMATS = ("openai_chat", "openai_responses", "anthropic")
ANTHROPIC = CacheRules(
    "anthropic",
    min_cacheable_tokens=1024,
    lifetime_seconds=300,
    breakpoints=("tools", "system", "last"),
    lookback_blocks=20,
    deferred_tools_in_prefix=False,
)


def _requests(tools: list[Tool]) -> list[ChatRequest]:
    """Every tool injected, and the native form (deferred tools) where a format has one: the discovered tools
    found by a search of the conversation (Anthropic sends deferred the tools a `tool_reference` loads)."""
    question = (Message.user("Which tool fits?"),)
    found = ToolCall("call_1", tools[0].name, {"query": "tools"})
    searched = (Message.assistant("", [found]), Message.tool(found, "Found them.", tool_references=tools[1:]))
    return [
        ChatRequest(messages=question, system="Use the tools.", pinned=tuple(tools)),
        ChatRequest(
            messages=question + searched,
            system="Use the tools.",
            search_tool=tools[0],
            discovered=tuple(tools[1:]),
            tool_search_mode="native",
        ),
    ]


def _reference_tool_tokens(payload: dict[str, Any]) -> int:
    """What request_tokens counted for the tools before the cache: each definition rendered afresh."""
    return sum(count_tokens(compact_json(without_cache_markers(t))) for t in payload.get("tools") or ())


@pytest.mark.parametrize("catalog", ["bfcl_tools", "demo_tools"])
def test_cached_counts_equal_fresh_renders_of_real_catalogs(request: pytest.FixtureRequest, catalog: str) -> None:
    """BFCL's 1,703 tools (dotted names, many languages, odd schemas; built from bfcl-eval) and the bundled 197."""
    tools: list[Tool] = request.getfixturevalue(catalog)
    for fmt in FORMATS:
        for request in _requests(tools):
            payload = request_payload(fmt, request, "m")
            for definition in payload.get("tools") or ():
                assert definition_json(definition) == compact_json(definition)
            expected = _reference_tool_tokens(payload)
            assert expected > 0
            # the first call fills the cache, the second reads it: both give the fresh figure
            assert request_tokens(payload).tools == expected
            assert request_tokens(copy.deepcopy(payload)).tools == expected
            if fmt == "anthropic" and request.tool_search_mode == "native":
                continue  # the cost blocks leave deferred tools out: compared below
            blocks = request_blocks(payload, fmt)
            assert sum(b.tokens for b in blocks if b.part == "tools") == expected


def test_deferred_tools_are_left_out_of_the_blocks_and_counted_without_the_flag(bfcl_tools: list[Tool]) -> None:
    request = _requests(bfcl_tools[:30])[1]
    payload = request_payload("anthropic", request, "m")
    deferred = [t for t in payload["tools"] if t.get("defer_loading")]
    assert deferred
    for _ in range(2):  # fresh, then cached
        blocks = request_blocks(payload, "anthropic", rules=ANTHROPIC)
        kept = [t for t in payload["tools"] if not t.get("defer_loading")]
        assert [b.tokens for b in blocks if b.part == "tools"] == [
            count_tokens(compact_json(without_cache_markers(t))) for t in kept
        ]


def _payload(definition: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], "tools": [definition]}


def test_a_definition_changed_in_place_under_the_same_name_is_counted_anew() -> None:
    tool = Tool("lookup", "Find a record.", {"type": "object", "properties": {"id": {"type": "string"}}})
    definition = tool.to_openai()
    before = request_tokens(_payload(definition)).tools
    key_before = request_blocks(_payload(definition), "openai_chat")[0].key
    definition["function"]["description"] = "Find a record by its identifier in the customer database."
    longer = request_tokens(_payload(definition)).tools
    assert longer > before
    assert longer == count_tokens(compact_json(definition))
    definition["function"]["parameters"]["properties"]["id"]["description"] = "the record's id, e.g. C-1042"
    deeper = request_tokens(_payload(definition)).tools
    assert deeper > longer
    blocks = request_blocks(_payload(definition), "openai_chat")
    assert blocks[0].tokens == deeper
    assert blocks[0].key != key_before  # the prompt-cache match sees the change too


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # equal dicts, keys in another order: other JSON
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1}, {"a": True}),
        ({"a": [1]}, {"a": "[1]"}),
    ],
)
def test_values_equal_in_python_but_rendered_differently_get_their_own_render(
    one: dict[str, Any], other: dict[str, Any]
) -> None:
    assert compact_json(one) != compact_json(other)
    assert content_key(one) != content_key(other)
    assert definition_json(one) == compact_json(one)
    assert definition_json(other) == compact_json(other)


def test_values_marshal_cannot_write_are_rendered_every_time() -> None:
    class Schema(dict[str, Any]):
        pass

    value = {"parameters": Schema(type="object")}
    assert content_key(value) is None
    assert definition_json(value) == compact_json(value) == '{"parameters":{"type":"object"}}'
