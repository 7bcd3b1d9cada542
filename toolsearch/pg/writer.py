"""Catalog changes in Postgres: tool rows made once (embeddings looked up by text digest, computed only when new),
then written in one transaction that bumps the catalog's version and notifies every reader.

A change never half lands: the catalog row is locked (`FOR UPDATE`, writers take turns), old rows are
deleted and their lexemes' document frequencies taken back, new rows are inserted and counted, the
version is bumped and the change recorded, and `pg_notify` fires, all at one COMMIT.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.bm25 import split_words
from ..embeddings import Embedder, EmbeddingCache, document_cache_id, embed_texts, text_key
from ..text import embedding_text, tool_text
from ..tools import Tool
from .schema import (
    CHANNEL,
    SCHEMA_VERSION,
    CatalogRow,
    catalog_tables,
    hnsw_index,
    lexemes_table,
    postings_table,
    spare_table_id,
    swap_tables,
    tools_table,
)
from .search import FIELD_WEIGHTS

__all__ = ["ToolRow", "tool_rows", "apply_change", "apply_rebuild", "needs_settling", "settle", "KEEP_CHANGES",
           "MANY"]

# Change records kept per catalog: a reader further behind than this reloads the whole catalog.
KEEP_CHANGES = 10_000
# A change that upserts more names than this records none (readers reload): a million-name array is no record.
MANY = 10_000
# A change at least this large (or a catalog's first) refreshes the planner's statistics in its transaction.
ANALYZE_AFTER = 1_000
# A catalog's first write of at least this many tools builds its HNSW graph after the rows are in, with this memory.
BULK = 10_000
BULK_MEMORY = "2GB"  # a million 384-d vectors and their graph: more than 1 GB, or the build slows down


@dataclass(frozen=True, slots=True)
class ToolRow:
    """One tool as stored: its fields for the weighted full-text vector, its definition and its embedding."""

    name: str
    namespace: str | None
    fingerprint: str
    definition: str  # JSON of Tool.to_dict()
    search_text: str  # the dense passage (toolsearch.text.embedding_text)
    name_words: str  # weight A
    context: str  # weight B: namespace and tags
    description: str  # weight C
    parameters: str  # weight D
    embedding: np.ndarray


def _lookup(conn: Any, model: str, digests: list[str], dimension: int) -> dict[str, np.ndarray]:
    # A vector of another dimension under the same model id was embedded by another model that had this id (a model
    # folder replaced, an embedder's id reused): not this model's, so it is embedded again (and replaced below).
    rows = conn.execute(
        "SELECT digest, embedding FROM toolsearch_embeddings WHERE model = %s AND digest = ANY(%s) "
        "AND vector_dims(embedding) = %s",
        (model, digests, dimension),
    ).fetchall()
    # an untyped `vector` column comes back as pgvector's Vector (a typed one as a numpy array)
    return {digest: np.asarray(getattr(v, "to_numpy", lambda v=v: v)(), dtype=np.float32) for digest, v in rows}


def _remember(conn: Any, model: str, digests: list[str], vectors: np.ndarray) -> None:
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO toolsearch_embeddings (model, digest, embedding) VALUES (%s, %s, %s) "
            "ON CONFLICT (model, digest) DO UPDATE SET embedding = EXCLUDED.embedding "
            "WHERE vector_dims(toolsearch_embeddings.embedding) <> vector_dims(EXCLUDED.embedding)",
            [(model, d, v) for d, v in zip(digests, vectors, strict=True)],
        )


def embeddings(
    connector: Any, embedder: Embedder, texts: Sequence[str], *, cache: EmbeddingCache | None, progress: bool | None
) -> np.ndarray:
    """One unit vector per text: from the store's shared table when any process embedded it before, else computed
    here (through the local cache) and added to that table, so a fleet embeds each text once.

    Keyed like the local cache, by the model that embeds tools (`document_cache_id`): catalogs whose requests
    go through different encoders (the tools model, a tuned one, the stock model) share their tools' vectors.
    Rows a store kept under the whole embedder's id, as it did before, are read once and kept under that key.
    """
    model = document_cache_id(embedder)
    digests = [text_key(t).hex() for t in texts]
    found = _stored(connector, model, digests, embedder.dimension)
    missing = [d for d in digests if d not in found]
    if missing and embedder.model_id != model:
        earlier = _stored(connector, embedder.model_id, missing, embedder.dimension)
        if earlier:
            _store(connector, model, list(earlier), np.stack(list(earlier.values())))
            found.update(earlier)
            missing = [d for d in missing if d not in found]
    if missing:
        at = {d: i for i, d in enumerate(digests)}
        fresh = embed_texts(embedder, [texts[at[d]] for d in missing], cache=cache, progress=progress)
        found.update(zip(missing, fresh, strict=True))
        _store(connector, model, missing, fresh)
    if not texts:
        return np.zeros((0, embedder.dimension), dtype=np.float32)
    return np.stack([found[d] for d in digests]).astype(np.float32, copy=False)


_CHUNK = 5_000  # digests per statement


def _stored(connector: Any, model: str, digests: list[str], dimension: int) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    for start in range(0, len(digests), _CHUNK):
        part = digests[start : start + _CHUNK]
        found.update(connector.call("read stored embeddings",
                                    lambda conn, part=part: _lookup(conn, model, part, dimension), read=True))
    return found


def _store(connector: Any, model: str, digests: list[str], vectors: np.ndarray) -> None:
    for start in range(0, len(digests), _CHUNK):
        stop = start + _CHUNK
        connector.call("store embeddings",
                       lambda conn, s=start, e=stop: _remember(conn, model, digests[s:e], vectors[s:e]))


def tool_rows(
    connector: Any, embedder: Embedder, tools: Sequence[Tool], *, cache: EmbeddingCache | None, progress: bool | None
) -> list[ToolRow]:
    """The stored form of `tools` (the last definition of a name wins), with their embeddings."""
    latest = list({t.name: t for t in tools}.values())
    passages = [embedding_text(t) for t in latest]
    vectors = embeddings(connector, embedder, passages, cache=cache, progress=progress)
    rows = []
    for tool, passage, vector in zip(latest, passages, vectors, strict=True):
        text = tool_text(tool)
        rows.append(ToolRow(
            name=tool.name,
            namespace=tool.namespace,
            fingerprint=tool.fingerprint,
            definition=json.dumps(tool.to_dict(), ensure_ascii=False),
            search_text=passage,
            name_words=" ".join(filter(None, (split_words(tool.name), text.name_words))),
            context=" ".join(filter(None, (text.namespace, text.tags))),
            description=split_words(text.description),
            parameters=split_words(text.parameters),
            embedding=vector,
        ))
    return rows


_STAGING = """
CREATE TEMP TABLE toolsearch_staging (
    name text, namespace text, fingerprint text, definition text, search_text text,
    a text, b text, c text, d text, embedding vector
) ON COMMIT DROP
"""
_COPY = "COPY toolsearch_staging FROM STDIN WITH (FORMAT BINARY)"
_TYPES = ["text", "text", "text", "text", "text", "text", "text", "text", "text", "vector"]


def _take_back(conn: Any, row: CatalogRow, names: list[str]) -> tuple[int, float]:
    """Delete `names`' rows and postings, and take their lexemes out of the document frequencies: (rows, length)."""
    tools, lexemes, postings = tools_table(row.id), lexemes_table(row.id), postings_table(row.id)
    count, length = conn.execute(
        f"""
        WITH old AS (DELETE FROM {tools} WHERE name = ANY(%s) RETURNING id, lexemes, doc_len),
        unlisted AS (DELETE FROM {postings} WHERE tool IN (SELECT id FROM old) RETURNING 1),
        gone AS (SELECT l AS lexeme, count(*) AS n FROM old, unnest(tsvector_to_array(old.lexemes)) AS l GROUP BY l),
        counted AS (UPDATE {lexemes} AS x SET df = x.df - gone.n FROM gone WHERE x.lexeme = gone.lexeme RETURNING 1)
        SELECT count(*), coalesce(sum(doc_len), 0) FROM old
        """,
        (names,),
    ).fetchone()
    conn.execute(f"DELETE FROM {lexemes} WHERE df <= 0")
    return int(count), float(length)


