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

Each entry `UsageRecorder` writes also says who voted (`by`): a keyed BLAKE2b digest of the session id
(the key is the log's salt), never the id itself, which may be a secret (an MCP session id). Learning
counts one vote per voter and tool in all (split over the voter's requests that led to it), so one conversation
repeating or rewording a search and a call cannot outvote everyone else; entries without a voter (older logs,
`UsageLog.add` without `by`) count each.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import logging
import math
import os
import secrets
import tempfile
import threading
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ._errors import UsageError as UsageError  # defined in the error tree; importable here as before
from ._errors import named_error
from ._untrusted import CONTROL, ESCAPE, describe, first_hidden, repair_surrogates, with_article
from .index import MAX_QUERY_CHARS
from .text import WORD_CHUNKS, split_identifier

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "FileUsageStore",
    "InMemoryPendingSearches",
    "InMemoryUsageStore",
    "PendingSearch",
    "PendingSearches",
    "Privacy",
    "UsageEntry",
    "UsageLog",
    "UsageRecorder",
    "UsageStore",
    "query_terms",
    "stored_logs",
    "usage_path",
]

FORMAT = "toolsearch-usage"
FORMAT_VERSION = 1
DEFAULT_MAX_ENTRIES = 100_000  # ~10 MB as JSON; the ranker stays under 1 ms at this size
# Words kept per query. The search refuses queries over 1,000 characters (index.MAX_QUERY_CHARS),
# and 1,000 characters of prose are about 150-200 words (more with identifiers split), so 256
# keeps every word of any query the search accepts; the bound only stops a pasted document (or
# an imported raw log) from becoming a giant entry. Over the bound, the earliest words are kept:
# a request states its need first. (It used to keep the alphabetically first 32 words, which
# dropped most of a long request.)
MAX_TERMS = 256
# The longest request text an entry keeps (privacy "raw"). A search takes MAX_QUERY_CHARS, but one recorded search
# may join several queries (Pydantic AI's search takes a list), so ten searches' worth. Only a pasted document or
# an imported or edited log goes over it; it is cut both when recorded and when read, so an entry reads the same.
MAX_QUERY_TEXT = 10 * MAX_QUERY_CHARS
# The largest `max_entries`: far more than a log held in memory can hold (100,000 entries are about 10 MB), and
# small enough for every bound it sets (a deque's maxlen, Redis's LTRIM), which a larger number overflows.
MAX_ENTRIES_LIMIT = 1_000_000_000
# What a stored log's error advises by default: the log is the store's own, so clearing it is the way out.
CLEAR_ADVICE = "clear it with `toolsearch usage clear`"
# How far past this machine's clock an imported entry's time may be: clocks of machines that share logs disagree
# by seconds or minutes, not days. Further, the entry would be the newest for years: a full log keeps the newest
# entries, so every new one would be dropped on save.
MAX_CLOCK_SKEW_S = 86_400.0
Privacy = Literal["hashed", "tokens", "raw"]
PRIVACY_SETTINGS: tuple[str, ...] = ("hashed", "tokens", "raw")
# The longest voter (`UsageEntry.by`) a log may hold: the recorder writes 16 hex digits; the bound leaves room
# for another digest and stops an edited or foreign file from carrying anything larger.
MAX_VOTER_CHARS = 64
_MAX_KEY_BYTES = 64  # the longest key BLAKE2b takes
_log = logging.getLogger(__name__)



def query_terms(query: str) -> tuple[str, ...]:
    """The distinct lower-case words of a query (identifiers split), sorted: the first MAX_TERMS it says."""
    words: dict[str, None] = {}  # insertion-ordered: the query's own order decides what a long one keeps
    for chunk in WORD_CHUNKS.findall(query):
        for word in (*split_identifier(chunk), chunk.lower()):  # `getUser` also matches a later `getuser`
            words.setdefault(word)
        if len(words) >= MAX_TERMS:
            break
    return tuple(sorted(list(words)[:MAX_TERMS]))


def _every_word(text: str) -> set[str]:
    """Every word `query_terms` could take from `text`, without its MAX_TERMS bound."""
    return {word for chunk in WORD_CHUNKS.findall(text) for word in (*split_identifier(chunk), chunk.lower())}


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """One search that led to a successful call: its query terms, the tools shown, the tool called, and who
    voted (`by`: a salted digest of the session, see `UsageLog.voter`; None where unknown, counted alone)."""

    terms: tuple[str, ...]
    called: str
    shown: tuple[str, ...] = ()
    query: str | None = None  # only with privacy="raw"
    at: float = 0.0
    by: str | None = None  # last: entries built positionally before it existed keep their meaning

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"terms": list(self.terms), "called": self.called, "shown": list(self.shown)}
        if self.query is not None:
            out["query"] = self.query
        out["at"] = round(self.at, 3)
        if self.by is not None:  # absent, not null: files without voters stay as they were written
            out["by"] = self.by
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str, *, advice: str = "clear or re-export the log") -> UsageEntry:
        """The entry `data` holds; UsageError naming it (`where`) and saying what to do (`advice`) if it holds none.

        Read as `UsageLog.add` writes one: at most MAX_TERMS terms and MAX_QUERY_TEXT characters of text, so an
        imported or edited log cannot make a giant entry either.
        """
        try:
            terms, called, shown = data["terms"], data["called"], data.get("shown", [])
            query, at, by = data.get("query"), data.get("at", 0.0), data.get("by")
            ok = (
                isinstance(called, str)
                and isinstance(terms, list)
                and all(isinstance(t, str) for t in terms)
                and isinstance(shown, list)
                and all(isinstance(s, str) for s in shown)
                and (query is None or isinstance(query, str))
                and isinstance(at, int | float)
                and (by is None or (isinstance(by, str) and len(by) <= MAX_VOTER_CHARS))
            )
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise UsageError(f"{where}: not a usage entry (needs terms, called, shown); {advice}")
        problem = time_problem(at)
        if problem is not None:
            raise UsageError(f"{where}: {problem}; {advice}")
        # A lone surrogate (JSON can escape one, UTF-8 cannot encode it) would make the log unsavable: repaired.
        # Over the bound, the first terms are kept as the entry lists them (the terms of the entries toolsearch
        # writes are sorted; which words a query said first is known only to the query, and hashed ones have none).
        fix = repair_surrogates
        return cls(tuple(map(fix, terms[:MAX_TERMS])), fix(called), tuple(map(fix, shown)),
                   query and fix(query)[:MAX_QUERY_TEXT], float(at), by and fix(by))


