"""The gateway's feed of the usage log: what each client searched, was shown, and then called successfully."""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from .._errors import UsageLogReplacedError, UsageStoreUnreachableError
from ..usage import (
    FileUsageStore,
    InMemoryPendingSearches,
    InMemoryUsageStore,
    PendingSearches,
    Privacy,
    UsageEntry,
    UsageError,
    UsageLog,
    UsageRecorder,
    UsageStore,
    stored_logs,
)

__all__ = ["GatewayUsage"]

logger = logging.getLogger("toolsearch.mcp")

SAVE_DELAY = 1.0  # seconds: entries landing together are written in one save


@dataclass(frozen=True, slots=True)
class _Unsaved:
    """An entry the store has not received yet, with what re-hashes it should the stored log's salt change: its
    request text (in this process's memory only, until saved; None where this worker never had it: a search another
    worker served, kept in the shared pending searches as the log's privacy allows) and the salt its terms were
    hashed with."""

    entry: UsageEntry
    query: str | None
    salt: str


class GatewayUsage:
    """A `UsageRecorder` over the log of the gateway's current catalog, saved to a store.

    `enabled=False` records nothing. With a file store the log is written at most once per
    SAVE_DELAY seconds after new entries, in a background thread, and at interpreter exit. When
    the catalog changes (an upstream's tools changed), the log moves to the new catalog's hash
    with its entries (votes for tools that are gone are ignored by the ranker): the old catalog's
    log is united with the new one's and deleted, so the store keeps one log within its
    `max_entries` however often the catalog changes, not one copy per catalog ever served.

    A store with `append` (a file, Redis) is shared: only new entries are written to it, never the
    whole log over what other workers wrote. When it cannot be reached at start, the feed records in
    memory and opens the stored log (checking its privacy setting) at the first save it answers; when
    the stored log was created again under another salt (Redis restarted empty), the feed opens it
    again and re-hashes what it has not saved. Entries waiting for the store are bounded by the log's
    own bound (the oldest dropped first, with a warning counting them).
    """

    def __init__(
        self,
        catalog: str,
        *,
        store: UsageStore | None = None,
        enabled: bool = True,
        privacy: Privacy = "hashed",
    ) -> None:
        self.store: UsageStore = store if store is not None else InMemoryUsageStore()
        self.enabled = enabled
        self.privacy: Privacy = privacy
        self._unsaved: list[_Unsaved] = []  # entries a store with `append` has not received yet
        self._dropped = 0  # unsaved entries dropped over the bound since the last warning said so
        self._lock = threading.Lock()
        self._switch = threading.Lock()  # searches run in worker threads: one catalog switch at a time
        self._saving = threading.Lock()  # one save (or catalog switch) talks to the store at a time
        self._timer: threading.Timer | None = None
        self._appends = callable(getattr(self.store, "append", None))
        self._opened = True  # whether `log` is the stored log; False: in memory until the store answers
        log = UsageLog(catalog, privacy=privacy)
        if enabled:
            try:
                log = self._open(catalog, privacy)
            except UsageStoreUnreachableError as exc:  # a worker starting in an outage serves; the log waits
                self._opened = False
                logger.warning(
                    "%s; recording in memory until it answers: the stored log is then opened (its privacy setting "
                    "checked) and what was recorded meanwhile saved", str(exc).rstrip("."),
                )
        self.recorder = UsageRecorder(log, enabled=enabled, pending=_shared_pending(self.store))
        if enabled:
            atexit.register(_save_at_exit, weakref.ref(self))  # a weak reference: a finished gateway can go

    def _open(self, catalog: str, privacy: Privacy) -> UsageLog:
        # Every stored log is checked before anything is written: the feed moves to another catalog's log
        # whenever an upstream's tools change, so each must keep the setting asked for.
        for stored in stored_logs(self.store) or ():
            self._check_setting(stored, privacy)
        return self._open_one(catalog, privacy)

    def _open_one(self, catalog: str, privacy: Privacy) -> UsageLog:
        # A store shared by workers creates the log once, so every worker hashes words with one salt.
        opener = getattr(self.store, "open_log", None)
        log: UsageLog = (opener(catalog, privacy=privacy) if callable(opener)
                         else self.store.load(catalog) or UsageLog(catalog, privacy=privacy))
        self._check_setting(log, privacy)
        return log

    def _check_setting(self, log: UsageLog, privacy: Privacy) -> None:
        """A log keeps one setting: going on in a stored one would keep request text the operator just chose
        not to keep, or hash what they asked to keep readable."""
        if log.privacy == privacy:
            return
        raise UsageError(
            f"the usage log of catalog {log.catalog[:12]} in {self.store!r} keeps requests with privacy "
            f"{log.privacy!r}, not {privacy!r} as asked (--usage-privacy): a log keeps one setting. Serve with "
            f"--usage-privacy {log.privacy} to go on with it, or start {privacy!r} logs "
            + ("in another --usage-log file (or after deleting this one)" if isinstance(self.store, FileUsageStore)
               else "after deleting the stored ones")
        )

    @classmethod
    def from_url(cls, catalog: str, url: str, *, path: str | Path | None = None, enabled: bool = True,
                 privacy: Privacy = "hashed") -> GatewayUsage:
        """The feed beside a session store URL (`stores.usage_store_from_url`): Redis shares the log and
        the pending searches between workers; otherwise a file at `path` (merged), or memory."""
        from ..stores import usage_store_from_url

        store = usage_store_from_url(url, path=None if path is None else str(path))
        return cls(catalog, store=store, enabled=enabled, privacy=privacy)

    @classmethod
    def from_file(cls, catalog: str, path: str | Path | None, *, enabled: bool = True) -> GatewayUsage:
        """The feed for `mcp serve`: a FileUsageStore at `path`, or memory when `path` is None."""
        store = FileUsageStore(path) if path is not None else None
        return cls(catalog, store=store, enabled=enabled)

    @property
    def log(self) -> UsageLog:
        return self.recorder.log

    @property
    def remote(self) -> bool:
        """Whether crediting a call is a network round trip (the pending searches are shared, in Redis)."""
        return self.enabled and not isinstance(self.recorder.pending, InMemoryPendingSearches)

    def searched(
        self, session_id: str, query: str | None, shown: Sequence[str], *, ranked: Sequence[str] | None = None
    ) -> None:
        """A search a client made and what it was shown (`ranked`: the backend's own order, where it differs)."""
        self.recorder.record_search(session_id, query, shown, ranked=ranked)

    def called(self, session_id: str, tool: str, ok: bool) -> None:
        if not self.enabled or not ok:
            return
        if not self._appends:  # the whole log is saved: nothing to keep apart
            if self.recorder.record_call(session_id, tool, ok) is not None:
                self._save_soon()
            return
        # With the request text: an entry not saved yet can then be re-hashed should the stored log come back
        # under another salt
        log = self.recorder.log
        credited = self.recorder.credit_call(session_id, tool, ok)
        if credited is None:
            return
        entry, query = credited
        with self._lock:
            self._unsaved.append(_Unsaved(entry, query, log.salt))
            self._bound_unsaved(log.max_entries)
        self._save_soon()

    def _bound_unsaved(self, limit: int) -> None:
        """Keep the newest `limit` unsaved entries (called under `_lock`): the store keeps no more of a log than
        its bound, so older ones could never be stored; they are counted for the next warning."""
        over = len(self._unsaved) - limit
        if over > 0:
            del self._unsaved[:over]
            self._dropped += over

    def catalog_changed(self, catalog: str) -> None:
        """Carry the log over to the new catalog hash (a no-op when it is the same catalog)."""
        if not self.enabled or catalog == self.recorder.log.catalog:
            return
        with self._switch:
            if catalog != self.recorder.log.catalog:
                self._switch_to(catalog)

    def _switch_to(self, catalog: str) -> None:
        if not self._appends:
            self._switch_whole(catalog)
            return
        with self._saving:
            old = self.recorder.log
            self._save_now()  # this worker's entries join the old log, which every worker's carry reads
            if not self.enabled:
                return  # the stored logs keep another privacy setting: `_save_now` said so and stopped recording
            with self._lock:
                waiting = bool(self._unsaved)
            try:
                if not self._opened or waiting:
                    raise UsageStoreUnreachableError("the usage store did not take this worker's entries")
                # Carried from the stored log, which holds every worker's entries (this worker's memory holds
                # only its own): each worker that switches carries it, and the merge keeps each entry once, so
                # entries another worker appends to either log meanwhile are never overwritten nor lost.
                try:
                    self._carry(old.catalog, catalog)
                except UsageStoreUnreachableError:
                    raise
                except UsageError as exc:  # a stored log of that catalog with another salt: kept as it is
                    logger.warning("usage log: could not carry entries over to the new catalog: %s", exc)
                log = self._open_one(catalog, self.privacy)
            except UsageError as exc:
                # The store is away (or its log of the new catalog unreadable): the new catalog's log is opened,
                # its setting checked, and what waits saved into it at the first save the store answers.
                logger.warning("usage log: the new catalog's log is kept in memory until the store answers: %s", exc)
                self._opened = False
                log = UsageLog(catalog, max_entries=old.max_entries, privacy=old.privacy, salt=old.salt,
                               entries=old.entries())
            self.recorder.log = log

    def _carry(self, source: str, target: str) -> None:
        """Carry the stored log of catalog `source` over to `target`'s."""
        move = getattr(self.store, "move", None)
        if callable(move):  # a file, Redis: united and the source deleted in one step (one log goes forward)
            move(source, target)
            return
        # A plug-in's store without `move`: united, and the source left as it is. Deleting it apart from the carry
        # would lose what another worker appends to it in between.
        stored = self.store.load(source)
        if stored is not None and len(stored):
            self._unite(UsageLog(target, max_entries=stored.max_entries, privacy=stored.privacy, salt=stored.salt,
                                 entries=stored.entries()))

    def _unite(self, carried: UsageLog) -> None:
        """Merge `carried` into the stored log of its catalog, each entry once, never over another worker's."""
        merge = getattr(self.store, "merge", None)
        if callable(merge):  # Redis under WATCH, a file under its lock
            merge(carried)
        else:  # a plug-in's store with `append` only: what the target lacks by time
            target = self.store.load(carried.catalog)
            newest = max((e.at for e in target.entries()), default=float("-inf")) if target else float("-inf")
            self._append(carried, [e for e in carried.entries() if round(e.at, 3) > newest])

    def _append(self, log: UsageLog, entries: Sequence[UsageEntry]) -> None:
        """The store's `append` (not part of the UsageStore protocol: `_appends` says whether it has one)."""
        cast(Any, self.store).append(log, entries)

    def _switch_whole(self, catalog: str) -> None:
        """A catalog switch for a store that saves whole logs (memory, a plug-in's without `append`)."""
        old = self.recorder.log
        self.save()
        log = self.store.load(catalog) or UsageLog(catalog, privacy=old.privacy, salt=old.salt)
        newest = max((e.at for e in log.entries()), default=float("-inf"))
        carried = UsageLog(old.catalog, privacy=old.privacy, salt=old.salt, max_entries=old.max_entries)
        # back to an earlier catalog: only what is newer than its log (stored times are rounded to 1 ms)
        carried.extend(e for e in old.entries() if round(e.at, 3) > newest)
        try:
            log.merge(carried)
        except UsageError as exc:  # a stored log of that catalog with another salt: keep it as it is
            logger.warning("usage log: could not carry entries over to the new catalog: %s", exc)
        else:
            # One log goes forward (its bound kept by the log itself): the old one, now in the new, would otherwise
            # stay as a copy, one per catalog ever served. The whole log is this feed's: nothing else writes to it.
            self.store.delete(old.catalog)
        self.recorder.log = log
        self._save_soon()

    def _save_soon(self) -> None:
        if isinstance(self.store, InMemoryUsageStore):
            return  # `log` is the live log; copying it into the store on every entry would cost O(entries)
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(SAVE_DELAY, self.save)
            self._timer.daemon = True
            self._timer.start()

    def save(self) -> None:
        """Write the log to its store now (errors are logged: the gateway goes on serving)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if not self.enabled:
            return
        if not self._appends:  # a store of a plug-in without `append` (or memory): the whole log
            if len(self.recorder.log):
                try:
                    self.store.save(self.recorder.log)
                except (OSError, UsageError) as exc:
                    logger.warning("could not save the usage log: %s", exc)
            return
        with self._saving:
            self._save_now()

    def _save_now(self) -> None:
        """Append what is new to the store (called under `_saving`): only what is new, since other workers'
        entries are in the store already, and a log cleared under this gateway does not come back whole."""
        with self._lock:
            unsaved, self._unsaved = self._unsaved, []
        try:
            if unsaved and not self._opened:
                self._open_late(len(unsaved))
            if not self.enabled:
                return  # `_open_late` found a log with another setting: nothing is written
            unsaved = self._fitted(unsaved)
            try:
                self._append(self.recorder.log, [u.entry for u in unsaved])
            except UsageLogReplacedError:  # created again under another salt: open it again, re-hash, append again
                self.recorder.log = self._open_one(self.recorder.log.catalog, self.privacy)
                unsaved = self._fitted(unsaved)
                self._append(self.recorder.log, [u.entry for u in unsaved])
        except (OSError, UsageError) as exc:
            with self._lock:  # kept for the next save (Redis may be back by then): recorded once, never dropped
                self._unsaved = unsaved + self._unsaved
                self._bound_unsaved(self.recorder.log.max_entries)
                kept = len(self._unsaved)
            logger.warning("could not save the usage log (%d unsaved entries kept for the next save): %s",
                           kept, exc)
        with self._lock:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            logger.warning(
                "usage log: %d older unsaved %s dropped: more entries than the log keeps (%d) waited for the store",
                dropped, "entry was" if dropped == 1 else "entries were", self.recorder.log.max_entries,
            )

    def _open_late(self, waiting: int) -> None:
        """Open the stored log the feed could not open at start (or after a switch), now that `waiting` entries
        taken out of the unsaved list need it."""
        catalog = self.recorder.log.catalog
        try:
            log = self._open(catalog, self.privacy)
        except UsageStoreUnreachableError:
            raise
        except UsageError as exc:  # at start this refuses to serve; now it stops recording, saying why
            with self._lock:
                lost, self._unsaved = waiting + len(self._unsaved), []
            self.enabled = self.recorder.enabled = False
            logger.error(
                "usage log off until the gateway restarts: %s (%d %s recorded while the store was away %s not saved)",
                exc, lost, "entry" if lost == 1 else "entries", "was" if lost == 1 else "were",
            )
            return
        self.recorder.log = log
        self._opened = True

    def _fitted(self, unsaved: list[_Unsaved]) -> list[_Unsaved]:
        """`unsaved` as the current log stores them: re-hashed with its salt where they were hashed with another
        (and added to it, since they were recorded into the log it replaced)."""
        log = self.recorder.log
        fitted: list[_Unsaved] = []
        moved: list[UsageEntry] = []
        lost = 0
        for item in unsaved:
            if item.salt != log.salt:
                entry = item.entry
                if log.privacy == "hashed":
                    if item.query is None:  # its text was never in this process: its terms cannot be hashed again
                        lost += 1
                        continue
                    entry = replace(entry, terms=log.terms(item.query), query=None)  # its voter kept
                item = _Unsaved(entry, item.query, log.salt)
                moved.append(entry)
            fitted.append(item)
        if moved:
            log.extend(moved)
        if lost:
            logger.warning(
                "usage log: %d unsaved %s hashed with the salt of a log that was replaced, from searches another "
                "worker served (whose text is not kept), and could not be hashed again: not saved",
                lost, "entry was" if lost == 1 else "entries were",
            )
        return fitted


def _save_at_exit(ref: weakref.ReferenceType[GatewayUsage]) -> None:
    feed = ref()
    if feed is not None:
        feed.save()


def _shared_pending(store: UsageStore) -> PendingSearches | None:
    """The store's shared pending searches (Redis), so a call is credited whichever worker served its search."""
    pending = getattr(store, "pending", None)
    return pending() if callable(pending) else None  # type: ignore[no-any-return]
