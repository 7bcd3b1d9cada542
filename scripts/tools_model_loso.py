"""Score the tools model held out and choose its hybrid fusion leave-one-set-out (results/tools_model_loso.md).

    python scripts/train_retriever.py --without bfcl --out .cache/held-out/without-bfcl       # and so on per set
    python scripts/tools_model_loso.py --held-out .cache/held-out --shipped toolsearch/data/models/tools-minilm-l6-v2

For each shared set X, the query encoder trained without X (`<held-out>/without-<X>`) is scored on
X's benchmark sample (seed 0, 2,000 queries at most, queries in the default int8 runtime) with the
real vector and hybrid backends, next to the stock model. The hybrid's dense weight for X is
chosen on the other two sets' held-out scores (each from the model trained without that set), so
neither the model nor the fusion saw X; the weight that ships with the model is the best mean over
all three held-out scores. Data sets are read by path and never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETS = ("bfcl", "metatool", "seal_tools")
GRID = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
STOCK_WEIGHT = 0.65
SAMPLE = 2000
SEED = 0
POOL = 50


def score(datasets: Path, name: str, embedders: dict[str, Any]) -> dict[str, Any]:
    """nDCG@10 and R@5 of dense alone and of the hybrid at every GRID weight, per embedder, on one set."""
    from toolsearch import load_tools
    from toolsearch.backends import bm25, hybrid, vector
    from toolsearch.evaluation import load_queries, ndcg_at, recall_at
    from toolsearch.index import MAX_QUERY_CHARS

    tools = load_tools(datasets / name / "tools.jsonl")
    queries = load_queries(datasets / name / "queries.jsonl", limit=SAMPLE, seed=SEED)
    lexical = bm25.create()
    lexical.add(tools)
    out: dict[str, Any] = {"set": name, "queries": len(queries)}
    for label, embedder in embedders.items():
        dense = vector.create(embedder=embedder)
        dense.add(tools)
        sums: dict[str, list[float]] = {"dense": [0.0, 0.0], **{str(w): [0.0, 0.0] for w in GRID}}
        started = time.perf_counter()
        for q in queries:
            text = q.query.strip()[:MAX_QUERY_CHARS]
            ranked = [h.name for h in dense.search(text, 10).hits]
            sums["dense"][0] += ndcg_at(ranked, q.relevant)
            sums["dense"][1] += recall_at(ranked, q.relevant, 5)
            words = {h.name: h.score for h in lexical.search(text, POOL).hits}
            near = dense.candidates(text, POOL, None, include=words)
            for w in GRID:
                fused = hybrid.fuse(near, words, w)
                top = [n for n, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
                sums[str(w)][0] += ndcg_at(top, q.relevant)
                sums[str(w)][1] += recall_at(top, q.relevant, 5)
        out[label] = {k: [round(v[0] / len(queries), 4), round(v[1] / len(queries), 4)] for k, v in sums.items()}
        out[label]["model_id"] = embedder.model_id
        print(f"{name} {label}: dense {out[label]['dense']}, hybrid@{STOCK_WEIGHT} {out[label][str(STOCK_WEIGHT)]} "
              f"({time.perf_counter() - started:.0f}s)", flush=True)
    return out


def choose(parts: dict[str, dict[str, Any]], on: list[str]) -> float:
    """The weight with the best mean held-out nDCG@10 over `on` (ties to the larger weight)."""
    return max(GRID, key=lambda w: (round(sum(parts[s]["held_out"][str(w)][0] for s in on) / len(on), 4), w))


def report(parts: dict[str, dict[str, Any]], out: Path, meta: dict[str, Any]) -> float:
    rows = []
    for held in SETS:
        if held not in parts:
            continue
        others = [s for s in SETS if s != held and s in parts]
        picked = choose(parts, others) if others else STOCK_WEIGHT
        p = parts[held]
        rows.append({
            "set": held, "chosen_on": others, "weight": picked,
            "stock_dense": p["stock"]["dense"], "held_out_dense": p["held_out"]["dense"],
            "stock_hybrid": p["stock"][str(STOCK_WEIGHT)], "held_out_hybrid": p["held_out"][str(picked)],
            "held_out_hybrid_at_stock_weight": p["held_out"][str(STOCK_WEIGHT)],
        })
    shipped = choose(parts, [s for s in SETS if s in parts])
    result = {"meta": meta, "rows": rows, "shipped_weight": shipped, "parts": parts}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    lines = [
        "# The tools model, held out: query encoder and hybrid fusion chosen leave-one-set-out",
        "",
        f"- Command: `{meta.get('command', 'python scripts/tools_model_loso.py')}`",
        f"- Load average at the start: {meta['load_start']}; at the end: {meta['load_end']}",
        f"- Queries: each set's benchmark sample (seed {SEED}, at most {SAMPLE}); the query encoder for a set was "
        "trained without that set, and its hybrid weight was chosen on the other two sets' held-out scores.",
        "",
        "| set | stock dense | tools dense, held out | stock hybrid (w 0.65) | tools hybrid, held out (w chosen) | w |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['stock_dense'][0]:.4f} / {r['stock_dense'][1]:.4f} | "
            f"{r['held_out_dense'][0]:.4f} / {r['held_out_dense'][1]:.4f} | "
            f"{r['stock_hybrid'][0]:.4f} / {r['stock_hybrid'][1]:.4f} | "
            f"**{r['held_out_hybrid'][0]:.4f}** / {r['held_out_hybrid'][1]:.4f} | {r['weight']} |"
        )
    lines += [
        "",
        "nDCG@10 / Recall@5. The weight that ships with the model (the best mean over all three held-out scores): "
        f"**{shipped}**.",
        "",
        "Every weight, held out (nDCG@10):",
        "",
        "| set | " + " | ".join(str(w) for w in GRID) + " |",
        "|---|" + "---|" * len(GRID),
    ]
    for held in SETS:
        if held in parts:
            lines.append(f"| {held} | " + " | ".join(f"{parts[held]['held_out'][str(w)][0]:.4f}" for w in GRID) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return shipped


def _write_weight(folder: Path, weight: float, how: str) -> None:
    card_path = folder / "card.json"
    card = json.loads(card_path.read_text(encoding="utf-8"))
    card["hybrid"] = {"dense_weight": weight, "chosen": f"leave-one-set-out, {how} (tools_model_loso.md)"}
    card_path.write_text(json.dumps(card, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{card_path}: hybrid dense weight {weight}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=Path,
                        default=Path(os.environ.get("TOOLSEARCH_DATASETS") or ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--held-out", type=Path, required=True, help="folder of without-<set> query encoders")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tools_model_loso")
    parser.add_argument("--shipped", type=Path, help="a model folder whose card gets the chosen hybrid weight")
    parser.add_argument("--report-only", action="store_true", help="reuse the scores in --out's JSON (no scoring)")
    args = parser.parse_args()
    from toolsearch.embeddings import NumpyEmbedder, ToolsEmbedder

    if args.report_only:
        previous = json.loads(args.out.with_suffix(".json").read_text(encoding="utf-8"))
        parts, meta = previous["parts"], previous["meta"]
    else:
        load_start = [round(x, 2) for x in os.getloadavg()]
        parts = {}
        for name in args.sets.split(","):
            embedders = {"stock": NumpyEmbedder(), "held_out": ToolsEmbedder(args.held_out / f"without-{name}")}
            parts[name] = score(args.datasets, name, embedders)
        meta = {"load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()],
                "command": "python scripts/tools_model_loso.py " + " ".join(sys.argv[1:])}
    shipped = report(parts, args.out, meta)
    # The fusion travels with the model: each held-out encoder gets the weight chosen without its set,
    # the shipped one the weight chosen over all three (the retrieval bench and the hybrid read it there).
    for row in json.loads(args.out.with_suffix(".json").read_text(encoding="utf-8"))["rows"]:
        how = f"chosen on {', '.join(row['chosen_on'])}"
        _write_weight(args.held_out / f"without-{row['set']}", row["weight"], how)
    if args.shipped is not None:
        _write_weight(args.shipped, shipped, "chosen on every set's held-out score")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
