"""`--store postgres://...` on `toolsearch build`, `query` and `rm`: a named catalog in Postgres instead of a folder
(wired in by toolsearch.cli)."""

from __future__ import annotations

import argparse
from typing import Any

from .._errors import InvalidIndexNameError, InvalidQueryError, check_seconds
from ._connect import display_dsn, is_postgres_url

__all__ = ["add_store_option", "check_store", "check_catalog_name", "build", "open_catalog", "remove", "where"]

# What `--store` does on each command that takes it (any other command refuses it, see `store_hint`)
_STORE_HELP = {
    "build": "index the tools into this Postgres (with pgvector) as the catalog --name (default 'default'), shared "
             "by every process that names it; only what changed is written (--rebuild: every table made again)",
    "query": "search the catalog INDEX in this Postgres (built with `toolsearch build --store`)",
    "rm": "remove the catalog NAME from this Postgres (its tables and change records; the stored embeddings stay "
          "for other catalogs): processes serving it fail from then on, also once it is built again, until they "
          "are restarted",
}

DEFAULT_NAME = "default"


def add_store_option(parser: argparse.ArgumentParser, *, build: bool = False, command: str | None = None) -> None:
    """`--store URL` on `command` (build, query or rm; `build=True` names build, else query)."""
    command = command or ("build" if build else "query")
    what = _STORE_HELP[command]
    parser.add_argument(
        "--store", metavar="URL", default=None,
        help=f"{what}: postgresql://user@host:5432/db (the password from $PGPASSWORD or ~/.pgpass keeps it off the "
        "command line)",
    )
    if command != "query":  # build and rm write, and wait for another's build of the catalog to end
        parser.add_argument(
            "--lock-wait", metavar="SECONDS", type=float, default=None,
            help="give up waiting for another process's build of the index once it has shown no sign of life this "
            "long (default 60; with --store, also for a change of the catalog that runs no statement, and the "
            "default is ten times the store's timeout, at least 60)",
        )


def check_store(args: argparse.Namespace) -> None:
    """A usage error (exit 2): a --store that is not a Postgres URL, or combined with --out; a bad --lock-wait."""
    store = getattr(args, "store", None)
    lock_wait = getattr(args, "lock_wait", None)
    if lock_wait is not None:  # the check StoreSettings makes, said as a usage error before anything connects
        check_seconds("--lock-wait", lock_wait, InvalidQueryError)
    if store is None:
        return
    if not is_postgres_url(store):
        raise InvalidQueryError(
            f"--store {display_dsn(store)!r} is not a Postgres URL; use postgresql://user@host:5432/db"
        )
    if getattr(args, "out", None):
        raise InvalidQueryError("--store and --out name two places for one index: give one of them")
    backend = getattr(args, "backend", "auto")
    if backend not in ("auto", "postgres"):
        raise InvalidQueryError(
            f"--backend {backend} does not apply with --store: a catalog in Postgres is searched by its own backend "
            "(dense and full-text candidates fused, as hybrid fuses them); drop --backend"
        )


def check_catalog_name(name: str, option: str) -> None:
    """A usage error for a catalog name the store would refuse. A catalog's name is data in the store, never a path,
    so the local index names' rule does not apply: `mcp serve --catalog fleet:blue` makes such a catalog, which
    `build --name`, `query` and `rm` name with --store."""
    if not name.strip():
        raise InvalidIndexNameError(f"invalid catalog name {name!r} ({option}): give a name that is not empty")


def store_hint(command: str) -> str:
    """What a usage error of a command that takes no `--store` adds when one was given."""
    takers = ", ".join(_STORE_HELP)
    return f"`toolsearch {command}` reads no catalog in Postgres: --store goes with {takers}"


def where(args: argparse.Namespace, name: str) -> str:
    """How output names a stored catalog: its URL without the password, and its name."""
    return f"{display_dsn(args.store)} (catalog {name!r})"


def build(args: argparse.Namespace, console: Any, catalog: Any, options: dict[str, Any]) -> int:
    """Bring the store's catalog --name to exactly these tools; prints what `toolsearch build` prints for a folder."""
    from .index import PostgresIndex

    name = args.name or DEFAULT_NAME
    rebuild = bool(getattr(args, "rebuild", False))
    with console.progress(f"indexing {len(catalog)} tools into {where(args, name)}") as progress:
        index = PostgresIndex.open(args.store, name, catalog, poll=None, rebuild=rebuild,
                                   lock_wait=args.lock_wait, **options)
    reused = not index.wrote
    if args.json:
        console.json({"name": name, "store": display_dsn(args.store), "backend": index.backend_name,
                      "tools": len(index), "catalog_hash": index.catalog.hash, "version": index.version,
                      "reused": reused, "seconds": round(progress.elapsed, 3)})
    else:
        verb = "reused" if reused else "built"
        console.print(f"{verb} index {name!r}: {len(index)} tools, {index.backend_name} backend, "
                      f"{progress.elapsed:.1f}s -> {display_dsn(args.store)}")
    return 0


def open_catalog(args: argparse.Namespace) -> Any:
    """The catalog INDEX of --store, not followed for changes (one query per process)."""
    from .index import PostgresIndex

    options = {"model": args.model} if getattr(args, "model", None) is not None else {}
    return PostgresIndex.open(args.store, args.index, poll=None, **options)


def remove(args: argparse.Namespace, console: Any) -> int:
    """`toolsearch rm NAME --store URL`: drop the catalog NAME (its tables, its row and change records), waiting for
    a build or sync of it that is running to end; the embeddings stay, shared by every catalog."""
    from .index import remove_catalog

    name = args.index
    remove_catalog(args.store, name, lock_wait=args.lock_wait)
    if args.json:
        console.json({"removed": name, "store": display_dsn(args.store)})
    else:
        console.print(f"removed catalog {name!r} from {display_dsn(args.store)}")
    return 0
