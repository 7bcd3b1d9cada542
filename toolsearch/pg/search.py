"""One search statement: dense candidates from the HNSW index, lexical ones ranked by BM25 over Postgres full-text
vectors, filters in the same SQL, and the catalog version all of it was read at.

Lexical ranking. Postgres's own `ts_rank` has no inverse document frequency, so a common word counts as
much as a rare one; here BM25 is computed in SQL instead: each tool's `english` full-text vector
(stemmed, stop words out) carries a weight per field (A name words, B namespace and tags, C
description, D parameters), a term's frequency is the sum of its occurrences' field weights (BM25F),
and its idf comes from a document-frequency table kept in step by every change (toolsearch.pg.writer).
The request is read as the bm25 backend reads it (toolsearch.entities.lexical_parts): identifiers split into
words, conversational filler dropped, the words of values (addresses, ids, numbers) weighing `VALUE_WEIGHT`,
`send` added to a request to send a message. A query word equal to a tool's whole name adds a fixed bonus, as
the bm25 backend does. The inverted lists
are a postings table, (lexeme, tool) -> weighted frequency and tool length, so a query reads one index
range per word (`ts_rank` over GIN matches would read and unpack every matching tool's vector, 23 µs each);
its rarest words come first, and past `MAX_POSTINGS` the commonest are dropped.

Dense ranking. Every query row (the request and its clauses, as the vector backend embeds them) walks the
HNSW index for its `pool` nearest tools; with a filter the walk scans on until it has them
(`hnsw.iterative_scan`), and a small allowed set is scored exactly instead (a filter the graph would
starve). Each candidate's cosine similarity to every row comes back, so the caller scores clauses and
fuses exactly as the hybrid backend does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.bm25 import FILLER_WORDS, VALUE_WEIGHT, split_words
from ..entities import lexical_parts
from .schema import catalog_by_id, lexemes_table, postings_table, tools_table

__all__ = ["Candidates", "search", "FIELD_WEIGHTS", "BM25_K1", "BM25_B", "EXACT_NAME_BONUS", "SUBSET_EXACT_MAX"]

# Field weights of a term's occurrences (A name words, B namespace/tags, C description, D parameters): the bm25
# backend's boosts summed over its `all` field (name words twice) and each field's own (0.6, parameters 0.3).
FIELD_WEIGHTS = {"A": 2.6, "B": 1.6, "C": 1.6, "D": 1.3}
BM25_K1 = 1.2
BM25_B = 0.75
EXACT_NAME_BONUS = 8.0
MAX_TERMS = 32
# The most postings one query reads: its rarest words first, the commonest dropped past this (always one word).
# Catalogs of thousands of tools stay far below it; at a million, words such as "get" would read 300,000 rows.
MAX_POSTINGS = 100_000
# An allowed set up to this size is scored exactly from its own rows (as the vector backend does).
SUBSET_EXACT_MAX = 4_096


@dataclass(frozen=True, slots=True)
class Candidates:
    """What the statement found: per candidate its similarity to each query row and its lexical score (0 when
    the lexical side did not return it), and the catalog version it read."""

    version: int
    sims: dict[str, np.ndarray]
    lexical: dict[str, float]


def _sql(catalog_id: int, *, filtered: bool, exact: bool) -> str:
    tools, lexemes, postings = tools_table(catalog_id), lexemes_table(catalog_id), postings_table(catalog_id)
    allowed = "AND t.name = ANY(%(allowed)s)" if filtered else ""
    where_allowed = "WHERE t.name = ANY(%(allowed)s)" if filtered else ""
    # `+ 0` keeps the planner off the HNSW index: a small allowed set is scored exactly
    distance = "(t.embedding <=> q.v) + 0" if exact else "t.embedding <=> q.v"
    # unfiltered, the best `pool` tool ids are cut before their names are looked up; filtered, every scored id is
    # checked against the allowed names first (the filter comes before the top k)
    lexical_cut = "" if filtered else "ORDER BY score DESC, tool LIMIT %(pool)s"
    return f"""
