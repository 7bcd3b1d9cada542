"""BM25 backend on tantivy: boosted tool fields, English stemming and lenient Lucene syntax.

Plain natural language is the common case: its words are OR-ed over every field and ranked by
BM25 with per-field boosts; a query word equal to a tool's whole name adds a fixed bonus. Queries
that use Lucene syntax (`name:weather`, `+must`, `-not`, `+"a phrase"`, `word~`, `word*`,
`AND`/`OR`/`NOT`, `(groups)`, `term^2`) are parsed by a small parser that forgives what a
sentence would trip on (`name: x` means `name:x`, a lone `-` is punctuation). A syntax error (an
unclosed quote or bracket, `name:` with nothing after it, a dangling `AND`) never reaches the
model as an exception: the words are searched as plain text and `Ranking.notes` says why.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import BackendError, IndexFormatError, MissingDependencyError, StoredIndexError
from ..entities import lexical_parts
from ..lucene import QUERY_FIELDS, looks_like_lucene
from ..results import Hit, Ranking
from ..scratch import MAKE_READABLE, NO_ROOM, NOT_ALLOWED, copy_without_locks, new_scratch
from ..stored_tools import tool_names
from ..text import tool_text
from ..tools import Tool
from ._base import TIE_DEPTH, through_ties

try:
    import tantivy
except ImportError:  # pragma: no cover - tantivy is a core dependency
    raise MissingDependencyError("tantivy is not installed; run: pip install toolsearch") from None

__all__ = [
    "Bm25Backend", "create", "load", "lucene_constraints", "DEFAULT_BOOSTS", "DEFAULT_MAX_POSTINGS", "MAX_GROUP_DEPTH",
    "MAX_EXPANSIONS", "MAX_QUERY_BOOST", "NO_MATCH_NOTE", "QUERY_FIELDS", "REINDEX_SHARE", "REINDEX_SMALL",
    "STRICT_CONSTRAINTS", "lucene_reading",
]

LAYOUT_VERSION = 1
LAYOUT_FILE = "bm25.json"
TANTIVY_DIR = "tantivy"
ANALYZER = "toolsearch_en"

# Per-field weights. `all` holds every field's text in one bag (name words included), so words
# spread over name, description and parameters are scored together; the single fields add a
# bonus on top. Tuned on bfcl / metatool / seal_tools and kept general (see benchmarks/).
DEFAULT_BOOSTS: dict[str, float] = {
    "all": 1.0,
    "name": 0.6,
    "namespace": 0.6,
    "description": 0.6,
    "parameters": 0.3,
    "tags": 0.6,
}
DEFAULT_EXACT_NAME_BOOST = 8.0
# How much a word from a value in the request (toolsearch.entities) weighs against its other words.
VALUE_WEIGHT = 0.2
# The most postings a plain query reads (summed over its words and fields) before its commonest
# words give way; see Bm25Backend._within_budget. Real catalogs of thousands of tools stay far
# below it (the most any request of the shared data sets reads is 34,610, in seal_tools' 4,076).
DEFAULT_MAX_POSTINGS = 2_000_000
# An allowed subset is searched by reading the unfiltered ranking this deep at most (see _search_within).
_POST_FILTER_MIN = 50
_POST_FILTER_MAX = 2_000
# When a search re-indexes an edited index first (see Bm25Backend._reindex_due): always while it holds at most
# REINDEX_SMALL tools, else once the removed or replaced documents it still counts reach REINDEX_SHARE of its live
# ones; in between it searches with slightly stale statistics. Measured on two busy shared cores (random 6-20 word
# tools): a re-index is a commit every edit pays anyway (80-150 ms there) plus ~25 us a tool, 270 ms at 2,000 tools
# against 830 ms at 20,000 and 5.5 s at 100,000 (a one-tool edit's own search: ~60 ms). Past 2,000 the per-tool part
# dominates; with a share threshold the re-index costs a fixed ~0.8 ms per edited tool at any size (830 ms per 1,000
# edits at 20,000). With 5% of 4,000 tools removed or replaced, no score moved more than 0.73%, 99.7% of each top 10
# stayed, and only near ties changed places (23 of 30 queries kept their exact order; 15 of 30 at 10%).
REINDEX_SMALL = 2_000
REINDEX_SHARE = 0.05
_WRITER_HEAP = 1_000_000_000
_TERM_CACHE_SIZE = 20_000  # distinct query words whose term queries are kept
_NAME_CACHE_SIZE = 100_000  # hit addresses whose tool names are kept
# Conversational words that say nothing about a tool ("could you please ..."); dropped from plain
# queries unless nothing else is left. Generic English stop words are removed on both sides.
FILLER_WORDS = (
    "i me my mine myself we our ours you your yours please pls could would can do does did should shall "
    "what which who whom how hi hello hey thanks thank"
)
_TEXT_FIELDS = tuple(DEFAULT_BOOSTS)

# camelCase, acronym and letter/digit boundaries: the same word breaks as text.split_identifier,
# applied to whole texts (index and query alike) so `getUserById` in a query meets `get_user_by_id`.
_WORD_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
# Characters trimmed from a query chunk before it is compared with whole tool names.
_NAME_TRIM = "\"'`.,;:!?()[]{}<>"

# What a scored term query reads of its postings: BM25 needs a word's frequency, not its
# positions (only phrases do), and opening the positions too costs a few percent per search.
_SCORED = "freq"


def split_words(text: str) -> str:
    """Insert spaces at identifier word breaks (`getUserById` -> `get User By Id`)."""
    return _WORD_BOUNDARY.sub(" ", text)


def _analyzer() -> Any:
    # tantivy's en_stem plus ASCII folding and English stop words, registered under our own name
    # so that the query side analyses words with exactly the object the index used.
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")  # exact name: filters, deletes
    builder.add_text_field("name_exact", tokenizer_name="raw")  # lower-cased whole name
    for name in _TEXT_FIELDS:
        builder.add_text_field(name, tokenizer_name=ANALYZER)
    return builder.build()


def _document(tool: Tool) -> Any:
    text = tool_text(tool)
    description, parameters, tags = split_words(text.description), split_words(text.parameters), split_words(text.tags)
    # `all`: the parts of ToolText.joined(), each split once, so the name words count twice.
    every = (split_words(tool.name), text.name_words, text.namespace, description, parameters, tags)
    return tantivy.Document(
        id=tool.name,
        name_exact=tool.name.lower(),
        name=text.name_words,
        namespace=text.namespace,
        description=description,
        parameters=parameters,
        tags=tags,
        all="\n".join(part for part in every if part),
    )


# --- the query language -----------------------------------------------------------------------


class _SyntaxProblem(Exception):
    """A Lucene attempt that cannot be parsed; the search falls back to plain words."""


# Frozen, so hashable: a group's repeated clauses are told apart by their value (see _group).
@dataclass(frozen=True)
class _Literal:
    text: str
    field: str | None  # index field, None = all
    phrase: bool = False
    slop: int = 0
    fuzzy: int | None = None  # edit distance; -1 = automatic by word length
    prefix: bool = False
    boost: float = 1.0


@dataclass(frozen=True)
class _Group:
    clauses: tuple[tuple[str, _Literal | _Group], ...] = ()  # ("must"|"should"|"not", node)
    boost: float = 1.0


_OPERATOR = re.compile(r"(AND|OR|NOT|&&|\|\|)(?=[\s()\"]|$)")
_FIELD_PREFIX = re.compile(r"([A-Za-z_]+):")
_SUFFIX = re.compile(r"(?:~(\d*))?(?:\^(\d+(?:\.\d+)?|\.\d+))?")
_WORD_SUFFIX = re.compile(
    r"^(?P<body>.*?)(?P<star>\*)?(?:~(?P<fuzzy>\d*))?(?:\^(?P<boost>\d+(?:\.\d+)?|\.\d+))?$", re.S
)
# What a bm25 search that matched no tool notes (hybrid replaces it where its dense half answers instead).
NO_MATCH_NOTE = "no tool matched these words; try other words or synonyms"
# The constraints (see lucene_constraints) written as symbols, on purpose: a hybrid search they let no tool
# through answers nothing.
STRICT_CONSTRAINTS = frozenset({"required", "excluded", "field"})
# The largest boost a query may give (`word^N`, `(group)^N`): beyond it a boost adds nothing to the
# order, and `weather^999...` would make scores infinite. Larger ones are lowered to it, with a note.
MAX_QUERY_BOOST = 100.0
# How deeply `(groups)` may nest: the parser and the query builder recurse once per level, and a
# 1,000-character query could otherwise nest ~500 deep and exhaust Python's stack.
MAX_GROUP_DEPTH = 32
# How many prefix (`word*`) and fuzzy (`word~`) words one query expands. Each expands over the term dictionary of
# every field searched (about 1.4 ms a word at 4,076 tools), so a 1,000-character query of 250 of them took 2.5 s;
# past this many, the rest are searched as whole words, with a note. Repeated literals count once (see _group).
MAX_EXPANSIONS = 32


@dataclass
class _Expansions:
    """What one query may still expand (MAX_EXPANSIONS prefix or fuzzy words), and whether it ran out."""

    left: int = MAX_EXPANSIONS
    capped: bool = False

    def take(self) -> bool:
        """True when one more word may expand; False (and noted) once the query has used them all."""
        if self.left <= 0:
            self.capped = True
            return False
        self.left -= 1
        return True

    def note(self) -> str:
        return (
            f"the query has more than {MAX_EXPANSIONS} prefix (word*) or fuzzy (word~) words; the rest were "
            "searched as whole words. Use fewer, more specific words"
        )


class _Parser:
    """Recursive-descent parser for the Lucene subset; forgiving where a sentence would trip it."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.depth = 0  # groups open at the current position
        self.notes: list[str] = []  # what was changed in the query (a boost lowered)
        self.constraints: set[str] = set()  # the constraints written, see lucene_constraints
        self.partial = False  # whether a word is written in part (`prefix*`) or approximately (`fuzzy~`)

    def _boost(self, text: str | None) -> float:
        """A `^N` boost, at most MAX_QUERY_BOOST (with a note when it was higher)."""
        if not text:
            return 1.0
        boost = float(text)
        if boost > MAX_QUERY_BOOST:
            most = f"{MAX_QUERY_BOOST:g}"
            note = f"a boost above {most} was lowered to {most}; use boosts from 0 to {most}"
            if note not in self.notes:
                self.notes.append(note)
            boost = MAX_QUERY_BOOST
        return boost

    def parse(self) -> _Group:
        return _Group(tuple(self._clauses(None, closing=False)))

    def _skip_space(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def _clauses(self, fld: str | None, *, closing: bool) -> list[tuple[str, _Literal | _Group]]:
        clauses: list[tuple[str, _Literal | _Group]] = []
        conj: str | None = None
        negate = False
        s = self.s
        while True:
            self._skip_space()
            if self.i >= len(s):
                if closing:
                    raise _SyntaxProblem("a '(' is never closed")
                break
            ch = s[self.i]
            if ch == ")":
                if not closing:
                    raise _SyntaxProblem(f"the ')' at character {self.i + 1} closes nothing")
                self.i += 1
                break
            op = _OPERATOR.match(s, self.i)
            if op:
                word = op.group(1)
                self.i = op.end()
                if word == "NOT":
                    negate = True
                    self.constraints.add("not")
                    continue
                if not clauses:
                    raise _SyntaxProblem(f"{word} needs a term on its left")
                conj = "and" if word in ("AND", "&&") else "or"
                continue
            occur = "should"
            if ch in "+-!":
                nxt = s[self.i + 1] if self.i + 1 < len(s) else ""
                if not nxt or nxt.isspace() or nxt == ")":  # a lone sign, as in "x - y": just text
                    self.i += 1
                    continue
                occur = "must" if ch == "+" else "not"
                self.constraints.add("required" if ch == "+" else "excluded")
                self.i += 1
            node = self._atom(fld)
            if negate:
                occur, negate = "not", False
            if conj == "and":
                self.constraints.add("and")
                if occur == "should":
                    occur = "must"
                prev_occur, prev_node = clauses[-1]
                if prev_occur == "should":
                    clauses[-1] = ("must", prev_node)
            conj = None
            clauses.append((occur, node))
        if conj is not None or negate:
            raise _SyntaxProblem("the query ends with an operator (AND, OR or NOT) that has nothing on its right")
        return clauses

    def _atom(self, fld: str | None) -> _Literal | _Group:
        s = self.s
        prefix = _FIELD_PREFIX.match(s, self.i)
        if prefix and prefix.group(1).lower() in QUERY_FIELDS:
            fld = QUERY_FIELDS[prefix.group(1).lower()]
            self.constraints.add("field")
            self.i = prefix.end()
            self._skip_space()  # lenient: `name: weather` means name:weather
            if self.i >= len(s) or s[self.i] == ")":
                raise _SyntaxProblem(f"nothing follows '{prefix.group(1)}:'; write e.g. {prefix.group(1)}:weather")
        ch = s[self.i]
        if ch == "(":
            if self.depth >= MAX_GROUP_DEPTH:
                raise _SyntaxProblem(f"groups are nested more than {MAX_GROUP_DEPTH} deep; use fewer parentheses")
            self.i += 1
            self.depth += 1
            clauses = self._clauses(fld, closing=True)
            self.depth -= 1
            _, boost = self._suffix()
            return _Group(tuple(clauses), boost)
        if ch == '"':
            end = s.find('"', self.i + 1)
            if end < 0:
                raise _SyntaxProblem(f"the quote at character {self.i + 1} is never closed")
            text = s[self.i + 1 : end]
            self.i = end + 1
            slop, boost = self._suffix()
            return _Literal(text, fld, phrase=True, slop=min(slop or 0, 20), boost=boost)
        start = self.i
        chars: list[str] = []
        while self.i < len(s) and not s[self.i].isspace() and s[self.i] not in '()"':
            if s[self.i] == "\\" and self.i + 1 < len(s):
                self.i += 1
            chars.append(s[self.i])
            self.i += 1
        assert self.i > start  # callers stop on whitespace, '(', ')' and '"' before coming here
        m = _WORD_SUFFIX.match("".join(chars))
        assert m is not None  # the pattern matches every string
        body = m.group("body")
        if not body:
            body = "".join(chars)  # a lone '~' or '*' is just text
            return _Literal(body, fld)
        fuzzy = None
        if m.group("fuzzy") is not None:
            fuzzy = min(int(m.group("fuzzy")), 2) if m.group("fuzzy") else -1
        boost = self._boost(m.group("boost"))
        self.partial = self.partial or fuzzy is not None or bool(m.group("star"))
        return _Literal(body, fld, fuzzy=fuzzy, prefix=bool(m.group("star")), boost=boost)

    def _suffix(self) -> tuple[int | None, float]:
        m = _SUFFIX.match(self.s, self.i)
        assert m is not None
        self.i = m.end()
        slop = int(m.group(1)) if m.group(1) else None
        return slop, self._boost(m.group(2))


# --- the backend ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A query ready to run; a plain query keeps its two halves apart.

    tantivy prunes a union of plain term queries with block-max WAND (skipping blocks of postings
    whose best score cannot enter the top k), but scores every tool in the union once any other
    clause joins it, and the exact-name bonus is such a clause. So a plain query runs as `words`
    (the union of its term queries, pruned) plus `names` (the bonus, which only a few tools can
    earn, and only names the index holds are kept), and `_top` merges the two into exactly the ranking of
    `whole()` (scores bit for bit).
    """

    words: Any  # a Lucene query: the whole of it
    names: Any | None = None
    terms: tuple[Any, ...] = ()  # the term queries `words` is the union of

    def whole(self) -> Any:
        """The single query this one ranks as (for the filter query, which cannot be split)."""
        return self.words if self.names is None else _any_of([*self.terms, self.names])


def _top(searcher: Any, compiled: _Compiled, limit: int) -> list[tuple[float, Any]]:
    """The top `limit` (score, address) pairs of `compiled.whole()`, in tantivy's order."""
    if compiled.names is None:
        return list(searcher.search(compiled.words, limit, count=False).hits)
    found = searcher.search(compiled.words, limit, count=False).hits
    # The tools that earn the bonus, scored as the whole query scores them: the bonus plus their words.
    both = [(tantivy.Occur.Must, compiled.names), (tantivy.Occur.Should, compiled.words)]
    named = searcher.search(tantivy.Query.boolean_query(both), limit, count=False).hits
    if not named:
        return list(found)
    best = {(address.segment_ord, address.doc): (float(score), address) for score, address in found}
    best.update(((address.segment_ord, address.doc), (float(score), address)) for score, address in named)
    # tantivy's order: score descending, then the earlier document first.
    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[0]))
    return [pair for _, pair in ranked[:limit]]


