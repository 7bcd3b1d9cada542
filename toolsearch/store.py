"""Persisted, content-addressed indexes: immutable generations behind one atomic pointer, every byte checked.

Layout of an index named NAME in a root folder:

    NAME                   a symbolic link to the current generation (the pointer)
    .NAME.gen-<id>/        a complete build: manifest.json, tools.jsonl, backend/ (never modified)
    .NAME.lock             taken by writers of NAME (builds and saves serialise on it); exists while one writes
    .NAME.tmp-<id>/        a build in progress

A folder toolsearch makes there is known as its own by its toolsearch manifest (a generation) or
by a mark, `.toolsearch-made` (a scratch or trash folder, which may have no manifest yet, or no
longer). Every build or save first sweeps the folder:
what a writer killed with -9 (or stopped by a full disk) left of any name, scratch, trash,
generations nothing points at and its lock file, is removed once no live process holds that
name's lock (the kernel drops a dead process's `flock`). Only folders that are provably
toolsearch's go: a name of that shape alone proves nothing (`.config.old-2024-06-01` is the
user's), so a folder without the mark or a toolsearch manifest is left alone, whatever its name.
One exception: a scratch or trash folder of toolsearch's exact name shape that holds nothing but
what a build writes at an index folder's top (or nothing) is what a build killed before it wrote
the mark left (every build of a release before the mark), and goes too.

Why a symbolic link: replacing a link with `rename(2)` is atomic, so a reader resolves NAME
once and then reads one generation only, whatever builds land meanwhile; and every path that
worked before (`NAME/manifest.json`, `ToolIndex.load(NAME)`) still works through the link.
A reader holds a shared `flock` on its generation's manifest while it reads; a writer removes
an old generation only after taking that lock exclusively and renaming the folder away, so no
reader is ever cut off mid-load (a reader that resolved a generation just retired re-resolves
the pointer and reads the new one). A loaded index keeps that lock for as long as it lives: bm25
copies its tantivy segments from the generation when the index is first changed or saved, so the
generation stays until the index is let go, and the next writer of the name removes it. An index
that saves itself under its own name moves the lock to the generation it wrote (`_Hold`).

An index folder of the earlier layout (a plain folder at NAME, format 2) is refused with a
"rebuild" error; the next build of that name moves it aside as an old generation and points
NAME at the new one. The manifest carries a digest of its own canonical content and the index
key is recomputed on load, so no field (a boost, a model) can change without being seen; and
every field that decides an answer is also checked against the stored files (the catalog hash,
the tool count and the namespaces against the tool table, the options against the backend's
own files), so a manifest edited and given a new digest is caught as well.

A read-only index (a read-only mount, as images ship them) opens for every backend: when a
backend cannot open its files in place (tantivy-py 0.27 offers only `Index.open(path)`, whose
reader creates `.tantivy-meta.lock` with a write open, and has no read-only directory), they
are copied into a private temporary folder that lives as long as the loaded backend.

This module owns the format (the content address, `index_key`, included) and imports nothing above it:
`ToolIndex.load` / `save` and `IndexStore` (toolsearch.index_store) are built on `read_index` / `save_index`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ._errors import (
    IndexFormatError,
    IndexNotFoundError,
    StoredIndexError,
    ToolSearchError,
    named_error,
)
from ._turns import BEAT_EVERY, SILENCE_AT_LEAST, WORD_EVERY, host_name
from ._untrusted import RULES_VERSION
from .backends import BACKENDS, Backend, get_backend_spec
from .catalog import Catalog
from .scratch import MAKE_READABLE, NO_ROOM, NOT_ALLOWED, copy_without_locks, new_scratch
from .stored_tools import OFFSETS_FILE, TABLE_FILE, LazyCatalog, restore, write_table
from .tools import Tool

if TYPE_CHECKING:
    from .index import ToolIndex  # what is saved; ToolIndex.load builds one from `read_index`

FORMAT = "toolsearch-index"
# 2: every file carries a BLAKE2b digest (format 1 recorded only sizes for the backend files)
# 3: the manifest carries a digest of its own content; generation folders behind a pointer
# 4: files carry an XXH3-128 digest instead (same checks, ~10x faster to verify on every load); 3 is still read
FORMAT_VERSION = 4
OLDEST_READ = 3
# Each format's file digest, by its name in the manifest's file records.
_FILE_DIGEST = {3: "blake2b", 4: "xxh3_128"}
MANIFEST = "manifest.json"
TOOLS_FILE = "tools.jsonl"
BACKEND_DIR = "backend"
_log = logging.getLogger(__name__)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REBUILD = "rebuild the index (toolsearch build --rebuild)"
# What toolsearch writes into the scratch and trash folders it makes beside an index: the proof, as a toolsearch
# manifest is a generation's, that a leftover of that name is ours to remove. Never in a generation.
MADE_MARK = ".toolsearch-made"
_MADE_TEXT = "made by toolsearch: a build folder of the index beside it, removed with that index\n"
# The ids `_sibling` writes (creation time in ns, then 4 random bytes, in hex), and the earlier layout's
# `.NAME.old-<pid>-<ns>`: a name that merely looks alike (`.photos.trash-2023`) is not one of ours.
_ID = r"[0-9a-f]+-[0-9a-f]{8}"
_KINDS = rf"(?:(?P<kind>gen|tmp|trash)-{_ID}|(?P<old>old)-[0-9]+-[0-9]+)"
# How every manifest toolsearch wrote begins (json.dumps with indent=2, "format" first): a manifest of ours cut
# short by a full disk or a copy still shows whose it is.
_MANIFEST_START = b'{\n  "format": "toolsearch-index"'
_MANIFEST_LIMIT = 4 << 20  # ours list a handful of files: a few kB
_RESOLVE_ATTEMPTS = 100  # a reader re-resolves this often before giving up (each retry means a newer build)


def index_key(catalog_hash: str, backend: str, description: dict[str, Any]) -> str:
    """The content address of an index: catalog content plus everything that shapes the backend."""
    payload = json.dumps([catalog_hash, backend, description], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


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
    files: dict[str, dict[str, Any]]  # relative path -> {"bytes": size, "xxh3_128" (format 3: "blake2b"): hex digest}
    # The untrusted-text rules its tools were cleaned by (`_untrusted.RULES_VERSION`); manifests
    # written before the field existed were cleaned by version 1. Covered by the manifest's digest.
    text_rules: int = 1

    @property
    def model(self) -> str | None:
        model = self.options.get("model")
        return model if isinstance(model, str) else None

    def to_dict(self) -> dict[str, Any]:
        body = {"format": FORMAT, **{f: getattr(self, f) for f in self.__dataclass_fields__}}
        return {**body, "digest": manifest_digest(body)}


def manifest_digest(body: dict[str, Any]) -> str:
    """BLAKE2b of a manifest's canonical JSON (sorted keys, no spaces), its own `digest` left out."""
    canonical = {k: v for k, v in body.items() if k != "digest"}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).hexdigest()


