"""Persisted, content-addressed indexes: atomic writes and a versioned manifest."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import (
    IndexFormatError,
    IndexNotFoundError,
    InvalidIndexNameError,
    StoredIndexError,
    ToolSearchError,
)
from .backends import get_backend_spec
from .catalog import Catalog
from .index import ToolIndex, index_key
from .tools import Tool

FORMAT = "toolsearch-index"
# 2: every file carries a BLAKE2b digest (format 1 recorded only sizes for the backend files)
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
TOOLS_FILE = "tools.jsonl"
BACKEND_DIR = "backend"
_log = logging.getLogger(__name__)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def default_root() -> Path:
    """`$TOOLSEARCH_HOME/indexes` when set, else `./indexes`."""
    home = os.environ.get("TOOLSEARCH_HOME")
    return Path(home) / "indexes" if home else Path("indexes")


@dataclass(frozen=True, slots=True)
class Manifest:
    """What `manifest.json` records about a stored index."""

    version: int
    backend: str
    options: dict[str, Any]
    catalog_hash: str
    key: str
    tool_count: int
    namespaces: list[str]
    created_at: str
    files: dict[str, dict[str, Any]]  # relative path -> {"bytes": size, "blake2b": hex digest}

    @property
    def model(self) -> str | None:
        model = self.options.get("model")
        return model if isinstance(model, str) else None

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **{f: getattr(self, f) for f in self.__dataclass_fields__}}


def _digest(path: Path) -> str:
    # BLAKE2b: stdlib, and faster than SHA-256 on CPUs without SHA extensions; it detects any
    # change to the bytes, unlike a size or mtime check (a same-size overwrite keeps both).
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, lambda: hashlib.blake2b(digest_size=32)).hexdigest()


def _file_records(folder: Path) -> dict[str, dict[str, Any]]:
    return {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "blake2b": _digest(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def verify_files(folder: Path, manifest: Manifest) -> None:
    """Check every file the manifest lists is present with its recorded size and digest.

    Raises IndexFormatError naming the first file that fails. Every byte is read on every load:
    at 10,000 tools this costs tens of milliseconds (benchmarks/results/reliability.md), small
    beside opening the backend, and unlike a size/mtime marker it cannot be fooled by a copy.
    """
    for rel, record in manifest.files.items():
        path = folder / rel
        if not path.is_file():
            raise IndexFormatError(f"{folder}: file {rel} is missing; rebuild the index (toolsearch build --rebuild)")
        if path.stat().st_size != record.get("bytes"):
            raise IndexFormatError(
                f"{folder}: file {rel} is truncated or altered ({path.stat().st_size} bytes, the manifest "
                f"recorded {record.get('bytes')}); rebuild the index (toolsearch build --rebuild)"
            )
        if _digest(path) != record.get("blake2b"):
            raise IndexFormatError(
                f"{folder}: file {rel} does not match the manifest's checksum (altered or corrupt); "
                "rebuild the index (toolsearch build --rebuild)"
            )


def verify_index(folder: Path) -> Manifest:
    """Read the manifest and check every stored file; the manifest when all is well."""
    manifest = read_manifest(folder)
    verify_files(folder, manifest)
    return manifest


def _read_stored_tools(path: Path) -> list[Tool]:
    """Read the tools an index stored; the caller has checked the file's digest."""
    tools: list[Tool] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                row = json.loads(line)
                tools.append(Tool._restore(row, row.pop("fingerprint")))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                raise IndexFormatError(f"{path}:{lineno}: not a stored tool ({exc}); rebuild the index") from None
    return tools


def _written_by_us(target: Path) -> set[str] | None:
    """The files an existing index folder's manifest lists (any format version), or None when unreadable."""
    try:
        data = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    return {str(rel) for rel in files} if isinstance(files, dict) else None


