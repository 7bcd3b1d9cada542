"""`toolsearch eval`: retrieval quality of one's own catalog per backend, with floors a CI job can fail on."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._errors import EvalError, InvalidQueryError
from .evaluation import LabeledQuery, Miss, load_queries, queries_from_pairs, recall_name, score_with_misses
from .model_option import MODEL_HELP, add_model_option, check_model, embeds

__all__ = ["EXIT_BELOW_FLOOR", "add_eval_command", "check_eval_options", "run_eval"]

# Distinct from 1 (bad input) so a CI job can tell "quality fell" from "the check could not run".
EXIT_BELOW_FLOOR = 3
DEPTH = 10  # every ranking is this deep at least: nDCG@10 and MRR@10 need ten names
SHOWN_MISSES = 10


def add_eval_command(
    commands: Any, parents: list[argparse.ArgumentParser], handler: Callable[..., int],
    check: Callable[[argparse.Namespace], None],
) -> None:
    """Register `eval` on the CLI's sub-parsers; the CLI dispatches to `handler(args, console)` after `check(args)`."""
    p = commands.add_parser(
        "eval", parents=parents, help="score search on your own labelled queries; fail below a floor",
        description="Rank every labelled query with each backend and print nDCG@10, Recall@k and MRR@10 side by "
        "side, and the queries that missed (a relevant tool outside the top k). SOURCE is an index (name or "
        "folder) or one or more tool files (read as `build` reads them); the backends are built from their tools. "
        "With --min-recall / --min-ndcg the "
        f"command exits {EXIT_BELOW_FLOOR} when any backend scores below the floor.",
        epilog=f"Exit codes: 0 every floor met, 1 error in input, 2 bad usage, {EXIT_BELOW_FLOOR} below a floor.",
    )
    p.add_argument("source", metavar="SOURCE", nargs="+",
                   help="index name or folder, or tool files (.json/.jsonl) and MCP servers configs")
    labels = p.add_mutually_exclusive_group(required=True)
    labels.add_argument("--queries", metavar="FILE",
                        help='labelled queries, JSONL: {"id", "query", "relevant": [tool names]} a line')
    labels.add_argument("--usage", action="store_true",
                        help="the index's usage log: each logged search and the tools called after it "
                        "(needs a log kept with privacy='raw', the only setting that stores query text)")
    p.add_argument("--backends", metavar="LIST",
                   help="comma-separated backends to compare (default: the index's own; auto for a tool file)")
    p.add_argument("-k", type=int, default=5, metavar="N",
                   help="Recall@N, and a miss is a relevant tool outside the top N (default 5)")
    p.add_argument("--min-recall", type=float, metavar="X", help="fail when a backend's Recall@k is below X (0-1)")
    p.add_argument("--min-ndcg", type=float, metavar="X", help="fail when a backend's nDCG@10 is below X (0-1)")
    add_model_option(p, MODEL_HELP + "; the vector and hybrid backends are built with it (an index built with "
                     "another model is re-embedded for the comparison)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    p.set_defaults(func=handler, check=check)


def check_eval_options(args: argparse.Namespace, index_backend: str | None = None) -> None:
    """The arguments alone: k, floors and backend names (before any file is read or model loaded).

    `index_backend`: the backend of the one index SOURCE names, read from its manifest by the CLI (None for tool
    files, or an index that cannot be read here: loading it says what is wrong)."""
    from .backends import get_backend_spec
    from .index import validate_k

    validate_k(args.k)
    for flag, value in (("--min-recall", args.min_recall), ("--min-ndcg", args.min_ndcg)):
        if value is not None and not 0.0 <= value <= 1.0:
            raise InvalidQueryError(f"{flag} {value} is not a fraction; give a number from 0 to 1, e.g. 0.8")
    for name in _backend_names(args.backends):
        get_backend_spec(name)
    if args.model is not None:
        # --backends, else the index's own backend (read from its manifest; a tool file is built with auto)
        names = _backend_names(args.backends) or [n for n in [index_backend] if n is not None]
        specs = [get_backend_spec(n) for n in names]
        if specs and not any(embeds(spec) for spec in specs):
            check_model(specs[0], args.model)  # says why it cannot apply, as `build --backend bm25 --model X` does


def _backend_names(spec: str | None) -> list[str]:
    if spec is None:
        return []
    names = [part.strip() for part in spec.split(",")]
    if not all(names):
        raise InvalidQueryError(f"--backends {spec!r} has an empty name; give names like bm25,hybrid")
    return list(dict.fromkeys(names))


def usage_queries(folder: Path, console: Any) -> list[LabeledQuery]:
    """The search→call pairs of the usage file beside an index folder, as labelled queries: every log it keeps,
    those of the index's earlier catalogs too (what users asked before a tool changed still labels a request).
    """
    from .store import read_manifest
    from .usage import usage_path
    from .usage_cli import logs_beside

    log, earlier = logs_beside(folder, read_manifest(folder).catalog_hash)
    entries = list(log)
    if not entries:
        raise EvalError(
            f"the usage log of {folder.name} ({usage_path(folder)}) has no entries; "
            "give labelled queries with --queries FILE instead"
        )
    if earlier:
        console.note(f"note: {earlier} of the {len(entries)} usage entries were recorded for earlier catalogs of "
                     "this index (before its tools changed); a tool that is gone counts as a miss")
    pairs = [(entry.query, entry.called) for entry in entries if entry.query]
    if not pairs:
        raise EvalError(
            f"the usage log of {folder.name} keeps no query text ({len(entries)} entries, privacy="
            f"{log.privacy!r}): only privacy='raw' stores it; give labelled queries with --queries FILE instead"
        )
    taken, refused = _searchable(pairs)
    if refused:
        # A logged request is not a query someone typed for this run: one a search does not take (an entry keeps up
        # to ten searches' worth of text; an import may hold anything) is left out, as `tune` and `usage refresh`
        # leave it, not a reason to give no score at all.
        why = "; ".join(f"{n} {reason}" for reason, n in refused.most_common())
        console.note(f"note: left out {sum(refused.values())} of the {len(pairs)} logged requests, which a search does "
                     f"not take ({why}); the other {len(taken)} are scored")
    if not taken:
        raise EvalError(
            f"the usage log of {folder.name} holds no request a search takes (every one was left out, see the note "
            "above); give labelled queries with --queries FILE instead"
        )
    return queries_from_pairs(taken)


def _searchable(pairs: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], Counter[str]]:
    """The (request, tool) pairs whose request a search takes, and how many others were refused for each reason."""
    from .index import MAX_QUERY_CHARS, validate_query

    taken: list[tuple[str, str]] = []
    refused: Counter[str] = Counter()
    for text, tool in pairs:
        try:
            validate_query(text)
        except InvalidQueryError:
            stripped = text.strip()
            refused["with no words" if not stripped else f"longer than {MAX_QUERY_CHARS:,} characters"
                    if len(stripped) > MAX_QUERY_CHARS else "holding a character a query cannot contain"] += 1
            continue
        taken.append((text, tool))
    return taken, refused


