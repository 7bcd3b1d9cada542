"""`toolsearch tune` replayed: how much an index's own fine-tuned request encoder gains from its usage log.

For each data set the encoder it starts from is the tools model trained without that set (`--held-out DIR`,
folders `without-<set>` from scripts/train_retriever.py), so every figure is held out: nothing the base model
learned came from the set. The set's queries are merged by text (rows with the same request, case and spacing
aside, become one query labelled with all their tools, so no test request's text is in the log), then shuffled
(seeded); the last `--test` are the test queries, the first `--history` of the rest are replayed into a usage
log kept with privacy "raw" as searches that led to a successful call of each of their labelled tools (what
`toolsearch tune` reads). Then, in one run, the test queries are searched with the hybrid backend five ways:
as built, through learning (LearningIndex over the same log), after `tune_index` on the log, and tuned with
learning on top, over the log as `toolsearch tune` leaves it (its requests re-ranked by the tuned index:
`learning.shown_now`) and over the log as recorded (the lists the encoder before showed). The distinct
protocol scores only the test queries near-identical to no history query (benchmarks.learning.distinct), the
part a log cannot answer by memory. Training runs on the CPU threads given; its time is reported. Writes
`<out>/<name>.md` and `.json`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.learning import distinct, metrics
from benchmarks.lib import cli, log, machine_info, machine_markdown, resolve_datasets, write_report

__all__ = ["add_arguments", "main", "run", "split"]

K = 10
# What the split guarantees, said in the report.
SPLIT = ("query rows with the same text (the first 1,000 characters, as searched and logged; case and spacing aside) "
         "are merged into one query labelled with all their tools before the split, so no test query's text is in "
         "the usage log")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli.datasets(parser)
    parser.add_argument("--held-out", required=True, metavar="DIR",
                        help="folder of the tools models trained without each set (without-<set>/)")
    parser.add_argument("--test", type=int, default=500, metavar="N", help="test queries per set (default 500)")
    parser.add_argument("--history", type=int, default=1000, metavar="N",
                        help="queries replayed into the usage log per set (default 1000)")
    parser.add_argument("--epochs", type=int, help="training epochs (default: tune's)")
    parser.add_argument("--learning-rate", type=float, help="peak learning rate (default: tune's)")
    parser.add_argument("--catalog", action="store_true", help="also train with the catalog's pseudo-requests")
    cli.threads(parser, "training threads (default 2)")
    cli.seed(parser, "the shuffle and the training")
    cli.outputs(parser, "tune", plots=False)
    cli.cache_dir(parser)


def main(args: argparse.Namespace) -> int:
    quiet = cli.start(args)
    report = run(resolve_datasets(args.dataset), Path(args.held_out), test_size=args.test, history=args.history,
                 epochs=args.epochs, learning_rate=args.learning_rate, catalog=args.catalog,
                 threads=args.threads or 2, seed=args.seed, log=(lambda *a: None) if quiet else log)
    write_report(Path(args.out), args.name, report, render_markdown(report), quiet=quiet)
    print(render_summary(report))
    return 0


def run(datasets: list[Any], held_out: Path, *, test_size: int, history: int, epochs: int | None,
        learning_rate: float | None, catalog: bool, threads: int, seed: int, log: Any) -> dict[str, Any]:
    import dataclasses

    from toolsearch.training.tune import TUNE_CONFIG

    config = dataclasses.replace(TUNE_CONFIG, threads=threads, seed=seed)
    if epochs is not None:
        config = dataclasses.replace(config, epochs=epochs)
    if learning_rate is not None:
        config = dataclasses.replace(config, learning_rate=learning_rate)
    report: dict[str, Any] = {
        "benchmark": "tune", "machine": machine_info(),
        "settings": {"test": test_size, "history": history, "catalog_pairs": catalog, "seed": seed,
                     "held_out": str(held_out), "hyperparameters": config.as_dict(), "split": SPLIT},
        "sets": {},
    }
    from benchmarks.lib.held_out import held_out_embedders

    # every set's base encoder checked before anything runs (missing, or trained with its set: refused by name)
    bases = held_out_embedders(held_out, [ds.name for ds in datasets])
    for ds in datasets:
        report["sets"][ds.name] = _one_set(ds, bases[ds.name], test_size, history, config, catalog, seed, log)
    return report


def _one_set(ds: Any, embedder: Any, test_size: int, history: int, config: Any, catalog: bool, seed: int,
             log: Any) -> dict[str, Any]:
    """Tune `embedder` (the tools model trained without `ds`) on `ds`'s history and score it on its test split."""
    from toolsearch import ToolIndex, load_tools
    from toolsearch.evaluation import load_queries
    from toolsearch.learning import LearnedRanker, LearningIndex, shown_now
    from toolsearch.training.tune import tune_index
    from toolsearch.usage import UsageLog

    labelled = load_queries(ds.queries_path, need_relevant=True)
    test, pool = split(labelled, test_size, history, seed)
    index = ToolIndex.build(load_tools(ds.tools_path), backend="hybrid", embedder=embedder)
    usage = UsageLog(privacy="raw", salt=f"{seed:032x}")
    for q in pool:
        shown = index.search(q.query[:1000], K).names
        for tool in q.relevant:
            usage.add(q.query[:1000], tool, shown)
    log(f"[{ds.name}] {len(pool)} history queries ({len(usage)} log entries), {len(test)} test; "
        f"base {embedder.model_id}")
    t0 = time.perf_counter()
    tuned, card = tune_index(index, usage, config=config, catalog=catalog, progress=lambda m: log(f"[{ds.name}] {m}"))
    seconds = time.perf_counter() - t0
    kept = distinct(test, pool)
    arms = {
        "as built": index,
        "learning": LearningIndex(index, LearnedRanker(usage, refresh_seconds=0)),
        "tuned": tuned,
        # What `toolsearch tune` leaves beside the index it tunes in place: the log's requests re-ranked by it.
        "tuned + learning": LearningIndex(tuned, LearnedRanker(usage.reshown(shown_now(tuned, usage)),
                                                               refresh_seconds=0)),
        "tuned + learning, lists as recorded": LearningIndex(tuned, LearnedRanker(usage, refresh_seconds=0)),
    }
    rows: dict[str, Any] = {}
    for name, searcher in arms.items():
        rankings = {id(q): searcher.search(q.query[:1000], k=K).names for q in test}
        rows[name] = {"all": metrics([rankings[id(q)] for q in test], test),
                      "distinct": metrics([rankings[id(q)] for q in kept], kept)}
        log(f"[{ds.name}] {name}: nDCG@10 {rows[name]['all']['nDCG@10']:.4f}, distinct "
            f"{rows[name]['distinct']['nDCG@10']:.4f}")
    return {"tools": len(index), "query_rows": len(labelled), "history_queries": len(pool), "log_entries": len(usage),
            "test_queries": len(test),
            "distinct_test_queries": len(kept), "base_model": embedder.model_id, "tuned_model": card["model_id"],
            "tune_seconds": round(seconds, 1), "training": card["run"], "rows": rows}


