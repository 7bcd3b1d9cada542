"""Speed and footprint at scale: build time, query latency, index size, memory, load time, import time.

A catalog of up to 10,000 tools is pooled from the shared data sets (names prefixed by data set;
variants of real tools fill the gap above the ~6,000 real ones). Every measurement runs in a
fresh subprocess so peak memory and load times are clean: one per backend and catalog size
(build, then timed queries, then save), one per backend that loads the saved index back, a
warm-cache rebuild for the embedding backends, FastMCP's BM25 search transform on the same
catalog and queries, and `import toolsearch` itself. Writes `<out>/<name>.md`, `.json` and
`<name>_latency.png`. With `--million` it measures bm25 and the vector backend's approximate index
at up to a million generated tools instead (benchmarks.lib.million).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
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
    offline_environment,
    percentile,
    resolve_datasets,
    write_report,
)
from benchmarks.lib.workload import (
    WARMUP_QUERIES,
    build_catalog,
    peak_kib,
    reset_peak,
    rss_kib,
    sample_long_queries,
    sample_queries,
    sample_short_queries,
)

__all__ = ["add_arguments", "main", "run"]

HEAVY_MODULES = ("torch", "sentence_transformers", "faiss", "tantivy", "transformers")
K = 10
# Targets from issue #2 (milliseconds / seconds).
TARGETS = {
    "bm25_p50_ms": 2.0,
    "bm25_speedup_vs_fastmcp": 10.0,
    "vector_p50_ms": 30.0,
    "bm25_build_s": 3.0,
    "vector_warm_build_s": 2.0,
    "import_s": 0.3,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli.datasets(parser, "to pool tools and queries from")
    parser.add_argument(
        "--sizes",
        default=None,
        metavar="LIST",
        help="catalog sizes, comma-separated (default 1000,5000,10000; with --million 1000000); the largest gets "
        "the full set of measurements",
    )
    parser.add_argument(
        "--queries", type=int, default=300, metavar="N", help="timed queries per system and size (default 300)"
    )
    parser.add_argument(
        "--fastmcp-queries",
        type=int,
        default=None,
        metavar="N",
        help="timed queries for FastMCP BM25, which is slow at scale (default: same as --queries)",
    )
    cli.backends(parser)
    parser.add_argument("--no-fastmcp", action="store_true", help="skip the FastMCP BM25 peer")
    parser.add_argument(
        "--import-runs",
        type=int,
        default=7,
        metavar="N",
        help="fresh interpreters timing `import toolsearch` (default 7; the median is reported)",
    )
    cli.seed(parser, "the catalog and query samples")
    cli.outputs(parser, "scale")
    cli.cache_dir(
        parser,
        "reuse this embedding cache (development: 'cold' builds are then not cold); "
        "default: a fresh, empty cache per embedding backend",
    )
    cli.threads(parser, "torch/OpenMP threads in every worker (default: the libraries' own choice)")
    parser.add_argument("--work-dir", metavar="DIR", help="keep catalogs and saved indexes here (default: a temp dir)")
    cli.embedders(
        parser,
        "with more than one, the embedding backends run once per embedder (`hybrid@sentence-transformers`) and an "
        "embedder section times model load, query and document embedding, 300-600-character hybrid queries, a fresh "
        "`toolsearch query` process and a cold `toolsearch demo`",
    )
    parser.add_argument(
        "--embed-threads", type=int, default=2, metavar="N",
        help="threads for the document-embedding throughput comparison (default 2)",
    )
    parser.add_argument(
        "--million",
        action="store_true",
        help="bm25 and the vector backend's approximate index at up to a million generated tools: build, size "
        "on disk, peak memory, query p50/p99, session creation, vector recall against exact search "
        "(report name default scale_million; about 30-60 minutes at 1,000,000 on 2 cores)",
    )
    parser.add_argument(
        "--vectors",
        choices=("derived", "random"),
        default="derived",
        help="with --million: variants' vectors derived from the real tools' embeddings (default), or random",
    )
    parser.add_argument(
        "--recall-queries", type=int, default=200, metavar="N",
        help="with --million: queries whose vector recall@10 is measured against exact search (default 200)",
    )
    parser.add_argument(
        "--parts", default="bm25,vector", metavar="LIST",
        help="with --million: which measurements, comma-separated: bm25, vector (default both)",
    )
    parser.add_argument(
        "--resume", action="store_true",
        help="with --million and --work-dir: reuse worker results already in the work folder (finish a long run)",
    )
    parser.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    if getattr(args, "worker", None):
        return _worker(Path(args.worker))
    quiet = bool(getattr(args, "quiet", False))
    datasets = resolve_datasets(args.dataset)
    million = bool(getattr(args, "million", False))
    sizes_text = args.sizes or ("1000000" if million else "1000,5000,10000")
    sizes = sorted({int(s) for s in sizes_text.split(",") if s.strip()})
    if not sizes or sizes[0] < 1:
        raise SystemExit("--sizes needs positive integers, e.g. 1000,5000,10000")
    if million:
        return _main_million(args, datasets, sizes, quiet)
    backends = backend_list(args.backends)
    report = run(
        datasets,
        backends,
        sizes=sizes,
        n_queries=args.queries,
        fastmcp_queries=args.fastmcp_queries,
        fastmcp=not args.no_fastmcp,
        import_runs=args.import_runs,
        seed=args.seed,
        cache_dir=Path(args.cache_dir).resolve() if args.cache_dir else None,
        threads=args.threads,
        work_dir=Path(args.work_dir).resolve() if args.work_dir else None,
        log=None if quiet else log,
        embedders=[e.strip() for e in args.embedders.split(",") if e.strip()],
        embed_threads=args.embed_threads,
    )
    out = Path(args.out)
    plot = None
    if not args.no_plot:
        plot = out / f"{args.name}_latency.png"
        plot_latency(report, plot)
    write_report(out, args.name, report, render_markdown(report, plot), extra=[plot] if plot else [], quiet=quiet)
    print(render_summary(report))
    return 0


def _main_million(args: argparse.Namespace, datasets: Sequence[Any], sizes: list[int], quiet: bool) -> int:
    from benchmarks.lib import command_line
    from benchmarks.lib.million import render_markdown as million_markdown
    from benchmarks.lib.million import render_summary as million_summary
    from benchmarks.lib.million import run as run_million

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or set(parts) - {"bm25", "vector"}:
        raise SystemExit(f"--parts takes bm25 and/or vector, got {args.parts!r}")
    report = run_million(
        datasets,
        sizes=sizes,
        n_queries=args.queries,
        recall_queries=args.recall_queries,
        vectors=args.vectors,
        seed=args.seed,
        work_dir=Path(args.work_dir).resolve() if args.work_dir else None,
        cache_dir=Path(args.cache_dir).resolve() if args.cache_dir else None,
        threads=args.threads,
        spawn=_spawn,
        log=None if quiet else log,
        parts=parts,
        resume=bool(args.resume and args.work_dir),
    )
    name = args.name if args.name != "scale" else "scale_million"
    command = command_line() or "python benchmarks/scale.py --million"
    write_report(Path(args.out), name, report, million_markdown(report, command), quiet=quiet)
    print(million_summary(report))
    return 0


# --- subprocess workers -----------------------------------------------------------------------


def _timed_queries(search: Any, queries: Sequence[str]) -> dict[str, Any]:
    first_ms = None
    for i, q in enumerate(queries[:WARMUP_QUERIES]):
        t0 = time.perf_counter()
        search(q)
        if i == 0:
            first_ms = (time.perf_counter() - t0) * 1000
    latencies = []
    for q in queries[WARMUP_QUERIES:]:
        t0 = time.perf_counter()
        search(q)
        latencies.append((time.perf_counter() - t0) * 1000)
    return {
        "first_query_ms": round(first_ms, 3) if first_ms is not None else None,
        "queries_timed": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 3),
        "p95_ms": round(percentile(latencies, 95), 3),
        "mean_ms": round(sum(latencies) / max(len(latencies), 1), 3),
        "max_ms": round(max(latencies), 3) if latencies else None,
    }


def _fit_queries(index: Any, queries: list[str]) -> list[str]:
    """Cut queries to a backend's own query cap (the regex backend's 200-character pattern limit)."""
    cap = getattr(index.backend, "max_pattern_chars", None)
    if isinstance(cap, int) and cap > 0:
        return [q[:cap].strip() for q in queries]
    return queries


def _searcher(index: Any, out: dict[str, Any]) -> Any:
    """`index.search(q, 10)`; a rejected query is counted in `out["rejected_queries"]`, not raised."""
    from toolsearch._errors import ToolSearchError

    out.setdefault("rejected_queries", 0)

    def search(query: str) -> None:
        try:
            index.search(query, K)
        except ToolSearchError:
            out["rejected_queries"] += 1

    return search


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _worker(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    kind = spec["kind"]
    offline_environment(spec.get("cache_dir"))
    queries = json.loads(Path(spec["queries"]).read_text()) if spec.get("queries") else []
    if spec.get("threads"):
        import importlib.util

        if importlib.util.find_spec("torch") is not None and kind != "fastmcp":
            import torch

            torch.set_num_threads(int(spec["threads"]))
    result: dict[str, Any] = {"kind": kind}
    if kind == "build":
        result.update(_work_build(spec, queries))
    elif kind == "load":
        result.update(_work_load(spec, queries))
    elif kind == "fastmcp":
        result.update(_work_fastmcp(spec, queries))
    elif kind == "embedding":
        result.update(_work_embedding(spec, queries))
    elif kind.startswith("million-"):
        from benchmarks.lib import million

        work = {"million-bm25": million.work_bm25, "million-load": million.work_load,
                "million-vector": million.work_vector}
        result.update(work[kind](spec))
    else:
        raise SystemExit(f"unknown worker kind {kind!r}")
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


def _work_build(spec: dict[str, Any], queries: list[str]) -> dict[str, Any]:
    from toolsearch.index import ToolIndex
    from toolsearch.tools import load_tools

    tools = load_tools(spec["catalog"])
    rss0 = rss_kib()
    reset = reset_peak()
    t0 = time.perf_counter()
    index = ToolIndex.build(tools, backend=spec["backend"], **_embedder_options(spec))
    build_s = time.perf_counter() - t0
    peak_build = peak_kib()
    out: dict[str, Any] = {
        "backend": index.backend_name,
        "options": index.backend.describe(),
        "tools": len(index),
        "build_s": round(build_s, 3),
        "rss_before_mib": _mib(rss0),
        "peak_rss_build_mib": _mib(peak_build),
        "peak_rss_build_delta_mib": _mib(peak_build - rss0) if (peak_build and rss0 and reset) else None,
        "peak_reset": reset,
    }
    kind = getattr(index.backend, "kind", None)
    if isinstance(kind, str):
        out["index_kind"] = kind
    if queries:
        queries = _fit_queries(index, queries)
        cap = getattr(index.backend, "max_pattern_chars", None)
        if isinstance(cap, int):
            out["queries_cut_to_chars"] = cap
        out.update(_timed_queries(_searcher(index, out), queries))
        peak_all = peak_kib()
        out["peak_rss_after_queries_mib"] = _mib(peak_all)
        out["peak_rss_after_queries_delta_mib"] = _mib(peak_all - rss0) if (peak_all and rss0 and reset) else None
    for key in ("short_queries", "long_queries"):
        if spec.get(key):
            # Some of these were searched above (the sets' mix holds short and long requests): their embeddings,
            # cached, would time a lookup.
            getattr(index.backend, "forget_queries", lambda: None)()
            timed = _timed_queries(_searcher(index, out), json.loads(Path(spec[key]).read_text()))
            out[key] = {k: timed[k] for k in ("queries_timed", "p50_ms", "p95_ms", "mean_ms")}
    if spec.get("save"):
        folder = Path(spec["save"])  # an index a run before saved here is replaced by `save` (a link to its files)
        t0 = time.perf_counter()
        index.save(folder)
        out["save_s"] = round(time.perf_counter() - t0, 3)
        out["index_bytes"] = _folder_bytes(folder)
        out["backend_bytes"] = _folder_bytes(folder / "backend") if (folder / "backend").is_dir() else None
    if spec.get("rebuild"):
        # A second build in the same process: models loaded, embedding cache warm.
        t0 = time.perf_counter()
        ToolIndex.build(tools, backend=spec["backend"], **_embedder_options(spec))
        out["rebuild_same_process_s"] = round(time.perf_counter() - t0, 3)
    return out


def _work_load(spec: dict[str, Any], queries: list[str]) -> dict[str, Any]:
    rss0 = rss_kib()
    reset = reset_peak()
    t0 = time.perf_counter()
    from toolsearch.index import ToolIndex

    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = ToolIndex.load(spec["folder"], **_embedder_options(spec, cache=False))
    load_s = time.perf_counter() - t0
    peak = peak_kib()
    out: dict[str, Any] = {
        "backend": index.backend_name,
        "load_s": round(load_s, 3),
        "import_s": round(import_s, 3),
        "peak_rss_load_delta_mib": _mib(peak - rss0) if (peak and rss0 and reset) else None,
    }
    if queries:
        timed = _timed_queries(_searcher(index, out), _fit_queries(index, queries))
        out["first_query_after_load_ms"] = timed["first_query_ms"]
        out["p50_ms_after_load"] = timed["p50_ms"]
        out["p95_ms_after_load"] = timed["p95_ms"]
        peak_all = peak_kib()
        out["peak_rss_after_queries_delta_mib"] = _mib(peak_all - rss0) if (peak_all and rss0 and reset) else None
    return out


def _embedder_options(spec: dict[str, Any], *, cache: bool = True) -> dict[str, Any]:
    """Backend options for the worker's embedder arm (none for the default embedder)."""
    name = spec.get("embedder")
    if not name or name == "numpy":
        return {}
    from toolsearch.embeddings import embedder_for

    options: dict[str, Any] = {"embedder": embedder_for(name)}
    if cache and spec.get("cache_dir"):
        options["cache"] = spec["cache_dir"]
    return options