def _tie_past(k: int) -> Callable[[Sequence[tuple[float, Any]], int], bool]:
    """through_ties' test for tantivy's (score, address) pairs, best first: the `limit` pairs asked for were all
    there (fewer: every match was read), and the last ties with the k-th."""
    return lambda found, limit: len(found) == limit and found[-1][0] >= found[k - 1][0]


def _tool_name(tool: Tool) -> str:
    return tool.name


def _finite_weight(value: object) -> bool:
    """A weight option is a finite number >= 0: NaN or inf would make every score NaN or inf (and NaN is not JSON,
    which the index's manifest is)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value >= 0


_Occur = {"must": "Must", "should": "Should", "not": "MustNot"}


class Bm25Backend:
    """Tantivy index of tools; one document per tool, one field per part of its text."""

    name = "bm25"

    def __init__(
        self,
        *,
        boosts: Mapping[str, float] | None = None,
        exact_name_boost: float = DEFAULT_EXACT_NAME_BOOST,
        max_postings: int | None = DEFAULT_MAX_POSTINGS,
        _folder: Path | None = None,
    ) -> None:
        merged = dict(DEFAULT_BOOSTS)
        for key, value in (boosts or {}).items():
            if key not in DEFAULT_BOOSTS:
                raise BackendError(f"unknown bm25 field {key!r} in boosts; fields are: {', '.join(DEFAULT_BOOSTS)}")
            if not _finite_weight(value):
                raise BackendError(f"bm25 boost for {key!r} must be a finite number >= 0, got {value!r}")
            merged[key] = float(value)
        if not _finite_weight(exact_name_boost):
            raise BackendError(f"exact_name_boost must be a finite number >= 0, got {exact_name_boost!r}")
        if max_postings is not None and (isinstance(max_postings, bool) or not isinstance(max_postings, int)
                                         or max_postings < 1):
            raise BackendError(f"max_postings must be a whole number >= 1 or None (no bound), got {max_postings!r}")
        self._boosts = merged
        self._exact_boost = float(exact_name_boost)
        self._max_postings = max_postings
        self._fields = [(f, b) for f, b in merged.items() if b > 0]
        self._analyzer = _analyzer()
        self._filler = frozenset(self._analyzer.analyze(FILLER_WORDS))
        self._schema = _schema()
        self._lock = threading.Lock()  # writes
        self._filters_lock = threading.Lock()
        self._filters: OrderedDict[frozenset[str], Any] = OrderedDict()
        # A word's boosted term queries over the fields that hold it, made once per searcher: building
        # them is most of a query's compile time (queries are immutable, so searches share them).
        # With them, how many postings the word holds over those fields (what reading it costs).
        self._term_cache: tuple[Any, dict[str, tuple[tuple[Any, ...], int]]] = (None, {})
        # A hit's tool name by its address in one searcher: reading it from tantivy's document store
        # costs ~0.7 us a hit against ~0.1 here, and a search reads 50 (hybrid's pool) or more.
        self._name_cache: tuple[Any, dict[tuple[int, int], str]] = (None, {})
        # The searcher whose documents are in name order (a build or re-index adds them so, and removals keep it),
        # or None: it alone is ranked without reading past k (see search). Only ever a searcher known to be
        # ordered, so a search that reads it while a change lands errs towards reading through ties.
        self._ordered: Any = None
        self._index: Any = None
        self._writer: Any = None
        self._searcher: Any = None
        self._folder: Path | None = None  # where the live index's files are
        self._private = False  # True when the folder is our own scratch copy (writable, deleted at exit)
        # The tools indexed, by name (the catalog's own objects), and how many removed or replaced documents the
        # index still counts: tantivy keeps them in its BM25 statistics (document count, average lengths, word
        # frequencies) until their segment is merged, so the same tools rank slightly differently after an edit
        # than freshly built. `save` always re-indexes from `_tools` first (a saved index ranks as a fresh build);
        # a search does only when `_reindex_due` (see REINDEX_SMALL, REINDEX_SHARE).
        # A loaded index's tools stay unparsed (None) until a re-index needs their text: `_loaded` holds them, at
        # `_position[name]` (a stored catalog parses a tool only when it is read).
        self._tools: dict[str, Tool | None] = {}
        self._loaded: Sequence[Tool] = ()
        self._position: dict[str, int] = {}
        self._dead = 0  # removed or replaced documents still in the statistics (an upper bound: merges may drop some)
        if _folder is not None:
            self._open(_folder, private=False)

    # --- lifecycle ----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"boosts": dict(self._boosts), "exact_name_boost": self._exact_boost}
        if self._max_postings != DEFAULT_MAX_POSTINGS:  # only when set: older descriptions stay as they were
            out["max_postings"] = self._max_postings
        return out

    def _open(self, folder: Path, *, private: bool) -> None:
        index = tantivy.Index.open(self._text_path(folder))
        index.register_tokenizer(ANALYZER, self._analyzer)
        index.config_reader("manual")  # we reload after our own commits; no file watcher thread
        self._index, self._folder, self._private = index, folder, private
        self._searcher = index.searcher()

    def _scratch(self) -> Path:
        with _writing_scratch(None):
            return new_scratch("bm25-").goes_with(self)

    def _text_path(self, folder: Path) -> str:
        """`folder` as tantivy takes it: as text. A path that is not UTF-8 (a Latin-1 user name on a UTF-8 system)
        cannot be passed to tantivy, so it gets a link of a UTF-8 name in our scratch, which lives as long as this
        backend (tantivy resolves the link once, and holds the real path from then on)."""
        text = str(folder)
        if _is_utf8(text):
            return text
        link = self._scratch() / "index"
        with _writing_scratch(None):
            os.symlink(os.path.abspath(folder), link)
        if not _is_utf8(str(link)):
            raise BackendError(
                f"bm25 backend: neither {text!r} nor the temporary folder {tempfile.gettempdir()!r} has a UTF-8 path, "
                "and tantivy opens only such paths; set TMPDIR to a folder whose path is UTF-8 and try again"
            )
        return str(link)

    def _check_private(self) -> None:
        """Refuse to write when our private folder was removed under us (a cleaner of the temporary folder that
        ignores the lock toolsearch.scratch holds): tantivy would fail with a bare file-not-found error."""
        if self._private and self._folder is not None and not (self._folder / "meta.json").is_file():
            raise BackendError(
                f"bm25 backend: its private index folder {self._folder} was removed while in use (a temporary-file "
                "cleaner?). It still answers searches but can no longer be changed or saved: build or load it again, "
                "and set TMPDIR to a folder that no cleaner ages"
            )

    def _writable(self) -> Any:
        """The open writer, else a new one; a loaded (read-only, memory-mapped) index is first copied privately."""
        self._check_private()
        if self._writer is not None:
            return self._writer
        if self._index is None:
            folder = self._scratch()
            with _writing_scratch(folder):
                index = tantivy.Index(self._schema, path=self._text_path(folder))
            index.register_tokenizer(ANALYZER, self._analyzer)
            index.config_reader("manual")
            self._index, self._folder, self._private = index, folder, True
        elif not self._private:
            assert self._folder is not None
            copy = self._scratch()
            with _writing_scratch(copy):
                copy_without_locks(self._folder, copy)
                self._open(copy, private=True)
        # One segment up to about a million tools (tantivy's arena grows as needed, to ~1.2 GB at a
        # million): a search scores each segment apart, its pruning threshold starting afresh in each.
        with _writing_scratch(self._folder):
            self._writer = self._index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        return self._writer

    @contextlib.contextmanager
    def _change(self, *, release: bool = False) -> Iterator[Any]:
        """A writer for one change, committed at the end (and let go, with `release`); a change that fails is
        rolled back whole."""
        writer = self._writable()
        try:
            with _writing_scratch(self._folder):  # (tantivy writes a segment out once its arena fills)
                yield writer
                writer.commit()
        except BaseException:
            # Else the next change would commit what this one added before it failed; after a failed commit (a
            # full temporary folder) the writer silently dropped every later change until rolled back.
            with contextlib.suppress(ValueError):
                writer.rollback()
            raise
        if release:
            self._release()
        self._index.reload()
        self._searcher = self._index.searcher()

    def _release(self) -> None:
        """Let the open writer go once the merges it started are done (the files meta.json names are then final).

        An open tantivy writer holds six threads (an indexer, four mergers, a segment updater) and
        megabytes of arena. A build lets its writer go: 100 built 20-tool indexes held 699 threads and
        ~475 MB with theirs open, 101 and ~225 MB without. Later changes keep theirs until the index is
        saved: let go after each, a change to a 4,000-tool index waits for its merges (p90 70 ms
        against 17 ms) and opens a writer again.
        """
        if self._writer is not None:
            with _writing_scratch(self._folder):  # (a merge writes a new segment)
                self._writer.wait_merging_threads()
            self._writer = None

    def add(self, tools: Sequence[Tool]) -> None:
        if not tools:
            return
        with self._lock:
            empty = self._searcher is None or self._searcher.num_docs == 0  # then this is a build
            unique = len({t.name for t in tools}) == len(tools)
            with self._change(release=empty) as writer:
                # Into an empty index, unique names replace nothing: a million deletes would cost build time.
                replace = not empty or not unique
                # A build adds in name order (a copy of one name keeps its place after the other: the last wins).
                # Each document is made as it is added: a million tantivy documents held at once cost gigabytes.
                for tool in sorted(tools, key=_tool_name) if empty else tools:
                    if replace:
                        writer.delete_documents_by_term("id", tool.name)
                    writer.add_document(_document(tool))
            if empty:
                self._mark_ordered()
            # A replaced document stays in the statistics until re-indexed (see _tools): one for each tool whose
            # name was indexed already or came earlier in this batch.
            if not unique or not empty:
                seen: set[str] = set()
                for tool in tools:
                    if tool.name in seen or tool.name in self._tools:
                        self._dead += 1
                    seen.add(tool.name)
            self._tools.update((tool.name, tool) for tool in tools)  # a replaced tool keeps its place

    def remove(self, names: Collection[str]) -> None:
        if not names or self._index is None:
            return
        with self._lock:
            ordered = self._searcher is self._ordered
            with self._change() as writer:
                for name in names:
                    writer.delete_documents_by_term("id", name)
            if ordered:  # the tools left keep their order
                self._mark_ordered()
            for name in names:
                if name in self._tools:  # (a loaded tool's entry is None until read: test the name)
                    del self._tools[name]
                    self._dead += 1  # a removed document stays in the statistics until re-indexed (see _tools)

    @property
    def stale_documents(self) -> int:
        """How many removed or replaced documents the index may still count in its BM25 statistics (0 after a
        re-index: then it ranks exactly as a fresh build of its tools)."""
        return self._dead

    def _reindex_due(self) -> bool:
        """Whether a search re-indexes first: when the index is small enough that it is cheap (REINDEX_SMALL),
        or the documents still counted reach REINDEX_SHARE of the live ones. Below that a search is served with
        the slightly stale statistics; `save` re-indexes regardless."""
        live = len(self._tools)
        return self._dead > 0 and (live <= REINDEX_SMALL or self._dead >= REINDEX_SHARE * live)

    def _reindex(self) -> None:
        """Index the current tools afresh when removals or replacements left deleted documents in tantivy's
        statistics, so the index ranks exactly as one built from these tools (caller holds `_lock`)."""
        if not self._dead:
            return
        if self._searcher is None or int(self._searcher.num_docs) != len(self._tools):
            self._dead = 0  # not the tools it holds (never expected): keep the index as it is
            return
        with self._change() as writer:
            writer.delete_all_documents()  # drops every segment, deleted documents and their statistics with them
            for name in sorted(self._tools):  # in name order, as a build adds them
                tool = self._tools[name]
                writer.add_document(_document(tool if tool is not None else self._loaded[self._position[name]]))
        self._dead = 0
        self._mark_ordered()

    def _mark_ordered(self) -> None:
        """Mark the current searcher as ranking its documents in name order, after a change that added them so or
        only removed some (caller's word): tantivy numbers a segment's documents in the order they were added, and
        a single segment's order is the index's. Several (a build past its writer's memory) leave it unmarked."""
        searcher = self._searcher
        self._ordered = searcher if searcher is not None and int(searcher.num_segments) <= 1 else None

    def save(self, folder: Path) -> None:
        with self._lock:
            self._check_private()
            self._reindex()  # save what a fresh build of these tools would be
            if self._index is None:  # never given a tool: save an empty index
                with self._change():
                    pass
            if self._writer is not None:  # save the files as meta.json names them, merges done
                was_ordered = self._searcher is self._ordered
                self._release()
                self._index.reload()
                self._searcher = self._index.searcher()
                if was_ordered:  # (merging keeps a segment's order)
                    self._mark_ordered()
            assert self._folder is not None
            copy_without_locks(self._folder, folder / TANTIVY_DIR)
            ordered = self._searcher is not None and self._searcher is self._ordered
        layout = {"layout": LAYOUT_VERSION, "fields": ["id", "name_exact", *_TEXT_FIELDS], "analyzer": ANALYZER}
        if ordered:  # (an index saved without it is read through ties, as before)
            layout["name_order"] = True
        (folder / LAYOUT_FILE).write_text(json.dumps(layout) + "\n")

    def saved_in(self, folder: Path) -> None:
        """`save` wrote `folder`, which is now the index's stored generation: a loaded index copies its files from
        there from now on, so the generation it was loaded from can go (toolsearch.store)."""
        with self._lock:
            if not self._private and self._writer is None:
                self._folder = folder / TANTIVY_DIR

    def __len__(self) -> int:
        return 0 if self._searcher is None else int(self._searcher.num_docs)

    # --- search -------------------------------------------------------------------------------

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        if self._dead and self._reindex_due():
            with self._lock:
                if self._reindex_due():  # (another thread may have re-indexed or edited meanwhile)
                    self._reindex()
        searcher = self._searcher
        if searcher is None or searcher.num_docs == 0:
            return Ranking([], ("the index holds no tools",))
        if allowed is not None and not allowed:
            return Ranking([], ("no tools are visible under the given filter",))
        compiled, notes = self._compile(query, searcher)
        if compiled is None:
            return Ranking([], (*notes, "the query has no searchable words; describe the tool you need in plain words"))
        # tantivy orders equal scores by document. A build or re-index adds the documents in name order (see
        # _ordered): there its own top k is already the right one, and nothing past k is read. An index that tools
        # were added to since (their documents come after the others), or one saved before indexes were built in
        # name order, reads on through a tie with the k-th, up to TIE_DEPTH hits (see backends._base).
        most = k if searcher is self._ordered else max(k, TIE_DEPTH)
        if allowed is None:
            found = through_ties(lambda limit: _top(searcher, compiled, limit), k, most, _tie_past(k))
            hits = [Hit(self._name_at(searcher, address), float(score)) for score, address in found]
        else:
            hits = self._search_within(searcher, compiled, k, allowed, most)
        # Ties by name, as every backend breaks them, before the cut at k: the first hit does not depend on k.
        hits.sort(key=lambda hit: (-hit.score, hit.name))
        hits = hits[:k]
        if not hits:
            notes = (*notes, NO_MATCH_NOTE)
        return Ranking(hits, tuple(notes))

    def _search_within(
        self, searcher: Any, compiled: _Compiled, k: int, allowed: frozenset[str], most: int
    ) -> list[Hit]:
        """The top `k` hits inside `allowed`: the same ranking as a filtered query, usually faster.

        tantivy's term-set filter costs time in proportion to the allowed set (10 ms for 5,000 names),
        while reading a hit's name costs under a microsecond. So the unfiltered ranking is read deep
        enough to hold `k` allowed hits at the subset's share of the catalog, deeper while a full page
        still falls short, and only past `_POST_FILTER_MAX` hits does the filter query take over. Allowed hits that
        tie with the k-th are read too (up to `most` hits in all), so the caller breaks ties by name before its cut.
        """
        total = int(searcher.num_docs)
        limit = min(total, max(_POST_FILTER_MIN, math.ceil(k * total / len(allowed) * 2)))
        while limit <= _POST_FILTER_MAX:
            found = _top(searcher, compiled, limit)
            hits: list[Hit] = []
            for score, address in found:
                if len(hits) >= k and float(score) < hits[k - 1].score:
                    return hits  # (scores descend: no later hit ties with the k-th)
                name = self._name_at(searcher, address)
                if name in allowed:
                    hits.append(Hit(name, float(score)))
                    if len(hits) >= most:  # (not a deeper search for hits past the most it reads)
                        return hits
            if len(found) < limit or limit == total:  # every matching tool was read
                return hits
            limit = min(total, limit * 4)
        filtered = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, compiled.whole()), (tantivy.Occur.Must, self._filter(allowed))]
        )
        deep = through_ties(lambda limit: searcher.search(filtered, limit, count=False).hits, k, most, _tie_past(k))
        return [Hit(self._name_at(searcher, address), float(score)) for score, address in deep]

    def _name_at(self, searcher: Any, address: Any) -> str:
        """The tool name of the document at `address` in `searcher` (cached per searcher: addresses change
        with the next commit, so the cache starts afresh with the next searcher)."""
        held, cache = self._name_cache
        if held is not searcher:
            cache = {}
            self._name_cache = (searcher, cache)
        key = (address.segment_ord, address.doc)
        name = cache.get(key)
        if name is None:
            if len(cache) >= _NAME_CACHE_SIZE:  # bounded: start afresh rather than grow
                cache.clear()
            name = cache[key] = searcher.doc(address).get_first("id")
        return name

    def _filter(self, allowed: frozenset[str]) -> Any:
        """A zero-score term-set query on exact names; sessions reuse theirs, so a few are cached."""
        with self._filters_lock:
            cached = self._filters.get(allowed)
            if cached is not None:
                self._filters.move_to_end(allowed)
                return cached
        query = tantivy.Query.const_score_query(tantivy.Query.term_set_query(self._schema, "id", list(allowed)), 0.0)
        with self._filters_lock:
            self._filters[allowed] = query
            while len(self._filters) > 16:
                self._filters.popitem(last=False)
        return query

    def _compile(self, query: str, searcher: Any) -> tuple[_Compiled | None, tuple[str, ...]]:
        parsed = _parsed(query)
        if parsed is None:
            return self._plain(query, searcher)
        if parsed.group is None:
            note = f"query syntax not understood ({parsed.problem}); searched its words as plain text instead"
            compiled, notes = self._plain(query, searcher)
            return compiled, (note, *notes)
        budget = _Expansions()
        compiled = self._group(parsed.group, budget)
        notes = (*parsed.notes, *([budget.note()] if budget.capped else []))
        if compiled is None and any(occur == "not" for occur, _ in parsed.group.clauses):
            return None, (*notes, "the query only excludes words; add at least one word to search for")
        return (None if compiled is None else _Compiled(compiled)), notes

    # --- query building -----------------------------------------------------------------------

    def _tokens(self, text: str, *, drop_filler: bool = False) -> list[str]:
        """Distinct analysed words, without conversational filler when `drop_filler`."""
        tokens = list(dict.fromkeys(self._analyzer.analyze(split_words(text))))
        return [t for t in tokens if t not in self._filler] if drop_filler else tokens

    def _positions(self, text: str) -> list[tuple[int, str]]:
        """Analysed words with their positions, so a phrase keeps the gaps of removed stop words."""
        return [(t.position, t.text) for t in self._analyzer.pre_tokenize(split_words(text)).tokens]

    def _targets(self, fld: str | None) -> list[tuple[str, float]]:
        if fld is None:
            return self._fields
        return [(fld, self._boosts[fld] or 1.0)]

    def _exact_name(self, candidates: Sequence[str]) -> Any | None:
        names = [c for c in dict.fromkeys(candidates) if c]
        if not names or self._exact_boost <= 0:
            return None
        query = tantivy.Query.term_set_query(self._schema, "name_exact", names)
        return tantivy.Query.boost_query(query, self._exact_boost)

    def _terms(self, tokens: Sequence[str], targets: Sequence[tuple[str, float]]) -> list[Any]:
        out: list[Any] = []
        for token in tokens:
            out.extend(self._term_queries(token, targets))
        return out

    def _present_terms(self, tokens: Sequence[str], searcher: Any) -> list[tuple[str, tuple[Any, ...], int]]:
        """Each word's term queries over the fields that hold it, and how many postings those hold.

        A (word, field) pair no tool has adds nothing to any score, but tantivy would still look it up
        in every segment, twice; in long requests nearly half the pairs are such. Which pairs exist
        depends on the index, so the cache belongs to one searcher and starts afresh with the next.
        """
        held, cache = self._term_cache
        if held is not searcher:
            cache = {}
            self._term_cache = (searcher, cache)
        out = []
        for token in tokens:
            entry = cache.get(token)
            if entry is None:
                if len(cache) >= _TERM_CACHE_SIZE:  # a bounded cache: start afresh rather than grow
                    cache.clear()
                counts = [(fld, boost, searcher.doc_freq(fld, token)) for fld, boost in self._fields]
                fields = [(fld, boost) for fld, boost, count in counts if count]
                entry = cache[token] = (self._term_queries(token, fields), sum(count for *_, count in counts))
            out.append((token, *entry))
        return out

    def _within_budget(
        self, words: list[tuple[str, tuple[Any, ...], int]]
    ) -> tuple[list[tuple[str, tuple[Any, ...], int]], list[str]]:
        """The words to search, and those left out so the query reads at most `max_postings` postings.

        tantivy's block-max WAND skips postings that cannot reach the top k, but a long request's
        commonest words (at a million tools, "retrieve" is in 70% of them) still make it read
        millions: the tail of bm25's latency. Those words weigh least in every score (BM25's idf
        falls with a word's share of the catalog), so they give way first, commonest first, until
        the rest is within the bound; the last word always stays. Within the bound (every request
        of the shared data sets, by 58 times or more) the search is exact; the ranking's notes name
        what was left out.
        """
        total = sum(count for *_, count in words)
        if self._max_postings is None or total <= self._max_postings:
            return words, []
        left_out: set[str] = set()
        for token, _, count in sorted(words, key=lambda word: -word[2]):
            if total <= self._max_postings or len(left_out) == len(words) - 1:
                break
            left_out.add(token)
            total -= count
        return [word for word in words if word[0] not in left_out], [w for w, *_ in words if w in left_out]

    def _left_out_note(self, query: str, left_out: Sequence[str], searcher: Any) -> str:
        """What the ranking says about words `_within_budget` left out, in the request's own spelling."""
        stems = set(left_out)
        shown = dict.fromkeys(
            word.strip(_NAME_TRIM) for word in query.split() if stems & set(self._analyzer.analyze(split_words(word)))
        )
        share = min(searcher.doc_freq("all", token) for token in left_out) / max(int(searcher.num_docs), 1)
        listed = ", ".join([w for w in shown if w][:6]) or ", ".join(left_out)
        return (
            f"searched without its most common words ({listed}; each is in {share:.0%} or more of the "
            f"{int(searcher.num_docs):,} tools), which weigh least, so the search reads at most "
            f"{self._max_postings:,} postings"
        )

    def _term_queries(self, token: str, targets: Sequence[tuple[str, float]]) -> tuple[Any, ...]:
        term_query, boost_query = tantivy.Query.term_query, tantivy.Query.boost_query
        made = []
        for fld, boost in targets:
            q = term_query(self._schema, fld, token, _SCORED)
            made.append(q if boost == 1.0 else boost_query(q, boost))
        return tuple(made)

    def _plain(self, query: str, searcher: Any) -> tuple[_Compiled | None, tuple[str, ...]]:
        """Every word OR-ed over every field, plus a bonus for a word that is a whole tool name."""
        prose, values = lexical_parts(query)
        tokens = self._tokens(prose, drop_filler=True) or self._tokens(prose)  # "what can you do?"
        # The words of values (an address, a URL, an id) count lightly: they fill parameters, they
        # do not say which tool (toolsearch.entities).
        weak = [t for t in self._tokens(values) if t not in tokens] if values else []
        words, left_out = self._within_budget(self._present_terms([*tokens, *weak], searcher))
        notes = (self._left_out_note(query, left_out, searcher),) if left_out else ()
        light = set(weak)
        # When no tool has any of the words, the plain terms still run (and find nothing), so the
        # ranking's note says no tool matched rather than that the query had no words.
        terms = [
            tantivy.Query.boost_query(q, VALUE_WEIGHT) if token in light and tokens else q
            for token, queries, _ in words
            for q in queries
        ] or self._terms([*tokens, *weak][:1], self._fields)
        # Only names some tool has: a name no tool has adds nothing to any score, and without any the
        # second query is not run at all (a term lookup costs about a microsecond, the query 0.5 ms).
        candidates = dict.fromkeys(c.strip(_NAME_TRIM).lower() for c in [query, *query.split()])
        names = self._exact_name([c for c in candidates if c and searcher.doc_freq("name_exact", c)])
        if not terms:
            return (None if names is None else _Compiled(names)), notes
        return _Compiled(_any_of(terms), names, tuple(terms)), notes

    def _bag(self, tokens: Sequence[str], name_candidates: Sequence[str]) -> Any | None:
        subqueries = self._terms(tokens, self._fields)
        exact = self._exact_name([c.strip(_NAME_TRIM).lower() for c in name_candidates])
        if exact is not None:
            subqueries.append(exact)
        return _any_of(subqueries) if subqueries else None

    def _group(self, group: _Group, budget: _Expansions) -> Any | None:
        parts: list[tuple[Any, Any]] = []
        # Optional plain words and phrases join one bag scored like a plain query (each word once,
        # as a sentence with a quoted name in it should be); a phrase adds a bonus for its words
        # standing together.
        bag: dict[str, None] = {}
        names: list[str] = []
        # A clause repeated in one group counts once, as a plain query's words do: `ab* ab* ...` (250 times in a
        # 1,000-character query) is one prefix query, not 250.
        seen: set[tuple[str, _Literal | _Group]] = set()
        for occur, node in group.clauses:
            key = (occur, node)
            if key in seen:
                continue
            seen.add(key)
            if (
                occur == "should"
                and isinstance(node, _Literal)
                and node.field is None
                and node.fuzzy is None
                and not node.prefix
                and node.boost == 1.0
            ):
                bag.update(dict.fromkeys(self._tokens(node.text, drop_filler=not node.phrase)))
                if not any(c.isspace() for c in node.text.strip()):
                    names.append(node.text)
                if not node.phrase:
                    continue
            compiled = self._group(node, budget) if isinstance(node, _Group) else self._literal(node, budget)
            if compiled is not None:
                parts.append((getattr(tantivy.Occur, _Occur[occur]), compiled))
        words = self._bag(list(bag), names) if bag or names else None
        if words is not None:
            parts.append((tantivy.Occur.Should, words))
        if not any(occur != tantivy.Occur.MustNot for occur, _ in parts):
            return None
        query = tantivy.Query.boolean_query(parts)
        return query if group.boost == 1.0 else tantivy.Query.boost_query(query, group.boost)

    def _literal(self, lit: _Literal, budget: _Expansions) -> Any | None:
        tokens = self._tokens(lit.text)
        schema, Q = self._schema, tantivy.Query
        alternatives: list[Any] = []
        # Which words expand (prefix or fuzzy), decided once for all the fields they are searched in.
        expands = [budget.take() for _ in tokens] if lit.fuzzy is not None or lit.prefix else []
        if tokens:
            for fld, boost in self._targets(lit.field):
                if expands:
                    per_token = [
                        self._fuzzy_or_prefix(fld, t, lit) if expand else Q.term_query(schema, fld, t, _SCORED)
                        for t, expand in zip(tokens, expands, strict=True)
                    ]
                    q = (
                        per_token[0]
                        if len(per_token) == 1
                        else Q.boolean_query([(tantivy.Occur.Must, p) for p in per_token])
                    )
                elif len(tokens) == 1:
                    q = Q.term_query(schema, fld, tokens[0], _SCORED)
                else:
                    words = list[str | tuple[int, str]](self._positions(lit.text))
                    q = Q.phrase_query(schema, fld, words, lit.slop)
                alternatives.append(q if boost == 1.0 else Q.boost_query(q, boost))
        if lit.field in (None, "name") and not any(c.isspace() for c in lit.text.strip()):
            exact = self._exact_name([lit.text.strip(_NAME_TRIM).lower()])
            if exact is not None:
                alternatives.append(exact)
        if not alternatives:
            return None
        query = _any_of(alternatives)
        return query if lit.boost == 1.0 else Q.boost_query(query, lit.boost)

    def _fuzzy_or_prefix(self, fld: str, token: str, lit: _Literal) -> Any:
        if lit.prefix:
            return tantivy.Query.regex_query(self._schema, fld, re.escape(token) + ".*")
        distance = (
            lit.fuzzy
            if lit.fuzzy is not None and lit.fuzzy >= 0
            else (0 if len(token) <= 2 else 1 if len(token) <= 5 else 2)
        )
        return tantivy.Query.fuzzy_term_query(self._schema, fld, token, distance)


