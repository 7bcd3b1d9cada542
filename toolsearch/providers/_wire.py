"""Reading provider wire objects: SDK models and plain dicts alike, by one pair of helpers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["dump", "get"]


def get(obj: Any, key: str, default: Any = None) -> Any:
    """`obj[key]` for a mapping, `obj.key` for an SDK object (`default` when absent)."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def dump(obj: Any) -> Any:
    """An SDK (pydantic) object as its JSON-able dict without unset fields; anything else as it is."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True, mode="json")
    return obj