def _work_embedding(spec: dict[str, Any], queries: list[str]) -> dict[str, Any]:
    """One embedder alone: model load, documents per second (no cache), single-query latency."""
    import contextlib

    from toolsearch.embeddings import embed_queries, embed_texts, embedder_for

    texts = json.loads(Path(spec["texts"]).read_text())
    t0 = time.perf_counter()
    embedder = embedder_for(spec["embedder"])
    embed_queries(embedder, ["warm up"])  # a query: the load includes building the query runtime's graph
    load_s = time.perf_counter() - t0
    threads = int(spec.get("threads") or 0)
    limit: Any = contextlib.nullcontext()
    if threads and spec["embedder"] in ("numpy", "numpy-fp32", "numpy-only"):
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(threads, user_api="blas")
    with limit:
        t0 = time.perf_counter()
        embed_texts(embedder, texts, cache=None, progress=False)
        docs_s = time.perf_counter() - t0
    latencies = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        embed_queries(embedder, [q])
        if i >= WARMUP_QUERIES:
            latencies.append((time.perf_counter() - t0) * 1000)
    return {
        "embedder": spec["embedder"],
        "model_load_s": round(load_s, 3),
        "documents": len(texts),
        "threads": threads or None,
        "documents_s": round(docs_s, 3),
        "documents_per_s": round(len(texts) / docs_s, 1),
        "query_embed_p50_ms": round(percentile(latencies, 50), 3),
        "query_embed_p95_ms": round(percentile(latencies, 95), 3),
    }


