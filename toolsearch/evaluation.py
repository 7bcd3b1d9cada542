"""Retrieval metrics and query-set loading shared by benchmarks and the CLI."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._errors import InvalidToolError


@dataclass(frozen=True, slots=True)
class LabeledQuery:
    """A query and the names of the tools that answer it."""

    id: str
    query: str
    relevant: tuple[str, ...]
    subset: str = ""


def load_queries(
    path: str | Path, *, limit: int | None = None, seed: int | None = None, need_relevant: bool = False
) -> list[LabeledQuery]:
    """Read a dataset's queries.jsonl; with `seed`, shuffle before taking the first `limit`.

    Each row is checked: a row of the wrong shape (a `relevant` that is a string, which would split into
    characters), a line that is not UTF-8, or an id an earlier row has (as text: 1 and "1" are one id) raises
    InvalidToolError naming the file and line(s). With
    `need_relevant` (`toolsearch eval`), so does a row whose `relevant` is empty: it can only miss. Data
    sets may hold such rows on purpose (requests no tool answers), so that is the caller's choice;
    `score_rankings` leaves them out of its means and says how many it left out.
    """
    path = Path(path)
    out: list[LabeledQuery] = []
    lines: dict[str, int] = {}  # id -> the line that gave it: results and misses are reported by id
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                # A byte-order mark (Windows editors write one) is not content, as load_tools reads it.
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidToolError(
                    f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02X} at column {exc.start + 1}); "
                    "save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise InvalidToolError(f"{path}:{lineno}: not a query row ({exc})") from None
            query = _query_row(row, f"{path}:{lineno}", need_relevant)
            first = lines.setdefault(query.id, lineno)
            if first != lineno:
                raise InvalidToolError(
                    f"{path}:{lineno}: id {query.id!r} is also the id of line {first} (ids are compared as text); "
                    "give each query its own id, so that a miss reported by id names one query"
                )
            out.append(query)
    if seed is not None:
        random.Random(seed).shuffle(out)
    return out[:limit] if limit is not None else out


def _query_row(row: object, where: str, need_relevant: bool) -> LabeledQuery:
    """One row of a queries file, checked field by field (each problem says how the row should look)."""
    shape = '; write {"id": "q1", "query": "...", "relevant": ["tool_name"]}'
    if not isinstance(row, dict):
        raise InvalidToolError(f"{where}: not a query row (a JSON {type(row).__name__}, not an object){shape}")
    missing = [key for key in ("id", "query", "relevant") if key not in row]
    if missing:
        raise InvalidToolError(f"{where}: not a query row (no {', '.join(repr(k) for k in missing)}){shape}")
    query, relevant, subset = row["query"], row["relevant"], row.get("subset", "")
    if not isinstance(query, str):
        raise InvalidToolError(f"{where}: 'query' must be text, got {type(query).__name__}{shape}")
    if not isinstance(relevant, list) or not all(isinstance(name, str) for name in relevant):
        raise InvalidToolError(
            f"{where}: 'relevant' must be a list of tool names (strings), got {json.dumps(relevant)[:80]}{shape}"
        )
    if need_relevant and not relevant:
        raise InvalidToolError(f"{where}: 'relevant' lists no tool, so the query can only miss; name the tools that "
                               "answer it, or leave the row out")
    if not isinstance(row["id"], str | int) or isinstance(row["id"], bool):
        raise InvalidToolError(f"{where}: 'id' must be text or a number, got {json.dumps(row['id'])[:80]}{shape}")
    return LabeledQuery(str(row["id"]), query, tuple(relevant), str(subset))


def recall_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    rel = set(relevant)
    return len(rel.intersection(ranked[:k])) / len(rel) if rel else 0.0


def ndcg_at(ranked: Sequence[str], relevant: Iterable[str], k: int = 10) -> float:
    """nDCG@k with binary gains; each relevant name gains once, at its first place (a repeat is a wasted slot)."""
    rel = set(relevant)
    found: set[str] = set()
    dcg = 0.0
    for i, name in enumerate(ranked[:k]):
        if name in rel and name not in found:
            found.add(name)
            dcg += 1.0 / math.log2(i + 2)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), k)))
    return dcg / ideal if ideal else 0.0


def mrr_at(ranked: Sequence[str], relevant: Iterable[str], k: int = 10) -> float:
    rel = set(relevant)
    for i, name in enumerate(ranked[:k]):
        if name in rel:
            return 1.0 / (i + 1)
    return 0.0


METRICS = ("R@1", "R@5", "R@10", "nDCG@10", "MRR@10")


class Scores(dict[str, float]):
    """Mean metrics by name (a plain dict of them), plus how many queries they average and any notes.

    `queries` counts the queries the means are over; `unlabelled`, those left out because they name no
    relevant tool (a query no tool answers has no recall or nDCG to measure: counted as 0 it would pull every
    mean down without a word). `notes` says so, in the words `toolsearch eval` prints its notes in.
    """

    queries: int
    unlabelled: int
    notes: tuple[str, ...]

    def __init__(self, means: dict[str, float], *, queries: int, unlabelled: int) -> None:
        super().__init__(means)
        self.queries = queries
        self.unlabelled = unlabelled
        self.notes = (unlabelled_note(unlabelled, queries + unlabelled),) if unlabelled else ()


def unlabelled_note(unlabelled: int, total: int) -> str:
    """The note for `unlabelled` of `total` queries that name no relevant tool."""
    return (f"{unlabelled} of the {total} queries name no relevant tool, so they have no score; the means are over "
            f"the other {total - unlabelled}")


def score_rankings(rankings: Sequence[Sequence[str]], queries: Sequence[LabeledQuery]) -> Scores:
    """Mean Recall@1/5/10, nDCG@10 and MRR@10 over paired rankings and queries.

    A query with no relevant tool is left out of the means and counted in the result's `unlabelled`
    (with a note); with none labelled at all, every mean is 0.
    """
    totals = dict.fromkeys(METRICS, 0.0)
    labelled = 0
    for ranked, q in zip(rankings, queries, strict=True):
        if not q.relevant:
            continue
        labelled += 1
        totals["R@1"] += recall_at(ranked, q.relevant, 1)
        totals["R@5"] += recall_at(ranked, q.relevant, 5)
        totals["R@10"] += recall_at(ranked, q.relevant, 10)
        totals["nDCG@10"] += ndcg_at(ranked, q.relevant, 10)
        totals["MRR@10"] += mrr_at(ranked, q.relevant, 10)
    return Scores({m: v / (labelled or 1) for m, v in totals.items()}, queries=labelled,
                  unlabelled=len(queries) - labelled)


def evaluate(search: Callable[[str], Sequence[str]], queries: Sequence[LabeledQuery]) -> dict[str, float]:
    """Run `search(query) -> ranked names (best first, >= 10)` over queries and score it."""
    return score_rankings([list(search(q.query)) for q in queries], queries)


def queries_from_pairs(pairs: Iterable[tuple[str, str]]) -> list[LabeledQuery]:
    """Labelled queries from (query text, tool that answered it) pairs: one query per distinct text.

    A text seen with several tools (a search that led to two calls, or the same words typed in two
    sessions) is one query whose relevant set holds all of them, in the order first seen.
    """
    grouped: dict[str, list[str]] = {}
    for text, tool in pairs:
        relevant = grouped.setdefault(text, [])
        if tool not in relevant:
            relevant.append(tool)
    return [LabeledQuery(f"u{i}", text, tuple(tools)) for i, (text, tools) in enumerate(grouped.items(), 1)]


@dataclass(frozen=True, slots=True)
class Miss:
    """A query whose relevant tools were not all in the top k: which were missing and what came first."""

    query: LabeledQuery
    missing: tuple[str, ...]
    ranked: tuple[str, ...]


def recall_name(k: int) -> str:
    """The metric key of Recall@k (`R@5`), as `score_rankings` names its recalls."""
    return f"R@{k}"


def score_with_misses(
    rankings: Sequence[Sequence[str]], queries: Sequence[LabeledQuery], k: int
) -> tuple[Scores, list[Miss]]:
    """`score_rankings` plus mean Recall@k for this k (over the same labelled queries), and the queries that missed
    at k."""
    scores = score_rankings(rankings, queries)
    scores[recall_name(k)] = sum(recall_at(r, q.relevant, k) for r, q in zip(rankings, queries, strict=True)) / (
        scores.queries or 1
    )
    misses = []
    for ranked, q in zip(rankings, queries, strict=True):
        missing = tuple(name for name in q.relevant if name not in ranked[:k])
        if missing:
            misses.append(Miss(q, missing, tuple(ranked[:k])))
    return scores, misses
