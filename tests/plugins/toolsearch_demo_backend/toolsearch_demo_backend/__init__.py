"""A third-party toolsearch plug-in for the tests: a backend, an embedder, session and usage stores, a wire format."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolsearch import Hit, Ranking, Tool
from toolsearch.backends import BackendSpec
from toolsearch.providers import ToolCall, WireFormat
from toolsearch.stores import InMemorySessionStore, SessionStore, SessionStoreSpec
from toolsearch.usage import UsageStore

_WORD = re.compile(r"[a-z0-9]+")
_STATE = "words.json"


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.replace("_", " ").lower()))


class WordBackend:
    """Ranks tools by how many query words their name (counted `name_weight` times) and description share."""

    name = "words"

    def __init__(self, *, name_weight: int = 2) -> None:
        self.name_weight = name_weight
        self._tools: dict[str, tuple[set[str], set[str]]] = {}

    def add(self, tools: Sequence[Tool]) -> None:
        for tool in tools:
            self._tools[tool.name] = (_words(tool.name), _words(tool.description))

    def remove(self, names: Collection[str]) -> None:
        for name in names:
            self._tools.pop(name, None)

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        wanted = _words(query)
        scored = []
        for name, (in_name, in_text) in self._tools.items():
            if allowed is not None and name not in allowed:
                continue
            score = self.name_weight * len(wanted & in_name) + len(wanted & in_text)
            if score:
                scored.append(Hit(name, float(score)))
        scored.sort(key=lambda hit: (-hit.score, hit.name))
        return Ranking(scored[:k])

    def save(self, folder: Path) -> None:
        (folder / _STATE).write_text(json.dumps({"name_weight": self.name_weight, "tools": sorted(self._tools)}))

    def describe(self) -> dict[str, Any]:
        return {"name_weight": self.name_weight}


def create(**options: Any) -> WordBackend:
    return WordBackend(**options)


def load(folder: Path, tools: Sequence[Tool], **options: Any) -> WordBackend:
    saved = json.loads((Path(folder) / _STATE).read_text())  # a missing file means the index was not built here
    backend = WordBackend(name_weight=saved["name_weight"])
    backend.add(tools)
    return backend


WORDS = BackendSpec(
    "words",
    create,
    load,
    summary="word overlap (a test plug-in)",
    query_syntax="Plain words from the tool's name or description, e.g. `weather city`.",
    search_hint="use plain words that appear in the tool's name",
)


class HashEmbedder:
    """Hashed bag of words: deterministic, no model. Its model_id is its entry point's name, so indexes reopen."""

    model_id = "demo-hash"
    dimension = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _words(text):
                rows[row, hashlib.sha256(word.encode()).digest()[0] % self.dimension] += 1.0
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return rows / norms


def demo_store(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    """`demo://` sessions: an in-memory store (a real plug-in would reach its own database here)."""
    return InMemorySessionStore(ttl_seconds=ttl_seconds, **options)


def _redis_url(url: str) -> str:
    return "redis://" + url.split("://", 1)[1]


def _shared_store(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    """`demoredis://` sessions: in the Redis the URL names, under the plug-in's own key prefix."""
    from toolsearch.stores import RedisSessionStore

    return RedisSessionStore(_redis_url(url), ttl_seconds=ttl_seconds, prefix="demo:", **options)


# A spec, not a bare factory: it says the store is shared between processes (so `--workers N` takes it).
DEMO_REDIS = SessionStoreSpec(_shared_store, shared=True, pool_option="max_connections")


def demo_redis_usage(url: str, *, path: str | None = None, **options: Any) -> UsageStore:
    """The usage log beside `demoredis://` sessions, in the same Redis under the same prefix."""
    from toolsearch.stores.usage_redis import RedisUsageStore

    return RedisUsageStore(_redis_url(url), prefix="demo:", **options)


def _upper_call(data: Mapping[str, Any], search_name: str) -> ToolCall | None:
    if "CALL" not in data:
        return None
    return ToolCall(str(data.get("ID", "")), str(data["CALL"]), dict(data.get("ARGS") or {}))


UPPER = WireFormat(
    name="demo_upper",
    label="upper-case JSON (a test plug-in)",
    render_tool=lambda tool, alias: {"NAME": alias, "DESCRIPTION": tool.description},
    parse_call=_upper_call,
    render_result=lambda call, content, is_error: {"ID": call.id, "TEXT": content},
)
