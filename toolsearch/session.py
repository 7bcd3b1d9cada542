"""Per-session views over a shared index: allowed subset, pinned and discovered tools, eviction.

State only: a session's state is plain data in a store (`toolsearch.stores`), and every change
is one atomic read-modify-write of that store, so threads, asyncio tasks and worker processes
sharing a store never lose each other's discoveries. The rules of a turn (searches, calls,
refusals) live in `toolsearch.executor`, above this module.
"""

from __future__ import annotations

import copy
import enum
import importlib
import json
import numbers
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from . import tracing
from ._errors import (
    InvalidArgumentError,
    SessionError,
    SessionRequiredError,
    ToolNotAllowedError,
    UnknownSessionError,
    wrong_type,
)
from .index import ToolIndex
from .results import SearchResult
from .stores import InMemorySessionStore, SessionState, SessionStore
from .stores._state import new_incarnation, replaced_session
from .stores._state import shown_session_id as _shown
from .tools import NameMap, Tool

if TYPE_CHECKING:
    from .executor import ToolResult

__all__ = [
    "SessionState",
    "SessionStore",
    "InMemorySessionStore",
    "SessionManager",
    "Session",
    "DiscoveryUpdate",
    "ToolFormat",
    "MAX_SESSION_ID_LENGTH",
    "check_session_settings",
    "pinned_in",
]

ToolFormat = Literal["openai_chat", "openai_responses", "anthropic", "mcp"]
Clock = Callable[[], float]
T = TypeVar("T")
_Change = Callable[[SessionState], Any]


# --- manager ---------------------------------------------------------------------------------

_MAX_INTERNED = 1024
# Ids are store keys (a Redis key, a log field) and appear in error messages: bounded, as an HTTP header or a
# database key would be. The gateway's own ids are 40-odd characters; a longer key is best hashed to an id.
MAX_SESSION_ID_LENGTH = 256
# The closes a manager remembers (see `SessionManager.was_closed`): a few hundred KiB at most.
_MAX_CLOSES_KEPT = 10_000


class _NotGiven(enum.Enum):
    """The default of `SessionManager(max_sessions=...)`, whose None already means something (no bound)."""

    NOT_GIVEN = enum.auto()


def _plain_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A session's metadata, checked to be what every store can keep: JSON, UTF-8 text."""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise wrong_type("metadata", metadata, "a mapping of JSON values (or None)")
    try:
        _check_keys(metadata or {}, "metadata")
        text = json.dumps(dict(metadata or {}), ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError) as exc:
        raise SessionError(
            f"session metadata must be plain JSON (string keys; strings, numbers, booleans, null, lists and objects; "
            f"no lone surrogates), as a shared store keeps it: {exc}"
        ) from None
    # The store's JSON form, read back: the session keeps none of the caller's nested objects (a later change to
    # them must not reach the state), and every store holds the same values (a tuple is a list, a key is text).
    out: dict[str, Any] = json.loads(text)
    return out


