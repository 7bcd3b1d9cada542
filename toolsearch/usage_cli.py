"""`toolsearch usage show|export|import|refresh|clear INDEX`: inspect and manage the usage log beside an index."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .usage import FileUsageStore, UsageError, UsageLog, stored_logs, usage_path

if TYPE_CHECKING:
    from .index import ToolIndex

__all__ = [
    "Refreshed", "add_usage_command", "cmd_usage", "describe_refresh", "read_export", "read_usage", "refresh_usage",
    "refreshed_json",
]


def add_usage_command(commands: Any, parents: list[argparse.ArgumentParser], handler: Callable[..., int]) -> None:
    """Register `usage` on the CLI's sub-parsers; `handler(args, console)` is what the CLI dispatches to."""
    p = commands.add_parser(
        "usage", parents=parents,
        help="inspect, export, import, refresh or clear the usage log that search learns from",
        description="The usage log of an index records which tools were called successfully after which "
        "search (see docs/learning.md). It is kept beside the index folder as <INDEX>.usage.json. `refresh` "
        "re-ranks the requests the log keeps (privacy 'raw') with the index as it is now, so that learning "
        "calibrates against what the index shows, not what it showed (after a rebuild with another model; "
        "`toolsearch tune` does it itself).",
    )
    p.add_argument("action", choices=["show", "export", "import", "refresh", "clear"], help="what to do")
    p.add_argument("index", metavar="INDEX", help="index name or folder")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="export: write here instead of stdout; import: the exported log to add")
    p.add_argument("--json", action="store_true", help="show, refresh: print machine-readable JSON on stdout")
    p.set_defaults(func=handler)


def cmd_usage(args: argparse.Namespace, console: Any, folder: Path) -> int:
    """Run one usage action for the index in `folder` (resolved by the CLI like every INDEX)."""
    from .store import read_manifest

    catalog = read_manifest(folder).catalog_hash
    store = FileUsageStore(usage_path(folder))
    if args.action == "refresh":  # reads the log itself, around the searches
        from .index import ToolIndex

        with console.progress(f"loading index {folder.name}"):
            index = ToolIndex.load(folder)
        with console.progress("re-ranking the logged requests (one search each)"):
            refreshed = refresh_usage(index, folder)
        if args.json:
            console.json({"path": str(store.path), "usage_refreshed": refreshed_json(refreshed)})
        else:
            console.print(describe_refresh(refreshed, store.path))
        return 0
    log = store.load(catalog)
    if args.action == "show":
        return _show(console, store, catalog, log, as_json=args.json)
    if args.action == "export":
        data = json.dumps((log or UsageLog(catalog)).to_dict(), ensure_ascii=False, indent=1)
        if args.file:
            Path(args.file).write_text(data + "\n", encoding="utf-8")
            console.note(f"wrote {len(log or ())} usage entries to {args.file}")
        else:
            console.print(data)
        return 0
    if args.action == "import":
        if not args.file:
            raise UsageError("usage import needs the FILE to import, e.g. `toolsearch usage import INDEX usage.json`")
        incoming = read_export(args.file)
        if log is None or not len(log):
            # An empty log takes the imported one whole (salt and privacy), so hashed terms still match.
            incoming.catalog = catalog
            log, added = incoming, len(incoming)
        else:
            added = log.merge(incoming)
        store.save(log)
        console.print(f"imported {added} usage entries into {store.path} ({len(log)} in total)")
        return 0
    store.delete(catalog)
    console.print(f"cleared the usage log of {folder.name} ({store.path})")
    return 0


class Refreshed(NamedTuple):
    """What `refresh_usage` did (`--json` shows it as is)."""

    requests_reranked: int
    entries_kept: int  # entries that keep the list they recorded: no request text, or none a search takes


def refresh_usage(index: ToolIndex, folder: Path) -> Refreshed | None:
    """Re-rank the requests of the log beside `folder` with `index`, that folder's plain index as it is now: the
    lists learning calibrates against (toolsearch.learning.shown_now). None when there is no log.
    """
    from .learning import shown_now

    store = FileUsageStore(usage_path(folder))
    catalog = index.catalog.hash
    log = store.load(catalog)
    if log is None:
        return None
    lists = shown_now(index, log)  # outside the lock: a process saving into the file waits only for the write
    updated = store.update(catalog, lambda stored: stored.reshown(lists))
    if updated is None:  # cleared meanwhile
        return None
    kept = sum(1 for e in updated.entries() if e.shown and (e.query is None or e.query not in lists))
    return Refreshed(len(lists), kept)


