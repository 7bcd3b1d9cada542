"""ToolIndex: a catalog plus one backend, with validated search, filters and updates."""

from __future__ import annotations

import os
import threading
import time
import unicodedata
import warnings
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from ._errors import ArgumentTypeError, InvalidQueryError, wrong_type
from ._untrusted import UNUSABLE, describe, first_hidden, with_article
from .backends import BACKENDS, Backend, get_backend_spec
from .catalog import Catalog
from .confidence import request_notes
from .lucene import looks_like_lucene
from .results import Hit, Ranking, SearchResult
from .store import index_key, made_backend, read_index, save_index  # the store owns the format; it never imports this
from .tools import Tool

MAX_QUERY_CHARS = 1_000
MAX_K = 1_000


def validate_query(query: object, *, max_chars: int = MAX_QUERY_CHARS) -> str:
    """Return the query stripped, or raise InvalidQueryError saying what to send instead."""
    if not isinstance(query, str):
        raise InvalidQueryError(f"query must be a string, got {type(query).__name__}")
    text = query.strip()
    if not text:
        raise InvalidQueryError("query is empty; describe the capability you need, e.g. 'send an email'")
    if len(text) > max_chars:
        raise InvalidQueryError(
            f"query is {len(text)} characters; the limit is {max_chars}. Use a few keywords instead"
        )
    found = first_hidden(text, UNUSABLE)  # a lone surrogate (JSON "\\ud800") crashes every text engine
    if found is not None:
        position, char, kind = found
        raise InvalidQueryError(
            f"query holds {describe(char)} (position {position}), {with_article(kind)}, which a query cannot contain; "
            "send it again as plain text without that character"
        )
    return text


def validate_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise InvalidQueryError(f"k (max results) must be an integer, got {k!r}")
    if k < 1 or k > MAX_K:
        raise InvalidQueryError(f"k (max results) must be between 1 and {MAX_K}, got {k}")
    return k


def _names_list(what: str, names: object, item: str = "tool name", example: str = "send_email") -> list[str]:
    """`names` read once into a list of `item`s (an iterator is used up by reading it), or ArgumentTypeError: a
    lone str (itself a collection of one-letter names), bytes, a Tool or anything else that is not a collection of
    strings is refused, never misread."""
    if isinstance(names, str | bytes | bytearray | Tool) or not isinstance(names, Iterable):
        shown = f" ({names!r})" if isinstance(names, str | bytes | bytearray) else ""
        raise ArgumentTypeError(
            f"{what} must be a list of {item}s, got {type(names).__name__}{shown}; pass a list, e.g. [{example!r}]"
        )
    items = list(names)
    for i, name in enumerate(items):
        if not isinstance(name, str):
            hint = f" (pass its name, {name.name!r})" if isinstance(name, Tool) else ""
            raise ArgumentTypeError(f"{what}: item {i} must be a {item} (str), got {type(name).__name__}{hint}")
    return items


def _namespaces_list(namespaces: object) -> list[str]:
    """`namespaces` as a list (see _names_list), a lone str as one namespace and "" as none (no filter, as
    `tool_search` reads an empty namespace: an empty form field passed straight through)."""
    if isinstance(namespaces, str):
        return [namespaces] if namespaces else []
    return _names_list("namespaces", namespaces, item="namespace", example="email")


def _tools_list(what: str, tools: object) -> list[Tool]:
    """`tools` as a list, or ArgumentTypeError for a lone Tool, a str or anything that is not a collection of
    tools (the items themselves are checked by Catalog)."""
    if isinstance(tools, Tool | str | bytes) or not isinstance(tools, Iterable):
        raise ArgumentTypeError(
            f"{what} must be a list of Tool, got {type(tools).__name__}; pass a list, e.g. [tool] for one tool"
        )
    return list(tools)


def named_first(hits: list[Hit], named: list[str], k: int) -> list[Hit]:
    """`hits` with the tools a request names outright first (toolsearch.names), each scored at least the top score.

    Named tools keep the backend's order among themselves; one the backend did not return joins
    after those it did. The rest follow in the backend's order. With no hit scored above 0, a named
    tool scores 1.0: a score of 0 reads as "no match", and the request named it outright.
    """
    top = hits[0].score if hits and hits[0].score > 0 else 1.0
    ranked = {h.name: h for h in hits}
    wanted = set(named)
    first = [h for h in hits if h.name in wanted] + [Hit(n, top) for n in named if n not in ranked]
    lifted = [Hit(h.name, max(h.score, top)) for h in first]
    return (lifted + [h for h in hits if h.name not in wanted])[:k]


