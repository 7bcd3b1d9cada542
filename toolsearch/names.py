"""Which tools a request names outright: a tool's identifier as written, or a request that is only a name.

Users and models often write the tool they want ("use getReachAndFrequency", "I need get gene
therapy info now"), and a ranking that weighs words may still put a longer, wordier tool first.
A request that names a tool gets that tool first on every backend (ToolIndex applies the rule).

Two ways to name a tool, both meant to be unmistakable:
- its name as written, anywhere in the request, when the name is an identifier (`math.factorial`,
  `get_user_by_id`, `getReachAndFrequency`: several words joined, case aside). An ordinary word
  that happens to be a tool's name ("temperature", "search", "plan") is not enough: requests use
  such words in passing, and the measured cost of reading them as names is several points of
  nDCG@10 on every shared data set;
- a request whose words, once conversational filler ("I need ... now", "please use ... for me")
  and values are set aside, are exactly a tool's name or its words in order ("get gene therapy
  info", "calculator").
Where two names are found in overlapping places, the longer wins ("get_weather_forecast" names
it, not `get_weather`); several names in different places are all named. A table maps names to
their forms once per catalog (about 0.2 s per 10,000 tools); a lookup costs a few
dictionary reads per word of the request, whatever the catalog's size. An edited catalog derives its table
from the one before (`NameTable.updated`), at a cost that follows the edit, not the catalog.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from .entities import split_entities
from .text import split_identifier

__all__ = ["MAX_NAME_WORDS", "NameTable"]

# Longer names are still found as written; only their split form is not looked for.
MAX_NAME_WORDS = 12
# What a request may say around a name and still be only that name: conversational filler,
# generic verbs of running something, function words.
FILLER = frozenset(
    [
        "i", "me", "my", "we", "us", "our", "you", "your", "please", "pls", "kindly", "can", "could", "would", "will",
        "shall", "should", "may", "might", "do", "does", "need", "needs", "want", "wants", "like", "to", "use",
        "using", "run", "running", "call", "calling", "invoke", "execute", "try", "apply", "get", "the", "a", "an",
        "this", "that", "these", "those", "it", "its", "for", "with", "on", "in", "of", "by", "from", "at", "as",
        "and", "or", "now", "just", "then", "here", "there", "some", "any", "tool", "tools", "function", "functions",
        "api", "method", "endpoint", "named", "called", "is", "are", "be", "hi", "hello", "hey", "thanks", "thank",
        "help"
    ]
)
# Characters around a name in prose: "(math.factorial)," names math.factorial.
_TRIM = "\"'`.,;:!?()[]{}<>*"
# An identifier-shaped run inside a chunk of a request: letters, digits and `_`, joined by `.`, `:`, `/` or `-`,
# so `get_weather(city='Paris')`, `get_weather's`, `get_weather?city=` and `请用get_weather查询` hold
# `get_weather`. Scripts written without spaces (CJK, kana, Hangul, Thai) end a run: they are the prose around it.
_ID_CHAR = r"[^\W\u0e00-\u0e7f\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
_RUN = re.compile(rf"{_ID_CHAR}+(?:[.:/-]{_ID_CHAR}+)*")
_Key = TypeVar("_Key", str, tuple[str, ...])


def _fold(spelling: str) -> str:
    """The form names are compared in: trimmed, NFC-normalised and case-folded."""
    return unicodedata.normalize("NFC", spelling.strip()).casefold()


def _exact_first(names: tuple[str, ...], written: str) -> tuple[str, ...]:
    """Of names that share a folded form, the one spelled exactly as `written` when there is one, else them all:
    `Get_Weather` in a request names `Get_Weather`, not also `get_weather`."""
    if len(names) > 1:
        for spelling in (written, unicodedata.normalize("NFC", written)):
            if spelling in names:
                return (spelling,)
    return names


@dataclass(frozen=True, slots=True)
class _Found:
    start: int  # word positions in the request
    end: int
    names: tuple[str, ...]


class NameTable:
    """A catalog's names by their lower-cased spelling and by their identifier words."""

    __slots__ = ("_spelled", "_words")

    def __init__(self, names: Iterable[str], namespaces: Iterable[str | None] = ()) -> None:
        """`namespaces`, when given, pairs each name with its tool's namespace: a name that starts with its
        namespace (`github__create_issue` in `github`) is also found by the rest (`create_issue`), as
        users and models write the upstream's own name."""
        spelled: dict[str, list[str]] = {}
        words: dict[tuple[str, ...], list[str]] = {}
        for name, namespace in itertools.zip_longest(names, namespaces):
            if name is None:
                break
            for spelling, key in _keys(name, namespace):
                spelled.setdefault(spelling, []).append(name)
                if key is not None:
                    words.setdefault(key, []).append(name)
        self._spelled = {k: tuple(v) for k, v in spelled.items()}
        self._words = {k: tuple(v) for k, v in words.items()}

    def updated(
        self,
        dropped: Iterable[tuple[str, str | None]],
        entered: Iterable[tuple[str, str | None]],
        position: Callable[[str], int],
    ) -> NameTable:
        """The table a fresh build gives once the names of `dropped` leave and those of `entered` join (pairs of a
        name and its namespace, `dropped` as this table was built with them); this table stays as it is.

        `position(name)` is a name's place in the new catalog: names that share a form are listed in catalog
        order, as a fresh build lists them, and it is asked only where an entered name joins a form others hold.
        Costs a copy of two dictionaries and work in proportion to the names that change.
        """
        leaving_spelled: dict[str, set[str]] = {}
        leaving_words: dict[tuple[str, ...], set[str]] = {}
        for name, namespace in dropped:
            for spelling, key in _keys(name, namespace):
                leaving_spelled.setdefault(spelling, set()).add(name)
                if key is not None:
                    leaving_words.setdefault(key, set()).add(name)
        joining_spelled: dict[str, list[str]] = {}
        joining_words: dict[tuple[str, ...], list[str]] = {}
        for name, namespace in entered:
            for spelling, key in _keys(name, namespace):
                joining_spelled.setdefault(spelling, []).append(name)
                if key is not None:
                    joining_words.setdefault(key, []).append(name)
        if not leaving_spelled and not joining_spelled:  # every form as it was (tools replaced in place): shared
            return self
        table = object.__new__(NameTable)  # the dictionaries are derived, not built from every name
        table._spelled = _changed(self._spelled, leaving_spelled, joining_spelled, position)
        table._words = _changed(self._words, leaving_words, joining_words, position)
        return table

    def named(self, query: str, *, whole_only: bool = False) -> list[str]:
        """The tools `query` names, in the order the request names them (ties: names that share a form).

        `whole_only`: only a query that is itself a name counts (a pattern or Lucene query, whose
        words are operators and fragments, not a sentence).
        """
        written = query.strip().strip(_TRIM)
        whole = self._spelled.get(_fold(written))
        if whole is not None or whole_only:
            return list(_exact_first(whole or (), written))
        found: list[_Found] = []
        position = 0
        for chunk in query.split():
            chunk_words = split_identifier(chunk)
            if len(chunk_words) >= 2:
                found.extend(self._in_chunk(chunk, position))
            position += len(chunk_words)
        if found:
            return _outermost(found)
        # as written first (a name may hold digits: `ad4mat`, `getVO2Max`), then with its values set aside
        words = split_identifier(query)
        only = self._only_name(words)
        if not only:
            prose = split_identifier(split_entities(query)[0])
            only = self._only_name(prose) if prose != words else ()
        return list(only)

    def _in_chunk(self, chunk: str, position: int) -> list[_Found]:
        """The names one whitespace-separated chunk holds: the chunk itself, else the identifier-shaped runs in it
        (each of at least two identifier words, as a whole chunk must be)."""
        written = chunk.strip(_TRIM)
        spelled = self._spelled.get(_fold(written))
        if spelled is not None:
            return [_Found(position, position + len(split_identifier(chunk)), _exact_first(spelled, written))]
        found = []
        for run in _RUN.finditer(chunk):
            text = run.group()
            run_words = split_identifier(text)
            names = self._spelled.get(_fold(text)) if len(run_words) >= 2 and text != written else None
            if names is not None:
                start = position + len(split_identifier(chunk[: run.start()]))
                found.append(_Found(start, start + len(run_words), _exact_first(names, text)))
        return found

    def _only_name(self, words: tuple[str, ...]) -> tuple[str, ...]:
        """The tools whose words are the request's words less filler at either end (the longest such name)."""
        head = 0
        while head < len(words) and words[head] in FILLER:
            head += 1
        tail = len(words)
        while tail > 0 and words[tail - 1] in FILLER:
            tail -= 1
        if tail - head > MAX_NAME_WORDS:  # every cut keeps the words between the filler: too many for any name
            return ()
        # the name itself may begin or end with filler ("get ...", "... help"): try every cut of the ends
        # (no name has more than MAX_NAME_WORDS words; a cut must reach `tail` and stay within the request)
        for size in range(min(len(words), MAX_NAME_WORDS), 0, -1):
            for start in range(max(0, tail - size), min(head, len(words) - size) + 1):
                end = start + size
                names = self._words.get(words[start:end])
                if names is not None:
                    return names
        return ()