def run_eval(
    args: argparse.Namespace,
    console: Any,
    tools: Sequence[Any],
    *,
    index: Any | None = None,
    folder: Path | None = None,
) -> int:
    """Score each backend over the labelled queries; `index` is the stored one SOURCE named, if any."""
    from .backends import get_backend_spec
    from .catalog import Catalog
    from .index import ToolIndex, validate_query

    if args.usage:
        if folder is None:
            files = " ".join(args.source) + (" is a tool file" if len(args.source) == 1 else " are tool files")
            raise EvalError(f"--usage reads the usage log beside an index; {files}")
        queries, label_source = usage_queries(folder, console), f"usage log of {folder.name}"
    else:
        queries, label_source = load_queries(args.queries, need_relevant=True), str(args.queries)
    if not queries:
        raise EvalError(f"{label_source} holds no queries; write one JSON object a line: "
                        '{"id": "q1", "query": "...", "relevant": ["tool_name"]}')
    for q in queries:
        try:
            validate_query(q.query)
        except InvalidQueryError as exc:
            line = None if args.usage else _line_of(Path(args.queries), q.id)
            where = label_source if line is None else f"{label_source}:{line}"
            raise EvalError(f"{where}: query {q.id!r}: {exc}") from None
    catalog = index.catalog if index is not None else Catalog(tools)
    if not len(catalog):
        raise EvalError("the sources hold no tools; nothing to evaluate")
    known = set(catalog.names)
    unknown = sorted({name for q in queries for name in q.relevant} - known)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        console.note(f"note: {len(unknown)} labelled tools are not in the catalog, so they always miss: {shown}")
    names = _backend_names(args.backends) or [index.backend_name if index is not None else "auto"]
    depth = max(DEPTH, args.k)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        spec = get_backend_spec(name)
        options = {"model": args.model} if args.model is not None and embeds(spec) else {}
        if index is not None and spec.name == index.backend_name and _same_model(index, options):
            engine, build_s = index, 0.0
        else:
            with console.progress(f"building the {spec.name} backend over {len(catalog)} tools") as progress:
                engine = ToolIndex.build(catalog, spec.name, **options)
            build_s = progress.elapsed
        start = time.perf_counter()
        rankings = [_ranked(engine, q, min(depth, len(catalog)), spec.name, label_source) for q in queries]
        search_s = time.perf_counter() - start
        scores, misses = score_with_misses(rankings, queries, args.k)
        results[spec.name] = {"scores": scores, "misses": misses, "build_s": build_s, "search_s": search_s}
    failures = _failures(results, args)
    report = _report(args, label_source, len(catalog), queries, unknown, results, failures)
    if args.json:
        console.json(report)
    else:
        console.print(_render(report, results, args.k))
    return EXIT_BELOW_FLOOR if failures else 0


