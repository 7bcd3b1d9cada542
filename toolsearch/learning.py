"""A ranking signal learned from the usage log: past queries like this one vote for the tools they led to,
trusted as far as the log shows the votes beat the backend.

For a new query the log's nearest past queries are found by TF-IDF cosine over their words (an
inverted index from word to distinct past queries, so the cost grows with the postings of the
query's words, not with the log). Each neighbour at similarity s >= `min_similarity` (the
`neighbours` closest) votes s**2 times its success count for each tool it led to. A voter (`UsageEntry.by`,
a salted digest of the conversation) counts once per request and tool, and for a voter with several requests
that led to one tool only its nearest such request votes for it: however often one conversation repeats or
rewords a search and a call, it adds at most one vote (that of an identical past request) to a tool for any
query, while a long-lived conversation keeps a full vote for each of its different requests. Its searches
count once in all in the calibration below. Entries without a voter count each. The votes give
each tool a share, and the evidence a confidence against a prior, the evidence needed to outweigh
the backend (the vote's exponent is 2 unless the calibration below finds 1 better):

    share(tool) = votes(tool) / V        confidence c = V / (V + prior)        (V = all votes)

The result is a mixture of the two estimates, the backend's rank (the DCG discount of its
position, 1 for its first hit) and the learned share, weighted by that confidence:

    score = (1 - c) / log2(rank + 2) + c * share(tool)

How large the prior should be depends on how often the backend is right on this catalog, which
only the log can tell: every entry keeps the backend's ranked list for its search (`shown`) beside
the tool then called. With learning on, that is the list before learning re-ordered it
(`LearnedSearchResult.ranked`, which the recorder records): the learned list would say the backend
already ranks the called tool first, and learning would turn itself off. So the prior is
calibrated on the log itself, by leave-one-out: for a sample of past searches, the votes of
every *other* past query are mixed with what that search showed at each prior of a fixed grid
and with votes of s**2 or s, and the pair whose mixture ranked the called tools best (nDCG@10)
is used; "never trust the votes" is on the grid, and ties go to s**2 and the larger prior, so a
log whose votes do not beat the backend turns learning off. A log with fewer than
`MIN_CALIBRATION` searches with a shown list keeps the fixed `DEFAULT_PRIOR`. Only words and tool
names are compared, so hashed logs calibrate as well as readable ones.

The lists are the backend's as it ranked then. When its ranking changes (a tuned encoder, another
model), `shown_now` re-ranks the requests a raw log keeps and `UsageLog.reshown` puts the new lists
in their place (`toolsearch tune` does both for the log beside the index it tunes in place;
`toolsearch usage refresh INDEX` for any other): calibrated against a weaker backend's lists, the
log's votes look better than they are, and learning over a tuned encoder fell below that encoder
alone (bfcl, distinct requests: 0.880 against 0.883 nDCG@10; 0.886 with the lists re-ranked,
benchmarks/results/tune.md).

So little or dissimilar evidence leaves the backend's order almost untouched, a few wrong calls
among many right ones take only their share, and with no neighbour the backend's own result is
returned unchanged. The candidates are the backend's k hits plus the voted tools, restricted to
what the caller may see.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from . import tracing
from ._errors import InvalidArgumentError, InvalidQueryError, wrong_type
from .backends import Backend
from .catalog import Catalog
from .confidence import request_notes
from .index import MAX_K, ToolIndex, validate_k, validate_query
from .results import Hit, SearchResult
from .tools import Tool
from .usage import UsageLog

__all__ = [
    "Calibration", "LearnedRanker", "LearnedSearchResult", "LearningIndex", "Signal", "rank_score", "shown_now",
]

# The same for every catalog; chosen by what each means, not fitted to a data set.
DEFAULT_WEIGHT = 1.0  # a plain mixture: full confidence in a share of 1 equals the backend's best hit
DEFAULT_PRIOR = 1.0  # the evidence of one identical past query makes the confidence 1/2 (uncalibrated logs)
# Priors the calibration chooses from: factors of 2 from 1/16 to 16 around the default, and never.
PRIOR_GRID: tuple[float, ...] = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, math.inf)
# The note a search gets when no tool's words matched it and every hit is learned from use.
LEARNED_ONLY = "no tool's words matched these; they were found from what earlier requests like this one called"
MIN_CALIBRATION = 50  # past searches with a shown list: fewer cannot tell priors a factor of 2 apart
CALIBRATION_SAMPLE = 1_000  # past searches left out one at a time; bounds the compile cost
# A voter's searches in that sample: they count once in all however many there are, and more of one voter's would
# only push other voters' searches out of the sample.
CALIBRATION_PER_VOTER = 100
CALIBRATION_TIE = 0.001  # nDCG@10 gains below this are noise: the larger prior wins
DEFAULT_MIN_SIMILARITY = 0.1  # below this, two queries share only incidental words
DEFAULT_NEIGHBOURS = 32  # k of the k nearest past queries; bounds the work per search
DEFAULT_EXPONENT = 2.0  # a vote is similarity**2: a near-identical query outweighs several loosely similar ones
# Exponents the calibration also tries: 1 lets many loosely similar past requests (distinct tasks that
# share a tool's vocabulary) add up; the default first, so it wins ties.
EXPONENT_GRID: tuple[float, ...] = (DEFAULT_EXPONENT, 1.0)
DEFAULT_REFRESH_SECONDS = 5.0
STOP_SHARE = 0.01
STOP_MIN_QUERIES = 1_000  # small logs keep every word: there, nothing is long and every word counts


@dataclass(frozen=True, slots=True)
class Calibration:
    """How a log's prior and vote exponent were chosen: the past searches left out one at a time, and
    the nDCG@10 of the called tools in the mixture at each (exponent, prior) of EXPONENT_GRID x
    PRIOR_GRID (prior math.inf: the backend alone)."""

    searches: int
    ndcg: dict[tuple[float, float], float]
    exponent: float
    prior: float


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The log compiled for lookups; immutable, replaced whole when the log has changed."""

    version: int
    postings: dict[str, np.ndarray]  # term -> ids of the distinct past queries holding it
    weights: dict[str, np.ndarray]  # term -> its idf**2 / the norm of each of those past queries
    stop: frozenset[str]  # terms too common to be evidence (see STOP_SHARE)
    idf_sq: dict[str, float]
    unknown_idf_sq: float
    votes: list[tuple[tuple[str, ...], tuple[float, ...]]]  # per past query: tools and success counts
    # per past query: the tools (numbers into `several_tools`) and voters of voters with several requests for that
    # tool, whose nearest one votes for it (arrays: a lookup takes each voter's strongest vote in one numpy pass)
    several: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    several_tools: tuple[str, ...] = ()
    calibration: Calibration | None = None  # None: too few past searches with a shown list

    @property
    def empty(self) -> bool:
        return not self.votes

    @property
    def prior(self) -> float:
        return DEFAULT_PRIOR if self.calibration is None else self.calibration.prior

    @property
    def exponent(self) -> float:
        return DEFAULT_EXPONENT if self.calibration is None else self.calibration.exponent


