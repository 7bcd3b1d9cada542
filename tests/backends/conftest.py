"""Shared fixtures of the backend tests: the conformance suite's postgres cases find a server in $TOOLSEARCH_STORE."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pg_server import pg_server  # noqa: F401  (a fixture: the session's Postgres server)


@pytest.fixture(scope="session", autouse=True)
def _postgres_store(request: pytest.FixtureRequest) -> Iterator[None]:
    """When a postgres case is collected, the session's server is named in $TOOLSEARCH_STORE for the whole session,
    as a user's process would be given it (module-scoped indexes are built before any function fixture runs)."""
    wanted = any("postgres" in getattr(getattr(item, "callspec", None), "params", {}).values()
                 for item in request.session.items)
    if not wanted:
        yield
        return
    server = request.getfixturevalue("pg_server")
    before = os.environ.get("TOOLSEARCH_STORE")
    os.environ["TOOLSEARCH_STORE"] = server.dsn()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOOLSEARCH_STORE", None)
        else:
            os.environ["TOOLSEARCH_STORE"] = before
