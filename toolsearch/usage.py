"""The usage log: which tools were called successfully after which search, kept per catalog.

A `tool_search` whose hit the model then called without error is a labelled example: this
query wanted that tool. `UsageRecorder` joins searches to the calls they led to and appends one
`UsageEntry` per (search, called tool) to a bounded `UsageLog` (oldest entries dropped first);
`toolsearch.learning` turns the log into a ranking signal. Stores keep one log per catalog hash:
`InMemoryUsageStore` (default) and `FileUsageStore` (one JSON file, written atomically).

What is kept of the query text is the log's `privacy` setting:
- "hashed" (default): keyed BLAKE2b hashes of the query's words, nothing readable. The key is a
  random salt stored with the log, so equal words still match; it hides the words from someone
  reading the file, not from someone who holds the file and guesses words (a dictionary attack).
- "tokens": the query's words (lower-case, de-duplicated, sorted), not the text itself.
- "raw": the query text too (for inspection with `toolsearch usage show`).
Learning needs only the words, so every setting learns the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ._errors import ToolSearchError
from .text import WORD_CHUNKS, split_identifier

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "FileUsageStore",
    "InMemoryUsageStore",
    "Privacy",
    "UsageEntry",
    "UsageError",
    "UsageLog",
    "UsageRecorder",
    "UsageStore",
    "query_terms",
    "usage_path",
]

FORMAT = "toolsearch-usage"
FORMAT_VERSION = 1
DEFAULT_MAX_ENTRIES = 100_000  # ~10 MB as JSON; the ranker stays under 1 ms at this size
MAX_TERMS = 32  # words kept per query: a pasted document must not become a giant entry
Privacy = Literal["hashed", "tokens", "raw"]
PRIVACY_SETTINGS: tuple[str, ...] = ("hashed", "tokens", "raw")



class UsageError(ToolSearchError):
    """A usage log or its file is unusable (corrupt, another format version, bad setting)."""


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct lower-case words of a query (identifiers split), sorted, at most MAX_TERMS."""
    words: set[str] = set()
    for chunk in WORD_CHUNKS.findall(query):
        words.update(split_identifier(chunk))  # the same identifier splitting as the tools' text
        words.add(chunk.lower())  # `getUser` also matches a later `getuser`
    return tuple(sorted(words)[:MAX_TERMS])


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """One search that led to a successful call: its query terms, the tools shown, the tool called."""

    terms: tuple[str, ...]
    called: str
    shown: tuple[str, ...] = ()
    query: str | None = None  # only with privacy="raw"
    at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"terms": list(self.terms), "called": self.called, "shown": list(self.shown)}
        if self.query is not None:
            out["query"] = self.query
        out["at"] = round(self.at, 3)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> UsageEntry:
        try:
            terms, called, shown = data["terms"], data["called"], data.get("shown", [])
            query, at = data.get("query"), data.get("at", 0.0)
            ok = (
                isinstance(called, str)
                and isinstance(terms, list)
                and all(isinstance(t, str) for t in terms)
                and isinstance(shown, list)
                and all(isinstance(s, str) for s in shown)
                and (query is None or isinstance(query, str))
                and isinstance(at, int | float)
            )
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise UsageError(f"{where}: not a usage entry (needs terms, called, shown); clear or re-export the log")
        return cls(tuple(terms), called, tuple(shown), query, float(at))


