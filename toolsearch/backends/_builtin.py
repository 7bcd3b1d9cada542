"""The built-in backends' specs: what pyproject.toml declares under the `toolsearch.backends` entry points.

Each spec imports its backend module (and tantivy, faiss, the model) only when a backend is made.
"""

from __future__ import annotations

from ._base import BackendSpec

# What the default (numpy) embedder needs; sentence-transformers is only for other models.
_VECTOR_PACKAGES = ("faiss", "safetensors", "tokenizers")

REGEX = BackendSpec.lazy(
    "regex",
    "toolsearch.backends.regex",
    requires=("regex",),
    summary="model-written regular expressions",
    query_syntax=(
        "A Python regular expression (the `regex` module, case-insensitive), matched against each tool's "
        "name, namespace, description and parameters. Examples: `weather`, `send.*(mail|message)`, "
        "`^github_`, `(create|open).*issue`. Escape special characters (`\\.`, `\\(`) to match them literally."
    ),
    search_hint=(
        "use a valid Python regular expression or plain words (escape special characters such as `(`, `[`, `*`)"
    ),
)
BM25 = BackendSpec.lazy(
    "bm25",
    "toolsearch.backends.bm25",
    requires=("tantivy",),
    summary="tantivy BM25 with Lucene query syntax",
    query_syntax=(
        "Keywords describing the capability you need (BM25 ranking over tool names, descriptions and "
        'parameters), e.g. `send email attachment`. Lucene syntax is understood: `"exact phrase"`, '
        "`+required -excluded`, `AND` / `OR` / `NOT`, `(groups)`, `prefix*`, `fuzzy~`, `term^2` to boost, and "
        "fields `name:`, `description:`, `parameters:`, `namespace:`, `tags:` (e.g. `namespace:github issue`)."
    ),
    search_hint="use a few plain keywords describing the action and the object, e.g. `create issue`",
)
VECTOR = BackendSpec.lazy(
    "vector",
    "toolsearch.backends.vector",
    requires=_VECTOR_PACKAGES,
    extra="vector",
    summary="dense embeddings searched with faiss",
    query_syntax=(
        "A natural-language description of what you want to do, e.g. `find the weather forecast for a city` "
        "(semantic search: wording need not match the tool's)."
    ),
    search_hint="describe the task in a short natural-language sentence",
)
HYBRID = BackendSpec.lazy(
    "hybrid",
    "toolsearch.backends.hybrid",
    requires=("tantivy", *_VECTOR_PACKAGES),
    extra="vector",
    summary="bm25 and vector fused",
    query_syntax=(
        "A natural-language description of what you want to do, with any specific keywords or tool-name "
        "fragments you know, e.g. `create a github issue with labels` (semantic + keyword search)."
    ),
    search_hint="describe the task in a short sentence, with any keywords you know",
)
POSTGRES = BackendSpec.lazy(
    "postgres",
    "toolsearch.backends.postgres",
    requires=("psycopg", "psycopg_pool", "pgvector", *_VECTOR_PACKAGES),
    extra="postgres",
    summary="catalog, embeddings and index shared in Postgres (pgvector + full text)",
    query_syntax=HYBRID.query_syntax,
    search_hint=HYBRID.search_hint,
)
