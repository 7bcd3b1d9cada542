"""Fit the query adapter shipped in toolsearch/data (and prove it leave-one-set-out).

    python scripts/train_query_adapter.py                    # fit on bfcl, metatool, seal_tools; write the .npy
    python scripts/train_query_adapter.py --held metatool    # fit on the other two, score metatool (a .json part)
    python scripts/train_query_adapter.py --report-only      # the parts -> benchmarks/results/ranking_loso.{json,md}

The adapter is a square matrix A over the default model's query vectors (toolsearch.query_adapter).
It is fitted by full-batch Adam on a softmax cross-entropy: for each (request, relevant tools) pair
of a data set, the probability mass that normalise(q A) . d / TAU puts on the relevant tools among
all of that set's tools, plus LAMBDA * ||A - I||^2 so the map stays near the identity. Requests
are each set's seeded sample (the benchmark's: seed 0, 2,000 at most, so no set outweighs the
others), documents and queries are embedded in float32 with numpy (the same on every machine),
and A starts at I: the same inputs give the same matrix. Data sets are read by path and never
copied; only the matrix (float16) is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETS = ("bfcl", "metatool", "seal_tools")
TAU = 0.05  # the softmax temperature: cosine gaps of a few hundredths decide a ranking
LAMBDA = 0.1  # the pull towards the identity
STEPS = 50  # full-batch Adam steps (the loss is flat by then)
LEARNING_RATE = 2e-3
# The shipped map goes half-way from I to the fitted A. At full strength the held-out figures were
# +0.011 (metatool), +0.002 (seal_tools) and -0.002 (bfcl) nDCG@10 for hybrid; half-way none is
# worse. The report prints both strengths, so this choice is in plain view.
STRENGTH = 0.5
SAMPLE = 2000
SEED = 0


Embedded = tuple[list[str], np.ndarray, list[np.ndarray], list[tuple[str, ...]], list[str]]


def _embedded(datasets: Path, name: str) -> Embedded:
    from toolsearch import load_tools
    from toolsearch.clauses import query_clauses
    from toolsearch.embeddings import NumpyEmbedder, embed_texts, shared_cache
    from toolsearch.evaluation import load_queries
    from toolsearch.index import MAX_QUERY_CHARS
    from toolsearch.text import embedding_text

    embedder = NumpyEmbedder(runtime="numpy")
    tools = load_tools(datasets / name / "tools.jsonl")
    documents = embed_texts(embedder, [embedding_text(t) for t in tools], cache=shared_cache())
    queries = load_queries(datasets / name / "queries.jsonl", limit=SAMPLE, seed=SEED)
    texts = [q.query.strip()[:MAX_QUERY_CHARS] for q in queries]
    rows = [embedder.embed_queries([t, *query_clauses(t)]) for t in texts]
    return [t.name for t in tools], documents, rows, [q.relevant for q in queries], texts


def fit(sets: list[Embedded], strength: float = STRENGTH) -> np.ndarray:
    """The adapter for these (names, documents, query rows, relevant, texts) sets, `strength` of the way from I."""
    batches = []
    for names, documents, rows, relevant, _ in sets:
        where = {n: i for i, n in enumerate(names)}
        positives = np.zeros((len(rows), len(names)), dtype=np.float32)
        for i, rel in enumerate(relevant):
            positives[i, [where[n] for n in rel]] = 1.0
        batches.append((np.stack([r[0] for r in rows]).astype(np.float32), documents.astype(np.float32), positives))
    d = batches[0][0].shape[1]
    eye = np.eye(d, dtype=np.float32)
    a, m, v = eye.copy(), np.zeros_like(eye), np.zeros_like(eye)
    for step in range(1, STEPS + 1):
        grad = np.zeros_like(a)
        count = 0
        for q, docs, pos in batches:
            z = q @ a
            norm = np.linalg.norm(z, axis=1, keepdims=True)
            u = z / norm
            s = u @ docs.T / TAU
            s -= s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True)
            on = p * pos
            ds = (p - on / on.sum(axis=1, keepdims=True)) / TAU  # d(-log mass on the relevant tools) / d score
            du = ds @ docs
            grad += q.T @ ((du - u * (u * du).sum(axis=1, keepdims=True)) / norm)
            count += len(q)
        grad = grad / count + LAMBDA * (a - eye)
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        a -= LEARNING_RATE * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return eye + strength * (a - eye)


def _ndcg(datasets: Path, name: str, backend: str, adapter: np.ndarray | bool) -> float:
    from toolsearch import ToolIndex, load_tools
    from toolsearch.evaluation import load_queries, ndcg_at
    from toolsearch.index import MAX_QUERY_CHARS

    tools = load_tools(datasets / name / "tools.jsonl")
    queries = load_queries(datasets / name / "queries.jsonl", limit=SAMPLE, seed=SEED)
    index = ToolIndex.build(tools, backend=backend, query_adapter=adapter)
    ranked = [index.search(q.query.strip()[:MAX_QUERY_CHARS], 10).names for q in queries]
    return sum(ndcg_at(r, q.relevant) for r, q in zip(ranked, queries, strict=True)) / len(queries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=ROOT.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=ROOT / "toolsearch" / "data" / "query_adapter_minilm.npy")
    parser.add_argument("--held", choices=SETS, help="fit on the other two sets and score this one (a report part)")
    parser.add_argument("--report-only", action="store_true", help="write the report from the parts")
    parser.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "ranking_loso")
    args = parser.parse_args()
    parts = args.report.parent / f".{args.report.name}"
    if args.report_only:
        _write_report(args.report, [json.loads((parts / f"{n}.json").read_text()) for n in SETS])
        return 0
    if args.held is None:
        shipped = fit([_embedded(args.datasets, n) for n in SETS])
        with args.out.open("wb") as fh:  # a file object: np.save would append .npy to a name without it
            np.save(fh, shipped.astype(np.float16))
        drift = np.linalg.norm(shipped - np.eye(len(shipped)))
        print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes), |A - I| = {drift:.3f}")
        return 0
    held = args.held
    trained_on = [n for n in SETS if n != held]
    embedded = [_embedded(args.datasets, n) for n in trained_on]
    row: dict[str, Any] = {"set": held, "trained_on": trained_on}
    full = fit(embedded, 1.0)
    arms: dict[str, np.ndarray | bool] = {"before": False, "held_out_full": full, "shipped": True}
    arms["held_out"] = np.eye(len(full), dtype=np.float32) + STRENGTH * (full - np.eye(len(full), dtype=np.float32))
    for backend in ("vector", "hybrid"):
        for arm, adapter in arms.items():
            if isinstance(adapter, np.ndarray):
                adapter = adapter.astype(np.float16).astype(np.float32)  # as it would ship
            row[f"{backend}_{arm}"] = round(_ndcg(args.datasets, held, backend, adapter), 4)
    parts.mkdir(exist_ok=True)
    (parts / f"{held}.json").write_text(json.dumps(row) + "\n", encoding="utf-8")
    print(json.dumps(row), flush=True)
    return 0


def _write_report(stem: Path, rows: list[dict[str, Any]]) -> None:
    """Keep the adapter's rows in the ranking report's .json; scripts/ranking_loso.py writes the .md from it."""
    import subprocess

    path = stem.with_suffix(".json")
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    report = {k: v for k, v in report.items() if k not in ("strength", "rows")}
    report["query_adapter"] = {"strength": STRENGTH, "rows": rows}
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    script = Path(__file__).with_name("ranking_loso.py")
    subprocess.run([sys.executable, str(script), "--report-only", "--report", str(stem)], check=True)


if __name__ == "__main__":
    sys.exit(main())
