"""The catalog store's tables: created once per database (under a lock), one pair of tables per named catalog.

    toolsearch_catalogs     one row per catalog: name, version, embedding model and dimension, BM25 totals
    toolsearch_changes      (catalog, version) -> the names a change upserted and removed: how readers catch up
    toolsearch_embeddings   (model, text digest) -> vector: every embedding computed once, for every catalog
    toolsearch_tools_<id>   the tools of catalog <id>: definition, schema digest, searchable text, weighted
                            full-text vector, its length, the embedding and its model; an HNSW (cosine) index
    toolsearch_lexemes_<id> document frequency of each full-text lexeme of catalog <id> (BM25's idf)
    toolsearch_postings_<id> (lexeme, tool) -> the lexeme's field-weighted frequency in the tool and the tool's
                            length: the inverted lists BM25 reads, one index range per query word, from the
                            primary key alone (it includes both numbers: an index-only scan, where fetching
                            each posting's row from the table would visit about one table page per posting)

A catalog records the schema version that wrote it; an older one is brought up to this one when it is opened
(`upgrade_catalog`), a newer one is refused.

A catalog's tables are named by its numeric id, never by a user's text, so no name reaches SQL as code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .._errors import BackendError, IndexFormatError

__all__ = ["SCHEMA_VERSION", "CHANNEL", "CatalogRow", "ensure_schema", "find_catalog", "catalog_by_id",
           "create_catalog", "copy_catalog", "drop_catalog", "catalog_tables", "spare_table_id", "swap_tables",
           "tools_table", "lexemes_table", "postings_table", "hnsw_index", "upgrade_catalog"]

# 1: the first; 2: the postings' primary key includes tf and doc_len (index-only reads)
SCHEMA_VERSION = 2
CHANNEL = "toolsearch_catalog"  # NOTIFY payload: "<catalog id>:<version>"
# pg_advisory_xact_lock key under which the shared tables are created (any constant of our own)
_SCHEMA_LOCK = 0x7473_0001
# HNSW build parameters: faiss's local HNSW uses M=32 and efConstruction=200; pgvector's defaults (16, 64)
# build ~3x faster at a small recall cost, which ef_search buys back (benchmarks/postgres.py reports recall).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64

_SHARED = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS toolsearch_catalogs (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    version bigint NOT NULL DEFAULT 0,
    model text NOT NULL,
    dimension integer NOT NULL,
    frozen boolean NOT NULL DEFAULT false,
    doc_count bigint NOT NULL DEFAULT 0,
    total_len double precision NOT NULL DEFAULT 0,
    schema_version integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS toolsearch_changes (
    catalog_id bigint NOT NULL REFERENCES toolsearch_catalogs (id) ON DELETE CASCADE,
    version bigint NOT NULL,
    upserted text[],
    removed text[] NOT NULL,
    PRIMARY KEY (catalog_id, version)
);
CREATE TABLE IF NOT EXISTS toolsearch_embeddings (
    model text NOT NULL,
    digest text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (model, digest)
);
"""


def tools_table(catalog_id: int) -> str:
    return f"toolsearch_tools_{int(catalog_id)}"


def lexemes_table(catalog_id: int) -> str:
    return f"toolsearch_lexemes_{int(catalog_id)}"


def postings_table(catalog_id: int) -> str:
    return f"toolsearch_postings_{int(catalog_id)}"


def hnsw_index(catalog_id: int) -> str:
    """The statement that builds a catalog's HNSW index (cosine), named `<tools table>_hnsw`."""
    tools = tools_table(catalog_id)
    return (f"CREATE INDEX {tools}_hnsw ON {tools} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")