def _compile(log: UsageLog, *, neighbours: int, min_similarity: float, weight: float) -> _Snapshot:
    version = log.version
    keys: dict[tuple[str, ...], dict[str, float]] = {}
    # One past search per (words, shown list): the entries of one search that led to several calls. With it, the
    # voter of its first entry (None: no voter), whose searches count once in all in the calibration.
    searches: dict[tuple[tuple[str, ...], tuple[str, ...]], set[str]] = {}
    owners: dict[tuple[tuple[str, ...], tuple[str, ...]], str | None] = {}
    # A voter counts once per request (words) and tool: a repeat of one search and call is one vote. A voter whose
    # different requests led to one tool votes for it only through the nearest of them (`_votes` takes the largest
    # of its votes): summed, one conversation could outvote every other user for everyone's similar requests by
    # rewording its search each time. Those are kept apart per past query (`several`); a voter with one request
    # for a tool (most of them) is a plain count. Entries without a voter (older logs, `UsageLog.add` without
    # `by`) count each, as they always did.
    requests: dict[tuple[str, str], dict[tuple[str, ...], None]] = {}  # (voter, tool) -> its distinct requests
    for entry in log.entries():
        tools = keys.setdefault(entry.terms, {})
        # setdefault either way: a tool's place among its request's votes stays where it first appeared
        tools[entry.called] = tools.get(entry.called, 0.0) + (1.0 if entry.by is None else 0.0)
        if entry.by is not None:
            requests.setdefault((entry.by, entry.called), {}).setdefault(entry.terms)
        if entry.shown:
            # a tool listed twice (an imported entry) is one place in the list: the rest of it stands as shown
            search = (entry.terms, tuple(dict.fromkeys(entry.shown)))
            searches.setdefault(search, set()).add(entry.called)
            owners.setdefault(search, entry.by)
    several: dict[tuple[str, ...], list[tuple[str, int]]] = {}  # past query -> (tool, voter number)
    voters: dict[str, int] = {}
    for (by, tool), made in requests.items():
        if len(made) == 1:
            keys[next(iter(made))][tool] += 1.0
            continue
        voter = voters.setdefault(by, len(voters))
        for terms in made:
            several.setdefault(terms, []).append((tool, voter))
    lists: dict[str, list[int]] = {}
    for key_id, terms in enumerate(keys):
        for term in terms:
            lists.setdefault(term, []).append(key_id)
    n = len(keys)
    # A word in more than STOP_SHARE of a large log is a stop word here: its idf is below ln 101, it
    # says little about the tool, and its long postings list would dominate the lookup cost. Below
    # 100,000 distinct queries the floor of 1,000 applies, so the replay benchmark's logs are unaffected.
    limit = max(STOP_MIN_QUERIES, STOP_SHARE * n)
    stop = frozenset(t for t, ids in lists.items() if len(ids) > limit)
    idf_sq = {t: math.log(1.0 + n / len(ids)) ** 2 for t, ids in lists.items() if t not in stop}
    norms = np.array(
        [math.sqrt(sum(idf_sq[t] for t in terms if t not in stop)) or 1.0 for terms in keys], dtype=np.float64
    )
    votes = [(tuple(tools), tuple(tools.values())) for tools in keys.values()]
    tool_numbers: dict[str, int] = {}
    split: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for key_id, terms in enumerate(keys):
        if terms in several:
            pairs = several[terms]
            split[key_id] = (
                np.array([tool_numbers.setdefault(tool, len(tool_numbers)) for tool, _ in pairs], dtype=np.int64),
                np.array([voter for _, voter in pairs], dtype=np.int64),
            )
    postings = {t: np.asarray(ids, dtype=np.int32) for t, ids in lists.items() if t not in stop}
    # The past query's norm folded into each posting: a lookup sums these and divides once by the query's norm.
    weights = {t: idf_sq[t] / norms[ids] for t, ids in postings.items()}
    snap = _Snapshot(version, postings, weights, stop, idf_sq, math.log(1.0 + n) ** 2 if n else 0.0, votes, split,
                     tuple(tool_numbers))
    sample = _calibration_sample(searches, {s: -1 if o is None else voters.setdefault(o, len(voters))
                                            for s, o in owners.items()})
    if len(sample) < MIN_CALIBRATION:
        return snap
    key_ids = {terms: i for i, terms in enumerate(keys)}
    calibration = _calibrate(snap, sample, key_ids, neighbours=neighbours, min_similarity=min_similarity,
                             weight=weight)
    return replace(snap, calibration=calibration)