def _line_of(path: Path, query_id: str) -> int | None:
    """The line of `path` that gives the query `query_id`, as `load_queries` numbers them; None if none does.

    `load_queries` returns queries without their lines (they are reported by id) and has already refused a
    repeated id, so the id finds the one row; the file is read again only on the way to an error.
    """
    try:
        with path.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    row = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    continue
                if isinstance(row, dict) and str(row.get("id")) == query_id:
                    return lineno
    except OSError:  # gone since it was read: the id alone still names the query
        return None
    return None


def _ranked(engine: Any, query: LabeledQuery, depth: int, backend: str, label_source: str) -> list[str]:
    """The names `engine` ranks for one labelled query; a query it refuses (a pattern the regex backend cannot
    compile) is an error naming the labels' source and the query, not the backend's words alone."""
    try:
        return [hit.name for hit in engine.search(query.query, depth).hits]
    except InvalidQueryError as exc:
        raise EvalError(
            f"{label_source}: query {query.id!r} cannot be run by the {backend} backend: {exc}; fix the query, or "
            "leave that backend out with --backends"
        ) from None


def _same_model(index: Any, options: dict[str, Any]) -> bool:
    if "model" not in options:
        return True
    from .embeddings import resolve_embedder

    return bool(index.backend.describe().get("model") == resolve_embedder(options["model"]).model_id)


def _failures(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[str]:
    out = []
    for name, row in results.items():
        for metric, floor in ((recall_name(args.k), args.min_recall), ("nDCG@10", args.min_ndcg)):
            if floor is not None and row["scores"][metric] < floor:
                out.append(f"{name} {metric} {row['scores'][metric]:.3f} < {floor:g}")
    return out


def _miss_dict(miss: Miss) -> dict[str, Any]:
    return {"id": miss.query.id, "query": miss.query.query, "relevant": list(miss.query.relevant),
            "missing": list(miss.missing), "top": list(miss.ranked)}


def _report(
    args: argparse.Namespace, label_source: str, tools: int, queries: Sequence[LabeledQuery], unknown: list[str],
    results: dict[str, dict[str, Any]], failures: list[str],
) -> dict[str, Any]:
    return {
        "source": " ".join(args.source), "labels": label_source, "tools": tools, "queries": len(queries), "k": args.k,
        "unknown_tools": unknown,
        "floors": {recall_name(args.k): args.min_recall, "nDCG@10": args.min_ndcg},
        "passed": not failures, "failures": failures,
        "backends": {
            name: {
                "scores": {m: round(v, 4) for m, v in row["scores"].items()},
                "build_s": round(row["build_s"], 3), "search_s": round(row["search_s"], 3),
                "misses": [_miss_dict(m) for m in row["misses"]],
            }
            for name, row in results.items()
        },
    }


def _render(report: dict[str, Any], results: dict[str, dict[str, Any]], k: int) -> str:
    recall = recall_name(k)
    n = report["queries"]
    width = max(len("backend"), *(len(name) for name in results))
    lines = [
        f"{n} queries ({report['labels']}) over {report['tools']} tools; a miss is a relevant tool outside the top {k}",
        f"{'backend'.ljust(width)}  nDCG@10  {recall.ljust(6)}  MRR@10  misses",
    ]
    for name, row in results.items():
        s = row["scores"]
        lines.append(f"{name.ljust(width)}  {s['nDCG@10']:.3f}    {s[recall]:.3f}   {s['MRR@10']:.3f}   "
                     f"{len(row['misses'])}")
    for name, row in results.items():
        misses: list[Miss] = row["misses"]
        if not misses:
            continue
        lines.append("")
        lines.append(f"missed by {name} ({len(misses)} of {n}):")
        for miss in misses[:SHOWN_MISSES]:
            top = ", ".join(miss.ranked[:3]) or "nothing"
            lines.append(f"  {miss.query.id}  {miss.query.query!r}: wanted {', '.join(miss.missing)}; got {top}")
        if len(misses) > SHOWN_MISSES:
            lines.append(f"  ... and {len(misses) - SHOWN_MISSES} more (--json lists them all)")
    floors = [f"{metric} >= {value:g}" for metric, value in report["floors"].items() if value is not None]
    if report["failures"]:
        lines.append("")
        lines.append("below the floor: " + "; ".join(report["failures"]))
    elif floors:
        lines.append("")
        lines.append(f"every backend meets the floor ({', '.join(floors)})")
    return "\n".join(lines)