def _any_of(queries: Sequence[Any]) -> Any:
    if len(queries) == 1:
        return queries[0]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in queries])


def lucene_constraints(query: str) -> frozenset[str]:
    """The constraints a Lucene `query` writes (empty, so false, when none): "required" (`+x`), "excluded" (`-x`,
    `!x`), "field" (`name:x`), written as symbols on purpose, and the operators "and" (`AND`, `&&`) and "not"
    (`NOT`), which a request in prose may also hold ("weather for Paris AND London"). A hybrid search with any of
    them keeps to the tools bm25 lets through (as for a word written in part, `weath*`: see lucene_reading; a query
    with neither, `email^2`, is answered by both halves); when that is none, it answers nothing for a symbol
    constraint (STRICT_CONSTRAINTS) and the closest tools by meaning, with a note, for an operator. A query that
    does not parse is searched as plain words: no constraint."""
    reading = lucene_reading(query)
    return frozenset() if reading is None else reading[0]


def lucene_reading(query: str) -> tuple[frozenset[str], bool] | None:
    """How bm25 reads a query: None for one it searches as plain words (a sentence, or a Lucene attempt that does
    not parse); else its `lucene_constraints`, which hold for the tools bm25 returns whatever notes it adds (a boost
    lowered, terms capped), and whether it writes a word in part or approximately (`weath*`, `wether~`): only bm25
    reads such a word (an embedding of `weath*` is not one of "weather"), so a hybrid search keeps to bm25's tools
    for it as for a constraint.

    It shares bm25's parse of the query (see _parsed): asked right after bm25 searched the query, as a hybrid search
    asks, it parses nothing again."""
    parsed = _parsed(query)
    return None if parsed is None or parsed.group is None else (parsed.constraints, parsed.partial)


