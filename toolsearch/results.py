"""Frozen records that searches return."""

from __future__ import annotations

from dataclasses import dataclass, field

from .tools import Tool


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked tool; higher scores rank first (scales differ between backends)."""

    name: str
    score: float


@dataclass(frozen=True, slots=True)
class Ranking:
    """What a backend returns: hits best-first, plus notes for the caller (e.g. a query fallback)."""

    hits: list[Hit]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A finished search: the query, its ranked tools, which backend answered and how fast."""

    query: str
    hits: tuple[Hit, ...]
    tools: tuple[Tool, ...]
    backend: str
    elapsed_ms: float
    notes: tuple[str, ...] = field(default=())

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hits]
