"""The command line the benchmarks share: their common flags, and running one as a script from a clone."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from benchmarks.lib import QUIET_BELOW, log, offline_environment, wait_quiet

__all__ = [
    "RESULTS", "backends", "cache_dir", "datasets", "embedders", "held_out", "outputs", "run", "seed", "sizes", "start",
    "threads", "wait_quiet_option", "wait_if_asked",
]

# Reports go beside the scripts whatever the working directory, so a run from elsewhere updates the clone's.
RESULTS = Path(__file__).resolve().parents[1] / "results"
_DATASETS_HELP = (
    "data set folder (tools.jsonl + queries.jsonl) or a name under $TOOLSEARCH_DATASETS (else ../shared/datasets); "
    "repeatable (default: bfcl, metatool, seal_tools)"
)


def datasets(parser: argparse.ArgumentParser, what: str = "") -> None:
    """`--dataset`, repeatable; `what` says what the benchmark takes from them ("pooled into the catalog")."""
    parser.add_argument(
        "--dataset", action="append", metavar="PATH", help=f"{what}: {_DATASETS_HELP}" if what else _DATASETS_HELP
    )


def seed(parser: argparse.ArgumentParser, of: str) -> None:
    parser.add_argument("--seed", type=int, default=0, help=f"seed for {of} (default 0)")


def backends(parser: argparse.ArgumentParser, default: str = "all", help: str = "") -> None:
    parser.add_argument(
        "--backends",
        default=default,
        metavar="LIST",
        help=help or ("comma-separated toolsearch backends (default: every installed one)" if default == "all"
                      else f"comma-separated toolsearch backends (default {default})"),
    )


def outputs(parser: argparse.ArgumentParser, name: str, *, plots: bool = True) -> None:
    """`--out`, `--name` (the reports' file name stem) and, for a benchmark that draws charts, `--no-plot`."""
    parser.add_argument(
        "--out", default=str(RESULTS), metavar="DIR",
        help="where the report, its JSON and charts go (default: this clone's benchmarks/results)",
    )
    parser.add_argument("--name", default=name, help=f"file name stem of the outputs (default {name})")
    if plots:
        parser.add_argument("--no-plot", action="store_true", help="skip the PNG charts")


def cache_dir(parser: argparse.ArgumentParser, help: str = "") -> None:
    parser.add_argument(
        "--cache-dir", metavar="DIR", help=help or "embedding cache folder (sets TOOLSEARCH_CACHE_DIR for this run)"
    )


def threads(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--threads", type=int, metavar="N", help=help)


def embedders(parser: argparse.ArgumentParser, several: str) -> None:
    """`--embedders`; `several` says what the benchmark does with more than one."""
    parser.add_argument(
        "--embedders",
        default="numpy",
        metavar="LIST",
        help="embedders for the vector and hybrid backends, comma-separated: numpy (the default; queries on "
        "onnxruntime in int8), numpy-fp32 (queries on onnxruntime in float32), numpy-only, sentence-transformers "
        f"(the same model through torch), e5; {several} (default: numpy)",
    )


def held_out(parser: argparse.ArgumentParser, what: str) -> None:
    """`--held-out DIR` (benchmarks.lib.held_out); `what` says which part of the run it changes."""
    parser.add_argument(
        "--held-out", metavar="DIR",
        help="folder of the tools models trained without each data set (DIR/without-<set>, made by "
        f"scripts/train_retriever.py --without SET --out DIR/without-SET): {what} run, on each set, the model that "
        "never saw it, so their figures are held out (default: the model that ships, trained on every set)",
    )


def start(args: argparse.Namespace) -> bool:
    """Before a benchmark loads anything: no model hub, its `--cache-dir` in effect. Whether `--quiet` was given."""
    offline_environment(getattr(args, "cache_dir", None))
    return bool(getattr(args, "quiet", False))


def sizes(spec: str) -> list[int | None]:
    """`--sizes 5,50,all`: catalog sizes in order, None for the whole data set."""
    out: list[int | None] = []
    for part in spec.split(","):
        part = part.strip().lower()
        if not part:
            continue
        if part == "all":
            out.append(None)
            continue
        try:
            value = int(part)
        except ValueError:
            raise SystemExit(f"--sizes: {part!r} is not a number or 'all'") from None
        if value < 1:
            raise SystemExit("--sizes: catalog sizes must be positive")
        out.append(value)
    if not out:
        raise SystemExit("--sizes: give at least one size, e.g. 50,200,all")
    return sorted(set(out), key=lambda s: math.inf if s is None else s)


def run(
    script: str,
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    main: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """Parse a benchmark's command line (its own flags and `--quiet`) and run it: `sys.exit(run(__file__, ...))`."""
    parser = argparse.ArgumentParser(
        prog=f"python benchmarks/{Path(script).name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    wait_quiet_option(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    wait_if_asked(parser, args)
    return main(args)


def wait_quiet_option(parser: argparse.ArgumentParser) -> None:
    """`--wait-quiet SECONDS`, which every benchmark takes (those with a parser of their own add it here)."""
    parser.add_argument(
        "--wait-quiet", type=float, default=0.0, metavar="SECONDS",
        help=f"before starting, wait up to SECONDS for the 1-minute load average to drop under {QUIET_BELOW} (a "
        "timing is a figure only when it is under that at the start and the end; a run that is not is marked "
        "NOT A FIGURE in its report either way) (default 0: start at once)",
    )


def wait_if_asked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Wait as `--wait-quiet` asks (saying so on stderr unless `--quiet`), before the run loads anything."""
    if args.wait_quiet < 0:
        parser.error("--wait-quiet: give a number of seconds, 0 or more")
    if args.wait_quiet:
        wait_quiet(args.wait_quiet, say=None if getattr(args, "quiet", False) else log)