WITH cat AS (SELECT version, doc_count, total_len FROM toolsearch_catalogs WHERE id = {int(catalog_id)}),
asked AS (
    SELECT lexeme, max(weight) AS weight FROM (
        SELECT unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme, 1.0::float8 AS weight
        UNION ALL
        SELECT unnest(tsvector_to_array(to_tsvector('english', %(values)s))), %(value_weight)s::float8
    ) AS a GROUP BY lexeme
),
words AS (
    SELECT x.lexeme, x.df, w.weight * ln(1 + (c.doc_count - x.df + 0.5) / (x.df + 0.5)) AS idf,
           sum(x.df) OVER (ORDER BY x.df, x.lexeme) AS running
    FROM asked AS w JOIN {lexemes} AS x ON x.lexeme = w.lexeme CROSS JOIN cat AS c
    WHERE x.df > 0
),
terms AS (SELECT lexeme, idf FROM words WHERE running - df < {MAX_POSTINGS} ORDER BY df, lexeme LIMIT {MAX_TERMS}),
scored AS (
    SELECT p.tool, sum(terms.idf * p.tf * {BM25_K1 + 1} / (p.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * p.doc_len
               / (SELECT greatest(total_len / greatest(doc_count, 1), 1) FROM cat)))) AS score
    FROM terms JOIN {postings} AS p ON p.lexeme = terms.lexeme
    GROUP BY p.tool {lexical_cut}
),
bm25 AS (SELECT t.name, s.score FROM scored AS s JOIN {tools} AS t ON t.id = s.tool {allowed}),
named AS (SELECT t.name, {EXACT_NAME_BONUS}::float8 AS score FROM {tools} AS t
          WHERE lower(t.name) = ANY(%(chunks)s) {allowed}),
lexical AS (
    SELECT name, sum(score) AS score FROM (SELECT * FROM bm25 UNION ALL SELECT * FROM named) AS s
    GROUP BY name ORDER BY score DESC, name LIMIT %(pool)s
),
q AS (SELECT v, i FROM unnest(%(vectors)s::vector[]) WITH ORDINALITY AS r(v, i)),
dense AS (
    SELECT DISTINCT d.name FROM q
    CROSS JOIN LATERAL (SELECT t.name FROM {tools} AS t {where_allowed} ORDER BY {distance} LIMIT %(pool)s) AS d
),
found AS (SELECT name FROM dense UNION SELECT name FROM lexical)
SELECT cat.version, f.name,
       ARRAY(SELECT 1 - (t.embedding <=> q.v) FROM q ORDER BY q.i) AS sims,
       lexical.score
FROM cat
LEFT JOIN found AS f ON true
LEFT JOIN {tools} AS t ON t.name = f.name
LEFT JOIN lexical ON lexical.name = f.name
"""


_FILLER = frozenset(FILLER_WORDS.split())
_EDGE = "\"'`.,;:!?()[]{}<> "  # trimmed from a word before it is compared with a filler word or a tool name


def lexical_request(query: str) -> tuple[str, str, float]:
    """(the words that rank, the values' words, their weight): the request as the bm25 backend reads it."""
    prose, values = lexical_parts(query)
    words = split_words(prose)
    kept = " ".join(w for w in words.split() if w.strip(_EDGE).lower() not in _FILLER)
    if not kept.strip(_EDGE):  # "what can you do?": nothing but filler, so the filler is the query
        kept = words
    # values weigh lightly beside words; a request of values alone ranks by them in full, as bm25 does
    weight = VALUE_WEIGHT if kept.strip(_EDGE) else 1.0
    return kept, split_words(values), weight


def _chunks(query: str) -> list[str]:
    """The query's whitespace-separated pieces, lower-cased and trimmed of quotes and punctuation (tool names)."""
    pieces = {p.strip(_EDGE).lower() for p in query.split()}
    return sorted(p for p in pieces if p)


def search(
    conn: Any, catalog_id: int, query: str, vectors: np.ndarray, pool: int, allowed: frozenset[str] | None
) -> Candidates | None:
    """Run the statement on `conn`; None when the catalog no longer exists (removed, its tables with it)."""
    filtered = allowed is not None
    exact = filtered and len(allowed or ()) <= SUBSET_EXACT_MAX
    words, values, value_weight = lexical_request(query)
    params: dict[str, Any] = {
        "text": words,
        "values": values,
        "value_weight": value_weight,
        "chunks": _chunks(query),
        "pool": pool,
        "vectors": [np.asarray(v, dtype=np.float32) for v in np.atleast_2d(vectors)],
    }
    if filtered:
        params["allowed"] = sorted(allowed or ())
    from psycopg.errors import UndefinedTable

    try:
        rows = conn.execute(_sql(catalog_id, filtered=filtered, exact=exact), params).fetchall()
    except UndefinedTable:  # its tables are gone: removed with the catalog (or dropped by hand: said as Postgres says)
        if catalog_by_id(conn, catalog_id) is None:
            return None
        raise
    if not rows:
        return None
    version = int(rows[0][0])
    sims: dict[str, np.ndarray] = {}
    lexical: dict[str, float] = {}
    for _, name, row_sims, score in rows:
        if name is None:
            continue
        sims[name] = np.asarray(row_sims, dtype=np.float32)
        if score is not None:
            lexical[name] = float(score)
    return Candidates(version, sims, lexical)
