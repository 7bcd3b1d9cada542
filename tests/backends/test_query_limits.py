"""Lucene queries that once escaped or broke the lexical engines: huge boosts, deep nesting, and constraints that
hybrid's dense half ignored when they let no tool through. Real tantivy and, for hybrid, the real model."""

from __future__ import annotations

import json
import math

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.backends.bm25 import MAX_GROUP_DEPTH, MAX_QUERY_BOOST
from toolsearch.backends.hybrid import fuse

TOOLS = [
    Tool("get_weather", "Current weather for a city"),
    Tool("get_air_quality", "Air quality index for a city"),
    Tool("send_email", "Send an email"),
    Tool("create_issue", "Open an issue in a tracker"),
]
HUGE = "9" * 400


@pytest.fixture(scope="module")
def indexes() -> dict[str, ToolIndex]:
    return {b: ToolIndex.build(TOOLS, b) for b in ("bm25", "hybrid")}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bm25", "hybrid"])
@pytest.mark.parametrize("query", [f"+weather^{HUGE}", f"(weather)^{HUGE} OR email", f"name:(get weather)^{HUGE}"])
def test_a_huge_boost_is_lowered_and_every_score_is_finite(
    indexes: dict[str, ToolIndex], backend: str, query: str
) -> None:
    result = indexes[backend].search(query, k=3)
    assert result.names[0] == "get_weather"
    assert all(math.isfinite(hit.score) for hit in result.hits)
    json.dumps([hit.score for hit in result.hits], allow_nan=False)
    assert any(f"lowered to {MAX_QUERY_BOOST:g}" in note for note in result.notes)


def test_a_boost_within_the_limit_leaves_no_note() -> None:
    result = ToolIndex.build(TOOLS, "bm25").search("+weather^50 city", k=3)
    assert result.names[0] == "get_weather" and not any("lowered" in note for note in result.notes)


def test_fuse_never_returns_a_non_finite_score() -> None:
    fused = fuse({"a": 0.5, "b": 0.4, "c": math.nan}, {"a": math.inf, "b": 3.0}, 0.65)
    assert set(fused) == {"a", "b"} and all(math.isfinite(s) for s in fused.values())
    assert fused["a"] > fused["b"]
    assert fuse({"a": 0.5, "b": 0.4}, {"a": math.nan, "b": 2.0}, 0.65)["b"] > 0.4 * 0.65


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bm25", "hybrid"])
@pytest.mark.parametrize("depth", [33, 496, 499])
def test_a_query_nested_too_deep_is_searched_as_words(indexes: dict[str, ToolIndex], backend: str, depth: int) -> None:
    query = ("(" * depth + "+weather" + ")" * depth)[:1_000]  # 499: cut at the query limit, never closed
    result = indexes[backend].search(query, k=2)
    if backend == "bm25":  # (hybrid's dense half embeds the parentheses too, and ranks as it may)
        assert result.names[0] == "get_weather"
    assert any(f"more than {MAX_GROUP_DEPTH} deep" in note for note in result.notes)
    shallow = "(" * MAX_GROUP_DEPTH + "+weather" + ")" * MAX_GROUP_DEPTH
    assert not any("deep" in note for note in indexes[backend].search(shallow, k=2).notes)


# Symbols written on purpose (+required, -excluded, a field), alone or beside AND / NOT, and a query that only
# excludes words (nothing to search by meaning): hybrid answers nothing where bm25 lets no tool through.
@pytest.mark.slow
@pytest.mark.parametrize(
    "query", ["-weather", "+zebra weather", "name:zebra", "weather AND +zebra", "weather NOT -city", "NOT weather"]
)
def test_hybrid_keeps_a_constraint_that_lets_no_tool_through(indexes: dict[str, ToolIndex], query: str) -> None:
    lexical = indexes["bm25"].search(query, k=4)
    result = indexes["hybrid"].search(query, k=4)
    assert lexical.names == [] and result.names == []
    assert set(lexical.notes) <= set(result.notes)


# The operators AND / NOT are words a request in prose holds too ("weather for Paris AND London"): where they let no
# tool through, hybrid answers by meaning (as it did before it kept constraints) and its note says the operator was
# not applied; bm25 alone still answers nothing.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("weather AND zebra", "no tool has every word the AND asks for"),
        ("weather NOT city", "the NOT excluded every tool that matched"),
        ("weather AND zebra NOT city", "without a word the NOT excludes"),
        ("Current weather for a city AND zebra", "no tool has every word the AND asks for"),
    ],
)
def test_hybrid_answers_by_meaning_where_and_or_not_let_no_tool_through(
    indexes: dict[str, ToolIndex], query: str, said: str
) -> None:
    assert indexes["bm25"].search(query, k=4).names == []
    result = indexes["hybrid"].search(query, k=4)
    assert result.names[0] == "get_weather"
    assert len(result.notes) == 1 and said in result.notes[0] and "closest tools by meaning" in result.notes[0]
    assert not any("no tool matched" in note for note in result.notes)


@pytest.mark.slow
def test_hybrid_still_searches_semantically_where_no_constraint_applies(indexes: dict[str, ToolIndex]) -> None:
    assert indexes["hybrid"].search("city -weather", k=4).names == ["get_air_quality"]
    assert indexes["hybrid"].search("zebr*", k=4).names  # a prefix constrains nothing: the dense half answers