def _check_keys(value: object, where: str) -> None:
    """SessionError for a key that is not text, at any depth: `json.dumps` would turn 7, True or None into
    "7", "true" or "null" without a word, and merge two keys that print alike (one value lost)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SessionError(
                    f"session metadata key {key!r} ({type(key).__name__}) at {where}[{key!r}] is not a string: "
                    "a shared store keeps JSON, whose keys are text; use text keys"
                )
            _check_keys(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_keys(item, f"{where}[{i}]")


class SessionManager:
    """Sessions keyed by id over one shared, already-built index; creating one does no indexing.

    `ttl_seconds`, `max_sessions` (the store's default, 1000, when not given; None for no bound) and `clock`
    configure the default in-memory store; a custom `store` (e.g. `RedisSessionStore`, or
    `toolsearch.stores.store_from_url(...)`) brings its own expiry and bound, so any of the three given beside it
    is refused: pass them to the store
    (`store_from_url(url, ttl_seconds=...)`, `InMemorySessionStore(max_sessions=...)`).
    `max_discovered` / `max_discovered_tokens` cap each session's discovered tools (by
    count, and by the tokens of their definitions), evicting the least recently used. Safe from
    any number of threads, tasks and processes sharing the store: every change is one atomic
    update of the store. With the in-memory store no call awaits or blocks for long, so asyncio
    code may call it directly; a networked store's calls take one round trip each.
    """

    def __init__(
        self,
        index: ToolIndex,
        *,
        store: SessionStore | None = None,
        ttl_seconds: float | None = None,
        max_sessions: int | _NotGiven | None = _NotGiven.NOT_GIVEN,
        max_discovered: int | None = None,
        max_discovered_tokens: int | None = None,
        encoding: str = "o200k_base",
        clock: Clock = time.monotonic,
    ) -> None:
        if not hasattr(index, "catalog") or not callable(getattr(index, "search", None)):
            raise wrong_type("SessionManager: index", index, "a ToolIndex (ToolIndex.build, IndexStore.open)")
        for what, cap in (("max_discovered", max_discovered), ("max_discovered_tokens", max_discovered_tokens)):
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, numbers.Integral)):  # before "5" < 1
                raise wrong_type(f"SessionManager: {what}", cap, "a whole number (or None for no cap)")
        if max_discovered is not None and max_discovered < 1:
            raise InvalidArgumentError(
                "max_discovered must be at least 1 (or None for no cap)"
                f", got {max_discovered!r}"
            )
        if max_discovered_tokens is not None and max_discovered_tokens < 1:
            raise InvalidArgumentError(
                "max_discovered_tokens must be positive (or None for no cap)"
                f", got {max_discovered_tokens!r}"
            )
        if store is not None:
            # Settings of the default store would be ignored beside another: sessions meant to expire never would.
            given = (
                (["ttl_seconds"] if ttl_seconds is not None else [])
                + (["max_sessions"] if not isinstance(max_sessions, _NotGiven) else [])
                + (["clock"] if clock is not time.monotonic else [])
            )
            if given:
                what = "is a setting" if len(given) == 1 else "are settings"
                raise InvalidArgumentError(
                    f"SessionManager: {', '.join(given)} {what} of the default in-memory store, ignored beside "
                    f"store={store!r}, which keeps its own expiry and bound; pass {', '.join(given)} to that store "
                    "instead "
                    "(store_from_url(url, ttl_seconds=...), RedisSessionStore(url, ttl_seconds=...), "
                    "InMemorySessionStore(ttl_seconds=..., max_sessions=..., clock=...))"
                )
        self._index = index
        if store is None:
            store = (
                InMemorySessionStore(ttl_seconds=ttl_seconds, clock=clock)  # (its own default bound)
                if isinstance(max_sessions, _NotGiven)
                else InMemorySessionStore(ttl_seconds=ttl_seconds, max_sessions=max_sessions, clock=clock)
            )
        self._store: SessionStore = store
        self.max_discovered = max_discovered
        self.max_discovered_tokens = max_discovered_tokens
        self.encoding = encoding
        self._clock = clock
        self._names_cache: tuple[Any, frozenset[str]] | None = None
        self._interned: dict[frozenset[str], frozenset[str]] = {}
        self._intern_lock = threading.Lock()
        # id -> (incarnation, wall-clock time) of its last close through this manager, oldest close first
        self._closes: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self._closes_lock = threading.Lock()

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

    @staticmethod
    def _check_id(session_id: object, *, new: bool = False) -> str:
        """The id as text; SessionRequiredError / SessionError for one that cannot be a session's. The length
        cap holds for a `new` session only: one stored under a longer id by an earlier release can still be
        read and closed."""
        if session_id is None or (isinstance(session_id, str) and not session_id.strip()):
            raise SessionRequiredError(
                "a session id is required: pass the conversation's id (e.g. a user or thread id)"
            )
        if not isinstance(session_id, str):
            raise SessionRequiredError(f"session id must be a string, got {type(session_id).__name__}")
        if new and len(session_id) > MAX_SESSION_ID_LENGTH:
            raise SessionError(
                f"session id {_shown(session_id)} is longer than the {MAX_SESSION_ID_LENGTH} characters a session id "
                "may have; pass a shorter id (a hash of a longer key, say)"
            )
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:  # a store keys sessions by their id: a shared one (Redis) cannot write this one
            raise SessionError(
                f"session id {_shown(session_id)} holds a lone surrogate (U+D800-U+DFFF), which UTF-8 cannot encode; "
                "pass the id as text"
            ) from None
        return session_id

    def _check_names(self, names: Collection[str], what: str, allowed: frozenset[str] | None) -> tuple[str, ...]:
        if isinstance(names, str):
            raise SessionError(f"{what} takes a collection of tool names, not a single string")
        catalog = self._index.catalog
        out = tuple(dict.fromkeys(names))
        for name in out:
            if name not in catalog:
                raise SessionError(f"{what} tool {name!r} is not in the index")
            if allowed is not None and name not in allowed:
                raise ToolNotAllowedError(f"{what} tool {name!r} is not in the session's allowed tools")
        return out

    def create(
        self,
        session_id: str,
        *,
        allowed: Collection[str] | None = None,
        pinned: Collection[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """Start a session; `allowed` limits what it can search, see and call (None = every tool)."""
        session_id = self._check_id(session_id, new=True)
        catalog = self._index.catalog
        if isinstance(allowed, str):
            raise SessionError("allowed takes a collection of tool names, not a single string")
        if allowed is not None and not isinstance(allowed, Iterable):
            raise wrong_type("allowed", allowed, "a collection of tool names (or None for every tool)")
        allowed_set = None if allowed is None else self._intern(frozenset(allowed))
        if allowed_set is not None and not allowed_set <= self._catalog_names():
            unknown = [n for n in allowed_set if n not in catalog]
            if unknown:
                raise SessionError(
                    f"{len(unknown)} allowed tool(s) are not in the index, e.g. {sorted(unknown)[0]!r}; "
                    "allow only names the index holds"
                )
        state = SessionState(
            id=session_id,
            allowed=allowed_set,
            pinned=self._check_names(pinned, "pinned", allowed_set),
            created_at=time.time(),
            metadata=_plain_metadata(metadata),
            # Set here, not left to the store, so a third-party store that knows nothing of incarnations
            # still keeps one, and this call's handles can tell this session from a later one of the same id.
            incarnation=new_incarnation(),
        )
        if not self._store.create(state):
            raise SessionError(f"session {_shown(session_id)} already exists; use get() or get_or_create()")
        return Session(self, state)

    def get(self, session_id: str) -> Session:
        """The session with this id; UnknownSessionError when it never existed, expired or was evicted."""
        session_id = self._check_id(session_id)
        state = self._store.get(session_id)
        if state is None:
            raise UnknownSessionError(
                f"unknown session {_shown(session_id)} (never created, expired or evicted); create it first"
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
        state = self._store.get(session_id)
        if state is not None:
            return Session(self, state)
        try:
            return self.create(session_id, allowed=allowed, pinned=pinned, metadata=metadata)
        except SessionError:
            state = self._store.get(session_id)  # another worker created it first: use theirs
            if state is None:
                raise
            return Session(self, state)

    def close(self, session_id: str) -> None:
        """Forget a session; closing an unknown id is not an error.

        The close is remembered (see `was_closed`): a handle still working on the closed session must
        not bring it back, the way a session the store dropped may be brought back.
        """
        session_id = self._check_id(session_id)
        state = self._store.get(session_id)
        # which session was closed: its incarnation (None: none stored, or a store that keeps none; then the time)
        closed = ((state.incarnation or None) if state is not None else None, time.time())
        with self._closes_lock:  # before the delete: from then on a handle's failed read finds the close
            self._closes[session_id] = closed
            self._closes.move_to_end(session_id)
            while len(self._closes) > _MAX_CLOSES_KEPT:
                self._closes.popitem(last=False)
        self._store.delete(session_id)

    def was_closed(self, session: Session) -> bool:
        """True when this manager closed `session`'s id after that session was created: the handle is on
        a session the application ended, which must stay ended (not be created again from the handle's
        allowed and pinned tools). False when it is live, or the store dropped it by itself (evicted by
        newer sessions, expired): such a session may be created again.

        Only closes through this manager count, the last 10,000 of them: a close by another process
        sharing the store leaves no trace a store keeps, so it reads as a drop.
        """
        with self._closes_lock:
            closed = self._closes.get(session.id)
        if closed is None:
            return False
        incarnation, closed_at = closed
        if incarnation is not None and session._incarnation:
            # the very session that was closed, whatever the clocks of the hosts that created it say
            return bool(session._incarnation == incarnation)
        # created_at is wall-clock time set by `create`; a session created again after the close is a new one
        return session.created_at <= closed_at

    def __contains__(self, session_id: object) -> bool:
        # An id get() refuses (not text, blank, a lone surrogate) is no session's: False, as for any unknown id, so
        # a membership test on unchecked input answers; and it never reaches the store (Redis cannot encode some).
        try:
            session_id = self._check_id(session_id)
        except SessionError:
            return False
        return self._store.get(session_id) is not None

    def ids(self) -> list[str]:
        """The ids of the live sessions: one listing of the store (with Redis, a SCAN of its keyspace)."""
        return self._store.ids()

    def __len__(self) -> int:
        """The number of live sessions: as costly as `ids()`, and it fails as the store fails."""
        return len(self._store.ids())

    def __repr__(self) -> str:
        # No session count: that is a scan of the store (a SCAN of a shared Redis), and a repr must be
        # cheap and must not fail, as it is what a log line or a traceback shows during an outage.
        return f"SessionManager({self._index!r}, store={self._store!r})"

    def _enforce_caps(self, state: SessionState, spare: Collection[str] = ()) -> list[str]:
        """Evict least recently used discovered tools over the caps; the evicted names.

        Only tools still in the catalog count: one removed from the index holds no slot (its entry
        stays, as another worker's newer catalog may hold it, and it counts again once it is back).
        Names in `spare` (the tools a turn calls) go only once no other can; the most recent tool
        (a search's best hit) always stays.
        """
        evicted: list[str] = []
        cap = self.max_discovered
        budget = self.max_discovered_tokens
        if cap is None and budget is None:
            return evicted
        catalog = self._index.catalog
        by_age = sorted((n for n in state.last_used if n in catalog), key=state.last_used.__getitem__)
        if spare and len(by_age) > 1:  # least recent first, the spared after the others, the newest last
            *older, newest = by_age
            by_age = [n for n in older if n not in spare] + [n for n in older if n in spare] + [newest]

        def evict(name: str) -> None:
            evicted.append(name)
            del state.last_used[name]

        if cap is not None:
            while len(by_age) > cap:
                evict(by_age.pop(0))
        if budget is not None:
            from .tokens import tool_tokens

            cost = {n: tool_tokens(catalog[n], self.encoding) for n in by_age}
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


# --- session ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiscoveryUpdate:
    """What one discovery changed: new tools, already-known tools refreshed, tools evicted by caps."""

    added: tuple[str, ...] = ()
    refreshed: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()


class Session:
    """A handle on one session: a view (allowed subset + pinned + discovered) over the shared index.

    Handles are cheap; several handles on one id (in any process sharing the store) see the same
    state. A plain handle reads the store on each question and writes it on each change.
    `view()` gives a handle on one snapshot instead: its questions are answered from that one
    read, its changes apply to the snapshot at once and reach the store together, in one atomic
    update, on `commit()` (what a turn of the executor does).

    A handle belongs to one incarnation of its id: once the session is closed and created again
    (a conversation reset, perhaps with fewer tools allowed), the old handle's reads and writes
    raise UnknownSessionError instead of acting on the new session with the old one's rights.
    """

    def __init__(self, manager: SessionManager, state: SessionState, *, snapshot: bool = False) -> None:
        self._manager = manager
        self.id = state.id
        self.allowed: frozenset[str] | None = state.allowed
        self._incarnation = state.incarnation  # the session this handle is on, as against a later one of its id
        self.created_at = state.created_at  # when (wall clock) the session this handle is on was created
        self._snapshot = state if snapshot else None
        self._pending: list[_Change] = []
        self._base: SessionState | None = None  # a view's snapshot as read, for its commit
        self._namespaces: list[str] | None = None
        self._names: NameMap | None = None
        self._spare: frozenset[str] = frozenset()  # see `spare`
        self._within: tuple[Collection[str], Session] | None = None  # the last `within` asked, and its answer

    # --- state ---------------------------------------------------------------------------

    @property
    def manager(self) -> SessionManager:
        return self._manager

    @property
    def index(self) -> ToolIndex:
        return self._manager.index

    def _state(self) -> SessionState:
        if self._snapshot is not None:
            return self._snapshot
        state = self._manager.store.get(self.id)
        if state is None:
            raise UnknownSessionError(f"session {_shown(self.id)} has expired or was closed; create it again")
        self._check_incarnation(state)
        return state

    def _check_incarnation(self, state: SessionState) -> None:
        """UnknownSessionError when `state` is of a later session of this id than the one this handle is on."""
        if state.incarnation != self._incarnation:
            raise replaced_session(self.id)

    def _change(self, change: Callable[[SessionState], T]) -> T:
        """Apply a change: to the snapshot (kept for `commit`) or to the store, atomically, now."""
        if self._snapshot is not None:
            result = change(self._snapshot)
            self._pending.append(change)
            return result
        box: list[T] = []

        def apply(state: SessionState) -> None:
            # The store reads the session anew: it may be a later one of this id, whose allowed set is not
            # the one this handle checked the change against.
            self._check_incarnation(state)
            box[:] = [change(state)]  # the store may retry: the last run is the one kept

        self._manager.store.update(self.id, apply)
        return box[0]

    def view(self) -> Session:
        """A handle on one snapshot of this session (one store read); see `commit`."""
        state = self._state() if self._snapshot is None else self._snapshot.copy()
        view = Session(self._manager, state.copy(), snapshot=True)
        view.allowed = self.allowed  # a handle limited to fewer tools (`within`, a gateway's binding) stays so
        view._base = state
        view._names = self.name_map  # aliases learned in the view stay known to this handle
        view._namespaces = self._namespaces
        view._spare = self._spare  # the tools a turn calls stay spared through the handle's snapshot too
        return view

    def within(self, names: Collection[str]) -> Session:
        """This handle limited to those of its allowed tools that are among `names`: for a framework agent
        that holds fewer tools than the shared index, so a session stored with wider rights (or with
        every tool allowed, before the index grew) never searches, shows or admits a tool the agent lacks.

        The handle itself when it is within `names` already, else a copy that reads and writes the same
        session (the stored allowed set is unchanged). Do not `commit` a copy of a view: commit the view.
        """
        cached = self._within
        if cached is not None and cached[0] is names:  # a framework asks per tool per turn with the same names
            return cached[1]
        limit = names if isinstance(names, frozenset) else frozenset(_names("within", names))
        if self.allowed is not None and self.allowed <= limit:
            narrowed = self
        else:
            narrowed = copy.copy(self)
            narrowed.allowed = self._manager._intern(limit if self.allowed is None else self.allowed & limit)
            narrowed._namespaces = None  # they follow the allowed set
            narrowed._within = (names, narrowed)
        self._within = (names, narrowed)
        return narrowed

    def spare(self, names: Collection[str]) -> None:
        """Keep these tools loaded through this handle's later discoveries (a turn's searches) while the
        caps can evict others instead: the tools the turn calls, which its request carried."""
        if isinstance(names, str):
            raise SessionError("spare takes a collection of tool names, not a single string")
        self._spare = frozenset(names)

    @property
    def spared(self) -> frozenset[str]:
        """The tools `spare` named for this handle (none by default)."""
        return self._spare

    def commit(self) -> None:
        """Write a view's changes in one atomic update (replayed on the newest state, so changes
        made meanwhile by other handles or workers are kept); nothing to do when it has none."""
        if self._snapshot is None or not self._pending:
            return
        changes = list(self._pending)

        def replay(state: SessionState) -> None:
            # The stores shipped refuse another incarnation in their compare-and-set; this also covers a
            # store that checks only versions, whenever it runs the replay on a state it read again.
            self._check_incarnation(state)
            for change in changes:
                change(state)

        # The first attempt replays on the state as read (no second read); a conflict re-reads.
        self._snapshot = self._manager.store.update(self.id, replay, base=self._base)
        self._base = self._snapshot.copy()
        # Only now are they written: a failed update (Redis down) keeps them, and the next commit writes them.
        self._pending = self._pending[len(changes):]

    def state(self) -> SessionState:
        """A snapshot of the stored state."""
        if self._snapshot is None:
            return self._state()  # the store's `get` returns a copy already: a second one would only cost
        return self._snapshot.copy()

    @property
    def pinned(self) -> tuple[str, ...]:
        """Pinned tool names: always visible, first, never evicted (those this handle allows: see `within`)."""
        pinned = self._state().pinned
        allowed = self.allowed
        # Stored pins are within the stored allowed set; a narrower handle (`within`) shows only its own.
        return pinned if allowed is None else tuple(n for n in pinned if n in allowed)

    @property
    def discovered(self) -> tuple[str, ...]:
        """Discovered tool names in first-discovery order (still in the index and allowed)."""
        return tuple(n for n in self._state().discovered if self.is_allowed(n))

    def is_allowed(self, name: str) -> bool:
        """True when the tool exists in the index and is inside the session's allowed subset."""
        return name in self.index.catalog and (self.allowed is None or name in self.allowed)

    def is_visible(self, name: str) -> bool:
        """True when the tool is pinned or discovered (and still allowed)."""
        if not self.is_allowed(name):
            return False
        state = self._state()
        return name in state.pinned or name in state.last_used

    def loaded_names(self) -> frozenset[str]:
        """Names of the tools the session currently exposes: pinned and discovered (not evicted), and allowed."""
        state = self._state()
        return frozenset(n for n in (*state.pinned, *state.last_used) if self.is_allowed(n))

    def tool(self, name: str) -> Tool:
        """The full definition of an allowed tool; ToolNotAllowedError otherwise."""
        if not self.is_allowed(name):
            raise ToolNotAllowedError(f"tool {name!r} is not available in session {_shown(self.id)}")
        return self.index.catalog[name]

    def pinned_tools(self) -> list[Tool]:
        return self._visible(self._state())[0]

    def discovered_tools(self) -> list[Tool]:
        return self._visible(self._state())[1]

    def visible_tools(self) -> list[Tool]:
        """Pinned then discovered tools, full definitions, in a stable order."""
        pinned, discovered = self._visible(self._state())
        return pinned + discovered

    def _visible(self, state: SessionState) -> tuple[list[Tool], list[Tool]]:
        # Every tool shown goes through `is_allowed`: a handle narrowed by `within` (a framework agent's) shares
        # the stored session with wider ones, whose pins and discoveries it must neither show nor send.
        catalog = self.index.catalog
        allowed = self.is_allowed
        pinned = set(state.pinned)
        return (
            [catalog[n] for n in state.pinned if allowed(n)],
            [catalog[n] for n in state.discovered if n not in pinned and allowed(n)],
        )

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

    # --- search and changes --------------------------------------------------------------

    def search(
        self, query: str, k: int = 5, *, namespaces: Collection[str] | None = None, record: bool = True
    ) -> SearchResult:
        """Search only within the allowed subset; with `record`, the hits become discovered."""
        with tracing.retrieval(self.index, self.allowed) as traced:  # the index's own search opens no second span
            found = self.index.search(query, k, allowed=self.allowed, namespaces=namespaces)
            result = traced.result(found, k, namespaces)
        if record and result.hits:
            self.discover(result.names)
        return result

    def discover(self, names: Iterable[str]) -> DiscoveryUpdate:
        """Make tools visible (best first: earlier names are kept longer under a cap).

        Already-discovered names are refreshed (they become the most recently used). A name outside
        the allowed subset raises ToolNotAllowedError and changes nothing.
        """
        wanted = list(dict.fromkeys(_names("discover", names)))
        for name in wanted:
            if not self.is_allowed(name):
                raise ToolNotAllowedError(f"tool {name!r} is not available in session {_shown(self.id)}")
        if not wanted:
            return DiscoveryUpdate()
        enforce_caps = self._manager._enforce_caps
        spare = self._spare

        def discover(state: SessionState) -> DiscoveryUpdate:
            pinned = set(state.pinned)
            todo = [n for n in wanted if n not in pinned]
            added: list[str] = []
            refreshed: list[str] = []
            # Later ticks are more recent: give the best-ranked name the newest tick.
            for name in reversed(todo):
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
                state.discovered[-len(added) :] = [n for n in todo if n in new]
            evicted = enforce_caps(state, spare)
            kept_new = set(added) - set(evicted)
            kept_old = set(refreshed) - set(evicted)
            return DiscoveryUpdate(
                added=tuple(n for n in todo if n in kept_new),
                refreshed=tuple(n for n in todo if n in kept_old),
                evicted=tuple(evicted),
            )

        return self._change(discover)

    def touch(self, names: Iterable[str]) -> None:
        """Mark discovered tools as just used (a call keeps a tool from being evicted)."""
        names = list(_names("touch", names))
        if not names:
            return

        def touch(state: SessionState) -> None:
            for name in names:
                if name in state.last_used and name not in state.pinned:
                    state.tick += 1
                    state.last_used[name] = state.tick

        self._change(touch)

    def forget(self, names: Iterable[str] | None = None) -> None:
        """Hide discovered tools again (all of them when `names` is None).

        On a view, "all" is all those its snapshot holds: its commit replays the change on the newest state,
        where a tool another handle or worker discovered meanwhile stays discovered. On a handle limited by
        `within`, "all" (and any name given) is only of the tools it allows: others sharing the session keep theirs.
        """
        if names is not None:
            gone: set[str] | None = set(_names("forget", names))
        elif self._snapshot is not None:
            gone = set(self._snapshot.discovered).union(self._snapshot.last_used)
        else:
            gone = None  # one atomic update: everything discovered when it runs
        allowed = self.allowed  # not `is_allowed`: a tool gone from the index is still forgotten

        def forget(state: SessionState) -> None:
            todo = gone  # not reassigned: the store may run this again, on a newer state
            if allowed is not None and (state.allowed is None or not state.allowed <= allowed):
                # narrower than the stored session (`within`): only the tools it may use, of those asked
                todo = (
                    {n for n in (*state.discovered, *state.last_used) if n in allowed}
                    if todo is None
                    else todo & allowed
                )
            if todo is None:
                state.discovered.clear()
                state.last_used.clear()
            else:
                state.discovered = [n for n in state.discovered if n not in todo]
                for name in todo:
                    state.last_used.pop(name, None)

        self._change(forget)

    def pin(self, names: Collection[str]) -> None:
        """Pin more tools (appended in order; a discovered tool becomes pinned instead)."""
        added = self._manager._check_names(names, "pinned", self.allowed)

        def pin(state: SessionState) -> None:
            state.pinned = tuple(dict.fromkeys((*state.pinned, *added)))
            new = set(added)
            state.discovered = [n for n in state.discovered if n not in new]
            for name in new:
                state.last_used.pop(name, None)

        self._change(pin)

    def unpin(self, names: Collection[str]) -> None:
        """Unpin tools (they are hidden until a search finds them again)."""
        if isinstance(names, str):
            raise SessionError("unpin takes a collection of tool names, not a single string")
        gone = set(names)
        allowed = self.allowed
        stored = self._state().allowed
        if allowed is not None and (stored is None or not stored <= allowed):
            # narrower than the stored session (`within`): as `pin` refuses it, it must not change another agent's
            # pins; on the session itself a name it does not pin is nothing to unpin, as before
            outside = sorted(gone - allowed)
            if outside:
                raise ToolNotAllowedError(
                    f"unpin tool {outside[0]!r} is not among the tools this handle allows (it is limited by within); "
                    "unpin it through the session itself"
                )

        def unpin(state: SessionState) -> None:
            todo = gone
            if allowed is not None and (state.allowed is None or not state.allowed <= allowed):
                todo = gone & allowed  # narrower than the stored session (`within`), as `forget` decides it
            state.pinned = tuple(n for n in state.pinned if n not in todo)

        self._change(unpin)

    # --- provider names ------------------------------------------------------------------

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

    # --- deprecated: the bring-your-own-loop helpers moved to toolsearch.executor --------------

    def tools_for_request(self, format: ToolFormat = "openai_chat", **options: Any) -> list[dict[str, Any]]:
        """Deprecated: use `toolsearch.tools_for_request(session, format)`."""
        return _byol("tools_for_request")(self, format, **options)  # type: ignore[no-any-return]

    def handle_tool_calls(self, calls: Sequence[Any], *args: Any, **options: Any) -> list[ToolResult]:
        """Deprecated: use `toolsearch.handle_tool_calls(session, calls, functions)`."""
        return _byol("handle_tool_calls")(self, calls, *args, **options)  # type: ignore[no-any-return]

    async def ahandle_tool_calls(self, calls: Sequence[Any], *args: Any, **options: Any) -> list[ToolResult]:
        """Deprecated: use `await toolsearch.ahandle_tool_calls(session, calls, functions)`."""
        return await _byol("ahandle_tool_calls")(self, calls, *args, **options)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        allowed = "all" if self.allowed is None else len(self.allowed)
        return f"Session({_shown(self.id)}, allowed={allowed})"


