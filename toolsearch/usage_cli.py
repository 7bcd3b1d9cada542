"""`toolsearch usage show|export|import|refresh|clear INDEX`: inspect and manage the usage log beside an index."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .usage import MAX_ENTRIES_LIMIT, FileUsageStore, UsageError, UsageLog, stored_logs, usage_path

if TYPE_CHECKING:
    from .index import ToolIndex

__all__ = [
    "Refreshed", "add_usage_command", "check_usage_arguments", "cmd_usage", "describe_refresh", "read_export",
    "logs_beside", "read_usage", "refresh_usage", "refreshed_json",
]


def add_usage_command(
    commands: Any, parents: list[argparse.ArgumentParser], handler: Callable[..., int],
    check: Callable[[argparse.Namespace], None],
) -> None:
    """Register `usage` on the CLI's sub-parsers; the CLI dispatches to `handler(args, console)` after `check(args)`."""
    p = commands.add_parser(
        "usage", parents=parents,
        help="inspect, export, import, refresh or clear the usage log that search learns from",
        description="The usage log of an index records which tools were called successfully after which "
        "search (see docs/learning.md). It is kept beside the index folder as <INDEX>.usage.json. `refresh` "
        "re-ranks the requests the log keeps (privacy 'raw') with the index as it is now, so that learning "
        "calibrates against what the index shows, not what it showed (after a rebuild with another model; "
        "`toolsearch tune` does it itself). The file keeps one log per catalog: `show` says how many entries the "
        "logs of the index's earlier catalogs hold, and `clear` deletes the whole file (an unreadable one is moved "
        "aside, and its new name printed).",
    )
    p.add_argument("action", choices=["show", "export", "import", "refresh", "clear"], help="what to do")
    p.add_argument("index", metavar="INDEX", help="index name or folder")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="export: write here instead of stdout ('-': stdout); import: the exported log to add "
                   "('-': stdin)")
    p.add_argument("--json", action="store_true",
                   help="print what was done as machine-readable JSON on stdout (export: only with a FILE, since "
                   "the export itself is JSON)")
    p.add_argument("--force", action="store_true", help="export: replace FILE if it exists")
    p.add_argument("--allow-unknown-tools", action="store_true",
                   help="import: take entries of an export of another catalog that call tools this index does not "
                   "have (an export of an earlier catalog of it, from before a tool was renamed or removed; an "
                   "export of this catalog is taken without it, with a note); learning ignores those tools, and "
                   "`tune` and `eval --usage` count them as misses")
    p.set_defaults(func=handler, check=check)


def check_usage_arguments(args: argparse.Namespace) -> None:
    """FILE is there exactly when the action takes one (before the index or any file is read)."""
    from ._errors import InvalidArgumentError

    if args.action == "import" and not args.file:
        raise InvalidArgumentError(
            "usage import needs the FILE to import, e.g. `toolsearch usage import INDEX usage.json`"
        )
    if args.action in ("show", "refresh", "clear") and args.file:
        raise InvalidArgumentError(
            f"usage {args.action} takes no FILE (got {args.file!r}); only export and import do"
        )
    if getattr(args, "force", False) and (args.action != "export" or args.file in (None, "-")):
        raise InvalidArgumentError("--force goes with `usage export INDEX FILE` (it lets the export replace FILE)")
    if getattr(args, "allow_unknown_tools", False) and args.action != "import":
        raise InvalidArgumentError("--allow-unknown-tools goes with `usage import INDEX FILE`")