def _folded(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def _names_to_remove(what: str, names: object, catalog: Catalog) -> list[str]:
    """The names `what` (`ToolIndex.remove`, `PostgresIndex.remove`) is asked to remove, read once (see `_names_list`)
    and without repeats, after the one check every index's removal makes against `catalog`: a name it lacks while it
    holds one differing only in case or Unicode form is warned about (see `_warn_near_misses`)."""
    asked = list(dict.fromkeys(_names_list(f"{what}: names", names)))
    missing = [n for n in asked if n not in catalog]
    if missing:
        _warn_near_misses(what, missing, catalog, set(asked))
    return asked


def _warn_near_misses(what: str, missing: list[str], catalog: Catalog, removed: set[str]) -> None:
    """Warn about each of `missing` (names the catalog lacks) that equals a catalog name but for case or Unicode
    normalisation, a tool this call does not remove; the catalog's names are folded only when a name is missing.

    A warning, not an error: names are exact, so nothing of that name was removed, and the tool of the near name
    stays (a revocation with a typo must not pass unseen); but the same call repeated after a removal (a retry)
    must not fail because another tool's name differs only in case.
    """
    wanted = {_folded(n): n for n in missing}
    for name in catalog.names:
        asked = wanted.get(_folded(name))
        if asked is not None and name not in removed:
            warnings.warn(
                f"{what}: no tool is named {asked!r}, so none was removed; {name!r}, whose name differs "
                "only in case or Unicode form, stays searchable and callable (remove it by its exact name if it "
                "was meant)",
                UserWarning,
                stacklevel=4,  # the caller of `what`, past `_names_to_remove`
            )


class ToolIndex:
    """A searchable catalog. Build it once per catalog and share it across sessions."""

    def __init__(self, catalog: Catalog, backend: Backend) -> None:
        self._catalog = catalog
        self._backend = backend
        # Backends are not required to be thread-safe for writes; searches run concurrently.
        self._write_lock = threading.Lock()

    # --- construction -------------------------------------------------------------------

    @classmethod
    def build(cls, tools: Iterable[Tool] | Catalog, backend: str = "auto", **options: Any) -> ToolIndex:
        """Index tools with the named backend ("auto" = the best installed)."""
        spec = get_backend_spec(backend)  # an unknown backend fails before 10,000 tools are validated
        catalog = tools if isinstance(tools, Catalog) else Catalog(tools)
        engine = made_backend(spec.name, spec.create(**options))  # a plug-in's wrong product named before use
        engine.add(list(catalog))
        return cls(catalog, engine)

    @classmethod
    def load(cls, folder: str | Path, **options: Any) -> ToolIndex:
        """Open an index saved with `save` (see toolsearch.store for the checks it makes)."""
        if not isinstance(folder, (str, os.PathLike)):
            raise wrong_type("ToolIndex.load: folder", folder, "the index folder (str or Path)")
        return ToolIndex(*read_index(Path(folder), **options))

    def save(self, folder: str | Path) -> Path:
        """Write the index atomically: an interrupted save leaves any previous index intact."""
        return save_index(self, Path(folder))

    # --- properties ---------------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def backend_name(self) -> str:
        return self._backend.name

    @property
    def key(self) -> str:
        return index_key(self._catalog.hash, self._backend.name, self._backend.describe())

    def __len__(self) -> int:
        return len(self._catalog)

    def __repr__(self) -> str:
        return f"ToolIndex({self.backend_name}, {len(self)} tools, catalog={self._catalog.hash[:12]})"

    # --- search -------------------------------------------------------------------------

    def resolve_filter(
        self, allowed: Collection[str] | None = None, namespaces: Collection[str] | None = None
    ) -> frozenset[str] | None:
        """Turn an allowed-name subset and a namespace filter into one name set (None = all)."""
        result = None if allowed is None else frozenset(_names_list("allowed", allowed))
        wanted = [] if namespaces is None else _namespaces_list(namespaces)  # read once: it may be an iterator
        if wanted:
            known = set(self._catalog.namespaces)
            unknown = sorted(set(wanted) - known)
            if unknown:
                listed = ", ".join(sorted(known)) or "none (this catalog has no namespaces)"
                raise InvalidQueryError(f"unknown namespace {unknown[0]!r}; known namespaces: {listed}")
            in_ns = self._catalog.names_in(wanted)
            result = in_ns if result is None else result & in_ns
        return result

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        allowed: Collection[str] | None = None,
        namespaces: Collection[str] | None = None,
    ) -> SearchResult:
        """Rank tools for a query, optionally only among `allowed` names and `namespaces`.

        >>> from toolsearch import Tool, ToolIndex
        >>> tools = [Tool("send_email", "Send an email"), Tool("get_weather", "Weather forecast for a city")]
        >>> ToolIndex.build(tools, "bm25").search("weather forecast for Paris", k=1).names
        ['get_weather']
        """
        from . import tracing  # here, not above: `import toolsearch` stays without it (about 1 ms)

        with tracing.retrieval(self, allowed) as traced:  # one span per search, however it was asked
            checked = validate_query(query), validate_k(k), self.resolve_filter(allowed, namespaces)
            return traced.result(self.search_checked(*checked), k, namespaces)

    def search_checked(self, text: str, k: int, names: frozenset[str] | None) -> SearchResult:
        """`search` for a query, k and filter already checked and resolved (by `search` or a wrapper)."""
        catalog = self._catalog  # one snapshot: an update may land while the backend searches
        start = time.perf_counter()
        notes: tuple[str, ...]
        hits: list[Hit]
        if names is not None and not names:
            hits, notes = [], ("no tools are visible under the given filter",)
        elif names is not None and not any(n in catalog for n in names):  # (stops at the first tool it finds)
            # Not a no-match: the filter (a typo'd allow-list, a stale one) lets no tool through; say so, and name it.
            absent = sorted(names)
            shown = ", ".join(repr(n) for n in absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
            hits, notes = [], (
                f"the filter lets no tool through: no tool of this index is named {shown}; check the allowed names "
                "against the catalog",
            )
        else:
            ranking = self._backend.search(text, k, names)
            if not isinstance(ranking, Ranking):  # a plug-in's mistake, named here, not an AttributeError below
                raise BACKENDS.wrong_product(self.backend_name, ranking, "a toolsearch.Ranking (hits, notes)")
            # Only tools of the catalog, and only within the filter: the filter is a caller's rights, and a backend
            # (a plug-in's, say) that ignores `allowed` must not show a tool outside them.
            hits = [h for h in ranking.hits if h.name in catalog and (names is None or h.name in names)][:k]
            notes = ranking.notes
            whole_only = bool(getattr(self._backend, "pattern_queries", False)) or looks_like_lucene(text)
            named = [n for n in catalog.name_table.named(text, whole_only=whole_only) if names is None or n in names]
            if named:
                if not hits:
                    notes = ()  # they explained why nothing matched; the named tools are the answer now
                hits = named_first(hits, named, k)
        elapsed = (time.perf_counter() - start) * 1000
        tools = tuple(catalog[h.name] for h in hits)
        notes = (*notes, *request_notes(text, hits, tools, self._backend))  # a weak match or a foreign request
        return SearchResult(text, tuple(hits), tools, self.backend_name, elapsed, tuple(notes))

    # --- incremental updates ------------------------------------------------------------

    def upsert(self, tools: Iterable[Tool]) -> None:
        """Add tools, replacing any with the same name, without a rebuild."""
        incoming = _tools_list("ToolIndex.upsert: tools", tools)
        with self._write_lock:
            catalog = self._catalog.updated(upsert=incoming)
            self._backend.add(incoming)
            self._catalog = catalog

    def remove(self, names: Iterable[str]) -> None:
        """Remove tools by name; a name no tool has is ignored (removing twice is harmless).

        Names are exact. A name the catalog lacks while it holds one differing only in case or Unicode form
        (`Delete_Repo` for `delete_repo`) removes nothing and warns (UserWarning), naming the tool that stays, so a
        revocation with a typo does not look done while the tool stays searchable and callable.
        """
        catalog = self._catalog
        gone = [n for n in _names_to_remove("ToolIndex.remove", names, catalog) if n in catalog]
        with self._write_lock:
            self._backend.remove(gone)
            self._catalog = self._catalog.updated(remove=gone)

    def sync(self, tools: Iterable[Tool] | Catalog) -> None:
        """Bring the index to exactly `tools`, touching only what changed."""
        newer = tools if isinstance(tools, Catalog) else Catalog(_tools_list("ToolIndex.sync: tools", tools))
        delta = self._catalog.diff(newer)
        if delta.removed:
            self.remove(delta.removed)
        changed = [newer[n] for n in (*delta.added, *delta.changed)]
        if changed:
            self.upsert(changed)
