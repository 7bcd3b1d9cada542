"""A process's copy of a stored catalog at one version: read whole, or caught up from the change records, each
read in one repeatable-read transaction (so it is one version, never half of a change); and the thread that
hears of new versions (LISTEN/NOTIFY, with a version poll as a fallback) and catches up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import CatalogStoreError, IndexNotFoundError, ToolSearchError
from ..catalog import Catalog
from ..tools import Tool
from .schema import CHANNEL, tools_table

if TYPE_CHECKING:
    from ._connect import Connector

__all__ = ["Snapshot", "read_whole", "read_since", "Watcher"]

logger = logging.getLogger("toolsearch.pg")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A catalog as of `version`; `changed` / `removed` say what moved since the snapshot it was caught up from."""

    version: int
    catalog: Catalog
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def _tool(name: str, fingerprint: str, definition: Any) -> Tool:
    data = definition if isinstance(definition, dict) else json.loads(definition)
    return Tool._restore(dict(data), fingerprint)


def _begin_snapshot(conn: Any, catalog_id: int, name: str) -> int:
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    conn.execute("SET LOCAL enable_seqscan = on")  # whole-table reads (the pool turns it off for searches)
    conn.execute("SET LOCAL statement_timeout = 0")  # a million tools take longer than a search may
    found = conn.execute("SELECT version FROM toolsearch_catalogs WHERE id = %s", (catalog_id,)).fetchone()
    if found is None:
        raise IndexNotFoundError(f"the catalog {name!r} was removed from the store; build it again")
    return int(found[0])


def read_whole(conn: Any, catalog_id: int, name: str) -> Snapshot:
    """Every tool of the catalog, at one version."""
    with conn.transaction():
        version = _begin_snapshot(conn, catalog_id, name)
        rows = conn.execute(f"SELECT name, fingerprint, definition FROM {tools_table(catalog_id)}").fetchall()
    return Snapshot(version, Catalog(_tool(*row) for row in rows))


def read_since(conn: Any, catalog_id: int, name: str, base: Snapshot) -> Snapshot:
    """`base` brought to the current version through the change records; the whole catalog when they are gone."""
    with conn.transaction():
        version = _begin_snapshot(conn, catalog_id, name)
        if version == base.version:
            return base
        records = conn.execute(
            "SELECT version, upserted, removed FROM toolsearch_changes WHERE catalog_id = %s AND version > %s "
            "ORDER BY version",
            (catalog_id, base.version),
        ).fetchall()
        # a store restored from an older backup counts backwards: only a whole read is right then
        complete = version > base.version and [r[0] for r in records] == list(range(base.version + 1, version + 1))
        if complete and all(r[1] is not None for r in records):
            touched = list(dict.fromkeys(n for _, upserted, removed in records for n in (*upserted, *removed)))
            rows = conn.execute(
                f"SELECT name, fingerprint, definition FROM {tools_table(catalog_id)} WHERE name = ANY(%s)",
                (touched,),
            ).fetchall()
            present = {row[0] for row in rows}
            gone = tuple(n for n in touched if n not in present and n in base.catalog)
            tools = [_tool(*row) for row in rows]
            catalog = base.catalog.updated(upsert=tools, remove=gone)
            return Snapshot(version, catalog, tuple(t.name for t in tools), gone)
        rows = conn.execute(f"SELECT name, fingerprint, definition FROM {tools_table(catalog_id)}").fetchall()
    catalog = Catalog(_tool(*row) for row in rows)
    delta = base.catalog.diff(catalog)
    return Snapshot(version, catalog, (*delta.added, *delta.changed), delta.removed)


class Watcher:
    """A daemon thread that calls `on_version(version)` when the catalog's version moves: at once on a NOTIFY,
    else within `poll` seconds. A lost connection is an outage of the store (`Connector.failed`: logged once,
    and what needs the store is refused meanwhile); it is opened again until `stop`, and once it is, the outage is
    over and the pool's connections to the old server are dropped."""

    def __init__(
        self, connector: Connector, catalog_id: int, on_version: Callable[[int], None], *, poll: float
    ) -> None:
        self._connector = connector
        self.catalog_id = catalog_id
        self._on_version = on_version
        self.poll = poll
        self.shown = connector.shown
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"toolsearch-pg-watch-{catalog_id}", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(2 * self.poll, 2.0))

    def _run(self) -> None:
        failing = False
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connector.direct()
                conn.execute(f"LISTEN {CHANNEL}")
                if failing:
                    self._connector.answered()
                    # a restarted server left the pool's idle connections dead: drop them here, not in a request
                    self._connector.pool.check()
                failing = False
                self._check(conn)  # whatever changed while not listening
                while not self._stop.is_set():
                    heard = False
                    for note in conn.notifies(timeout=self.poll, stop_after=1):
                        heard = note.payload.split(":", 1)[0] == str(self.catalog_id)
                    if heard or not self._stop.is_set():
                        self._check(conn)
            except Exception as exc:  # the store is down or restarting: an outage until it answers; try again
                if isinstance(exc, ToolSearchError) and not isinstance(exc, CatalogStoreError):
                    # the store answered (the catalog was removed while this caught up): no outage
                    logger.warning("following changes of a catalog in %s: %s", self.shown, exc)
                elif not isinstance(exc, CatalogStoreError):  # (a catch-up's error is translated and recorded already)
                    if isinstance(exc, self._connector._errors):
                        self._connector.error("follow catalog changes", exc)
                    else:
                        logger.warning("following changes of the catalog store %s failed (%s); retrying",
                                       self.shown, type(exc).__name__)
                failing = True
                self._stop.wait(min(self.poll, 1.0))
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()

    def _check(self, conn: Any) -> None:
        found = conn.execute("SELECT version FROM toolsearch_catalogs WHERE id = %s", (self.catalog_id,)).fetchone()
        if found is not None:
            started = time.monotonic()
            self._on_version(int(found[0]))
            spent = time.monotonic() - started
            if spent > 1.0:
                logger.info("caught up with catalog version %s in %.1f s", found[0], spent)