@dataclass(frozen=True, slots=True)
class _Parse:
    """One parse of a query that looks like Lucene: its clauses (None where it does not parse, and why), with
    what the parser noted, the constraints it wrote and whether it writes a word in part (see _Parser)."""

    group: _Group | None
    problem: str = ""  # the syntax error, where group is None
    notes: tuple[str, ...] = ()
    constraints: frozenset[str] = frozenset()
    partial: bool = False


# How many queries' parses are kept: a search and the readings asked of its query just after it (hybrid's) share
# one; a few hundred leave room for the searches that run at the same time.
_PARSE_CACHE_SIZE = 256


@functools.lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parsed(query: str) -> _Parse | None:
    """How bm25 reads `query`: None for plain words (it does not look like Lucene), else its one parse. Kept by the
    query string (a parse depends on nothing else, and its clauses are frozen), so bm25's search and lucene_reading
    parse a query once between them."""
    if not looks_like_lucene(query):
        return None
    parser = _Parser(query)
    try:
        group = parser.parse()
    except _SyntaxProblem as problem:
        return _Parse(None, str(problem))
    return _Parse(group, "", tuple(parser.notes), frozenset(parser.constraints), parser.partial)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a path's undecodable bytes, held as lone surrogates
        return False
    return True


# What tantivy's errors say of the system error under them: "... (os error 28) ..." or "Os { code: 13, ... }".
_OS_ERROR = re.compile(r"\(os error (\d+)\)|Os \{ code: (\d+)")
# What tantivy says when its writer's thread met an error writing a segment (the system error itself is lost).
_WRITER_KILLED = "index writer was killed"


