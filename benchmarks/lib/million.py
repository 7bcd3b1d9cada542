"""`bench scale --million`: bm25 and the vector backend's approximate index at up to a million tools.

Every size runs in fresh subprocesses (so each peak RSS is that process's own high-water mark):
bm25 builds over a generated catalog (benchmarks.lib.synth), times queries and session
creation, and saves; a second process loads the saved index and queries it; the vector process
adds derived unit vectors directly (`VectorBackend.add_vectors`: embedding a million texts on
2 cores would take hours, so search is measured alone, query embedding excluded) and measures
recall@10 of the approximate index against exact search on a sample of queries.
"""

from __future__ import annotations

import gc
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lib import machine_info, percentile

__all__ = ["TARGETS", "render_markdown", "render_summary", "run", "work_bm25", "work_load", "work_vector"]

K = 10
WARMUP = 5
SESSION_CREATES = 2_000
NPROBE_SWEEP = (8, 16, 32, 48, 64, 128)
TARGETS = {
    "bm25_p50_ms": 5.0,
    "bm25_p95_ms": 15.0,
    "bm25_p50_loaded_ms": 5.0,  # the same targets in a fresh process that loaded the index (a server, a CLI query)
    "bm25_p95_loaded_ms": 15.0,
    "bm25_load_s": 3.0,
    "bm25_load_100000_s": 0.5,  # judged on the 100,000-tool row: run with --sizes 100000,1000000
    "vector_p50_ms": 10.0,
    "peak_rss_gib": 4.0,
    "session_create_ms": 1.0,
}


def _latencies(fn: Callable[[Any], Any], items: Sequence[Any]) -> dict[str, Any]:
    for item in items[:WARMUP]:
        fn(item)
    times = []
    for item in items[WARMUP:]:
        t0 = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "timed": len(times),
        "p50_ms": round(percentile(times, 50), 3),
        "p95_ms": round(percentile(times, 95), 3),
        "p99_ms": round(percentile(times, 99), 3),
        "mean_ms": round(sum(times) / max(len(times), 1), 3),
    }


def _peak_gib() -> float | None:
    from benchmarks.lib.workload import peak_kib

    peak = peak_kib()
    return round(peak / 1024 / 1024, 3) if peak else None


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _plan(spec: dict[str, Any]) -> Any:
    from benchmarks.lib import Dataset
    from benchmarks.lib.synth import plan_catalog

    return plan_catalog([Dataset(Path(p)) for p in spec["datasets"]], int(spec["size"]), seed=int(spec["seed"]))


def work_bm25(spec: dict[str, Any]) -> dict[str, Any]:
    """Generate the catalog, build bm25, time queries and session creation, save."""
    from toolsearch.catalog import Catalog
    from toolsearch.index import ToolIndex
    from toolsearch.session import SessionManager

    queries = json.loads(Path(spec["queries"]).read_text())
    t0 = time.perf_counter()
    plan = _plan(spec)
    catalog = Catalog(plan.tools())
    out: dict[str, Any] = {"tools": len(catalog), "generate_s": round(time.perf_counter() - t0, 1)}
    out["peak_rss_after_catalog_gib"] = _peak_gib()
    t0 = time.perf_counter()
    index = ToolIndex.build(catalog, backend="bm25")
    out["build_s"] = round(time.perf_counter() - t0, 1)
    out["peak_rss_after_build_gib"] = _peak_gib()
    out["queries"] = _latencies(lambda q: index.search(q, K), queries)
    manager = SessionManager(index, max_sessions=SESSION_CREATES + 10)
    ids = [f"s{i}" for i in range(SESSION_CREATES + WARMUP)]
    out["session_create"] = _latencies(manager.create, ids)
    subset = frozenset(catalog.names[:1_000])
    manager_subset = SessionManager(index, max_sessions=SESSION_CREATES + 10)
    out["session_create_1000_allowed"] = _latencies(lambda i: manager_subset.create(i, allowed=subset), ids)
    session = manager.get("s1")
    out["session_search"] = _latencies(lambda q: session.search(q, K), queries[:105])
    folder = Path(spec["save"])
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    index.save(folder)
    out["save_s"] = round(time.perf_counter() - t0, 1)
    out["index_bytes"] = _folder_bytes(folder)
    out["tools_file_bytes"] = (folder / "tools.jsonl").stat().st_size
    out["backend_bytes"] = _folder_bytes(folder / "backend")
    out["peak_rss_gib"] = _peak_gib()
    return out