# A search of the calibration sample: its words, its shown list, the tools called after it, its weight and its
# voter's number (-1: none).
_Sampled = tuple[tuple[str, ...], tuple[str, ...], set[str], float, int]
# Voters a sample needs before each search is scored by the other voters' votes alone (see `_calibrate`).
MIN_CALIBRATION_VOTERS = 5


def _calibration_sample(
    searches: dict[tuple[tuple[str, ...], tuple[str, ...]], set[str]],
    owners: dict[tuple[tuple[str, ...], tuple[str, ...]], int],
) -> list[_Sampled]:
    """The newest CALIBRATION_SAMPLE searches (the backend as it ranks now), at most CALIBRATION_PER_VOTER of each
    voter while other voters' searches are left (a voter's others fill the room left), each weighted so that a
    voter's searches count once in all (a search without a voter counts once).

    By number of searches, one conversation making many reworded searches would make the sample its own, and the
    calibration would measure how well its votes rank its own calls: trust them, for everyone."""
    newest = list(reversed(searches.items()))
    chosen: list[int] = []  # positions in `newest`
    per_voter: dict[int, int] = {}
    passed: list[int] = []
    for i, (search, _) in enumerate(newest):
        if len(chosen) >= CALIBRATION_SAMPLE:
            break
        owner = owners[search]
        if owner >= 0:
            if per_voter.get(owner, 0) >= CALIBRATION_PER_VOTER:
                passed.append(i)
                continue
            per_voter[owner] = per_voter.get(owner, 0) + 1
        chosen.append(i)
    # Room left (a log of few voters, one long-lived session): the searches passed over fill it, newest first.
    for i in passed[: CALIBRATION_SAMPLE - len(chosen)]:
        chosen.append(i)
        owner = owners[newest[i][0]]
        per_voter[owner] = per_voter[owner] + 1
    sample: list[_Sampled] = []
    for i in sorted(chosen, reverse=True):  # oldest first, as the log holds them
        (terms, shown), called = newest[i]
        owner = owners[(terms, shown)]
        sample.append((terms, shown, called, 1.0 if owner < 0 else 1.0 / per_voter[owner], owner))
    return sample


