"""Offline replay of the usage log: how much search learns from past successful calls.

For each data set a seeded sample of queries is split in two halves: the second half is the
test set (the same for every row), the first half is the pool history is drawn from. History of
0%, 10%, 25% and 50% of the sample is replayed into a UsageLog as if each query had been searched
(the backend's own top 10 recorded as shown) and had led to a successful call of each of its
labelled tools; then the test queries are searched with the plain backend and through a
LearningIndex, in one run. A noisy variant replaces 20% of the history's calls by a random wrong
tool. The *distinct* protocol takes out paraphrases: its history is the 50% history without
near-identical requests (see `distinct`), and its test queries are those near-identical to no
query of the 50% history. Every learned row also gets what its log allows (see `ceilings`): the
share of test queries and of their (query, tool) pairs whose tool the history called, and the
gain an oracle that moves those tools to the top of the backend's ranking would get. A latency
part measures what learning adds to one search at 10,000 tools with a 100,000-entry log. Writes
`<out>/<name>.md` and `<out>/<name>.json`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import (
    backend_list,
    cli,
    log,
    machine_info,
    machine_markdown,
    percentile,
    resolve_datasets,
    write_report,
)
from benchmarks.lib.held_out import MODEL_BACKENDS, describe, held_out_embedders, held_out_line

__all__ = ["add_arguments", "distinct", "main", "metrics", "run"]

K = 10
FRACTIONS = (0.0, 0.10, 0.25, 0.50)
NOISE = 0.20
TARGET_METATOOL = 0.85
NOISE_TOLERANCE = 0.01
# Two requests are near-identical when they share at least half of their distinct words (Jaccard
# over `usage.query_terms`): "weather in paris today" and "weather in london today" are (0.6), "book a
# hotel in rome for me" and "find me a hotel in paris" are not (0.44).
NEAR_IDENTICAL = 0.5
TARGET_DISTINCT = 0.03
# The depth of the re-ranker ceiling: tools the backend ranks this high are within reach of a re-ranker
# of its shown list (a learner that can also add voted tools is bounded by the unrestricted ceiling).
CEILING_DEPTH = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli.datasets(parser)
    parser.add_argument("--test", type=int, default=1000, metavar="N",
                        help="held-out test queries per data set, the last N after a seeded shuffle (at most half "
                        "the data set; default 1000); history is drawn from the other queries")
    cli.seed(parser, "the shuffle and the noise")
    cli.backends(parser, default="bm25", help="comma-separated backends to learn over (default bm25; e.g. bm25,hybrid)")
    parser.add_argument("--latency-tools", type=int, default=10_000, metavar="N",
                        help="catalog size of the latency part (default 10000; 0 skips it)")
    parser.add_argument("--latency-log", type=int, default=100_000, metavar="N",
                        help="usage-log entries of the latency part (default 100000)")
    parser.add_argument("--latency-queries", type=int, default=1000, metavar="N",
                        help="timed searches per variant in the latency part (default 1000)")
    parser.add_argument("--no-replay", action="store_true", help="only the latency part")
    cli.held_out(parser, "the vector and hybrid backends of the replay")
    cli.outputs(parser, "learning", plots=False)
    cli.cache_dir(parser)


def main(args: argparse.Namespace) -> int:
    quiet = cli.start(args)
    datasets = resolve_datasets(args.dataset)
    backends = backend_list(args.backends)
    report = run(
        datasets,
        backends,
        test_size=args.test,
        seed=args.seed,
        latency_tools=args.latency_tools,
        latency_log=args.latency_log,
        latency_queries=args.latency_queries,
        replay=not args.no_replay,
        held_out=Path(args.held_out) if args.held_out else None,
        log=None if quiet else log,
    )
    out = Path(args.out)
    write_report(out, args.name, report, render_markdown(report), quiet=quiet)
    print(render_summary(report))
    return 0


# --- replay ------------------------------------------------------------------------------------


def distinct(queries: Sequence[Any], against: Sequence[Any] = (), *, threshold: float = NEAR_IDENTICAL) -> list[Any]:
    """The queries near-identical (word Jaccard >= threshold) to none of `against` nor to an earlier one kept.

    With `against` given, only `against` counts (the test side: disjoint from history, repeats allowed)."""
    import numpy as np

    from toolsearch.usage import query_terms

    postings: dict[str, list[int]] = {}
    sizes: list[int] = []

    def add(words: frozenset[str]) -> None:
        for word in words:
            postings.setdefault(word, []).append(len(sizes))
        sizes.append(len(words))

    for q in against:
        add(frozenset(query_terms(q.query)))
    self_dedupe = not against
    kept = []
    for q in queries:
        words = frozenset(query_terms(q.query))
        lists = [postings[w] for w in words if w in postings]
        if lists:
            shared = np.bincount(np.concatenate([np.asarray(ids) for ids in lists]), minlength=len(sizes))
            jaccard = shared / (np.asarray(sizes) + len(words) - shared)
            if (jaccard >= threshold).any():
                continue
        kept.append(q)
        if self_dedupe:
            add(words)
    return kept


def history_calls(
    pool: Sequence[Any], count: int, tool_names: Sequence[str], *, noise: float, seed: int
) -> list[tuple[str, str]]:
    """(query, called tool) pairs of the first `count` pool queries; `noise` of them get a wrong tool."""
    calls = [(q.query, tool, q.relevant) for q in pool[:count] for tool in q.relevant]
    if noise <= 0:
        return [(query, tool) for query, tool, _ in calls]
    rng = random.Random(seed)
    wrong = set(rng.sample(range(len(calls)), round(noise * len(calls))))
    out = []
    for i, (query, tool, relevant) in enumerate(calls):
        while i in wrong and tool in relevant:  # a wrong tool: any tool the query is not labelled with
            tool = tool_names[rng.randrange(len(tool_names))]
        out.append((query, tool))
    return out


def oracle_ranking(
    ranked: Sequence[str], relevant: Collection[str], seen: Collection[str], within: Collection[str] | None = None
) -> list[str]:
    """`ranked` with every relevant tool of `seen` (and of `within`, when given) moved to the top.

    The moved tools keep `ranked`'s order among them, those it lacks follow them (in name order;
    all are relevant, so their order changes no metric), and the rest keep their order below.
    """
    movable = {t for t in relevant if t in seen and (within is None or t in within)}
    listed = set(ranked)
    top = [t for t in ranked if t in movable] + sorted(movable - listed)
    return top + [t for t in ranked if t not in movable]


def ceilings(
    test: Sequence[Any], base: Sequence[Sequence[str]], deep: Sequence[Sequence[str]], seen: Collection[str]
) -> dict[str, float]:
    """What a log whose calls reached the tools in `seen` allows a learner to gain on `test`.

    `base` is the backend's ranking of each test query (the one *no learning* scores), `deep` its
    top CEILING_DEPTH. Coverage: the share of test queries with at least one relevant tool in
    `seen`, and of relevant (query, tool) pairs. Ceiling: the nDCG@10 gain of `oracle_ranking` over
    `base`, the most any learner that only promotes tools the history called can get; the re-ranker
    ceiling moves only those in `deep` (a re-ranker of the backend's top CEILING_DEPTH).
    """
    from toolsearch.evaluation import ndcg_at

    n = len(test) or 1
    pairs = sum(len(set(q.relevant)) for q in test) or 1
    plain = oracle = reranked = 0.0
    covered = covered_pairs = 0
    for q, ranked, shown in zip(test, base, deep, strict=True):
        relevant = set(q.relevant)
        hit = relevant & set(seen)
        covered += bool(hit)
        covered_pairs += len(hit)
        plain += ndcg_at(ranked, relevant, K)
        oracle += ndcg_at(oracle_ranking(ranked, relevant, seen), relevant, K)
        reranked += ndcg_at(oracle_ranking(ranked, relevant, seen, {*shown, *ranked}), relevant, K)
    return {
        "covered_queries": round(covered / n, 4),
        "covered_pairs": round(covered_pairs / pairs, 4),
        "ceiling_delta_nDCG@10": round((oracle - plain) / n, 4),
        "rerank_ceiling_delta_nDCG@10": round((reranked - plain) / n, 4),
    }


def _rankings(search: Callable[[str], Any], queries: Sequence[Any]) -> tuple[list[list[str]], list[Any], list[float]]:
    rankings, results, latencies = [], [], []
    for q in queries:
        t0 = time.perf_counter()
        result = search(q.query[:1000])
        latencies.append((time.perf_counter() - t0) * 1000)
        rankings.append(result.names)
        results.append(result)
    return rankings, results, latencies


def metrics(rankings: Sequence[Sequence[str]], queries: Sequence[Any]) -> dict[str, float]:
    """score_rankings' figures, rounded to 4 places as the reports print them."""
    from toolsearch.evaluation import score_rankings

    return {m: round(v, 4) for m, v in score_rankings(rankings, queries).items()}


def _learned_row(
    index: Any, history: Sequence[Any], test: Sequence[Any], tool_names: list[str], shown: dict[str, list[str]],
    base: Sequence[Sequence[str]], deep: Sequence[Sequence[str]], *, noise: float, seed: int,
) -> tuple[dict[str, Any], list[Any]]:
    """Replay `history` (each query with what the backend showed for it) and search `test` through learning;
    `base` and `deep` are the backend's rankings of `test` (see `ceilings`)."""
    from toolsearch.learning import LearnedRanker, LearningIndex
    from toolsearch.usage import UsageLog

    # A salt fixed by the seed: the hashed words order each query's terms, so a random salt changes the
    # order floating-point votes are summed in, and near-ties (and so a few figures, by 0.001) with it.
    usage = UsageLog(privacy="hashed", salt=f"{seed:032x}")
    calls = history_calls(history, len(history), tool_names, noise=noise, seed=seed)
    for query, tool in calls:
        usage.add(query, tool, shown[query])
    ranker = LearnedRanker(usage, refresh_seconds=0)
    learning = LearningIndex(index, ranker)
    rankings, results, lat = _rankings(partial(learning.search, k=K), test)
    calibration = ranker.calibration
    row: dict[str, Any] = {"history": len(history), "noise": noise, "log_entries": len(usage),
                           **metrics(rankings, test), "query_ms_p50": round(percentile(lat, 50), 3),
                           # a string for "never" (JSON has no infinity)
                           "prior": None if calibration is None else f"{calibration.prior:g}",
                           "calibrated_on": None if calibration is None else calibration.searches,
                           **ceilings(test, base, deep, {tool for _, tool in calls})}
    return row, results


def _replay(
    index: Any, pool: list[Any], test: list[Any], sample: int, tool_names: list[str], seed: int, log: Any, label: str
) -> dict[str, Any]:
    base_rankings, base_results, base_lat = _rankings(lambda q: index.search(q, K), test)
    rows: dict[str, Any] = {
        "no learning": {"history": 0, "noise": 0.0, **metrics(base_rankings, test),
                        "query_ms_p50": round(percentile(base_lat, 50), 3)}
    }
    log(f"[{label}] no learning: nDCG@10={rows['no learning']['nDCG@10']:.3f} R@5={rows['no learning']['R@5']:.3f}")
    # The backend's top CEILING_DEPTH of each test query, for the re-ranker ceiling only.
    deep_rankings = [index.search(q.query[:1000], CEILING_DEPTH).names for q in test]
    largest = min(round(max(FRACTIONS) * sample), len(pool))
    # What a search of each history query showed: the log keeps it, and the ranker calibrates on it.
    shown = {q.query: index.search(q.query[:1000], K).names for q in pool[:largest]}

    def add(name: str, row: dict[str, Any], baseline: dict[str, Any]) -> None:
        row["delta_nDCG@10"] = round(row["nDCG@10"] - baseline["nDCG@10"], 4)
        row["delta_R@5"] = round(row["R@5"] - baseline["R@5"], 4)
        rows[name] = row
        log(f"[{label}] {name}: nDCG@10={row['nDCG@10']:.3f} ({row['delta_nDCG@10']:+.3f}) "
            f"R@5={row['R@5']:.3f} ({row['delta_R@5']:+.3f}) prior={row.get('prior')}")

    for fraction in FRACTIONS:
        count = min(round(fraction * sample), len(pool))
        for noise in (0.0, NOISE) if fraction > 0 else (0.0,):
            row, results = _learned_row(index, pool[:count], test, tool_names, shown, base_rankings, deep_rankings,
                                        noise=noise, seed=seed)
            row["history_fraction"] = fraction
            if fraction == 0:
                row["identical_to_no_learning"] = all(
                    a.hits == b.hits and a.tools == b.tools for a, b in zip(results, base_results, strict=True)
                )
            add(f"{fraction:.0%} history" + (f", {noise:.0%} wrong" if noise else ""), row, rows["no learning"])
    # The distinct protocol: no paraphrase in the history, no test query near-identical to a history query.
    history = distinct(pool[:largest])
    kept = distinct(test, pool[:largest])
    positions = {id(q): i for i, q in enumerate(test)}
    kept_base = [base_rankings[positions[id(q)]] for q in kept]
    kept_deep = [deep_rankings[positions[id(q)]] for q in kept]
    base = {"history": 0, "noise": 0.0, "test_queries": len(kept), **metrics(kept_base, kept)}
    rows["distinct: no learning"] = base
    log(f"[{label}] distinct: {len(history)} of {largest} history queries, {len(kept)} of {len(test)} test queries")
    for noise in (0.0, NOISE):
        row, _ = _learned_row(index, history, kept, tool_names, shown, kept_base, kept_deep, noise=noise, seed=seed)
        row["test_queries"] = len(kept)
        add(f"distinct: {max(FRACTIONS):.0%} history" + (f", {noise:.0%} wrong" if noise else ""), row, base)
    return rows


# --- latency -----------------------------------------------------------------------------------


def synthetic_log(datasets: Sequence[Any], catalog: Sequence[Any], entries: int, seed: int) -> Any:
    """`entries` usage entries: every data set's queries with their tools (prefixed as in the catalog),
    repeated with one word dropped or one word of another query added, so most entries differ; each
    shows five tools (the called one among four random ones)."""
    from toolsearch.evaluation import load_queries
    from toolsearch.usage import UsageLog

    names = [t.name for t in catalog]
    present = set(names)
    base: list[tuple[str, str]] = []
    for ds in datasets:
        for q in load_queries(ds.queries_path):
            for tool in q.relevant:
                name = f"{ds.name}_{tool}"
                base.append((q.query[:1000], name if name in present else names[hash(name) % len(names)]))
    rng = random.Random(seed)
    rng.shuffle(base)
    usage = UsageLog(max_entries=entries)
    entries_made = 0
    round_no = 0
    while entries_made < entries:
        for query, tool in base:
            if entries_made >= entries:
                break
            if round_no:
                words = query.split()
                if words and rng.random() < 0.5:
                    words.pop(rng.randrange(len(words)))
                else:
                    donor = base[rng.randrange(len(base))][0].split()
                    words.append(donor[rng.randrange(len(donor))] if donor else "")
                query = " ".join(words) or query
            # A shown list of five (the called tool among four others), so the compile calibrates as a
            # real log's does; its content does not change the cost.
            shown = [names[rng.randrange(len(names))] for _ in range(4)]
            shown.insert(rng.randrange(5), tool)
            usage.add(query, tool, shown)
            entries_made += 1
        round_no += 1
    return usage


def _latency(
    datasets: Sequence[Any], backend: str, tools: int, entries: int, queries: int, seed: int, log: Any
) -> dict[str, Any]:
    from benchmarks.lib.workload import build_catalog, sample_queries
    from toolsearch.index import ToolIndex
    from toolsearch.learning import LearnedRanker, LearningIndex

    catalog, info = build_catalog(datasets, tools, seed=seed)
    log(f"[latency] building a {backend} index of {len(catalog)} tools ...")
    index = ToolIndex.build(catalog, backend=backend)
    log(f"[latency] making a {entries}-entry usage log ...")
    usage = synthetic_log(datasets, catalog, entries, seed)
    ranker = LearnedRanker(usage, refresh_seconds=3600)
    t0 = time.perf_counter()
    ranker.snapshot()
    compile_s = time.perf_counter() - t0
    learning = LearningIndex(index, ranker)
    texts = sample_queries(datasets, queries, seed=seed + 1)
    for text in texts[:50]:  # warm both paths (model load, caches)
        index.search(text, 5)
        learning.search(text, 5)
    plain, learned, signal = [], [], []
    plain_cpu, learned_cpu, signal_cpu = [], [], []
    voted = 0
    cpu = time.thread_time  # CPU time of this thread: what a search costs, without waiting for a busy core
    # Each query is searched twice: without this, the second search would reuse the first one's
    # query embedding (the dense backends keep recent ones), and learning would look cheaper than none.
    forget = getattr(index.backend, "forget_queries", lambda: None)
    for text in texts[50 : 50 + queries]:  # interleaved, so machine load hits both alike
        forget()
        t, c = time.perf_counter(), cpu()
        index.search(text, 5)
        plain.append((time.perf_counter() - t) * 1000)
        plain_cpu.append((cpu() - c) * 1000)
        forget()
        t, c = time.perf_counter(), cpu()
        learning.search(text, 5)
        learned.append((time.perf_counter() - t) * 1000)
        learned_cpu.append((cpu() - c) * 1000)
        t, c = time.perf_counter(), cpu()
        voted += bool(ranker.signal(text))
        signal.append((time.perf_counter() - t) * 1000)
        signal_cpu.append((cpu() - c) * 1000)
    p50_plain, p50_learned = percentile(plain, 50), percentile(learned, 50)
    return {
        "backend": backend,
        "tools": len(catalog),
        "catalog": info,
        "log_entries": len(usage),
        "distinct_queries": len(ranker.snapshot().votes),
        "compile_s": round(compile_s, 2),
        "queries": len(plain),
        "queries_with_learned_votes": voted,
        "plain_ms_p50": round(p50_plain, 3),
        "learning_ms_p50": round(p50_learned, 3),
        "added_ms_p50": round(p50_learned - p50_plain, 3),
        "plain_ms_p95": round(percentile(plain, 95), 3),
        "learning_ms_p95": round(percentile(learned, 95), 3),
        "signal_ms_p50": round(percentile(signal, 50), 3),
        "cpu_plain_ms_p50": round(percentile(plain_cpu, 50), 3),
        "cpu_learning_ms_p50": round(percentile(learned_cpu, 50), 3),
        "cpu_added_ms_p50": round(percentile(learned_cpu, 50) - percentile(plain_cpu, 50), 3),
        "cpu_signal_ms_p50": round(percentile(signal_cpu, 50), 3),
        "cpu_signal_ms_p95": round(percentile(signal_cpu, 95), 3),
        "signal_ms_p95": round(percentile(signal, 95), 3),
    }


# --- run ---------------------------------------------------------------------------------------


def run(
    datasets: Sequence[Any],
    backends: Sequence[str],
    *,
    test_size: int = 1000,
    seed: int = 0,
    latency_tools: int = 10_000,
    latency_log: int = 100_000,
    latency_queries: int = 1000,
    replay: bool = True,
    held_out: Path | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """Replay and time learning over every data set and backend; returns the JSON-able report.

    `held_out`: a folder of tools models trained without each set (benchmarks.lib.held_out); the replay's
    model backends then run, on each set, the one that never saw it (all are checked before anything runs).
    """
    from toolsearch.evaluation import load_queries
    from toolsearch.index import ToolIndex
    from toolsearch.learning import (
        CALIBRATION_SAMPLE,
        CALIBRATION_TIE,
        DEFAULT_MIN_SIMILARITY,
        DEFAULT_NEIGHBOURS,
        DEFAULT_PRIOR,
        DEFAULT_WEIGHT,
        MIN_CALIBRATION,
        PRIOR_GRID,
        STOP_MIN_QUERIES,
        STOP_SHARE,
    )
    from toolsearch.tools import load_tools

    log = log or (lambda message: None)
    held = held_out_embedders(held_out, [ds.name for ds in datasets]) if held_out is not None and replay else {}
    report: dict[str, Any] = {
        "benchmark": "learning",
        "machine": machine_info(),
        "settings": {
            "test": test_size, "seed": seed, "k": K, "backends": list(backends), "fractions": list(FRACTIONS),
            "noise": NOISE, "near_identical_jaccard": NEAR_IDENTICAL, "ceiling_depth": CEILING_DEPTH,
            "held_out": str(held_out) if held else None, "held_out_models": describe(held),
            "ranker": {
                "weight": DEFAULT_WEIGHT, "prior": "calibrated", "uncalibrated_prior": DEFAULT_PRIOR,
                "prior_grid": [str(p) for p in PRIOR_GRID], "min_calibration": MIN_CALIBRATION,
                "calibration_sample": CALIBRATION_SAMPLE, "calibration_tie": CALIBRATION_TIE,
                "min_similarity": DEFAULT_MIN_SIMILARITY,
                "neighbours": DEFAULT_NEIGHBOURS, "stop_share": STOP_SHARE, "stop_min_queries": STOP_MIN_QUERIES,
            },
        },
        "datasets": {},
    }
    started = time.perf_counter()
    for ds in datasets if replay else ():
        tools = load_tools(ds.tools_path)
        sample = load_queries(ds.queries_path, seed=seed)
        cut = len(sample) - min(test_size, len(sample) // 2)
        pool, test = sample[:cut], sample[cut:]
        tool_names = [t.name for t in tools]
        entry: dict[str, Any] = {"path": str(ds.folder), "tools": len(tools), "queries": len(sample),
                                 "test_queries": len(test), "backends": {}}
        for backend in backends:
            log(f"[{ds.name}] building {backend} over {len(tools)} tools ...")
            model = {"embedder": held[ds.name]} if held and backend in MODEL_BACKENDS else {}
            index = ToolIndex.build(tools, backend=backend, **model)
            if model:  # the model the index runs, as it says itself
                entry.setdefault("models", {})[backend] = index.backend.describe().get("model")
            entry["backends"][backend] = _replay(index, pool, test, len(sample), tool_names, seed, log,
                                                 f"{ds.name} {backend}")
        report["datasets"][ds.name] = entry
    if latency_tools:
        report["latency"] = [
            _latency(datasets, backend, latency_tools, latency_log, latency_queries, seed, log)
            for backend in backends
        ]
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["targets"] = analyse(report)
    return report


def analyse(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, per backend."""
    out: dict[str, Any] = {}
    backends = report["settings"]["backends"]
    for backend in backends:
        per = {n: d["backends"][backend] for n, d in report["datasets"].items() if backend in d["backends"]}
        if not per:
            continue
        half = {n: rows.get("50% history") for n, rows in per.items()}
        noisy = {n: [r for name, r in rows.items() if "wrong" in name] for n, rows in per.items()}
        checks: dict[str, Any] = {}
        if half.get("metatool"):
            checks["metatool_50%_nDCG@10>=0.85"] = half["metatool"]["nDCG@10"] >= TARGET_METATOOL
        checks["no_set_worse_at_50%"] = all(r is not None and r["delta_nDCG@10"] >= 0 and r["delta_R@5"] >= 0
                                            for r in half.values())
        checks["noise_no_set_worse_by_0.01"] = all(r["delta_nDCG@10"] >= -NOISE_TOLERANCE
                                                   for rows in noisy.values() for r in rows)
        checks["identical_with_empty_log"] = all(rows["0% history"].get("identical_to_no_learning")
                                                 for rows in per.values())
        clean = {n: rows.get("distinct: 50% history") for n, rows in per.items()}
        checks["distinct_50%_nDCG@10_gain>=0.03"] = all(
            r is not None and r["delta_nDCG@10"] >= TARGET_DISTINCT for r in clean.values())
        checks["never_worse"] = all(r["delta_nDCG@10"] >= 0 for rows in per.values() for name, r in rows.items()
                                    if "delta_nDCG@10" in r and "wrong" not in name)
        checks["min_delta_nDCG@10"] = min((r["delta_nDCG@10"] for rows in per.values() for r in rows.values()
                                           if "delta_nDCG@10" in r), default=0.0)
        out[backend] = checks
    for row in report.get("latency", []):
        out.setdefault(row["backend"], {})["added_ms_p50<=1"] = row["added_ms_p50"] <= 1.0
        out[row["backend"]]["added_cpu_ms_p50<=1"] = row["cpu_added_ms_p50"] <= 1.0
    return out


# --- rendering ---------------------------------------------------------------------------------


def _yes(ok: Any) -> str:
    if not isinstance(ok, bool):
        return f"{ok:+.4f}"
    return "**met**" if ok else "**not met**"


def render_markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = ["# Learning from use: offline replay", ""]
    lines.append(
        f"Each data set's queries are shuffled with `random.Random({s['seed']})`; the last {s['test']} (at most "
        "half the set) are the test set, the same for every row. History is the first 0%, 10%, 25% or 50% of "
        "the data set's queries (the test queries are never history). A history query is "
        "replayed as one successful call of each of its labelled tools into a `UsageLog` (privacy \"hashed\", "
        "its salt fixed by the seed, so a rerun gives the same figures); "
        f"the noisy rows replace {s['noise']:.0%} of those calls by a random wrong tool. Every row searches the "
        f"same test queries through `LearningIndex(index, log).search(query, {s['k']})`; *no learning* is "
        f"`index.search` on the same index. The *distinct* rows take out paraphrases: their history is the 50% "
        "history without any request near-identical to an earlier one (word Jaccard >= "
        f"{s.get('near_identical_jaccard', NEAR_IDENTICAL)} over the query's distinct words), and their test "
        "queries are the test queries near-identical to no query of the 50% history; their baseline is *distinct: "
        "no learning*, the plain search of those test queries. *prior* is the one the ranker calibrated on the "
        "log (inf: learning off). *What the log allows* (one table per backend) bounds each learned row: "
        "*coverage* is the share of its test queries with at least one relevant tool that its history called "
        "(noisy rows: the calls the log got, wrong ones included), then the share of relevant (query, tool) "
        "pairs whose tool the history called; the *ceiling* is the nDCG@10 of an oracle that moves every "
        "relevant tool the history called to the top of the backend's ranking (keeping the backend's order "
        "among them and among the rest), minus the backend's nDCG@10: the largest gain of any learner that "
        "can only promote tools the history called; *top " + str(s.get("ceiling_depth", CEILING_DEPTH)) + "* is "
        "the same oracle moving only those tools the backend ranks in its top " +
        str(s.get("ceiling_depth", CEILING_DEPTH)) + ", what a re-ranker of its list can reach; *gained* is the "
        "row's Δ nDCG@10 and its share of the ceiling. Ranker settings (the same for every data set): "
        f"{s['ranker']}. "
        + ("The vector and hybrid rows run the tools model held out (see below); what a row measures is learning's "
           "change on top of it. " if s.get("held_out") else
           "The vector and hybrid rows run the default model: the tools model's query encoder was trained on these "
           "sets' requests (test queries included), so their *no learning* figures are not held out "
           "(`--held-out DIR` runs the held-out models; retrieval.md has held-out figures); what a row measures "
           "here is learning's change on top of it. ")
        + f"Run time {report.get('elapsed_s', 0):.0f} s."
    )
    lines += ["", *machine_markdown(report["machine"])]
    if s.get("held_out"):
        lines.append(held_out_line(s["held_out"], s["held_out_models"],
                                   latency="latency part" if report.get("latency") else ""))
    lines.append("")
    lines += ["## Targets", ""]
    for backend, checks in report["targets"].items():
        for name, ok in checks.items():
            lines.append(f"- `{backend}` {name}: {_yes(ok)}")
    lines.append("")
    for backend in s["backends"] if report["datasets"] else ():
        lines += [f"## {backend}: nDCG@10 / R@5 (Δ against no learning)", ""]
        names = [n for n, d in report["datasets"].items() if backend in d["backends"]]
        rows = list(report["datasets"][names[0]]["backends"][backend]) if names else []
        header = "| history | " + " | ".join(
            f"{n} ({report['datasets'][n]['test_queries']} test q, {report['datasets'][n]['tools']} tools)"
            for n in names
        ) + " |"
        lines += [header, "|---|" + "---|" * len(names)]
        for row in rows:
            cells = []
            for n in names:
                r = report["datasets"][n]["backends"][backend][row]
                cell = f"{r['nDCG@10']:.3f} / {r['R@5']:.3f}"
                if "delta_nDCG@10" in r:
                    cell += f" ({r['delta_nDCG@10']:+.3f} / {r['delta_R@5']:+.3f})"
                if r.get("prior") is not None:
                    cell += f", prior {r['prior']}"
                if r.get("test_queries") is not None:
                    cell += f", {r['history']} hist / {r['test_queries']} test q" if r["history"] else \
                        f", {r['test_queries']} test q"
                if r.get("identical_to_no_learning") is not None:
                    cell += ", identical" if r["identical_to_no_learning"] else ", DIFFERENT"
                cells.append(cell)
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += _ceiling_table(report, backend, names)
    if report.get("latency"):
        lines += ["## Latency at scale", ""]
        lines.append(
            "One catalog pooled from the data sets (as in scale.md), a usage log of every data set's queries "
            "with their tools, repeated with one word dropped or added so most entries differ. Plain and "
            "learning searches (k=5) alternate over the same held-out queries; *signal* is the ranker's "
            "lookup alone."
        )
        lines += ["", "| backend | tools | log entries (distinct queries) | compile s | plain p50 ms | learning "
                  "p50 ms | added p50 ms | signal p50 / p95 ms | queries with votes |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in report["latency"]:
            lines.append(
                f"| {r['backend']} | {r['tools']} | {r['log_entries']} ({r['distinct_queries']}) | {r['compile_s']} | "
                f"{r['plain_ms_p50']} | {r['learning_ms_p50']} | **{r['added_ms_p50']}** | "
                f"{r['signal_ms_p50']} / {r['signal_ms_p95']} | {r['queries_with_learned_votes']}/{r['queries']} |"
            )
        lines.append("")
        lines += ["CPU time of the searching thread (`time.thread_time`), the cost of a search without the time "
                  "it waits for a core on a busy machine:", ""]
        lines += ["| backend | plain p50 ms | learning p50 ms | added p50 ms | signal p50 / p95 ms |",
                  "|---|---|---|---|---|"]
        for r in report["latency"]:
            if "cpu_added_ms_p50" in r:
                lines.append(f"| {r['backend']} | {r['cpu_plain_ms_p50']} | {r['cpu_learning_ms_p50']} | "
                             f"**{r['cpu_added_ms_p50']}** | {r['cpu_signal_ms_p50']} / {r['cpu_signal_ms_p95']} |")
        lines.append("")
    return "\n".join(lines)


def _ceiling_table(report: dict[str, Any], backend: str, names: Sequence[str]) -> list[str]:
    """The coverage and ceilings of each learned row (reports from before they existed have none)."""
    per = {n: report["datasets"][n]["backends"][backend] for n in names}
    rows = [row for row, r in per[names[0]].items() if "covered_queries" in r] if names else []
    if not rows:
        return []
    depth = report["settings"].get("ceiling_depth", CEILING_DEPTH)
    lines = [f"### {backend}: what the log allows (coverage queries / pairs; ceiling Δ nDCG@10 all / top {depth}; "
             "gained)", "", "| history | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row in rows:
        cells = []
        for n in names:
            r = per[n][row]
            ceiling, gained = r["ceiling_delta_nDCG@10"], r["delta_nDCG@10"]
            share = f" ({gained / ceiling:.0%})" if ceiling > 0 else ""
            cells.append(f"{r['covered_queries']:.0%} / {r['covered_pairs']:.0%}; {ceiling:+.3f} / "
                         f"{r['rerank_ceiling_delta_nDCG@10']:+.3f}; {gained:+.3f}{share}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def render_summary(report: dict[str, Any]) -> str:
    lines = []
    for n, d in report["datasets"].items():
        for backend, rows in d["backends"].items():
            lines.append(f"{n} {backend}:")
            for row, r in rows.items():
                lines.append(f"  {row:24s} nDCG@10 {r['nDCG@10']:.3f}  R@5 {r['R@5']:.3f}")
    for r in report.get("latency", []):
        lines.append(f"latency {r['backend']}: +{r['added_ms_p50']} ms p50 at {r['tools']} tools, "
                     f"{r['log_entries']} log entries")
    lines.append(f"targets: {report['targets']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
