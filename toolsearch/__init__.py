"""toolsearch: let LLM agents search thousands of tools and see only the ones they need."""

from __future__ import annotations

from ._errors import (
    BackendError,
    DuplicateToolError,
    IndexFormatError,
    IndexNotFoundError,
    InvalidIndexNameError,
    InvalidQueryError,
    InvalidToolError,
    MissingDependencyError,
    QueryTimeoutError,
    SessionError,
    SessionRequiredError,
    StoredIndexError,
    ToolNotAllowedError,
    ToolSearchError,
    UnknownSessionError,
)
from .backends import BackendSpec, backend_names, default_backend, register_backend
from .catalog import Catalog, CatalogDelta
from .index import ToolIndex
from .loop import LoopConfig, LoopOutcome, LoopResult, ToolSearchLoop, arun, run
from .metatool import ToolSearchMetaTool, system_prompt_suffix
from .results import Hit, Ranking, SearchResult
from .session import InMemorySessionStore, Session, SessionManager, SessionStore
from .store import IndexStore
from .tools import NameMap, Tool, load_tools, provider_safe_name

__version__ = "0.1.0"

__all__ = [
    # tools and catalogs
    "Tool",
    "load_tools",
    "provider_safe_name",
    "NameMap",
    "Catalog",
    "CatalogDelta",
    # indexes and search
    "ToolIndex",
    "IndexStore",
    "Hit",
    "Ranking",
    "SearchResult",
    "BackendSpec",
    "register_backend",
    "backend_names",
    "default_backend",
    # sessions and the agent loop
    "SessionManager",
    "Session",
    "SessionStore",
    "InMemorySessionStore",
    "ToolSearchMetaTool",
    "system_prompt_suffix",
    "ToolSearchLoop",
    "LoopConfig",
    "LoopOutcome",
    "LoopResult",
    "run",
    "arun",
    # errors
    "ToolSearchError",
    "InvalidToolError",
    "DuplicateToolError",
    "InvalidQueryError",
    "QueryTimeoutError",
    "BackendError",
    "MissingDependencyError",
    "StoredIndexError",
    "IndexNotFoundError",
    "IndexFormatError",
    "InvalidIndexNameError",
    "SessionError",
    "SessionRequiredError",
    "UnknownSessionError",
    "ToolNotAllowedError",
]