def _insert(conn: Any, row: CatalogRow, rows: Sequence[ToolRow], model: str, *, whole: bool) -> tuple[int, float]:
    tools, lexemes = tools_table(row.id), lexemes_table(row.id)
    bulk = whole and len(rows) >= BULK
    if bulk:  # a graph built once over every row is several times faster than one grown row by row
        conn.execute(f"DROP INDEX IF EXISTS {tools}_hnsw")
    conn.execute(_STAGING)
    with conn.cursor() as cur, cur.copy(_COPY) as copy:
        copy.set_types(_TYPES)
        for r in rows:
            copy.write_row((r.name, r.namespace, r.fingerprint, r.definition, r.search_text, r.name_words, r.context,
                            r.description, r.parameters, r.embedding))
    count, length = conn.execute(
        f"""
        WITH new AS (
            INSERT INTO {tools}
                (name, namespace, fingerprint, definition, search_text, lexemes, doc_len, model, embedding)
            SELECT name, namespace, fingerprint, definition::jsonb, search_text, v,
                   (SELECT count(*) FROM unnest(v) AS u, unnest(u.positions) AS p), %s, embedding
            FROM (SELECT s.*, setweight(to_tsvector('english', a), 'A') || setweight(to_tsvector('english', b), 'B')
                              || setweight(to_tsvector('english', c), 'C') || setweight(to_tsvector('english', d), 'D')
                              AS v
                  FROM toolsearch_staging AS s) AS staged
            RETURNING doc_len
        )
        SELECT count(*), coalesce(sum(doc_len), 0) FROM new
        """,
        (model,),
    ).fetchone()
    where = "" if whole else "WHERE t.name IN (SELECT name FROM toolsearch_staging)"
    conn.execute(
        f"""
        INSERT INTO {lexemes} (lexeme, df)
        SELECT l, count(*) FROM {tools} AS t, unnest(tsvector_to_array(t.lexemes)) AS l {where} GROUP BY l
        ON CONFLICT (lexeme) DO UPDATE SET df = {lexemes}.df + EXCLUDED.df
        """
    )
    if bulk:
        conn.execute(f"SET LOCAL maintenance_work_mem = '{BULK_MEMORY}'")
        conn.execute(hnsw_index(row.id))
    # a term's frequency in a tool is the sum of its occurrences' field weights (BM25F)
    weight = "CASE w " + " ".join(f"WHEN '{k}' THEN {v}" for k, v in FIELD_WEIGHTS.items()) + " ELSE 1 END"
    conn.execute(
        f"""
        INSERT INTO {postings_table(row.id)} (lexeme, tool, tf, doc_len)
        SELECT u.lexeme, t.id, (SELECT sum({weight}) FROM unnest(u.weights) AS w), t.doc_len
        FROM {tools} AS t CROSS JOIN LATERAL unnest(t.lexemes) AS u {where}
        """
    )
    return int(count), float(length)


