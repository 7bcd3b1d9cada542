"""Hybrid backend: bm25 and vector rankings fused by a score-normalised convex combination.

Equal-weight reciprocal-rank fusion throws the scores away: a tool bm25 ranks first by a wide
margin counts as much as one it barely ranks first. Here both rankers fill one candidate pool
(their top `pool` tools each), every candidate gets its exact dense similarity, and

    score = w * dense + (1 - w) * top_dense * bm25 / top_bm25

bm25 is scaled relative to its best hit (its raw scale depends on query length and catalog)
and mapped onto the dense scale of this query, so a strong lexical match carries the weight of
the best semantic match and weak ones fade. Candidates bm25 did not return get no bm25 share.

A multi-part request ("Find X. Also do Y") is embedded clause by clause on the dense side
(toolsearch.clauses). With `clause_lexical` > 0, bm25 also searches each clause on its own: a
tool's bm25 share is the larger of its whole-query score and `clause_lexical` times its score for
a clause, each relative to that list's best hit, so the words of one need are not drowned by the
others'. Off by default: its leave-one-set-out figures are in benchmarks/results/ranking_loso.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from .._errors import BackendError, IndexFormatError
from ..clauses import query_clauses
from ..lucene import looks_like_lucene
from ..results import Hit, Ranking
from ..tools import Tool
from . import bm25 as bm25_module
from . import vector as vector_module
from ._base import Backend

__all__ = ["HybridBackend", "create", "load", "fuse", "model_dense_weight", "DEFAULT_CLAUSE_LEXICAL",
           "DEFAULT_DENSE_WEIGHT", "DEFAULT_POOL"]

FORMAT_VERSION = 1
META_FILE = "hybrid.json"
BM25_DIR = "bm25"
VECTOR_DIR = "vector"
# Tuned once on bfcl / metatool / seal_tools together (see benchmarks/) for the stock model; a model
# trained for tools carries its own, chosen leave-one-set-out (scripts/tools_model_loso.py).
DEFAULT_DENSE_WEIGHT = 0.65
DEFAULT_POOL = 50
# Weight of a clause's own bm25 list (0 = the whole query only); chosen leave-one-set-out by
# scripts/ranking_loso.py, where the held-out sets did not show a gain, so it stays off.
DEFAULT_CLAUSE_LEXICAL = 0.0

# A hybrid answer by meaning alone where bm25's AND / NOT let no tool through, by (both, AND): see search.
_OPERATOR_NOTES = {
    (True, True): "no tool has every word the AND asks for without a word the NOT excludes; these are the closest "
                  "tools by meaning, the AND and NOT not applied",
    (False, True): "no tool has every word the AND asks for; these are the closest tools by meaning, the AND not "
                   "applied",
    (False, False): "the NOT excluded every tool that matched the words; these are the closest tools by meaning, "
                    "the NOT not applied",
}


class HybridBackend:
    """bm25 (tantivy) and vector (faiss) over the same tools, searched together and fused."""

    name = "hybrid"

    def __init__(
        self,
        lexical: Backend,
        dense: vector_module.VectorBackend,
        *,
        dense_weight: float | None = None,
        pool: int = DEFAULT_POOL,
        clause_lexical: float = DEFAULT_CLAUSE_LEXICAL,
    ) -> None:
        if dense_weight is None:
            dense_weight = model_dense_weight(dense.embedder)
        if isinstance(dense_weight, bool) or not isinstance(dense_weight, int | float) or not 0 <= dense_weight <= 1:
            raise BackendError(f"dense_weight must be a number between 0 and 1, got {dense_weight!r}")
        if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
            raise BackendError(f"pool must be a positive integer, got {pool!r}")
        if (
            isinstance(clause_lexical, bool)
            or not isinstance(clause_lexical, int | float)
            or not 0 <= clause_lexical <= 1
        ):
            raise BackendError(f"clause_lexical must be a number between 0 and 1, got {clause_lexical!r}")
        self.lexical = lexical
        self.dense = dense
        self.dense_weight = float(dense_weight)
        self.pool = pool
        self.clause_lexical = float(clause_lexical)

    def forget_queries(self) -> None:
        """Drop the dense half's embeddings of past queries (see VectorBackend.forget_queries)."""
        self.dense.forget_queries()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.dense.model_id}
        if self.dense_weight != DEFAULT_DENSE_WEIGHT:
            out["dense_weight"] = self.dense_weight
        if self.pool != DEFAULT_POOL:
            out["pool"] = self.pool
        if self.clause_lexical != DEFAULT_CLAUSE_LEXICAL:
            out["clause_lexical"] = self.clause_lexical
        vector = {k: v for k, v in self.dense.describe().items() if k != "model"}
        if vector:
            out["vector"] = vector
        out["bm25"] = self.lexical.describe()
        return out

    def warm(self) -> None:
        """Load the embedding model now (it otherwise loads on the first search or add)."""
        self.dense.warm()

    def add(self, tools: Sequence[Tool]) -> None:
        # A failure leaves both halves as they were. Embedding (the slow half, and the likelier to fail) runs while
        # nothing has changed; bm25 rolls a failed change back whole; inserting the vectors is in memory.
        if not tools:
            return
        names, vectors = self.dense.embed_tools(tools)
        self.lexical.add(tools)
        self.dense.add_vectors(names, vectors)

    def remove(self, names: Collection[str]) -> None:
        self.lexical.remove(names)  # the half that can fail (its files) first; removing vectors is in memory
        self.dense.remove(names)

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        depth = max(self.pool, k)
        lexical = self.lexical.search(query, depth, allowed)
        lexical_scores = {h.name: h.score for h in lexical.hits}
        lucene = looks_like_lucene(query)
        # The constraints of a query bm25 searched as Lucene; None for plain words (a syntax it fell back from too).
        # `partial`: a word written in part or approximately (`weath*`, `wether~`), which only bm25 reads. (bm25's
        # reading of the search above: it keeps its parse of the query, so nothing is parsed again.)
        reading = bm25_module.lucene_reading(query)
        parsed, partial = (None, False) if reading is None else reading
        instead: str | None = None  # the note on the dense half's answer where bm25's operators let no tool through
        if parsed is not None and not lexical.hits:
            constraints = parsed
            searched = bm25_module.NO_MATCH_NOTE in lexical.notes  # (not so for a query that only excludes words)
            if constraints & bm25_module.STRICT_CONSTRAINTS or (constraints and not searched):
                # `+must`, `-not` or `name:`, symbols written on purpose, that let no tool through: the dense half
                # must not bring them back.
                return Ranking([], tuple(lexical.notes))
            if constraints:
                # Only `AND` / `NOT`, which a request in prose holds too ("weather for Paris AND London"): answer by
                # meaning, as for a plain request, and say why.
                instead = _OPERATOR_NOTES[constraints >= {"and", "not"}, "and" in constraints]
        if self.clause_lexical > 0 and not lucene:
            lexical_scores = self._with_clauses(query, lexical_scores, depth, allowed)
        dense = self.dense.candidates(query, depth, allowed, include=lexical_scores)
        if (parsed or partial) and lexical.hits:
            # Operators such as +must, -not and name: are constraints: keep only tools bm25 let through. Whatever
            # bm25 notes about the query (a boost lowered) leaves them constraints. So is a word only bm25 reads
            # (`weath*`: the dense half's nearest tools to that text are noise). A Lucene query with neither
            # (`calendar email^10`) constrains nothing: like plain words (and bm25's fallback from a syntax it could
            # not parse), it is answered by both halves.
            dense = {n: s for n, s in dense.items() if n in lexical_scores}
        fused = fuse(dense, lexical_scores, self.dense_weight)
        hits = [Hit(n, s) for n, s in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
        notes = lexical.notes if lexical.hits or not hits else ()
        if instead is not None and hits:
            notes = (*(n for n in lexical.notes if n != bm25_module.NO_MATCH_NOTE), instead)
        return Ranking(hits, tuple(notes))

    def _with_clauses(
        self, query: str, whole: dict[str, float], depth: int, allowed: frozenset[str] | None
    ) -> dict[str, float]:
        """bm25 shares relative to each list's best hit: the whole query's, or a clause's times clause_lexical."""
        clauses = query_clauses(query)
        if not clauses:
            return whole
        combined = _relative(whole, 1.0)
        for clause in clauses:
            hits = self.lexical.search(clause, depth, allowed).hits
            for name, share in _relative({h.name: h.score for h in hits}, self.clause_lexical).items():
                if share > combined.get(name, 0.0):
                    combined[name] = share
        return combined

    def saved_in(self, folder: Path) -> None:
        """See `Bm25Backend.saved_in`: only the bm25 half reads its files again after loading."""
        moved = getattr(self.lexical, "saved_in", None)
        if callable(moved):
            moved(folder / BM25_DIR)

    def save(self, folder: Path) -> None:
        (folder / BM25_DIR).mkdir()
        (folder / VECTOR_DIR).mkdir()
        self.lexical.save(folder / BM25_DIR)
        self.dense.save(folder / VECTOR_DIR)
        meta = {"format": FORMAT_VERSION, "model": self.dense.model_id}
        (folder / META_FILE).write_text(json.dumps(meta) + "\n")


def model_dense_weight(embedder: Any) -> float:
    """The dense weight a model was chosen with (a model trained for tools carries it on its card), else the
    stock model's: every backend that fuses (hybrid, postgres) takes it from here."""
    weight = getattr(embedder, "hybrid_dense_weight", None)
    return float(weight) if weight else DEFAULT_DENSE_WEIGHT


def fuse(dense: dict[str, float], lexical: dict[str, float], dense_weight: float) -> dict[str, float]:
    """Convex combination of dense similarity and bm25 scaled to the best dense similarity.

    Every score it returns is finite: a dense score that is not is left out, an infinite bm25 score counts as
    the best (and the finite ones as nothing beside it), a NaN one as no bm25 match.
    """
    dense = {n: s for n, s in dense.items() if math.isfinite(s)}
    if not dense:
        return {}
    top_dense = max(dense.values())
    weight = (1.0 - dense_weight) * max(top_dense, 0.0)
    if any(s == math.inf for s in lexical.values()):
        return {n: dense_weight * s + (weight if lexical.get(n) == math.inf else 0.0) for n, s in dense.items()}
    lexical = {n: s for n, s in lexical.items() if math.isfinite(s)}
    top_lexical = max(lexical.values(), default=0.0)
    scale = weight / top_lexical if top_lexical > 0 else 0.0
    return {n: dense_weight * s + scale * lexical.get(n, 0.0) for n, s in dense.items()}


def _relative(scores: dict[str, float], weight: float) -> dict[str, float]:
    top = max(scores.values(), default=0.0)
    return {n: weight * s / top for n, s in scores.items()} if top > 0 else {}


_OWN = ("dense_weight", "pool", "clause_lexical")
_VECTOR = vector_module.OPTIONS  # the vector half's options may be passed at the top level too


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    bm25 = options.pop("bm25", None) or {}
    vector = dict(options.pop("vector", None) or {})
    own = {k: options.pop(k) for k in _OWN if k in options}
    for key in _VECTOR:
        if key in options:
            vector[key] = options.pop(key)
    if options:
        raise BackendError(
            f"unknown hybrid backend option(s) {', '.join(sorted(options))}; use "
            f"{', '.join((*_OWN, *_VECTOR))}, bm25={{...}} or vector={{...}}"
        )
    if not isinstance(bm25, dict):
        raise BackendError("the hybrid option bm25 must be a dict of bm25 backend options")
    return own, bm25, vector


def create(**options: Any) -> HybridBackend:
    """An empty hybrid backend; takes the vector options (model, embedder, ...) and bm25={...}."""
    own, bm25, vector = _split(dict(options))
    return HybridBackend(bm25_module.create(**bm25), vector_module.create(**vector), **own)


def load(folder: Path, tools: Sequence[Tool], **options: Any) -> HybridBackend:
    """Open both halves written by `save`; the embedding model must match the stored one."""
    folder = Path(folder)
    if not (folder / META_FILE).is_file():
        raise IndexFormatError(f"{folder}: {META_FILE} is missing; rebuild the index")
    own, bm25, vector = _split(dict(options))
    lexical = bm25_module.load(folder / BM25_DIR, tools, **bm25)
    dense = vector_module.load(folder / VECTOR_DIR, tools, **vector)
    return HybridBackend(lexical, dense, **own)
