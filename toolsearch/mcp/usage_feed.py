"""The gateway's feed of the usage log: what each client searched, was shown, and then called successfully."""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path

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


class GatewayUsage:
    """A `UsageRecorder` over the log of the gateway's current catalog, saved to a store.

    `enabled=False` records nothing. With a file store the log is written at most once per
    SAVE_DELAY seconds after new entries, in a background thread, and at interpreter exit. When
    the catalog changes (an upstream's tools changed), the log moves to the new catalog's hash
    with its entries (votes for tools that are gone are ignored by the ranker).
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
        self.recorder = UsageRecorder(self._open(catalog, privacy) if enabled else UsageLog(catalog, privacy=privacy),
                                      enabled=enabled, pending=_shared_pending(self.store))
        self._unsaved: list[UsageEntry] = []  # entries a store with `append` has not received yet
        self._lock = threading.Lock()
        self._switch = threading.Lock()  # searches run in worker threads: one catalog switch at a time
        self._timer: threading.Timer | None = None
        if enabled:
            atexit.register(_save_at_exit, weakref.ref(self))  # a weak reference: a finished gateway can go

    def _open(self, catalog: str, privacy: Privacy) -> UsageLog:
        # Every stored log is checked before anything is written: the feed moves to another catalog's log
        # whenever an upstream's tools change, so each must keep the setting asked for.
        for stored in stored_logs(self.store) or ():
            self._check_setting(stored, privacy)
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

    def searched(self, session_id: str, query: str | None, shown: Sequence[str]) -> None:
        self.recorder.record_search(session_id, query, shown)

    def called(self, session_id: str, tool: str, ok: bool) -> None:
        entry = self.recorder.record_call(session_id, tool, ok)
        if entry is not None:
            with self._lock:
                self._unsaved.append(entry)
            self._save_soon()

    def catalog_changed(self, catalog: str) -> None:
        """Carry the log over to the new catalog hash (a no-op when it is the same catalog)."""
        if not self.enabled or catalog == self.recorder.log.catalog:
            return
        with self._switch:
            if catalog != self.recorder.log.catalog:
                self._switch_to(catalog)

    def _switch_to(self, catalog: str) -> None:
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
        self.recorder.log = log
        with self._lock:
            self._unsaved = []  # the whole log is saved below
        saver = getattr(self.store, "append", None)
        if callable(saver):
            try:
                self.store.save(log)
            except UsageError as exc:
                logger.warning("could not save the usage log: %s", exc)
        else:
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
        with self._lock:
            unsaved, self._unsaved = self._unsaved, []
        if not self.enabled or not len(self.recorder.log):
            return
        append = getattr(self.store, "append", None)
        try:
            if callable(append):  # only what is new: other workers' entries are in the store already, and a log
                append(self.recorder.log, unsaved)  # cleared under this gateway does not come back whole
            else:  # a store of a plug-in without `append`: the whole log
                self.store.save(self.recorder.log)
        except (OSError, UsageError) as exc:
            with self._lock:  # kept for the next save (Redis may be back by then): recorded once, never dropped
                self._unsaved = unsaved + self._unsaved
            logger.warning("could not save the usage log (its new entries are kept for the next save): %s", exc)


def _save_at_exit(ref: weakref.ReferenceType[GatewayUsage]) -> None:
    feed = ref()
    if feed is not None:
        feed.save()


def _shared_pending(store: UsageStore) -> PendingSearches | None:
    """The store's shared pending searches (Redis), so a call is credited whichever worker served its search."""
    pending = getattr(store, "pending", None)
    return pending() if callable(pending) else None  # type: ignore[no-any-return]
