"""Backend registry: backends found by name (built in or by entry point), their modules imported only when used."""

from __future__ import annotations

from .._errors import BackendError, MissingDependencyError
from ..plugins import PluginRegistry, named_instance
from ._base import Backend, BackendSpec

__all__ = [
    "Backend",
    "BackendSpec",
    "BACKENDS",
    "register_backend",
    "get_backend_spec",
    "find_backend_spec",
    "backend_names",
    "default_backend",
]


# The same list as pyproject.toml's [project.entry-points."toolsearch.backends"] (a test compares them).
BACKENDS: PluginRegistry[BackendSpec] = PluginRegistry(
    "backend",
    "toolsearch.backends",
    [
        (name, f"toolsearch.backends._builtin:{name.upper()}")
        for name in ("regex", "bm25", "vector", "hybrid", "postgres")
    ],
    named_instance(BackendSpec, "toolsearch.backends.BackendSpec"),
    error=BackendError,
    # `get_backend_spec` reads "auto" before the registry: a backend of that name would never be reached
    reserved=lambda name: "the name that picks the best installed backend" if name == "auto" else None,
)


def register_backend(spec: BackendSpec, *, replace: bool = False) -> None:
    """Make a backend available by name in this process (to `ToolIndex.build`, the CLI and sessions).

    An installed package can instead declare it under the `toolsearch.backends` entry-point group.
    """
    if not isinstance(spec, BackendSpec):
        raise BackendError(f"register_backend needs a BackendSpec, got {type(spec).__name__}")
    BACKENDS.register(spec.name, spec, replace=replace)


def backend_names() -> list[str]:
    """Built-in backends first, then those registered in code, then installed plug-ins."""
    return BACKENDS.names()


def default_backend() -> str:
    """The best installed backend: hybrid when the vector extra is present, bm25 otherwise."""
    return "hybrid" if BACKENDS.get("hybrid").available() else "bm25"


def find_backend_spec(name: str) -> BackendSpec | None:
    """The spec called `name`, None when no backend has that name (availability is not checked)."""
    return BACKENDS.find(name)


def get_backend_spec(name: str) -> BackendSpec:
    """Look a backend up by name; "auto" picks the default."""
    if name == "auto":
        name = default_backend()
    spec = BACKENDS.find(name) if isinstance(name, str) else None
    if spec is None:
        raise BackendError(BACKENDS.unknown_message(name, known=["auto", *sorted(BACKENDS.names())]))
    if not spec.available():
        entry = BACKENDS.entry(name)
        if spec.extra:
            hint = f"run: pip install 'toolsearch[{spec.extra}]'"
        elif entry is not None and not entry.distribution.startswith("toolsearch "):
            hint = f"install what its plug-in needs ({entry.distribution}; {entry.value})"
        else:
            hint = "run: pip install toolsearch"
        raise MissingDependencyError(f"backend {name!r} needs packages that are not installed; {hint}")
    return spec