def _work_fastmcp(spec: dict[str, Any], queries: list[str]) -> dict[str, Any]:
    from benchmarks.lib.peers import FastMCPBM25Peer
    from toolsearch.tools import load_tools

    tools = load_tools(spec["catalog"])
    peer = FastMCPBM25Peer()
    rss0 = rss_kib()
    reset = reset_peak()
    t0 = time.perf_counter()
    peer.build(tools)
    build_s = time.perf_counter() - t0
    peak = peak_kib()
    out: dict[str, Any] = {
        "tools": len(tools),
        "build_s": round(build_s, 3),
        "peak_rss_build_delta_mib": _mib(peak - rss0) if (peak and rss0 and reset) else None,
    }
    out.update(_timed_queries(lambda q: peer.search(q, K), queries))
    peak_all = peak_kib()
    out["peak_rss_after_queries_delta_mib"] = _mib(peak_all - rss0) if (peak_all and rss0 and reset) else None
    scoring = _timed_queries(lambda q: peer.score_only(q, K), queries)
    out["score_only"] = {k: scoring[k] for k in ("p50_ms", "p95_ms", "mean_ms")}
    peer.close()
    return out


def _mib(kib: int | None) -> float | None:
    return round(kib / 1024, 1) if kib is not None else None


def _spawn(spec: dict[str, Any], work: Path, label: str, log: Any, threads: int | None = None) -> dict[str, Any]:
    """Run one worker in a fresh interpreter; returns its result or an `error` entry."""
    spec_path = work / f"spec-{label}.json"
    result_path = work / f"result-{label}.json"
    spec["result"] = str(result_path)
    spec_path.write_text(json.dumps(spec))
    if result_path.exists():
        result_path.unlink()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env["TQDM_DISABLE"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        spec["threads"] = threads
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not result_path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        log(f"  {label}: FAILED (exit {proc.returncode})\n    " + "\n    ".join(tail))
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[-800:], "wall_s": round(wall, 1)}
    result: dict[str, Any] = json.loads(result_path.read_text())
    result["wall_s"] = round(wall, 1)
    return result


