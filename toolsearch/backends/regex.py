"""Regex backend: model-written patterns over tool names, descriptions and parameters, under a time budget.

Patterns use the syntax of the `regex` module (a superset of Python's `re`) and are matched
case-insensitively, with `^` and `$` at the start and end of each field and each parameter line.
A tool whose name matches ranks above one matched only in its description, which ranks above one
matched only in its parameters; among equals, more distinct matched strings rank first, then names in order.

Two forgiving rules keep a model that writes plain words instead of a pattern productive: a
query that is not a valid pattern but reads like words (`weather (paris`), and a valid pattern
made only of words and spaces that matches nothing (`send an email`), are both searched as
"any of these words" (an OR of the escaped words), and `Ranking.notes` says so. Anything else
that does not compile raises InvalidQueryError; a pattern that runs past the time budget (a
catastrophic one such as `(a+)+$`) raises QueryTimeoutError.

Constructs whose cost the time budget cannot bound are refused before compiling, with
InvalidQueryError: group calls and recursion (`(?R)`, `(?1)`, `(?&name)`), verbose mode (`(?x)`,
where spaces and `#` comments hide counted repeats), version 1 syntax (`(?V1)`), more than one
charset flag (`(?a)` with `(?u)`), and counted repeats that multiply past MAX_REPEAT_PRODUCT
(inside a character class, `[(?x)]`, these are text; see _check_constructs). Whatever else the
`regex` module raises for a pattern (at compile or match time, memory exhaustion included) becomes
InvalidQueryError too: a caller, and the model, never see its errors.
"""

from __future__ import annotations

import bisect
import json
import math
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .._errors import BackendError, InvalidQueryError, MissingDependencyError, QueryTimeoutError, joined_sentences
from ..results import Hit, Ranking
from ..text import tool_text
from ..tools import Tool

try:
    import regex
except ImportError:  # pragma: no cover - regex is a core dependency
    raise MissingDependencyError("regex is not installed; run: pip install toolsearch") from None

__all__ = ["RegexBackend", "create", "load", "DEFAULT_MAX_PATTERN_CHARS", "DEFAULT_TIMEOUT_SECONDS"]

DEFAULT_MAX_PATTERN_CHARS = 200  # Anthropic's regex tool search uses the same cap
DEFAULT_TIMEOUT_SECONDS = 1.0  # generous: a 22-word alternation scans 4,076 tools (1 MB of text) in ~0.13 s of CPU
# The budget is CPU time of the searching thread, checked between chunks of this many characters of
# tool text; waiting for a core on a loaded machine does not count. Each regex call also stops after
# `timeout_seconds` of wall-clock time, so one catastrophic chunk cannot run on.
_CHUNK_CHARS = 65_536
STATE_FILE = "regex.json"
_FLAGS = regex.IGNORECASE | regex.MULTILINE | regex.V0
_MAX_COUNTED = 50  # distinct matches counted per field; enough to order tools, bounded work

# Field tiers: a name match outranks any number of description matches, and so on.
_TIER: dict[str, float] = {"name": 100.0, "namespace": 10.0, "description": 10.0, "tags": 10.0, "parameters": 1.0}
_FIELDS = tuple(_TIER)

# A pattern made only of words, spaces and sentence punctuation reads like plain language.
_WORDY = regex.compile(r"^[\w\s'\u2019,.!?&/-]+$")
_WORD = regex.compile(r"[^\W_]+")
_SKIP_WORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for", "from", "how", "i"}
    | {"in", "is", "it", "me", "my", "of", "on", "or", "please", "show", "the", "to", "tool", "tools", "what"}
    | {"which", "with", "would", "you", "your"}
)


@dataclass(frozen=True, slots=True)
class _Segment:
    tool: str
    field: str
    text: str