def time_problem(at: Any) -> str | None:
    """What is wrong with an entry's time (`at`, seconds since the epoch), or None.

    NaN is never equal to itself, so a log could never recognise such an entry as one it holds: every save and
    import would add it again (and NaN and Infinity are not JSON)."""
    if isinstance(at, bool) or not isinstance(at, int | float):
        return f"its time (at) must be a number of seconds since the epoch, got {type(at).__name__}"
    try:
        finite = math.isfinite(at)
    except OverflowError:  # an int too large for a float
        finite = False
    return None if finite else "its time (at) must be a finite number of seconds since the epoch, got " + (
        repr(at) if isinstance(at, float) else "a larger number")


def _imported(entries: list[UsageEntry], privacy: Any, where: str, advice: str) -> list[UsageEntry]:
    """The entries of a log being imported (not one a store holds), checked as only a log from elsewhere needs.

    - A time more than MAX_CLOCK_SKEW_S past this machine's clock is refused: such an entry stays the newest for
      years, and a full log, which keeps the newest, would drop every new entry on save without a word.
    - Request text holding a control character or an escape is refused, as a search refuses it: it can only have
      been made up or edited in, and `usage show` would send it to a terminal.
    - A raw entry listing a word its text does not say gets the words of its text instead (as `UsageLog.add` makes
      them): learning votes by the words and every reader of the log (`usage show`, `eval --usage`, `tune`) reads
      the text, so such words would carry votes no reader of the export could see.
    A stored log is read as it is: its file was written by toolsearch, and checking every entry of it on every read
    would cost each save (which reads the file) about a second per 100,000 entries.
    """
    latest = time.time() + MAX_CLOCK_SKEW_S
    out: list[UsageEntry] = []
    for i, entry in enumerate(entries):
        if entry.at > latest:
            when = time.strftime("%Y-%m-%d", time.gmtime(min(entry.at, 253402214400.0)))  # (year 9999 at most)
            raise UsageError(
                f"{where}, entry {i}: its time (at) is {when}, more than a day past this machine's clock (the "
                f"clock of the machine that wrote it ran ahead?); it would stay the newest entry and push new "
                f"ones out of a full log. {advice[0].upper()}{advice[1:]}"
            )
        if entry.query is not None:
            found = first_hidden(entry.query, (CONTROL, ESCAPE))
            if found is not None:
                position, char, kind = found
                raise UsageError(
                    f"{where}, entry {i}: its request text holds {describe(char)} (position {position}), "
                    f"{with_article(kind)}, which a search refuses; {advice}"
                )
            # Words its text says stay as listed (fewer of them: an earlier toolsearch's bound, or MAX_TERMS).
            if privacy == "raw" and not set(entry.terms) <= _every_word(entry.query):
                entry = replace(entry, terms=query_terms(entry.query))
        out.append(entry)
    return out