def _keys(name: str, namespace: str | None) -> list[tuple[str, tuple[str, ...] | None]]:
    """What a name is filed under, for each of its forms: the folded spelling and the identifier words (None when
    it has none or more than MAX_NAME_WORDS). One function for a fresh build and an update, so the two agree."""
    keys = []
    for form in (name, *_unprefixed(name, namespace)):
        words = split_identifier(form)
        keys.append((_fold(form), words if 0 < len(words) <= MAX_NAME_WORDS else None))
    return keys


def _changed(
    old: dict[_Key, tuple[str, ...]],
    leaving: dict[_Key, set[str]],
    joining: dict[_Key, list[str]],
    position: Callable[[str], int],
) -> dict[_Key, tuple[str, ...]]:
    """A copy of `old` with `leaving` names taken from their keys and `joining` ones added in catalog order.

    `old` and its tuples are never changed: a catalog's table may be in use by searches in other threads.
    """
    new = dict(old)
    for key in leaving.keys() | joining.keys():
        gone = leaving.get(key, ())
        kept = [name for name in old.get(key, ()) if name not in gone]
        added = joining.get(key)
        if added:
            kept.extend(added)
            if len(set(kept)) > 1:  # stable: a name filed twice under one key (two forms) stays in one place
                kept.sort(key=position)
        if kept:
            new[key] = tuple(kept)
        else:  # an empty entry would read as a name found with no tools
            new.pop(key, None)
    return new


def _unprefixed(name: str, namespace: str | None) -> tuple[str, ...]:
    """`create_issue` for `github__create_issue` in namespace `github` (any of `_ . - / :` between them)."""
    if not namespace or not name.lower().startswith(namespace.lower()):
        return ()
    rest = name[len(namespace) :]
    stripped = rest.lstrip("_.-/:")
    return (stripped,) if stripped and stripped != rest else ()


def _outermost(found: list[_Found]) -> list[str]:
    """Names of the matches no longer match covers, first-named first."""
    kept = [
        f for f in found
        if not any(o.start <= f.start and f.end <= o.end and (o.end - o.start) > (f.end - f.start) for o in found)
    ]
    out: dict[str, None] = {}
    for f in sorted(kept, key=lambda f: (f.start, -(f.end - f.start))):
        out.update(dict.fromkeys(f.names))
    return list(out)
