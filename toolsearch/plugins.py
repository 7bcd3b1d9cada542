"""The one plug-in registry: named objects found by entry point, built-ins declared the same way, loaded on first use.

Five registries use it, one per entry-point group:

    toolsearch.backends        name -> a BackendSpec                  (toolsearch.backends)
    toolsearch.embedders       name -> a factory () -> Embedder       (toolsearch.embeddings)
    toolsearch.session_stores  URL scheme -> a SessionStoreSpec, or a factory (url, *, ttl_seconds=None,
                               **options) -> SessionStore             (toolsearch.stores)
    toolsearch.usage_stores    URL scheme -> a factory (url, *, path=None, **options) -> UsageStore
                                                                      (toolsearch.stores)
    toolsearch.wire_formats    name -> a WireFormat                   (toolsearch.providers.registry)

A built-in is an entry point too: the registry holds it as `(name, "module:attr")`, exactly what
pyproject.toml declares for the installed package, and loads it through the same code as a plug-in
(so a source checkout without installed metadata works, and tests check that both lists agree).
Nothing is imported until its name is asked for; the installed entry points are read once per
process, on the first lookup. Precedence: objects registered in code (`register`), then built-ins,
then plug-ins; a plug-in that reuses a built-in's name (or another plug-in's) is ignored with a
`PluginWarning`. Code registering a built-in's name must say `replace=True` (its author knows the
built-ins); code registering an installed plug-in's name always wins, with a `PluginWarning` naming
the entry point it shadows (its author cannot know what a user installs, and the rule must not
depend on whether something looked the plug-in up first).
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._errors import PluginError as PluginError
from ._errors import PluginWarning as PluginWarning
from ._errors import ToolSearchError, named_error

__all__ = [
    "PluginEntry",
    "PluginRegistry",
    "GROUPS",
    "rescan",
    "named_instance",
    "callable_of",
]

T = TypeVar("T")

GROUPS = (
    "toolsearch.backends",
    "toolsearch.embedders",
    "toolsearch.session_stores",
    "toolsearch.usage_stores",
    "toolsearch.wire_formats",
)
_OWN_DISTRIBUTION = "toolsearch"
_BUILT_IN = f"{_OWN_DISTRIBUTION} (built in)"


@dataclass(frozen=True, slots=True)
class PluginEntry:
    """Where a name comes from: an entry point's name, its `module:attr` value and its distribution."""

    name: str
    value: str
    distribution: str = _BUILT_IN

    def describe(self, group: str) -> str:
        return f"entry point {self.name} = {self.value!r} in group {group!r} of {self.distribution}"

    @property
    def built_in(self) -> bool:
        """True for toolsearch's own entry points (a plug-in's come from another distribution)."""
        return self.distribution == _BUILT_IN


_INSTALLED_LOCK = threading.Lock()
_INSTALLED: dict[str, list[PluginEntry]] | None = None
_GENERATION = 0  # bumped by rescan(): each registry then forgets the plug-ins it found and loaded


def _installed(group: str) -> tuple[list[PluginEntry], int]:
    """The installed entry points of `group` (every group is read in one pass, once per process)."""
    global _INSTALLED
    with _INSTALLED_LOCK:
        if _INSTALLED is None:
            # importlib.metadata costs tens of milliseconds to import and scan: only when a lookup needs it
            from importlib.metadata import entry_points

            found: dict[str, list[PluginEntry]] = {g: [] for g in GROUPS}
            every = entry_points()  # one scan (each entry_points(group=) call scans again); a distribution
            for each in GROUPS:  # found twice on sys.path counts once, the first, as importlib.metadata rules
                for ep in every.select(group=each):
                    # only these few distributions' metadata is parsed (parsing all of it costs ~0.2 s)
                    dist = ep.dist
                    owner = (dist.name or "") if dist is not None else ""
                    if _normalised(owner) == _OWN_DISTRIBUTION:
                        continue  # toolsearch's own declaration of its built-ins, which the registries hold
                    label = f"{owner} {dist.version}" if dist is not None and owner else "an unnamed distribution"
                    found[each].append(PluginEntry(ep.name, ep.value, label))
            _INSTALLED = found
        return _INSTALLED.get(group, []), _GENERATION


def rescan() -> None:
    """Read the installed entry points again on the next lookup (after installing a plug-in in-process)."""
    global _INSTALLED, _GENERATION
    with _INSTALLED_LOCK:
        _INSTALLED = None
        _GENERATION += 1


def _normalised(distribution: str) -> str:
    return distribution.lower().replace("_", "-").replace(".", "-")


def _resolve(value: str) -> Any:
    """What an entry point's `module:attr.sub [extras]` value names (the rules of importlib.metadata)."""
    target = value.split("[", 1)[0].strip()
    module, _, attrs = target.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for attr in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, attr)
    return obj


