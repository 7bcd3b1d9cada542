"""Writing a file a command was asked to write: streams in place, files whole or not at all, none replaced unasked.

The rules of `demo --save-catalog FILE` and `usage export INDEX FILE`, in one place. A stream (/dev/stdout, a fifo, a
shell's `>(cmd)`, or whatever a descriptor's name such as /dev/fd/N leads to: the shell opened it) is written in
place: there is nothing of ours to replace. A regular file (or a link to one: its target, the link kept) is written
beside itself and moved over it, so an interrupted write leaves the old file whole, and an existing one is replaced
only with `force` (or where `replaceable` says nothing would be lost). The standard library has the pieces
(`os.open`, `os.replace`) but not these rules.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from ._errors import CommandError

__all__ = ["write_output"]


def write_output(
    path: Path,
    text: str,
    *,
    what: str,
    force: bool = False,
    replaceable: Callable[[Path], bool] | None = None,
    private: bool = False,
) -> bool:
    """Write `text` to `path` by the rules above; `what` names the option in messages (`usage export`). True where
    `path` was a stream (the caller's own messages then belong on stderr, not mixed into it).

    `private`: a new file is the owner's alone (it may hold request text); a replaced one keeps its permissions.
    """
    if path.is_dir():
        raise CommandError(f"{what}: {path} is a folder; give the name of a file")
    if (path.exists() and not path.is_file()) or _names_a_descriptor(path):
        try:
            with path.open("w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CommandError(f"{what}: cannot write {path}: {exc.strerror or exc}") from None
        return True
    # A link is written through: its target is replaced, and the link stays as the user made it.
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if target.exists() and not force and not (replaceable is not None and replaceable(target)):
        raise CommandError(
            f"{what}: {path} exists; refusing to overwrite it. Give another file name, or add --force to replace it"
        )
    _write_beside(path, target, text, what=what, private=private)
    return False


def _names_a_descriptor(path: Path) -> bool:
    """Whether `path` is, or links through, the name of an open file descriptor (/dev/stdout, /dev/fd/N,
    /proc/self/fd/N): it names whatever the shell opened there, a regular file of a `> out.json` too."""
    seen = 0
    current = os.path.abspath(path)
    while seen < 40 and os.path.islink(current):  # (the kernel's own bound on a chain of links)
        if re.fullmatch(r"/(?:dev|proc/[^/]+)/fd", os.path.dirname(current)):
            return True
        current = os.path.join(os.path.dirname(current), os.readlink(current))
        seen += 1
    return False


def _write_beside(path: Path, target: Path, text: str, *, what: str, private: bool) -> None:
    """Write `text` to a new file beside `target` and move it into place (`path` is what the user named)."""
    folder = target.parent
    if not folder.is_dir():
        missing = "is not a folder" if folder.exists() else "does not exist"
        raise CommandError(
            f"{what}: cannot write {path}: its folder {folder} {missing}; create it or give another file"
        )
    try:
        kept: int | None = stat.S_IMODE(os.stat(target).st_mode)  # a replaced file keeps its permissions
    except OSError:
        kept = None
    tmp = folder / f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        # a new file: the owner's alone where it may hold request text, else as the umask says
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
    except OSError as exc:
        raise CommandError(f"{what}: cannot write {path} (a new file in {folder}): {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if kept is not None:
            os.chmod(tmp, kept)
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise CommandError(f"{what}: cannot write {path}: {exc.strerror or exc}") from None
        raise