def refreshed_json(refreshed: Refreshed | None) -> dict[str, int] | None:
    """What `refresh_usage` did, as `--json` shows it (`usage refresh`, `tune`)."""
    return None if refreshed is None else dict(refreshed._asdict())


def describe_refresh(refreshed: Refreshed | None, path: Path) -> str:
    """What `refresh_usage` did, in a line."""
    if refreshed is None:
        return f"no usage log to refresh ({path})"
    text = f"re-ranked the {refreshed.requests_reranked} logged requests in {path} with the index as it is now"
    if refreshed.entries_kept:
        text += (f"; {refreshed.entries_kept} entries keep the lists they recorded (no request text, or none a "
                 "search takes)")
    return text


def read_export(path: str) -> UsageLog:
    """A log written by `toolsearch usage export` ("-": standard input)."""
    source = sys.stdin if path == "-" else None
    try:
        text = source.read() if source else Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(
            f"{path} is not a readable usage export ({exc}); export one with `toolsearch usage export`"
        ) from None
    from .usage import FORMAT

    if isinstance(data, dict) and data.get("format") == FORMAT + "-store":  # not the index's log: nothing to clear
        raise UsageError(
            f"{path} is a usage file (what `mcp serve --usage-log` writes, one log per catalog), not an export: "
            f"`toolsearch tune INDEX --usage {path}` learns from it as it is; `usage import` takes what "
            "`toolsearch usage export INDEX` writes"
        )
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path} is not a toolsearch usage export; export one with `toolsearch usage export`")
    return UsageLog.from_dict(data, path)


def read_usage(source: str, catalog: str) -> UsageLog:
    """What `tune --usage` learns from: a usage export, or every log of a usage file (`mcp serve --usage-log`,
    `<INDEX>.usage.json`) or of a usage store URL (`redis://...`: the one gateway workers share), read as one.

    A gateway keeps one log per catalog, and its catalog changes whenever an upstream's tools do, so
    all of a file's or store's logs say what its users asked; the logs that keep request text are
    joined (for `catalog`), and a source with none gives its first log, which `tune` refuses by its
    privacy.
    """
    from .stores import USAGE_STORES, url_scheme, usage_store_from_url
    from .usage import FORMAT

    if "://" in source and USAGE_STORES.find(url_scheme(source)) is not None:
        store = usage_store_from_url(source)
        try:
            logs = stored_logs(store)
            return _joined(logs if logs is not None else [log for log in [store.load(catalog)] if log], catalog)
        finally:
            closer = getattr(store, "close", None)
            if callable(closer):
                closer()
    if source != "-":
        with contextlib.suppress(OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            data = json.loads(Path(source).read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("format") == FORMAT + "-store":
                return _joined(stored_logs(FileUsageStore(source)) or [], catalog)
    return read_export(source)


def _joined(logs: list[UsageLog], catalog: str) -> UsageLog:
    raw = [log for log in logs if log.privacy == "raw"]
    if not raw:
        return logs[0] if logs else UsageLog(catalog)
    joined = UsageLog(catalog, privacy="raw", max_entries=max(1, sum(map(len, raw))))
    for log in raw:
        joined.merge(log)
    return joined


def _show(console: Any, store: FileUsageStore, catalog: str, log: UsageLog | None, *, as_json: bool) -> int:
    entries = log.entries() if log else []
    top = Counter(e.called for e in entries).most_common(10)
    if as_json:
        console.json({
            "path": str(store.path), "catalog": catalog, "entries": len(entries),
            "max_entries": log.max_entries if log else None, "privacy": log.privacy if log else None,
            "top_tools": [{"name": n, "calls": c} for n, c in top],
            "latest": [e.to_dict() for e in entries[-10:]],
        })
        return 0
    if not entries:
        console.print(f"no usage recorded for this index ({store.path})")
        return 0
    assert log is not None
    console.print(f"{len(entries)} usage entries (cap {log.max_entries}, privacy {log.privacy}) in {store.path}")
    console.print("most called after a search: " + ", ".join(f"{n} ({c})" for n, c in top))
    for e in entries[-10:]:
        shown = e.query if e.query is not None else " ".join(e.terms) if log.privacy == "tokens" else "(hashed)"
        console.print(f"  {shown!s:60.60}  -> {e.called}")
    return 0