def _imported(value: str) -> Any:
    """What an entry point's value names if its module is imported already (None otherwise); imports nothing."""
    module, _, attrs = value.split("[", 1)[0].strip().partition(":")
    obj: Any = sys.modules.get(module.strip())
    for attr in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, attr, None)
    return obj


def named_instance(cls: type, label: str) -> Callable[[Any, str], str | None]:
    """The shape check for an entry point naming an instance of `cls` whose `name` is the entry point's."""

    def check(obj: Any, name: str) -> str | None:
        if not isinstance(obj, cls):
            return f"expected a {label}, got {type(obj).__name__}"
        own = getattr(obj, "name", None)
        if own != name:
            return f"it is named {own!r}; the entry point's name and its {cls.__name__}'s must agree"
        return None

    return check


def callable_of(signature: str) -> Callable[[Any, str], str | None]:
    """The shape check for an entry point naming a factory (`signature` says what it takes and returns)."""

    def check(obj: Any, name: str) -> str | None:
        return None if callable(obj) else f"expected a callable {signature}, got {type(obj).__name__}"

    return check


class PluginRegistry(Generic[T]):
    """Named objects of one kind: registered in code, built in, or found by entry point.

    `check(obj, name)` returns what is wrong with a loaded object (None when it has the right
    shape); `error` is the exception class for an unknown name. `reserved(name)` says what takes
    a name outside the registry (a model alias the embedders' caller resolves first, the backend
    "auto"), None when nothing does: a lookup of such a name never reaches the registry, so a
    plug-in of that name is ignored with a PluginWarning, and code may not register one.
    """

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: Iterable[tuple[str, str]],
        check: Callable[[Any, str], str | None],
        *,
        error: type[ToolSearchError] = ToolSearchError,
        reserved: Callable[[str], str | None] | None = None,
    ) -> None:
        if group not in GROUPS:
            raise PluginError(f"unknown entry-point group {group!r}; use one of: {', '.join(GROUPS)}")
        self.kind = kind
        self.group = group
        self.error = error
        self._check = check
        self._reserved = reserved
        self._builtins = {name: PluginEntry(name, value) for name, value in builtins}
        self._registered: dict[str, T] = {}
        self._loaded: dict[str, T] = {}
        self._plugins: dict[str, PluginEntry] | None = None
        self._generation = -1
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"PluginRegistry({self.kind!r}, {self.group!r})"

    # --- what is known, without importing anything -----------------------------------------------

    @property
    def builtins(self) -> dict[str, str]:
        """The built-in entry points, name -> `module:attr` (what pyproject.toml must declare)."""
        return {name: entry.value for name, entry in self._builtins.items()}

    def plugins(self) -> dict[str, PluginEntry]:
        """The installed plug-ins this registry uses, by name (clashing ones are left out, with a warning)."""
        with self._lock:
            if self._plugins is None or self._generation != _GENERATION:
                installed, self._generation = _installed(self.group)
                for name in set(self._plugins or ()) - set(self._builtins):
                    self._loaded.pop(name, None)  # a plug-in's object is reloaded from the fresh scan
                chosen: dict[str, PluginEntry] = {}
                for entry in installed:
                    earlier = self._builtins.get(entry.name) or chosen.get(entry.name)
                    taken = self._taken(entry.name) if earlier is None else f"{earlier.distribution} ({earlier.value})"
                    if taken is not None:
                        warnings.warn(
                            f"ignored the {self.kind} plug-in {entry.describe(self.group)}: the name "
                            f"{entry.name!r} is already taken by {taken}; "
                            "rename the plug-in's entry point or uninstall one of them",
                            PluginWarning,
                            stacklevel=2,
                        )
                        continue
                    chosen[entry.name] = entry
                self._plugins = chosen
            return self._plugins

    def _taken(self, name: str) -> str | None:
        """What takes `name` outside the registry (see `reserved`), as a warning names it; None when free."""
        what = self._reserved(name) if self._reserved is not None else None
        return None if what is None else f"{_BUILT_IN} ({what})"

    def names(self) -> list[str]:
        """Every known name: built-ins in their order, then names registered in code, then plug-ins."""
        names = dict.fromkeys(self._builtins)
        names.update(dict.fromkeys(self._registered))
        names.update(dict.fromkeys(sorted(self.plugins())))
        return list(names)

    def entry(self, name: str) -> PluginEntry | None:
        """The entry point a name loads from (None for unknown names and objects registered in code)."""
        if name in self._registered:
            return None
        return self._builtins.get(name) or self.plugins().get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._registered or self.entry(name) is not None)

    # --- lookups -------------------------------------------------------------------------------

    def find(self, name: str) -> T | None:
        """The object called `name`, loaded on first use; None when no such name is known.

        A plug-in that fails to import or has the wrong shape raises PluginError naming its entry point.
        """
        with self._lock:
            # the installed plug-ins are scanned on the first lookup of any name, so a clash warns
            # even when only a built-in is asked for
            plugins = self.plugins()
            found = self._registered.get(name)
            if found is None:
                found = self._loaded.get(name)
            if found is not None:
                return found
            entry = self._builtins.get(name) or plugins.get(name)
        if entry is None:
            return None
        # imported outside the lock: a plug-in's module may look up names of other registries, whose
        # locks another thread may hold while it waits for this one; two threads may both import, one wins
        obj = self._load(entry)
        with self._lock:
            return self._loaded.setdefault(name, obj)

    def get(self, name: str) -> T:
        """The object called `name`; `error` (listing the known names, saying how to add one) when unknown."""
        found = self.find(name) if isinstance(name, str) else None
        if found is None:
            raise self.error(self.unknown_message(name))
        return found

    def unknown_message(self, name: object, *, known: Sequence[str] | None = None) -> str:
        """`unknown <kind> <name>; choose one of: ...` plus how a plug-in provides another one."""
        listed = ", ".join(self.names() if known is None else known)
        return f"unknown {self.kind} {name!r}; choose one of: {listed}. {self.install_hint()}"

    def install_hint(self) -> str:
        return (
            f"{'An' if self.kind[0] in 'aeiou' else 'A'} {self.kind} from another package is found once that package "
            "is installed "
            f"(pip install <package>) and declares it under the entry-point group {self.group!r} "
            "(see docs/plugins.md)"
        )

    def register(self, name: str, obj: T, *, replace: bool = False) -> None:
        """Make `obj` known as `name` in this process; it takes precedence over a built-in or plug-in.

        A name registered in code or built in needs `replace=True`. An installed plug-in's name does
        not, whether or not the plug-in was looked up yet: the code wins, with a PluginWarning naming
        the entry point it shadows.
        """
        if not isinstance(name, str) or not name:
            raise self.error(f"a {self.kind}'s name must be a non-empty string, got {name!r}")
        taken = None if name in self._builtins else self._taken(name)
        if taken is not None:  # no lookup of this name would ever reach what is registered
            raise self.error(f"cannot register the {self.kind} {name!r}: the name is taken by {taken}; choose another")
        problem = self._check(obj, name)
        if problem is not None:
            raise self.error(f"cannot register the {self.kind} {name!r}: {problem}")
        with self._lock:
            if name in self._registered and not replace:
                raise self.error(f"a {self.kind} named {name!r} is already registered in code; pass replace=True")
            if name in self._builtins and not replace:
                raise self.error(f"a {self.kind} named {name!r} is already registered; pass replace=True")
            plugin = None if name in self._registered or name in self._builtins else self.plugins().get(name)
            if name not in self._registered and (
                self._loaded.get(name) is obj or (plugin is not None and _imported(plugin.value) is obj)
            ):
                # the object its entry point names, registered again (or by its own module as it is
                # imported): it stays that entry point's, shadowing nothing
                return
            if plugin is not None:
                warnings.warn(
                    f"the {self.kind} {name!r} registered in code shadows the plug-in {plugin.describe(self.group)} "
                    "in this process; register it under another name to use both",
                    PluginWarning,
                    stacklevel=3,  # the caller of register_backend / register_format
                )
            self._registered[name] = obj

    def wrong_product(self, name: str, product: object, expected: str) -> PluginError:
        """The error for a factory called `name` that made something other than `expected`."""
        entry = self.entry(name)
        where = entry.describe(self.group) if entry is not None else "registered in code"
        return PluginError(f"the {self.kind} {name!r} ({where}) returned {type(product).__name__}, not {expected}")

    def unregister(self, name: str) -> bool:
        """Forget an object registered in code (a built-in or plug-in of its name shows again); True if one was."""
        with self._lock:
            return self._registered.pop(name, None) is not None

    def _load(self, entry: PluginEntry) -> T:
        try:
            obj = _resolve(entry.value)
        except (KeyboardInterrupt, GeneratorExit):
            raise  # the user's interrupt (or a closing generator) is not the plug-in's failure
        except BaseException as exc:  # any failure of a plug-in's import is reported, naming the plug-in:
            # a module calling sys.exit() on import (a CLI module named by mistake) must not end the process
            raise PluginError(
                f"the {self.kind} plug-in {entry.name!r} failed to load ({named_error(exc)}); "
                f"{entry.describe(self.group)}. Reinstall or uninstall that distribution"
            ) from exc
        problem = self._check(obj, entry.name)
        if problem is not None:
            raise PluginError(
                f"the {self.kind} plug-in {entry.name!r} has the wrong shape: {problem}; {entry.describe(self.group)}"
            )
        return obj  # type: ignore[no-any-return]