def _text_key(text: str) -> str:
    """A request as the log keeps it (its first 1,000 characters), case and spacing aside."""
    return " ".join(text[:1000].split()).casefold()


def split(queries: list[Any], test_size: int, history: int, seed: int) -> tuple[list[Any], list[Any]]:
    """(test, history): queries merged by text (`SPLIT`), shuffled with `seed`; the last `test_size` (at most half)
    are the test, the first `history` of the rest the history. No test text equals a history text."""
    import dataclasses

    merged: dict[str, Any] = {}
    for q in queries:
        key = _text_key(q.query)
        first = merged.get(key)
        if first is None:
            merged[key] = q
        else:  # one request, every tool any of its rows names, in the order first seen
            merged[key] = dataclasses.replace(first, relevant=tuple(dict.fromkeys((*first.relevant, *q.relevant))))
    texts = list(merged.values())
    random.Random(seed).shuffle(texts)
    test_size = min(test_size, len(texts) // 2)
    if test_size < 1:
        raise SystemExit(f"{len(texts)} distinct query texts: too few to split into test and history")
    return texts[-test_size:], texts[:-test_size][:history]


def render_markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        "# toolsearch tune: an index's own request encoder, replayed from its usage log",
        "",
        *machine_markdown(report["machine"]),
        "",
        f"Per set: the base encoder is the tools model trained without the set ({s['held_out']}); "
        f"{s.get('split', 'queries are not merged by text')}. The last "
        f"{s['test']} of the shuffled queries (seed {s['seed']}) are the test queries, up to {s['history']} of the "
        "others go into a usage log (privacy raw) as successful calls of their labelled tools, and `tune_index` "
        f"fine-tunes on it (catalog pseudo-requests: {'yes' if s['catalog_pairs'] else 'no'}; hyperparameters "
        f"{s['hyperparameters']}). Hybrid backend, k={K}. *All*: every test query; none has its exact text in the log. "
        "*Distinct*: only the test queries near-identical to no history query (word Jaccard < 0.5), the part a log "
        "cannot answer by memory. *tuned + learning* learns from the log as `toolsearch tune` leaves it, "
        "each request's list re-ranked by the tuned index (what learning calibrates its trust against); *lists as "
        "recorded* keeps the lists the encoder before showed.",
        "",
        "| set | tools | log entries | train s | row | nDCG@10 | R@5 | distinct nDCG@10 | distinct R@5 |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, r in report["sets"].items():
        for i, (row, v) in enumerate(r["rows"].items()):
            head = f"{name} | {r['tools']} | {r['log_entries']} | {r['tune_seconds']}" if i == 0 else " | | |"
            lines.append(f"| {head} | {row} | {v['all']['nDCG@10']:.4f} | {v['all']['R@5']:.4f} | "
                         f"{v['distinct']['nDCG@10']:.4f} ({r['distinct_test_queries']}) | "
                         f"{v['distinct']['R@5']:.4f} |")
    lines += ["", "Reproduce: `python benchmarks/tune.py --held-out .cache/held-out` (held-out models from "
              "`python scripts/train_retriever.py --without SET --out .cache/held-out/without-SET`)."]
    return "\n".join(lines) + "\n"


def render_summary(report: dict[str, Any]) -> str:
    out = []
    for name, r in report["sets"].items():
        rows = r["rows"]
        out.append(f"{name}: " + ", ".join(f"{k} {v['all']['nDCG@10']:.4f}/{v['distinct']['nDCG@10']:.4f}"
                                           for k, v in rows.items()) + f" (train {r['tune_seconds']} s)")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