class UsageLog:
    """A bounded, thread-safe log of successful searches for one catalog (oldest dropped first).

    `version` grows with every change, so a ranker can tell when to recompile.
    """

    def __init__(
        self,
        catalog: str = "",
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        privacy: Privacy = "hashed",
        salt: str | None = None,
        entries: Iterable[UsageEntry] = (),
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise UsageError(f"max_entries must be a positive integer, got {max_entries!r}")
        if privacy not in PRIVACY_SETTINGS:
            raise UsageError(f"privacy must be one of {', '.join(PRIVACY_SETTINGS)}, got {privacy!r}")
        self.catalog = catalog
        self.max_entries = max_entries
        self.privacy: Privacy = privacy
        self.salt = salt if salt is not None else secrets.token_hex(16)
        self._entries: deque[UsageEntry] = deque(entries, maxlen=max_entries)
        self._lock = threading.Lock()
        self.version = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[UsageEntry]:
        return iter(self.entries())

    def __repr__(self) -> str:
        return f"UsageLog({len(self)} entries, catalog={self.catalog[:12] or '?'}, privacy={self.privacy})"

    def entries(self) -> list[UsageEntry]:
        with self._lock:
            return list(self._entries)

    def terms(self, query: str) -> tuple[str, ...]:
        """A query's terms as this log stores them (hashed under privacy="hashed")."""
        words = query_terms(query)
        if self.privacy != "hashed":
            return words
        key = self.salt.encode()
        return tuple(sorted({hashlib.blake2b(w.encode(), key=key, digest_size=8).hexdigest() for w in words}))

    def add(self, query: str, called: str, shown: Sequence[str] = (), *, at: float | None = None) -> UsageEntry | None:
        """Record that `query` led to a successful call of `called`; None when the query has no words."""
        terms = self.terms(query)
        if not terms:
            return None
        entry = UsageEntry(
            terms,
            called,
            tuple(shown),
            query if self.privacy == "raw" else None,
            time.time() if at is None else at,
        )
        self.extend([entry])
        return entry

    def extend(self, entries: Iterable[UsageEntry]) -> None:
        with self._lock:
            self._entries.extend(entries)
            self.version += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.version += 1

    # --- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "catalog": self.catalog,
            "privacy": self.privacy,
            "salt": self.salt,
            "max_entries": self.max_entries,
            "entries": [e.to_dict() for e in self.entries()],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "usage log") -> UsageLog:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"{where} is not a toolsearch usage log; clear it with `toolsearch usage clear`")
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise UsageError(
                f"{where} has usage-log format {version!r}; this toolsearch reads {FORMAT_VERSION}. "
                "Upgrade toolsearch, or clear the log with `toolsearch usage clear`"
            )
        rows = data.get("entries")
        if not isinstance(rows, list):
            raise UsageError(f"{where} has no entries list; clear it with `toolsearch usage clear`")
        try:
            return cls(
                str(data.get("catalog", "")),
                max_entries=int(data.get("max_entries", DEFAULT_MAX_ENTRIES)),
                privacy=data.get("privacy", "hashed"),
                salt=str(data["salt"]),
                entries=[UsageEntry.from_dict(row, f"{where}, entry {i}") for i, row in enumerate(rows)],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where} is incomplete ({exc}); clear it with `toolsearch usage clear`") from None

    def merge(self, other: UsageLog) -> int:
        """Append another log's entries (an import); their terms must be comparable with ours."""
        hashed = "hashed" in (other.privacy, self.privacy)
        if hashed and (other.privacy != self.privacy or other.salt != self.salt):
            raise UsageError(
                "cannot merge hashed usage logs with different salts or privacy settings (their terms do not "
                "compare); import into an empty log instead, which takes the imported log's salt"
            )
        entries = other.entries()
        if self.privacy != "raw":
            entries = [UsageEntry(e.terms, e.called, e.shown, None, e.at) for e in entries]
        self.extend(entries)
        return len(entries)


# --- stores ------------------------------------------------------------------------------------


@runtime_checkable
class UsageStore(Protocol):
    """Where usage logs live, one per catalog hash. Several workers may share one store."""

    def load(self, catalog: str) -> UsageLog | None: ...

    def save(self, log: UsageLog) -> None: ...

    def delete(self, catalog: str) -> None: ...


class InMemoryUsageStore:
    """Logs in this process only (the default)."""

    def __init__(self) -> None:
        self._logs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def load(self, catalog: str) -> UsageLog | None:
        with self._lock:
            data = self._logs.get(catalog)
        return None if data is None else UsageLog.from_dict(data)

    def save(self, log: UsageLog) -> None:
        data = log.to_dict()  # a copy: later changes to the log are not visible until saved again
        with self._lock:
            self._logs[log.catalog] = data

    def delete(self, catalog: str) -> None:
        with self._lock:
            self._logs.pop(catalog, None)


def usage_path(index_folder: str | Path) -> Path:
    """Where the usage log of a stored index lives: a file beside the index folder, not inside it
    (the index folder is replaced whole when it is rebuilt; the log must survive that)."""
    folder = Path(index_folder)
    return folder.parent / f"{folder.name}.usage.json"


