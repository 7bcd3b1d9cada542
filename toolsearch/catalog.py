"""An ordered, de-duplicated tool set with a content hash and deltas."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from ._errors import DuplicateToolError, InvalidToolError, UnknownToolError, wrong_type
from .names import NameTable
from .tools import Tool, provider_safe_name

# A name's first word: what comes before its first separator (`hr_lookup_employee`, `git.commit`, `time__now`).
_PREFIX = re.compile(r"^([^\W_]+)(?:__|[_.:-])\w")


def name_prefix(name: str) -> str | None:
    """The part of a tool name before its first '_', '.', '-', ':' or '__', or None when it has no such part."""
    found = _PREFIX.match(name)
    return found.group(1) if found else None


def namespaces_from_prefix(tools: Iterable[Tool], *, min_tools: int = 2) -> list[Tool]:
    """The tools, each one without a namespace given its name's prefix as one where `min_tools` or more share it.

    For catalogs whose names carry their group (`hr_lookup_employee`, `finance_get_invoice`) but no namespace
    field: afterwards `namespace:hr` queries and namespace filters work on them. A tool that has a namespace keeps
    it; a prefix no other tool shares is left alone (it names one tool, not a group). Opt-in
    (`toolsearch build --namespaces-from-prefix`), since a prefix is not always a group (`get_weather`, `get_user`).
    """
    items = list(tools)
    counts = Counter(name_prefix(t.name) for t in items if t.namespace is None)
    out = []
    for tool in items:
        prefix = name_prefix(tool.name) if tool.namespace is None else None
        if prefix is not None and counts[prefix] >= min_tools:
            tool = dataclasses.replace(tool, namespace=prefix)
        out.append(tool)
    return out


def _positions(names: Iterable[str]) -> Callable[[str], int]:
    """A name's place among `names`, the table of places made on the first question only (most edits ask none)."""
    places: dict[str, int] = {}

    def position(name: str) -> int:
        if not places:
            places.update(zip(names, itertools.count()))
        return places[name]

    return position


# The end of an alias provider_safe_name makes: `_` and 8 hex digits of the original name's digest.
_ALIAS_TAIL = re.compile(r"_[0-9a-f]{8}")


def _refuse_lookalikes(tools: Mapping[str, Tool]) -> None:
    """DuplicateToolError for two names a model cannot tell apart: equal after Unicode normalisation (NFC: they
    print the same), or one equal to the provider-safe alias of another (`math_factorial_7458e2de` beside
    `math.factorial`, which models are shown under that alias: a call meant for one would run the other, and a
    request showing both would carry one name twice)."""
    forms: dict[str, str] = {}
    for name in tools:
        if name.isascii():  # NFC leaves ASCII as it is (a non-ASCII name may still normalise to an ASCII one)
            continue
        form = unicodedata.normalize("NFC", name)
        other = forms.get(form) or (form if form != name and form in tools else None)
        if other is not None:
            raise DuplicateToolError(
                f"tools {other!a} and {name!a} are the same name in two Unicode forms (equal after NFC "
                "normalisation): they print the same, so neither a model nor a reviewer can tell them apart; "
                "rename one",
                [other, name],
            )
        forms[form] = name
    # Only a name ending like an alias can be one: the aliases of the others are made only when one does.
    tails = {n for n in tools if len(n) > 9 and n[-9] == "_" and _ALIAS_TAIL.fullmatch(n, len(n) - 9)}
    for name in tools if tails else ():
        alias = provider_safe_name(name)
        if alias != name and alias in tails:
            raise DuplicateToolError(
                f"tool {alias!r} is named like the provider-safe alias of tool {name!r} (models are shown "
                f"{name!r} as {alias!r}, since LLM APIs refuse its name), so a call meant for one would run the "
                f"other; rename {alias!r}",
                [name, alias],
            )


def unknown_tool(name: object) -> UnknownToolError:
    """The error for `catalog[name]` when no tool has that name."""
    return UnknownToolError(f"no tool named {name!r} in the catalog; look names up with catalog.get() or search first")