# --- rules every entry point that opens a session shares ------------------------------------------


def quoted_names(names: Iterable[str], limit: int = 5) -> str:
    """Sorted names as a message lists them: the first `limit` quoted, then how many more."""
    shown = sorted(names)
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    return ", ".join(map(repr, shown[:limit])) + more


def check_session_settings(session: Session, allowed: Collection[str] | None, pinned: Collection[str]) -> None:
    """SessionError when a caller asks an existing session for other allowed tools than it holds; pins it lacks are
    pinned (a pin only shows a tool, and `Session.pin` / `unpin` change them between runs, as documented).

    `allowed=None` takes the stored tools as they are. The rule of the loop's `session_id=` and of every
    framework plug-in's session entry point: a session keeps the allowed tools it was created with, so a
    narrower set asked for later is refused rather than silently widened to the stored one.
    """
    for what, names in (("allowed", allowed), ("pinned", pinned)):
        if isinstance(names, str):
            raise SessionError(f"{what} takes a collection of tool names, not a single string; pass [{names!r}]")
        if names is not None and not isinstance(names, Iterable):
            raise wrong_type(what, names, "a collection of tool names")
    differences: list[str] = []
    if allowed is not None:
        given = frozenset(allowed)
        stored = session.allowed
        if stored is None:
            differences.append(f"allowed: the stored session allows every tool, this run passed {len(given)}")
        elif given != stored:
            parts = [f"the stored session also allows {quoted_names(stored - given)}"] if stored - given else []
            parts += [f"this run also passed {quoted_names(given - stored)}"] if given - stored else []
            differences.append("allowed: " + " and ".join(parts))
    if differences:
        shown = _shown(session.id)
        raise SessionError(
            f"session {shown} already exists with other tools than this run passed ({'; '.join(differences)}). "
            "A session keeps the allowed tools it was created with: to change them, close it "
            f"(sessions.close({shown})) and run again; to keep the stored ones, call without allowed=."
        )
    missing = [name for name in dict.fromkeys(pinned) if name not in session.pinned]
    if missing:
        session.pin(missing)  # ToolNotAllowedError for a tool the session may not show


