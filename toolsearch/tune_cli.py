"""`toolsearch tune INDEX` gives an index its own request encoder (the `train` extra); `model export` writes it out."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_model_export", "add_tune_command", "run_model_export", "run_tune"]


def add_tune_command(commands: Any, parents: list[argparse.ArgumentParser], handler: Callable[..., int]) -> None:
    """Register `tune` on the CLI's sub-parsers; `handler(args, console)` is what the CLI dispatches to."""
    p = commands.add_parser(
        "tune", parents=parents, help="fine-tune an index's request encoder on its usage log (needs torch)",
        description="Fine-tune the encoder a vector or hybrid index embeds requests with on the index's usage log "
        "(searches that led to successful calls; the log must keep request text: privacy 'raw'), on the CPU, and "
        "save the index with that encoder inside it. Tool vectors do not change. Needs the train extra: pip "
        "install 'toolsearch[train]'. See docs/guide.md.",
    )
    p.add_argument("index", metavar="INDEX", help="index name or folder")
    p.add_argument("--usage", metavar="FILE|URL",
                   help="learn from this usage log instead of the one beside the index: a `toolsearch usage export`, "
                   "the file of `toolsearch mcp serve --usage-log`, or the Redis URL gateway workers share "
                   "(redis://host:port/db); every log in a file or store that keeps request text is read")
    p.add_argument("--out", metavar="DIR", help="save the tuned index here (default: replace INDEX)")
    # No defaults here: they are the recipe's (toolsearch.training.tune.TUNE_CONFIG), which needs numpy to
    # import, and every command builds this parser.
    p.add_argument("--epochs", type=int, help="passes over the log (default: the recipe's, 2)")
    p.add_argument("--learning-rate", type=float, help="peak learning rate (default: the recipe's, 1e-4)")
    p.add_argument("--catalog", action="store_true",
                   help="also train on the pseudo-requests each tool gives (its name words, a description sentence)")
    p.add_argument("--threads", type=int, help="CPU threads torch trains on (default: the recipe's, 2)")
    p.add_argument("--seed", type=int, help="training seed (default: the recipe's, 0)")
    p.add_argument("--json", action="store_true", help="print the new model's card as JSON on stdout")
    p.set_defaults(func=handler, check=check_tune)


