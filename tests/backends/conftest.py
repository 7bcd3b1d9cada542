"""Shared fixtures of the backend tests: the conformance suite's postgres cases find a server in $TOOLSEARCH_STORE."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pg_server import pg_server  # noqa: F401  (a fixture: the session's Postgres server)


@pytest.fixture(scope="module", autouse=True)
def _postgres_store(request: pytest.FixtureRequest) -> Iterator[None]:
    """While a module with postgres cases runs, the session's server is named in $TOOLSEARCH_STORE, as a user's
    process would be given it (its module-scoped indexes are built before any function fixture runs). Set for
    that module only: the gateway reads the same variable, and other tests must not find a store there."""
    wanted = any(
        item.module is request.module and "postgres" in getattr(getattr(item, "callspec", None), "params", {}).values()
        for item in request.session.items
    )
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