def work_load(spec: dict[str, Any]) -> dict[str, Any]:
    """Open a saved bm25 index in a fresh process and query it."""
    from toolsearch.index import ToolIndex
    from toolsearch.session import SessionManager

    queries = json.loads(Path(spec["queries"]).read_text())
    t0 = time.perf_counter()
    index = ToolIndex.load(spec["folder"])
    out: dict[str, Any] = {"load_s": round(time.perf_counter() - t0, 3), "peak_rss_after_load_gib": _peak_gib()}
    bounded: dict[str, Any] = {}  # each timed search's result, kept for the comparison with the exact search
    out["queries"] = _latencies(lambda q: bounded.__setitem__(q, index.search(q, K)), queries)
    manager = SessionManager(index)
    out["session_create"] = _latencies(manager.create, [f"s{i}" for i in range(505)])
    out["peak_rss_gib"] = _peak_gib()
    labels = json.loads(Path(spec["labels"]).read_text()) if spec.get("labels") else {}
    exact_index = ToolIndex.load(spec["folder"], max_postings=None)
    exact: dict[str, Any] = {}
    exact_queries = _latencies(lambda q: exact.__setitem__(q, exact_index.search(q, K)), queries)
    out["bound"] = {**_bound_against_exact(bounded, exact, queries, labels), "exact_queries": exact_queries}
    return out


def _labels(datasets: Sequence[Any], queries: Sequence[str], seed: int) -> dict[str, list[str]]:
    """Each sampled query's relevant tools, named as the generated catalog names them (`<dataset>_<name>`)."""
    from benchmarks.lib.workload import cut_query
    from toolsearch.evaluation import load_queries

    wanted, out = set(queries), {}
    for ds in datasets:
        for q in load_queries(ds.queries_path, seed=seed):
            text = cut_query(q.query)  # as sample_queries cuts them
            if text in wanted and text not in out:
                out[text] = [f"{ds.name}_{name}" for name in q.relevant]
    return out


_VARIANT = re.compile(r"_v\d+$")


def _families(names: Sequence[str], real: frozenset[str]) -> list[str]:
    """Hits as the real tools they are or vary (`x_v12` -> `x`), first place kept (a variant shares its schema)."""
    seen = dict.fromkeys(n if n in real else _VARIANT.sub("", n) for n in names)
    return list(seen)


def _bound_against_exact(
    bounded: dict[str, Any], exact: dict[str, Any], queries: Sequence[str], labels: dict[str, list[str]]
) -> dict[str, Any]:
    """How bm25's bound on a query's postings (`max_postings`) changes answers and quality (timed searches' results).

    Quality: nDCG@10 against the data sets' labels, a hit counting as the real tool it is or is a
    variant of (the generated variants share their tool's schema and description), over the
    labelled timed queries, and over those of them that met the bound.
    """
    from toolsearch.evaluation import ndcg_at

    timed = queries[WARMUP:]
    real = frozenset(name for names in labels.values() for name in names)
    over = same_top10 = same_top1 = 0
    quality = {"all": [0.0, 0.0, 0], "over": [0.0, 0.0, 0]}  # bounded sum, exact sum, count
    for q in timed:
        got, want = bounded[q], exact[q].names
        hit = any("most common words" in note for note in got.notes)
        if hit:
            over += 1
            same_top10 += got.names == want
            same_top1 += got.names[:1] == want[:1]
        if q in labels:
            for part in ("all", "over") if hit else ("all",):
                quality[part][0] += ndcg_at(_families(got.names, real), labels[q])
                quality[part][1] += ndcg_at(_families(want, real), labels[q])
                quality[part][2] += 1
    ndcg = {part: {"queries": n, "bounded": round(b / n, 4) if n else None, "exact": round(e / n, 4) if n else None}
            for part, (b, e, n) in quality.items()}
    return {"timed": len(timed), "over": over, "same_top10": same_top10, "same_top1": same_top1, "ndcg": ndcg}