def _calibrate(
    snap: _Snapshot,
    sample: list[_Sampled],
    key_ids: dict[tuple[str, ...], int],
    *,
    neighbours: int,
    min_similarity: float,
    weight: float,
) -> Calibration:
    """The prior of PRIOR_GRID under which the votes of the other past queries, mixed with what each search of
    `sample` (`_calibration_sample`) showed, ranked its called tools best (see the module doc).

    With at least MIN_CALIBRATION_VOTERS voters in the sample, a search is scored by the votes of the other voters
    alone: how well other conversations' votes predict a new conversation's calls, which the votes are used for.
    Left to its own votes, one conversation's other rewordings of a request would predict its calls, and earn the
    votes everyone's trust. A log of fewer voters (one long-lived session) leaves out only the search's own words.
    """

    grid = [(exponent, prior) for exponent in EXPONENT_GRID for prior in sorted(PRIOR_GRID, reverse=True)]
    totals = dict.fromkeys(grid, 0.0)
    discounts = 1.0 / np.log2(np.arange(2, 12))  # the DCG discount of ranks 0..9
    by_voter = len({voter for *_, voter in sample if voter >= 0}) >= MIN_CALIBRATION_VOTERS
    for terms, shown, called, worth, voter in sample:
        depth = min(len(shown), 10)
        ideal = float(discounts[: min(len(called), 10)].sum())
        for exponent in EXPONENT_GRID:
            # Leaving out the search's own words leaves out its repeats too: the estimate errs toward the backend.
            votes, total = _votes(snap, terms, None, neighbours, min_similarity, exponent, exclude=key_ids[terms],
                                  exclude_voter=voter if by_voter else -1)
            # `_mix` for every prior at once: candidates in name order, so a stable sort breaks ties as it does.
            names = sorted({*shown, *votes})
            position = {name: rank for rank, name in enumerate(shown)}
            base = np.array([rank_score(position[n]) if n in position else 0.0 for n in names])
            share = np.array([votes.get(n, 0.0) / total if total else 0.0 for n in names])
            hit = np.array([n in called for n in names], dtype=np.float64)
            confidence = np.array([total / (total + p) if votes and p != math.inf else 0.0 for p in PRIOR_GRID])
            scores = (1.0 - confidence)[:, None] * base + (weight * confidence)[:, None] * share
            top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
            gains = hit[top] @ discounts[:depth] / ideal
            for prior, gain in zip(PRIOR_GRID, gains.tolist(), strict=True):
                totals[exponent, prior] += worth * gain
    weight_sum = sum(worth for _, _, _, worth, _ in sample)  # the voters (and searches without one) it holds
    ndcg = {key: total / weight_sum for key, total in totals.items()}
    best = max(ndcg.values())
    # The first within CALIBRATION_TIE of the best, in the grid's order (the default exponent, then the
    # largest prior): trust the log no further than it has earned.
    exponent, prior = next(key for key in grid if ndcg[key] >= best - CALIBRATION_TIE)
    return Calibration(len(sample), ndcg, exponent, prior)