def _digest(path: Path, kind: str = _FILE_DIGEST[FORMAT_VERSION]) -> str:
    # A digest detects any change to the bytes, unlike a size or mtime check (a same-size overwrite
    # keeps both). XXH3-128 (the xxhash package) reads ~10 GB/s a core against BLAKE2b's ~1 GB/s, and
    # every load reads every byte: at a million tools BLAKE2b alone was half the load. It guards
    # against corruption and stray edits, as BLAKE2b did here: whoever can rewrite the files can
    # rewrite the manifest too, so a cryptographic hash bought no more.
    if kind == "xxh3_128":
        import xxhash

        new: Any = xxhash.xxh3_128
    else:
        new = lambda: hashlib.blake2b(digest_size=32)  # noqa: E731
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, new).hexdigest()


def _file_records(folder: Path) -> dict[str, dict[str, Any]]:
    kind = _FILE_DIGEST[FORMAT_VERSION]
    return {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, kind: _digest(p, kind)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST and p.relative_to(folder).as_posix() != MADE_MARK  # the scratch's mark
    }


def verify_files(folder: Path, manifest: Manifest) -> None:
    """Check every file the manifest lists (size and digest), and the manifest's fields against the stored tools.

    Raises IndexFormatError naming the first file or field that fails (what `toolsearch list` and
    `info` report as the health).
    """
    _verify_digests(folder, manifest)
    _check_fields(folder, manifest, *_stored_fields(folder, manifest))


def _verify_digests(folder: Path, manifest: Manifest) -> None:
    """Check every file the manifest lists is present with its recorded size and digest.

    Raises IndexFormatError naming the first file (in the manifest's order) that fails. Every byte
    is read on every load: unlike a size/mtime marker a digest cannot be fooled by a copy or a
    same-size overwrite. The files are hashed side by side, largest first (the GIL is released
    while they hash), so on two cores a million-tool index's 0.9 GB take about the time of its
    0.67 GB tools file: XXH3-128 reads it in ~0.07 s (BLAKE2b, format 3's digest, ~0.6 s).
    """
    kind = _FILE_DIGEST[manifest.version]
    for rel, record in manifest.files.items():
        path = folder / rel
        try:
            if not path.is_file():
                raise IndexFormatError(f"{folder}: file {rel} is missing; {_REBUILD}")
            size = path.stat().st_size
        except OSError as exc:  # a folder of it this user may not search (is_file raises then)
            raise _unreadable(folder, rel, exc) from exc
        if size != record.get("bytes"):
            raise IndexFormatError(
                f"{folder}: file {rel} is truncated or altered ({size} bytes, the manifest "
                f"recorded {record.get('bytes')}); {_REBUILD}"
            )
    digests = _digests(folder, sorted(manifest.files, key=lambda rel: -int(manifest.files[rel]["bytes"])), kind)
    for rel, record in manifest.files.items():
        if digests[rel] != record.get(kind):
            raise IndexFormatError(
                f"{folder}: file {rel} does not match the manifest's checksum (altered or corrupt); {_REBUILD}"
            )


def _digests(folder: Path, rels: list[str], kind: str) -> dict[str, str]:
    """The `kind` digest of each file, hashed by up to one thread per core."""
    def one(rel: str) -> str:
        try:
            return _digest(folder / rel, kind)
        except OSError as exc:  # a file this user may not read: said as such, naming it, not the system's bare words
            raise _unreadable(folder, rel, exc) from exc

    workers = min(len(rels), os.cpu_count() or 1, 4)
    if workers <= 1:
        return {rel: one(rel) for rel in rels}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolsearch-verify") as pool:
        return dict(zip(rels, pool.map(one, rels), strict=True))


def _unreadable(folder: Path, rel: str, exc: OSError) -> IndexFormatError:
    """The error for a file of an index the system will not read, raised `from` that OSError (`toolsearch list` tells
    an index this user may not read from a damaged one by it). For a permission, the advice is not "rebuild": nothing
    in the files is wrong."""
    advice = f"this user may not read it: {MAKE_READABLE}" if isinstance(exc, PermissionError) else _REBUILD
    return IndexFormatError(f"{folder}: file {rel} cannot be read ({_os_reason(exc)}); {advice}")