def cmd_usage(args: argparse.Namespace, console: Any, folder: Path) -> int:
    """Run one usage action for the index in `folder` (resolved by the CLI like every INDEX)."""
    from .store import read_manifest

    store = FileUsageStore(usage_path(folder))
    if args.action == "clear":  # the whole file, and before the index is read: a damaged index's log goes too
        return _clear(console, store, folder, as_json=args.json)
    catalog = read_manifest(folder).catalog_hash
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
    if args.action == "show":
        logs = store.logs()
        log = next((each for each in logs if each.catalog == catalog), None)
        return _show(console, store, catalog, log, [each for each in logs if each.catalog != catalog],
                     as_json=args.json)
    log = store.load(catalog)
    if args.action == "export":
        data = json.dumps((log or UsageLog(catalog)).to_dict(), ensure_ascii=False, indent=1)
        if args.file and args.file != "-":
            _write_export(Path(args.file), data, store.path, force=args.force)
            if args.json:
                console.json({"path": str(store.path), "exported_to": args.file, "entries": len(log or ())})
            else:
                console.note(f"wrote {len(log or ())} usage entries to {args.file}")
        else:
            console.print(data)
        return 0
    incoming = read_export(args.file)
    _check_import(args, console, folder, catalog, incoming)
    before = len(log or ())
    if log is None or not len(log):
        # An empty log takes the imported one whole (salt and privacy), so hashed terms still match.
        incoming.catalog = catalog
        log = incoming
    else:
        log.merge(incoming)
    store.save(log)
    # What the file holds now: saving keeps each entry once (an entry imported twice is one) and the newest
    # max_entries, so counting what was sent would overstate it.
    total = len(store.load(catalog) or ())
    if args.json:
        console.json({"path": str(store.path), "imported": max(total - before, 0), "entries": total})
    else:
        console.print(f"imported {max(total - before, 0)} new usage entries into {store.path} ({total} in total)")
    return 0


def _check_import(args: argparse.Namespace, console: Any, folder: Path, catalog: str, incoming: UsageLog) -> None:
    """Refuse an export of another catalog whose entries call tools the index does not have (unless
    --allow-unknown-tools), and say when it was exported from another catalog: its entries are taken as this
    catalog's, and would otherwise show (`usage show`) and count (`tune`, `eval --usage`) as this index's users' calls
    of tools it never had. An export of this very catalog may name tools the catalog no longer has: its log holds
    entries from before a tool was retired (a log carried over a rebuild, `UsageLog.merge`), so a backup of it is
    restored whole, with a note naming those tools."""
    from ._errors import UsageError
    from ._untrusted import quoted
    from .index import ToolIndex

    what = "the export on standard input" if args.file == "-" else args.file
    # The export records the catalog it was exported for (`UsageLog.to_dict`): the same test tells this index's own
    # backup from another catalog's log; one that records none may be anyone's, so it gets no such trust.
    own = incoming.catalog == catalog
    other = bool(incoming.catalog) and not own
    with console.progress(f"loading index {folder.name}"):
        known = set(ToolIndex.load(folder).catalog.names)
    unknown = Counter(e.called for e in incoming.entries() if e.called not in known)
    names = ", ".join(quoted(name) for name, _ in unknown.most_common(5))
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    if unknown and own:
        console.note(
            f"note: {what}: {sum(unknown.values())} of its {len(incoming)} entries call tools {folder.name} no longer "
            f"has: {names}{more} (it was exported for this catalog: they were logged before those tools were retired); "
            "they are imported, and vote for nothing in learned ranking until such a tool returns (`tune` and "
            "`eval --usage` count them as misses)"
        )
    elif unknown and not args.allow_unknown_tools:
        source = (f"it was exported from another catalog ({incoming.catalog[:12]}, this index's is {catalog[:12]})"
                  if other else "it does not say which catalog it was exported for")
        raise UsageError(
            f"{what}: {sum(unknown.values())} of its {len(incoming)} entries call tools {folder.name} does not have: "
            f"{names}{more}; {source}. Nothing was imported. Import an export of this index, or pass "
            "--allow-unknown-tools to take them (learning ignores tools the index lacks; `tune` and `eval --usage` "
            "count them as misses)"
        )
    if other:
        console.note(f"note: {what} was exported from another catalog ({incoming.catalog[:12]}; this index's is "
                     f"{catalog[:12]}): its entries are taken as this catalog's"
                     + (f", {sum(unknown.values())} of them calling tools it does not have" if unknown else ""))


def _write_export(path: Path, data: str, own: Path, *, force: bool) -> None:
    """Write an export to `path` (toolsearch._output's rules), never over the index's own usage file."""
    from ._errors import InvalidArgumentError
    from ._output import write_output

    if path.exists() and path.resolve() == own.resolve():
        # That file holds every catalog's log of the index; an export holds one, in another form.
        raise InvalidArgumentError(
            f"usage export: {path} is the index's own usage file, which the export would replace (losing the logs of "
            "its other catalogs); give another FILE"
        )
    write_output(path, data + "\n", what="usage export", force=force, private=True)  # it may hold request text


