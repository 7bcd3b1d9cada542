"""A ranking signal learned from the usage log: past queries like this one vote for the tools they led to.

For a new query the log's nearest past queries are found by TF-IDF cosine over their words (an
inverted index from word to past queries, so the cost grows with the postings of the query's
words, not with the log). Each neighbour at similarity s votes s**2 times its success count for
the tool it led to. Votes become a learned probability with a Dirichlet-style prior,

    p(tool) = votes(tool) / (sum of all votes + prior)

so a handful of weak or noisy votes stays small, and are added to the backend's score scaled to
its best hit:

    score = backend / top_backend + weight * p(tool)

A learned certainty of 1 is worth as much as the backend's best match. The candidates are the
backend's top `depth` tools plus the voted tools; everything is restricted to what the caller
may see. With no neighbour the backend's own result is returned unchanged.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from .index import ToolIndex, validate_k, validate_query
from .results import Hit, SearchResult
from .usage import UsageLog

__all__ = ["LearnedRanker", "LearningIndex", "Signal"]

# The same for every catalog (see docs/learning.md for why each value).
DEFAULT_WEIGHT = 1.0
DEFAULT_PRIOR = 1.0
DEFAULT_MIN_SIMILARITY = 0.1
DEFAULT_NEIGHBOURS = 32
DEFAULT_DEPTH = 50
DEFAULT_REFRESH_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The log compiled for lookups; immutable, replaced whole when the log has changed."""

    version: int
    postings: dict[str, np.ndarray]  # term -> ids of the distinct past queries holding it
    idf_sq: dict[str, float]
    unknown_idf_sq: float
    norms: np.ndarray  # per distinct past query
    votes: list[tuple[tuple[str, ...], tuple[float, ...]]]  # per past query: tools and success counts

    @property
    def empty(self) -> bool:
        return not self.votes


def _compile(log: UsageLog) -> _Snapshot:
    version = log.version
    keys: dict[tuple[str, ...], dict[str, float]] = {}
    for entry in log.entries():
        tools = keys.setdefault(entry.terms, {})
        tools[entry.called] = tools.get(entry.called, 0.0) + 1.0
    lists: dict[str, list[int]] = {}
    for key_id, terms in enumerate(keys):
        for term in terms:
            lists.setdefault(term, []).append(key_id)
    n = len(keys)
    idf_sq = {t: math.log(1.0 + n / len(ids)) ** 2 for t, ids in lists.items()}
    norms = np.array([math.sqrt(sum(idf_sq[t] for t in terms)) for terms in keys], dtype=np.float64)
    votes = [(tuple(tools), tuple(tools.values())) for tools in keys.values()]
    postings = {t: np.asarray(ids, dtype=np.int32) for t, ids in lists.items()}
    return _Snapshot(version, postings, idf_sq, math.log(1.0 + n) ** 2 if n else 0.0, norms, votes)


@dataclass(frozen=True, slots=True)
class Signal:
    """What the log says about one query: each voted tool's share of the votes, and how much to trust them."""

    shares: dict[str, float]  # votes(tool) / all votes, for visible tools with a vote
    confidence: float  # all votes / (all votes + prior), in [0, 1)

    def __bool__(self) -> bool:
        return bool(self.shares)


