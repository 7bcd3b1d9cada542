"""The process-local session store: optimistic atomic updates, idle expiry and an LRU bound."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import InvalidArgumentError, SessionStoreError, UnknownSessionError
from ._state import (
    SessionState,
    StateUpdate,
    decode_state,
    encode_state,
    new_incarnation,
    replaced_session,
    shown_session_id,
)

__all__ = ["InMemorySessionStore", "MAX_UPDATE_ATTEMPTS"]

Clock = Callable[[], float]

# Optimistic updates retry when another writer got in first; every conflict means some writer
# succeeded, so this bound is only reached under pathological contention on one session.
MAX_UPDATE_ATTEMPTS = 1000


@dataclass(slots=True)
class _Entry:
    version: int
    incarnation: str  # beside the version, so a write is checked against both without decoding the state
    value: SessionState | str  # a private state, or its JSON text when the store serialises
    accessed: float


class InMemorySessionStore:
    """A process-local store with optional idle TTL and an LRU bound on the number of sessions.

    `update` is optimistic: `fn` runs outside the store's lock on a private copy, and the result
    is kept only if the session's version did not move meanwhile (else `fn` runs again on the
    newer state) and it is still the incarnation `fn` ran on (else UnknownSessionError: the
    session was closed and created again); the lock only guards the dictionary. `serialize=True` keeps each state as its
    JSON text, as a shared store does: a state that does not survive the round trip shows up
    here, in a single process, rather than in production.
    """

    def __init__(
        self,
        *,
        ttl_seconds: float | None = None,
        max_sessions: int | None = 1000,
        clock: Clock = time.monotonic,
        serialize: bool = False,
    ) -> None:
        # NaN compares false with everything: without isfinite it would be kept, and no session would ever expire
        if ttl_seconds is not None and not (math.isfinite(ttl_seconds) and ttl_seconds > 0):
            raise InvalidArgumentError(
                f"ttl_seconds must be a finite number of seconds above 0 (or None for no expiry), got {ttl_seconds!r}"
            )
        if max_sessions is not None and max_sessions < 1:
            raise InvalidArgumentError(f"max_sessions must be at least 1 (or None for no bound), got {max_sessions!r}")
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self.serialize = serialize
        self._clock = clock
        self._lock = threading.Lock()
        # ordered oldest access first, so expiry and the LRU bound pop from the front
        self._items: OrderedDict[str, _Entry] = OrderedDict()

    # --- helpers (called with the lock held) ---------------------------------------------------

    def _expired(self, entry: _Entry, now: float) -> bool:
        return self.ttl_seconds is not None and now - entry.accessed > self.ttl_seconds

    def _prune(self, now: float) -> None:
        while self._items:
            first = next(iter(self._items.values()))
            if not self._expired(first, now):
                break
            self._items.popitem(last=False)

    def _live(self, session_id: str, now: float) -> _Entry | None:
        entry = self._items.get(session_id)
        if entry is None:
            return None
        if self._expired(entry, now):
            del self._items[session_id]
            return None
        entry.accessed = now
        self._items.move_to_end(session_id)
        return entry

    def _pack(self, state: SessionState) -> SessionState | str:
        return encode_state(state) if self.serialize else state.copy()

    def _unpack(self, value: SessionState | str, session_id: str) -> SessionState:
        if isinstance(value, str):
            return decode_state(value, f"session {shown_session_id(session_id)} in the in-memory store")
        return value.copy()

    # --- the store interface -------------------------------------------------------------------

    def get(self, session_id: str) -> SessionState | None:
        with self._lock:
            entry = self._live(session_id, self._clock())
            value = None if entry is None else entry.value
        return None if value is None else self._unpack(value, session_id)

    def create(self, state: SessionState) -> bool:
        if not state.incarnation:
            state.incarnation = new_incarnation()
        now = self._clock()
        value = self._pack(state)
        with self._lock:
            self._prune(now)
            if self._live(state.id, now) is not None:
                return False
            self._items[state.id] = _Entry(state.version, state.incarnation, value, now)
            while self.max_sessions is not None and len(self._items) > self.max_sessions:
                self._items.popitem(last=False)
        return True

    def update(self, session_id: str, fn: StateUpdate, *, base: SessionState | None = None) -> SessionState:
        for _ in range(MAX_UPDATE_ATTEMPTS):
            if base is not None:  # the caller's earlier read stands in for this attempt's read
                state, base = base.copy(), None
            else:
                with self._lock:
                    entry = self._live(session_id, self._clock())
                    if entry is None:
                        raise _unknown(session_id)
                    value = entry.value
                state = self._unpack(value, session_id)
            read_version, incarnation = state.version, state.incarnation
            before = state.copy()
            fn(state)
            state.incarnation = incarnation  # which session this is, never a change an update makes
            if state == before:  # nothing changed: no write, no conflict possible
                return state
            state.version = read_version + 1
            packed = self._pack(state)
            with self._lock:
                entry = self._live(session_id, self._clock())
                if entry is None:
                    raise _unknown(session_id)
                # Checked before the version: each incarnation counts its versions from 0, so a write meant
                # for a closed one can match the version of the one created again under the same id.
                if entry.incarnation != incarnation:
                    raise replaced_session(session_id)
                if entry.version != read_version:
                    continue  # another writer won: run fn again on its result
                entry.version, entry.value = state.version, packed
            return state
        raise SessionStoreError(
            f"session {shown_session_id(session_id)}: gave up after {MAX_UPDATE_ATTEMPTS} conflicting concurrent "
            "updates"
        )

    def expires_in(self, session_id: str) -> float | None:
        """Seconds the session lives on if left idle (inf without a TTL); None when it does not exist.

        Unlike `get`, this is not activity: the idle expiry is not renewed.
        """
        with self._lock:
            now = self._clock()
            entry = self._items.get(session_id)
            if entry is None or self._expired(entry, now):
                return None
            return math.inf if self.ttl_seconds is None else self.ttl_seconds - (now - entry.accessed)

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._items.pop(session_id, None) is not None

    def ids(self) -> list[str]:
        with self._lock:
            self._prune(self._clock())
            return list(self._items)

    def __len__(self) -> int:
        return len(self.ids())

    def __repr__(self) -> str:
        return f"InMemorySessionStore(ttl_seconds={self.ttl_seconds}, max_sessions={self.max_sessions})"


def _unknown(session_id: str) -> UnknownSessionError:
    return UnknownSessionError(f"session {shown_session_id(session_id)} has expired or was closed; create it again")