def _clear(console: Any, store: FileUsageStore, folder: Path, *, as_json: bool) -> int:
    logs, entries, moved_to, problem = store.clear()
    if as_json:
        console.json({"path": str(store.path), "logs": logs, "entries": entries,
                      "moved_to": None if moved_to is None else str(moved_to), "problem": problem})
    elif moved_to is not None:
        console.print(
            f"the usage file of {folder.name} could not be read ({problem}); moved it to {moved_to}, so the "
            "index has no usage log now. Delete that file once nothing in it is needed, or import an export "
            "with `toolsearch usage import`"
        )
    elif not logs:
        console.print(f"no usage log to clear for {folder.name} ({store.path})")
    else:
        console.print(
            f"cleared {entries} usage entries ({logs} {'log' if logs == 1 else 'logs'}) of {folder.name}: "
            f"deleted {store.path}"
        )
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


# A value that reads as a URL rather than a path: a scheme (two characters at least: `C:/` is a Windows drive), a
# colon and a slash (`valkey://`, `redis+sentinel://`, and the one-slash slip `redis:/host`)
_URL_LIKE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/+")


def _shown_url(source: str, found: re.Match[str]) -> str:
    """A URL-like `source` as a message shows it: as the URL it means (a one-slash slip too), credentials hidden.
    Read as a path, it was quoted whole (the OS error's copy, `valkey:/:pw@host`, and a traceback's showed the
    password)."""
    from ._redact import redacted_url

    return redacted_url(f"{found[1]}://{source[found.end():]}")


def _url_refused(source: str, found: re.Match[str]) -> UsageError:
    """The error for a URL-like usage source that names no usage store: a one-slash slip, or a scheme no store has
    (the known ones named)."""
    from .stores import USAGE_STORES, scheme_name

    scheme = found[1]
    if found[0] == f"{scheme}:/" and scheme_name(USAGE_STORES, scheme.lower()) is not None:
        return UsageError(f"the usage source {scheme}:/... has one '/' after '{scheme}:' where a URL has two: write "
                          f"{_shown_url(source, found)}")
    return UsageError(
        f"the usage source {_shown_url(source, found)} names no usage store toolsearch knows (the known schemes: "
        f"{', '.join(USAGE_STORES.names())}): give a URL of one of those, or the path of a usage file or export. "
        f"{USAGE_STORES.install_hint()}"
    )


def read_export(path: str) -> UsageLog:
    """A log written by `toolsearch usage export` ("-": standard input); a URL is refused, its credentials hidden."""
    if (url := _URL_LIKE.match(path)) is not None:
        raise UsageError(f"{_shown_url(path, url)} is a URL, not a usage export: give the path of a file that "
                         "`toolsearch usage export` wrote, or '-' for standard input")
    source = sys.stdin if path == "-" else None
    try:
        text = source.read() if source else Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    # (ValueError: besides bad JSON, a number of over 4,300 digits, which Python will not read)
    except (OSError, ValueError, RecursionError) as exc:
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
    # The export is at fault, not the index's log: the stored log's advice (`usage clear`) would delete that
    # intact log and leave this file as it is.
    what = "the export on standard input" if path == "-" else path
    advice = (f"fix {what} or export it again with `toolsearch usage export` (the index's own usage log is not at "
              "fault and was left as it is)")
    return UsageLog.from_dict(data, path, advice=advice, stored=False)  # a bound too large is the export's fault


def read_usage(source: str, catalog: str) -> UsageLog:
    """What `tune --usage` learns from: a usage export, or every log of a usage file (`mcp serve --usage-log`,
    `<INDEX>.usage.json`) or of a usage store URL (`redis://...`: the one gateway workers share), read as one.

    A gateway keeps one log per catalog, and its catalog changes whenever an upstream's tools do, so
    all of a file's or store's logs say what its users asked; the logs that keep request text are
    joined (for `catalog`), and a source with none gives its first log, which `tune` refuses by its
    privacy.
    """
    from .stores import USAGE_STORES, scheme_name, url_scheme, usage_store_from_url
    from .usage import FORMAT

    # the stores' own lookup: a scheme in any case names a plug-in's store in any case (`AcmeDB://`, `REDIS://`)
    known = "://" in source and scheme_name(USAGE_STORES, url_scheme(source)) is not None
    if not known and (url := _URL_LIKE.match(source)) is not None:
        raise _url_refused(source, url)  # not read as a file: its error would quote it whole
    if known:
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
                # Not necessarily the index's own log: `usage clear` would delete that one and leave SOURCE as it is.
                advice = (f"fix {source} or remove it, or point --usage at another file (`toolsearch usage clear` "
                          f"deletes only the usage log beside the index, not {source})")
                return _joined(stored_logs(FileUsageStore(source, advice=advice)) or [], catalog)
    return read_export(source)


