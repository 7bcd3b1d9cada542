"""Session state as plain data, its versioned JSON form, and the store interface with one atomic update."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Protocol, runtime_checkable

from .._errors import SessionStateError, SessionStoreError, UnknownSessionError

__all__ = [
    "SCHEMA_VERSION",
    "SessionState",
    "SessionStore",
    "StateUpdate",
    "decode_state",
    "encode_state",
    "new_incarnation",
    "replaced_session",
    "shown_session_id",
    "unreadable_state",
]

_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """A copy of plain JSON data: dicts and lists (and tuples) copied at every depth, the leaves shared.

    Session metadata is copied several times per request (a read, a view, a store's copy from before an update),
    so not with `copy.deepcopy`: its memo (for shared and cyclic objects) and per-type dispatch buy nothing for
    JSON, whose leaves (text, numbers, booleans, null) are immutable, and cost about ten times as much.
    """
    kind = type(value)
    if kind is dict:
        # A dict of leaves only (the gateway's pins: tool name to fingerprint) is copied at C speed.
        if _JSON_LEAVES.issuperset(map(type, value.values())):
            return dict(value)
        return {k: copy_json(v) for k, v in value.items()}
    if kind is list:
        if _JSON_LEAVES.issuperset(map(type, value)):
            return list(value)
        return [copy_json(v) for v in value]
    if kind is tuple:  # not JSON, but a store's update may put one in: its lists still need copying
        return tuple(copy_json(v) for v in value)
    if kind in _JSON_LEAVES:
        return value
    # Anything else an update put in (a set, a defaultdict, an object): copied as Python copies it, kind and all,
    # so a change to it in place still counts as a change and a read's copy stays apart from the stored state.
    return copy.deepcopy(value)


# Bumped when the JSON form changes incompatibly (adding `incarnation` did not: older readers ignore it, and a
# state without it reads as incarnation ""); a reader refuses a schema it does not know
# rather than guess (a rolling deploy must not silently drop another version's sessions).
SCHEMA_VERSION = 1

# Changes one state in place. A store may call it more than once (after a conflict, on a fresh
# copy), so it must depend only on the state it is given.
StateUpdate = Callable[["SessionState"], object]


@dataclass(slots=True)
class SessionState:
    """Everything a session remembers, as plain data a shared store can serialise.

    `discovered` keeps first-discovery order (a stable order keeps provider prompt caches warm);
    `last_used` holds a per-session tick for each discovered tool, for least-recently-used eviction.
    `version` counts the writes; stores set it and use it to detect concurrent updates.
    `incarnation` is a random token a session gets when it is created: an id closed and created again
    is another incarnation, starting again at version 0, so stores compare it along with the version
    and refuse a write meant for the closed one (a turn still running on it) instead of letting it
    land on the new one. States written before incarnations existed read as "".
    """

    id: str
    allowed: frozenset[str] | None = None
    pinned: tuple[str, ...] = ()
    discovered: list[str] = field(default_factory=list)
    last_used: dict[str, int] = field(default_factory=dict)
    tick: int = 0
    created_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    incarnation: str = ""  # last, so positional construction written for earlier releases still works

    def copy(self) -> SessionState:
        """An independent copy (the immutable allowed set and pinned tuple are shared).

        Metadata is copied whole, nested values too: a store compares an update's result with its copy
        from before (an edit of a nested value must count as a change), and `get` returns a copy.
        """
        return SessionState(
            self.id,
            self.allowed,
            self.pinned,
            list(self.discovered),
            dict(self.last_used),
            self.tick,
            self.created_at,
            copy_json(self.metadata) if self.metadata else {},
            self.version,
            self.incarnation,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (allowed sorted, so equal states serialise equally)."""
        return {
            "schema": SCHEMA_VERSION,
            "id": self.id,
            "version": self.version,
            "allowed": None if self.allowed is None else sorted(self.allowed),
            "pinned": list(self.pinned),
            "discovered": list(self.discovered),
            "last_used": dict(self.last_used),
            "tick": self.tick,
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
            "incarnation": self.incarnation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionState:
        """The state of a `to_dict` form; ValueError (saying which field) for anything else."""
        if not isinstance(data, Mapping):
            raise SessionStateError(f"expected a JSON object, got {type(data).__name__}")
        schema = data.get("schema", SCHEMA_VERSION)
        if schema != SCHEMA_VERSION:
            raise SessionStateError(
                f"state schema {schema!r} is not the one this toolsearch reads ({SCHEMA_VERSION}); "
                "run one toolsearch version against one key prefix (or one Redis database)"
            )
        allowed = data.get("allowed")
        used = _typed(data, "last_used", dict, {})
        if not all(isinstance(k, str) and isinstance(v, int) for k, v in used.items()):
            raise SessionStateError("field 'last_used' must map tool names to integers")
        try:
            state = cls(
                id=_typed(data, "id", str),
                allowed=None if allowed is None else frozenset(_names(allowed, "allowed")),
                pinned=tuple(_names(data.get("pinned") or [], "pinned")),
                discovered=_names(data.get("discovered") or [], "discovered"),
                last_used=dict(used),
                tick=_integer(data, "tick", 0),
                created_at=float(_typed(data, "created_at", int | float, 0.0)),
                metadata=dict(_typed(data, "metadata", dict, {})),
                # Required: a store's compare-and-set matches it as written (Redis: in Lua), so a missing or
                # mistyped version would make every update look like a conflict with another worker.
                version=_integer(data, "version"),
                # Optional: states written by earlier releases have none, and compare as "" (as they did, by version).
                incarnation=_typed(data, "incarnation", str, ""),
            )
        except TypeError as exc:
            raise SessionStateError(str(exc)) from None
        return state


def _typed(data: Mapping[str, Any], key: str, kind: type | UnionType, default: Any = ...) -> Any:
    if key not in data or data[key] is None:
        if default is ...:
            raise SessionStateError(f"field {key!r} is missing")
        return default
    value = data[key]
    if not isinstance(value, kind):
        what = {"int": "an int", "str": "a string", "dict": "an object"}.get(getattr(kind, "__name__", ""), "a number")
        raise SessionStateError(f"field {key!r} must be {what}, got {type(value).__name__}")
    return value


def _integer(data: Mapping[str, Any], key: str, default: Any = ...) -> int:
    value = _typed(data, key, int, default)
    if isinstance(value, bool):
        raise SessionStateError(f"field {key!r} must be an int, got bool")  # (bool is an int to isinstance)
    return int(value)


def _names(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise SessionStateError(f"field {key!r} must be a list of tool names")
    return value


def new_incarnation() -> str:
    """A fresh random incarnation token (64 bits: two incarnations of one id never share one)."""
    return secrets.token_hex(8)


_SHOWN_ID_LENGTH = 64  # of an id quoted in a message: enough to tell conversations apart


def shown_session_id(session_id: str, *, prefix: str = "") -> str:
    """A session id (or its store key, `prefix` + id) as a message quotes it: whole when the id is short, else
    up to the id's first characters and the length. Ids may be long (up to session.MAX_SESSION_ID_LENGTH), and
    every message that names one, the session's or a store's, quotes it the same way."""
    text = prefix + session_id
    if len(session_id) <= _SHOWN_ID_LENGTH:
        return repr(text)
    return f"{text[: len(prefix) + _SHOWN_ID_LENGTH]!r}... ({len(text)} characters)"


def replaced_session(session_id: str) -> UnknownSessionError:
    """The error for a write (or a handle) meant for an incarnation of the session that was closed."""
    return UnknownSessionError(
        f"session {shown_session_id(session_id)} was closed and created again since this state was read, so nothing "
        "was written to the new one; get it again (SessionManager.get) and work on that, whose allowed and pinned "
        "tools may differ"
    )


def encode_state(state: SessionState) -> str:
    """The stored JSON text of a state."""
    return json.dumps(state.to_dict(), separators=(",", ":"), ensure_ascii=False)


def decode_state(raw: str | bytes, where: str) -> SessionState:
    """The state in stored JSON text; SessionStoreError naming `where` when it is not one."""
    try:
        return SessionState.from_dict(json.loads(raw))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise unreadable_state(where, exc) from None


def unreadable_state(where: str, problem: object) -> SessionStoreError:
    """The error for stored text that is not a session state this version reads."""
    return SessionStoreError(
        f"{where} does not hold a readable session state: {problem}. "
        "Delete that key (the session starts over), or give this deployment a Redis of its own: another database "
        "number in its URL (redis://host:6379/1; `toolsearch mcp serve` takes no key prefix), or in code its own "
        "key prefix (RedisSessionStore(url, prefix=...))."
    )


@runtime_checkable
class SessionStore(Protocol):
    """Where session states live; expiry (TTL) and size bounds are the store's job.

    Every change goes through `update`, one atomic read-modify-write: the store gives `fn` a
    private copy of the current state and keeps the result only if nobody wrote the session in
    between (else it retries on the newer state), so concurrent writers from any number of
    threads or processes never lose each other's changes. `get` returns a copy: changing it
    changes nothing stored. Failures (store unreachable, unreadable state) raise SessionStoreError.
    """

    def get(self, session_id: str) -> SessionState | None:
        """The state, or None when the session does not exist (or expired)."""
        ...

    def create(self, state: SessionState) -> bool:
        """Store a new session; False (and nothing written) when the id already exists.

        The stores shipped give a state without an incarnation a fresh one, set on `state` too, so
        the caller's copy names the session it created (and can serve as an update's `base`).
        """
        ...

    def update(self, session_id: str, fn: StateUpdate, *, base: SessionState | None = None) -> SessionState:
        """Apply `fn` atomically and return the state as stored; UnknownSessionError when absent.

        `base` is a state the caller read earlier: the first attempt applies `fn` to a copy of
        it without reading again, and succeeds if the stored version is still `base.version`.
        A state of another incarnation (the session was closed and created again since `base`,
        or since this update read it) is never written: UnknownSessionError, saying so. `fn`
        cannot change the incarnation.
        """
        ...

    def delete(self, session_id: str) -> bool:
        """Forget a session; True when it existed."""
        ...

    def ids(self) -> list[str]:
        """The ids of the live sessions."""
        ...
