"""Postgres backend: tools, their embeddings and a full-text index in Postgres with pgvector, searched in one SQL
statement and fused as the hybrid backend fuses (its `fuse`, its clause scoring).

Two ways to hold a catalog. A backend made by `ToolIndex.build(tools, "postgres", dsn=...)` writes a private
catalog of its own; `save` freezes it (the saved index names that frozen catalog, and a later change to
either side first copies it, rows and embeddings, so a saved index never changes under its readers). A
named catalog (`catalog="prod"`, as `toolsearch.pg.PostgresIndex` and `toolsearch build --store` use) is
shared: every process naming it reads and writes the same rows, each change one transaction.

The DSN is an option (`dsn=`) or `$TOOLSEARCH_STORE`; its password never reaches a manifest (`describe`
and `save` record the DSN without it), a log or an error (toolsearch.pg._connect).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BackendError, CatalogMovedError, CatalogStoreError, IndexFormatError, IndexNotFoundError
from ..embeddings import model_option
from ..pg._connect import Connector, StoreSettings, default_dsn, display_dsn
from ..pg.locks import Holder, held_by, row_lock_holder, wait_turn
from ..pg.schema import (
    CatalogRow,
    copy_catalog,
    create_catalog,
    drop_catalog,
    find_catalog,
    upgrade_catalog,
)
from ..pg.search import search as run_search
from ..pg.writer import apply_change, apply_rebuild, needs_settling, settle, tool_rows
from ..results import Hit, Ranking
from ..tools import Tool
from . import vector as vector_module
from .hybrid import DEFAULT_DENSE_WEIGHT, DEFAULT_POOL, fuse, model_dense_weight

__all__ = ["PostgresBackend", "create", "load", "store_connector", "OPTIONS"]

FORMAT_VERSION = 1
META_FILE = "postgres.json"
_SETTINGS = ("min_connections", "max_connections", "timeout", "connect_timeout", "ef_search", "lock_wait")
_DEFAULT_EF_SEARCH = StoreSettings().ef_search

logger = logging.getLogger("toolsearch.pg")


class PostgresBackend:
    """A catalog in Postgres: dense (pgvector HNSW, cosine) and BM25 full-text candidates fused like `hybrid`."""

    name = "postgres"

    def __init__(
        self,
        connector: Connector,
        encoder: vector_module.VectorBackend,
        *,
        catalog: str | None = None,
        dense_weight: float | None = None,
        pool: int = DEFAULT_POOL,
    ) -> None:
        if dense_weight is None:  # the weight the hybrid backend fuses this model with
            dense_weight = model_dense_weight(encoder.embedder)
        if isinstance(dense_weight, bool) or not isinstance(dense_weight, int | float) or not 0 <= dense_weight <= 1:
            raise BackendError(f"dense_weight must be a number between 0 and 1, got {dense_weight!r}")
        if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
            raise BackendError(f"pool must be a positive integer, got {pool!r}")
        if catalog is not None and (not isinstance(catalog, str) or not catalog.strip()):
            raise BackendError(f"catalog must be a non-empty name, got {catalog!r}")
        self.connector = connector
        self.encoder = encoder  # embeds queries (and their clauses) exactly as the vector backend does
        self.catalog_name = catalog
        self.shared = catalog is not None
        self.dense_weight = float(dense_weight)
        self.pool = pool
        self._row: CatalogRow | None = None
        # a private catalog this backend made (or copied from a frozen one) and has not saved: dropped by `close`.
        # Never one found by name: a named catalog is shared, and one built again under a name is another's.
        self._own = False
        self._lock = threading.RLock()
        self._seen = threading.local()  # the catalog version this thread's last search read

    # --- what it is ---------------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return self.encoder.model_id

    @property
    def store(self) -> str:
        """The store as messages show it (no password)."""
        return self.connector.shown

    @property
    def row(self) -> CatalogRow | None:
        return self._row

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model_id}
        if self.dense_weight != DEFAULT_DENSE_WEIGHT:
            out["dense_weight"] = self.dense_weight
        if self.pool != DEFAULT_POOL:
            out["pool"] = self.pool
        if self.connector.settings.ef_search != _DEFAULT_EF_SEARCH:
            out["ef_search"] = self.connector.settings.ef_search
        return out

    def warm(self) -> None:
        """Load the embedding model now, and reach the store (errors name it) before the first search."""
        self.encoder.warm()
        self.attach(create=False)

    def forget_queries(self) -> None:
        self.encoder.forget_queries()

    # --- the catalog row ------------------------------------------------------------------------

    def attach(self, *, create: bool) -> CatalogRow | None:
        """The catalog's row (created with its tables when `create` and missing); None when it does not exist."""
        with self._lock:
            if self._row is not None:
                return self._row
            name = self.catalog_name

            def find_or_make(conn: Any) -> CatalogRow | None:
                from psycopg.errors import UniqueViolation

                with conn.transaction():
                    found = find_catalog(conn, name) if name is not None else None
                    if found is None and create:
                        fresh = name or f"private-{secrets.token_hex(8)}"
                        try:
                            with conn.transaction():  # a savepoint: another worker may make the same catalog meanwhile
                                found = create_catalog(conn, fresh, self.model_id, self.encoder.embedder.dimension)
                                made.append(name is None)
                        except UniqueViolation:  # it did (its insert committed while ours waited): use that one
                            found = find_catalog(conn, fresh)
                            if found is None:
                                raise
                            upgrade_catalog(conn, found)
                    elif found is not None:
                        upgrade_catalog(conn, found)
                    return found

            made: list[bool] = []
            found = self.connector.call("open the catalog", find_or_make, read=True)
            if found is not None:
                if found.model != self.model_id:
                    raise IndexFormatError(
                        f"the catalog {found.name!r} in {self.store} was embedded with {found.model!r}, not "
                        f"{self.model_id!r}; open it with {model_option(found.model)} or build it again under "
                        "another name"
                    )
                # the same model id with another dimension (a model folder replaced, an embedder's id reused): every
                # search would fail inside Postgres ("different vector dimensions"), looking like an outage
                dimension = self.encoder.embedder.dimension
                if found.dimension != dimension:
                    raise IndexFormatError(
                        f"the catalog {found.name!r} in {self.store} holds {found.dimension}-dimensional embeddings "
                        f"of {found.model!r}, but that model now gives {dimension} dimensions; open it with the model "
                        "that built it, or build it again under another name (or give this model another id)"
                    )
                self._row = found
                self.catalog_name = found.name
                self._own = self._own or any(made)
            return found

    def _writable(self, conn: Any) -> tuple[CatalogRow, bool]:
        """The catalog row, locked for this transaction, and whether it is a copy made now: a frozen one is copied
        first (copy on write), and the copy is this backend's own once the transaction commits (`_written`)."""
        assert self._row is not None
        current = self._take_turn(conn, self._row.name)
        if current is None:
            raise IndexNotFoundError(f"the catalog {self._row.name!r} was removed from {self.store}; build it again")
        if current.id != self._row.id:
            # removed and built again under its name since this process opened it: another catalog, whose versions
            # this process's copy cannot follow (and which is never this backend's to drop)
            raise IndexNotFoundError(
                f"the catalog {self._row.name!r} in {self.store} was removed and built again since this process "
                "opened it; open it again (restart the processes that serve it) to change or search the new one"
            )
        if current.frozen:
            return copy_catalog(conn, current, f"private-{secrets.token_hex(8)}"), True
        return current, False

    def _take_turn(self, conn: Any, name: str) -> CatalogRow | None:
        """The catalog's row, locked until this transaction ends (None when it is not there): writers take turns.

        Another's change holds it as long as that change takes (minutes, for many tools), which is its turn, not a
        slow or failing Postgres: this one waits, no outage is recorded, and once the store's `timeout` has passed
        the log says whom it waits for, and again every minute. A holder that runs no statement for `turn_bound`
        seconds (`lock_wait`: a writer stopped mid-change keeps its transaction open until TCP keepalive notices,
        hours) is given up on: a CatalogStoreError naming it, said as a lock, not an outage.

        The row is polled with SKIP LOCKED rather than waited for in Postgres's queue, so that a lock is always
        taken in the top transaction (a savepoint's would hide its holder from `row_lock_holder`)."""
        conn.execute("SET LOCAL statement_timeout = 0")  # the change runs as long as it takes; the wait is below
        bound = self.connector.settings.turn_bound
        taken: CatalogRow | None = None

        def take() -> bool:
            nonlocal taken
            taken = find_catalog(conn, name, lock=True, skip_locked=True)
            return taken is not None or find_catalog(conn, name) is None  # its row, or removed (or never there)

        def say(waited: float, holder: Holder | None) -> None:
            logger.warning(
                "catalog %r in %s: waited %.0f s for another process's change of it to end (held by %s); "
                "this change waits for its turn while that one runs, and gives up once it has run no "
                "statement for %g s (lock_wait). If it is stuck, stop that process (or end its session: "
                "SELECT pg_terminate_backend(%s))",
                name, self.store, waited, held_by(holder), bound, "PID" if holder is None else holder.pid,
            )

        wait_turn(take, lambda: row_lock_holder(conn, name), say, patience=self.connector.settings.timeout,
                  bound=bound, stalled=lambda holder, waited: self._stalled(name, holder, waited))
        return taken

    def _stalled(self, name: str, holder: Holder | None, waited: float) -> CatalogStoreError:
        bound, who = self.connector.settings.turn_bound, held_by(holder)
        error = CatalogStoreError(
            f"catalog store {self.store} failed to write a change of the catalog {name!r}: another process's change "
            f"holds the catalog's lock and has run no statement for {bound:g} s (held by {who}), so this one "
            f"stopped waiting after {waited:.0f} s. This is a lock, not an outage (Postgres answers): that process is "
            "likely stopped mid-change (SIGSTOP, a paused VM, a cut network that TCP keepalive has not noticed yet). "
            f"Stop it, or end its session (SELECT pg_terminate_backend({'PID' if holder is None else holder.pid})), "
            "then retry; nothing was half written"
        )
        error.outage = False
        return error

    # --- changes --------------------------------------------------------------------------------

    def add(self, tools: Sequence[Tool]) -> None:
        if tools:
            self.change(tools, ())

    def remove(self, names: Collection[str]) -> None:
        if names:
            self.change((), list(names))

    def change(self, upsert: Sequence[Tool], remove: Sequence[str], *, based_on: int | None = None) -> int:
        """Upsert and remove in one transaction (one new version); embeddings are computed before it opens.

        `based_on`: the catalog version the change was worked out against; when another writer has moved
        the catalog past it meanwhile, nothing is written and `CatalogMovedError` says so (sync works it out again).
        """
        with self._lock:
            self.attach(create=True)
            rows = tool_rows(self.connector, self.encoder.embedder, upsert, cache=self.encoder.cache,
                             progress=self.encoder.progress) if upsert else []

            def write(conn: Any) -> tuple[CatalogRow, int, bool]:
                with conn.transaction():
                    row, copied = self._writable(conn)
                    if based_on is not None and row.version != based_on:
                        raise CatalogMovedError(row.version)
                    return row, apply_change(conn, row, rows, remove, self.model_id), copied

            row, version, copied = self.connector.call("write a catalog change", write, slow=True)
            return self._written(row, version, len(rows) + len(remove), copied=copied)

    def rebuild(self, tools: Sequence[Tool]) -> int:
        """Write `tools` as the whole catalog in tables made anew, in one transaction (one new version, which the
        processes following the catalog read whole): how a catalog whose tables were damaged is built again in
        place, under its name and id. The new tables are filled beside the old ones and put in their place at the
        end (`writer.apply_rebuild`): readers search the old ones meanwhile and wait only for that swap."""
        with self._lock:
            self.attach(create=True)
            rows = tool_rows(self.connector, self.encoder.embedder, tools, cache=self.encoder.cache,
                             progress=self.encoder.progress) if tools else []

            def write(conn: Any) -> tuple[CatalogRow, int, bool]:
                with conn.transaction():
                    row, copied = self._writable(conn)
                    patience = self.connector.settings.timeout
                    return row, apply_rebuild(conn, row, rows, self.model_id, patience=patience), copied

            row, version, copied = self.connector.call("rebuild the catalog", write, slow=True)
            return self._written(row, version, len(rows), copied=copied)

    def _written(self, row: CatalogRow, version: int, changed: int, *, copied: bool) -> int:
        """After a change committed: `row` is the catalog it went to, a copy of a frozen one when `copied` (then this
        backend's own, dropped by `close` unless saved; anything else it found by name never is)."""
        if needs_settling(changed):
            self.connector.call("vacuum the catalog", lambda conn: settle(conn, row), slow=True)
        if copied:
            self._own, self.shared = True, False
        self._row = CatalogRow(row.id, row.name, version, row.model, row.dimension, False)
        self.catalog_name = row.name
        return version

    # --- search ---------------------------------------------------------------------------------

    @property
    def last_version(self) -> int | None:
        """The catalog version the calling thread's last search read."""
        return getattr(self._seen, "version", None)

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        row = self._row or self.attach(create=False)
        self._seen.version = None
        if row is None or k < 1:
            return Ranking([])
        vectors = self.encoder.query_vectors(query)
        depth = max(self.pool, k)
        found = self.connector.call(
            "search", lambda conn: run_search(conn, row.id, query, vectors, depth, allowed), read=True
        )
        if found is None:
            raise IndexNotFoundError(
                f"the catalog {row.name!r} was removed from {self.store}; build it again, and open it again in the "
                "processes that served it (restart them): they do not follow a catalog built anew under its name"
            )
        self._seen.version = found.version
        if not found.sims:
            return Ranking([])
        names = list(found.sims)
        sims = np.stack([found.sims[n] for n in names])
        scores = vector_module._clause_scores(sims, sims.max(axis=0))
        dense = dict(zip(names, scores.tolist(), strict=True))
        fused = fuse(dense, found.lexical, self.dense_weight)
        return Ranking([Hit(n, s) for n, s in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]])

    # --- persistence ----------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """Record which catalog this is (a private one is frozen first: the saved index never changes)."""
        with self._lock:
            row = self.attach(create=True)
            assert row is not None
            if not self.shared:
                self.connector.call("freeze the catalog", lambda conn: conn.execute(
                    "UPDATE toolsearch_catalogs SET frozen = true WHERE id = %s", (row.id,)))
                self._own = False  # the saved index names it now
            meta = {"format": FORMAT_VERSION, "store": self.store, "catalog": row.name, "model": self.model_id,
                    "shared": self.shared}
        (folder / META_FILE).write_text(json.dumps(meta) + "\n")

    def close(self) -> None:
        """Close the pool; a private catalog this backend made and did not save is dropped first (nothing else can
        name it: it would stay in the store for good)."""
        # only a private catalog of its own: never a shared one, nor one that another process may name
        row = self._row if self._own and not self.shared else None
        self._own = False
        if row is not None:
            try:
                self.connector.call("drop the unsaved private catalog", lambda conn: drop_catalog(conn, row))
            except CatalogStoreError as exc:
                logger.warning("%s; the catalog %r stays in the store: remove it with `toolsearch rm %s --store URL`",
                               exc, row.name, row.name)
        self.connector.close()


