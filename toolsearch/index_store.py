"""IndexStore: named indexes under one root folder, each built once and reused by its content.

The files, their checks and the pointer to the current generation are `store`'s (it owns the format and
knows nothing of ToolIndex); this module names indexes in a folder and hands back ToolIndexes.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._errors import (
    IndexFormatError,
    IndexNotFoundError,
    InvalidArgumentError,
    InvalidIndexNameError,
    StoredIndexError,
    check_seconds,
    wrong_type,
)
from ._untrusted import RULES_VERSION
from .backends import get_backend_spec
from .catalog import Catalog
from .index import ToolIndex
from .store import (  # the pointer's writer side
    _NAME,
    MANIFEST,
    Manifest,
    _check_replaceable,
    _collect,
    _generation,
    _is_our_pointer,
    _publish,
    _refuse_to_delete_foreign_files,
    _sweep,
    _writer_lock,
    default_root,
    index_key,
    is_toolsearch_manifest,
    made_backend,
    read_manifest,
    save_index,
)
from .tools import Tool

__all__ = ["IndexStore"]

_log = logging.getLogger(__name__)


class IndexStore:
    """Named indexes under one root folder (default `./indexes`); names cannot escape it.

    Writers of one name (`build`, `remove`, `save`) take turns. One that waits says whom for in the log, and gives up
    with StoredIndexError on a holder that has shown no sign of life for `lock_wait` seconds (default
    `toolsearch.store.LOCK_WAIT`, 60; never less than 3): one stopped (Ctrl-Z), where a busy build beats on its lock
    every half second (so does one hung in a call that never returns: end it).
    """

    def __init__(self, root: str | Path | None = None, *, lock_wait: float | None = None) -> None:
        if root is not None and not isinstance(root, (str, os.PathLike)):
            raise wrong_type("IndexStore: root", root, "a folder (str or Path), or None for the default")
        if lock_wait is not None:
            check_seconds("IndexStore: lock_wait", lock_wait, InvalidArgumentError)
        self.root = Path(root) if root is not None else default_root()
        self.lock_wait = lock_wait

    def path(self, name: str) -> Path:
        """The folder of a named index (its pointer), after checking the name."""
        if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
            raise InvalidIndexNameError(
                f"invalid index name {name!r}: use 1 to 128 letters, digits, '.', '_' and '-', starting with a "
                "letter or digit (no path separators, no '..')"
            )
        return self.root / name

    def names(self) -> list[str]:
        """The indexes in the root: every folder with a toolsearch manifest, and every pointer toolsearch made,
        whatever state its generation is in (one that lost its manifest, or was copied without it, is an index to
        repair or remove, not nothing). A folder with some other `manifest.json` (a web app's) is not an index."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir()
            if not p.name.startswith(".")
            and (_is_our_pointer(p) or (p.is_dir() and is_toolsearch_manifest(p / MANIFEST)))
        )

    def manifest(self, name: str) -> Manifest:
        return read_manifest(self.path(name))

    def open(self, name: str, **options: Any) -> ToolIndex:
        return ToolIndex.load(self.path(name), **options)

    def save(self, index: ToolIndex, name: str | None = None) -> str:
        name = name or f"{index.backend_name}-{index.key[:12]}"
        save_index(index, self.path(name), lock_wait=self.lock_wait)
        return name

    def remove(self, name: str) -> Path | None:
        """Remove the index `name`: its pointer, every generation of it (a damaged index of ours goes too) and its
        usage log (`toolsearch.usage.usage_path`); returns that log's path where there was one, else None.

        The log goes with the index: it may keep request text, and an index built later under this name would
        read it as its own earlier catalogs' (tune, eval --usage). A folder of that name that is not an index
        toolsearch wrote (a `manifest.json` of another kind) is refused with StoredIndexError and left as it is, and
        so is an index whose folder holds files toolsearch did not write there (`build --rebuild` refuses it too).
        """
        from .usage import usage_path

        path = self.path(name)
        pointer = _is_our_pointer(path)
        if not pointer and not (path / MANIFEST).exists():
            raise IndexNotFoundError(f"no index named {name!r} in {self.root}; see `toolsearch list`")
        if not pointer and not is_toolsearch_manifest(path / MANIFEST):
            raise StoredIndexError(
                f"{path} is not a toolsearch index (its {MANIFEST} is not a toolsearch manifest); refusing to remove "
                "it. Delete it yourself if it should go"
            )
        with _writer_lock(path, lock_wait=self.lock_wait):
            current = _generation(path)
            if (pointer or not path.is_symlink()) and current is not None and current.is_dir():
                # what goes is a folder (a link of the user's to an index elsewhere is only unlinked)
                _refuse_to_delete_foreign_files(
                    path, current, "removing", f"Move them out (or delete them yourself), then remove {name!r} again"
                )
            if path.is_symlink():
                path.unlink()  # readers that resolved it keep their generation until they finish
            else:
                shutil.rmtree(path)
            # its generation is ours by the pointer, even one that lost its manifest
            _collect(path, keep=None, known=current if pointer else None)
            log = usage_path(path)
            try:
                log.unlink()
            except FileNotFoundError:
                return None
            return log

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
        that fails is rebuilt (logged as a warning). A stored index that carries a request encoder of
        its own (`toolsearch tune`) is not built over: StoredIndexError says how to keep the encoder.
        `rebuild` builds anew in any case. Builds of
        one name take turns; a build that finds another one saved this name while it waited
        reuses that index when it has the same content, and otherwise raises StoredIndexError
        (the other build won; nothing is replaced silently).
        """
        if name is not None:
            self.path(name)  # a bad name fails before any tool is checked or backend created
        spec = get_backend_spec(backend)
        catalog = tools if isinstance(tools, Catalog) else Catalog(tools)
        probe = made_backend(spec.name, spec.create(**options))  # a plug-in's wrong product named, as in build
        key = index_key(catalog.hash, probe.name, probe.describe())
        name = name or f"{probe.name}-{key[:12]}"
        path = self.path(name)
        _sweep(self.root)  # also when this build reuses its index and writes nothing
        started_from = _generation(path)
        with _writer_lock(path, lock_wait=self.lock_wait):
            now = _generation(path)
            if now != started_from and now is not None:
                try:
                    stored = read_manifest(path)
                except IndexFormatError:
                    stored = None
                if stored is None or stored.key != key:
                    theirs = stored.catalog_hash[:12] if stored else "?"
                    raise StoredIndexError(
                        f"another build saved the index {name!r} (catalog {theirs})"
                        f" while this one (catalog {catalog.hash[:12]}) waited; nothing was replaced. Build again "
                        "to replace it"
                    )
                return name, ToolIndex.load(path, **options), True
            if (path / MANIFEST).exists() and not rebuild:
                try:
                    stored = read_manifest(path)
                    # one built under older rules for tool text is rebuilt, not reused: reused, it would be checked
                    # again (and warn) on every load, and `build` was what the warning asked for
                    if stored.key == key and stored.text_rules >= RULES_VERSION:
                        return name, ToolIndex.load(path, **options), True
                except IndexFormatError as exc:  # a broken or old index of this name is replaced below
                    # ... but not a folder that is no index of ours, nor one a newer toolsearch wrote: refused, and
                    # said so before any warning claims it is rebuilt
                    _check_replaceable(path)
                    _refuse_to_drop_the_encoder_of_a_damaged_index(path, name, exc)
                    _log.warning("index %r failed its checks (%s); rebuilding it", name, exc)
                else:
                    _refuse_to_drop_an_encoder(path, name, probe.describe().get("model"))
            probe.add(list(catalog))
            index = ToolIndex(catalog, probe)
            _publish(index, path)
        return name, index, False


def _refuse_to_drop_the_encoder_of_a_damaged_index(path: Path, name: str, problem: IndexFormatError) -> None:
    """An index that fails its checks but still holds a request encoder of its own (found from its files: its manifest
    may be what fails) is not built over either: the encoder may exist nowhere else."""
    from .model_file import carried_model

    carried = carried_model(path)
    if carried is not None:
        raise StoredIndexError(
            f"the index {name!r} ({path}) fails its checks ({problem}), and it carries a request encoder of its own "
            f"(one `toolsearch tune` made), which building over it would lose; to keep it, copy its folder "
            f"({carried}) elsewhere (cp -rL) and build with --model COPY, or build with --rebuild (rebuild=True) to "
            "replace the index and its encoder"
        )


def _refuse_to_drop_an_encoder(path: Path, name: str, model: object) -> None:
    """Refuse to build over an index that carries its own request encoder (one `toolsearch tune` made): it
    may exist nowhere else, and the new index would not carry it. A build with that same encoder (`--model DIR`
    of its export: the model's id names its content) keeps it; `rebuild` replaces it all the same."""
    from .model_file import carried_model

    if carried_model(path) is not None and read_manifest(path).model != model:
        raise StoredIndexError(
            f"the index {name!r} ({path}) carries a request encoder of its own (one `toolsearch tune` made), which "
            f"building over it would lose; keep it with `toolsearch model export {name} --out DIR` (then build with "
            "--model DIR to use it), or build with --rebuild (rebuild=True) to replace the index and its encoder"
        )