def _votes(
    snap: _Snapshot,
    terms: Iterable[str],
    visible: Collection[str] | None,
    neighbours: int,
    min_similarity: float,
    exponent: float,
    *,
    exclude: int = -1,
    exclude_voter: int = -1,
) -> tuple[dict[str, float], float]:
    """The votes of the nearest past queries (but `exclude`, and the several-request votes of `exclude_voter`) for
    visible tools, and all votes cast."""
    terms = [t for t in terms if t not in snap.stop]
    found = [t for t in terms if t in snap.postings]
    if not found:
        return {}, 0.0
    q_norm = math.sqrt(sum(snap.idf_sq.get(t, snap.unknown_idf_sq) for t in terms))
    if len(found) == 1:
        ids, weights = snap.postings[found[0]], snap.weights[found[0]]
    else:
        ids = np.concatenate([snap.postings[t] for t in found])
        weights = np.concatenate([snap.weights[t] for t in found])
    # One pass of bincount over every distinct past query is cheaper than sorting the touched
    # ids (np.unique): at 80,000 past queries it costs ~0.1 ms where the sort cost ~1 ms.
    dots = np.bincount(ids, weights=weights, minlength=len(snap.votes))
    if exclude >= 0:
        dots[exclude] = 0.0
    floor = min_similarity * q_norm
    touched = np.flatnonzero(dots >= floor) if floor > 0 else np.flatnonzero(dots)
    sims = dots[touched] / q_norm
    if len(touched) > neighbours:
        top = np.argpartition(-sims, neighbours - 1)[:neighbours]
        touched, sims = touched[top], sims[top]
    votes: dict[str, float] = {}
    total = 0.0
    kept: list[tuple[np.ndarray, np.ndarray, float]] = []  # several-request votes: tools, voters, strength
    for key_id, sim in zip(touched.tolist(), sims.tolist(), strict=True):
        tools, counts = snap.votes[key_id]
        strength = sim * sim if exponent == 2.0 else sim**exponent
        for tool, count in zip(tools, counts, strict=True):
            vote = strength * count
            total += vote  # votes for tools the caller cannot see still count as evidence
            if visible is None or tool in visible:
                votes[tool] = votes.get(tool, 0.0) + vote
        if key_id in snap.several:
            kept.append((*snap.several[key_id], strength))
    if kept:
        for number, vote in _nearest_votes(kept, exclude_voter, len(snap.several_tools)):
            name = snap.several_tools[number]
            total += vote
            if visible is None or name in visible:
                votes[name] = votes.get(name, 0.0) + vote
    return votes, total


def _nearest_votes(
    kept: list[tuple[np.ndarray, np.ndarray, float]], exclude_voter: int, n_tools: int
) -> list[tuple[int, float]]:
    """(tool number, votes) from the several-request votes of the neighbours: each (tool, voter) pair's strongest
    vote only, summed per tool; `exclude_voter`'s are left out. Vectorised: a popular request holds one pair per
    conversation that reached its tool in other words too, so the work must not be a Python loop over them."""
    tools = np.concatenate([k[0] for k in kept])
    voters = np.concatenate([k[1] for k in kept])
    strength = np.concatenate([np.full(len(k[0]), k[2]) for k in kept])
    if exclude_voter >= 0:
        keep = voters != exclude_voter
        tools, voters, strength = tools[keep], voters[keep], strength[keep]
    if not len(tools):
        return []
    pair = tools * (int(voters.max()) + 1) + voters
    order = np.lexsort((-strength, pair))  # by pair, the strongest first
    pair, tools, strength = pair[order], tools[order], strength[order]
    first = np.ones(len(pair), dtype=bool)
    first[1:] = pair[1:] != pair[:-1]
    sums = np.bincount(tools[first], weights=strength[first], minlength=n_tools)
    return [(int(t), float(sums[t])) for t in np.flatnonzero(sums)]


