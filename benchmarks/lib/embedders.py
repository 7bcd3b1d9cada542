"""The embedder section of `bench scale`: numpy MiniLM against sentence-transformers, side by side in one run.

Each measurement runs in fresh processes: model load, document embedding throughput on a fixed
number of threads (no cache), single-query embedding latency, the wall and CPU time of a search
at the largest size, `toolsearch demo` from a cold cache, and a fresh `toolsearch query` process
on the demo's hybrid index (wall time, query included). The scale rows
`vector@sentence-transformers` / `hybrid@sentence-transformers` give search latency with query
embedding included; this module also renders the issue #14 targets.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["TARGETS", "compare_embedders", "analyse", "render_markdown"]

# Issue #14 (milliseconds / seconds / ratios).
TARGETS = {
    "vector_p50_ms": 10.0,
    "hybrid_p50_ms": 15.0,
    "hybrid_long_p50_ms": 25.0,
    "fresh_query_process_s": 1.0,
    "document_throughput_ratio": 0.8,
}
DOCUMENTS = 300
QUERIES = 40
FRESH_RUNS = 3
DEMO_QUERY = "send an email with an attachment"


def compare_embedders(
    embedders: Sequence[str],
    catalog: Sequence[Any],
    queries: Sequence[str],
    work: Path,
    *,
    threads: int,
    spawn: Callable[..., dict[str, Any]],
    log: Any,
) -> dict[str, Any]:
    from toolsearch.text import embedding_text

    texts_path = work / "embed-texts.json"
    texts_path.write_text(json.dumps([embedding_text(t) for t in catalog[:DOCUMENTS]]))
    queries_path = work / "embed-queries.json"
    queries_path.write_text(json.dumps(list(queries[: QUERIES + 5])))
    out: dict[str, Any] = {"documents": DOCUMENTS, "threads": threads, "per_embedder": {}}
    for name in embedders:
        log(f"embedder {name}: load, {DOCUMENTS} documents on {threads} threads, {QUERIES} queries ...")
        spec = {"kind": "embedding", "embedder": name, "texts": str(texts_path), "queries": str(queries_path),
                "threads": threads}
        row = spawn(spec, work, f"embed-{name}", log, threads)
        log(f"  {row}")
        out["per_embedder"][name] = row
    log(f"search cost at {len(catalog):,} tools: wall and CPU time per search, a fresh process per row ...")
    out["search_cost"] = _search_cost(work, embedders, len(catalog), log)
    log("toolsearch demo from a cold cache, then fresh `toolsearch query` processes ...")
    out["cli"] = _cli(work, embedders)
    log(f"  {out['cli']}")
    return out


# Wall time on a shared machine measures the machine's load as much as the search; the CPU time
# a search costs (every thread of the process) does not wait for the scheduler.
_SEARCH_COST = """
import json, os, sys, time
from toolsearch import ToolIndex
from toolsearch.embeddings import embedder_for
folder, arm, *paths = sys.argv[1:]
index = ToolIndex.load(folder, **({} if arm == "numpy" else {"embedder": embedder_for(arm)}))
index.backend.warm()
out = {"load_average": list(os.getloadavg())}
for label, path in zip(("short", "long"), paths):
    queries = json.load(open(path))
    getattr(index.backend, "forget_queries", lambda: None)()  # no embedding cached from the set before
    for query in queries[:5]:
        index.search(query, 10)
    walls, cpus = [], []
    for query in queries[5:]:
        w0, c0 = time.perf_counter(), time.process_time()
        index.search(query, 10)
        cpus.append((time.process_time() - c0) * 1000)
        walls.append((time.perf_counter() - w0) * 1000)
    walls.sort()
    cpus.sort()
    out[label] = {"queries": len(walls), "wall_p50_ms": walls[len(walls) // 2], "cpu_p50_ms": cpus[len(cpus) // 2],
                  "cpu_p95_ms": cpus[int(0.95 * (len(cpus) - 1))]}
print(json.dumps(out))
"""


def _search_cost(work: Path, embedders: Sequence[str], size: int, log: Any) -> dict[str, Any]:
    """Per backend and embedder: the saved index at `size` tools, searched in a fresh process with
    the scale run's requests under 300 characters (and, for hybrid, its 300-600-character ones); wall and CPU p50."""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    out: dict[str, Any] = {}
    for backend in ("vector", "hybrid"):
        for arm in embedders:
            system = backend if arm == "numpy" else f"{backend}@{arm}"
            folder = work / f"index-{system}-{size}"
            if not folder.is_dir():
                continue
            short = work / "queries-short.json"  # under 300 characters (a run before it existed: the sets' mix)
            paths = [str(short if short.is_file() else work / "queries.json")]
            paths += [str(work / "queries-long.json")] if backend == "hybrid" else []
            _, proc = _run([sys.executable, "-c", _SEARCH_COST, str(folder), arm, *paths], env)
            if proc.returncode != 0:
                out[system] = {"error": proc.stderr.strip()[-400:]}
            else:
                out[system] = json.loads(proc.stdout.strip().splitlines()[-1])
            log(f"  {system}: {out[system]}")
    return out


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    return time.perf_counter() - t0, proc


_ST_QUERY = """
import json, sys, time
from toolsearch import ToolIndex
from toolsearch.embeddings import SentenceTransformerEmbedder
t0 = time.perf_counter()
index = ToolIndex.load(sys.argv[1], embedder=SentenceTransformerEmbedder("default"))
index.backend.warm()
load_ms = (time.perf_counter() - t0) * 1000
result = index.search(sys.argv[2], 5)
print(json.dumps({"load_ms": load_ms, "elapsed_ms": result.elapsed_ms, "hits": result.names}))
"""


def _cli(work: Path, embedders: Sequence[str]) -> dict[str, Any]:
    env = {**os.environ, "TOOLSEARCH_CACHE_DIR": str(work / "cli-embedding-cache"), "TQDM_DISABLE": "1"}
    demo_dir = work / "cli-demo"
    wall, proc = _run([sys.executable, "-m", "toolsearch", "demo", "--cache-dir", str(demo_dir)], env)
    out: dict[str, Any] = {"demo_cold_s": round(wall, 2), "demo_exit": proc.returncode}
    if proc.returncode != 0:
        out["demo_error"] = proc.stderr.strip()[-400:]
        return out
    _, listed = _run([sys.executable, "-m", "toolsearch", "--root", str(demo_dir), "list", "--json"], env)
    names = [row["name"] for row in json.loads(listed.stdout or "{}").get("indexes", [])]
    if not names:
        out["query_error"] = f"no demo index in {demo_dir}: {listed.stderr.strip()[-200:]}"
        return out
    folder = demo_dir / names[0]
    wall, proc = _run([sys.executable, "-m", "toolsearch", "demo", "--cache-dir", str(demo_dir)], env)
    out["demo_warm_s"] = round(wall, 2)
    fresh: dict[str, Any] = {}
    arms: list[tuple[str, list[str]]] = [
        ("numpy", [sys.executable, "-m", "toolsearch", "query", str(folder), DEMO_QUERY, "--json"])
    ]
    if "sentence-transformers" in embedders:
        arms.append(("sentence-transformers", [sys.executable, "-c", _ST_QUERY, str(folder), DEMO_QUERY]))
    for arm, cmd in arms:
        walls: list[float] = []
        loads: list[float] = []
        searches: list[float] = []
        hits: list[str] = []
        for _ in range(FRESH_RUNS):
            wall, proc = _run(cmd, env)
            if proc.returncode != 0:
                fresh[arm] = {"error": proc.stderr.strip()[-400:]}
                break
            data = json.loads(proc.stdout)
            walls.append(wall)
            loads.append(data["load_ms"])
            searches.append(data["elapsed_ms"])
            hits = data["hits"] if arm != "numpy" else [h["name"] for h in data["hits"]]
        else:
            fresh[arm] = {
                "runs": FRESH_RUNS,
                "wall_s_median": round(statistics.median(walls), 3),
                "wall_s_min": round(min(walls), 3),
                "index_and_model_load_ms_median": round(statistics.median(loads), 1),
                "search_ms_median": round(statistics.median(searches), 2),
                "hits": hits,
                "command": "toolsearch query INDEX QUERY --json" if arm == "numpy"
                else "python: ToolIndex.load(..., embedder=SentenceTransformerEmbedder()); warm; search",
            }
    out["fresh_query_process"] = fresh
    return out


def analyse(report: dict[str, Any]) -> dict[str, Any]:
    """The issue #14 targets, from the scale rows at the largest size and the embedder section."""
    section = report.get("embedders") or {}
    largest = str(max(report["settings"]["sizes"]))
    rows = report.get("results", {}).get(largest, {})
    per = section.get("per_embedder", {})
    numpy_docs = per.get("numpy", {}).get("documents_per_s")
    st_docs = per.get("sentence-transformers", {}).get("documents_per_s")
    fresh = (section.get("cli") or {}).get("fresh_query_process", {}).get("numpy", {})

    def check(value: float | None, limit: float, *, at_least: bool = False) -> dict[str, Any]:
        if value is None:
            return {"value": None, "limit": limit, "met": None}
        return {"value": value, "limit": limit, "met": value >= limit if at_least else value <= limit}

    return {
        "vector_p50_ms": check(rows.get("vector", {}).get("p50_ms"), TARGETS["vector_p50_ms"]),
        "hybrid_p50_ms": check(rows.get("hybrid", {}).get("p50_ms"), TARGETS["hybrid_p50_ms"]),
        "hybrid_long_p50_ms": check(
            (rows.get("hybrid", {}).get("long_queries") or {}).get("p50_ms"), TARGETS["hybrid_long_p50_ms"]
        ),
        "fresh_query_process_s": check(fresh.get("wall_s_median"), TARGETS["fresh_query_process_s"]),
        "document_throughput_ratio": check(
            round(numpy_docs / st_docs, 3) if numpy_docs and st_docs else None,
            TARGETS["document_throughput_ratio"],
            at_least=True,
        ),
    }


_TEXT = {
    "vector_p50_ms": "vector query p50 ≤ 10 ms at the largest size, query embedding included",
    "hybrid_p50_ms": "hybrid query p50 ≤ 15 ms at the largest size, query embedding included",
    "hybrid_long_p50_ms": "hybrid p50 on 300-600-character queries ≤ 25 ms",
    "fresh_query_process_s": "a fresh `toolsearch query` process on the demo's hybrid index ≤ 1.0 s wall",
    "document_throughput_ratio": "document embedding throughput ≥ 80% of sentence-transformers'",
}


def render_markdown(report: dict[str, Any]) -> list[str]:
    section = report.get("embedders")
    if not section:
        return []
    largest = str(max(report["settings"]["sizes"]))
    rows = report["results"][largest]
    targets = analyse(report)
    lines = ["## Embedders: numpy vs sentence-transformers (issue #14)", ""]
    lines += ["| target | measured | verdict |", "|---|---|---|"]
    for key, t in targets.items():
        unit = " ms" if key.endswith("_ms") else (" s" if key.endswith("_s") else "")
        shown = "-" if t["value"] is None else f"{t['value']}{unit}"
        verdict = "n/a" if t["met"] is None else ("**met**" if t["met"] else "**not met**")
        lines.append(f"| {_TEXT[key]} | {shown} | {verdict} |")
    arms = list(report["settings"].get("embedders") or ["numpy"])
    lines += ["", f"Search at {int(largest):,} tools, query embedding included (p50 / p95 ms). `numpy` is the "
              "default embedder (documents in numpy, queries on onnxruntime in int8); `numpy-fp32` runs queries on "
              "onnxruntime in float32; `numpy-only` runs queries in numpy too; `sentence-transformers` is the same "
              "model through torch:", ""]
    lines += [f"| backend | {' | '.join(arms)} | ratio (sentence-transformers / numpy, p50) |",
              "|---|" + "---|" * (len(arms) + 1)]
    for b in ("vector", "hybrid"):
        systems = [rows.get(b if arm == "numpy" else f"{b}@{arm}", {}) for arm in arms]
        theirs = rows.get(f"{b}@sentence-transformers", {})
        for label, key in ((b, ""), (f"{b}, requests under 300 characters", "short_queries"),
                           (f"{b}, 300-600-char queries", "long_queries")):
            cells = [((row.get(key) or {}) if key else row) for row in systems]
            a = cells[0]
            c = (theirs.get(key) or {}) if key else theirs
            if "p50_ms" not in a:
                continue
            ratio = f"{c['p50_ms'] / a['p50_ms']:.1f}x" if c.get("p50_ms") and a["p50_ms"] else "-"
            lines.append(f"| {label} | {' | '.join(_pair(cell) for cell in cells)} | {ratio} |")
    lines += ["", f"Embedding alone, each in a fresh process ({section['documents']} catalog tool texts, no cache, "
              f"{section['threads']} threads; {QUERIES} single queries):", ""]
    lines += ["| embedder | model load s | documents/s | query embedding p50 / p95 ms |", "|---|---|---|---|"]
    for name, row in section["per_embedder"].items():
        if "error" in row:
            lines.append(f"| {name} | error: {row['error'][:100]} | | |")
            continue
        lines.append(
            f"| {name} | {row['model_load_s']:.2f} | {row['documents_per_s']:.1f} | "
            f"{row['query_embed_p50_ms']:.2f} / {row['query_embed_p95_ms']:.2f} |"
        )
    cost = section.get("search_cost") or {}
    if cost:
        lines += ["", f"Search cost at {int(largest):,} tools, query embedding included: the saved index searched in a "
                  "fresh process per row, same queries; CPU = the process's CPU time (every thread) per search, "
                  "which waits for no other process (p50 wall / p50 CPU / p95 CPU ms):", ""]
        lines += ["| system | queries | load average at start | requests under 300 characters | "
                  "300-600-character queries |",
                  "|---|---|---|---|---|"]
        for system, row in cost.items():
            if "error" in row:
                lines.append(f"| {system} | error: {row['error'][:100]} | | | |")
                continue
            cells = [_cost(row.get(key)) for key in ("short", "long")]
            load = ", ".join(f"{v:.1f}" for v in row["load_average"])
            lines.append(f"| {system} | {row['short']['queries']} | {load} | {cells[0]} | {cells[1]} |")
    cli = section.get("cli", {})
    lines += ["", "CLI, fresh processes (wall time, interpreter start and imports included):", ""]
    lines.append(f"- `toolsearch demo` from a cold embedding cache: {cli.get('demo_cold_s', '-')} s; "
                 f"again with the index built: {cli.get('demo_warm_s', '-')} s.")
    for arm, row in (cli.get("fresh_query_process") or {}).items():
        if "error" in row:
            lines.append(f"- {arm}: error {row['error'][:200]}")
            continue
        lines.append(
            f"- {arm} ({row['command']}): median {row['wall_s_median']} s over {row['runs']} runs (min "
            f"{row['wall_s_min']} s); index + model load {row['index_and_model_load_ms_median']} ms, search "
            f"{row['search_ms_median']} ms; top hits {', '.join(row['hits'][:3])}."
        )
    lines += [
        "",
        "With `--cache-dir`, both embedders' rows read one embedding cache (they share the model id; their "
        "vectors agree to ~1e-6, checked by tests/test_embedder_parity.py): build times then compare nothing, and "
        "the document throughput above is the embedding-speed figure.",
        "",
    ]
    return lines


def _pair(row: dict[str, Any]) -> str:
    return f"{row['p50_ms']:.2f} / {row['p95_ms']:.2f}" if "p50_ms" in row else "-"


def _cost(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    return f"{row['wall_p50_ms']:.2f} / {row['cpu_p50_ms']:.2f} / {row['cpu_p95_ms']:.2f}"
