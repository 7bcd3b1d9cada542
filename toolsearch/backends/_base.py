"""The small Protocol every search backend implements."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..results import Ranking
from ..tools import Tool


@runtime_checkable
class Backend(Protocol):
    """A searchable index over tools. Third-party backends need not subclass anything.

    `add` inserts or replaces by name; `search` ranks at most `k` tools, only among `allowed`
    names when given; `save` writes the backend's own files into an existing folder; `describe`
    returns the JSON-able options that recreate it (stored in the manifest, and part of the
    index's content address), including `"model"` when a model shapes the index.
    """

    name: str

    def add(self, tools: Sequence[Tool]) -> None: ...

    def remove(self, names: Collection[str]) -> None: ...

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking: ...

    def save(self, folder: Path) -> None: ...

    def describe(self) -> dict[str, Any]: ...