def _measure_import(runs: int) -> dict[str, Any]:
    code = (
        "import sys, time, json\n"
        "t = time.perf_counter()\n"
        "import toolsearch\n"
        "dt = time.perf_counter() - t\n"
        f"heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
        "print(json.dumps({'s': dt, 'heavy': heavy, 'modules': len(sys.modules)}))\n"
    )
    times: list[float] = []
    heavy: set[str] = set()
    modules = 0
    for _ in range(max(runs, 1)):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        times.append(data["s"])
        heavy.update(data["heavy"])
        modules = data["modules"]
    return {
        "runs": len(times),
        "median_s": round(percentile(times, 50), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "heavy_modules_loaded": sorted(heavy),
        "modules_after_import": modules,
    }


# --- driver -----------------------------------------------------------------------------------


_EMBEDDING_BACKENDS = ("vector", "hybrid")


def run(
    datasets: Sequence[Any],
    backends: Sequence[str],
    *,
    sizes: Sequence[int] = (1000, 5000, 10000),
    n_queries: int = 300,
    fastmcp_queries: int | None = None,
    fastmcp: bool = True,
    import_runs: int = 7,
    seed: int = 0,
    cache_dir: Path | None = None,
    threads: int | None = None,
    work_dir: Path | None = None,
    log: Any = None,
    embedders: Sequence[str] = ("numpy",),
    embed_threads: int = 2,
) -> dict[str, Any]:
    """Measure every backend (and FastMCP BM25) at every size; returns the JSON-able report."""
    from toolsearch.tools import Tool

    log = log or (lambda message: None)
    started = time.perf_counter()
    own_work = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="toolsearch-scale-")) if work_dir is None else work_dir
    work.mkdir(parents=True, exist_ok=True)
    largest = max(sizes)
    report: dict[str, Any] = {
        "benchmark": "scale",
        "machine": machine_info(),
        "settings": {
            "sizes": list(sizes),
            "queries": n_queries,
            "warmup_queries": WARMUP_QUERIES,
            "fastmcp_queries": fastmcp_queries or n_queries,
            "backends": list(backends),
            "seed": seed,
            "k": K,
            "embedding_cache": str(cache_dir) if cache_dir else "fresh per embedding backend",
            "threads": threads,
            "embedders": list(embedders),
        },
        "targets": TARGETS,
    }
    systems = [
        (b, arm, b if arm == "numpy" else f"{b}@{arm}")
        for b in backends
        for arm in (embedders if b in _EMBEDDING_BACKENDS else ["numpy"])
    ]
    try:
        catalog, catalog_info = build_catalog(datasets, largest, seed=seed)
        report["catalog"] = catalog_info
        queries = sample_queries(datasets, n_queries, seed=seed)
        queries_path = work / "queries.json"
        queries_path.write_text(json.dumps(queries))
        fq_path = work / "queries-fastmcp.json"
        fq_path.write_text(json.dumps(queries[: (fastmcp_queries or n_queries) + WARMUP_QUERIES]))
        log(f"catalog: {catalog_info}; {len(queries) - WARMUP_QUERIES} timed queries (+{WARMUP_QUERIES} warm-up)")

        log("import toolsearch ...")
        report["import"] = _measure_import(import_runs)
        log(f"  import: {report['import']}")

        long_path = work / "queries-long.json"
        long_queries = sample_long_queries(datasets, n_queries, seed=seed)
        long_path.write_text(json.dumps(long_queries))
        short_path = work / "queries-short.json"
        short_path.write_text(json.dumps(sample_short_queries(datasets, n_queries, seed=seed)))

        caches: dict[str, str] = {}
        for _, _, label in systems:
            if cache_dir is not None:
                caches[label] = str(cache_dir)
            else:
                caches[label] = str(work / f"cache-{label}")
                shutil.rmtree(caches[label], ignore_errors=True)

        results: dict[str, dict[str, Any]] = {}
        # Largest first: its builds are the cold ones; smaller catalogs are subsets and reuse caches.
        for size in sorted(sizes, reverse=True):
            subset: list[Tool] = catalog[:size]
            cat_path = work / f"catalog-{size}.jsonl"
            with cat_path.open("w", encoding="utf-8") as fh:
                for t in subset:
                    fh.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")
            per_size: dict[str, Any] = {}
            for b, arm, system in systems:
                label = f"{system}-{size}"
                log(f"[{size}] {system}: build + {n_queries} queries ...")
                save_dir = work / f"index-{label}"
                spec = {
                    "kind": "build",
                    "backend": b,
                    "embedder": arm,
                    "catalog": str(cat_path),
                    "queries": str(queries_path),
                    "long_queries": str(long_path) if b == "hybrid" and size == largest else None,
                    "short_queries": str(short_path) if b == "hybrid" and size == largest else None,
                    "cache_dir": caches[system],
                    "save": str(save_dir),
                    "rebuild": size == largest,
                }
                row = _spawn(spec, work, label, log, threads)
                row["embedding_cache"] = (
                    "n/a"
                    if b not in _EMBEDDING_BACKENDS
                    else ("given" if cache_dir else ("cold" if size == largest else "warm"))
                )
                _log_row(log, size, system, row)
                if size == largest and "error" not in row:
                    if b in _EMBEDDING_BACKENDS:
                        log(f"[{size}] {system}: warm-cache build in a new process ...")
                        warm = _spawn(
                            {**spec, "queries": None, "long_queries": None, "short_queries": None, "save": None,
                             "rebuild": False},
                            work,
                            f"{label}-warm",
                            log,
                            threads,
                        )
                        row["warm_build_s"] = warm.get("build_s")
                        row["warm_build_peak_rss_delta_mib"] = warm.get("peak_rss_build_delta_mib")
                        log(f"  warm build {row['warm_build_s']} s")
                    log(f"[{size}] {system}: load from disk + queries ...")
                    loaded = _spawn(
                        {"kind": "load", "folder": str(save_dir), "queries": str(queries_path),
                         "cache_dir": caches[system], "embedder": arm},
                        work,
                        f"{label}-load",
                        log,
                        threads,
                    )
                    row["load"] = loaded
                    log(f"  load {loaded.get('load_s')} s, first query {loaded.get('first_query_after_load_ms')} ms")
                per_size[system] = row
                if size != largest:
                    shutil.rmtree(save_dir, ignore_errors=True)
            if fastmcp:
                log(f"[{size}] fastmcp-bm25: build + {fastmcp_queries or n_queries} queries ...")
                row = _spawn(
                    {"kind": "fastmcp", "catalog": str(cat_path), "queries": str(fq_path)},
                    work,
                    f"fastmcp-{size}",
                    log,
                    threads,
                )
                _log_row(log, size, "fastmcp-bm25", row)
                per_size["fastmcp-bm25"] = row
            results[str(size)] = per_size
        report["results"] = {str(s): results[str(s)] for s in sorted(sizes)}
        if list(embedders) != ["numpy"]:
            from benchmarks.lib.embedders import compare_embedders

            report["embedders"] = compare_embedders(
                embedders, catalog, queries, work, threads=embed_threads, spawn=_spawn, log=log
            )
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["analysis"] = analyse(report)
    return report


