"""The backend registry (toolsearch.backends): names, the default, unknown and duplicate registrations."""

from __future__ import annotations

import pytest

from toolsearch import (
    BackendError,
    MissingDependencyError,
    backend_names,
    default_backend,
    register_backend,
)
from toolsearch.backends import BACKENDS, get_backend_spec


def test_registry() -> None:
    assert backend_names()[:4] == ["regex", "bm25", "vector", "hybrid"]
    assert default_backend() in ("hybrid", "bm25")
    assert get_backend_spec("auto").name == default_backend()
    with pytest.raises(BackendError, match="unknown backend 'lucene'; choose one of: auto, bm25"):
        get_backend_spec("lucene")
    with pytest.raises(BackendError, match="already registered"):
        register_backend(get_backend_spec("bm25"))
    register_backend(get_backend_spec("bm25"), replace=True)  # replacing with itself is allowed
    assert BACKENDS.entry("bm25") is not None, "and leaves it the built-in it was (its entry point)"
    assert issubclass(MissingDependencyError, ImportError)