class FileUsageStore:
    """Logs in one JSON file (by default beside an index folder, see `usage_path`).

    Writes go to a temporary file that replaces the old one, so a crash leaves the previous log
    intact; a corrupt or foreign file raises UsageError instead of being overwritten.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileUsageStore({str(self.path)!r})"

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(
                f"{self.path} is not a readable usage log ({exc}); delete it or run `toolsearch usage clear`"
            ) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT + "-store":
            raise UsageError(f"{self.path} is not a toolsearch usage file; move it away or delete it")
        logs = data.get("logs")
        if not isinstance(logs, dict):
            raise UsageError(f"{self.path} has no logs object; delete it or run `toolsearch usage clear`")
        return logs

    def _write(self, logs: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"format": FORMAT + "-store", "logs": logs}, ensure_ascii=False)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def catalogs(self) -> list[str]:
        with self._lock:
            return sorted(self._read())

    def load(self, catalog: str) -> UsageLog | None:
        with self._lock:
            data = self._read().get(catalog)
        return None if data is None else UsageLog.from_dict(data, f"{self.path} (catalog {catalog[:12]})")

    def save(self, log: UsageLog) -> None:
        with self._lock:
            logs = self._read()
            logs[log.catalog] = log.to_dict()
            self._write(logs)

    def delete(self, catalog: str) -> None:
        with self._lock:
            logs = self._read()
            if logs.pop(catalog, None) is not None:
                self._write(logs)


# --- recording ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    query: str
    shown: tuple[str, ...]
    credited: set[str]


class _RunLike(Protocol):
    """What `record_run` reads from a finished loop run (toolsearch.loop.LoopResult)."""

    @property
    def session_id(self) -> str: ...

    @property
    def tool_results(self) -> Sequence[Any]: ...


class UsageRecorder:
    """Joins searches to the calls they led to and feeds the log.

    Call `record_search(session_id, query, shown)` after every tool_search and
    `record_call(session_id, tool, ok)` after every other tool call. A successful call is credited
    to the latest search of the same session that showed the tool (once per search and tool);
    calls no search showed (pinned tools, direct calls) teach nothing. `enabled=False` records
    nothing. Pending searches are bounded: `max_sessions` sessions, `max_searches` each.
    """

    def __init__(
        self,
        log: UsageLog,
        *,
        enabled: bool = True,
        max_sessions: int = 10_000,
        max_searches: int = 16,
    ) -> None:
        self.log = log
        self.enabled = enabled
        self.max_sessions = max_sessions
        self.max_searches = max_searches
        self._pending: OrderedDict[str, deque[_Pending]] = OrderedDict()
        self._lock = threading.Lock()

    def record_search(self, session_id: str, query: str | None, shown: Sequence[str]) -> None:
        if not self.enabled or not query or not shown:
            return
        with self._lock:
            searches = self._pending.pop(session_id, None) or deque(maxlen=self.max_searches)
            searches.append(_Pending(query, tuple(shown), set()))
            self._pending[session_id] = searches  # most recently used last
            while len(self._pending) > self.max_sessions:
                self._pending.popitem(last=False)

    def record_call(self, session_id: str, tool: str, ok: bool) -> UsageEntry | None:
        """Credit a successful call to the search that showed it; returns the entry written, if any."""
        if not self.enabled or not ok:
            return None
        with self._lock:
            searches = self._pending.get(session_id)
            if not searches:
                return None
            for search in reversed(searches):
                if tool in search.shown:
                    if tool in search.credited:
                        return None
                    search.credited.add(tool)
                    break
            else:
                return None
        return self.log.add(search.query, tool, search.shown)

    def record_run(self, result: _RunLike) -> int:
        """Feed a finished `toolsearch.run` result; returns how many entries it added."""
        added = 0
        for item in result.tool_results:
            search = getattr(item, "search", None)
            if search is not None:
                if getattr(search, "error", None) is None:
                    self.record_search(result.session_id, search.query, [h.name for h in search.hits])
                continue
            status = str(getattr(item, "status", ""))
            added += self.record_call(result.session_id, item.call.name, status == "ok") is not None
        return added

    def forget(self, session_id: str) -> None:
        """Drop a finished session's pending searches."""
        with self._lock:
            self._pending.pop(session_id, None)