def _stored_fields(folder: Path, manifest: Manifest) -> tuple[int, list[str], str]:
    """(tool count, namespaces, catalog hash) as the stored files of a checked generation hold them."""
    if TABLE_FILE in manifest.files:
        try:
            table = json.loads((folder / TABLE_FILE).read_text(encoding="utf-8"))
            return len(table["names"]), list(table["namespaces"]), str(table["catalog_hash"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise IndexFormatError(f"{folder}: its tool table is unreadable ({exc}); {_REBUILD}") from None
    catalog = Catalog(_read_stored_tools(folder / TOOLS_FILE))
    return len(catalog), catalog.namespaces, catalog.hash


def _check_fields(folder: Path, manifest: Manifest, count: int, namespaces: list[str], catalog_hash: str) -> None:
    """The manifest's fields that decide answers, against the stored files. Its digest covers them too, but
    anyone who can edit the manifest can recompute that digest (`manifest_digest` is public)."""
    if catalog_hash != manifest.catalog_hash:
        raise IndexFormatError(f"{folder}: stored tools do not match the manifest's hash; {_REBUILD}")
    if count != manifest.tool_count:
        raise IndexFormatError(f"{folder}: {count} stored tools, the manifest says {manifest.tool_count}; {_REBUILD}")
    if namespaces != manifest.namespaces:

        def shown(names: list[str]) -> str:
            return ", ".join(repr(n) for n in names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")

        raise IndexFormatError(
            f"{folder}: its manifest lists the namespaces {shown(manifest.namespaces) or '(none)'}, its stored tools "
            f"have {shown(namespaces) or '(none)'}; {_REBUILD}"
        )


def verify_index(folder: Path) -> Manifest:
    """Read the manifest and check every stored file of one generation; the manifest when all is well."""
    with _reading(Path(folder)) as (generation, raw):
        manifest = _parse_manifest(generation, raw)
        verify_files(generation, manifest)
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


# --- the pointer and its generations -------------------------------------------------------------


def _sibling(target: Path, kind: str) -> Path:
    """A fresh `.NAME.<kind>-<id>` beside `target`; ids sort by creation time."""
    return target.parent / f".{target.name}.{kind}-{time.time_ns():x}-{secrets.token_hex(4)}"


def _siblings(target: Path) -> Iterator[tuple[str, Path]]:
    """(kind, path) of every generation, scratch, trash and retired folder of `target`'s name (by name: whether one
    is ours is `_made_by_us`'s to say)."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.{_KINDS}$")
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    for entry in entries:
        found = pattern.match(entry.name)
        if found:
            yield found.group("kind") or found.group("old"), Path(entry.path)


def _generation(target: Path) -> Path | None:
    """The generation `target` points at; `target` itself for a plain folder; None when there is none."""
    try:
        link = os.readlink(target)
    except FileNotFoundError:
        return None
    except OSError:  # EINVAL, not a link: a plain folder (earlier layout, or any path); the reader says more
        return target
    return target.parent / link


def _is_our_pointer(target: Path) -> bool:
    return _points_at_a_generation(target, target.name)


def _points_at_a_generation(link: Path, name: str) -> bool:
    """Whether `link` is a symbolic link to a generation of the index `name`, as toolsearch makes them."""
    try:
        to = os.readlink(link)
    except OSError:
        return False
    return re.fullmatch(rf"\.{re.escape(name)}\.gen-{_ID}", to) is not None


def is_toolsearch_manifest(path: Path) -> bool:
    """Whether `path` is a manifest toolsearch wrote (`"format": "toolsearch-index"`, any version, even cut short):
    what makes a plain folder an index. Any other `manifest.json` (a web app's) is the user's."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MANIFEST_LIMIT + 1)  # a user's file of any size is not read whole to say it is not ours
    except OSError:
        return False
    if raw.startswith(_MANIFEST_START):
        return True
    if len(raw) > _MANIFEST_LIMIT:
        return False
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def _made_by_us(folder: Path) -> bool:
    """Whether a folder beside an index is provably toolsearch's: it holds the mark toolsearch writes into each one it
    makes, or a toolsearch manifest (a generation written before the mark, an earlier-layout folder moved aside), or
    it is an unmarked scratch or trash folder holding only our layout (`_left_unmarked`)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    return (folder / MADE_MARK).is_file() or is_toolsearch_manifest(folder / MANIFEST) or _left_unmarked(folder)


# What `_write_generation` (with `write_table`) writes at the top of an index folder: the backend's and a carried
# request encoder's files all go under BACKEND_DIR.
_LAYOUT_FILES = frozenset({MANIFEST, TOOLS_FILE, OFFSETS_FILE, TABLE_FILE})
_LAYOUT_DIRS = frozenset({BACKEND_DIR})
_UNMARKED = re.compile(rf"^\..+\.(?:tmp|trash)-{_ID}$")


def _left_unmarked(folder: Path) -> bool:
    """Whether `folder` is a scratch or trash folder toolsearch left without its mark: a build killed before it wrote
    one (every build of a release before the mark: their scratch never has one), or a removal by such a release cut
    short after the manifest went. Its name has toolsearch's exact shape and its top holds only what a build writes
    there, or nothing; a user's folder of that name holding anything else is not ours."""
    if not _UNMARKED.match(folder.name):
        return False
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    for entry in entries:
        if entry.name in _LAYOUT_DIRS:
            ours = entry.is_dir(follow_symlinks=False)
        elif entry.name == MANIFEST:
            # not a toolsearch one (`_made_by_us` asked first): ours only if cut short before it said whose it is
            # (written last, so a kill mid-write leaves it empty or a few bytes long)
            ours = entry.is_file(follow_symlinks=False) and _cut_before_its_format(Path(entry.path))
        else:
            ours = entry.name in _LAYOUT_FILES and entry.is_file(follow_symlinks=False)
        if not ours:
            return False
    return True


def _cut_before_its_format(path: Path) -> bool:
    """Whether the file holds the first bytes of a toolsearch manifest and stops before its "format" is written."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(len(_MANIFEST_START))
    except OSError:
        return False
    return len(raw) < len(_MANIFEST_START) and _MANIFEST_START.startswith(raw)


def _mark(folder: Path) -> None:
    """Mark a folder toolsearch made (or one it knows is its own) as such."""
    mark = folder / MADE_MARK
    if not mark.is_file():
        with contextlib.suppress(OSError):
            mark.write_text(_MADE_TEXT, encoding="utf-8")


def _remove_made(folder: Path) -> None:
    """Remove a folder of ours, its mark last: a removal cut short (a kill, a file that will not go) leaves a
    folder still known as ours, which the next writer removes."""
    _mark(folder)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name == MADE_MARK:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        if [e.name for e in os.scandir(folder)] == [MADE_MARK]:
            os.unlink(folder / MADE_MARK)
            os.rmdir(folder)


@contextmanager
def _reading(folder: Path, held: list[int] | None = None) -> Iterator[tuple[Path, bytes]]:
    """Resolve the pointer once and hold the generation it names: yields (generation, manifest bytes).

    The shared lock on the manifest keeps writers from removing the generation while it is read.
    With `held`, a duplicate of the locked descriptor is appended to it, and the lock lasts until
    the caller closes that too (an open index: `_Hold`). A plain folder of the earlier layout is
    not held: the writer that moves it aside waits for its readers.
    """
    previous: Path | None = None
    for _ in range(_RESOLVE_ATTEMPTS):
        generation = _generation(folder)
        if generation is None:
            if previous is None and any(kind == "gen" for kind, _ in _siblings(folder)):
                previous = folder
                time.sleep(0.05)  # an earlier-layout folder being moved aside: the pointer follows at once
                continue
            raise IndexNotFoundError(f"no index at {folder}; build one with `toolsearch build`")
        path = generation / MANIFEST
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            if generation != folder and not generation.exists():
                if generation == previous:  # the pointer names a folder that is gone for good
                    raise IndexFormatError(
                        f"{folder} points at {generation.name}, which is not beside it: the index was copied "
                        f"without the folder it points at, or that folder was deleted. Copy an index with "
                        f"`cp -rL` (or copy the {generation.name} folder beside it too), or {_REBUILD}"
                    ) from None
                previous = generation
                continue  # retired after we resolved it: the pointer names a newer generation now
            if not generation.is_dir():
                raise IndexNotFoundError(f"no index at {folder}; build one with `toolsearch build`") from None
            raise IndexFormatError(
                f"{folder} has no {MANIFEST}: not an index or an interrupted build; rebuild it"
            ) from None
        except OSError as exc:  # named by the index, not the generation behind it
            raise _unreadable(folder, MANIFEST, exc) from exc
        with fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            if not _same_file(fh, path):
                previous = None
                continue  # retired between our open and our lock
            raw = fh.read()
            if held is not None and generation != folder:
                held.append(os.dup(fh.fileno()))  # the same open file: its lock outlives this `with`
            try:
                yield generation, raw
            except IndexFormatError as exc:  # about its files: name the index, not the generation folder behind it
                exc.args = tuple(a.replace(str(generation), str(folder)) if isinstance(a, str) else a for a in exc.args)
                raise
            return
    raise IndexFormatError(f"{folder} was rebuilt {_RESOLVE_ATTEMPTS} times while it was being opened; try again")


def _same_file(fh: IO[bytes], path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fh.fileno())
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


# A holder of a name's writer lock beats on its lock file (its modification time, every BEAT_EVERY seconds from a
# thread of its own), as the Postgres store's build lock does (toolsearch.pg.index._advisory_lock; toolsearch._turns).
# A process hung in a call that never returns still beats from its thread: it is waited for, and said to be waited for.
LOCK_WAIT = 60.0  # seconds a holder may show no sign of life before a waiting writer gives up on it, by default
_WORD_AFTER = 1.0  # a waiting writer says whom it waits for after this long, and again every WORD_EVERY


@contextmanager
def _writer_lock(target: Path, *, wait: bool = True, lock_wait: float | None = None) -> Iterator[bool]:
    """Writers of one name take turns (released when the process dies, too). Yields True once held; False at
    once, without waiting, when `wait` is False and another writer holds it.

    The lock file exists only while it is held: its holder removes it before releasing it, and a
    writer that waited on a file so removed locks the one that is there now instead (two writers
    never hold two files of one name). So no lock file outlives its writer, unless the writer was
    killed; the next sweep removes that one.

    The holder writes its pid (and host) into the file and beats on it. A writer that waits says in the log whom for
    after a second, and again every minute; it gives up, with StoredIndexError and nothing changed, on a holder that
    has shown no sign of life for `lock_wait` seconds (default LOCK_WAIT; never under 3). A holder that wrote no pid
    (an older toolsearch, which does not beat either) is waited for however long it takes.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.parent / f".{target.name}.lock"
    waiting: _LockWait | None = None
    while True:
        try:
            handle = path.open("ab")
        except OSError as exc:
            raise StoredIndexError(
                f"cannot write an index in {target.parent}: {exc}; choose a writable folder"
            ) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                handle.close()
                yield False
                return
            waiting = waiting or _LockWait(target, path, lock_wait)
            waiting.take(handle)  # or StoredIndexError: the holder went silent
        if _same_file(handle, path):
            break
        handle.close()  # its holder removed it while we waited
    with handle:
        beat = _Beat(handle)
        try:
            yield True
        finally:
            beat.stop()
            with contextlib.suppress(OSError):
                path.unlink()  # while still held: see above
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Beat:
    """A holder's signature and beat on its lock file: its pid and host, for a waiter's message, then a touch every
    BEAT_EVERY seconds from a thread until `stop`. A stopped process's threads stop with it: that is the silence a
    waiter reads."""

    def __init__(self, handle: IO[bytes]) -> None:
        with contextlib.suppress(OSError):  # a full disk: unsigned, the holder is waited for as an older one's
            handle.truncate(0)
            handle.write(f"{os.getpid()} {host_name()}\n".encode())
            handle.flush()
        self._fd = handle.fileno()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolsearch-writer-beat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(BEAT_EVERY):
            try:
                os.utime(self._fd)
            except OSError:  # the file system refuses: the holder is then seen as silent, and waiters give up on it
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


class _LockWait:
    """One writer's wait for the holder of its name's lock (see `_writer_lock`)."""

    def __init__(self, target: Path, path: Path, lock_wait: float | None) -> None:
        self.target, self.path = target, path
        self.bound = max(LOCK_WAIT if lock_wait is None else lock_wait, SILENCE_AT_LEAST)
        self.started = time.monotonic()
        self.word_at = self.started + _WORD_AFTER

    def take(self, handle: IO[bytes]) -> None:
        """Lock `handle`, waiting in the kernel's queue (a thread of its own blocks in `flock`: the lock passes on the
        moment its holder lets go, in turn) while this thread watches the holder. Raises StoredIndexError once the
        holder has been silent for the bound; the handle is then the blocked thread's, which lets the lock go at once
        if it ever gets it. Any other end of the wait (Ctrl-C) leaves nothing locked either."""
        turn = threading.Lock()  # decides between the lock being taken and the wait being given up, once
        taken, given_up = threading.Event(), threading.Event()
        failed: list[OSError] = []

        def block() -> None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
            except OSError as exc:  # ENOLCK, say: said by the waiting thread
                failed.append(exc)
            with turn:
                if given_up.is_set():
                    handle.close()  # the waiter is gone: nothing is written under this lock
                    return
                taken.set()

        threading.Thread(target=block, name="toolsearch-writer-wait", daemon=True).start()
        try:
            self._watch(handle, taken)
        except BaseException:
            with turn:
                if taken.is_set():
                    handle.close()
                else:
                    given_up.set()
            raise
        if failed:
            handle.close()
            raise StoredIndexError(
                f"cannot take the writer lock of the index {self.target.name!r} ({self.path}): "
                f"{_os_reason(failed[0])}; choose a folder on a file system that supports file locks"
            )

    def _watch(self, handle: IO[bytes], taken: threading.Event) -> None:
        """Return once `taken` is set; say whom this waits for, and raise StoredIndexError on a holder silent too
        long. A beat (the file's modification time changing) is a sign of life."""
        last, heard_at = None, time.monotonic()
        while not taken.wait(0.25):
            now = time.monotonic()
            seen = os.fstat(handle.fileno())
            if (seen.st_mtime_ns, seen.st_ctime_ns) != last:
                last, heard_at = (seen.st_mtime_ns, seen.st_ctime_ns), now
            silent = now - heard_at >= self.bound
            if not silent and now < self.word_at:
                continue
            holder = _lock_holder(self.path)
            if silent and holder is not None:
                raise self._stalled(holder, now - self.started)
            if now >= self.word_at:
                _log.warning(
                    "index %r in %s: waiting for another writer of it (%s) to finish (waited %.0f s); this one goes "
                    "on when it does, and %s",
                    self.target.name, self.target.parent, holder or "a process that does not say which",
                    now - self.started,
                    f"gives up if it shows no sign of life for {self.bound:g} s (lock_wait)" if holder else
                    "waits for however long it takes (an older toolsearch's writer, which does not beat)",
                )
                self.word_at = now + WORD_EVERY

    def _stalled(self, holder: str, waited: float) -> StoredIndexError:
        return StoredIndexError(
            f"another writer of the index {self.target.name!r} in {self.target.parent} ({holder}) holds its lock "
            f"({self.path.name}) and has shown no sign of life for {self.bound:g} s: it is stopped (Ctrl-Z) "
            f"(a busy build beats on its lock every half second), so this one stopped waiting after {waited:.0f} s "
            "and changed nothing. Resume or end that process (`fg` in its terminal, or kill it) and try again, or "
            "wait longer: --lock-wait SECONDS (IndexStore(root, lock_wait=SECONDS))"
        )


def _lock_holder(path: Path) -> str | None:
    """The writer that holds the lock file `path` as it signed it ("pid N", "pid N on host H"); None when it did not
    (an older toolsearch) or the file is gone."""
    try:
        with path.open("rb") as fh:
            words = fh.read(300).decode("utf-8", "replace").split()
    except OSError:
        return None
    if not words or not words[0].isdigit():
        return None
    pid, host = words[0], " ".join(words[1:])  # a host name may hold spaces, or be empty
    return f"pid {pid}" if host == " ".join(host_name().split()) else f"pid {pid} on host {host}"


def _retire(folder: Path) -> bool:
    """Remove a generation of ours no reader holds (True), or leave it for a later writer (False)."""
    try:
        fh = (folder / MANIFEST).open("rb")
    except FileNotFoundError:
        _remove_made(folder)  # no manifest: never a readable generation
        return True
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a reader is loading it; the next writer removes it
        _mark(folder)  # one written before the mark: its trash must still be known as ours if the removal is cut short
        trash = _sibling(folder.parent / folder.name.rsplit(".gen-", 1)[0][1:], "trash")
        os.rename(folder, trash)  # readers that resolved it re-resolve from here on
    _remove_made(trash)
    return True


def _collect(target: Path, keep: Path | None, known: Path | None = None) -> None:
    """Remove old generations of ours no reader holds, and what killed writers left (the writer lock is held).

    Only what is provably ours goes: a folder with our mark or a toolsearch manifest, a scratch or trash
    folder holding nothing but our layout (a killed build's of a release before the mark), a link to one
    of our generations, and `known`, the generation `target` pointed at (ours by the pointer, even if it
    lost its manifest). Anything else of a matching name is the user's and is left as it is.
    """
    for kind, path in _siblings(target):
        if kind == "gen" and keep is not None and path.name == keep.name:
            continue
        if path.is_symlink():  # the new pointer of a writer killed before it replaced the old one
            if kind == "tmp" and _points_at_a_generation(path, target.name):
                path.unlink(missing_ok=True)
            continue
        if not _made_by_us(path) and (known is None or path.name != known.name):
            _log.debug("leaving %s alone: not a folder toolsearch made", path)
            continue
        if kind == "gen":
            _retire(path)
        else:  # tmp of a killed build, trash of an interrupted removal, old of the earlier layout
            _remove_made(path)


_LEFT = re.compile(rf"^\.(?P<name>.+)\.(?:{_KINDS}|lock)$")


def _left_by_us(path: Path, name: str) -> bool:
    """Whether `path`, named like a leftover of the index `name`, is one toolsearch made."""
    if path.is_symlink():
        return _points_at_a_generation(path, name)
    return _made_by_us(path)


def _sweep(root: Path) -> None:
    """Remove what dead writers of any name left in `root`: scratch, trash, generations nothing points at, locks.

    A name whose lock a live process holds is left alone (it is writing); the kernel releases a
    killed process's lock, so what it left goes with the next build or save in the folder.
    """
    try:
        entries = os.listdir(root)
    except OSError:
        return
    found: dict[str, list[str]] = {}
    for entry in entries:
        left = _LEFT.match(entry)
        if left and _NAME.match(left.group("name")):
            found.setdefault(left.group("name"), []).append(entry)
    for name, names in found.items():
        target = root / name
        current = _generation(target)
        lock = f".{name}.lock"
        leftovers = [root / n for n in names if n != lock and root / n != current]
        # A lock file beside our pointer is a killed writer's; one beside nothing of ours is not ours to remove
        # (mcp.shared's .build.lock is one), nor are folders that only look like ours: the user's are never touched.
        if not any(_left_by_us(path, name) for path in leftovers) and not (lock in names and _is_our_pointer(target)):
            continue
        try:
            with _writer_lock(target, wait=False) as mine:
                if mine:
                    _collect(target, keep=_generation(target))
        except (OSError, StoredIndexError) as exc:  # a read-only folder: nothing to sweep there
            _log.debug("cannot sweep what writers of %s left: %s", target, exc)


def _os_reason(exc: OSError) -> str:
    """What went wrong, in the system's words (shutil.Error, from a copy of many files, lists each file's)."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        first = exc.args[0][0]
        return str(first[-1]) if isinstance(first, tuple) else str(first)
    return exc.strerror or str(exc)


def _os_advice(exc: OSError) -> str:
    """What to do about a failed write: free space only when space is what ran out."""
    if exc.errno in NO_ROOM:
        return "Free space there"
    if exc.errno in NOT_ALLOWED:
        return "Make the folder writable"
    return "Check the folder and what the message names"


def _written_by_us(target: Path) -> set[str] | None:
    """The files an existing index folder's manifest lists (any format version), or None when unreadable."""
    try:
        data = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    return {str(rel) for rel in files} if isinstance(files, dict) else None


_OUR_FILES = (TOOLS_FILE, OFFSETS_FILE, TABLE_FILE)


def _foreign_files(target: Path) -> list[str]:
    """Files in an existing index folder that toolsearch did not write (replacing it would delete them)."""
    listed = _written_by_us(target)
    foreign = []
    for path in sorted(target.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(target).as_posix()
        if rel in (MANIFEST, MADE_MARK):
            continue
        # The backend folder is the backend's own: some write there when loading (tantivy's lock file).
        ours = rel in (listed or ()) or rel in _OUR_FILES or rel.startswith(BACKEND_DIR + "/")
        if not ours:
            foreign.append(rel)
    return foreign


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_replaceable(target: Path) -> None:
    """Refuse to replace a folder that is not an index, an index holding the user's own files, or an index of a
    newer format than this toolsearch writes."""
    ours = _is_our_pointer(target)
    if target.is_symlink() and not ours:
        raise StoredIndexError(
            f"{target} is a link toolsearch did not make; refusing to replace it. Choose another folder"
        )
    current = _generation(target)
    if current is None or not current.exists():
        return
    # A generation of ours that lost its manifest is a damaged index, not the user's folder: it is replaced. A
    # plain folder is an index only when its manifest is a toolsearch one: any other `manifest.json` is the user's.
    if not ours and not current.is_dir():
        raise StoredIndexError(
            f"{target} exists and is not a toolsearch index; refusing to replace it (it is a file). Choose another "
            "folder"
        )
    if not ours and any(current.iterdir()) and not is_toolsearch_manifest(current / MANIFEST):
        # what it holds at its top (not walked: `--out ~` must not read the whole home folder to say so)
        held = sorted(p.name + ("/" if p.is_dir() else "") for p in current.iterdir())
        why = f"its {MANIFEST} is not a toolsearch manifest" if (current / MANIFEST).exists() else f"no {MANIFEST}"
        raise StoredIndexError(
            f"{target} exists and is not a toolsearch index; refusing to replace it (it holds {_shown(held)}; {why}). "
            "Choose another folder, or move its files out"
        )
    _refuse_a_newer_format(target, current)
    _refuse_to_delete_foreign_files(target, current, "replacing", "Move them out or choose another folder")


def _refuse_to_delete_foreign_files(target: Path, current: Path, doing: str, advice: str) -> None:
    """The one check before toolsearch deletes an index's folder (`current`, the generation `target` names), whether
    a build replaces it or `rm` removes it: files it did not write there (a note put into a copied folder, or into
    `indexes/NAME/` through the link) are the user's, and nothing of theirs goes without a word."""
    foreign = _foreign_files(current)
    if foreign:
        raise StoredIndexError(
            f"{target} holds files toolsearch did not write ({_shown(foreign)}); {doing} the index would delete "
            f"them. {advice}"
        )


def _refuse_a_newer_format(target: Path, current: Path) -> None:
    """An index a newer toolsearch wrote is not replaced by an older format: that toolsearch may be using it, and
    what it carries (a tuned request encoder) may exist nowhere else."""
    try:
        data = json.loads((current / MANIFEST).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return  # no readable manifest: a damaged index of ours, replaced as such
    version = data.get("version") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise StoredIndexError(
            f"{target} was built by a newer toolsearch (index format {version}; this one writes {FORMAT_VERSION}); "
            f"refusing to replace it with an older format. Upgrade toolsearch, or remove it first (toolsearch rm "
            f"{target.name} --root {target.parent}) to build it anew with this one"
        )


def _point(target: Path, generation: Path) -> None:
    """Make `target` name `generation`, atomically (an earlier-layout folder is moved aside first)."""
    if target.is_dir() and not target.is_symlink():
        if not any(target.iterdir()):
            target.rmdir()
        else:
            with (target / MANIFEST).open("rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)  # readers of the plain folder finish first
                os.rename(target, _sibling(target, "gen"))
    link = _sibling(target, "tmp")
    os.symlink(generation.name, link)
    try:
        os.replace(link, target)
    except BaseException:
        link.unlink(missing_ok=True)
        raise


def _publish(index: ToolIndex, target: Path) -> None:
    """Write a new generation and point `target` at it; the caller holds the writer lock."""
    _check_replaceable(target)
    previous = _generation(target) if _is_our_pointer(target) else None
    _collect(target, keep=previous)
    scratch = _sibling(target, "tmp")
    try:
        os.mkdir(scratch)  # mode 0o777 less the umask, like any folder the user makes
        _mark(scratch)  # first: a build killed from here on leaves a folder known as ours
        _write_generation(index, scratch)
        # A generation is known as ours by its manifest, and holds only the files the manifest lists
        with contextlib.suppress(FileNotFoundError):
            os.unlink(scratch / MADE_MARK)
        generation = _sibling(target, "gen")
        os.rename(scratch, generation)
    except OSError as exc:  # a full disk, a quota, a file too large: the system's words, and what to do
        shutil.rmtree(scratch, ignore_errors=True)
        raise StoredIndexError(
            f"cannot write the index {target.name!r} in {target.parent}: {_os_reason(exc)}; nothing was replaced. "
            f"{_os_advice(exc)} (or choose another folder) and build again"
        ) from None
    except BaseException:  # KeyboardInterrupt included: never leave a half-written index
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    try:
        _point(target, generation)
    except BaseException:
        shutil.rmtree(generation, ignore_errors=True)
        raise
    _Hold.move(index.backend, target, generation)
    _collect(target, keep=generation, known=previous)


def _write_generation(index: ToolIndex, folder: Path) -> None:
    with (folder / TOOLS_FILE).open("w", encoding="utf-8") as fh:
        for tool in index.catalog:
            row = {"fingerprint": tool.fingerprint, **tool.to_dict()}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    write_table(folder, TOOLS_FILE, index.catalog, index.catalog.hash)  # what a lazy load reads instead of every tool
    (folder / BACKEND_DIR).mkdir()
    index.backend.save(folder / BACKEND_DIR)
    manifest = Manifest(
        version=FORMAT_VERSION,
        backend=index.backend_name,
        options=index.backend.describe(),
        catalog_hash=index.catalog.hash,
        key=index.key,
        tool_count=len(index.catalog),
        namespaces=index.catalog.namespaces,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        files=_file_records(folder),
        text_rules=RULES_VERSION,
    )
    (folder / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")  # last: marks it complete


def save_index(index: ToolIndex, folder: Path, *, lock_wait: float | None = None) -> Path:
    """Write a new generation of `folder` (tools, backend files, manifest last) and point `folder` at it (`lock_wait`:
    see `_writer_lock`)."""
    folder = Path(folder)
    _sweep(folder.parent)
    with _writer_lock(folder, lock_wait=lock_wait):
        _publish(index, folder)
    return folder


# --- reading ---------------------------------------------------------------------------------------


def read_manifest(folder: Path) -> Manifest:
    """Read and check the manifest of the generation `folder` names; every problem says what to do."""
    with _reading(Path(folder)) as (generation, raw):
        return _parse_manifest(generation, raw)


def _parse_manifest(folder: Path, raw: bytes) -> Manifest:
    path = folder / MANIFEST
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path} is corrupt ({exc}); rebuild the index") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise IndexFormatError(f"{path} is not a toolsearch manifest; rebuild the index")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise IndexFormatError(f"{path} has no format version; rebuild the index")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{folder} was built by a newer toolsearch (index format {version}, this one reads "
            f"{FORMAT_VERSION}); upgrade toolsearch (or remove the index with `toolsearch rm` and build it anew)"
        )
    if version < OLDEST_READ:
        raise IndexFormatError(
            f"{folder} uses the old index format {version}, whose manifest carries no checksum of its own; "
            "rebuild it with `toolsearch build` (an index of the same name is rebuilt automatically)"
        )
    try:
        fields = {f: data[f] for f in Manifest.__dataclass_fields__ if f != "text_rules"}
        fields["text_rules"] = data.get("text_rules", 1)
    except KeyError as exc:
        raise IndexFormatError(f"{path} lacks the field {exc.args[0]!r}; rebuild the index") from None
    kinds: dict[str, type] = {"backend": str, "options": dict, "catalog_hash": str, "key": str, "tool_count": int,
                              "namespaces": list, "created_at": str, "text_rules": int}
    for name, kind in kinds.items():
        if not isinstance(fields[name], kind) or isinstance(fields[name], bool):
            raise IndexFormatError(f"{path}: the field {name!r} is not a {kind.__name__}; rebuild the index")
    files = fields["files"]
    if not isinstance(files, dict) or TOOLS_FILE not in files or not all(
        isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get(_FILE_DIGEST[version]), str)
        for r in files.values()
    ) or any(not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/") for rel in files):
        raise IndexFormatError(f"{path}: its list of files is malformed; rebuild the index")
    # After the shape checks (their messages are more precise), before any field is used.
    if data.get("digest") != manifest_digest(data):
        raise IndexFormatError(
            f"{path} does not match its own checksum (edited or corrupt: its options, key or file list "
            f"cannot be trusted); {_REBUILD}"
        )
    manifest = Manifest(**fields)
    if index_key(manifest.catalog_hash, manifest.backend, manifest.options) != manifest.key:
        raise IndexFormatError(f"{path}: its key does not match its catalog, backend and options; {_REBUILD}")
    return manifest


def read_index(folder: Path, **options: Any) -> tuple[Catalog, Backend]:
    """The catalog and loaded backend of a saved index (`ToolIndex.load`), after checking its manifest, files,
    catalog hash and key.

    The pointer is resolved once: everything comes from one generation, whatever builds land
    meanwhile. `options` reach the backend's loader (for example an `embedder` for the vector
    backend); a loader raises IndexFormatError when they contradict what the index was built with.
    The backend holds that generation for as long as it lives (`_Hold`).
    """
    held: list[int] = []
    try:
        generation, catalog, backend = _read_held(Path(folder), held, options)
    except BaseException:
        _close_all(held)
        raise
    if held:
        _Hold.attach(backend, generation, held)
    return catalog, backend


class _Hold:
    """The generation a loaded backend came from, kept for as long as the backend lives.

    An open index reads files of its generation again after loading: bm25 copies its tantivy
    segments when it is first changed (to a private folder) and when it is saved. A writer
    removes only generations whose lock it can take, so the generation stays until the backend
    is let go, and the next writer of the name removes it. When the index saves itself under the
    name it was loaded from, the hold moves to the new generation, for a backend that can read
    its files from there (`saved_in`), and the old one goes with that save.
    """

    def __init__(self, generation: Path, fds: list[int]) -> None:
        self.generation = generation
        self.fds = fds

    @classmethod
    def attach(cls, backend: Any, generation: Path, fds: list[int]) -> None:
        hold = cls(generation, fds)
        try:
            _HOLDS[backend] = hold
        except TypeError:  # a backend without weak references: its end cannot be seen, so it holds nothing
            hold.release()  # (a descriptor per load, never closed, would run a long process out of them)
            return
        weakref.finalize(backend, hold.release)

    def release(self) -> None:
        _close_all(self.fds)
        self.fds = []

    @classmethod
    def move(cls, backend: Any, target: Path, generation: Path) -> None:
        """After `backend` was saved as `generation` of `target`: hold that instead of its generation of `target`."""
        hold = _HOLDS.get(backend)
        moved = getattr(backend, "saved_in", None)
        if hold is None or not callable(moved) or not _same_name(hold.generation, target):
            return
        with (generation / MANIFEST).open("rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            fd = os.dup(fh.fileno())
        try:
            moved(generation / BACKEND_DIR)
        except BaseException:
            os.close(fd)
            raise
        old, hold.fds, hold.generation = hold.fds, [fd], generation
        _close_all(old)


_HOLDS: weakref.WeakKeyDictionary[Any, _Hold] = weakref.WeakKeyDictionary()


def _same_name(generation: Path, target: Path) -> bool:
    """Whether `generation` is a generation of the index `target` names."""
    if not generation.name.startswith(f".{target.name}.gen-"):
        return False
    try:
        return os.path.samefile(generation.parent, target.parent)
    except OSError:
        return False


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _read_held(folder: Path, held: list[int], options: dict[str, Any]) -> tuple[Path, Catalog, Backend]:
    with _reading(folder, held) as (generation, raw):
        manifest = _parse_manifest(generation, raw)
        _verify_digests(generation, manifest)  # the fields are checked below, against the catalog read once
        catalog: Catalog
        recheck = manifest.text_rules < RULES_VERSION
        if recheck:
            _log.warning(
                "%s was built under the rules for tool text of an older toolsearch (version %d, this one applies "
                "%d): each tool is checked and cleaned again as it is read; rebuild the index to skip that",
                folder, manifest.text_rules, RULES_VERSION,
            )
        if OFFSETS_FILE in manifest.files and TABLE_FILE in manifest.files:  # checked files: tools parsed when needed
            catalog = LazyCatalog.open(generation, TOOLS_FILE, manifest.catalog_hash, recheck=recheck)
            tools: Sequence[Tool] = catalog.stored
            _check_fields(generation, manifest, len(catalog), catalog.namespaces, catalog.hash)
        else:
            catalog = Catalog(_read_stored_tools(generation / TOOLS_FILE))
            # of the tools as stored, before any recheck
            _check_fields(generation, manifest, len(catalog), catalog.namespaces, catalog.hash)
            if recheck:
                catalog = Catalog([restore({"fingerprint": t.fingerprint, **t.to_dict()}, f"{generation}: tool "
                                           f"{t.name!r}", recheck=True) for t in catalog])
                if catalog.hash != manifest.catalog_hash:  # the index's key names the tools as they were
                    raise IndexFormatError(
                        f"{generation}: stored tools hold text this toolsearch's rules for tool text clean "
                        f"(rules version {manifest.text_rules} then, {RULES_VERSION} now); {_REBUILD}"
                    )
            tools = list(catalog)
        backend = _load_backend(generation, manifest, tools, options)
    # caller options may legitimately reshape the backend
    if not options and index_key(catalog.hash, backend.name, backend.describe()) != manifest.key:
        raise IndexFormatError(f"{generation}: the loaded backend does not match the manifest's key; {_REBUILD}")
    return generation, catalog, backend


_BACKEND_MEMBERS = ("name", "add", "remove", "search", "save", "describe")


def made_backend(name: str, made: object) -> Backend:
    """What the backend spec called `name` created or loaded, once checked against the Backend Protocol.

    A plug-in's spec that returns something else fails here, with a PluginError naming its entry point
    and distribution, rather than later as an AttributeError naming nothing.
    """
    if isinstance(made, Backend):  # runtime_checkable: every member is present
        return made
    lacking = [member for member in _BACKEND_MEMBERS if not hasattr(made, member)]
    which = f"; it has no {', '.join(lacking)}" if len(lacking) < len(_BACKEND_MEMBERS) else ""
    expected = f"a toolsearch.backends.Backend ({', '.join(_BACKEND_MEMBERS)}){which}"
    raise BACKENDS.wrong_product(name, made, expected)


def _raise_for_carried_model(folder: Path) -> None:
    """After a backend failed to load: when the request encoder the index carries is what cannot run (its files, not
    a private copy's, checked in place), say so, naming the index, instead of the loader's words."""
    from .model_file import carried_model, model_folder_problem

    carried = carried_model(folder)
    problem = model_folder_problem(carried) if carried is not None else None
    if problem is not None:
        raise IndexFormatError(
            f"{folder}: the request encoder this index carries cannot be read ({problem}); rebuild the index with a "
            "good model folder (toolsearch build FILE --model DIR --rebuild), exporting that folder again from the "
            "index it came from if it is damaged too (toolsearch model export INDEX --out DIR)"
        ) from None


def _load_backend(folder: Path, manifest: Manifest, tools: Sequence[Tool], options: dict[str, Any]) -> Any:
    spec = get_backend_spec(manifest.backend)
    merged = {**manifest.options, **options}
    try:
        loaded = spec.load(folder / BACKEND_DIR, tools, **merged)
    except ToolSearchError:
        if os.access(folder / BACKEND_DIR, os.W_OK):
            _raise_for_carried_model(folder)
            raise
    except Exception as exc:  # a backend's own error types never reach the caller
        if os.access(folder / BACKEND_DIR, os.W_OK):
            _raise_for_carried_model(folder)
            raise IndexFormatError(
                f"{folder}: the {manifest.backend} backend files cannot be read ({named_error(exc)}); "
                "rebuild the index"
            ) from None
    else:
        # checked outside the try: a wrong product is the plug-in's fault, not a read-only folder's
        return made_backend(spec.name, loaded)
    # A read-only folder (the files were checked above): open a private copy of the backend files.
    copy = new_scratch("readonly-")
    copied = copy.path / BACKEND_DIR
    try:
        copy_without_locks(folder / BACKEND_DIR, copied)
    except OSError as exc:
        copy.remove()
        raise StoredIndexError(_uncopied(folder, copy.path.parent, exc)) from None
    try:
        backend = made_backend(spec.name, spec.load(copied, tools, **merged))
    except ToolSearchError as exc:  # a PluginError for a wrong product included
        copy.remove()
        _raise_for_carried_model(folder)
        # Name the index that was opened, not the private copy the user never made (its files are the index's).
        exc.args = tuple(a.replace(str(copied), str(folder / BACKEND_DIR)) if isinstance(a, str) else a
                         for a in exc.args)
        raise
    except Exception as exc:
        copy.remove()
        _raise_for_carried_model(folder)
        said = named_error(exc).replace(str(copied), str(folder / BACKEND_DIR))
        raise IndexFormatError(
            f"{folder}: the {manifest.backend} backend files cannot be read from this read-only folder, nor "
            f"from a private copy ({said}); rebuild the index"
        ) from None
    copy.goes_with(backend)
    return backend


def _uncopied(folder: Path, temporary: Path, exc: OSError) -> str:
    """Why the private copy of a read-only index could not be made, and what helps (never a rebuild: the index's
    files were checked whole before)."""
    said = f"{folder}: its backend folder is read-only, so toolsearch opens a private copy of it (in {temporary}), "
    if exc.errno in (errno.EACCES, errno.EPERM):  # (not NOT_ALLOWED: a read-only TMPDIR, EROFS, is said below)
        return f"{said}but this user cannot read {exc.filename or 'its files'}; {MAKE_READABLE}"
    if exc.errno in NO_ROOM:
        return (f"{said}and that folder has no room ({_os_reason(exc)}); free space there, or set TMPDIR to another "
                "folder")
    return f"{said}and the copy failed ({_os_reason(exc)}); check what it names, or set TMPDIR to another folder"