# A counted repeat `{m}` / `{m,n}`; spaces inside the braces are accepted too, so that a spaced count is never
# missed (verbose mode, where the regex module reads them as a count, is refused anyway: see _check_constructs).
_REPEAT = regex.compile(r"(?<!\\)\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")
MAX_REPEAT_PRODUCT = 1_000
# What may follow `(?` in a group that calls a group or the whole pattern: (?R), (?0), (?1), (?+1), (?-1),
# (?&name), (?P>name). A recursive call grows the matcher's stack without bound (`(?R)` alone took 580 MB in a
# second and ended in MemoryError), which no time budget stops in time.
_GROUP_CALL = regex.compile(r"R\)|[+-]?\d+\)|&\w+\)|P>\w+\)")
# Inline flags after `(?`: the letters turned on, then optionally `-` and those turned off, ending a global
# `(?i)` or a scoped `(?i:...)`.
_INLINE_FLAGS = regex.compile(r"([a-zA-Z01]*)(?:-[a-zA-Z01]*)?[:)]")
# What the regex module raises besides regex.error for a pattern it cannot compile or run: conflicting inline
# flags (ValueError: `(?V1)` against the V0 in _FLAGS, or two global charset flags as in `(?u)(?a)`), a count
# beyond its integers (OverflowError), memory or stack exhaustion.
_PATTERN_FAILURES = (ValueError, OverflowError, TypeError, MemoryError, RecursionError)