def needs_settling(changed: int) -> bool:
    """Whether a change of `changed` tools is large enough to `settle` after (a small one is left to autovacuum)."""
    return changed >= ANALYZE_AFTER


def settle(conn: Any, row: CatalogRow) -> None:
    """After a large change has committed (VACUUM runs outside a transaction): mark the postings' pages all-visible,
    so searches read them from the primary key alone (an index-only scan reads the table for any other page)."""
    conn.execute(f"VACUUM {postings_table(row.id)}")


def _record(conn: Any, row: CatalogRow, version: int, upserted: list[str] | None, gone: list[str]) -> None:
    """Record the change that made `version` (None upserted: a reader further behind reads the whole catalog), keep the
    last KEEP_CHANGES records, and tell every reader at COMMIT."""
    conn.execute(
        "INSERT INTO toolsearch_changes (catalog_id, version, upserted, removed) VALUES (%s, %s, %s, %s)",
        (row.id, version, upserted, gone),
    )
    conn.execute(
        "DELETE FROM toolsearch_changes WHERE catalog_id = %s AND version <= %s", (row.id, version - KEEP_CHANGES)
    )
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{row.id}:{version}"))


def apply_rebuild(conn: Any, row: CatalogRow, rows: Sequence[ToolRow], model: str, *, patience: float) -> int:
    """Write `rows` as the whole catalog, in tables made anew, as one new version (the caller holds its transaction
    and the catalog row's lock); returns that version.

    The new tables are made and filled under a spare number, beside the catalog's own, which readers go on
    searching meanwhile (a rebuild of many tools takes minutes); the catalog's row and change record are written
    next, and last the new tables take the old ones' place (`schema.swap_tables`): readers wait only for that, from
    the swap to the COMMIT, where dropping the old tables first made every search wait for the whole rebuild (and
    fail past `timeout`, as if Postgres were down). `patience`: see `swap_tables`."""
    conn.execute("SET LOCAL statement_timeout = 0")  # a whole catalog's write takes minutes at a million tools
    staged = CatalogRow(spare_table_id(conn), row.name, row.version, row.model, row.dimension, False)
    conn.execute(catalog_tables(staged.id, row.dimension))
    count, length = _insert(conn, staged, rows, model, whole=True) if rows else (0, 0.0)
    conn.execute(f"ANALYZE {tools_table(staged.id)}, {lexemes_table(staged.id)}, {postings_table(staged.id)}")
    version = conn.execute(
        "UPDATE toolsearch_catalogs SET version = version + 1, doc_count = %s, total_len = %s, schema_version = %s, "
        "updated_at = now() WHERE id = %s RETURNING version",
        (count, length, SCHEMA_VERSION, row.id),
    ).fetchone()[0]
    _record(conn, row, int(version), None, [])
    swap_tables(conn, staged.id, row.id, patience=patience)
    return int(version)


