"""Choose hybrid ranking settings leave-one-set-out and write benchmarks/results/ranking_loso.md.

    python scripts/ranking_loso.py --set bfcl          # score every grid value on one set (a .json part)
    python scripts/ranking_loso.py --report-only       # the parts -> benchmarks/results/ranking_loso.{md,json}

Each setting (today: the hybrid's `clause_lexical`, bm25 searched clause by clause) is scored on
each data set's benchmark sample (seed 0, 2,000 queries at most; queries in the default runtime,
int8) with the real hybrid backend. For each set, the value is chosen on the other two (best mean
nDCG@10, ties to the shipped default) and reported on the held-out set, so no held-out figure saw
its own data. A setting becomes a default only when its held-out figures gain (by 0.001 on average)
and no set loses more than 0.002. The query adapter's leave-one-set-out figures come from scripts/train_query_adapter.py
and are kept in the report as they were. Data sets are read by path and never copied.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETS = ("bfcl", "metatool", "seal_tools")
GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
SAMPLE = 2000
SEED = 0
NO_LOSS = -0.002  # the most a set may lose for a setting to ship
MIN_GAIN = 0.001  # the mean held-out gain a setting must show to ship (smaller is int8 and tie noise)


def score_set(datasets: Path, name: str) -> dict[str, Any]:
    """nDCG@10 of the hybrid on one set for every `clause_lexical` value in GRID."""
    from toolsearch import load_tools
    from toolsearch.backends import hybrid
    from toolsearch.evaluation import load_queries, ndcg_at
    from toolsearch.index import MAX_QUERY_CHARS

    tools = load_tools(datasets / name / "tools.jsonl")
    queries = load_queries(datasets / name / "queries.jsonl", limit=SAMPLE, seed=SEED)
    backend = hybrid.create()
    backend.add(tools)
    totals = dict.fromkeys(GRID, 0.0)
    for q in queries:
        text = q.query.strip()[:MAX_QUERY_CHARS]
        for value in GRID:  # query-major: the query's embedding is computed once and cached
            backend.clause_lexical = value
            totals[value] += ndcg_at([h.name for h in backend.search(text, 10).hits], q.relevant)
    scores = {str(v): round(totals[v] / len(queries), 4) for v in GRID}
    return {"set": name, "queries": len(queries), "clause_lexical": scores}


def choose(rows: dict[str, dict[str, Any]], on: list[str], default: float) -> float:
    """The grid value with the best mean nDCG@10 over the sets `on` (ties go to `default`, then the smaller)."""

    def mean(value: float) -> float:
        return round(sum(rows[s]["clause_lexical"][str(value)] for s in on) / len(on), 4)

    return max(GRID, key=lambda v: (mean(v), v == default, -v))


def loso(rows: dict[str, dict[str, Any]], default: float) -> list[dict[str, Any]]:
    out = []
    in_set = choose(rows, list(SETS), default)
    for held in SETS:
        others = [s for s in SETS if s != held]
        picked = choose(rows, others, default)
        grid = rows[held]["clause_lexical"]
        out.append(
            {
                "set": held,
                "chosen_on": others,
                "held_out_value": picked,
                "before": grid[str(default)],
                "held_out": grid[str(picked)],
                "in_set_value": in_set,
                "in_set": grid[str(in_set)],
            }
        )
    return out


def write_report(stem: Path, parts: dict[str, dict[str, Any]], default: float) -> None:
    adapter = _adapter_rows(stem.with_suffix(".json"))
    table = loso(parts, default)
    gains = [r["held_out"] - r["before"] for r in table]
    ships = min(gains) >= NO_LOSS and sum(gains) / len(gains) >= MIN_GAIN
    lines = [
        "# Ranking settings, leave one data set out",
        "",
        f"nDCG@10 of the hybrid on each data set's benchmark sample (seed 0, first {SAMPLE:,} queries; seal_tools "
        "has 1,400), queries in the default runtime (int8). *before*: the shipped default; *held out*: the value "
        "chosen on the other two sets only (best mean nDCG@10), scored on this one; *in set*: the value chosen on "
        "all three (an upper bound, not a claim). Made by `python scripts/ranking_loso.py --set <set>` for each set, "
        "then `python scripts/ranking_loso.py --report-only`; quality only, no timing.",
        "",
        "## `clause_lexical`: bm25 searched clause by clause",
        "",
        "A multi-part request (`vector.query_clauses`) is searched by bm25 whole and clause by clause; a tool's "
        "bm25 share is its best of the whole-query score and `clause_lexical` times a clause's score, each "
        f"relative to its list's best hit. Shipped default: {default}.",
        "",
        "| data set | chosen on | held-out value | before | held out | Δ | in-set value | in set |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['set']} | {', '.join(r['chosen_on'])} | {r['held_out_value']} | {r['before']:.4f} "
            f"| {r['held_out']:.4f} | {r['held_out'] - r['before']:+.4f} | {r['in_set_value']} | {r['in_set']:.4f} |"
        )
    lines += [
        "",
        "Every grid value on every set:",
        "",
        "| data set | " + " | ".join(str(v) for v in GRID) + " |",
        "|---|" + "---|" * len(GRID),
    ]
    for s in SETS:
        lines.append(f"| {s} | " + " | ".join(f"{parts[s]['clause_lexical'][str(v)]:.4f}" for v in GRID) + " |")
    mean_gain = round(sum(gains) / len(gains), 4) + 0.0  # + 0.0: a mean that rounds to zero prints +0.0000, not -0.0000
    verdict = (
        f"held-out figures gain {mean_gain:+.4f} on average and no set loses more than 0.002: "
        "ships as the default"
        if ships
        else f"held-out figures move {mean_gain:+.4f} on average (a default needs +{MIN_GAIN} and no "
        "set below -0.002): stays off by default, available as `clause_lexical=`"
    )
    lines += ["", f"Verdict: {verdict}.", ""]
    if adapter:
        lines += _adapter_lines(adapter)
    stem.with_suffix(".md").write_text("\n".join(lines), encoding="utf-8")
    payload = {"clause_lexical": {"default": default, "grid": list(GRID), "sets": parts, "loso": table}}
    if adapter:
        payload["query_adapter"] = adapter
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {stem}.md")


def _adapter_rows(path: Path) -> dict[str, Any] | None:
    """The query adapter's figures kept from the report as train_query_adapter.py wrote it (or as this script did)."""
    if not path.exists():
        return None
    old = json.loads(path.read_text(encoding="utf-8"))
    found = old.get("query_adapter", old)
    return found if isinstance(found, dict) and "rows" in found else None