def _log_row(log: Any, size: int, name: str, row: dict[str, Any]) -> None:
    if "error" in row:
        return
    log(
        f"  {name} @ {size}: build {row.get('build_s')} s, p50 {row.get('p50_ms')} ms, p95 {row.get('p95_ms')} ms, "
        f"size {row.get('index_bytes')} B, peak +{row.get('peak_rss_build_delta_mib')} MiB (wall {row.get('wall_s')} s)"
    )


# --- analysis and rendering -------------------------------------------------------------------


def analyse(report: dict[str, Any]) -> dict[str, Any]:
    largest = str(max(report["settings"]["sizes"]))
    rows = report.get("results", {}).get(largest, {})
    fm = rows.get("fastmcp-bm25", {})
    fm_p50 = fm.get("p50_ms")
    fm_score_p50 = (fm.get("score_only") or {}).get("p50_ms")
    speedups: dict[str, Any] = {}
    for name, row in rows.items():
        if name == "fastmcp-bm25" or "p50_ms" not in row:
            continue
        p50 = row["p50_ms"]
        speedups[name] = {
            "vs_fastmcp_search": round(fm_p50 / p50, 1) if fm_p50 and p50 else None,
            "vs_fastmcp_scoring_only": round(fm_score_p50 / p50, 1) if fm_score_p50 and p50 else None,
        }

    def check(value: float | None, limit: float, *, at_least: bool = False) -> dict[str, Any]:
        if value is None:
            return {"value": None, "limit": limit, "met": None}
        return {"value": value, "limit": limit, "met": value >= limit if at_least else value <= limit}

    bm25 = rows.get("bm25", {})
    vector = rows.get("vector", {})
    imp = report.get("import", {})
    bm25_speed = speedups.get("bm25", {})
    # The conservative speed-up: against FastMCP's scoring alone (its full search call costs more).
    speed = bm25_speed.get("vs_fastmcp_scoring_only") or bm25_speed.get("vs_fastmcp_search")
    targets = {
        "bm25_p50_ms": check(bm25.get("p50_ms"), TARGETS["bm25_p50_ms"]),
        "bm25_speedup_vs_fastmcp": check(speed, TARGETS["bm25_speedup_vs_fastmcp"], at_least=True),
        "vector_p50_ms": check(vector.get("p50_ms"), TARGETS["vector_p50_ms"]),
        "bm25_build_s": check(bm25.get("build_s"), TARGETS["bm25_build_s"]),
        "vector_warm_build_s": check(vector.get("warm_build_s"), TARGETS["vector_warm_build_s"]),
        "import_s": check(imp.get("median_s"), TARGETS["import_s"]),
        "import_loads_no_heavy_modules": {
            "value": imp.get("heavy_modules_loaded"),
            "met": (not imp.get("heavy_modules_loaded")) if imp else None,
        },
    }
    return {"largest": int(largest), "speedups": speedups, "targets": targets}