def rank_score(rank: int) -> float:
    """The backend's part of the mixture for its hit at `rank` (0 first): the DCG discount, 1 at the top.

    A rank, not the backend's score: the log keeps what a search showed, not its scores, and the
    prior is calibrated on those lists, so the mixture must read the backend the same way."""
    return 1.0 / math.log2(rank + 2)


def _mix(
    shown: Sequence[str], votes: dict[str, float], total: float, confidence: float, weight: float, k: int
) -> list[tuple[str, float]]:
    """The k best of the backend's ranked hits mixed with the learned shares (see the module doc)."""
    scores = {name: (1.0 - confidence) * rank_score(rank) for rank, name in enumerate(shown)}
    if confidence > 0:
        for tool, vote in votes.items():
            scores[tool] = scores.get(tool, 0.0) + weight * confidence * vote / total
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


@dataclass(frozen=True, slots=True)
class Signal:
    """What the log says about one query: each voted tool's share of the votes, and how much to trust them."""

    shares: dict[str, float]  # votes(tool) / all votes, for visible tools with a vote
    confidence: float  # all votes / (all votes + prior), in [0, 1)

    def __bool__(self) -> bool:
        return bool(self.shares)


class LearnedRanker:
    """The learned signal for a query, from a UsageLog (compiled lazily, refreshed as it grows).

    `prior`: None (the default) calibrates it and the vote exponent on the log (see the module doc); a
    number fixes it (and the exponent at DEFAULT_EXPONENT).
    `refresh_seconds`: a changed log is recompiled at most this often (0 = on every change), so a
    busy log does not recompile on every search.
    """

    def __init__(
        self,
        log: UsageLog,
        *,
        weight: float = DEFAULT_WEIGHT,
        prior: float | None = None,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        neighbours: int = DEFAULT_NEIGHBOURS,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ) -> None:
        _check_settings(weight, prior, min_similarity, neighbours, refresh_seconds)
        self.log = log
        self.weight = weight
        self.prior = prior
        self.min_similarity = min_similarity
        self.neighbours = neighbours
        self.refresh_seconds = refresh_seconds
        self._snapshot: _Snapshot | None = None
        self._compiled_at = 0.0
        self._lock = threading.Lock()
        self._compiling = threading.Event()

    def _stale(self, snap: _Snapshot | None) -> bool:
        if snap is None:
            return True
        return snap.version != self.log.version and time.monotonic() - self._compiled_at >= self.refresh_seconds

    def snapshot(self) -> _Snapshot:
        """The compiled log. The first call compiles; later changes are compiled in a background
        thread (a 100,000-entry log takes seconds) while searches go on with the previous snapshot,
        except with refresh_seconds=0, where every change is compiled before the next lookup."""
        snap = self._snapshot
        # Compiled before the next lookup: the first time, with refresh_seconds=0, and while nothing
        # was learned yet (a young log is small, and its first entries should count at once).
        changed = snap is not None and snap.version != self.log.version
        if snap is None or (changed and (self.refresh_seconds <= 0 or snap.empty)):
            with self._lock:  # one thread compiles; the others wait and use its result
                snap = self._snapshot
                if snap is None or snap.version != self.log.version:
                    snap = self._compile()
            return snap
        if self._stale(snap) and not self._compiling.is_set():
            self._compiling.set()
            threading.Thread(target=self._compile_in_background, name="toolsearch-learning", daemon=True).start()
        return snap

    def _compile(self) -> _Snapshot:
        snap = _compile(self.log, neighbours=self.neighbours, min_similarity=self.min_similarity, weight=self.weight)
        self._snapshot, self._compiled_at = snap, time.monotonic()
        return snap

    def _compile_in_background(self) -> None:
        try:
            with self._lock:
                self._compile()
        finally:
            self._compiling.clear()

    def signal(self, query: str, visible: Collection[str] | None = None) -> Signal:
        """The learned signal for tools in `visible` (None = any); empty without evidence."""
        snap = self.snapshot()
        prior = snap.prior if self.prior is None else self.prior
        if snap.empty or prior == math.inf:
            return Signal({}, 0.0)
        exponent = snap.exponent if self.prior is None else DEFAULT_EXPONENT  # a fixed prior: the fixed rule
        votes, total = _votes(snap, self.log.terms(query), visible, self.neighbours, self.min_similarity, exponent)
        if not votes:
            return Signal({}, 0.0)
        return Signal({tool: v / total for tool, v in votes.items()}, total / (total + prior))

    @property
    def calibration(self) -> Calibration | None:
        """How the compiled log's prior and exponent were chosen; None while the log has too few searches."""
        return self.snapshot().calibration