def logs_beside(folder: Path, catalog: str) -> tuple[UsageLog, int]:
    """What `tune` and `eval --usage` learn from in the usage file beside an index: every log it keeps, read as
    `read_usage` reads a usage file, and how many of those entries were logged for other (earlier) catalogs.

    The file keeps one log per catalog, so after a tool changed and the index was rebuilt the requests
    logged before sit under the old catalog's hash; they still say what users asked (tools that are gone
    are left out by whoever reads the log), so they are read too rather than ignored.
    """
    logs = sorted(FileUsageStore(usage_path(folder)).logs(), key=lambda log: log.catalog != catalog)  # its own first
    joined = _joined(logs, catalog)
    earlier = sum(len(log) for log in logs if log.catalog != catalog and (log is joined or log.privacy == "raw"))
    return joined, earlier


def _joined(logs: list[UsageLog], catalog: str) -> UsageLog:
    raw = [log for log in logs if log.privacy == "raw"]
    if not raw:
        return logs[0] if logs else UsageLog(catalog)
    joined = UsageLog(catalog, privacy="raw", max_entries=min(max(1, sum(map(len, raw))), MAX_ENTRIES_LIMIT))
    for log in raw:
        joined.merge(log)
    return joined


def _shown(text: str) -> str:
    """Logged text (a request, a tool name: whatever a client sent, or an import held) fit for a terminal: as it is
    when it is plain, else quoted with its escapes, line breaks and hidden characters written out, so that an escape
    sequence is seen rather than run (it could clear the screen or recolour what follows)."""
    from ._untrusted import first_hidden, quoted

    return text if text.isprintable() and first_hidden(text) is None else quoted(text)


def _show(
    console: Any, store: FileUsageStore, catalog: str, log: UsageLog | None, earlier: list[UsageLog], *,
    as_json: bool,
) -> int:
    entries = log.entries() if log else []
    top = Counter(e.called for e in entries).most_common(10)
    earlier_entries = sum(map(len, earlier))
    if as_json:
        console.json({
            "path": str(store.path), "catalog": catalog, "entries": len(entries),
            "max_entries": log.max_entries if log else None, "privacy": log.privacy if log else None,
            "top_tools": [{"name": n, "calls": c} for n, c in top],
            "latest": [e.to_dict() for e in entries[-10:]],
            "earlier_catalogs": {"logs": len(earlier), "entries": earlier_entries},
        })
        return 0
    if not entries:
        console.print(f"no usage recorded for this index ({store.path})")
    else:
        assert log is not None
        console.print(f"{len(entries)} usage entries (cap {log.max_entries}, privacy {log.privacy}) in {store.path}")
        console.print("most called after a search: " + ", ".join(f"{_shown(n)} ({c})" for n, c in top))
        for e in entries[-10:]:
            shown = e.query if e.query is not None else " ".join(e.terms) if log.privacy == "tokens" else "(hashed)"
            console.print(f"  {_shown(shown):60.60}  -> {_shown(e.called)}")
    if earlier:
        # The file keeps one log per catalog: after a tool changed and the index was rebuilt, what was
        # recorded before sits under the old catalog's hash, and the user should know it is still there.
        console.print(
            f"also {earlier_entries} entries in {len(earlier)} {'log' if len(earlier) == 1 else 'logs'} of earlier "
            "catalogs of this index (recorded before its tools changed): `toolsearch tune` and `eval --usage` "
            "read them too, learned ranking reads only the current catalog's log (docs/learning.md); "
            "`toolsearch usage clear` deletes them all"
        )
    return 0