def check_tune(args: argparse.Namespace) -> None:
    from ._errors import InvalidArgumentError

    for name in ("epochs", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InvalidArgumentError(f"--{name} must be at least 1, got {getattr(args, name)}")
    # inf passed `> 0` and trained NaN weights into the index (and 1e38 overflowed inside torch): fine-tuning takes
    # steps far below 1
    if args.learning_rate is not None and not (math.isfinite(args.learning_rate) and 0 < args.learning_rate <= 1):
        raise InvalidArgumentError(
            f"--learning-rate must be a number above 0 and at most 1 (the recipe's is 1e-4), got {args.learning_rate}"
        )
    if args.seed is not None and not 0 <= args.seed < 2**32:  # what numpy's seeding takes
        raise InvalidArgumentError(f"--seed must be between 0 and {2**32 - 1}, got {args.seed}")
    if args.out is not None:
        from .index_store import IndexStore

        target = _out_target(args.out)
        IndexStore(target.parent).path(target.name)  # the name rule `build --out` follows: exit 2, before any work


def _out_target(out: str) -> Path:
    """`--out DIR` as the index folder it names (absolute, not resolved: an index folder is a link to its build)."""
    return Path(os.path.abspath(out))


def run_tune(args: argparse.Namespace, console: Any, folder: Path) -> int:
    """Tune the index in `folder` (resolved by the CLI like every INDEX) and save it."""
    from .index import ToolIndex
    from .store import read_manifest
    from .training.tune import TUNE_CONFIG, tune_index
    from .usage import usage_path
    from .usage_cli import describe_refresh, logs_beside, read_usage, refresh_usage, refreshed_json

    target = Path(args.out) if args.out else folder
    # Before the log is read and the model trained: a target that `save` refuses at the end threw the trained encoder
    # away (minutes of training) for a mistake the command line or the folder held from the start.
    if args.out:
        _check_target(_out_target(args.out))
    catalog = read_manifest(folder).catalog_hash  # (not an index at all: said first, as that)
    if not args.out:
        _check_target(folder, in_place=True)
    if args.usage:
        log = read_usage(args.usage, catalog)
    else:  # every log of the file beside it: those of its earlier catalogs too (docs/cli.md#tune)
        log, earlier = logs_beside(folder, catalog)
        if earlier:
            console.note(f"note: {earlier} of the {len(log)} usage entries were recorded for earlier catalogs of "
                         "this index (before its tools changed); tools that are gone are left out")
    given = {name: getattr(args, name) for name in ("epochs", "learning_rate", "threads", "seed")}
    config = dataclasses.replace(TUNE_CONFIG, **{k: v for k, v in given.items() if v is not None})
    with console.progress(f"loading index {folder.name}"):
        index = ToolIndex.load(folder)
    tuned, card = tune_index(index, log, config=config, catalog=args.catalog, progress=console.note)
    tuned.save(target)
    refreshed = None
    if target.resolve() == folder.resolve():
        # The log beside the index recorded what the old encoder showed, and learning calibrates against it.
        with console.progress("re-ranking the requests of the log beside it with the new encoder"):
            refreshed = refresh_usage(tuned, target)
        console.note(describe_refresh(refreshed, usage_path(target)))
    run = card["run"]
    if args.json:
        console.json({"index": str(target), **card, "usage_refreshed": refreshed_json(refreshed)})
    else:
        console.print(
            f"tuned {target}: requests now embedded by {tuned.backend.describe()['model']} "
            f"({run['rows']} pairs, {run['steps']} steps, {run['seconds']:.0f} s, loss {run['loss_start']} -> "
            f"{run['loss_end']})"
        )
    return 0


def add_model_export(commands: Any, parents: list[argparse.ArgumentParser], handler: Callable[..., int]) -> None:
    """Register `model export` on the `model` command's sub-parsers."""
    p = commands.add_parser(
        "export", parents=parents, help="write the request encoder a tuned index carries to a folder",
        description="Copy the request encoder an index carries (one `toolsearch tune` made) to a new folder, "
        "checked against its digest, so other indexes, an MCP gateway or a Postgres catalog can embed requests "
        "with it: --model DIR.",
    )
    p.add_argument("index", metavar="INDEX", help="index name or folder")
    p.add_argument("--out", metavar="DIR", required=True, help="the new folder to write the encoder to")
    p.set_defaults(func=handler)


def _check_target(target: Path, *, in_place: bool = False) -> None:
    """Raise the StoredIndexError that saving the tuned index to `target` would raise at the end: a folder holding
    files toolsearch did not write, one that is no index, an index a newer toolsearch wrote (the check `save` makes),
    or a folder this user may not write (its writer lock taken and let go at once, as `save` takes it first)."""
    from ._errors import StoredIndexError
    from .store import _check_replaceable, _writer_lock

    try:
        _check_replaceable(target)
        if target.parent.is_dir():  # a new folder's parents are made by the save: nothing is made here
            with _writer_lock(target, wait=False):
                pass  # held by another writer (False) or not: only whether this user may write there counts
    except StoredIndexError as exc:
        if not in_place:
            raise
        raise StoredIndexError(f"{exc} (tune saves the tuned index into INDEX; --out DIR saves it elsewhere)") from None


def run_model_export(args: argparse.Namespace, console: Any, folder: Path) -> int:
    """Export the encoder the index in `folder` carries to `--out`, from its files: nothing is loaded."""
    from ._errors import CommandError
    from .model_file import card_model_id, carried_model, copy_model, read_card
    from .store import read_manifest, verify_files

    manifest = read_manifest(folder)
    verify_files(folder, manifest)  # the carried encoder is among the files the index's digests cover
    carried = carried_model(folder)
    if carried is None:
        uses = manifest.options.get("model") or f"no request encoder (a {manifest.backend} index)"
        raise CommandError(
            f"this index carries no request encoder of its own (it uses {uses}); export one from an index "
            "`toolsearch tune` made"
        )
    out = copy_model(carried, Path(args.out))
    console.print(f"wrote {card_model_id(read_card(out))} to {out}; use it with --model {out}")
    return 0