def apply_change(conn: Any, row: CatalogRow, rows: Sequence[ToolRow], removed: Sequence[str], model: str) -> int:
    """Upsert `rows` and remove `removed` as one new version of the catalog (the caller holds its transaction and the
    catalog row's lock); returns that version."""
    conn.execute("SET LOCAL statement_timeout = 0")  # a whole catalog's first write takes minutes at a million
    upserted = [r.name for r in rows]
    gone = [n for n in dict.fromkeys(removed) if n not in set(upserted)]
    empty = conn.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {tools_table(row.id)})").fetchone()[0]
    old_count, old_length = _take_back(conn, row, [*upserted, *gone]) if not empty else (0, 0.0)
    new_count, new_length = _insert(conn, row, rows, model, whole=empty) if rows else (0, 0.0)
    version = conn.execute(
        "UPDATE toolsearch_catalogs SET version = version + 1, doc_count = doc_count - %s + %s, "
        "total_len = greatest(total_len - %s + %s, 0), updated_at = now() WHERE id = %s RETURNING version",
        (old_count, new_count, old_length, new_length, row.id),
    ).fetchone()[0]
    _record(conn, row, int(version), upserted if len(upserted) <= MANY else None, gone)
    if new_count + old_count >= ANALYZE_AFTER or empty:  # the planner's row counts, for the index choices above
        conn.execute(f"ANALYZE {tools_table(row.id)}, {lexemes_table(row.id)}, {postings_table(row.id)}")
    return int(version)
