"""Per-session views over a shared index: allowed subset, pinned tools, discovered tools, eviction."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ._errors import SessionError, SessionRequiredError, ToolNotAllowedError, UnknownSessionError
from .index import ToolIndex
from .results import SearchResult
from .tools import NameMap, Tool

if TYPE_CHECKING:
    from .loop import LoopConfig, ToolFunctions, ToolResult
    from .metatool import ToolSearchMetaTool
    from .providers._base import ToolCall

__all__ = [
    "SessionState",
    "SessionStore",
    "InMemorySessionStore",
    "SessionManager",
    "Session",
    "DiscoveryUpdate",
    "ToolFormat",
]

ToolFormat = Literal["openai_chat", "openai_responses", "anthropic", "mcp"]
Clock = Callable[[], float]


# --- state and stores ------------------------------------------------------------------------


@dataclass(slots=True)
class SessionState:
    """Everything a session remembers, as plain data a shared store can serialise.

    `discovered` keeps first-discovery order (a stable order keeps provider prompt caches warm);
    `last_used` holds a per-session tick for each discovered tool, for least-recently-used eviction.
    """

    id: str
    allowed: frozenset[str] | None = None
    pinned: tuple[str, ...] = ()
    discovered: list[str] = field(default_factory=list)
    last_used: dict[str, int] = field(default_factory=dict)
    tick: int = 0
    created_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (allowed sorted, so equal states serialise equally)."""
        return {
            "id": self.id,
            "allowed": None if self.allowed is None else sorted(self.allowed),
            "pinned": list(self.pinned),
            "discovered": list(self.discovered),
            "last_used": dict(self.last_used),
            "tick": self.tick,
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionState:
        allowed = data.get("allowed")
        return cls(
            id=data["id"],
            allowed=None if allowed is None else frozenset(allowed),
            pinned=tuple(data.get("pinned") or ()),
            discovered=list(data.get("discovered") or ()),
            last_used={str(k): int(v) for k, v in (data.get("last_used") or {}).items()},
            tick=int(data.get("tick", 0)),
            created_at=float(data.get("created_at", 0.0)),
            metadata=dict(data.get("metadata") or {}),
        )


@runtime_checkable
class SessionStore(Protocol):
    """Where session states live. Expiry (TTL) and size bounds are the store's job.

    `get` returns a state the caller may change and must `put` back to keep; the manager
    serialises read-modify-write per session id, so a store only has to be safe for concurrent
    calls on different ids. A shared store (Redis, a database) implements these four methods.
    """

    def get(self, session_id: str) -> SessionState | None: ...

    def put(self, state: SessionState) -> None: ...

    def delete(self, session_id: str) -> bool: ...

    def ids(self) -> list[str]: ...


class InMemorySessionStore:
    """A process-local store with optional TTL (since last access) and an LRU bound on sessions."""

    def __init__(
        self, *, ttl_seconds: float | None = None, max_sessions: int | None = 1000, clock: Clock = time.monotonic
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive (or None for no expiry)")
        if max_sessions is not None and max_sessions < 1:
            raise ValueError("max_sessions must be at least 1 (or None for no bound)")
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        # id -> (state, last access); ordered oldest access first, so expiry and LRU pop from the front
        self._items: OrderedDict[str, tuple[SessionState, float]] = OrderedDict()

    def _expired(self, accessed: float, now: float) -> bool:
        return self.ttl_seconds is not None and now - accessed > self.ttl_seconds

    def _prune(self, now: float) -> None:
        while self._items:
            first = next(iter(self._items.values()))
            if not self._expired(first[1], now):
                break
            self._items.popitem(last=False)

    def get(self, session_id: str) -> SessionState | None:
        now = self._clock()
        with self._lock:
            item = self._items.get(session_id)
            if item is None:
                return None
            if self._expired(item[1], now):
                del self._items[session_id]
                return None
            self._items[session_id] = (item[0], now)
            self._items.move_to_end(session_id)
            return item[0]

    def put(self, state: SessionState) -> None:
        now = self._clock()
        with self._lock:
            self._items[state.id] = (state, now)
            self._items.move_to_end(state.id)
            self._prune(now)
            while self.max_sessions is not None and len(self._items) > self.max_sessions:
                self._items.popitem(last=False)

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._items.pop(session_id, None) is not None

    def ids(self) -> list[str]:
        now = self._clock()
        with self._lock:
            self._prune(now)
            return list(self._items)

    def __len__(self) -> int:
        return len(self.ids())


# --- manager ---------------------------------------------------------------------------------

_LOCK_STRIPES = 64
_MAX_INTERNED = 1024


class SessionManager:
    """Sessions keyed by id over one shared, already-built index; creating one does no indexing.

    `ttl_seconds`, `max_sessions` and `clock` configure the default in-memory store; a custom
    `store` brings its own expiry. `max_discovered` / `max_discovered_tokens` cap each session's
    discovered tools (by count, and by the tokens of their definitions), evicting the least
    recently used. Thread-safe; every call is short and never awaits, so asyncio code may call it
    directly.
    """

    def __init__(
        self,
        index: ToolIndex,
        *,
        store: SessionStore | None = None,
        ttl_seconds: float | None = None,
        max_sessions: int = 1000,
        max_discovered: int | None = None,
        max_discovered_tokens: int | None = None,
        encoding: str = "o200k_base",
        clock: Clock = time.monotonic,
    ) -> None:
        if max_discovered is not None and max_discovered < 1:
            raise ValueError("max_discovered must be at least 1 (or None for no cap)")
        if max_discovered_tokens is not None and max_discovered_tokens < 1:
            raise ValueError("max_discovered_tokens must be positive (or None for no cap)")
        self._index = index
        self._store: SessionStore = (
            store
            if store is not None
            else InMemorySessionStore(ttl_seconds=ttl_seconds, max_sessions=max_sessions, clock=clock)
        )
        self.max_discovered = max_discovered
        self.max_discovered_tokens = max_discovered_tokens
        self.encoding = encoding
        self._clock = clock
        self._stripes = [threading.RLock() for _ in range(_LOCK_STRIPES)]
        self._names_cache: tuple[Any, frozenset[str]] | None = None
        self._interned: dict[frozenset[str], frozenset[str]] = {}
        self._intern_lock = threading.Lock()

    @property
    def index(self) -> ToolIndex:
        return self._index

    @property
    def store(self) -> SessionStore:
        return self._store

    def _intern(self, names: frozenset[str]) -> frozenset[str]:
        # Sessions of one tenant usually share an allowed subset: keep one copy of it, not one per session.
        with self._intern_lock:
            found = self._interned.get(names)
            if found is None:
                if len(self._interned) >= _MAX_INTERNED:
                    self._interned.clear()
                self._interned[names] = found = names
        return found

    def _catalog_names(self) -> frozenset[str]:
        # One name set per catalog version, so checking a large allowed subset is a C-level subset test.
        catalog = self._index.catalog
        cached = self._names_cache
        if cached is None or cached[0] is not catalog:
            cached = (catalog, frozenset(catalog.names))
            self._names_cache = cached
        return cached[1]

    def lock(self, session_id: str) -> threading.RLock:
        """The lock that serialises changes to one session (striped: bounded memory)."""
        return self._stripes[hash(session_id) % _LOCK_STRIPES]  # type: ignore[return-value]

    @staticmethod
    def _check_id(session_id: object) -> str:
        if session_id is None or (isinstance(session_id, str) and not session_id.strip()):
            raise SessionRequiredError(
                "a session id is required: pass the conversation's id (e.g. a user or thread id)"
            )
        if not isinstance(session_id, str):
            raise SessionRequiredError(f"session id must be a string, got {type(session_id).__name__}")
        return session_id

    def create(
        self,
        session_id: str,
        *,
        allowed: Collection[str] | None = None,
        pinned: Collection[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """Start a session; `allowed` limits what it can search, see and call (None = every tool)."""
        session_id = self._check_id(session_id)
        catalog = self._index.catalog
        if isinstance(allowed, str) or isinstance(pinned, str):
            raise SessionError("allowed and pinned take collections of tool names, not a single string")
        allowed_set = None if allowed is None else self._intern(frozenset(allowed))
        if allowed_set is not None and not allowed_set <= self._catalog_names():
            unknown = [n for n in allowed_set if n not in catalog]
            if unknown:
                raise SessionError(
                    f"{len(unknown)} allowed tool(s) are not in the index, e.g. {sorted(unknown)[0]!r}; "
                    "allow only names the index holds"
                )
        pinned_names = tuple(dict.fromkeys(pinned))
        for name in pinned_names:
            if name not in catalog:
                raise SessionError(f"pinned tool {name!r} is not in the index")
            if allowed_set is not None and name not in allowed_set:
                raise ToolNotAllowedError(f"pinned tool {name!r} is not in the session's allowed tools")
        with self.lock(session_id):
            if self._store.get(session_id) is not None:
                raise SessionError(f"session {session_id!r} already exists; use get() or get_or_create()")
            state = SessionState(
                id=session_id,
                allowed=allowed_set,
                pinned=pinned_names,
                created_at=self._clock(),
                metadata=dict(metadata or {}),
            )
            self._store.put(state)
        return Session(self, state)

    def get(self, session_id: str) -> Session:
        """The session with this id; UnknownSessionError when it never existed, expired or was evicted."""
        session_id = self._check_id(session_id)
        state = self._store.get(session_id)
        if state is None:
            raise UnknownSessionError(
                f"unknown session {session_id!r} (never created, expired or evicted); create it first"
            )
        return Session(self, state)

    def get_or_create(
        self,
        session_id: str,
        *,
        allowed: Collection[str] | None = None,
        pinned: Collection[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """The existing session (its settings unchanged), or a new one with these settings."""
        session_id = self._check_id(session_id)
        with self.lock(session_id):
            state = self._store.get(session_id)
            if state is not None:
                return Session(self, state)
            return self.create(session_id, allowed=allowed, pinned=pinned, metadata=metadata)

    def close(self, session_id: str) -> None:
        """Forget a session; closing an unknown id is not an error."""
        session_id = self._check_id(session_id)
        with self.lock(session_id):
            self._store.delete(session_id)

    def __contains__(self, session_id: object) -> bool:
        return isinstance(session_id, str) and self._store.get(session_id) is not None

    def ids(self) -> list[str]:
        return self._store.ids()

    def __len__(self) -> int:
        return len(self._store.ids())

    def __repr__(self) -> str:
        return f"SessionManager({self._index!r}, {len(self)} sessions)"


# --- session ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiscoveryUpdate:
    """What one discovery changed: new tools, already-known tools refreshed, tools evicted by caps."""

    added: tuple[str, ...] = ()
    refreshed: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()


class Session:
    """A handle on one session: a view (allowed subset + pinned + discovered) over the shared index.

    Handles are cheap; several handles on one id see the same state, which lives in the store.
    """

    def __init__(self, manager: SessionManager, state: SessionState) -> None:
        self._manager = manager
        self.id = state.id
        self.allowed: frozenset[str] | None = state.allowed
        self.pinned: tuple[str, ...] = state.pinned
        self._namespaces: list[str] | None = None
        self._names: NameMap | None = None

    # --- state ---------------------------------------------------------------------------

    @property
    def manager(self) -> SessionManager:
        return self._manager

    @property
    def index(self) -> ToolIndex:
        return self._manager.index

    def _state(self) -> SessionState:
        state = self._manager.store.get(self.id)
        if state is None:
            raise UnknownSessionError(f"session {self.id!r} has expired or was closed; create it again")
        return state

    def state(self) -> SessionState:
        """A snapshot of the stored state."""
        return SessionState.from_dict(self._state().to_dict())

    @property
    def discovered(self) -> tuple[str, ...]:
        """Discovered tool names in first-discovery order (still in the index and allowed)."""
        catalog = self.index.catalog
        return tuple(n for n in self._state().discovered if n in catalog)

    def is_allowed(self, name: str) -> bool:
        """True when the tool exists in the index and is inside the session's allowed subset."""
        return name in self.index.catalog and (self.allowed is None or name in self.allowed)

    def is_visible(self, name: str) -> bool:
        """True when the tool is pinned or discovered (and still allowed)."""
        if not self.is_allowed(name):
            return False
        return name in self.pinned or name in self._state().last_used

    def loaded_names(self) -> frozenset[str]:
        """Names of the tools the session currently exposes: pinned and discovered (not evicted)."""
        return frozenset(self.pinned).union(self._state().last_used)

    def tool(self, name: str) -> Tool:
        """The full definition of an allowed tool; ToolNotAllowedError otherwise."""
        if not self.is_allowed(name):
            raise ToolNotAllowedError(f"tool {name!r} is not available in session {self.id!r}")
        return self.index.catalog[name]

    def pinned_tools(self) -> list[Tool]:
        catalog = self.index.catalog
        return [catalog[n] for n in self.pinned if n in catalog]

    def discovered_tools(self) -> list[Tool]:
        catalog = self.index.catalog
        return [catalog[n] for n in self.discovered if n not in self.pinned and n in catalog]

    def visible_tools(self) -> list[Tool]:
        """Pinned then discovered tools, full definitions, in a stable order."""
        return self.pinned_tools() + self.discovered_tools()

    @property
    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one allowed tool, in catalog order (cached per handle)."""
        if self._namespaces is None:
            catalog = self.index.catalog
            if self.allowed is None:
                self._namespaces = catalog.namespaces
            else:
                seen: dict[str, None] = {}
                for name in self.allowed:
                    ns = catalog[name].namespace if name in catalog else None
                    if ns is not None:
                        seen.setdefault(ns, None)
                order = {ns: i for i, ns in enumerate(catalog.namespaces)}
                self._namespaces = sorted(seen, key=lambda ns: order.get(ns, len(order)))
        return self._namespaces

    # --- search and discovery ------------------------------------------------------------

    def search(
        self, query: str, k: int = 5, *, namespaces: Collection[str] | None = None, record: bool = True
    ) -> SearchResult:
        """Search only within the allowed subset; with `record`, the hits become discovered."""
        result = self.index.search(query, k, allowed=self.allowed, namespaces=namespaces)
        if record and result.hits:
            self.discover(result.names)
        return result

    def discover(self, names: Iterable[str]) -> DiscoveryUpdate:
        """Make tools visible (best first: earlier names are kept longer under a cap).

        Already-discovered names are refreshed (they become the most recently used). A name outside
        the allowed subset raises ToolNotAllowedError and changes nothing.
        """
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if not self.is_allowed(name):
                raise ToolNotAllowedError(f"tool {name!r} is not available in session {self.id!r}")
        wanted = [n for n in wanted if n not in self.pinned]
        if not wanted:
            return DiscoveryUpdate()
        added: list[str] = []
        refreshed: list[str] = []
        with self._manager.lock(self.id):
            state = self._state()
            # Later ticks are more recent: give the best-ranked name the newest tick.
            for name in reversed(wanted):
                state.tick += 1
                if name in state.last_used:
                    refreshed.append(name)
                else:
                    state.discovered.append(name)
                    added.append(name)
                state.last_used[name] = state.tick
            # `discovered` must follow best-first order for names added together
            if len(added) > 1:
                new = set(added)
                state.discovered[-len(added) :] = [n for n in wanted if n in new]
            evicted = self._enforce_caps(state)
            self._manager.store.put(state)
        evicted_set = set(evicted)
        return DiscoveryUpdate(
            added=tuple(n for n in wanted if n in set(added) and n not in evicted_set),
            refreshed=tuple(n for n in wanted if n in set(refreshed) and n not in evicted_set),
            evicted=tuple(evicted),
        )

    def touch(self, names: Iterable[str]) -> None:
        """Mark discovered tools as just used (a call keeps a tool from being evicted)."""
        names = [n for n in names if n not in self.pinned]
        if not names:
            return
        with self._manager.lock(self.id):
            state = self._state()
            changed = False
            for name in names:
                if name in state.last_used:
                    state.tick += 1
                    state.last_used[name] = state.tick
                    changed = True
            if changed:
                self._manager.store.put(state)

    def forget(self, names: Iterable[str] | None = None) -> None:
        """Hide discovered tools again (all of them when `names` is None)."""
        with self._manager.lock(self.id):
            state = self._state()
            if names is None:
                state.discovered.clear()
                state.last_used.clear()
            else:
                gone = set(names)
                state.discovered = [n for n in state.discovered if n not in gone]
                for name in gone:
                    state.last_used.pop(name, None)
            self._manager.store.put(state)

    def _enforce_caps(self, state: SessionState) -> list[str]:
        manager = self._manager
        evicted: list[str] = []
        cap = manager.max_discovered
        budget = manager.max_discovered_tokens
        if cap is None and budget is None:
            return evicted
        by_age = sorted(state.last_used, key=state.last_used.__getitem__)  # least recent first

        def evict(name: str) -> None:
            evicted.append(name)
            del state.last_used[name]

        if cap is not None:
            while len(state.last_used) > cap:
                evict(by_age.pop(0))
        if budget is not None:
            from .tokens import tool_tokens

            catalog = self.index.catalog
            cost = {n: tool_tokens(catalog[n], manager.encoding) if n in catalog else 0 for n in by_age}
            total = sum(cost.values())
            # The most recent tool always stays, even alone over budget: the model asked for it.
            while total > budget and len(by_age) > 1:
                name = by_age.pop(0)
                total -= cost[name]
                evict(name)
        if evicted:
            gone = set(evicted)
            state.discovered = [n for n in state.discovered if n not in gone]
        return evicted

    # --- bring-your-own-loop helpers --------------------------------------------------------

    @property
    def name_map(self) -> NameMap:
        """Provider-safe aliases for this session's tool names (stable: the same name, the same alias)."""
        if self._names is None:
            self._names = NameMap()
        return self._names

    def resolve_name(self, alias: str) -> str:
        """The catalog name behind a provider alias (the alias itself when it is a catalog name)."""
        if alias in self.index.catalog:
            return alias
        original = self.name_map.original(alias)
        if original is not None:
            return original
        for tool in self.visible_tools():  # aliases of visible tools resolve even on a fresh handle
            if self.name_map.add(tool.name) == alias:
                return tool.name
        return alias

    def tools_for_request(
        self, format: ToolFormat = "openai_chat", *, metatool: ToolSearchMetaTool | None = None
    ) -> list[dict[str, Any]]:
        """The tools for this turn in a provider's format: pinned + tool_search + discovered.

        Names are mapped to provider-safe aliases (see `resolve_name` / `handle_tool_calls`).
        """
        from .metatool import ToolSearchMetaTool

        meta = metatool or ToolSearchMetaTool()
        tools = [*self.pinned_tools(), meta.definition(self), *self.discovered_tools()]
        names = self.name_map
        out: list[dict[str, Any]] = []
        for tool in tools:
            alias = names.add(tool.name)
            if format == "openai_chat":
                out.append(tool.to_openai(name=alias))
            elif format == "openai_responses":
                out.append(tool.to_openai(name=alias, responses=True))
            elif format == "anthropic":
                out.append(tool.to_anthropic(name=alias))
            elif format == "mcp":
                out.append(tool.to_mcp(name=alias))
            else:
                raise ValueError(f"unknown tool format {format!r}; use openai_chat, openai_responses, anthropic or mcp")
        return out

    def handle_tool_calls(
        self,
        calls: Sequence[ToolCall | Mapping[str, Any] | Any],
        functions: ToolFunctions | None = None,
        *,
        metatool: ToolSearchMetaTool | None = None,
        config: LoopConfig | None = None,
    ) -> list[ToolResult]:
        """Run one batch of tool calls: every tool_search first, then the other calls.

        `calls` may be neutral ToolCalls or provider objects/dicts (OpenAI Chat `tool_calls`,
        Responses `function_call` items, Anthropic `tool_use` blocks). Each ToolResult has
        `.to_openai_chat()`, `.to_openai_responses()`, `.to_anthropic()` for the reply message.
        """
        from .loop import ToolExecutor

        return ToolExecutor(functions, metatool=metatool, config=config).execute(self, calls)

    async def ahandle_tool_calls(
        self,
        calls: Sequence[ToolCall | Mapping[str, Any] | Any],
        functions: ToolFunctions | None = None,
        *,
        metatool: ToolSearchMetaTool | None = None,
        config: LoopConfig | None = None,
    ) -> list[ToolResult]:
        """`handle_tool_calls` for asyncio: async tools are awaited, sync ones run in threads."""
        from .loop import ToolExecutor

        return await ToolExecutor(functions, metatool=metatool, config=config).aexecute(self, calls)

    def __repr__(self) -> str:
        allowed = "all" if self.allowed is None else len(self.allowed)
        return f"Session({self.id!r}, allowed={allowed}, pinned={len(self.pinned)})"