def _base_vectors(spec: dict[str, Any], plan: Any) -> tuple[np.ndarray, Any]:
    """One vector per real tool (embedded, or random), and a query embedder (None for random)."""
    from benchmarks.lib.synth import random_base_vectors

    if spec["vectors"] == "random":
        return random_base_vectors(len(plan.bases), seed=int(spec["seed"])), None
    from toolsearch.embeddings import embed_texts, resolve_embedder, shared_cache
    from toolsearch.text import embedding_text

    embedder = resolve_embedder(None, None)
    cache = shared_cache(spec["cache_dir"]) if spec.get("cache_dir") else shared_cache()
    texts = [embedding_text(t) for t in plan.bases]
    return np.asarray(embed_texts(embedder, texts, cache=cache, progress=False), dtype=np.float32), embedder


def work_vector(spec: dict[str, Any]) -> dict[str, Any]:
    """Derived vectors added directly; search timed without the query embedding; recall vs exact."""
    from benchmarks.lib.synth import derived_vectors
    from toolsearch.backends import vector as vector_module

    queries = json.loads(Path(spec["queries"]).read_text())
    t0 = time.perf_counter()
    plan = _plan(spec)
    bases, embedder = _base_vectors(spec, plan)
    out: dict[str, Any] = {"vectors": spec["vectors"], "base_vectors_s": round(time.perf_counter() - t0, 1)}
    backend = vector_module.create(**spec.get("options", {}))
    # Query rows as a search would embed them (the request, then its clauses), computed up front.
    if embedder is not None:
        query_rows = [backend.query_vectors(q) for q in queries]
    else:
        rng = np.random.default_rng([int(spec["seed"]), 5])
        picks = rng.integers(0, len(bases), len(queries))
        rows = bases[picks] + 0.05 * rng.standard_normal((len(queries), bases.shape[1]), dtype=np.float32)
        query_rows = [r[None, :] / np.linalg.norm(r) for r in rows]
    t0 = time.perf_counter()
    names = plan.names()
    vectors = derived_vectors(plan, bases)
    out["generate_s"] = round(time.perf_counter() - t0, 1)
    out["peak_rss_before_build_gib"] = _peak_gib()
    t0 = time.perf_counter()
    backend.add_vectors(names, vectors)
    out["build_s"] = round(time.perf_counter() - t0, 1)
    out["index_kind"] = backend.kind
    out["peak_rss_after_build_gib"] = _peak_gib()
    del vectors
    gc.collect()
    inner = backend._index.index  # the faiss index under the id map: its list count, for the report
    out["nlist"] = int(getattr(__import__("faiss").downcast_index(inner), "nlist", 0)) or None
    out["nprobe"] = backend.nprobe
    out["search"] = _latencies(lambda rows: backend.search_vectors(rows, K), query_rows)
    out["search_single_row"] = _latencies(lambda rows: backend.search_vectors(rows[:1], K), query_rows)
    # Recall@10 of the index against exact inner-product search over the same vectors (each query's
    # own row), the exact top 10 found chunk by chunk so the million vectors are never held twice.
    sample = np.stack([rows[0] for rows in query_rows[WARMUP : WARMUP + int(spec["recall_queries"])]])
    exact = _exact_top(plan, bases, sample)
    sweep = []
    for nprobe in NPROBE_SWEEP if out["index_kind"] == "ivf" else (backend.nprobe,):
        backend.nprobe = nprobe
        found = [[h.name for h in backend.search_vectors(row[None, :], K).hits] for row in sample]
        recall = float(np.mean([len(set(f) & set(e)) / K for f, e in zip(found, exact, strict=True)]))
        timing = _latencies(lambda rows: backend.search_vectors(rows[:1], K), query_rows)
        sweep.append({"nprobe": nprobe, "recall_at_10": round(recall, 4), **timing})
    backend.nprobe = int(out["nprobe"])
    out["recall_sweep"] = sweep
    out["recall_at_10"] = next(s["recall_at_10"] for s in sweep if s["nprobe"] == backend.nprobe)
    folder = Path(spec["save"])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    backend.save(folder)
    out["save_s"] = round(time.perf_counter() - t0, 1)
    out["index_bytes"] = _folder_bytes(folder)
    shutil.rmtree(folder, ignore_errors=True)
    out["peak_rss_gib"] = _peak_gib()
    return out


