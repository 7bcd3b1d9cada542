"""Usage stores for tests: a pending-search store whose backing service is down."""

from __future__ import annotations

from toolsearch.usage import PendingSearch


class DownPending:
    """A pending store whose backing service is down: every operation fails."""

    def __repr__(self) -> str:
        return "DownPending('tcp://pending.internal:7000')"

    def add(self, session_id: str, search: PendingSearch) -> None:
        raise ConnectionError("pending.internal:7000 refused the connection")

    def credit(self, session_id: str, tool: str) -> PendingSearch | None:
        raise ConnectionError("pending.internal:7000 refused the connection")

    def forget(self, session_id: str) -> None:
        raise ConnectionError("pending.internal:7000 refused the connection")