def _check_settings(
    weight: float, prior: float | None, min_similarity: float, neighbours: int, refresh_seconds: float
) -> None:
    """Refuse a LearnedRanker setting out of its range, naming it: a negative prior divides by zero (or lets fewer
    votes count for more), NaN ranks in no order (it fails every comparison below, so it is refused too), and a
    neighbour count below 1 selects nothing."""
    for what, value in (("weight", weight), ("prior", prior), ("min_similarity", min_similarity),
                        ("refresh_seconds", refresh_seconds)):
        if not (value is None and what == "prior") and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise wrong_type(what, value, "a number" if what != "prior" else "a number or None")
    if isinstance(neighbours, bool) or not isinstance(neighbours, int):
        raise wrong_type("neighbours", neighbours, "a whole number")
    checks: tuple[tuple[str, object, bool, str], ...] = (
        ("weight", weight, math.isfinite(weight) and weight > 0, "a finite number above 0"),
        ("prior", prior, prior is None or prior >= 0,
         "None (calibrated on the log) or a number of 0 or more (math.inf: never trust the votes)"),
        ("min_similarity", min_similarity, 0 <= min_similarity <= 1, "from 0 to 1"),
        ("neighbours", neighbours, neighbours >= 1, "1 or more"),
        ("refresh_seconds", refresh_seconds, refresh_seconds >= 0, "0 or more"),
    )
    for what, given, ok, expected in checks:
        if not ok:
            raise InvalidArgumentError(f"LearnedRanker's {what} must be {expected}, got {given!r}")


@dataclass(frozen=True, slots=True)
class LearnedSearchResult(SearchResult):
    """A search result the learned signal re-ordered: its hits mix the backend's rank with the votes of the log.

    `ranked` is the backend's own order for the same search (its names, best first), what the usage log must
    record as the search's list: the calibration reads each entry's list as what the backend ranked, and the
    learned order read so would say the backend already ranks the called tool first, turning learning off.
    """

    ranked: tuple[str, ...] = ()