OPTIONS: tuple[str, ...] = ("dsn", "catalog", "dense_weight", "pool", *_SETTINGS, *vector_module.OPTIONS)


def _make(options: dict[str, Any], *, saved_store: str | None = None) -> PostgresBackend:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise BackendError(f"unknown postgres backend option(s) {', '.join(unknown)}; use {', '.join(OPTIONS)}")
    dsn = _store_dsn(options.pop("dsn", None) or default_dsn() or saved_store)
    settings = StoreSettings(**{k: options.pop(k) for k in _SETTINGS if k in options})
    catalog = options.pop("catalog", None)
    own = {k: options.pop(k) for k in ("dense_weight", "pool") if k in options}
    encoder = vector_module.create(**options)
    return PostgresBackend(Connector.shared(dsn, settings), encoder, catalog=catalog, **own)


def _store_dsn(dsn: object) -> str:
    if not dsn:
        raise BackendError(
            "the postgres backend needs a database: pass dsn='postgresql://user@host:5432/db' or set "
            "$TOOLSEARCH_STORE to that URL (the password may come from $PGPASSWORD or ~/.pgpass)"
        )
    if not isinstance(dsn, str):
        raise BackendError(f"dsn must be a connection string, got {type(dsn).__name__}")
    return dsn


def store_connector(dsn: str | None, *, timeout: float | None = None, lock_wait: float | None = None) -> Connector:
    """This process's connector to the store at `dsn` (default: $TOOLSEARCH_STORE), for work that embeds nothing
    (removing a catalog): no embedding model is loaded."""
    settings = (StoreSettings(lock_wait=lock_wait) if timeout is None
                else StoreSettings(timeout=timeout, lock_wait=lock_wait))
    return Connector.shared(_store_dsn(dsn or default_dsn()), settings)