def catalog_tables(catalog_id: int, dimension: int) -> str:
    """The statements that make catalog <id>'s tables and indexes."""
    tools, lexemes, postings = tools_table(catalog_id), lexemes_table(catalog_id), postings_table(catalog_id)
    return f"""
CREATE TABLE {tools} (
    id serial UNIQUE,
    name text PRIMARY KEY,
    namespace text,
    fingerprint text NOT NULL,
    definition jsonb NOT NULL,
    search_text text NOT NULL,
    lexemes tsvector NOT NULL,
    doc_len real NOT NULL,
    model text NOT NULL,
    embedding vector({int(dimension)}) NOT NULL
);
{hnsw_index(catalog_id)};
CREATE INDEX ON {tools} (lower(name));
CREATE INDEX ON {tools} (namespace);
CREATE TABLE {lexemes} (lexeme text PRIMARY KEY, df bigint NOT NULL);
CREATE TABLE {postings} (lexeme text NOT NULL, tool integer NOT NULL, tf real NOT NULL, doc_len real NOT NULL,
                         PRIMARY KEY (lexeme, tool) INCLUDE (tf, doc_len));
CREATE INDEX ON {postings} (tool);
"""


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """A catalog's row: its id (which names its tables), name, version, model, dimension, and whether it is frozen."""

    id: int
    name: str
    version: int
    model: str
    dimension: int
    frozen: bool


def ensure_schema(conn: Any) -> None:
    """Create the shared tables and the vector extension once; concurrent first workers take turns."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        exists = conn.execute("SELECT to_regclass('toolsearch_catalogs') IS NOT NULL").fetchone()[0]
        if not exists:
            conn.execute(_SHARED)


_COLUMNS = "id, name, version, model, dimension, frozen"


def _row(found: Any) -> CatalogRow | None:
    return None if found is None else CatalogRow(*found)


def find_catalog(conn: Any, name: str, *, lock: bool = False, skip_locked: bool = False) -> CatalogRow | None:
    """The catalog called `name`; with `lock`, its row is held until the transaction ends (writers take turns), and
    with `skip_locked` too, None while another transaction holds it (instead of waiting for it)."""
    sql = (f"SELECT {_COLUMNS} FROM toolsearch_catalogs WHERE name = %s"
           + (" FOR UPDATE" if lock else "") + (" SKIP LOCKED" if lock and skip_locked else ""))
    return _row(conn.execute(sql, (name,)).fetchone())


def catalog_by_id(conn: Any, catalog_id: int) -> CatalogRow | None:
    return _row(conn.execute(f"SELECT {_COLUMNS} FROM toolsearch_catalogs WHERE id = %s", (catalog_id,)).fetchone())


def create_catalog(conn: Any, name: str, model: str, dimension: int) -> CatalogRow:
    """A new, empty catalog and its tables (inside the caller's transaction)."""
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise BackendError(f"the embedding model {model!r} reports dimension {dimension!r}; it needs a positive one")
    found = conn.execute(
        "INSERT INTO toolsearch_catalogs (name, model, dimension, schema_version) VALUES (%s, %s, %s, %s) "
        f"RETURNING {_COLUMNS}",
        (name, model, dimension, SCHEMA_VERSION),
    ).fetchone()
    row = CatalogRow(*found)
    conn.execute(catalog_tables(row.id, dimension))
    return row


def copy_catalog(conn: Any, source: CatalogRow, name: str) -> CatalogRow:
    """A new catalog holding what `source` holds (no embedding is computed again): how a frozen one is forked."""
    row = create_catalog(conn, name, source.model, source.dimension)
    conn.execute(f"INSERT INTO {tools_table(row.id)} SELECT * FROM {tools_table(source.id)}")
    conn.execute(f"INSERT INTO {lexemes_table(row.id)} SELECT * FROM {lexemes_table(source.id)}")
    conn.execute(f"INSERT INTO {postings_table(row.id)} SELECT * FROM {postings_table(source.id)}")
    conn.execute(f"SELECT setval(pg_get_serial_sequence('{tools_table(row.id)}', 'id'), "
                 f"(SELECT coalesce(max(id), 0) + 1 FROM {tools_table(row.id)}), false)")
    conn.execute(
        "UPDATE toolsearch_catalogs AS t SET doc_count = s.doc_count, total_len = s.total_len, version = s.version "
        "FROM toolsearch_catalogs AS s WHERE t.id = %s AND s.id = %s",
        (row.id, source.id),
    )
    return CatalogRow(row.id, name, source.version, source.model, source.dimension, False)


def upgrade_catalog(conn: Any, row: CatalogRow) -> None:
    """Bring a catalog an earlier toolsearch wrote up to SCHEMA_VERSION (in the caller's transaction, which takes the
    catalog's lock only when there is something to do); refuse one a later toolsearch wrote."""
    query = "SELECT schema_version FROM toolsearch_catalogs WHERE id = %s"
    if conn.execute(query, (row.id,)).fetchone()[0] == SCHEMA_VERSION:
        return
    version = conn.execute(query + " FOR UPDATE", (row.id,)).fetchone()[0]  # writers and other openers wait
    if version > SCHEMA_VERSION:
        raise IndexFormatError(
            f"the catalog {row.name!r} was written by a later toolsearch (catalog schema {version}; this one reads "
            f"up to {SCHEMA_VERSION}): upgrade toolsearch (pip install -U 'toolsearch[postgres]')"
        )
    if version < 2:  # the postings read index-only: a covering index beside the old primary key
        postings = postings_table(row.id)
        conn.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {postings}_covering ON {postings} (lexeme, tool) "
                     "INCLUDE (tf, doc_len)")
    conn.execute("UPDATE toolsearch_catalogs SET schema_version = %s WHERE id = %s", (SCHEMA_VERSION, row.id))