def _os_error_code(exc: BaseException) -> int | None:
    """The system error an OSError or a tantivy error carries (None when it carries none)."""
    if isinstance(exc, OSError):
        return exc.errno
    found = _OS_ERROR.search(str(exc))
    return None if found is None else int(found.group(1) or found.group(2))


@contextlib.contextmanager
def _writing_scratch(folder: Path | None) -> Iterator[None]:
    """Translate a failure to write our private `folder` in the temporary folder (full, over a quota, read-only) into
    a BackendError that names the temporary folder and says what to do. tantivy reports it as a bare ValueError,
    with the system error ("An IO error occurred ... (os error 28)") or, where its writer's thread met it, without
    ("An index writer was killed"); shutil and mkdtemp as an OSError. tantivy's other errors pass unchanged."""
    try:
        yield
    except (OSError, ValueError) as exc:
        code = _os_error_code(exc)
        killed = code is None and _WRITER_KILLED in str(exc)
        if code is None and not killed:
            raise
        reason = os.strerror(code) if code else str(exc)
        where = f"the temporary folder {tempfile.gettempdir()}"
        inside = f" (in {folder})" if folder is not None else ""
        if killed:
            try:
                free = f": {shutil.disk_usage(tempfile.gettempdir()).free // 1024:,} kB are free there now"
            except OSError:
                free = ""
            problem = (f"could not be written (tantivy's thread that writes there failed, most likely for want of "
                       f"room{free})")
            advice = "Free space there, or set TMPDIR to a folder with room"
        elif code in NO_ROOM:
            problem, advice = f"has no room for it ({reason})", "Free space there, or set TMPDIR to a folder with room"
        elif code in NOT_ALLOWED:
            problem, advice = f"cannot be written ({reason})", "Set TMPDIR to a folder this user can write"
        else:
            problem, advice = f"cannot be written ({exc})", "Check that folder, or set TMPDIR to another one"
        raise BackendError(
            f"bm25 backend: tantivy writes the index in {where}{inside} before it is saved, and that folder "
            f"{problem}. {advice}, and try again"
        ) from None


