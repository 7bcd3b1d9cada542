"""A usage store in Redis shared by worker processes: atomic bounded appends, one salt, shared pending searches."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .._errors import UsageLogReplacedError, UsageStoreUnreachableError, missing_dependency
from .._redact import redacted_url
from ..usage import (
    PendingSearch,
    Privacy,
    UsageEntry,
    UsageError,
    UsageLog,
    capped_max_entries,
    merged_logs,
    settings_problem,
)
from .redis import REDIS_SCHEMES, check_redis_url, has_credentials, redis_failure

__all__ = ["RedisUsageStore", "RedisPendingSearches"]

T = TypeVar("T")

MERGE_ATTEMPTS = 20  # a merge re-read this often because workers kept appending: given up, said so


# Credit a call in one server-side step, so two workers serving calls of one session never both
# credit the same search: the newest search that showed the tool and has not credited it yet. KEYS[1] holds the
# searches this release writes, KEYS[2] those an earlier one wrote (while both serve one Redis, in an upgrade); the
# earlier ones are read only when no search of the first showed the tool.
_CREDIT = """
for k = 1, #KEYS do
  local items = redis.call('LRANGE', KEYS[k], 0, -1)
  for i = #items, 1, -1 do
    local ok, search = pcall(cjson.decode, items[i])
    if ok and type(search) == 'table' then
      local shown = false
      for _, name in ipairs(search['shown']) do if name == ARGV[1] then shown = true end end
      if shown then
        for _, name in ipairs(search['credited']) do if name == ARGV[1] then return false end end
        table.insert(search['credited'], ARGV[1])
        redis.call('LSET', KEYS[k], i - 1, cjson.encode(search))
        return items[i]
      end
    end
  end