class LearnedRanker:
    """Learned tool probabilities for a query, from a UsageLog (compiled lazily, refreshed as it grows).

    `refresh_seconds`: a changed log is recompiled at most this often (0 = on every change), so a
    busy log does not recompile on every search.
    """

    def __init__(
        self,
        log: UsageLog,
        *,
        weight: float = DEFAULT_WEIGHT,
        prior: float = DEFAULT_PRIOR,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        neighbours: int = DEFAULT_NEIGHBOURS,
        depth: int = DEFAULT_DEPTH,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ) -> None:
        self.log = log
        self.weight = weight
        self.prior = prior
        self.min_similarity = min_similarity
        self.neighbours = neighbours
        self.depth = depth
        self.refresh_seconds = refresh_seconds
        self._snapshot: _Snapshot | None = None
        self._compiled_at = 0.0
        self._lock = threading.Lock()

    def _stale(self, snap: _Snapshot | None) -> bool:
        if snap is None:
            return True
        return snap.version != self.log.version and time.monotonic() - self._compiled_at >= self.refresh_seconds

    def snapshot(self) -> _Snapshot:
        """The compiled log, recompiled first when the log changed (at most every refresh_seconds)."""
        snap = self._snapshot
        if snap is None or self._stale(snap):
            with self._lock:  # one thread compiles; the others wait and use its result
                snap = self._snapshot
                if snap is None or self._stale(snap):
                    snap = _compile(self.log)
                    self._snapshot, self._compiled_at = snap, time.monotonic()
        return snap

    def signal(self, query: str, visible: Collection[str] | None = None) -> Signal:
        """The learned signal for tools in `visible` (None = any); empty without evidence."""
        snap = self.snapshot()
        if snap.empty:
            return Signal({}, 0.0)
        terms = self.log.terms(query)
        found = [t for t in terms if t in snap.postings]
        if not found:
            return Signal({}, 0.0)
        q_norm = math.sqrt(sum(snap.idf_sq.get(t, snap.unknown_idf_sq) for t in terms))
        ids = np.concatenate([snap.postings[t] for t in found])
        weights = np.concatenate([np.full(len(snap.postings[t]), snap.idf_sq[t]) for t in found])
        dots = np.bincount(ids, weights=weights)
        touched = np.flatnonzero(dots)
        sims = dots[touched] / (q_norm * snap.norms[touched])
        close = sims >= self.min_similarity
        touched, sims = touched[close], sims[close]
        if len(touched) > self.neighbours:
            top = np.argpartition(-sims, self.neighbours - 1)[: self.neighbours]
            touched, sims = touched[top], sims[top]
        votes: dict[str, float] = {}
        total = 0.0
        for key_id, sim in zip(touched.tolist(), sims.tolist(), strict=True):
            tools, counts = snap.votes[key_id]
            strength = sim * sim
            for tool, count in zip(tools, counts, strict=True):
                vote = strength * count
                total += vote  # votes for tools the caller cannot see still count as evidence
                if visible is None or tool in visible:
                    votes[tool] = votes.get(tool, 0.0) + vote
        if not votes:
            return Signal({}, 0.0)
        return Signal({tool: v / total for tool, v in votes.items()}, total / (total + self.prior))


class LearningIndex(ToolIndex):
    """A ToolIndex whose search adds the learned signal of a usage log; use it in place of `index`.

    It shares the index's catalog and backend (no copy, no rebuild). With an empty log, with
    `enabled` False, or when no past query is similar, `search` returns exactly what the plain
    index returns. Session filters apply to learned tools as to every other tool.
    """

    def __init__(self, index: ToolIndex, log: UsageLog | LearnedRanker, *, enabled: bool = True) -> None:
        super().__init__(index.catalog, index.backend)
        self.ranker = log if isinstance(log, LearnedRanker) else LearnedRanker(log)
        self.enabled = enabled

    @property
    def log(self) -> UsageLog:
        return self.ranker.log

    def __repr__(self) -> str:
        return f"LearningIndex({self.backend_name}, {len(self)} tools, {len(self.log)} usage entries)"

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        allowed: Collection[str] | None = None,
        namespaces: Collection[str] | None = None,
    ) -> SearchResult:
        if not self.enabled:
            return super().search(query, k, allowed=allowed, namespaces=namespaces)
        start = time.perf_counter()
        text = validate_query(query)
        k = validate_k(k)
        names = self.resolve_filter(allowed, namespaces)
        catalog = self.catalog
        signal = self.ranker.signal(text, names)
        learned = {t: p for t, p in signal.shares.items() if t in catalog}
        if not learned:
            return super().search(text, k, allowed=allowed, namespaces=namespaces)
        base = super().search(text, max(self.ranker.depth, k), allowed=allowed, namespaces=namespaces)
        top = max((h.score for h in base.hits), default=0.0)
        trust = signal.confidence
        scores = {h.name: (1.0 - trust) * (h.score / top if top > 0 else 0.0) for h in base.hits}
        for tool, share in learned.items():
            scores[tool] = scores.get(tool, 0.0) + self.ranker.weight * trust * share
        order = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        hits = tuple(Hit(n, s) for n, s in order)
        elapsed = (time.perf_counter() - start) * 1000
        return SearchResult(text, hits, tuple(catalog[h.name] for h in hits), self.backend_name, elapsed, base.notes)
