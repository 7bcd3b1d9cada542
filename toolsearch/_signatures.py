"""How a sync or async entry point shows the parameters and docstring of the function that prepares its work."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def presented(entry: _F, start: Callable[..., Any], returns: str, doc: str | None = None) -> _F:
    """`entry` as help() and IDEs show it: `start`'s parameters, returning `returns`, with `doc` (or `start`'s
    docstring), under `entry`'s own name in `start`'s namespace."""
    name = entry.__name__
    functools.update_wrapper(entry, start)
    entry.__name__, entry.__qualname__ = name, start.__qualname__.removesuffix(start.__name__) + name
    if doc is not None:
        entry.__doc__ = doc
    entry.__signature__ = inspect.signature(start).replace(return_annotation=returns)  # type: ignore[attr-defined]
    return entry
