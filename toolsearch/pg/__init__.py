"""A catalog in Postgres that a fleet shares: `PostgresIndex.open(dsn, name, tools)` in every process.

One job per module: `_connect` (DSN, pool, errors), `schema` (tables), `writer` (transactional
changes), `search` (the search statement), `mirror` (a process's copy and how it follows changes),
`index` (PostgresIndex). The backend itself is `toolsearch.backends.postgres` (name "postgres").
psycopg is imported only when a store is first used.
"""

from __future__ import annotations

from ._connect import STORE_ENV, display_dsn, is_postgres_url
from .index import DEFAULT_CATALOG, PostgresIndex

__all__ = ["PostgresIndex", "DEFAULT_CATALOG", "STORE_ENV", "display_dsn", "is_postgres_url"]