def _class_end(pattern: str, start: int) -> int | None:
    """Where the character class opening at `start` ends (just past its `]`), read as the regex module reads one
    in version 0: a `]` right after `[` or `[^` is a member, `\\` escapes the next character. None where the
    class holds a `[` (a POSIX class such as `[[:alpha:]]` has a `]` of its own inside, so the class may end
    later than its first `]`) or is never closed: then the caller scans the rest as text, as if no class
    were there."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
        elif ch == "[":
            return None
        elif ch == "]":
            return i + 1
        else:
            i += 1
    return None


def _comment_end(pattern: str, start: int) -> int:
    """Just past the `)` that ends the `(?#...)` comment opening at `start` (the regex module's reading: `\\`
    escapes the next character), or the end of the pattern."""
    i = start + 3
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
        elif pattern[i] == ")":
            return i + 1
        else:
            i += 1
    return len(pattern)


def _check_constructs(pattern: str) -> None:
    """Refuse, before compiling, the inline constructs whose cost or meaning this search cannot bound.

    The scan skips escaped characters, `(?#...)` comments and character classes, whose `(?` is text
    (`[(?x)]email` matches `(`, `?`, `x` or `)`), reading each the way the regex module does. From a class
    that holds a `[` on (a POSIX class, `[[:alpha:]]`), classes are no longer skipped but scanned as text:
    a `(?`-construct written inside one of them is refused too, which costs little and keeps the check
    from ever skipping a construct the regex module would run (so are `(?#...)` comments, which may then be
    inside a class).

    Conflicting flags (`(?V1)`, or two global charset flags as in `(?u)(?a)`) are left to `regex.compile`,
    which raises ValueError for them (see _PATTERN_FAILURES); scoped ones, `(?a:send)(?u:_email)`, it runs.
    """
    skip_classes = True
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[" and skip_classes:
            end = _class_end(pattern, i)
            if end is not None:
                i = end
                continue
            skip_classes = False  # (see the docstring: the class may end past its first `]`)
        if skip_classes and pattern.startswith("(?#", i):  # (text mode: this `(?#` may be inside a class)
            i = _comment_end(pattern, i)
            continue
        if ch == "(" and pattern.startswith("?", i + 1):
            call = _GROUP_CALL.match(pattern, i + 2)
            if call is not None:
                raise InvalidQueryError(
                    f"the pattern {pattern!r} calls a group or itself with (?{call.group()}; recursion and group "
                    "calls ((?R), (?1), (?&name)) are not supported, since one search could exhaust memory: "
                    "write the repeated part out, e.g. '(ab)+' instead of '(ab)(?1)', or search with plain words"
                )
            flags = _INLINE_FLAGS.match(pattern, i + 2)
            if flags is not None:
                on = flags.group(1)
                if "x" in on:
                    raise InvalidQueryError(
                        f"the pattern {pattern!r} turns on verbose mode with the x in (?{on}...), which is not "
                        "supported (its spaces and # comments can hide counted repeats that exhaust memory); remove "
                        "the x flag and write the pattern without spaces, e.g. 'send.?email|mail'"
                    )
        i += 1


def _check_repeats(pattern: str) -> None:
    """Reject counted repeats whose product is large: compiling `((a{100}){100}){100}` alone exhausts memory.

    The time budget only bounds matching, so a short pattern must not be able to blow up at compile time.
    """
    product = 1
    for low, high in _REPEAT.findall(pattern):
        product *= max(int(low or 0), int(high or 0), 1)
        if product > MAX_REPEAT_PRODUCT:
            raise InvalidQueryError(
                f"the pattern's counted repeats ({{m,n}}) multiply to more than {MAX_REPEAT_PRODUCT}; "
                "use + or * instead of large or nested counts, or search with plain words"
            )


@lru_cache(maxsize=256)
def _compile(pattern: str) -> Any:
    _check_constructs(pattern)
    _check_repeats(pattern)
    return regex.compile(pattern, _FLAGS)


def _unusable(query: str, exc: BaseException) -> InvalidQueryError:
    """The InvalidQueryError for a pattern the regex module failed on with something other than regex.error."""
    if isinstance(exc, MemoryError):
        what = "it needs more memory than a search may take"
    elif isinstance(exc, RecursionError):
        what = "it nests too deeply"
    else:
        what = " ".join(str(exc).split()) or type(exc).__name__
    return InvalidQueryError(
        f"the pattern {query!r} cannot be used: {what}. Remove inline flags and group calls (such as (?V1), "
        "(?a), (?R)) and use a simpler pattern, e.g. 'weather|forecast', or search with plain words"
    )


def _words_pattern(query: str) -> str | None:
    """`weather in (Paris` -> `\\b(?:weather|paris)` (escaped), or None when no word is left."""
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in dict.fromkeys(words) if len(w) > 1 and w not in _SKIP_WORDS]
    if not kept:
        return None
    return r"\b(?:" + "|".join(regex.escape(w) for w in kept) + ")"


def _reads_like_words(query: str) -> bool:
    words = _WORD.findall(query)
    letters = sum(len(w) for w in words)
    return len(words) >= 2 and letters >= 0.6 * len(query.replace(" ", ""))


class RegexBackend:
    """Tools as plain texts; every search scans them with the compiled pattern, within a time budget."""

    name = "regex"
    # A query is a pattern, not a sentence: only a pattern that is a tool's name names it (ToolIndex).
    pattern_queries = True

    def __init__(
        self,
        *,
        max_pattern_chars: int = DEFAULT_MAX_PATTERN_CHARS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        if isinstance(max_pattern_chars, bool) or not isinstance(max_pattern_chars, int) or max_pattern_chars < 1:
            raise BackendError(f"max_pattern_chars must be a positive integer, got {max_pattern_chars!r}")
        if (
            isinstance(timeout_seconds, bool)
            or not isinstance(timeout_seconds, int | float)
            or not math.isfinite(timeout_seconds)  # inf: every search would time out at once (the regex module's)
            or timeout_seconds <= 0
        ):
            raise BackendError(f"timeout_seconds must be a finite number > 0 (seconds), got {timeout_seconds!r}")
        self.max_pattern_chars = max_pattern_chars
        self.timeout_seconds = float(timeout_seconds)
        self._segments: dict[str, tuple[_Segment, ...]] = {}  # by tool name, in insertion order
        self._lock = threading.Lock()
        self._corpus: tuple[str, list[int], list[_Segment]] | None = None  # all segments joined, cached

    def describe(self) -> dict[str, Any]:
        return {"max_pattern_chars": self.max_pattern_chars, "timeout_seconds": self.timeout_seconds}

    # --- updates --------------------------------------------------------------------------------

    def add(self, tools: Sequence[Tool]) -> None:
        built = {tool.name: _segments_of(tool) for tool in tools}
        with self._lock:
            self._segments.update(built)  # a replaced tool keeps its place, as in the Catalog
            self._corpus = None

    def remove(self, names: Collection[str]) -> None:
        with self._lock:
            for name in names:
                self._segments.pop(name, None)
            self._corpus = None

    def save(self, folder: Path) -> None:
        # The store keeps the tools; the texts are rebuilt from them on load.
        (folder / STATE_FILE).write_text(json.dumps({"version": 1, **self.describe()}) + "\n")

    # --- search ---------------------------------------------------------------------------------

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        if len(query) > self.max_pattern_chars:
            raise InvalidQueryError(
                f"the pattern is {len(query)} characters; the limit is {self.max_pattern_chars}. "
                "Use a shorter pattern, e.g. 'weather|forecast'"
            )
        notes: list[str] = []
        fallback = False
        try:
            pattern = _compile(query)
        except InvalidQueryError:
            raise  # (_check_constructs and _check_repeats: an InvalidQueryError is a ValueError too)
        except _PATTERN_FAILURES as exc:
            raise _unusable(query, exc) from None
        except regex.error as exc:
            words = _words_pattern(query) if _reads_like_words(query) else None
            if words is None:
                raise InvalidQueryError(joined_sentences(
                    f"invalid regular expression {query!r}: {exc}",
                    r"Escape special characters with a backslash (e.g. \( \. \+) or search with plain words",
                )) from None
            notes.append(f"{query!r} is not a valid regular expression ({exc}); searched for any of its words instead")
            pattern, fallback = _compile(words), True
        if pattern.flags & regex.REVERSE:
            raise InvalidQueryError(
                f"the pattern {query!r} sets the REVERSE flag ((?r)), which this search does not support (it would "
                "skip tools); remove (?r) and write the pattern to match forwards"
            )
        try:
            if pattern.search("", timeout=self.timeout_seconds) is not None:
                raise InvalidQueryError(
                    f"the pattern {query!r} also matches empty text, so it would match every tool; "
                    "make it require at least one character, e.g. 'weather' instead of '(weather)?'"
                )
            # CPU time: a busy machine must not refuse a valid pattern
            deadline = time.thread_time() + self.timeout_seconds
            matches = self._match(pattern, allowed, deadline)
            if not matches and not fallback and _WORDY.match(query) and len(_WORD.findall(query)) >= 2:
                words = _words_pattern(query)
                if words is not None:
                    notes.append(f"the pattern {query!r} matched no tool; searched for any of its words instead")
                    matches, fallback = self._match(_compile(words), allowed, deadline), True
        except InvalidQueryError:
            raise  # (QueryTimeoutError included)
        except TimeoutError:
            raise _timed_out(self.timeout_seconds) from None
        except _PATTERN_FAILURES as exc:  # what the matcher itself runs out of, never the caller's problem to see
            raise _unusable(query, exc) from None
        scored = [(_score(fields, by_words=fallback), name) for name, fields in matches.items()]
        # Ties by name, as bm25, vector and hybrid break them: the same order whatever the catalog order.
        scored.sort(key=lambda item: (-item[0], item[1]))
        hits = [Hit(name, score) for score, name in scored[:k]]
        if not hits:
            notes.append(
                "no tool name, description or parameter matched; try a broader pattern such as 'mail|email|message'"
            )
        return Ranking(hits, tuple(notes))

    def _match(self, pattern: Any, allowed: frozenset[str] | None, deadline: float) -> dict[str, dict[str, int]]:
        """{tool: {field: distinct matched strings}} for every field the pattern matches."""
        if allowed is not None and len(allowed) * 4 < len(self._segments):
            # A small visible subset: scanning just its texts beats scanning everything.
            tools = list(self._segments.items())  # a snapshot: writers may run concurrently
            segments = [seg for name, segs in tools if name in allowed for seg in segs]
            corpus = _join(segments)
        else:
            corpus = self._full_corpus()
        blob, starts, segments = corpus
        found: dict[str, dict[str, int]] = {}
        pos = 0
        wall = self.timeout_seconds  # each call's wall-clock backstop: the regex module can only stop on wall time
        try:
            # One scan of the joined texts finds the next segment holding a match; the segment is
            # then matched alone (the joined match may have crossed into its neighbour) and the scan
            # resumes at the following segment, so no segment is skipped. The scan goes a chunk of
            # whole segments at a time, so the CPU budget is checked between chunks.
            while pos < len(blob):
                _remaining(deadline)
                last = bisect.bisect_right(starts, pos + _CHUNK_CHARS) - 1
                end = starts[last + 1] - 1 if last + 1 < len(starts) else len(blob)  # a segment's end
                hit = pattern.search(blob, pos, end, timeout=wall)
                if hit is None:
                    pos = end + 1
                    continue
                index = bisect.bisect_right(starts, hit.start()) - 1
                seg = segments[index]
                if allowed is None or seg.tool in allowed:
                    distinct = set()
                    empty = False  # a zero-width match (a lookahead, an anchor) matches the segment too
                    for m in pattern.finditer(seg.text, timeout=wall):
                        if m.end() > m.start():
                            distinct.add(m.group().lower())
                            if len(distinct) >= _MAX_COUNTED:
                                break
                        else:
                            empty = True
                    count = len(distinct) or int(empty)
                    if count:
                        fields = found.setdefault(seg.tool, {})
                        fields[seg.field] = max(fields.get(seg.field, 0), count)
                pos = starts[index + 1] if index + 1 < len(starts) else len(blob)
        except TimeoutError:
            raise _timed_out(self.timeout_seconds) from None
        return found

    def _full_corpus(self) -> tuple[str, list[int], list[_Segment]]:
        corpus = self._corpus
        if corpus is None:
            with self._lock:
                corpus = self._corpus = _join([s for segs in self._segments.values() for s in segs])
        return corpus


def _timed_out(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(
        f"the pattern took longer than {seconds:g}s (nested repetition such as '(a+)+' "
        "backtracks without end); use a simpler pattern, e.g. plain words joined with '|'"
    )


def _remaining(deadline: float) -> float:
    """CPU seconds this thread has left before `deadline` (a `time.thread_time` value)."""
    left = deadline - time.thread_time()
    if left <= 0:
        raise TimeoutError
    return left


def _score(fields: dict[str, int], *, by_words: bool) -> float:
    tiers = sum(_TIER[f] for f in fields)
    count = sum(fields.values())
    if by_words:  # plain words: how many of them a tool matches matters most
        return count * 1000.0 + tiers
    return tiers + min(count, 99) / 100


def _segments_of(tool: Tool) -> tuple[_Segment, ...]:
    text = tool_text(tool)
    name = tool.name if text.name_words == tool.name.lower() else f"{tool.name}\n{text.name_words}"
    parts = {
        "name": name,
        "namespace": text.namespace if tool.namespace is None else f"{tool.namespace}\n{text.namespace}",
        "description": text.description,
        "parameters": text.parameters,
        "tags": text.tags,
    }
    return tuple(_Segment(tool.name, f, parts[f]) for f in _FIELDS if parts[f])


def _join(segments: list[_Segment]) -> tuple[str, list[int], list[_Segment]]:
    # "\n" between segments: with MULTILINE, `^`/`$` behave at a boundary as they do at a segment's ends.
    starts: list[int] = []
    offset = 0
    for seg in segments:
        starts.append(offset)
        offset += len(seg.text) + 1
    return "\n".join(seg.text for seg in segments), starts, segments


_OPTIONS = ("max_pattern_chars", "timeout_seconds")


def create(**options: Any) -> RegexBackend:
    """An empty regex backend."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise BackendError(f"unknown regex option {unknown[0]!r}; regex accepts: {', '.join(_OPTIONS)}")
    return RegexBackend(**options)


def load(folder: Path, tools: Sequence[Tool], **options: Any) -> RegexBackend:
    """Rebuild the texts from the stored tools (cheap: there is no index to read)."""
    backend = create(**options)
    backend.add(tools)
    return backend
