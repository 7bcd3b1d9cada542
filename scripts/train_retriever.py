"""Train toolsearch's query encoder for tools and export the weights the package ships.

    python scripts/train_retriever.py                          # the shipped model: every shared set
    python scripts/train_retriever.py --without metatool --out /tmp/tools-without-metatool   # held out
    python scripts/train_retriever.py --smoke --out /tmp/smoke # a minute-long run that checks the pipeline

Data: the shared sets' labelled requests (`../shared/datasets/<set>/queries.jsonl`, or
$TOOLSEARCH_DATASETS, or --datasets), at most --per-tool requests for any one tool, with each
set's catalog; `--catalog` adds the pseudo-requests any catalog gives (a tool's name words and a
description sentence; they did not help held out, see docs/guide.md). Never the held-out
yardsticks (LiveMCPBench, StableToolBench/ToolBench, Seal-Tools' out-of-domain split,
RestBench/RestGPT, ToolAlpaca). Tools are embedded once by the base model (all-MiniLM-L6-v2);
only the query encoder trains (toolsearch.training.trainer says why). Everything that decides the
weights (data digests, base model digest, hyperparameters, seed, torch version, seconds) goes into
the model card beside them. Needs the `train` extra (torch, sentence-transformers); a GPU is used
with --device cuda.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETS = ("bfcl", "metatool", "seal_tools")
# MetaTool has about 100 requests for each of its 199 tools, most of them near-paraphrases.
PER_TOOL = 25


def _datasets(arg: str | None) -> Path:
    path = Path(arg or os.environ.get("TOOLSEARCH_DATASETS") or ROOT.parent / "shared" / "datasets")
    if not path.is_dir():
        sys.exit(f"data sets not found at {path}: pass --datasets DIR (docs/benchmarks.md says how to get them)")
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", help="folder of the shared sets (default ../shared/datasets)")
    parser.add_argument("--without", action="append", default=[], choices=SETS, help="leave a set out (repeatable)")
    parser.add_argument("--out", type=Path, help="where the int8 model goes (default: the package's model folder)")
    parser.add_argument("--work", type=Path, default=ROOT / ".cache" / "train", help="where the float model goes")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--per-tool", type=int, default=PER_TOOL)
    parser.add_argument("--catalog", action="store_true", help="add pseudo-requests made from every tool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="300 rows, one epoch: checks the pipeline in a minute")
    args = parser.parse_args(argv)

    import numpy as np

    from toolsearch import load_tools
    from toolsearch.embeddings import DEFAULT_MODEL_ID, NumpyEmbedder, embed_texts, shared_cache
    from toolsearch.evaluation import load_queries
    from toolsearch.model_file import SHIPPED, export_int8
    from toolsearch.training.pairs import catalog_anchors, query_rows, request_anchors, tool_texts
    from toolsearch.training.trainer import TrainConfig, fine_tune_queries

    datasets = _datasets(args.datasets)
    config = TrainConfig(
        epochs=1 if args.smoke else args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
        seed=args.seed, threads=args.threads,
    )
    base_embedder = NumpyEmbedder("default", runtime="numpy")
    base = base_embedder.folder
    used = [s for s in SETS if s not in args.without]
    sources: list[tuple[str, Path, Path | None]] = [
        (s, datasets / s / "tools.jsonl", datasets / s / "queries.jsonl") for s in used
    ]
    sources.append(("demo_catalog", ROOT / "toolsearch" / "data" / "demo_catalog.jsonl", None))
    data: dict[str, Any] = {}
    blocks: list[np.ndarray] = []
    rows: list[Any] = []
    offset = 0
    for name, tools_path, queries_path in sources:
        tools = load_tools(tools_path)
        texts = tool_texts(tools)
        names = list(texts)
        blocks.append(embed_texts(base_embedder, [texts[n] for n in names], cache=shared_cache()))
        anchors = request_anchors(load_queries(queries_path), per_tool=args.per_tool, seed=args.seed) if queries_path \
            else []
        if args.catalog:
            anchors += catalog_anchors(tools, seed=args.seed)
        set_rows = query_rows(anchors, {n: offset + i for i, n in enumerate(names)})
        rows += set_rows
        offset += len(names)
        data[name] = {"tools_sha256": _sha256(tools_path), "tools": len(names), "anchors": len(anchors),
                      "rows": len(set_rows)}
        if queries_path is not None:
            data[name]["queries_sha256"] = _sha256(queries_path)
    if args.smoke:
        rows = rows[:: max(1, len(rows) // 300)]
    matrix = np.concatenate(blocks)
    print(f"training on {len(rows)} rows against {len(matrix)} tools from {', '.join(data)}", flush=True)
    float_dir = args.work / ("float-" + "-".join(used) + ("-smoke" if args.smoke else ""))
    run = fine_tune_queries(base, matrix, rows, config, float_dir, device=args.device)
    run["machine"] = f"{platform.machine()}, {os.cpu_count()} cores" if args.device == "cpu" else args.device
    card = {
        "architecture": "all-MiniLM-L6-v2 (BERT, 6 layers, 384-d, mean pooling), query encoder only",
        "base_model": {"id": DEFAULT_MODEL_ID, "sha256": _sha256(base / "model.safetensors")},
        "document_model": DEFAULT_MODEL_ID,
        "data": data,
        "left_out": sorted(args.without),
        "never_used": ["LiveMCPBench", "StableToolBench/ToolBench", "Seal-Tools test_out_domain", "RestBench/RestGPT",
                       "ToolAlpaca"],
        "per_tool": args.per_tool,
        "catalog_pairs": args.catalog,
        "loss": "InfoNCE over every tool of the training catalogs (fixed tool vectors), a request's other right "
                "tools and near-duplicates of its right tool masked",
        "hyperparameters": config.as_dict(),
        "run": run,
        "command": "python scripts/train_retriever.py" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.without:
        card["model_id"] = f"{SHIPPED.model_id}-without-{'-'.join(sorted(args.without))}"
    out = args.out or SHIPPED.folder
    path = export_int8(float_dir, base, out, card)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) after {run['seconds']:.0f}s of training", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