class LearningIndex(ToolIndex):
    """A ToolIndex whose search adds the learned signal of a usage log; use it in place of `index`.

    It wraps the index by delegation (pydantic-ai's `WrapperToolset`): catalog, backend, updates
    and the plain search are the wrapped index's own, read at each call, so an `upsert` on either
    is seen by both. With an empty log, with `enabled` False, or when no past query is similar,
    `search` returns exactly what the plain index returns. Session filters apply to learned tools
    as to every other tool.
    """

    # No super().__init__: a wrapper that held its own catalog and backend would go stale.
    def __init__(self, index: ToolIndex, log: UsageLog | LearnedRanker, *, enabled: bool = True) -> None:
        self.wrapped = index
        self.ranker = log if isinstance(log, LearnedRanker) else LearnedRanker(log)
        self.enabled = enabled

    @property
    def log(self) -> UsageLog:
        return self.ranker.log

    # --- everything but the learned ranking is the wrapped index's --------------------------

    @property
    def catalog(self) -> Catalog:
        return self.wrapped.catalog

    @property
    def backend(self) -> Backend:
        return self.wrapped.backend

    @property
    def backend_name(self) -> str:
        return self.wrapped.backend_name

    @property
    def key(self) -> str:
        return self.wrapped.key

    def __len__(self) -> int:
        return len(self.wrapped)

    def __repr__(self) -> str:
        return f"LearningIndex({self.backend_name}, {len(self)} tools, {len(self.log)} usage entries)"

    def resolve_filter(
        self, allowed: Collection[str] | None = None, namespaces: Collection[str] | None = None
    ) -> frozenset[str] | None:
        return self.wrapped.resolve_filter(allowed, namespaces)

    def search_checked(self, text: str, k: int, names: frozenset[str] | None) -> SearchResult:
        return self.wrapped.search_checked(text, k, names)

    def upsert(self, tools: Iterable[Tool]) -> None:
        self.wrapped.upsert(tools)

    def remove(self, names: Iterable[str]) -> None:
        self.wrapped.remove(names)

    def sync(self, tools: Iterable[Tool] | Catalog) -> None:
        self.wrapped.sync(tools)

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        allowed: Collection[str] | None = None,
        namespaces: Collection[str] | None = None,
    ) -> SearchResult:
        with tracing.retrieval(self, allowed) as traced:  # one span per search, as ToolIndex.search
            return traced.result(self._search(query, k, allowed, namespaces), k, namespaces)

    def _search(
        self, query: str, k: int, allowed: Collection[str] | None, namespaces: Collection[str] | None
    ) -> SearchResult:
        if not self.enabled:
            return self.wrapped.search(query, k, allowed=allowed, namespaces=namespaces)
        start = time.perf_counter()
        text = validate_query(query)
        k = validate_k(k)
        names = self.resolve_filter(allowed, namespaces)
        catalog = self.catalog
        signal = self.ranker.signal(text, names)
        learned = {t: p for t, p in signal.shares.items() if t in catalog}
        base = self.search_checked(text, k, names)  # checked and resolved once, above
        if not learned:
            return base
        # Only the k hits a plain search returns get a backend share: a deeper search would cost
        # the backend more than the whole learned lookup (bm25 at 10,000 tools: k=50 is 5x k=5).
        shown = [h.name for h in base.hits]
        order = _mix(shown, learned, 1.0, signal.confidence, self.ranker.weight, k)
        hits = tuple(Hit(n, s) for n, s in order)
        elapsed = (time.perf_counter() - start) * 1000
        # The backend's notes explain its own result; where it found nothing, they say so ("no tool matched these
        # words; try other words"), which the learned hits make untrue: they would send the model to rephrase.
        notes = base.notes if base.hits else (LEARNED_ONLY,)
        if base.hits and hits and self._learned_lead(hits[0], learned, signal.confidence):
            # The notes on how well the request was served ("the best match scores 0.07, a weak match ... rephrase
            # it", or "the tools found may not fit" a foreign request) judge the backend's best hit. The top hit is
            # now one past requests like this one led to, by votes that outweigh its rank: telling the model to
            # rephrase would undo what learning found, and the score quoted is not the top hit's. The backend's
            # other notes (a query fallback, tools withheld) still hold and stay.
            judged = set(request_notes(text, base.hits, base.tools, self.backend))
            notes = tuple(note for note in notes if note not in judged)
        return LearnedSearchResult(text, hits, tuple(catalog[h.name] for h in hits), self.backend_name, elapsed,
                                   notes, ranked=tuple(shown))

    def _learned_lead(self, top: Hit, learned: dict[str, float], confidence: float) -> bool:
        """Whether learning put `top` first: its learned part (the weighted share of the votes) is at least half its
        score, more than its rank with the backend gives it."""
        return self.ranker.weight * confidence * learned.get(top.name, 0.0) >= top.score / 2


def shown_now(index: ToolIndex, log: UsageLog) -> dict[str, tuple[str, ...]]:
    """What `index` shows now for each request text `log` keeps (privacy "raw"), as deep as its deepest recorded
    list of that request: the lists `UsageLog.reshown` puts in place of those the log recorded.

    Each request is searched over the whole catalog: a list recorded under a session's filter comes back unfiltered.
    A LearningIndex is searched without its learning: the lists stand for what the backend alone shows.
    """
    while isinstance(index, LearningIndex):
        index = index.wrapped
    depth: dict[str, int] = {}
    for entry in log.entries():
        if entry.query is not None and entry.shown:
            depth[entry.query] = max(depth.get(entry.query, 0), len(entry.shown))
    lists: dict[str, tuple[str, ...]] = {}
    for query, k in depth.items():
        try:
            lists[query] = tuple(index.search(query, min(k, MAX_K)).names)
        except InvalidQueryError:  # no words, or longer than a search takes: it keeps the list it recorded
            continue
    return lists