def _read_layout(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """`folder`'s layout file, read once (empty where it is not a JSON object), and what makes the folder
    unusable (nothing when it is fine)."""
    layout_path = folder / LAYOUT_FILE
    if not layout_path.is_file():
        return {}, [f"{LAYOUT_FILE} is missing"]
    try:
        layout = json.loads(layout_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {}, [f"{LAYOUT_FILE} is corrupt ({exc})"]
    if not isinstance(layout, dict):
        layout = {}
    problems = []
    if layout.get("layout") != LAYOUT_VERSION:
        found = layout.get("layout")
        problems.append(f"{LAYOUT_FILE} describes bm25 layout {found!r}; this version reads layout {LAYOUT_VERSION}")
    if not (folder / TANTIVY_DIR / "meta.json").is_file():
        problems.append(f"{TANTIVY_DIR}/meta.json is missing")
    return layout, problems


def _unopenable(folder: Path, exc: ValueError) -> StoredIndexError:
    """Why tantivy could not open the files in `folder`, saying what helps: a rebuild only where the files are bad
    (a rebuild writes the same files again, with the same modes, in the same folder)."""
    code = _os_error_code(exc)
    files = folder / TANTIVY_DIR
    if code in NOT_ALLOWED and "Lockfile" in str(exc):
        return StoredIndexError(
            f"{folder}: tantivy takes a lock file in {files} to open it, and this user cannot write there "
            f"({os.strerror(code)}); make that folder writable for this user, or open a copy of the index"
        )
    if code in NOT_ALLOWED:
        return StoredIndexError(
            f"{folder}: this user cannot read the tantivy files in {files} ({os.strerror(code)}); {MAKE_READABLE}"
        )
    return IndexFormatError(f"{folder}: the tantivy files cannot be opened ({exc}); rebuild the index")


_OPTIONS = ("boosts", "exact_name_boost", "max_postings")


def _check_options(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise BackendError(f"unknown bm25 option {unknown[0]!r}; bm25 accepts: {', '.join(_OPTIONS)}")


def create(**options: Any) -> Bm25Backend:
    """An empty bm25 backend (nothing is built until tools are added)."""
    _check_options(options)
    return Bm25Backend(**options)


def load(folder: Path, tools: Sequence[Tool], **options: Any) -> Bm25Backend:
    """Open the tantivy files written by `save`, memory-mapped; nothing is re-indexed."""
    folder = Path(folder)
    layout, problems = _read_layout(folder)
    if problems:
        raise IndexFormatError(f"{folder}: bm25 index unusable: {'; '.join(problems)}; rebuild the index")
    _check_options(options)
    try:
        backend = Bm25Backend(**options, _folder=folder / TANTIVY_DIR)
    except ValueError as exc:  # tantivy's own error for unreadable files
        raise _unopenable(folder, exc) from None
    if len(backend) != len(tools):
        raise IndexFormatError(
            f"{folder}: the bm25 index holds {len(backend)} tools but the catalog has {len(tools)}; rebuild the index"
        )
    names = tool_names(tools)  # (from a stored catalog's name table: no tool is parsed)
    backend._tools, backend._loaded = dict.fromkeys(names), tools
    if layout.get("name_order") is True:
        backend._mark_ordered()
    backend._position = {name: row for row, name in enumerate(names)}
    return backend