end
return false
"""


class _Redis:
    """The client and error translation the usage store and its pending searches share."""

    def __init__(self, url: str, prefix: str, timeout: float) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise missing_dependency("redis", "redis") from None
        if urlsplit(url).scheme not in REDIS_SCHEMES:
            raise UsageError(f"usage store URL {redacted_url(url)!r} is not a Redis URL; use redis://host:port/db")
        check_redis_url(url, "usage store", UsageError)
        self.url = redacted_url(url)
        self.credentials = has_credentials(url)
        self.prefix = prefix
        self.errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError,)
        # no answer at all, as opposed to an answer refusing the command (WRONGTYPE, OOM, a script error)
        self.unreachable: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
        )
        self.watch_error: type[BaseException] = redis.exceptions.WatchError
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )

    def call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self.errors as exc:
            unreachable = isinstance(exc, self.unreachable)  # redis-py's credential refusals are among these
            why, answered = redis_failure(exc, self.credentials)
            if unreachable and not answered:
                raise UsageStoreUnreachableError(f"usage store {self.url} cannot be reached to {what}: {why}") from None
            error = UsageStoreUnreachableError if unreachable else UsageError
            raise error(f"usage store {self.url} failed to {what}: {why}") from None


class RedisUsageStore:
    """Usage logs in Redis, one per catalog: `{prefix}usage:{catalog}:meta` (privacy, salt, bound) and
    `{prefix}usage:{catalog}:entries` (a list of JSON entries, oldest first).

    `append` adds entries with RPUSH and trims to the bound with LTRIM in one MULTI/EXEC
    transaction, so workers appending at once lose nothing and the log stays bounded. The salt
    is set once (HSETNX): every worker hashes query words alike. `pending()` gives the shared
    pending searches, so a call is credited whichever worker served its search.
    """

    def __init__(
        self, url: str = "redis://localhost:6379/0", *, prefix: str = "toolsearch:", timeout: float = 1.0,
        pending_ttl_seconds: float = 3600.0,
    ) -> None:
        self._redis = _Redis(url, prefix, timeout)
        self.url = self._redis.url
        self.prefix = prefix
        self.pending_ttl_seconds = pending_ttl_seconds

    def __repr__(self) -> str:
        return f"RedisUsageStore({self.url!r})"

    def _keys(self, catalog: str) -> tuple[str, str]:
        return f"{self.prefix}usage:{catalog}:meta", f"{self.prefix}usage:{catalog}:entries"

    def catalogs(self) -> list[str]:
        """The catalogs this store holds a log of (a gateway starts one whenever its catalog changes)."""
        head, tail = f"{self.prefix}usage:", ":meta"
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", head) + "*" + tail  # the prefix matched literally
        keys = self._redis.call("list the usage logs", lambda: list(
            self._redis.client.scan_iter(match=pattern, count=1000)))
        names = (k.decode() if isinstance(k, bytes) else str(k) for k in keys)
        return sorted(name[len(head):-len(tail)] for name in names)

    def load(self, catalog: str) -> UsageLog | None:
        meta_key, entries_key = self._keys(catalog)
        pipe = self._redis.client.pipeline(transaction=True)
        pipe.hgetall(meta_key)
        pipe.lrange(entries_key, 0, -1)
        meta, rows = self._redis.call("read a usage log", pipe.execute)
        return self._parsed(catalog, meta, rows)

    def _parsed(self, catalog: str, meta: Mapping[Any, Any], rows: Sequence[Any]) -> UsageLog | None:
        """The log stored as `meta` and `rows`; None when there is no meta (no such log)."""
        if not meta:
            return None
        where = f"usage log {catalog[:12]} in {self.url}"
        try:
            fields = {k.decode(): v.decode() for k, v in meta.items()}
            # (a number too large for a log is read as the limit, as an earlier toolsearch may have stored one; one
            # of over 4,300 digits is refused by int)
            max_entries, privacy = capped_max_entries(int(fields["max_entries"]), where), fields["privacy"]
            problem = settings_problem(max_entries, privacy)
            if problem is not None:
                raise ValueError(problem)
            entries = [UsageEntry.from_dict(json.loads(row), f"{where}, entry {i}") for i, row in enumerate(rows)]
            return UsageLog(catalog, max_entries=max_entries, privacy=privacy,  # type: ignore[arg-type]
                            salt=fields["salt"], entries=entries)
        except (KeyError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise UsageError(f"{where} is unreadable ({exc}); clear it with `toolsearch usage clear`") from None

    def open_log(self, catalog: str, *, privacy: Privacy = "hashed") -> UsageLog:
        """The stored log of `catalog`, created when there is none (the first worker's salt wins)."""
        fresh = UsageLog(catalog, privacy=privacy)
        self._claim(fresh)
        log = self.load(catalog)
        assert log is not None
        return log

    def _claim(self, log: UsageLog) -> None:
        meta_key, _ = self._keys(log.catalog)
        pipe = self._redis.client.pipeline(transaction=True)
        for field, value in (("privacy", log.privacy), ("salt", log.salt), ("max_entries", str(log.max_entries))):
            pipe.hsetnx(meta_key, field, value)
        self._redis.call("create a usage log", pipe.execute)

    def append(self, log: UsageLog, entries: Sequence[UsageEntry]) -> None:
        """Add `entries` to the stored log of `log.catalog` atomically, keeping its newest `max_entries`."""
        if not entries:
            return
        self._claim(log)
        meta_key, entries_key = self._keys(log.catalog)
        stored = self._redis.call("read a usage log", self._redis.client.hmget, meta_key, "privacy", "salt")
        privacy, salt = (v.decode() if isinstance(v, bytes) else v for v in stored)
        if "hashed" in (log.privacy, privacy) and (privacy, salt) != (log.privacy, log.salt):
            raise UsageLogReplacedError(
                f"the usage log {log.catalog[:12]} in {self.url} is hashed with another salt or privacy; "
                "open it with open_log() so every worker hashes alike"
            )
        pipe = self._redis.client.pipeline(transaction=True)
        pipe.rpush(entries_key, *(json.dumps(e.to_dict(), ensure_ascii=False) for e in entries))
        pipe.ltrim(entries_key, -log.max_entries, -1)
        self._redis.call("append to a usage log", pipe.execute)

    def merge(self, log: UsageLog) -> None:
        """Unite `log` with the stored log of `log.catalog`, as `FileUsageStore.save` does: each entry once, by
        time, the newest `max_entries` kept; a log not stored yet is created with `log`'s settings and salt.

        The stored log keeps its own settings and salt: hashed entries under another salt raise UsageError (their
        terms do not compare). Read and written under WATCH, so an entry another worker appends meanwhile is
        never overwritten: the merge reads again and retries. A gateway carries a log to a new catalog this way.
        """
        meta_key, entries_key = self._keys(log.catalog)

        def attempt() -> bool:
            with self._redis.client.pipeline(transaction=True) as pipe:
                pipe.watch(meta_key, entries_key)  # type: ignore[no-untyped-call]
                stored = self._parsed(log.catalog, pipe.hgetall(meta_key), pipe.lrange(entries_key, 0, -1))
                united = log if stored is None else self._united(stored, log)
                pipe.multi()
                self._write(pipe, united)
                try:
                    pipe.execute()
                except self._redis.watch_error:
                    return False  # another worker wrote in between: read again
                return True

        for _ in range(MERGE_ATTEMPTS):
            if self._redis.call("merge into a usage log", attempt):
                return
        raise UsageError(
            f"usage store {self.url}: the usage log {log.catalog[:12]} changed under {MERGE_ATTEMPTS} merges in a "
            "row (workers appending to it); nothing was merged"
        )

    def move(self, source: str, target: str) -> UsageLog | None:
        """The carry-over of a catalog switch: unite the stored log of catalog `source` with that of `target` as
        `merge` does, and delete the source's, in one transaction under WATCH of both, so an entry another worker
        appends to either meanwhile is never lost (the move reads again). One log goes forward: a copy left behind
        at every switch would grow the store without bound. Returns the target's log as stored; None, and nothing
        written, when `source` has no log or no entries. Hashed logs with different salts do not unite: UsageError,
        and both are left as they are."""
        source_keys, target_keys = self._keys(source), self._keys(target)
        moved: list[UsageLog | None] = []

        def attempt() -> bool:
            with self._redis.client.pipeline(transaction=True) as pipe:
                pipe.watch(*source_keys, *target_keys)  # type: ignore[no-untyped-call]
                carried = self._parsed(source, pipe.hgetall(source_keys[0]), pipe.lrange(source_keys[1], 0, -1))
                if carried is None or not len(carried):
                    moved.append(None)
                    return True
                carried = UsageLog(target, max_entries=carried.max_entries, privacy=carried.privacy,
                                   salt=carried.salt, entries=carried.entries())
                stored = self._parsed(target, pipe.hgetall(target_keys[0]), pipe.lrange(target_keys[1], 0, -1))
                united = carried if stored is None else self._united(stored, carried)
                pipe.multi()
                self._write(pipe, united)
                pipe.delete(*source_keys)
                try:
                    pipe.execute()
                except self._redis.watch_error:
                    return False  # another worker wrote in between: read again
                moved.append(united)
                return True

        for _ in range(MERGE_ATTEMPTS):
            if self._redis.call("move a usage log to a new catalog", attempt):
                return moved[-1]
        raise UsageError(
            f"usage store {self.url}: the usage log {source[:12]} or {target[:12]} changed under {MERGE_ATTEMPTS} "
            "moves in a row (workers appending to them); nothing was moved"
        )

    def _united(self, stored: UsageLog, log: UsageLog) -> UsageLog:
        if "hashed" in (stored.privacy, log.privacy) and (stored.privacy, stored.salt) != (log.privacy, log.salt):
            raise UsageError(
                f"the usage log {log.catalog[:12]} in {self.url} is hashed with another salt or privacy setting than "
                "the entries merged into it (their terms do not compare); they were not merged"
            )
        keep_query = stored.privacy == "raw"  # a log keeps one setting: no request text enters a log without it
        incoming = UsageLog(
            stored.catalog, max_entries=stored.max_entries, privacy=stored.privacy, salt=stored.salt,
            entries=(e if keep_query else replace(e, query=None) for e in log.entries()),  # its voter kept
        )
        return merged_logs(stored, incoming, f"usage log {log.catalog[:12]} in {self.url}")

    def _write(self, pipe: Any, log: UsageLog) -> None:
        """Queue on `pipe` the commands that store `log` whole."""
        meta_key, entries_key = self._keys(log.catalog)
        pipe.delete(meta_key, entries_key)
        pipe.hset(meta_key, mapping={"privacy": log.privacy, "salt": log.salt, "max_entries": str(log.max_entries)})
        rows = [json.dumps(e.to_dict(), ensure_ascii=False) for e in log.entries()]
        if rows:
            pipe.rpush(entries_key, *rows)

    def save(self, log: UsageLog) -> None:
        """Replace the stored log of `log.catalog` with `log` whole (an import). It overwrites what other workers
        appended since `log` was read: a gateway never saves a shared log this way (see `append`, `merge`)."""
        pipe = self._redis.client.pipeline(transaction=True)
        self._write(pipe, log)
        self._redis.call("save a usage log", pipe.execute)

    def delete(self, catalog: str) -> None:
        self._redis.call("delete a usage log", self._redis.client.delete, *self._keys(catalog))

    def pending(self, *, max_searches: int = 16) -> RedisPendingSearches:
        """The pending searches every worker on this Redis shares."""
        return RedisPendingSearches(self._redis, max_searches=max_searches, ttl_seconds=self.pending_ttl_seconds)

    def close(self) -> None:
        self._redis.client.close()


class RedisPendingSearches:
    """Pending searches per session in `{prefix}usage-pending2:{session}` (the newest `max_searches`,
    expiring after `ttl_seconds` without a search).

    An earlier toolsearch kept them in `{prefix}usage-pending:{session}`, as rows holding the request text, and
    reads every row there as such; this one's rows need not hold it, so they go under another key, which workers of
    that release never read (in a rolling upgrade on one Redis, they would fail to credit a call to such a row, and
    lose it). Its rows are still credited here.

    Redis gets what the log may keep of a request: its terms as the log stores them (hashed under privacy
    "hashed"), and its text only under "raw", so a search no call follows leaves nothing readable for the hour it
    waits. The text of the searches this worker served stays in its memory (the newest `max_searches` of the
    newest `max_sessions` sessions), so a call it credits can still be hashed with the log as it is then.
    """

    def __init__(
        self, redis: _Redis, *, max_searches: int = 16, ttl_seconds: float = 3600.0, max_sessions: int = 10_000
    ) -> None:
        self._redis = redis
        self.max_searches = max_searches
        self.max_sessions = max_sessions
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._credit = redis.client.register_script(_CREDIT)
        # session -> (terms, salt) -> request text, both least recently used first
        self._texts: OrderedDict[str, OrderedDict[tuple[tuple[str, ...], str | None], str]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisPendingSearches({self._redis.url!r})"

    def _key(self, session_id: str) -> str:
        return f"{self._redis.prefix}usage-pending2:{session_id}"

    def _earlier_key(self, session_id: str) -> str:
        """Where an earlier toolsearch keeps the session's searches (read and credited, never written)."""
        return f"{self._redis.prefix}usage-pending:{session_id}"

    def add(self, session_id: str, search: PendingSearch) -> None:
        key = self._key(session_id)
        row: dict[str, object] = {"terms": list(search.terms), "salt": search.salt, "shown": list(search.shown),
                                  "ranked": list(search.ranked), "credited": []}
        if search.keep_text and search.query is not None:
            row["query"] = search.query
        pipe = self._redis.client.pipeline(transaction=True)
        pipe.rpush(key, json.dumps(row, ensure_ascii=False))
        pipe.ltrim(key, -self.max_searches, -1)
        pipe.pexpire(key, self._ttl_ms)
        self._redis.call("record a search", pipe.execute)
        if search.query is not None and not search.keep_text:
            self._remember(session_id, (search.terms, search.salt), search.query)

    def _remember(self, session_id: str, key: tuple[tuple[str, ...], str | None], text: str) -> None:
        with self._lock:
            texts = self._texts.pop(session_id, None) or OrderedDict()
            texts.pop(key, None)
            texts[key] = text
            while len(texts) > self.max_searches:
                texts.popitem(last=False)
            self._texts[session_id] = texts  # most recently used last
            while len(self._texts) > self.max_sessions:
                self._texts.popitem(last=False)

    def credit(self, session_id: str, tool: str) -> PendingSearch | None:
        keys = [self._key(session_id), self._earlier_key(session_id)]
        raw = self._redis.call("credit a call", self._credit, keys, [tool])
        if not raw:
            return None
        search = json.loads(raw)
        shown = tuple(str(s) for s in search["shown"])
        if "terms" not in search:  # written by an earlier toolsearch: the text, read as it was
            return PendingSearch((), shown, shown, str(search["query"]))
        terms = tuple(str(t) for t in search["terms"] or ())  # (Lua's cjson writes an empty list as {})
        salt = search.get("salt")
        salt = None if salt is None else str(salt)
        query = search.get("query")
        if query is None:
            with self._lock:
                texts = self._texts.get(session_id)
                query = None if texts is None else texts.get((terms, salt))
        # (an empty "ranked" is a backend that showed nothing: only learning found the tools)
        ranked = tuple(str(s) for s in search["ranked"]) if "ranked" in search else shown
        return PendingSearch(terms, shown, ranked, query, salt, keep_text="query" in search)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._texts.pop(session_id, None)
        self._redis.call("forget a session's searches", self._redis.client.delete, self._key(session_id),
                         self._earlier_key(session_id))