def create(**options: Any) -> PostgresBackend:
    """An empty backend (nothing is written until tools are added); takes dsn, catalog, model and the pool options."""
    return _make(dict(options))


def load(folder: Path, tools: Sequence[Tool], **options: Any) -> PostgresBackend:
    """Open the catalog a saved index names; the DSN comes from `dsn=`, $TOOLSEARCH_STORE, or the saved one."""
    try:
        meta = json.loads((Path(folder) / META_FILE).read_text(encoding="utf-8"))
        catalog, stored = str(meta["catalog"]), str(meta["store"])
    except FileNotFoundError:
        raise IndexFormatError(f"{folder}: {META_FILE} is missing; rebuild the index") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexFormatError(f"{folder}/{META_FILE} is unreadable ({exc}); rebuild the index") from None
    if meta.get("format") != FORMAT_VERSION:
        raise IndexFormatError(f"{folder}: unknown postgres index format {meta.get('format')!r}; rebuild the index")
    options = dict(options)
    options["catalog"] = catalog
    backend = _make(options, saved_store=stored if "***" not in stored else None)
    row = backend.attach(create=False)
    if row is None:
        raise IndexNotFoundError(
            f"{folder} names the catalog {catalog!r} in {backend.store}, which is not there; rebuild the index"
        )
    backend.shared = bool(meta.get("shared", False))
    count = backend.connector.call("count the catalog's tools", lambda conn: conn.execute(
        f"SELECT count(*) FROM toolsearch_tools_{row.id}").fetchone()[0], read=True)
    if count != len(tools):
        raise IndexFormatError(
            f"{folder}: the catalog {catalog!r} in {backend.store} holds {count} tools, the index {len(tools)}; "
            "rebuild the index"
        )
    return backend


def display(dsn: str) -> str:
    """A DSN as this backend shows it (no password)."""
    return display_dsn(dsn)