def _foreign_files(target: Path) -> list[str]:
    """Files in an existing index folder that toolsearch did not write (replacing it would delete them)."""
    listed = _written_by_us(target)
    foreign = []
    for path in sorted(target.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(target).as_posix()
        if rel == MANIFEST:
            continue
        # The backend folder is the backend's own: some write there when loading (tantivy's lock file).
        ours = rel in (listed or ()) or rel == TOOLS_FILE or rel.startswith(BACKEND_DIR + "/")
        if not ours:
            foreign.append(rel)
    return foreign


@contextmanager
def _atomic_folder(target: Path) -> Iterator[Path]:
    """Yield a scratch folder beside `target`; on success swap it in, on any error discard it."""
    if target.exists() and not (target / MANIFEST).exists() and (not target.is_dir() or any(target.iterdir())):
        raise StoredIndexError(
            f"{target} exists and is not a toolsearch index; refusing to replace it. Choose another folder"
        )
    foreign = _foreign_files(target) if target.is_dir() else []
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise StoredIndexError(
            f"{target} holds files toolsearch did not write ({shown}); replacing the index would delete them. "
            "Move them out or choose another folder"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield scratch
    except BaseException:  # KeyboardInterrupt included: never leave a half-written index
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    retired = target.parent / f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}"
    if target.exists():
        os.rename(target, retired)
    try:
        os.rename(scratch, target)
    except BaseException:
        if retired.exists() and not target.exists():
            os.rename(retired, target)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    shutil.rmtree(retired, ignore_errors=True)


def save_index(index: ToolIndex, folder: Path) -> Path:
    """Write tools, backend files and manifest; the manifest is written last."""
    with _atomic_folder(folder) as scratch:
        with (scratch / TOOLS_FILE).open("w", encoding="utf-8") as fh:
            for tool in index.catalog:
                row = {"fingerprint": tool.fingerprint, **tool.to_dict()}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        (scratch / BACKEND_DIR).mkdir()
        index.backend.save(scratch / BACKEND_DIR)
        manifest = Manifest(
            version=FORMAT_VERSION,
            backend=index.backend_name,
            options=index.backend.describe(),
            catalog_hash=index.catalog.hash,
            key=index.key,
            tool_count=len(index.catalog),
            namespaces=index.catalog.namespaces,
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            files=_file_records(scratch),
        )
        (scratch / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")
    return folder


def read_manifest(folder: Path) -> Manifest:
    """Read and check a manifest; every problem names the folder and what to do."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise IndexNotFoundError(f"no index at {folder}; build one with `toolsearch build`")
    if not path.is_file():
        raise IndexFormatError(f"{folder} has no {MANIFEST}: not an index or an interrupted build; rebuild it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path} is corrupt ({exc}); rebuild the index") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise IndexFormatError(f"{path} is not a toolsearch manifest; rebuild the index")
    version = data.get("version")
    if not isinstance(version, int):
        raise IndexFormatError(f"{path} has no format version; rebuild the index")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{folder} was built by a newer toolsearch (index format {version}, this one reads "
            f"{FORMAT_VERSION}); upgrade toolsearch or rebuild the index"
        )
    if version < FORMAT_VERSION:
        raise IndexFormatError(
            f"{folder} uses the old index format {version}, whose backend files carry no checksum; "
            "rebuild it with `toolsearch build` (an index of the same name is rebuilt automatically)"
        )
    try:
        fields = {f: data[f] for f in Manifest.__dataclass_fields__}
    except KeyError as exc:
        raise IndexFormatError(f"{path} lacks the field {exc.args[0]!r}; rebuild the index") from None
    kinds: dict[str, type] = {"backend": str, "options": dict, "catalog_hash": str, "key": str, "tool_count": int,
                              "namespaces": list, "created_at": str}
    for name, kind in kinds.items():
        if not isinstance(fields[name], kind) or isinstance(fields[name], bool):
            raise IndexFormatError(f"{path}: the field {name!r} is not a {kind.__name__}; rebuild the index")
    files = fields["files"]
    if not isinstance(files, dict) or TOOLS_FILE not in files or not all(
        isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("blake2b"), str)
        for r in files.values()
    ) or any(not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/") for rel in files):
        raise IndexFormatError(f"{path}: its list of files is malformed; rebuild the index")
    return Manifest(**fields)


def load_index(folder: Path, **options: Any) -> ToolIndex:
    """Open a saved index after checking its manifest, files and catalog hash.

    `options` reach the backend's loader (for example an `embedder` for the vector backend);
    a loader raises IndexFormatError when they contradict what the index was built with.
    """
    manifest = verify_index(folder)
    catalog = Catalog(_read_stored_tools(folder / TOOLS_FILE))
    if catalog.hash != manifest.catalog_hash:
        raise IndexFormatError(f"{folder}: stored tools do not match the manifest's hash; rebuild the index")
    spec = get_backend_spec(manifest.backend)
    try:
        backend = spec.load(folder / BACKEND_DIR, list(catalog), **{**manifest.options, **options})
    except ToolSearchError:
        raise
    except Exception as exc:  # a backend's own error types never reach the caller
        raise IndexFormatError(
            f"{folder}: the {manifest.backend} backend files cannot be read ({type(exc).__name__}: {exc}); "
            "rebuild the index"
        ) from None
    return ToolIndex(catalog, backend)


class IndexStore:
    """Named indexes under one root folder (default `./indexes`); names cannot escape it."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def path(self, name: str) -> Path:
        """The folder of a named index, after checking the name."""
        if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
            raise InvalidIndexNameError(
                f"invalid index name {name!r}: use 1 to 128 letters, digits, '.', '_' and '-', starting with a "
                "letter or digit (no path separators, no '..')"
            )
        return self.root / name

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).exists()
        )

    def manifest(self, name: str) -> Manifest:
        return read_manifest(self.path(name))

    def open(self, name: str, **options: Any) -> ToolIndex:
        return load_index(self.path(name), **options)

    def save(self, index: ToolIndex, name: str | None = None) -> str:
        name = name or f"{index.backend_name}-{index.key[:12]}"
        save_index(index, self.path(name))
        return name

    def remove(self, name: str) -> None:
        path = self.path(name)
        if not (path / MANIFEST).exists():
            raise IndexNotFoundError(f"no index named {name!r} in {self.root}; see `toolsearch list`")
        shutil.rmtree(path)

    def build(
        self,
        tools: Iterable[Tool] | Catalog,
        backend: str = "auto",
        name: str | None = None,
        *,
        rebuild: bool = False,
        **options: Any,
    ) -> tuple[str, ToolIndex, bool]:
        """Build and save, or reuse a stored index of the same content; returns (name, index, reused).

        A stored index is reused only when its key matches and every file passes its checks; one
        that fails is rebuilt (logged as a warning). `rebuild` builds anew in any case.
        """
        if name is not None:
            self.path(name)  # a bad name fails before any tool is checked or backend created
        spec = get_backend_spec(backend)
        catalog = tools if isinstance(tools, Catalog) else Catalog(tools)
        probe = spec.create(**options)
        key = index_key(catalog.hash, probe.name, probe.describe())
        name = name or f"{probe.name}-{key[:12]}"
        path = self.path(name)
        if (path / MANIFEST).exists() and not rebuild:
            try:
                if read_manifest(path).key == key:
                    return name, load_index(path, **options), True
            except IndexFormatError as exc:  # a broken or old index of this name is replaced below
                _log.warning("index %r failed its checks (%s); rebuilding it", name, exc)
        probe.add(list(catalog))
        index = ToolIndex(catalog, probe)
        save_index(index, path)
        return name, index, False