def _exact_top(plan: Any, bases: np.ndarray, sample: np.ndarray) -> list[list[str]]:
    from benchmarks.lib.synth import derived_vectors

    best_scores = np.full((len(sample), K), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(sample), K), dtype=np.int64)
    step = 131_072
    for lo in range(0, len(plan), step):
        hi = min(lo + step, len(plan))
        sims = sample @ derived_vectors(plan, bases, lo, hi).T
        scores = np.concatenate([best_scores, sims], axis=1)
        ids = np.concatenate([best_ids, np.broadcast_to(np.arange(lo, hi), sims.shape)], axis=1)
        top = np.argpartition(-scores, K - 1, axis=1)[:, :K]
        best_scores = np.take_along_axis(scores, top, axis=1)
        best_ids = np.take_along_axis(ids, top, axis=1)
    return [[plan.name(int(i)) for i in row] for row in best_ids]


# --- driver -----------------------------------------------------------------------------------


def run(
    datasets: Sequence[Any],
    *,
    sizes: Sequence[int] = (1_000_000,),
    n_queries: int = 300,
    recall_queries: int = 200,
    vectors: str = "derived",
    seed: int = 0,
    work_dir: Path | None = None,
    cache_dir: Path | None = None,
    threads: int | None = None,
    spawn: Callable[..., dict[str, Any]],
    log: Callable[[str], None] | None = None,
    vector_options: dict[str, Any] | None = None,
    parts: Sequence[str] = ("bm25", "vector"),
    resume: bool = False,
) -> dict[str, Any]:
    """Measure bm25 (build, queries, sessions, load) and the vector index (build, search, recall) per size.

    With `resume`, a worker whose result file is already in `work_dir` (from an earlier run over the
    same folder and settings) is not run again: a long run can be finished by a second invocation.
    """
    from benchmarks.lib.workload import sample_queries

    say = log or (lambda message: None)
    started = time.perf_counter()
    own = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="toolsearch-million-")) if work_dir is None else work_dir
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "benchmark": "scale_million",
        "machine": machine_info(),
        "settings": {
            "sizes": list(sizes),
            "queries": n_queries,
            "warmup_queries": WARMUP,
            "recall_queries": recall_queries,
            "vectors": vectors,
            "seed": seed,
            "k": K,
            "threads": threads,
            "session_creates": SESSION_CREATES,
            "vector_options": dict(vector_options or {}),
            "parts": list(parts),
            "resumed": [],
        },
        "targets": TARGETS,
        "results": {},
    }
    try:
        queries = sample_queries(datasets, n_queries, seed=seed)
        qpath = work / "queries.json"
        qpath.write_text(json.dumps(queries))
        (work / "labels.json").write_text(json.dumps(_labels(datasets, queries, seed)))
        common = {"datasets": [str(d.folder) for d in datasets], "seed": seed, "queries": str(qpath),
                  "labels": str(work / "labels.json")}

        def worker(spec: dict[str, Any], label: str) -> dict[str, Any]:
            done = work / f"result-{label}.json"
            if resume and done.is_file():
                report["settings"]["resumed"].append(label)
                say(f"  {label}: result reused from {done}")
                result: dict[str, Any] = json.loads(done.read_text())
                return result
            return spawn(spec, work, label, say, threads)

        for size in sizes:
            row: dict[str, Any] = {}
            save = work / f"bm25-{size}"
            if "bm25" in parts:
                say(f"[{size:,}] bm25: generate, build, {n_queries} queries, sessions, save ...")
                row["bm25"] = worker({"kind": "million-bm25", **common, "size": size, "save": str(save)},
                                     f"million-bm25-{size}")
                say(f"  {_short(row['bm25'])}")
                if "error" not in row["bm25"]:
                    say(f"[{size:,}] bm25: load in a new process + queries ...")
                    row["bm25_load"] = worker({"kind": "million-load", **common, "folder": str(save)},
                                              f"million-load-{size}")
                    say(f"  {_short(row['bm25_load'])}")
                shutil.rmtree(save, ignore_errors=True)
            if "vector" in parts:
                say(f"[{size:,}] vector: {vectors} vectors, build, search, recall ...")
                row["vector"] = worker(
                    {"kind": "million-vector", **common, "size": size, "vectors": vectors,
                     "save": str(work / f"vec-{size}"), "recall_queries": recall_queries,
                     "cache_dir": str(cache_dir) if cache_dir else None, "options": dict(vector_options or {})},
                    f"million-vector-{size}",
                )
                say(f"  {_short(row['vector'])}")
            report["results"][str(size)] = row
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["analysis"] = analyse(report)
    return report


