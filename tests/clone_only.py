"""The test session reads only the clone, its venv, the temp folder and the system's folders: nothing beside the clone.

A file that happens to sit next to this checkout on one machine (a data set, a config) must never be what makes a
test pass, since a fresh clone has nothing beside it. `install()` adds an audit hook (PEP 578) to this process that
refuses every `open`, `os.listdir` and `os.scandir` outside the allowed folders (those, and the few per-user folders
a library keeps its own state in: `library_dirs`), and every subprocess whose
arguments or working folder name a path beside the clone. A refusal raises PermissionError in the code that tried,
and is also recorded: code that catches OSError (a fallback, a probe) cannot hide it, because the session fails on
any recorded refusal (tests/conftest.py). The hook runs in this process only; the processes tests start are not
changed, but the paths they are handed are checked when they start.
"""

from __future__ import annotations

import os
import site
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

# The system's own folders: interpreters, shared libraries, certificates, /proc and /dev. Not $HOME: a clone usually
# sits in it, and what sits beside the clone is exactly what must not be read.
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/run",
               "/var/lib", "/var/cache", "/var/tmp", "/tmp", "/opt", "/snap", "/nix")
AUDITED = {"open", "os.listdir", "os.scandir"}


def library_dirs() -> list[str]:
    """Per-user folders and files a library keeps its own state in, looked for on any machine: matplotlib's config
    and font list, and the font folders it scans; the Anthropic SDK's config folder (a client reads its profile
    pointer, `active_config`, whenever it is made); and ~/.pdbrc, which the standard library's doctest reads through
    pdb for every docstring example. Named one by one: the rest of $HOME (a model hub's cache, say) is not
    something a fresh machine has."""
    home = Path.home()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    anthropic = Path(os.environ.get("ANTHROPIC_CONFIG_DIR") or home / ".config" / "anthropic")
    named = (cache / "matplotlib", config / "matplotlib", data / "fonts", home / ".fonts", anthropic, home / ".pdbrc")
    return [str(p) for p in named]


class OutsideTheClone(PermissionError):
    """A read the test session refuses: the path lies outside the clone, its venv, temp and system folders."""


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


class CloneOnly:
    """The allowed folders, the check, and the refusals recorded so far."""

    def __init__(self, clone: Path, extra: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.clone = _real(clone)
        venv = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *site.getsitepackages()]
        temp = [tempfile.gettempdir(), os.environ.get("TMPDIR") or tempfile.gettempdir()]
        roots = {self.clone, *map(_real, venv), *map(_real, temp), *map(_real, library_dirs()), *map(_real, extra)}
        roots |= {d for d in SYSTEM_DIRS if os.path.isdir(d)} | {_real(d) for d in SYSTEM_DIRS if os.path.isdir(d)}
        self.roots = tuple(sorted(roots))
        # What is beside the clone: its parent's other entries, refused even where an allowed folder holds them (a
        # clone in /tmp/work/ must not read /tmp/work/data). Not when the parent is / or the temp folder itself.
        parent = os.path.dirname(self.clone)
        temp_roots = {_real(t) for t in temp}
        self.beside = parent if parent not in ("", os.sep) and parent not in temp_roots else None
        # allowed folders inside that parent (the clone, a venv or temp folder made beside it) stay allowed
        self.beside_allowed = tuple(r for r in self.roots if self.beside and _under(r, (self.beside,)))
        self.refused: list[str] = []
        self._lock = threading.Lock()

    def allows(self, path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> bool:
        real = _real(os.fsdecode(path))
        if self.beside is not None and _under(real, (self.beside,)):
            return _under(real, self.beside_allowed)
        return _under(real, self.roots)

    def is_beside(self, text: str) -> bool:
        """Whether an absolute path lies beside the clone (in its parent, outside the clone and allowed folders).

        Subprocess arguments are checked against this only: an argument is not always a path (`--path /mcp`)."""
        if self.beside is None or not os.path.isabs(text):
            return False
        real = _real(text)
        return _under(real, (self.beside,)) and not _under(real, self.beside_allowed)

    def refuse(self, what: str) -> None:
        with self._lock:
            self.refused.append(what)
        raise OutsideTheClone(
            f"{what}: the test session reads only the clone ({self.clone}), its venv, the temp folder and system "
            "folders; a fresh clone has nothing beside it. Make the data in the test, commit it under tests/data, "
            "or build it from a package the project installs (tests/clone_only.py)"
        )

    def take_refusals(self) -> list[str]:
        """The refusals recorded so far, cleared (for a test that provokes one on purpose)."""
        with self._lock:
            taken, self.refused[:] = list(self.refused), []
        return taken

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        if event in AUDITED:
            path = args[0] if args else None
            if event != "open" and path is None:
                path = "."  # os.listdir() / os.scandir() without an argument: the working folder
            if isinstance(path, (str, bytes, os.PathLike)) and not self.allows(path):
                self.refuse(f"{event} {os.fsdecode(path)!r}")
        elif event == "subprocess.Popen":
            _executable, argv, cwd, _env = args
            named = [os.fsdecode(cwd)] if isinstance(cwd, (str, bytes, os.PathLike)) else []
            if isinstance(argv, (str, bytes)):
                argv = [argv]
            for arg in argv if isinstance(argv, Iterable) else ():
                if isinstance(arg, (str, bytes, os.PathLike)):
                    text = os.fsdecode(arg)
                    named += [text, *(part for part in text.split("=")[1:2])]  # --flag=/path too
            for text in named:
                if self.is_beside(text):
                    self.refuse(f"a subprocess handed {text!r}")


_ACTIVE: CloneOnly | None = None


def install(clone: Path, extra: Iterable[str | os.PathLike[str]] = ()) -> CloneOnly:
    """Add the audit hook to this process once (an audit hook cannot be removed); returns the active checker."""
    global _ACTIVE
    if _ACTIVE is None:
        checker = CloneOnly(clone, extra)
        sys.addaudithook(checker.hook)
        _ACTIVE = checker
    return _ACTIVE


def active() -> CloneOnly | None:
    return _ACTIVE
