"""A catalog in Postgres that a fleet shares: `PostgresIndex.open(dsn, name, tools)` in every process.

One job per module: `_connect` (DSN, pool, errors), `schema` (tables), `writer` (transactional
changes), `search` (the search statement), `mirror` (a process's copy and how it follows changes),
`index` (PostgresIndex), `cli` (`--store` on build and query). The backend itself is
`toolsearch.backends.postgres` (name "postgres"). Nothing here is imported until it is used (the CLI
imports `cli` at start), and psycopg only when a store is first reached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._connect import STORE_ENV, display_dsn, is_postgres_url

if TYPE_CHECKING:
    from .index import DEFAULT_CATALOG, PostgresIndex

__all__ = ["PostgresIndex", "DEFAULT_CATALOG", "STORE_ENV", "display_dsn", "is_postgres_url"]


def __getattr__(name: str) -> Any:
    if name in ("PostgresIndex", "DEFAULT_CATALOG"):
        from . import index

        return getattr(index, name)
    raise AttributeError(f"module 'toolsearch.pg' has no attribute {name!r}")