def _short(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error'][:300]}"
    keep = ("build_s", "load_s", "peak_rss_gib", "recall_at_10", "index_bytes")
    parts = [f"{k}={row[k]}" for k in keep if k in row]
    for key in ("queries", "search", "session_create"):
        if key in row:
            q = row[key]
            parts.append(f"{key} p50={q['p50_ms']} ms p95={q.get('p95_ms', '-')} ms p99={q['p99_ms']} ms")
    return ", ".join(parts)


def analyse(report: dict[str, Any]) -> dict[str, Any]:
    sizes = report["settings"]["sizes"]
    row = report["results"].get(str(max(sizes)), {})
    bm25, load, vec = row.get("bm25", {}), row.get("bm25_load", {}), row.get("vector", {})

    def check(value: float | None, limit: float) -> dict[str, Any]:
        return {"value": value, "limit": limit, "met": None if value is None else value <= limit}

    peaks = [r.get("peak_rss_gib") for r in (bm25, load, vec) if r.get("peak_rss_gib") is not None]
    load_100k = report["results"].get("100000", {}).get("bm25_load", {})
    return {
        "largest": max(sizes),
        "targets": {
            "bm25_p50_ms": check((bm25.get("queries") or {}).get("p50_ms"), TARGETS["bm25_p50_ms"]),
            "bm25_p95_ms": check((bm25.get("queries") or {}).get("p95_ms"), TARGETS["bm25_p95_ms"]),
            "bm25_p50_loaded_ms": check((load.get("queries") or {}).get("p50_ms"), TARGETS["bm25_p50_loaded_ms"]),
            "bm25_p95_loaded_ms": check((load.get("queries") or {}).get("p95_ms"), TARGETS["bm25_p95_loaded_ms"]),
            "bm25_load_s": check(load.get("load_s"), TARGETS["bm25_load_s"]),
            "bm25_load_100000_s": check(load_100k.get("load_s"), TARGETS["bm25_load_100000_s"]),
            "vector_p50_ms": check((vec.get("search") or {}).get("p50_ms"), TARGETS["vector_p50_ms"]),
            "peak_rss_gib": check(max(peaks) if peaks else None, TARGETS["peak_rss_gib"]),
            "session_create_ms": check((bm25.get("session_create") or {}).get("p50_ms"), TARGETS["session_create_ms"]),
        },
    }


_TARGET_TEXT = {
    "bm25_p50_ms": "bm25 query p50 ≤ 5 ms, in the process that built the index",
    "bm25_p95_ms": "bm25 query p95 ≤ 15 ms, in the process that built the index",
    "bm25_p50_loaded_ms": "bm25 query p50 ≤ 5 ms, in a fresh process that loaded it",
    "bm25_p95_loaded_ms": "bm25 query p95 ≤ 15 ms, in a fresh process that loaded it",
    "bm25_load_s": "bm25 index load in a new process ≤ 3 s",
    "bm25_load_100000_s": "bm25 index of 100,000 tools: load in a new process ≤ 0.5 s (needs 100000 in --sizes)",
    "vector_p50_ms": "vector search p50 ≤ 10 ms, query embedding excluded",
    "peak_rss_gib": "peak memory ≤ 4 GB (largest of the processes' peak RSS)",
    "session_create_ms": "a session over the index created in ≤ 1 ms (p50)",
}


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _mb(n: Any) -> str:
    return f"{n / 1e6:,.0f} MB" if isinstance(n, int) else "-"


def render_markdown(report: dict[str, Any], command: str) -> str:
    s = report["settings"]
    a = report["analysis"]
    from benchmarks.lib import machine_markdown

    lines = ["# A million tools: bm25 and the vector backend's approximate index", ""]
    lines.append(f"Command: `{command}` (run time {report['elapsed_s'] / 60:.0f} min).")
    if s.get("resumed"):
        lines.append(
            f"Finished with `--resume`: the results of {', '.join(f'`{r}`' for r in s['resumed'])} were written by "
            "the same workers in an earlier invocation over the same work folder and settings (the load average "
            "above is the finishing invocation's; the workers ran under the load of their own time)."
        )
    lines += ["", *machine_markdown(report["machine"])]  # write_report adds the load average at the end
    lines.append("")
    lines += [f"## Targets at {a['largest']:,} tools", "", "| target | measured | verdict |", "|---|---|---|"]
    for key, t in a["targets"].items():
        unit = " GiB" if key.endswith("gib") else " s" if key.endswith("_s") else " ms"
        verdict = "n/a" if t["met"] is None else ("**met**" if t["met"] else "**not met**")
        shown = "-" if t["value"] is None else f"{_f(t['value'], 3)}{unit}"
        lines.append(f"| {_TARGET_TEXT[key]} | {shown} | {verdict} |")
    lines += ["", "## bm25 (tantivy)", ""]
    lines += [
        "| tools | generate s | build s | query p50 / p95 / p99 ms | session.search p50 ms | "
        "session create p50 / p99 ms (all tools; 1,000 allowed) | index on disk (tools.jsonl + backend) | save s | "
        "peak RSS GiB: catalog / build / process | load s (new process) | "
        "after load: query p50 / p95 / p99 ms, peak RSS GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, row in report["results"].items():
        b, ld = row.get("bm25", {}), row.get("bm25_load", {})
        if not b:
            continue
        if "error" in b:
            lines.append(f"| {int(size):,} | error: {b['error'][:200]} |" + " |" * 9)
            continue
        q, sc, sa = b["queries"], b["session_create"], b["session_create_1000_allowed"]
        lq = ld.get("queries", {})
        lines.append(
            f"| {int(size):,} | {_f(b['generate_s'], 1)} | {_f(b['build_s'], 1)} | {_f(q['p50_ms'])} / "
            f"{_f(q.get('p95_ms'))} / {_f(q['p99_ms'])} | {_f(b['session_search']['p50_ms'])} | "
            f"{_f(sc['p50_ms'], 4)} / {_f(sc['p99_ms'], 4)}; "
            f"{_f(sa['p50_ms'], 4)} | {_mb(b['index_bytes'])} ({_mb(b['tools_file_bytes'])} + "
            f"{_mb(b['backend_bytes'])}) | {_f(b['save_s'], 1)} | {_f(b['peak_rss_after_catalog_gib'], 2)} / "
            f"{_f(b['peak_rss_after_build_gib'], 2)} / {_f(b['peak_rss_gib'], 2)} | {_f(ld.get('load_s'), 3)} | "
            f"{_f(lq.get('p50_ms'))} / {_f(lq.get('p95_ms'))} / {_f(lq.get('p99_ms'))}, "
            f"{_f(ld.get('peak_rss_gib'), 2)} |"
        )
    lines += _bound_markdown(report)
    lines += ["", f"## vector backend, {s['vectors']} vectors given directly (search alone)", ""]
    lines += [
        "| tools | index | base vectors s | generate s | build s | search p50 / p99 ms (request + clause rows) | "
        "one row p50 / p99 ms | recall@10 vs exact | index on disk | peak RSS GiB: before build / after build / "
        "process |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, row in report["results"].items():
        v = row.get("vector", {})
        if not v:
            continue
        if "error" in v:
            lines.append(f"| {int(size):,} | error: {v['error'][:200]} |" + " |" * 8)
            continue
        kind = v["index_kind"] + (f", nlist {v['nlist']}, nprobe {v['nprobe']}" if v.get("nlist") else "")
        lines.append(
            f"| {int(size):,} | {kind} | {_f(v['base_vectors_s'], 1)} | {_f(v['generate_s'], 1)} | "
            f"{_f(v['build_s'], 1)} | {_f(v['search']['p50_ms'])} / {_f(v['search']['p99_ms'])} | "
            f"{_f(v['search_single_row']['p50_ms'])} / {_f(v['search_single_row']['p99_ms'])} | "
            f"{_f(v['recall_at_10'], 3)} | {_mb(v['index_bytes'])} | {_f(v['peak_rss_before_build_gib'], 2)} / "
            f"{_f(v['peak_rss_after_build_gib'], 2)} / {_f(v['peak_rss_gib'], 2)} |"
        )
    largest = report["results"].get(str(a["largest"]), {}).get("vector", {})
    if largest.get("recall_sweep") and len(largest["recall_sweep"]) > 1:
        lines += ["", f"Recall and latency by `nprobe` at {a['largest']:,} tools (one query row):", ""]
        lines += ["| nprobe | recall@10 | p50 ms | p99 ms |", "|---|---|---|---|"]
        for r in largest["recall_sweep"]:
            lines.append(f"| {r['nprobe']} | {r['recall_at_10']:.3f} | {_f(r['p50_ms'])} | {_f(r['p99_ms'])} |")
    lines += ["", "## Method", ""]
    lines += [f"- {n}" for n in METHOD_NOTES]
    lines.append("")
    return "\n".join(lines)


def _bound_markdown(report: dict[str, Any]) -> list[str]:
    rows = [(size, row["bm25_load"]["bound"]) for size, row in report["results"].items()
            if "bound" in row.get("bm25_load", {})]
    if not rows:
        return []
    lines = ["", "bm25's bound on a query's work (`max_postings`, default 2,000,000), in the fresh process after load, "
             "against the same index opened with `max_postings=None` (exact):", ""]
    lines += ["| tools | queries over the bound | of those: same top 10 / same top hit | nDCG@10 bounded / exact: "
              "all labelled queries; those over the bound | query p50 / p95 / p99 ms, bounded | the same, exact | "
              "p95 exact / bounded |", "|---|---|---|---|---|---|---|"]
    for size, b in rows:
        over, timed = b["over"], b["timed"]
        q = report["results"][size]["bm25_load"]["queries"]
        e = b["exact_queries"]
        ratio = e["p95_ms"] / q["p95_ms"] if q.get("p95_ms") else None
        nd = b.get("ndcg", {})
        quality = "; ".join(
            f"{_f(nd[part]['bounded'], 3)} / {_f(nd[part]['exact'], 3)} ({nd[part]['queries']})"
            for part in ("all", "over") if nd.get(part, {}).get("queries")
        ) or "-"
        lines.append(
            f"| {int(size):,} | {over} of {timed} | {b['same_top10']} / {b['same_top1']} | {quality} | "
            f"{_f(q['p50_ms'])} / "
            f"{_f(q['p95_ms'])} / {_f(q['p99_ms'])} | {_f(e['p50_ms'])} / {_f(e['p95_ms'])} / {_f(e['p99_ms'])} | "
            f"{_f(ratio, 2)}x |"
        )
    return lines


METHOD_NOTES = (
    "Catalog: the ~6,000 real tools of the data sets (names prefixed by data set), then variants until the size "
    "is reached: a real tool renamed `<name>_v<n>`, its description followed by the first sentence of a randomly "
    "chosen real tool's description, its schema shared with the real tool (benchmarks.lib.synth, seeded). At a "
    "million tools each real tool has about 167 variants, so many tools share most of their words: a harder "
    "ranking workload than a million unrelated tools, whose postings would be shorter.",
    "bm25: `ToolIndex.build(Catalog(tools), backend=\"bm25\")` timed alone; queries are the data sets' real "
    "queries (sampled evenly, up to 1,000 characters) through `ToolIndex.search(q, 10)` after 5 warm-up "
    "queries; sessions are `SessionManager(index).create(id)` (and with a 1,000-tool allowed subset); "
    "`session.search` is a search through a session with every tool allowed. Load = `ToolIndex.load` in a "
    "new process: every stored file's digest is checked, the tool names are read from the name table and a "
    "tool is parsed when a result needs it; `--sizes 100000,1000000` adds the 100,000-tool row that the 0.5 s "
    "load target is judged on. Latency percentiles are over the timed queries (the p95 target is the 95th).",
    "Vector: embedding a million texts on 2 cores would take hours, so the vectors are given directly "
    "(`VectorBackend.add_vectors`) and search is timed alone (`search_vectors`, the query rows embedded "
    "beforehand). With `derived` vectors the ~6,000 real tools are embedded with the default model "
    "(all-MiniLM-L6-v2, cached) and each variant's vector is its real tool's plus 0.3 of its donor's plus "
    "Gaussian noise (standard deviation 0.015 per component), normalised; query rows are the real queries' "
    "embeddings (the request and, for multi-part requests, its clauses, as a search embeds them). `random` "
    "uses random unit vectors for the real tools instead.",
    "Why bm25 slows down with size: a plain query ORs each of its words over six boosted fields, and with ~167 "
    "variants of each real tool a common word's postings hold hundreds of thousands of tools, so the work grows "
    "with the catalog. The words run as a union of plain term queries, which tantivy prunes with block-max WAND "
    "(blocks of postings whose best score cannot reach the top 10 are skipped); the exact-name bonus runs as a "
    "second query over the few tools it can match, and the two are merged into the same ranking a single query "
    "gives (a single query with the bonus in it could not be pruned). Index build, size and session creation do "
    "not limit the latency.",
    "The bound on a query's work: pruning still reads a long request's commonest words, whose postings hold "
    "hundreds of thousands of tools (at a million, \"retrieve\" is in 70% of them), so when a plain query's "
    "words hold more than `max_postings` postings over their fields (2,000,000 by default; the most any request of "
    "the shared data sets holds in its own catalog is 34,610) its commonest words are left out, commonest first, "
    "until the rest is within the bound, and the ranking's notes name them. Those words weigh least in every "
    "score (BM25's idf falls with a word's share of the catalog). The bound's table compares every timed query "
    "with the same index opened with `max_postings=None` in the same process (the exact one second, so its "
    "files are already in the page cache: the comparison favours it), and scores both against the data sets' "
    "labels: nDCG@10 where a hit counts as the real tool it is or is a variant of (a variant shares its tool's "
    "schema and description), over every labelled timed query and over those that met the bound.",
    "Recall@10 = share of the exact top 10 (inner product over every vector, computed chunk by chunk) that "
    "the index returns, for each query's own row, over the recall sample.",
    "Peak RSS = the process's high-water mark (VmHWM) at that point, imports and the generated catalog "
    "included; every row is a fresh process. Index on disk = every file `save` writes.",
    "The machine has 2 cores shared with other work; the load average at the start is shown above, and "
    "latencies under load are higher than on a quiet machine.",
)


def render_summary(report: dict[str, Any]) -> str:
    lines = []
    for key, t in report["analysis"]["targets"].items():
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
        lines.append(f"{_TARGET_TEXT[key]}: {t['value']} -> {verdict}")
    for size, row in report["results"].items():
        for name, r in row.items():
            lines.append(f"{int(size):>9,} {name:10s} {_short(r)}")
    return "\n".join(lines)
