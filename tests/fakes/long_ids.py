"""A session id at the length limit, and the store messages that must quote it short (every session store)."""

from __future__ import annotations

import pytest

from toolsearch import SessionStoreError, UnknownSessionError
from toolsearch.session import MAX_SESSION_ID_LENGTH
from toolsearch.stores import SessionState, SessionStore

LONG_ID = ("conversation-" + "0123456789abcdef" * 16)[:MAX_SESSION_ID_LENGTH]


def assert_quoted_short(message: str, session_id: str = LONG_ID) -> str:
    """`message` names `session_id` by its first 64 characters and its length, never whole."""
    assert session_id not in message, message
    assert f"{session_id[:64]!r}... ({len(session_id)} characters)" in message, message
    return message


def check_replaced_and_contended_messages(store: SessionStore) -> None:
    """A session closed and created again under a stale handle, and an update that loses every attempt: both
    messages quote the long id short."""
    store.create(SessionState(LONG_ID))
    stale = store.get(LONG_ID)
    store.delete(LONG_ID)
    store.create(SessionState(LONG_ID))
    with pytest.raises(UnknownSessionError, match="was closed and created again") as replaced:
        store.update(LONG_ID, lambda state: state.discovered.append("calculator"), base=stale)
    assert_quoted_short(str(replaced.value))

    def always_second(state: SessionState) -> None:  # another writer wins every attempt
        store.update(LONG_ID, lambda other: setattr(other, "tick", other.tick + 1))
        state.discovered.append("calculator")

    with pytest.raises(SessionStoreError, match="gave up after") as gave_up:
        store.update(LONG_ID, always_second)
    assert_quoted_short(str(gave_up.value))
