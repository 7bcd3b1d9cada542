"""A tool with a schema and a third-party backend that subclasses nothing, for the core's unit tests."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from toolsearch import Ranking, Tool

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
    },
    "required": ["city"],
}


def weather(namespace: str | None = "weather") -> Tool:
    return Tool("get_weather", "Current weather for a city.", SCHEMA, namespace=namespace)


class ListBackend:
    """A third-party backend that subclasses nothing: substring match over names."""

    name = "list"

    def __init__(self, fail_save: bool = False) -> None:
        self.names: list[str] = []
        self.fail_save = fail_save

    def add(self, tools: Sequence[Tool]) -> None:
        self.names += [t.name for t in tools if t.name not in self.names]

    def remove(self, names: Collection[str]) -> None:
        self.names = [n for n in self.names if n not in names]

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        from toolsearch import Hit

        found = [n for n in self.names if query in n and (allowed is None or n in allowed)]
        return Ranking([Hit(n, 1.0) for n in found[:k]])

    def save(self, folder: Path) -> None:
        (folder / "names.json").write_text(json.dumps(self.names))
        if self.fail_save:
            raise KeyboardInterrupt  # the process is stopped half-way through writing

    def describe(self) -> dict[str, Any]:
        return {}
