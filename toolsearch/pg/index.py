"""PostgresIndex: a ToolIndex over a named catalog in Postgres that many processes share, kept current as others
change it (LISTEN/NOTIFY, version polling as a fallback), and written through in one transaction per change.

The first process to open a catalog with tools indexes them under an advisory lock (embeddings computed
once, stored, reused by every later change and process); the others wait on the lock and find it done.
Every search is one statement read at one catalog version; when that version is not the one this
process holds, the process catches up (the change records say what moved) and searches again, so a
result never mixes two versions.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, cast

from .._errors import CatalogMovedError, CatalogStoreError, IndexNotFoundError, InvalidArgumentError
from .._turns import BEAT_EVERY, SILENCE_AT_LEAST, host_name
from ..backends import get_backend_spec
from ..catalog import Catalog, CatalogDelta
from ..index import ToolIndex, _names_list, _names_to_remove
from ..results import SearchResult
from ..tools import Tool
from .locks import Holder, advisory_lock_holder, held_by, wait_turn
from .mirror import Snapshot, Watcher, read_since, read_whole

if TYPE_CHECKING:
    from ..backends.postgres import PostgresBackend
    from ._connect import Connector

__all__ = ["PostgresIndex", "DEFAULT_CATALOG", "remove_catalog"]

logger = logging.getLogger("toolsearch.pg")

DEFAULT_CATALOG = "default"
_CATCH_UP_ATTEMPTS = 5  # searches retried while other processes keep changing the catalog
_SYNC_TRIES = 5  # a sync worked out again while lock-free writers (upsert, remove) keep changing the catalog
_LOCK_SPACE = 0x7473  # advisory lock keys: (this, crc32 of the catalog name)


class PostgresIndex(ToolIndex):
    """A shared catalog: `PostgresIndex.open(dsn, "prod", tools)` in every worker, then search as any ToolIndex.

    `on_change(callback)` calls `callback(index)` after this process caught up with a change (its own or
    another's). `close()` stops following changes (the pool is shared by the process and stays).
    """

    def __init__(self, snapshot: Snapshot, backend: PostgresBackend, *, poll: float | None) -> None:
        super().__init__(snapshot.catalog, backend)
        self._pg = backend
        self._version = snapshot.version
        self._catch_up_lock = threading.Lock()
        self._listeners: list[Callable[[PostgresIndex], None]] = []
        self._watcher: Watcher | None = None
        self.wrote = False  # whether `open` wrote the tools it was given (False: the store held them already)
        if poll is not None:
            row = backend.row
            assert row is not None
            self._watcher = Watcher(backend.connector, row.id, self._heard, poll=poll).start()

    # --- opening -----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dsn: str | None = None,
        catalog: str = DEFAULT_CATALOG,
        tools: Iterable[Tool] | Catalog | None = None,
        *,
        poll: float | None = 1.0,
        keep_namespaces: Collection[str] = (),
        rebuild: bool = False,
        **options: Any,
    ) -> PostgresIndex:
        """The catalog `catalog` of the store at `dsn` (default: $TOOLSEARCH_STORE).

        With `tools`, the stored catalog is brought to exactly those tools first: built when missing,
        else only what differs is written (nothing, when another process already did), even while other
        processes change it. Without, it must exist. `poll`: seconds between version checks besides NOTIFY
        (None: do not follow changes). `options` go to the postgres backend (model, ef_search, pool sizes,
        timeout, ...).

        `keep_namespaces`: namespaces that `tools` does not speak for (a gateway passes the MCP servers it
        could not list): their stored tools stay, though `tools` leaves them out. `rebuild`: write `tools`
        anew, every table of the catalog made again (what to do when its tables were damaged); the other
        processes following it read it whole.
        """
        if not isinstance(catalog, str) or not catalog.strip():
            raise InvalidArgumentError(f"catalog must be a non-empty name, got {catalog!r}")
        if poll is not None and not (isinstance(poll, int | float) and poll > 0):
            raise InvalidArgumentError(f"poll must be a positive number of seconds or None, got {poll!r}")
        if isinstance(keep_namespaces, str):
            raise InvalidArgumentError(f"keep_namespaces must be a list of names, not the string {keep_namespaces!r}")
        if rebuild and tools is None:
            raise InvalidArgumentError("rebuild=True writes the tools anew: pass the tools to build the catalog from")
        if dsn is not None:
            options["dsn"] = dsn
        backend = cast("PostgresBackend", get_backend_spec("postgres").create(catalog=catalog, **options))
        wanted = None if tools is None else tools if isinstance(tools, Catalog) else Catalog(tools)
        wrote = False
        if wanted is not None:
            with _advisory_lock(backend.connector, catalog):
                backend.attach(create=True)
                wrote = _write_exactly(backend, wanted, frozenset(keep_namespaces), rebuild=rebuild)
        elif (existing := backend.attach(create=False)) is None:
            raise IndexNotFoundError(
                f"no catalog {catalog!r} in {backend.store}; build it with `toolsearch build FILE --store URL "
                f"--name {catalog}` or open it with tools"
            )
        elif existing.version == 0:  # its row is made (and committed) before its tools are embedded and written
            raise IndexNotFoundError(
                f"the catalog {catalog!r} in {backend.store} holds no build yet: one is running, or was interrupted "
                f"before it wrote anything. Wait for it, or build it again (`toolsearch build FILE --store URL "
                f"--name {catalog}`)"
            )
        found = backend.row
        assert found is not None
        snapshot = backend.connector.call("read the catalog", lambda conn: read_whole(conn, found.id, catalog),
                                          read=True, slow=True)
        opened = cls(snapshot, backend, poll=poll)
        opened.wrote = wrote
        return opened

    # --- following the store ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The catalog version this process holds."""
        return self._version

    @property
    def catalog_name(self) -> str | None:
        """The catalog's name in the store."""
        return self._pg.catalog_name

    def outage(self) -> CatalogStoreError | None:
        """The store's failure while it stands (down, restarting, hung, slow, out of connections; see
        `Connector.outage`), else None: a server refuses what needs the catalog meanwhile (the gateway answers
        503 with Retry-After) rather than answer from a copy it cannot check."""
        return self._pg.connector.outage()

    def on_change(self, callback: Callable[[PostgresIndex], None]) -> None:
        self._listeners.append(callback)

    def _heard(self, version: int) -> None:
        if version != self._version:
            self.catch_up()

    def catch_up(self) -> int:
        """Bring this process's copy of the catalog to the store's current version; returns it."""
        backend = self._pg
        row = backend.row
        assert row is not None
        with self._catch_up_lock:
            base = Snapshot(self._version, self._catalog)
            newer = backend.connector.call("catch up with the catalog",
                                           lambda conn: read_since(conn, row.id, row.name, base), read=True, slow=True)
            if newer.version == base.version:
                return base.version
            with self._write_lock:
                self._catalog = newer.catalog
                self._version = newer.version
        for callback in list(self._listeners):
            try:
                callback(self)
            except Exception:  # a listener's bug must not stop this process from following the catalog
                logger.exception("a catalog change listener failed")
        return newer.version

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    # --- search: one version per result -----------------------------------------------------------------

    def search_checked(self, text: str, k: int, names: frozenset[str] | None) -> SearchResult:
        for _ in range(_CATCH_UP_ATTEMPTS):
            result = super().search_checked(text, k, names)
            seen = self._pg.last_version
            if seen is None or seen == self._version:
                return result
            self.catch_up()
        return result  # the catalog changed on every attempt: the last result, filtered to this process's copy

    # --- changes: one transaction each, then this process catches up ------------------------------------

    def upsert(self, tools: Iterable[Tool]) -> None:
        incoming = list(tools)
        Catalog(incoming)  # duplicate names in one update are refused before anything is written
        if incoming:
            self._pg.change(incoming, ())
            self.catch_up()

    def remove(self, names: Iterable[str]) -> None:
        """Remove tools by name, as `ToolIndex.remove` does (exact names; a near name that stays is warned about).

        The names are checked against the catalog as the store holds it now (this process catches up first): its
        copy may predate another process's change, which would hide a near name, or warn of one already gone."""
        asked = _names_list("PostgresIndex.remove: names", names)  # a wrong argument is said before the store is read
        self.catch_up()
        gone = _names_to_remove("PostgresIndex.remove", asked, self._catalog)
        if gone:
            self._pg.change((), gone)
            self.catch_up()

    def sync(self, tools: Iterable[Tool] | Catalog, *, keep_namespaces: Collection[str] = ()) -> None:
        """Bring the stored catalog to exactly `tools` in one transaction (only what differs is written).

        `keep_namespaces`: as in `open`, namespaces `tools` does not speak for; their stored tools stay."""
        newer = tools if isinstance(tools, Catalog) else Catalog(tools)
        keep = frozenset(keep_namespaces)
        with _advisory_lock(self._pg.connector, self._pg.catalog_name):

            def stored() -> tuple[Catalog, int]:
                # caught up first, so the copy is of that version or newer (a newer one: the change is refused as
                # moved and worked out again); read the other way round, an older copy would pass for that version
                version = self.catch_up()
                return self._catalog, version

            _write_until_settled(self._pg, newer, keep, stored, again="sync again")
        self.catch_up()

    def __repr__(self) -> str:
        return (f"PostgresIndex({self._pg.catalog_name!r} in {self._pg.store}, {len(self)} tools, "
                f"version {self._version})")


def remove_catalog(dsn: str | None, catalog: str, *, timeout: float | None = None,
                   lock_wait: float | None = None) -> None:
    """Drop the catalog `catalog` of the store at `dsn` (default: $TOOLSEARCH_STORE): its tables, its row and its
    change records, in one transaction, after a build or sync of it that is running has ended (`timeout` and
    `lock_wait` as `PostgresIndex.open` takes them). The embeddings stay (every catalog shares them).
    IndexNotFoundError when there is no such catalog."""
    from ..backends.postgres import store_connector
    from .schema import drop_catalog, find_catalog

    if not isinstance(catalog, str) or not catalog.strip():
        raise InvalidArgumentError(f"catalog must be a non-empty name, got {catalog!r}")
    connector = store_connector(dsn, timeout=timeout, lock_wait=lock_wait)

    def drop(conn: Any) -> bool:
        with conn.transaction():
            row = find_catalog(conn, catalog, lock=True)  # a writer's change ends first
            if row is not None:
                drop_catalog(conn, row)
            return row is not None

    with _advisory_lock(connector, catalog):
        dropped = connector.call("remove the catalog", drop)
    if not dropped:
        raise IndexNotFoundError(f"no catalog {catalog!r} in {connector.shown}")
    logger.info("catalog %r in %s: removed", catalog, connector.shown)


def _change_for(stored: Catalog, wanted: Catalog, keep: frozenset[str]) -> tuple[CatalogDelta, list[str], int]:
    """What turns `stored` into `wanted`: the difference, the names to remove (the stored tools of the `keep`
    namespaces stay though `wanted` leaves them out), and how many stay so."""
    delta = stored.diff(wanted)
    remove = [n for n in delta.removed if stored[n].namespace not in keep]
    return delta, remove, len(delta.removed) - len(remove)


def _write_exactly(backend: PostgresBackend, wanted: Catalog, keep: frozenset[str], *, rebuild: bool) -> bool:
    """Bring the attached catalog to `wanted` (the caller holds its build lock); whether anything was written.

    Worked out against the catalog read whole (see `_write_until_settled`, which `sync` uses too)."""
    name = backend.catalog_name
    if rebuild:
        logger.info("catalog %r in %s: rebuilding it with %d tools", name, backend.store, len(wanted))
        backend.rebuild(list(wanted))
        return True
    row = backend.row
    assert row is not None and name is not None
    catalog_id = row.id

    def stored() -> tuple[Catalog, int]:
        found = backend.connector.call("read the catalog", lambda conn: read_whole(conn, catalog_id, name),
                                       read=True, slow=True)
        return found.catalog, found.version

    return _write_until_settled(backend, wanted, keep, stored, again="open it again")


def _write_until_settled(backend: PostgresBackend, wanted: Catalog, keep: frozenset[str],
                         stored: Callable[[], tuple[Catalog, int]], *, again: str) -> bool:
    """Write what turns the stored catalog (`stored()`: it and its version) into `wanted`; whether anything was
    written. The change is written only if the catalog is still at the version read: an upsert or remove of another
    process takes no build lock, and one that lands while `wanted` is embedded is read again and undone. `again`
    says what to do when other writers kept changing it."""
    name = backend.catalog_name
    for _ in range(_SYNC_TRIES):
        catalog, version = stored()
        delta, remove, kept = _change_for(catalog, wanted, keep)
        # Version 0 is a catalog made but never written; an empty build is written too, as version 1.
        if not (delta.added or delta.changed or remove) and version != 0:
            return False
        logger.info("catalog %r in %s: writing %d new, %d changed, %d removed tools%s", name, backend.store,
                    len(delta.added), len(delta.changed), len(remove),
                    f" (keeping {kept} stored tools of {', '.join(sorted(keep))})" if kept else "")
        try:
            backend.change([wanted[n] for n in (*delta.added, *delta.changed)], remove, based_on=version)
            return True
        except CatalogMovedError:  # another writer changed it while these tools were embedded: work it out again
            continue
    raise CatalogStoreError(
        f"catalog {name!r} in {backend.store}: other writers changed it {_SYNC_TRIES} times while this process worked "
        f"out its change, so nothing was written; {again}"
    )



class _advisory_lock:
    """A session-level advisory lock on a connection of its own, per catalog name: writers that build or sync a
    catalog take turns across processes and machines; the lock goes with the connection if the holder dies.

    While it is held, a thread runs `SELECT 1` on that connection every few seconds (`_beat`): the holder's work
    (embedding many tools) runs no statement there for minutes, and without a beat a waiter could not tell a busy
    holder from a stopped one (SIGSTOP, a paused VM), whose beat stops with it."""

    def __init__(self, connector: Connector, catalog: str | None) -> None:
        self.connector = connector
        self.catalog = catalog
        self.key = zlib.crc32((catalog or "").encode("utf-8")) - (1 << 31)
        self.conn: Any = None
        self._stop_beat = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> None:
        connector = self.connector
        connector._open()
        try:
            # named, so that a process waiting for this lock can say who holds it (see `_wait`)
            self.conn = connector.direct(application_name=f"toolsearch build lock ({host_name()}, "
                                                          f"pid {os.getpid()})")
            self._wait(connector.settings.timeout)
            self._beat = threading.Thread(target=self._beating, name="toolsearch-build-lock-beat", daemon=True)
            self._beat.start()
        except connector._errors as exc:
            if self.conn is not None:
                self.conn.close()
            raise connector.error("take the catalog's build lock", exc) from None
        except BaseException:  # interrupted while waiting: the lock is not held
            if self.conn is not None:
                self.conn.close()
            raise

    def _beating(self) -> None:
        """The holder's beat: a statement on the lock's connection every `BEAT_EVERY` seconds, so that a waiter sees
        it alive however long its work runs; ends at release, or when the connection fails."""
        while not self._stop_beat.wait(BEAT_EVERY):
            try:
                self.conn.execute("SELECT 1")
            except Exception:  # the connection is gone, and the lock with it: the work's own writes will say so
                return

    def _wait(self, patience: float) -> None:
        """Take the lock, waiting while another process holds it (a build of many tools takes minutes), saying in the
        log whom it waits for (see `wait_turn`). A holder whose lock connection has not beaten for `lock_wait`
        seconds (`turn_bound`) is stopped, not busy (see the class docstring): this one gives up on it."""
        bound = max(self.connector.settings.turn_bound, SILENCE_AT_LEAST)

        def take() -> bool:
            return bool(self.conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (_LOCK_SPACE, self.key)).fetchone()[0])

        def say(waited: float, holder: Holder | None) -> None:
            unseen = holder is not None and holder.state is None
            logger.warning(
                "catalog %r in %s: waited %.0f s for another process's build or sync of it to end (held by %s); "
                "this one goes on when that ends or its connection closes, and gives up on a holder silent for %g s "
                "(lock_wait)%s. If it is stuck, stop that process (or end its session: "
                "SELECT pg_terminate_backend(%s))",
                self.catalog, self.connector.shown, waited, held_by(holder), bound,
                "; this role cannot see whether that session is alive, so it waits on however long: grant it "
                "pg_read_all_stats (or pg_monitor) for a stopped holder to be given up on" if unseen else "",
                "PID" if holder is None else holder.pid,
            )

        # a silence is judged by this one's lock_wait, but never below a few beats (a tiny lock_wait would take the
        # gap between two beats of a busy holder for a stop); a holder whose state is not visible (another role,
        # without pg_read_all_stats) is waited for as before the beat, and one not found has just let go
        wait_turn(take, lambda: advisory_lock_holder(self.conn, _LOCK_SPACE, self.key), say, patience=patience,
                  bound=bound, stalled=lambda holder, waited: self._stalled(holder, waited, bound),
                  quiet=Holder.quiet_for, unseen_counts=False)

    def _stalled(self, holder: Holder | None, waited: float, bound: float) -> CatalogStoreError:
        error = CatalogStoreError(
            f"catalog {self.catalog!r} in {self.connector.shown}: another process holds the catalog's build lock "
            f"and has shown no sign of life on it for {bound:g} s (lock_wait; held by {held_by(holder)}): it is "
            f"stopped or hung (a busy build keeps its lock connection beating), so this one stopped waiting after "
            f"{waited:.0f} s and wrote nothing. This is a lock, not an outage (Postgres answers). Stop that process "
            f"(or end its session: SELECT pg_terminate_backend({'PID' if holder is None else holder.pid})) and try "
            "again; a holder of an older toolsearch release does not beat: wait for its build to end, or open the "
            "catalog with a larger lock_wait (PostgresIndex.open(..., lock_wait=SECONDS), `toolsearch build|rm ... "
            "--lock-wait SECONDS`)"
        )
        error.outage = False
        return error

    def __exit__(self, *exc: object) -> None:
        self._stop_beat.set()
        if self._beat is not None:
            self._beat.join()  # its statement ends before the unlock's (one connection)
        try:
            self.conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_LOCK_SPACE, self.key))
        except Exception:  # the connection is gone: so is the lock
            pass
        finally:
            self.conn.close()
