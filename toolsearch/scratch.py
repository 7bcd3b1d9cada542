"""Private scratch folders, under one folder per process that age-based cleaners of the temporary folder skip.

An index keeps some of its files in the system's temporary folder for as long as it lives: a bm25
index's writable tantivy folder, the private copy of a carried request encoder, the copy of an index
opened from a read-only mount, a tuned encoder not yet saved. A long-running gateway may not touch
them for days, and age-based cleaners (systemd-tmpfiles ages /tmp by 10 days on most distributions)
then remove them under it: searches still answer from the open memory maps, but the next change or
save fails. systemd-tmpfiles skips a folder on which any process holds a BSD lock (`flock`), with
everything below it, so each process makes one such folder (`toolsearch-<random>` in `$TMPDIR`),
holds a shared lock on it for its life, and makes its scratch folders inside. One descriptor per
process, not one per folder; the lock ends with the process, even one that crashes, and the cleaner
then ages the folder as before. Cleaners that do not honour the lock (tmpreaper, macOS's daily
`periodic`) are not stopped by it: point `TMPDIR` at a folder they leave alone.

A forked child inherits the parent's folders; only the process that made a folder removes it, so a
child that exits normally (running its exit handlers) leaves the parent's scratch in place.

`tempfile` gives the folders; the lock and the per-process folder are what this module adds, with what filling
them takes: a copy of an index's files without their lock files, and what a failed write or read of them means.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Scratch", "new_scratch", "copy_without_locks", "NO_ROOM", "NOT_ALLOWED", "MAKE_READABLE"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scratch:
    """A scratch folder and the process that made it (the only one that removes it)."""

    path: Path
    pid: int

    def remove(self) -> None:
        if os.getpid() == self.pid:
            shutil.rmtree(self.path, ignore_errors=True)

    def goes_with(self, owner: object) -> Path:
        """Remove the folder when `owner` is let go (or when the process ends); the folder's path."""
        try:
            weakref.finalize(owner, self.remove)
        except TypeError:  # an owner without weak references: its end cannot be seen, so the folder goes at exit
            atexit.register(self.remove)
        return self.path


_lock = threading.Lock()
_root: Scratch | None = None
_descriptor = -1  # the open folder the lock is held on


def _reset_after_fork() -> None:
    global _lock, _root, _descriptor
    _lock = threading.Lock()  # another thread may have held it at the fork
    _root, _descriptor = None, -1  # the child makes its own; the parent's goes when the parent ends


os.register_at_fork(after_in_child=_reset_after_fork)


def _process_folder() -> Path:
    """This process's locked folder in the temporary folder, made on first use."""
    global _root, _descriptor
    with _lock:
        if _root is None or not _root.path.is_dir():  # first use, or removed by a cleaner that ignores the lock
            if _descriptor >= 0:
                os.close(_descriptor)
            path = Path(tempfile.mkdtemp(prefix="toolsearch-"))
            _descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # held open: the lock lives with it
            try:
                fcntl.flock(_descriptor, fcntl.LOCK_SH)
            except OSError as exc:  # a file system without BSD locks: the folder still works, unprotected
                _log.warning("%s: cannot lock it against temporary-file cleaners (%s); set TMPDIR to a folder they "
                             "leave alone", path, exc)
            _root = Scratch(path, os.getpid())
            atexit.register(_root.remove)
        return _root.path


def new_scratch(prefix: str, within: Path | None = None) -> Scratch:
    """A new empty folder named `prefix...`: in this process's locked folder, or in `within` when given."""
    return Scratch(Path(tempfile.mkdtemp(prefix=prefix, dir=within or _process_folder())), os.getpid())


def copy_without_locks(source: Path, target: Path) -> None:
    """Copy a backend's folder without its lock files (they belong to the process that made them).

    The copies get the modes of any file this process writes (0o666 and 0o777 less the umask), never the source's:
    the source is our private scratch, made 0700 (saved with that mode, an index could be read by its builder
    alone, not by the service user of an image it ships in), or an index installed read-only (`chmod -R a-w`, as a
    package or a Nix store gives: a private copy with its modes could not be written, nor locked by tantivy)."""
    target.mkdir(parents=True, exist_ok=True)  # (an existing one is our scratch: its mode stays private)
    for entry in source.iterdir():
        if entry.name.endswith(".lock"):
            continue
        if entry.is_dir():
            copy_without_locks(entry, target / entry.name)
        else:
            shutil.copyfile(entry, target / entry.name)


# What a failed write's errno says: the folder ran out of room (free space there), or this user may not write it
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NOT_ALLOWED = (errno.EACCES, errno.EPERM, errno.EROFS)
# What helps when this user may not read an index's files: nothing in them is wrong, so never a rebuild
MAKE_READABLE = ("make the index's files readable (chmod -R a+rX on the index folder), or open the index as the user "
                 "who built it")