def pinned_in(pinned: Iterable[str], index: ToolIndex, allowed: Collection[str] | None = None) -> list[str]:
    """The pins a new session can start with: those `index` holds now and `allowed` permits (None: all).

    A configured pin the index no longer holds (its upstream removed it), or one outside the allowed set
    a caller passed, is left out rather than refusing the session: `SessionManager.create` refuses both,
    and an agent's pins are its setting, not the caller's. The MCP gateway resolves its pins the same way.
    """
    catalog = index.catalog
    return [n for n in dict.fromkeys(_names("pinned", pinned)) if n in catalog and (allowed is None or n in allowed)]


def _names(what: str, names: Iterable[str]) -> Iterable[str]:
    """`names`, refused when it is one name as a string: iterating it would name one tool per character."""
    if isinstance(names, str):
        raise SessionError(f"{what} takes a collection of tool names, not a single string; pass [{names!r}]")
    return names


def _byol(name: str) -> Callable[..., Any]:
    # The executor sits above this module: it is looked up when a deprecated method is called,
    # so importing the state layer never loads the loop, the meta-tool or the providers.
    warnings.warn(
        f"Session.{name}() is deprecated; call toolsearch.{name}(session, ...) instead",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module("toolsearch.executor"), name)  # type: ignore[no-any-return]