@dataclass(frozen=True, slots=True)
class CatalogDelta:
    """What changed between two catalogs, by tool name."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


class Catalog:
    """Tools in insertion order, unique by name, hashed by content (order-independent)."""

    __slots__ = ("_hash", "_name_table", "_tools")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
            raise wrong_type("the tools of a catalog", tools, "a list of Tool (see load_tools and Tool.from_dict)")
        items = list(tools)
        for i, tool in enumerate(items):
            if not isinstance(tool, Tool):
                raise InvalidToolError(
                    f"item {i} of the tools is a {type(tool).__name__}, not a Tool: convert definitions with "
                    "Tool.from_dict() or read a file with load_tools()"
                )
        counts = Counter(t.name for t in items)
        dupes = sorted(name for name, n in counts.items() if n > 1)
        if dupes:
            shown = ", ".join(repr(d) for d in dupes[:10])
            more = f" and {len(dupes) - 10} more" if len(dupes) > 10 else ""
            raise DuplicateToolError(
                f"{len(dupes)} tool name(s) defined more than once: {shown}{more}; "
                "give each tool a unique name (or a namespace prefix)",
                dupes,
            )
        self._tools: dict[str, Tool] = {t.name: t for t in items}
        _refuse_lookalikes(self._tools)
        # Sorted fingerprints: the same tools in another order address the same index.
        digest = hashlib.sha256()
        for fp in sorted(t.fingerprint for t in items):
            digest.update(fp.encode())
        self._hash = digest.hexdigest()

    @property
    def hash(self) -> str:
        """SHA-256 over the canonical JSON of every tool, independent of order."""
        return self._hash

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise unknown_tool(name) from None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def namespaces(self) -> list[str]:
        """Distinct namespaces in first-seen order."""
        seen: dict[str, None] = {}
        for tool in self._tools.values():
            if tool.namespace is not None:
                seen.setdefault(tool.namespace, None)
        return list(seen)

    @property
    def name_table(self) -> NameTable:
        """The catalog's names by spelling and identifier words (toolsearch.names), built on first use."""
        table: NameTable | None = getattr(self, "_name_table", None)  # a subclass may skip __init__
        if table is None:
            table = self._name_table = NameTable(*self._names_and_namespaces())
        return table

    def _names_and_namespaces(self) -> tuple[list[str], list[str | None]]:
        return list(self._tools), [t.namespace for t in self._tools.values()]

    def names_in(self, namespaces: Iterable[str]) -> frozenset[str]:
        wanted = set(namespaces)
        return frozenset(t.name for t in self._tools.values() if t.namespace in wanted)

    def diff(self, newer: Catalog) -> CatalogDelta:
        """Changes that turn this catalog into `newer`."""
        old, new = self._tools, newer._tools
        return CatalogDelta(
            added=tuple(n for n in new if n not in old),
            removed=tuple(n for n in old if n not in new),
            changed=tuple(n for n in new if n in old and old[n].fingerprint != new[n].fingerprint),
        )

    def updated(self, upsert: Iterable[Tool] = (), remove: Iterable[str] = ()) -> Catalog:
        """A new catalog with tools added or replaced by name and others removed.

        A replaced tool keeps its place; an added one (or one removed and added again) goes last. When this
        catalog's name table is built, the new one's is derived from it by the change alone: rebuilding it from
        every name after each edit made the first search after an edit cost about a second at 100,000 tools.
        """
        old = self._tools
        gone = set(remove)
        tools = {n: t for n, t in old.items() if n not in gone}
        incoming = list(upsert)
        Catalog(incoming)  # duplicate names inside one update are an error too
        dropped = [(n, old[n].namespace) for n in gone if n in old]
        entered = []
        for tool in incoming:
            kept = tools.get(tool.name)
            # a tool replaced under the same namespace is filed under the same forms, in the same place
            if kept is None or kept.namespace != tool.namespace:
                if kept is not None:
                    dropped.append((tool.name, kept.namespace))
                entered.append((tool.name, tool.namespace))
            tools[tool.name] = tool
        newer = Catalog(tools.values())
        table: NameTable | None = getattr(self, "_name_table", None)  # a subclass may skip __init__
        if table is not None:
            newer._name_table = table.updated(dropped, entered, _positions(newer._tools))
        return newer

    def __repr__(self) -> str:
        return f"Catalog({len(self)} tools, hash={self._hash[:12]})"
