"""Training rows for a tool retriever: labelled requests and the pseudo-requests any catalog gives.

No torch here: rows are plain data, so the same code serves the shipped model's training
script and a user's own catalog.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..evaluation import LabeledQuery
from ..index import MAX_QUERY_CHARS
from ..text import embedding_text, split_identifier
from ..tools import Tool
from .trainer import QueryRow

__all__ = ["Anchor", "catalog_anchors", "query_rows", "request_anchors", "tool_texts"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MIN_SENTENCE_WORDS = 4


@dataclass(frozen=True, slots=True)
class Anchor:
    """A request (or pseudo-request) and every tool that serves it."""

    text: str
    relevant: tuple[str, ...]
    kind: str  # "request", "name", "sentence"


def tool_texts(tools: Iterable[Tool]) -> dict[str, str]:
    """The passage each tool is embedded as: the same text the vector backend embeds."""
    return {t.name: embedding_text(t) for t in tools}


def request_anchors(queries: Sequence[LabeledQuery], *, per_tool: int | None, seed: int) -> list[Anchor]:
    """Labelled requests, at most `per_tool` for any one tool (thousands of requests per tool repeat themselves)."""
    order = list(queries)
    random.Random(seed).shuffle(order)
    used: dict[str, int] = defaultdict(int)
    out: list[Anchor] = []
    for q in order:
        if per_tool is not None and all(used[name] >= per_tool for name in q.relevant):
            continue
        for name in q.relevant:
            used[name] += 1
        out.append(Anchor(q.query.strip()[:MAX_QUERY_CHARS], tuple(q.relevant), "request"))
    return out


def catalog_anchors(tools: Sequence[Tool], *, seed: int) -> list[Anchor]:
    """What any catalog gives: a tool's name words and one of its description's sentences, each as a request."""
    rng = random.Random(seed)
    out: list[Anchor] = []
    for tool in tools:
        words = " ".join(split_identifier(tool.name))
        if len(words.split()) >= 2:
            out.append(Anchor(words, (tool.name,), "name"))
        sentences = [s for s in _SENTENCE_END.split(tool.description.strip()) if len(s.split()) >= _MIN_SENTENCE_WORDS]
        if sentences:
            out.append(Anchor(rng.choice(sentences), (tool.name,), "sentence"))
    return out


def query_rows(anchors: Sequence[Anchor], rows_of: dict[str, int]) -> list[QueryRow]:
    """One training row per (anchor, right tool); `rows_of` maps a tool name to its row of the tool matrix."""
    out: list[QueryRow] = []
    for anchor in anchors:
        relevant = tuple(rows_of[n] for n in anchor.relevant if n in rows_of)
        out.extend(QueryRow(anchor.text, row, relevant) for row in relevant)
    return out
