"""toolsearch: let LLM agents search thousands of tools and see only the ones they need."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    ArgumentTypeError,
    AugmentationError,
    AuthConfigError,
    BackendError,
    CatalogMovedError,
    CatalogStoreError,
    CommandError,
    DataSourceError,
    DuplicateToolError,
    EvalError,
    IndexFormatError,
    IndexNotFoundError,
    InvalidArgumentError,
    InvalidIndexNameError,
    InvalidQueryError,
    InvalidToolError,
    MCPConfigError,
    MissingDependencyError,
    PluginError,
    PluginWarning,
    PolicyError,
    PriceTableError,
    ProviderError,
    QueryTimeoutError,
    SessionError,
    SessionRequiredError,
    SessionStateError,
    SessionStoreError,
    StoredIndexError,
    ToolCancelledError,
    ToolNotAllowedError,
    ToolSearchError,
    UnknownFormatError,
    UnknownModelPriceWarning,
    UnknownSessionError,
    UnknownToolError,
    UpstreamError,
    UsageError,
    UsageLogReplacedError,
    UsageStoreUnreachableError,
)
from ._version import __version__ as __version__
from .backends import BackendSpec, backend_names, default_backend, register_backend
from .catalog import Catalog, CatalogDelta
from .index import ToolIndex
from .index_store import IndexStore
from .results import Hit, Ranking, SearchResult
from .tools import NameMap, Tool, load_tools, provider_safe_name

if TYPE_CHECKING:
    from .augment import Augmentation
    from .embeddings import E5Embedder, NumpyEmbedder, SentenceTransformerEmbedder, ToolsEmbedder
    from .executor import ExecutorConfig, ToolExecutor, ahandle_tool_calls, handle_tool_calls, tools_for_request
    from .loop import LoopConfig, LoopOutcome, LoopResult, ToolSearchLoop, arun, run
    from .metatool import ToolSearchMetaTool, system_prompt_suffix
    from .providers import StreamEvent
    from .session import InMemorySessionStore, Session, SessionManager, SessionStore
    from .stores import RedisSessionStore, SessionState, store_from_url

# The loop and sessions pull in asyncio, pydantic and jsonschema; a caller who only searches
# an index should not pay for them at import time, so they load on first attribute access.
_LAZY = {
    **dict.fromkeys(
        ("LoopConfig", "LoopOutcome", "LoopResult", "ToolSearchLoop", "run", "arun"), "toolsearch.loop"
    ),
    **dict.fromkeys(("ToolSearchMetaTool", "system_prompt_suffix"), "toolsearch.metatool"),
    **dict.fromkeys(("SessionManager", "Session", "SessionStore", "InMemorySessionStore"), "toolsearch.session"),
    **dict.fromkeys(("SessionState", "RedisSessionStore", "store_from_url"), "toolsearch.stores"),
    **dict.fromkeys(
        ("ToolExecutor", "ExecutorConfig", "tools_for_request", "handle_tool_calls", "ahandle_tool_calls"),
        "toolsearch.executor",
    ),
    "StreamEvent": "toolsearch.providers",
    "Augmentation": "toolsearch.augment",
    **dict.fromkeys(
        ("NumpyEmbedder", "ToolsEmbedder", "E5Embedder", "SentenceTransformerEmbedder"), "toolsearch.embeddings"
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolsearch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


# The whole root surface: docs/api.md lists it with the public modules, tests/test_packaging.py pins it.
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
    # embedders for the vector and hybrid backends (`embedder=`)
    "NumpyEmbedder",
    "ToolsEmbedder",
    "E5Embedder",
    "SentenceTransformerEmbedder",
    # sessions and the agent loop
    "SessionManager",
    "Session",
    "SessionStore",
    "InMemorySessionStore",
    "RedisSessionStore",
    "SessionState",
    "store_from_url",
    "ToolSearchMetaTool",
    "system_prompt_suffix",
    "ToolSearchLoop",
    "LoopConfig",
    "LoopOutcome",
    "LoopResult",
    "run",
    "arun",
    "ToolExecutor",
    "ExecutorConfig",
    "tools_for_request",
    "handle_tool_calls",
    "ahandle_tool_calls",
    "StreamEvent",
    "Augmentation",
    # errors (the tree is drawn in toolsearch/_errors.py)
    "ToolSearchError",
    "InvalidToolError",
    "DuplicateToolError",
    "UnknownToolError",
    "InvalidQueryError",
    "QueryTimeoutError",
    "AugmentationError",
    "InvalidArgumentError",
    "UnknownFormatError",
    "ArgumentTypeError",
    "BackendError",
    "CatalogStoreError",
    "CatalogMovedError",
    "MissingDependencyError",
    "StoredIndexError",
    "IndexNotFoundError",
    "IndexFormatError",
    "InvalidIndexNameError",
    "SessionError",
    "SessionRequiredError",
    "UnknownSessionError",
    "SessionStoreError",
    "SessionStateError",
    "ToolNotAllowedError",
    "ProviderError",
    "ToolCancelledError",
    "UsageError",
    "UsageLogReplacedError",
    "UsageStoreUnreachableError",
    "PriceTableError",
    "DataSourceError",
    "MCPConfigError",
    "UpstreamError",
    "AuthConfigError",
    "PolicyError",
    "PluginError",
    "PluginWarning",
    "UnknownModelPriceWarning",
    "CommandError",
    "EvalError",
]
