"""The tools of a stored index, read lazily: an offsets table over the tools file, held open.

Loading a million-tool index used to parse and rebuild every stored tool up front. Here the
loader reads only the names, the namespaces and a table of byte offsets (written beside
`tools.jsonl` at save time); a tool is read from the open file (one `pread` of its line) and
parsed the first time a result, a session or an update needs it, and kept. The file is not
memory-mapped: one overwritten in place (`cp`, `rsync --inplace`) and cut shorter would kill
the process with SIGBUS on a read past its new end, where a read now comes back short and is
a clear error. A row whose tool is not the one its name table says is an error too.

The catalog hash is not recomputed (that would parse every tool): the table records the hash
the saved tools had, which must equal the manifest's, and the manifest carries its own digest
and every file's, so the tools file cannot differ from what the hash was computed over without
the load failing first.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from ._errors import IndexFormatError, InvalidToolError
from .catalog import Catalog, unknown_tool
from .tools import Tool

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LazyCatalog", "StoredTools", "tool_names", "write_table", "OFFSETS_FILE", "TABLE_FILE"]

OFFSETS_FILE = "tools.offsets.npy"  # int64 byte offsets of each line of tools.jsonl, and the file's end
TABLE_FILE = "tools.table.json"  # names, namespaces (first-seen order) and each tool's namespace number


def write_table(folder: Path, tools_file: str, tools: Iterable[Tool], catalog_hash: str) -> None:
    """Write the offsets table and the name table of `folder/tools_file` (as saved, one tool a line)."""
    import numpy as np  # not at import time: `import toolsearch` stays light

    offsets = [0]
    with (folder / tools_file).open("rb") as fh:
        for line in fh:
            offsets.append(offsets[-1] + len(line))
    names: list[str] = []
    namespaces: dict[str, int] = {}
    namespace_of: list[int] = []
    for tool in tools:
        names.append(tool.name)
        namespace_of.append(-1 if tool.namespace is None else namespaces.setdefault(tool.namespace, len(namespaces)))
    np.save(folder / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    table = {"catalog_hash": catalog_hash, "names": names, "namespaces": list(namespaces),
             "namespace_of": namespace_of}
    (folder / TABLE_FILE).write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")


def restore(data: dict[str, Any], where: str, *, recheck: bool) -> Tool:
    """One stored tool row as a Tool: restored as stored, or (`recheck`) validated and cleaned afresh.

    An index built under older untrusted-text rules (`_untrusted.RULES_VERSION`) is rechecked, so
    text today's rules clean never reaches a model; a tool today's rules refuse is a clear error.
    """
    fingerprint = data.pop("fingerprint")
    if not recheck:
        return Tool._restore(data, fingerprint)
    try:
        return Tool.from_dict(data)
    except InvalidToolError as exc:
        raise IndexFormatError(
            f"{where}: a stored tool breaks this toolsearch's rules for tool text ({exc}); rebuild the index "
            "from its source, where the tool is refused by name"
        ) from None


def tool_names(tools: Sequence[Tool]) -> list[str]:
    """The names of `tools` in order, without parsing stored tools when their name table is at hand
    (a backend's loader checks its files against the names; reading them from each tool would parse
    every stored tool, which made a hybrid load at 10,000 tools ten times slower)."""
    return list(tools.names) if isinstance(tools, StoredTools) else [tool.name for tool in tools]


class StoredTools(Sequence[Tool]):
    """The tools of one stored file by position, each parsed on first use (thread-safe, parsed once)."""

    def __init__(self, path: Path, offsets: np.ndarray, names: list[str], *, recheck: bool = False) -> None:
        self.recheck = recheck
        self.path = path
        self.names = names  # each row's tool name, from the name table
        # Held open (closed with this object) so a tool is read from the file the load checked, even after an
        # update replaced the index's files by new ones under the same names.
        self._fd = os.open(path, os.O_RDONLY)  # not inherited by child processes (PEP 446)
        weakref.finalize(self, os.close, self._fd)
        self._offsets = offsets
        self._parsed: list[Tool | None] = [None] * len(names)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._parsed)

    @overload
    def __getitem__(self, position: int) -> Tool: ...

    @overload
    def __getitem__(self, position: slice) -> list[Tool]: ...

    def __getitem__(self, position: int | slice) -> Tool | list[Tool]:
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        tool = self._parsed[position]
        if tool is None:
            tool = self._parse(position if position >= 0 else position + len(self))
        return tool

    def _parse(self, row: int) -> Tool:
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        line = os.pread(self._fd, end - start, start) if end > start else b""
        if len(line) != end - start:  # the file is shorter than when the index was loaded
            raise self._changed()
        try:
            data = json.loads(line)
            tool = restore(data, f"{self.path}:{row + 1}", recheck=self.recheck)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if os.fstat(self._fd).st_size != int(self._offsets[-1]):
                raise self._changed() from None
            raise IndexFormatError(f"{self.path}:{row + 1}: not a stored tool ({exc}); rebuild the index") from None
        if tool.name != self.names[row]:
            # Names are answered from the table without parsing: a mismatch would hand out one tool under another's
            # name (a search hit, a catalog lookup, a call), so it is refused. The manifest's checksums cannot tell.
            raise IndexFormatError(
                f"{self.path}:{row + 1}: row {row + 1} holds tool {tool.name!r}, but the index's name table "
                f"({TABLE_FILE}) says {self.names[row]!r}; the index's files do not belong together: rebuild the index"
            )
        with self._lock:
            kept = self._parsed[row]
            if kept is None:
                self._parsed[row] = kept = tool
        return kept

    def _changed(self) -> IndexFormatError:
        size = os.fstat(self._fd).st_size
        return IndexFormatError(
            f"{self.path} changed on disk after the index was loaded (it now holds {size} bytes, it held "
            f"{int(self._offsets[-1])}): its files were overwritten in place. Open the index again (IndexStore.open, "
            "ToolIndex.load), or rebuild it; to replace an index, build or save it anew rather than copy files over it"
        )

    @property
    def parsed(self) -> int:
        """How many tools have been parsed so far."""
        return sum(t is not None for t in self._parsed)

    def __iter__(self) -> Iterator[Tool]:
        return (self[i] for i in range(len(self)))


class LazyCatalog(Catalog):
    """A Catalog over stored tools: names and namespaces known up front, each tool parsed when needed."""

    __slots__ = ("_all", "_namespace_of", "_namespaces", "_rows", "_stored")

    def __init__(self, stored: StoredTools, namespaces: list[str], namespace_of: list[int], catalog_hash: str) -> None:
        # Catalog.__init__ is skipped on purpose: it would parse and hash every tool.
        names = stored.names
        self._stored = stored
        self._rows: dict[str, int] = {name: row for row, name in enumerate(names)}
        self._namespaces = namespaces
        self._namespace_of = namespace_of
        self._hash = catalog_hash
        self._all: dict[str, Tool] | None = None
        if len(self._rows) != len(names) or len(namespace_of) != len(names):
            raise IndexFormatError(f"{stored.path}: its name table does not match the stored tools; rebuild the index")

    @classmethod
    def open(cls, folder: Path, tools_file: str, catalog_hash: str, *, recheck: bool = False) -> LazyCatalog:
        """The lazy catalog of a stored index folder whose files have been checked."""
        import numpy as np

        try:
            offsets = np.load(folder / OFFSETS_FILE)
            table: dict[str, Any] = json.loads((folder / TABLE_FILE).read_text(encoding="utf-8"))
            names, namespaces, namespace_of = table["names"], table["namespaces"], table["namespace_of"]
            written_for = table["catalog_hash"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise IndexFormatError(f"{folder}: its tool table is unreadable ({exc}); rebuild the index") from None
        if written_for != catalog_hash:  # the hash every tool was hashed into when the index was saved
            raise IndexFormatError(f"{folder}: stored tools do not match the manifest's hash; rebuild the index")
        if offsets.ndim != 1 or len(offsets) != len(names) + 1:
            raise IndexFormatError(f"{folder}: its offsets table does not match its tools; rebuild the index")
        return cls(StoredTools(folder / tools_file, offsets, names, recheck=recheck), namespaces, namespace_of,
                   catalog_hash)

    @property
    def stored(self) -> StoredTools:
        return self._stored

    @property
    def _tools(self) -> dict[str, Tool]:  # type: ignore[override]  # Catalog's diff and updated read every tool
        if self._all is None:
            self._all = {tool.name: tool for tool in self._stored}
        return self._all

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._stored)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __getitem__(self, name: str) -> Tool:
        row = self._rows.get(name)
        if row is None:
            raise unknown_tool(name)
        return self._stored[row]

    def get(self, name: str) -> Tool | None:
        row = self._rows.get(name)
        return None if row is None else self._stored[row]

    @property
    def names(self) -> list[str]:
        return list(self._rows)

    @property
    def namespaces(self) -> list[str]:
        return list(self._namespaces)

    def _names_and_namespaces(self) -> tuple[list[str], list[str | None]]:  # from the name table: no tool is parsed
        of = self._namespace_of
        return list(self._rows), [self._namespaces[of[row]] if of[row] >= 0 else None for row in self._rows.values()]

    def names_in(self, namespaces: Iterable[str]) -> frozenset[str]:
        asked = set(namespaces)
        wanted = {i for i, ns in enumerate(self._namespaces) if ns in asked}
        return frozenset(name for name, row in self._rows.items() if self._namespace_of[row] in wanted)
