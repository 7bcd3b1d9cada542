"""A Lucene query is parsed once per search: bm25's search and hybrid's reading of the query share one parse."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import numpy as np
import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.backends import bm25 as bm25_module
from toolsearch.embeddings import CallableEmbedder

TOOLS = [
    Tool("email_send_draft", "Send a saved email draft."),
    Tool("email_send_message", "Send an email message to recipients."),
    Tool("calendar_create_event", "Create a calendar event."),
    Tool("get_weather", "Weather forecast for a city."),
]
_DIRECTIONS = ["draft", "email", "calendar", "weather"]


def _keyword_vectors(texts: list[str]) -> np.ndarray:
    out = np.full((len(texts), len(_DIRECTIONS) + 1), 0.05, dtype=np.float32)
    for row, text in enumerate(texts):
        for column, word in enumerate(_DIRECTIONS):
            out[row, column] += 3.0 * text.lower().count(word)
    return out


@pytest.fixture(scope="module")
def hybrid_index() -> ToolIndex:
    embedder = CallableEmbedder(_keyword_vectors, "keywords-5", len(_DIRECTIONS) + 1)
    return ToolIndex.build(TOOLS, "hybrid", embedder=embedder, cache=False)


def _parses(search: Callable[[], object]) -> int:
    """How many times bm25's query parser ran during `search()`: watched with a profile hook, nothing replaced."""
    parse = bm25_module._Parser.parse.__code__
    count = 0

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" and frame.f_code is parse:
            count += 1

    before = sys.getprofile()
    sys.setprofile(watch)
    try:
        search()
    finally:
        sys.setprofile(before)
    return count


# Each query holds a word no other test searches for, so that no earlier search in this process has parsed it.
@pytest.mark.parametrize(
    "query",
    [
        "+email -draft onceparsed",  # symbol constraints
        "email AND calendar OR onceanded",  # operators
        "weath* oncepartial",  # a word written in part
        "email^2 onceboosted",  # Lucene without constraints
        "name:(email onceunclosed",  # a syntax error: searched as plain words
    ],
)
def test_a_lucene_query_is_parsed_once_per_hybrid_search(hybrid_index: ToolIndex, query: str) -> None:
    # Before: twice, once by bm25's search and again by hybrid for the constraints (bm25's private _reading).
    assert _parses(lambda: hybrid_index.search(query, 3)) == 1


def test_a_plain_query_is_not_parsed(hybrid_index: ToolIndex) -> None:
    assert _parses(lambda: hybrid_index.search("send the weather to my onceplain inbox", 3)) == 0


def test_the_shared_parse_reads_as_before(hybrid_index: ToolIndex) -> None:
    # bm25 parsed it first (its search); hybrid's reading of it, and anyone's, is the same reading.
    query = "+email -draft oncereading"
    names = hybrid_index.search(query, 4).names
    assert names == ["email_send_message"]  # +email kept, -draft excluded: the dense half brings nothing back
    assert bm25_module.lucene_reading(query) == (frozenset({"required", "excluded"}), False)
    assert bm25_module.lucene_constraints(query) == frozenset({"required", "excluded"})
    broken = "name:(email oncebroken"
    assert "query syntax not understood" in " ".join(hybrid_index.search(broken, 3).notes)
    assert bm25_module.lucene_reading(broken) is None
