"""The small Protocol every search backend implements, and the spec that registers one by name."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..results import Ranking
from ..tools import Tool

# Every backend breaks ties by name before its cut at k, so that the first hits do not depend on k. Where the engine
# orders equal scores by position instead (tantivy by document, faiss by id), a search reads on past the k-th while
# the hits tie with it (through_ties), up to this many hits in all (or k): a depth that does not grow with k, so that
# the first hits still do not depend on k where a tie runs past it; there only the tied tools within it are ordered
# by name. (Reading up to 1,000 past k made every bm25 search of a catalog of look-alike tools 2-10x slower, and each
# hit read widens a faiss search, an HNSW one by two.)
TIE_DEPTH = 100

_Found = TypeVar("_Found")


def through_ties(fetch: Callable[[int], _Found], k: int, most: int, tied: Callable[[_Found, int], bool]) -> _Found:
    """`fetch(limit)`'s top hits, read past the k-th while the last one read ties with the k-th, widening 4x at a
    time up to `most` (>= k) hits.

    `tied(found, limit)` says whether the last of the `limit` hits asked for was there and ties with the k-th. With
    `most` = k it reads k hits, nothing more.
    """
    limit = min(k + 1, most)
    while True:
        found = fetch(limit)
        if limit >= most or not tied(found, limit):
            return found
        limit = min(most, limit * 4)


@runtime_checkable
class Backend(Protocol):
    """A searchable index over tools. Third-party backends need not subclass anything.

    `add` inserts or replaces by name; `search` ranks at most `k` tools, only among `allowed`
    names when given; `save` writes the backend's own files into an existing folder; `describe`
    returns the JSON-able options that recreate it (stored in the manifest, and part of the
    index's content address), including `"model"` when a model shapes the index.

    A loaded backend keeps the stored generation it was read from while it lives, in case it reads
    those files again. One that does may define `saved_in(folder)`: called after it saved itself
    under the name it was loaded from, it reads its files from `folder` from then on, and the old
    generation can go (toolsearch.store; bm25 does this).
    """

    name: str

    def add(self, tools: Sequence[Tool]) -> None: ...

    def remove(self, names: Collection[str]) -> None: ...

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking: ...

    def save(self, folder: Path) -> None: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """How to create, load and check the availability of one backend, and how the model should query it.

    `query_syntax` is what the `tool_search` tool's `query` parameter tells the model; `search_hint`
    finishes the sentence "How to search instead: ..." after a bad query or no match. A backend
    object's own `query_syntax` attribute, when it has one, wins over the spec's.
    """

    name: str
    create: Callable[..., Backend]  # create(**options) -> an empty backend
    load: Callable[..., Backend]  # load(folder, tools, **options) -> a backend with saved state
    available: Callable[[], bool] = lambda: True
    extra: str = ""  # the pip extra of toolsearch that makes it available
    summary: str = ""
    query_syntax: str = ""
    search_hint: str = ""

    @staticmethod
    def lazy(
        name: str,
        module: str,
        *,
        requires: tuple[str, ...] = (),
        extra: str = "",
        summary: str = "",
        query_syntax: str = "",
        search_hint: str = "",
    ) -> BackendSpec:
        """A spec whose `module` (with `create(**options)` and `load(folder, tools, **options)`) is imported
        only when a backend is created or loaded; `requires` are the top-level packages it needs."""

        def create(**options: Any) -> Backend:
            return importlib.import_module(module).create(**options)  # type: ignore[no-any-return]

        def load(folder: Path, tools: Sequence[Tool], **options: Any) -> Backend:
            return importlib.import_module(module).load(folder, tools, **options)  # type: ignore[no-any-return]

        def available() -> bool:
            return all(importlib.util.find_spec(pkg) is not None for pkg in requires)

        return BackendSpec(name, create, load, available, extra, summary, query_syntax, search_hint)