def spare_table_id(conn: Any) -> int:
    """A number no catalog has or will have (drawn from the catalogs' id sequence): tables made under it (a rebuild's,
    see `swap_tables`) never meet another catalog's."""
    return int(conn.execute("SELECT nextval(pg_get_serial_sequence('toolsearch_catalogs', 'id'))").fetchone()[0])


# How long a swap waits for the old tables' lock at a time: readers that come meanwhile queue behind that wait, so it
# is short, and tried again until the caller's patience is spent (then it waits in line).
_SWAP_TRY_MS = 200


def swap_tables(conn: Any, staged_id: int, catalog_id: int, *, patience: float) -> None:
    """Put the tables made under `staged_id` in the place of catalog `catalog_id`'s, which are dropped (whatever state
    they are in: one dropped or changed by hand), their indexes and id sequence renamed to match (inside the caller's
    transaction). The old tables stay locked from here to the commit: searches that come meanwhile wait for it, so the
    caller swaps last. Their lock is taken in short tries first (each a savepoint), so that a reader busy with them
    (a whole read) does not make every other reader queue behind this wait; after `patience` seconds, in line."""
    from psycopg.errors import LockNotAvailable

    old = [tools_table(catalog_id), lexemes_table(catalog_id), postings_table(catalog_id)]
    new = [tools_table(staged_id), lexemes_table(staged_id), postings_table(staged_id)]
    present = [t for t in old if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is not None]
    deadline = time.monotonic() + patience
    while present:
        patient = time.monotonic() < deadline
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {_SWAP_TRY_MS if patient else 0}")
                conn.execute(f"LOCK TABLE {', '.join(present)} IN ACCESS EXCLUSIVE MODE")
            break
        except LockNotAvailable:
            time.sleep(0.05)
    conn.execute("SET LOCAL lock_timeout = 0")
    conn.execute(f"DROP TABLE IF EXISTS {', '.join(old)}")
    for staged, target in zip(new, old, strict=True):
        indexes = conn.execute(
            "SELECT i.relname FROM pg_index AS x JOIN pg_class AS i ON i.oid = x.indexrelid WHERE x.indrelid = "
            "to_regclass(%s)", (staged,)).fetchall()
        for (index,) in indexes:
            if index.startswith(staged):
                conn.execute(f"ALTER INDEX {index} RENAME TO {target}{index[len(staged):]}")
        conn.execute(f"ALTER TABLE {staged} RENAME TO {target}")
    sequence = conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (old[0],)).fetchone()[0]
    if sequence is not None:
        conn.execute(f"ALTER SEQUENCE {sequence} RENAME TO {old[0]}_id_seq")


def drop_catalog(conn: Any, row: CatalogRow) -> None:
    with conn.transaction():
        conn.execute(f"DROP TABLE IF EXISTS {tools_table(row.id)}, {lexemes_table(row.id)}, {postings_table(row.id)}")
        conn.execute("DELETE FROM toolsearch_catalogs WHERE id = %s", (row.id,))