def _adapter_lines(adapter: dict[str, Any]) -> list[str]:
    lines = [
        "## Query adapter (`query_adapter=True`, off by default)",
        "",
        "From `scripts/train_query_adapter.py --held <set>` (fitted on the other two sets; *held out* at the "
        f"shipped strength {adapter['strength']}, *in set* fitted on all three).",
        "",
        "| data set | fitted on | backend | before | held out, full | held out | in set |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in adapter["rows"]:
        for b in ("vector", "hybrid"):
            lines.append(
                f"| {r['set']} | {', '.join(r['trained_on'])} | {b} | {r[b + '_before']:.3f} "
                f"| {r[b + '_held_out_full']:.3f} | {r[b + '_held_out']:.3f} | {r[b + '_shipped']:.3f} |"
            )
    return [*lines, ""]


def main() -> int:
    from toolsearch.backends.hybrid import DEFAULT_CLAUSE_LEXICAL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=ROOT.parent / "shared" / "datasets")
    parser.add_argument("--set", choices=SETS, help="score every grid value on this set (a report part)")
    parser.add_argument("--report-only", action="store_true", help="write the report from the parts")
    parser.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "ranking_loso")
    args = parser.parse_args()
    # Parts are scratch: the report's .json keeps every figure, and a rewrite without parts reads it.
    parts_dir = Path(tempfile.gettempdir()) / f"toolsearch-{args.report.name}"
    if args.report_only:
        if all((parts_dir / f"{s}.json").exists() for s in SETS):
            parts = {s: json.loads((parts_dir / f"{s}.json").read_text()) for s in SETS}
        else:
            parts = json.loads(args.report.with_suffix(".json").read_text())["clause_lexical"]["sets"]
        write_report(args.report, parts, DEFAULT_CLAUSE_LEXICAL)
        return 0
    if args.set is None:
        parser.error("give --set <name> or --report-only")
    row = score_set(args.datasets, args.set)
    parts_dir.mkdir(exist_ok=True)
    (parts_dir / f"{args.set}.json").write_text(json.dumps(row) + "\n", encoding="utf-8")
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