def settings_problem(max_entries: Any, privacy: Any) -> str | None:
    """What is wrong with a log's settings, or None."""
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        return f"max_entries must be a positive integer, got {max_entries!r}"
    if max_entries > MAX_ENTRIES_LIMIT:  # (not printed: a number of thousands of digits cannot be)
        return f"max_entries must be at most {MAX_ENTRIES_LIMIT:,}, got a larger number"
    if privacy not in PRIVACY_SETTINGS:
        return f"privacy must be one of {', '.join(PRIVACY_SETTINGS)}, got {privacy!r}"
    return None


def capped_max_entries(max_entries: Any, where: str) -> Any:
    """A stored log's `max_entries` as this toolsearch reads it: over MAX_ENTRIES_LIMIT (which an earlier toolsearch
    saved without a word) it is the limit, said in a warning; anything else is returned as it is, to be checked.

    Only what a store holds is read so: the log is the user's, and a bound past what any log can hold loses nothing
    when lowered. `UsageLog(max_entries=...)` and an imported export still refuse it."""
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries <= MAX_ENTRIES_LIMIT:
        return max_entries
    _log.warning(
        "%s: max_entries is over %s, the most a log may keep (an earlier toolsearch saved it); read as %s, which "
        "keeps every entry it holds", where, f"{MAX_ENTRIES_LIMIT:,}", f"{MAX_ENTRIES_LIMIT:,}",
    )
    return MAX_ENTRIES_LIMIT


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
        problem = settings_problem(max_entries, privacy)
        if problem is not None:
            raise UsageError(problem)
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

    def voter(self, session_id: str) -> str:
        """Who voted, as this log records it (`UsageEntry.by`): a BLAKE2b digest of the session id keyed by the
        salt. A session id may be a secret (an MCP session id); the digest cannot be turned back into it, and
        logs with other salts give the same session other digests, so voters cannot be linked across logs."""
        return hashlib.blake2b(
            session_id.encode("utf-8", "surrogatepass"), key=self._voter_key(), digest_size=8
        ).hexdigest()

    def _voter_key(self) -> bytes:
        """The salt's bytes, as `terms` keys its hashes with (the salt's text, hex or not, as UTF-8).

        Every privacy setting records voters, and a tokens or raw log never used its salt before, so a salt
        `terms` could not take (read from a file: over 64 bytes, a lone surrogate) must still give a key:
        lone surrogates are kept as bytes, and a longer salt is hashed down to 64 bytes.
        """
        key = self.salt.encode("utf-8", "surrogatepass")
        return key if len(key) <= _MAX_KEY_BYTES else hashlib.blake2b(key, digest_size=_MAX_KEY_BYTES).digest()

    def add(
        self,
        query: str,
        called: str,
        shown: Sequence[str] = (),
        *,
        at: float | None = None,
        by: str | None = None,
    ) -> UsageEntry | None:
        """Record that `query` led to a successful call of `called`; None when the query has no words.

        `by` says who voted (`voter` makes it from a session id); without it the entry counts alone.
        """
        if by is not None and (not isinstance(by, str) or len(by) > MAX_VOTER_CHARS):
            # refused here, or the log would be written and then refused by every load
            raise UsageError(f"by must be a string of at most {MAX_VOTER_CHARS} characters (see UsageLog.voter)")
        problem = None if at is None else time_problem(at)
        if problem is not None:  # refused here, for the same reason
            raise UsageError(f"the entry for {called!r}: {problem} (time.time() gives one)")
        query = repair_surrogates(query)  # else the log could never be written again (nor hashed, at all)
        if self.privacy == "raw":  # as a read of the saved log gives it; its words are the kept text's, as an import
            query = query[:MAX_QUERY_TEXT]  # makes them (see `_imported`), so an entry exported and imported is one
        terms = self.terms(query)
        if not terms:
            return None
        entry = UsageEntry(
            terms,
            called,
            tuple(shown),
            query if self.privacy == "raw" else None,
            time.time() if at is None else float(at),
            by,
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
    def from_dict(
        cls, data: Any, where: str = "usage log", *, advice: str = CLEAR_ADVICE, stored: bool = True
    ) -> UsageLog:
        """The log `data` holds; UsageError naming it (`where`) and saying what to do (`advice`) if it is unusable.

        The default advice is for a stored log (clear it); the reader of a file that is not the index's own log
        (an export being imported) says what to do with that file instead, since clearing would delete the
        index's intact log and leave the faulty file as it is. A stored log's `max_entries` over MAX_ENTRIES_LIMIT
        (an earlier toolsearch saved any) is read as the limit, with a warning (`capped_max_entries`);
        `stored=False` (an export being imported) refuses it, as `UsageLog(max_entries=...)` does.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"{where} is not a toolsearch usage log; {advice}")
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise UsageError(
                f"{where} has usage-log format {version!r}; this toolsearch reads {FORMAT_VERSION}. "
                f"Upgrade toolsearch, or {advice}"
            )
        rows = data.get("entries")
        if not isinstance(rows, list):
            raise UsageError(f"{where} has no entries list; {advice}")
        max_entries, privacy = data.get("max_entries", DEFAULT_MAX_ENTRIES), data.get("privacy", "hashed")
        if stored:
            max_entries = capped_max_entries(max_entries, where)
        problem = settings_problem(max_entries, privacy)
        if problem is not None:
            raise UsageError(f"{where}: {problem}; {advice}")
        try:
            entries = [UsageEntry.from_dict(row, f"{where}, entry {i}", advice=advice) for i, row in enumerate(rows)]
            log = cls(
                str(data.get("catalog", "")),
                max_entries=max_entries,
                privacy=privacy,
                salt=str(data["salt"]),
                entries=entries if stored else _imported(entries, privacy, where, advice),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where} is incomplete ({exc}); {advice}") from None
        return log

    def reshown(self, lists: Mapping[str, Sequence[str]]) -> UsageLog:
        """A copy in which each entry whose request text `lists` holds shows that list (cut to the length it
        recorded) instead of the one it recorded; entries without text, or that recorded no list, keep theirs.

        `toolsearch.learning.shown_now` makes `lists`: what the index shows for those requests now.
        """
        entries = [
            replace(e, shown=tuple(lists[e.query])[: len(e.shown)])  # its voter kept
            if e.shown and e.query is not None and e.query in lists
            else e
            for e in self.entries()
        ]
        return UsageLog(self.catalog, max_entries=self.max_entries, privacy=self.privacy, salt=self.salt,
                        entries=entries)

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
            entries = [replace(e, query=None) for e in entries]  # its voter kept
        self.extend(entries)
        return len(entries)


# --- stores ------------------------------------------------------------------------------------


@runtime_checkable
class UsageStore(Protocol):
    """Where usage logs live, one per catalog hash. Several workers may share one store."""

    def load(self, catalog: str) -> UsageLog | None: ...

    def save(self, log: UsageLog) -> None: ...

    def delete(self, catalog: str) -> None: ...


def stored_logs(store: UsageStore) -> list[UsageLog] | None:
    """Every log a store holds, where it can list them (`catalogs()`: a file, Redis); None where it cannot.

    A store that reads all its logs in one go (`logs()`: a file, whose every `load` reads it whole) is asked so.
    """
    whole = getattr(store, "logs", None)
    if callable(whole):
        return list(whole())
    listed = getattr(store, "catalogs", None)
    if not callable(listed):
        return None
    return [log for log in map(store.load, listed()) if log is not None]


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
    """Logs in one JSON file (by default beside an index folder, see `usage_path`), shared safely by processes.

    Writes go to a temporary file that replaces the old one, so a crash leaves the previous log
    intact; a corrupt, tampered or foreign file raises UsageError instead of being overwritten.
    The file carries a BLAKE2b digest of its canonical content (files written before it had one
    are read as they are). `save` merges: under a lock on the folder, the stored log's entries
    and the saved log's are united (each entry once, by time, the newest `max_entries` kept), so
    processes saving their own copies of one log lose nothing.

    `advice`: what an error about a damaged file says to do. The default (delete it or run `toolsearch usage
    clear`) suits the file beside an index, which that command deletes; a reader of any other file (`tune --usage
    FILE`) names what to do with that file instead, since `usage clear` would delete the index's intact log.
    """

    def __init__(self, path: str | Path, *, advice: str | None = None) -> None:
        self.path = Path(path)
        self.advice = advice
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileUsageStore({str(self.path)!r})"

    @contextmanager
    def _locked(self, *, write: bool) -> Iterator[None]:
        """This thread, and processes sharing the file, one at a time (a flock on the folder: no extra file)."""
        with self._lock:
            if write:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path.parent, os.O_RDONLY)
            except OSError:
                yield  # no folder yet: nothing to read, and a reader needs no lock
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                yield
            finally:
                os.close(fd)

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        if self.path.is_dir():  # (the advice below, to delete it, must never reach a folder)
            raise UsageError(f"{self.path} is a folder, not a usage log: name a JSON file, e.g. "
                             f"{self.path / 'usage.json'}")
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        # (ValueError: besides bad JSON, a number of over 4,300 digits, which Python will not read)
        except (OSError, ValueError, RecursionError) as exc:  # (nested too deep)
            raise UsageError(f"{self.path} is not a readable usage log ({exc}); {self._fix}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT + "-store":
            raise UsageError(f"{self.path} is not a toolsearch usage file; move it away or delete it")
        # Files from before the digest have no version; any other version than ours is refused before its content
        # is read: a newer toolsearch may keep what this one cannot read, and saving would drop it (the file would be
        # rewritten as this version).
        if "version" in data and data["version"] != STORE_VERSION:
            raise UsageError(
                f"{self.path} is a usage file of store format {data['version']!r}; this toolsearch reads "
                f"{STORE_VERSION}. Upgrade toolsearch to use it (it was left as it is)"
            )
        logs = data.get("logs")
        if not isinstance(logs, dict):
            raise UsageError(f"{self.path} has no logs object; {self._fix}")
        # files from before the digest have neither field
        if ("digest" in data or "version" in data) and data.get("digest") != _store_digest(logs):
            raise UsageError(
                f"{self.path} does not match its checksum (edited or corrupt); "
                + (self.advice or "delete it or run `toolsearch usage clear`, or restore it from an export")
            )
        return logs

    @property
    def _fix(self) -> str:
        return self.advice or "delete it or run `toolsearch usage clear`"

    def _write(self, logs: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps(
            {"format": FORMAT + "-store", "version": STORE_VERSION, "logs": logs, "digest": _store_digest(logs)},
            ensure_ascii=False,
        )
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

    def _where(self, catalog: str) -> str:
        """A stored log, as errors name it."""
        return f"{self.path} (catalog {catalog[:12]})"

    def _log_of(self, data: Any, catalog: str) -> UsageLog:
        return UsageLog.from_dict(data, self._where(catalog), advice=self.advice or CLEAR_ADVICE)

    def catalogs(self) -> list[str]:
        with self._locked(write=False):
            return sorted(self._read())

    def logs(self) -> list[UsageLog]:
        """Every log the file holds, by catalog, from one read (`stored_logs`)."""
        with self._locked(write=False):
            logs = self._read()
        return [self._log_of(logs[c], c) for c in sorted(logs)]

    def load(self, catalog: str) -> UsageLog | None:
        with self._locked(write=False):
            data = self._read().get(catalog)
        return None if data is None else self._log_of(data, catalog)

    def open_log(self, catalog: str, *, privacy: Privacy = "hashed") -> UsageLog:
        """The stored log of `catalog`, created (and stored) when there is none: processes share its salt."""
        with self._locked(write=True):
            logs = self._read()
            data = logs.get(catalog)
            if data is not None:
                return UsageLog.from_dict(data, self._where(catalog))
            log = UsageLog(catalog, privacy=privacy)
            logs[catalog] = log.to_dict()
            self._write(logs)
            return log

    def save(self, log: UsageLog) -> None:
        with self._locked(write=True):
            logs = self._read()
            stored = logs.get(log.catalog)
            where = self._where(log.catalog)
            merged = log if stored is None else merged_logs(UsageLog.from_dict(stored, where), log, where)
            logs[log.catalog] = merged.to_dict()
            self._write(logs)

    def merge(self, log: UsageLog) -> None:
        """Unite `log` with the stored log of its catalog, each entry once (`save` merges, under the file lock), as
        `RedisUsageStore.merge` does it."""
        self.save(log)

    def move(self, source: str, target: str) -> UsageLog | None:
        """The carry-over of a catalog switch: unite the stored log of catalog `source` with that of `target` (each
        entry once; the target's settings and salt kept, or the source's where there is no target log) and delete
        the source's, read and written under one lock, so an entry another process appends meanwhile is in one of
        the two. One log goes forward: a copy left behind at every switch would grow the file without bound. Returns
        the target's log as stored; None, and nothing written, when `source` has no log or no entries. United as
        `save` unites them (`merged_logs`); hashed logs with different salts do not unite (their terms do not
        compare): UsageError, and both are left as they are.
        """
        with self._locked(write=True):
            logs = self._read()
            data = logs.get(source)
            if data is None:
                return None
            carried = UsageLog.from_dict(data, self._where(source))
            if not len(carried):
                return None
            stored, where = logs.get(target), self._where(target)
            moved = UsageLog(target, max_entries=carried.max_entries, privacy=carried.privacy, salt=carried.salt,
                             entries=carried.entries())
            if stored is not None:
                moved = merged_logs(UsageLog.from_dict(stored, where), moved, where)
            logs[target] = moved.to_dict()
            del logs[source]
            self._write(logs)
            return moved

    def append(self, log: UsageLog, entries: Sequence[UsageEntry]) -> None:
        """Add `entries`, new in `log`, to the stored log of `log.catalog` (created with `log`'s settings when
        there is none). A gateway saves this way rather than its whole log, so a log that `toolsearch usage
        clear` deleted under it stays cleared: only what it recorded since its last save comes back."""
        if not entries:
            return
        fresh = UsageLog(log.catalog, max_entries=log.max_entries, privacy=log.privacy, salt=log.salt,
                         entries=entries)
        self.save(fresh)

    def update(self, catalog: str, change: Callable[[UsageLog], UsageLog]) -> UsageLog | None:
        """Replace the stored log of `catalog` by `change(stored)`, read and written under one lock; None, and
        nothing written, when there is no such log. Unlike `save`, nothing is merged: an entry `change` alters
        is kept once, altered."""
        with self._locked(write=True):
            logs = self._read()
            data = logs.get(catalog)
            if data is None:
                return None
            log = change(UsageLog.from_dict(data, self._where(catalog)))
            logs[catalog] = log.to_dict()
            self._write(logs)
            return log

    def delete(self, catalog: str) -> None:
        with self._locked(write=True):
            logs = self._read()
            if logs.pop(catalog, None) is not None:
                self._write(logs)

    def clear(self) -> tuple[int, int, Path | None, str | None]:
        """Remove every log the file holds, whatever catalog it was kept for: the file goes.

        A file that cannot be read as a usage file (corrupt, edited, foreign) is not deleted but moved
        aside to `<file>.unreadable-<time>`, so what it holds can still be looked at, and the next save
        starts a new file. Returns (logs removed, entries removed, where an unreadable file went, why it
        could not be read); the last two are None when the file was read.
        """
        with self._locked(write=True):
            try:
                logs = self._read()
            except UsageError as exc:
                stem = f"{self.path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}"
                backup, n = self.path.with_name(stem), 1
                while backup.exists():  # an earlier backup of the same second is kept too
                    n += 1
                    backup = self.path.with_name(f"{stem}-{n}")
                os.replace(self.path, backup)
                return 0, 0, backup, str(exc)
            # Counted from the raw logs: a log this toolsearch cannot parse is cleared all the same.
            entries = sum(
                len(data["entries"]) for data in logs.values()
                if isinstance(data, dict) and isinstance(data.get("entries"), list)
            )
            self.path.unlink(missing_ok=True)
            return len(logs), entries, None, None


STORE_VERSION = 2  # 2: the file carries a digest of its logs


def _store_digest(logs: Mapping[str, Any]) -> str:
    text = json.dumps(logs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).hexdigest()


def merged_logs(stored: UsageLog, incoming: UsageLog, where: str) -> UsageLog:
    """One log holding both logs' entries once each (by time, newest `incoming.max_entries` kept).

    A stored log with no entries gives way to the incoming one whole (its salt too); hashed logs
    with different salts cannot be united (their terms do not compare) and raise UsageError.
    """
    if not len(stored):
        return incoming
    hashed = "hashed" in (stored.privacy, incoming.privacy)
    if hashed and (stored.privacy != incoming.privacy or stored.salt != incoming.salt):
        raise UsageError(
            f"{where} holds a hashed usage log with another salt or privacy setting than the one being saved "
            "(their terms do not compare); clear it with `toolsearch usage clear` or save into another file"
        )
    keep_query = incoming.privacy == "raw" and stored.privacy == "raw"
    # Each entry once, compared as before voters were recorded: a copy that lost its voter on the way (a
    # writer that does not keep `by`: an older toolsearch sharing the file, a store or feed that rebuilds
    # entries) is the same entry, not a second one; the copy that names its voter is kept.
    seen: dict[UsageEntry, UsageEntry] = {}
    for entry in (*stored.entries(), *incoming.entries()):
        # as stored, so one entry saved twice compares equal
        entry = replace(entry, query=entry.query if keep_query else None, at=round(entry.at, 3))
        key = replace(entry, by=None)
        kept = seen.get(key)
        if kept is None or (kept.by is None and entry.by is not None):
            seen[key] = entry  # a key set again keeps its place: the order by time below is as before
    entries = sorted(seen.values(), key=lambda e: e.at)
    return UsageLog(stored.catalog, max_entries=incoming.max_entries, privacy=incoming.privacy,
                    salt=incoming.salt, entries=entries[-incoming.max_entries:])


# --- recording ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingSearch:
    """A search waiting for the calls it leads to.

    `terms`: the request's words as the log stores them (`UsageLog.terms`: hashed with `salt` under privacy
    "hashed"; `salt` is None for plain words). `shown`: what the model was shown; a call of one of these is
    credited to the search. `ranked`: what the entry records as the search's list, the backend's own order
    (learning may have re-ordered `shown`; the calibration reads the list as the backend's).
    `query`: the request text, for this process only. A pending store that keeps searches anywhere else (Redis)
    keeps it only when `keep_text` (the log's privacy is "raw"): a request is kept nowhere the log would not keep
    it, whether or not a call follows. Where the text is known at the call, the entry is made from it with the
    log as it is then (its salt may have changed meanwhile); where it is not, from `terms`.
    """

    terms: tuple[str, ...]
    shown: tuple[str, ...]
    ranked: tuple[str, ...]
    query: str | None = None
    salt: str | None = None
    keep_text: bool = False


@dataclass(slots=True)
class _Pending:
    search: PendingSearch
    credited: set[str]


class PendingSearches(Protocol):
    """Searches waiting for the calls they lead to, per session. Workers that share one (Redis) credit
    a call to a search another worker served. One that keeps them outside this process's memory keeps a
    search's `query` only when its `keep_text` says so (see `PendingSearch`)."""

    def add(self, session_id: str, search: PendingSearch) -> None: ...

    def credit(self, session_id: str, tool: str) -> PendingSearch | None:
        """Atomically: the latest search of the session that showed `tool` and has not credited it yet,
        marked as crediting it now; None when there is none."""
        ...

    def forget(self, session_id: str) -> None: ...


class InMemoryPendingSearches:
    """Pending searches in this process: `max_sessions` sessions (least recent dropped), `max_searches` each.

    The request text stays with each search (this process's memory, never written anywhere), so an entry can be
    hashed with the log as it is at the call."""

    def __init__(self, *, max_sessions: int = 10_000, max_searches: int = 16) -> None:
        self.max_sessions = max_sessions
        self.max_searches = max_searches
        self._pending: OrderedDict[str, deque[_Pending]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, session_id: str, search: PendingSearch) -> None:
        with self._lock:
            searches = self._pending.pop(session_id, None) or deque(maxlen=self.max_searches)
            searches.append(_Pending(search, set()))
            self._pending[session_id] = searches  # most recently used last
            while len(self._pending) > self.max_sessions:
                self._pending.popitem(last=False)

    def credit(self, session_id: str, tool: str) -> PendingSearch | None:
        with self._lock:
            for pending in reversed(self._pending.get(session_id) or ()):
                if tool in pending.search.shown:
                    if tool in pending.credited:
                        return None
                    pending.credited.add(tool)
                    return pending.search
        return None

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._pending.pop(session_id, None)


class _EarlierPendingSearches:
    """A `PendingSearches` written to the protocol of the release before `PendingSearch` (`add(session_id, query,
    shown)`; `credit` returning `(query, shown)`), adapted to this one.

    That protocol keeps the request text with each search, whatever the log's privacy setting: the store is the
    application's, as it was. It has no place for the backend's own order either, so this adapter keeps it in this
    process's memory (the newest `max_searches` of the newest `max_sessions` sessions); a search another process
    served records what the model was shown, as that release did."""

    def __init__(self, earlier: Any, *, max_sessions: int, max_searches: int) -> None:
        self.earlier = earlier
        self.max_sessions = max_sessions
        self.max_searches = max_searches
        # session -> (query, shown) -> ranked, both least recently used first
        self._ranked: OrderedDict[str, OrderedDict[tuple[str, tuple[str, ...]], tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return repr(self.earlier)

    def add(self, session_id: str, search: PendingSearch) -> None:
        query = search.query or ""  # (the recorder passes a search's text always)
        self.earlier.add(session_id, query, search.shown)
        if search.ranked == search.shown:
            return
        with self._lock:
            ranked = self._ranked.pop(session_id, None) or OrderedDict()
            ranked.pop((query, search.shown), None)
            ranked[(query, search.shown)] = search.ranked
            while len(ranked) > self.max_searches:
                ranked.popitem(last=False)
            self._ranked[session_id] = ranked
            while len(self._ranked) > self.max_sessions:
                self._ranked.popitem(last=False)

    def credit(self, session_id: str, tool: str) -> PendingSearch | None:
        found = self.earlier.credit(session_id, tool)
        if found is None:
            return None
        query, shown = str(found[0]), tuple(str(name) for name in found[1])
        with self._lock:
            remembered = self._ranked.get(session_id)
            ranked = shown if remembered is None else remembered.get((query, shown), shown)
        return PendingSearch((), shown, ranked, query)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._ranked.pop(session_id, None)
        self.earlier.forget(session_id)


def _of_the_earlier_protocol(pending: object) -> bool:
    """Whether `pending.add` takes (session_id, query, shown), as the release before `PendingSearch` asked, rather
    than (session_id, search). One whose signature cannot be read is taken at its word: this protocol."""
    try:
        parameters = list(inspect.signature(pending.add).parameters.values())  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len([p for p in positional if p.default is p.empty]) >= 3


_warned_earlier: set[type] = set()


def _adapted(pending: PendingSearches, *, max_sessions: int, max_searches: int) -> PendingSearches:
    """`pending` as this release's protocol asks for it: one of the earlier protocol adapted (warned once a class)."""
    if not _of_the_earlier_protocol(pending):
        return pending
    kind = type(pending)
    if kind not in _warned_earlier:
        _warned_earlier.add(kind)
        warnings.warn(
            f"{kind.__qualname__} implements the earlier PendingSearches protocol (add(session_id, query, shown); "
            "credit returning (query, shown)); it is adapted for now, and keeps each request's text whatever the "
            "log's privacy setting. Implement add(session_id, search) and credit returning the "
            "toolsearch.usage.PendingSearch it was given (see PendingSearches)",
            DeprecationWarning,
            stacklevel=3,
        )
    return _EarlierPendingSearches(pending, max_sessions=max_sessions, max_searches=max_searches)


def usage_not_recorded(recorder: UsageRecorder, exc: Exception, what: str = "a batch of tool calls") -> None:
    """Say (a warning) that recording usage failed, naming what was not recorded, the pending searches' store and the
    error: the search's or calls' results stand, and learning goes without it."""
    _log.warning(
        "usage of %s not recorded: %s (pending searches in %r); the results stand",
        what, named_error(exc), getattr(recorder, "pending", recorder),
    )


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
    calls no search showed (pinned tools, direct calls) teach nothing. Each entry records its
    session as its voter (`UsageLog.voter`: a salted digest, never the id). `enabled=False` records
    nothing. Pending searches live in `pending` (this process's memory by default, bounded:
    `max_sessions` sessions, `max_searches` each; a shared one lets any worker credit a call).
    """

    def __init__(
        self,
        log: UsageLog,
        *,
        enabled: bool = True,
        max_sessions: int = 10_000,
        max_searches: int = 16,
        pending: PendingSearches | None = None,
    ) -> None:
        self.log = log
        self.enabled = enabled
        self.max_sessions = max_sessions
        self.max_searches = max_searches
        self.pending: PendingSearches = (
            InMemoryPendingSearches(max_sessions=max_sessions, max_searches=max_searches) if pending is None
            else _adapted(pending, max_sessions=max_sessions, max_searches=max_searches)
        )

    def record_search(
        self, session_id: str, query: str | None, shown: Sequence[str], *, ranked: Sequence[str] | None = None
    ) -> None:
        """Remember a search until the calls it leads to. `shown`: what the model was shown. `ranked`: the backend's
        own order where learning re-ordered it (`LearnedSearchResult.ranked`, `SearchRecord.ranked`; None: `shown`
        is the backend's), which the entry records: the calibration reads an entry's list as what the backend
        ranked, and a learned list read so would say the backend is right already and turn learning off."""
        if not self.enabled or not query or not shown:
            return
        log = self.log
        query = repair_surrogates(query)
        terms = log.terms(query)
        if not terms:
            return
        self.pending.add(session_id, PendingSearch(
            terms, tuple(shown), tuple(shown if ranked is None else ranked), query,
            log.salt if log.privacy == "hashed" else None, keep_text=log.privacy == "raw",
        ))

    def record_call(self, session_id: str, tool: str, ok: bool) -> UsageEntry | None:
        """Credit a successful call to the search that showed it; returns the entry written, if any."""
        credited = self.credit_call(session_id, tool, ok)
        return None if credited is None else credited[0]

    def credit_call(self, session_id: str, tool: str, ok: bool) -> tuple[UsageEntry, str | None] | None:
        """`record_call`, also giving the request the entry was made from where it is known (its text: a feed that
        saves later can hash it again should the stored log's salt change meanwhile; None where the search was
        kept without it, in a shared store under privacy "hashed" or "tokens")."""
        if not self.enabled or not ok:
            return None
        found = self.pending.credit(session_id, tool)
        if found is None:
            return None
        log = self.log
        # The session is the voter: its repeats of one search and call are one vote (see toolsearch.learning)
        by = log.voter(session_id)
        if found.query is not None:  # hashed (again) with the log as it is now
            entry = log.add(found.query, tool, found.ranked, by=by)
            return None if entry is None else (entry, found.query)
        if found.salt != (log.salt if log.privacy == "hashed" else None) or not found.terms:
            # Hashed with a salt this log does not have (the log was replaced meanwhile: a catalog switch, a store
            # that restarted empty), and the text is not kept to hash it again: the terms would match nothing.
            return None
        entry = UsageEntry(found.terms[:MAX_TERMS], tool, found.ranked, None, time.time(), by)
        log.extend([entry])
        return entry, None

    def record_run(self, result: _RunLike) -> int:
        """Feed a finished `toolsearch.run` result; returns how many entries it added."""
        added = 0
        for item in result.tool_results:
            search = getattr(item, "search", None)
            if search is not None:
                if getattr(search, "error", None) is None:
                    self.record_search(result.session_id, search.query, [h.name for h in search.hits],
                                       ranked=getattr(search, "ranked", None))
                continue
            status = str(getattr(item, "status", ""))
            added += self.record_call(result.session_id, item.call.name, status == "ok") is not None
        return added

    def forget(self, session_id: str) -> None:
        """Drop a finished session's pending searches."""
        self.pending.forget(session_id)