_TARGET_TEXT = {
    "bm25_p50_ms": "bm25 query p50 ≤ 2 ms",
    "bm25_speedup_vs_fastmcp": "bm25 ≥ 10x faster than FastMCP BM25 (p50; against its scoring alone)",
    "vector_p50_ms": "vector query p50 ≤ 30 ms, query embedding included",
    "bm25_build_s": "bm25 build ≤ 3 s",
    "vector_warm_build_s": "vector build with a warm embedding cache ≤ 2 s (new process)",
    "import_s": "`import toolsearch` ≤ 0.3 s (median of fresh interpreters)",
    "import_loads_no_heavy_modules": "`import toolsearch` loads none of torch, sentence-transformers, faiss, tantivy",
}


def _fmt(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"


def render_markdown(report: dict[str, Any], plot: Path | None = None) -> str:
    settings = report["settings"]
    analysis = report["analysis"]
    largest = str(analysis["largest"])
    rows = report["results"][largest]
    cat = report["catalog"]
    lines = ["# Speed and scale benchmark", ""]
    lines.append(
        f"Catalog: {cat['size']:,} tools pooled from {', '.join(f'{k} ({v:,})' for k, v in cat['pool'].items())}, "
        f"names prefixed by data set; {cat['real_tools']:,} real tools and {cat['variants']:,} variants (a real "
        f"tool renamed `_v<n>` with one sentence of another tool's description appended). Smaller sizes are "
        f"prefixes of the same shuffled catalog. {settings['queries']} timed queries per system "
        f"({settings['fastmcp_queries']} for FastMCP), sampled evenly from the data sets' queries, after "
        f"{WARMUP_QUERIES} warm-up queries, k={settings['k']}, one at a time through `ToolIndex.search`. "
        f"Every row is a fresh subprocess. Embedding cache: {settings['embedding_cache']}. "
        + (f"Threads forced to {settings['threads']}. " if settings.get("threads") else "")
        + f"Run time {report.get('elapsed_s', 0):.0f} s."
    )
    lines += ["", *machine_markdown(report["machine"]), ""]

    lines += [f"## Targets (issue #2), {int(largest):,} tools", ""]
    lines += ["| target | measured | verdict |", "|---|---|---|"]
    for key, t in analysis["targets"].items():
        value = t["value"]
        if isinstance(value, list):
            shown = ", ".join(value) if value else "none"
        elif key.endswith("_ms"):
            shown = _fmt(value, 2, " ms")
        elif key.endswith("_s"):
            shown = _fmt(value, 3, " s")
        else:
            shown = _fmt(value, 1, "x")
        verdict = "n/a" if t["met"] is None else ("**met**" if t["met"] else "**not met**")
        lines.append(f"| {_TARGET_TEXT.get(key, key)} | {shown} | {verdict} |")
    lines.append("")

    lines += [f"## At {int(largest):,} tools", ""]
    lines += [
        "| system | build s | warm-cache build s (new process) | rebuild s (same process) | query p50 ms | p95 ms | "
        "mean ms | p50 speed-up vs FastMCP (search / scoring only) | index on disk | peak RSS Δ MiB: build / "
        "build + queries | load s | first query after load ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | error: {row['error'][:120]} |" + " |" * 10)
            continue
        if name == "fastmcp-bm25":
            so = row.get("score_only", {})
            lines.append(
                f"| peer: fastmcp-bm25 (search call; scoring only: p50 {_fmt(so.get('p50_ms'))}, "
                f"p95 {_fmt(so.get('p95_ms'))}) | {_fmt(row.get('build_s'), 3)} | - | - | {_fmt(row.get('p50_ms'))} | "
                f"{_fmt(row.get('p95_ms'))} | {_fmt(row.get('mean_ms'))} | 1x | (in memory) | "
                f"{_fmt(row.get('peak_rss_build_delta_mib'), 1)} / "
                f"{_fmt(row.get('peak_rss_after_queries_delta_mib'), 1)} | - | - |"
            )
            continue
        sp = analysis["speedups"].get(name, {})
        load = row.get("load", {})
        kind = f" ({row['index_kind']})" if row.get("index_kind") else ""
        if row.get("queries_cut_to_chars"):
            kind += f", queries cut to {row['queries_cut_to_chars']} chars"
        if row.get("rejected_queries"):
            kind += f", {row['rejected_queries']} queries rejected"
        lines.append(
            f"| {name}{kind} | {_fmt(row.get('build_s'), 3)} | {_fmt(row.get('warm_build_s'), 3)} | "
            f"{_fmt(row.get('rebuild_same_process_s'), 3)} | {_fmt(row.get('p50_ms'))} | {_fmt(row.get('p95_ms'))} | "
            f"{_fmt(row.get('mean_ms'))} | {_fmt(sp.get('vs_fastmcp_search'), 1, 'x')} / "
            f"{_fmt(sp.get('vs_fastmcp_scoring_only'), 1, 'x')} | {_size(row.get('index_bytes'))} | "
            f"{_fmt(row.get('peak_rss_build_delta_mib'), 1)} / {_fmt(row.get('peak_rss_after_queries_delta_mib'), 1)}"
            f" | {_fmt(load.get('load_s'), 3)} | "
            f"{_fmt(load.get('first_query_after_load_ms'), 1)} |"
        )
    lines.append("")

    lines += ["## Query latency by catalog size (p50 / p95 ms)", ""]
    sizes = [str(s) for s in settings["sizes"]]
    names = list(rows)
    lines += ["| system | " + " | ".join(f"{int(s):,}" for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name in names:
        cells = []
        for s in sizes:
            row = report["results"].get(s, {}).get(name, {})
            cells.append(f"{_fmt(row.get('p50_ms'))} / {_fmt(row.get('p95_ms'))}" if "p50_ms" in row else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    fm_rows = [report["results"].get(s, {}).get("fastmcp-bm25", {}) for s in sizes]
    if any("score_only" in r for r in fm_rows):
        cells = [
            f"{_fmt(r['score_only'].get('p50_ms'))} / {_fmt(r['score_only'].get('p95_ms'))}"
            if "score_only" in r
            else "-"
            for r in fm_rows
        ]
        lines.append("| fastmcp-bm25, scoring only | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [
        "Build seconds by size (embedding backends: the largest size is built with a cold cache, smaller "
        "ones reuse it):",
        "",
    ]
    lines += ["| system | " + " | ".join(f"{int(s):,}" for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name in names:
        cells = [_fmt(report["results"].get(s, {}).get(name, {}).get("build_s"), 3) for s in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    if plot is not None:
        lines += [f"![query latency vs catalog size]({plot.name})", ""]

    imp = report.get("import", {})
    if imp:
        lines += ["## `import toolsearch`", ""]
        lines.append(
            f"Median {_fmt(imp.get('median_s'), 3)} s (min {_fmt(imp.get('min_s'), 3)}, max "
            f"{_fmt(imp.get('max_s'), 3)}) over {imp.get('runs')} fresh interpreters; "
            f"{imp.get('modules_after_import')} "
            f"modules in `sys.modules` afterwards; heavy modules loaded: "
            f"{', '.join(imp.get('heavy_modules_loaded') or []) or 'none'} (checked: {', '.join(HEAVY_MODULES)})."
        )
        lines.append("")

    if report.get("embedders"):
        from benchmarks.lib.embedders import render_markdown as embedder_markdown

        lines += embedder_markdown(report)
    lines += ["## Method", ""]
    lines += [f"- {line}" for line in METHOD_NOTES]
    lines.append("")
    return "\n".join(lines)


METHOD_NOTES = (
    "Build = `ToolIndex.build(tools, backend=name)` in a fresh interpreter, timed from the call to its return "
    "(imports of the backend's libraries and, for vector/hybrid, loading the model and embedding every tool "
    "are inside it). The cold build of an embedding backend starts from an empty embedding cache; the warm "
    "build repeats it in another fresh interpreter with that cache filled; the same-process rebuild repeats it "
    "with the model already loaded.",
    "Latency = wall time of `index.search(query, 10)` per query, after 5 warm-up queries, queries distinct so "
    "a query-vector cache cannot help; vector and hybrid embed each query inside the call.",
    "FastMCP BM25 = `BM25SearchTransform._search` (what its `search_tools` tool runs per call: catalog hash, "
    "lazy build, scoring) over `fastmcp.tools.Tool` objects; 'scoring only' times its `_BM25Index.query` "
    "alone. The speed-up target is judged against scoring only, the smaller of the two.",
    "Peak RSS Δ = the kernel's peak resident set (VmHWM, reset through /proc/self/clear_refs just before the "
    "build) minus the resident set before the build, in the worker process; library imports made by the build "
    "(torch, faiss, tantivy) count towards it.",
    "Index on disk = every file `index.save(folder)` writes (manifest, tools, backend files). Load = "
    "`ToolIndex.load(folder)` in a fresh interpreter; the first query after it includes any lazy model load.",
    "The machine has 2 cores shared with other work; figures vary with load (the load average at start is "
    "shown above).",
)


def render_summary(report: dict[str, Any]) -> str:
    lines = []
    largest = str(report["analysis"]["largest"])
    for name, row in report["results"][largest].items():
        if "error" in row:
            lines.append(f"{name:14s} ERROR {row['error'][:100]}")
            continue
        lines.append(
            f"{name:14s} build {_fmt(row.get('build_s'), 3)} s  p50 {_fmt(row.get('p50_ms'))} ms  "
            f"p95 {_fmt(row.get('p95_ms'))} ms  size {_size(row.get('index_bytes'))}"
        )
    for key, t in report["analysis"]["targets"].items():
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
        lines.append(f"{_TARGET_TEXT.get(key, key)}: {t['value']} -> {verdict}")
    if report.get("embedders"):
        from benchmarks.lib.embedders import analyse as embedder_targets

        for key, t in embedder_targets(report).items():
            verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
            lines.append(f"issue 14 {key}: {t['value']} -> {verdict}")
    return "\n".join(lines)


def plot_latency(report: dict[str, Any], path: Path) -> None:
    """p50 latency vs catalog size, log-log, one line per system, with the issue's latency targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    sizes = sorted(int(s) for s in report["results"])
    names: list[str] = []
    for s in sizes:
        for n in report["results"][str(s)]:
            if n not in names:
                names.append(n)
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    series: list[tuple[str, str, str]] = [(n, "p50_ms", n) for n in names]
    if any("score_only" in report["results"][str(s)].get("fastmcp-bm25", {}) for s in sizes):
        series.append(("fastmcp-bm25", "score_only", "fastmcp-bm25 (scoring only)"))
    colors: dict[str, str] = {}
    for name, key, label in series:
        xs, p50 = [], []
        for s in sizes:
            row = report["results"][str(s)].get(name, {})
            value = row.get("score_only", {}).get("p50_ms") if key == "score_only" else row.get(key)
            if value is None:
                continue
            xs.append(s)
            p50.append(value)
        if not xs:
            continue
        style = (":" if key == "score_only" else "--") if name == "fastmcp-bm25" else "-"
        color = colors.setdefault(name, f"C{len(colors)}")
        ax.plot(xs, p50, style, marker="o", label=label, color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("tools in the catalog")
    ax.set_ylabel("query latency p50, ms (p95 in the report)")
    for limit, text in ((TARGETS["bm25_p50_ms"], "bm25 target"), (TARGETS["vector_p50_ms"], "vector target")):
        ax.axhline(limit, color="grey", lw=0.8, ls=":")
        ax.annotate(
            f"{text} {limit:g} ms",
            (sizes[0], limit),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize=7,
            color="grey",
        )
    ax.set_title("Query latency vs catalog size (lower is better)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


if __name__ == "__main__":  # a run, and the subprocess workers (`--worker SPEC`)
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
