"""Whether a query is written in Lucene syntax or is a plain sentence, and the field names that syntax knows.

Light on purpose (no tantivy): the index's named-tool rule and the hybrid backend ask it too.
"""

from __future__ import annotations

import re

__all__ = ["QUERY_FIELDS", "looks_like_lucene"]

# Field names the query syntax accepts, and the index field each one searches.
QUERY_FIELDS: dict[str, str] = {
    "name": "name",
    "description": "description",
    "desc": "description",
    "parameters": "parameters",
    "parameter": "parameters",
    "params": "parameters",
    "param": "parameters",
    "namespace": "namespace",
    "server": "namespace",
    "tags": "tags",
    "tag": "tags",
}

# What makes a query a Lucene attempt rather than a sentence; anything else is plain text. Quotes
# alone are not enough: requests quote names and values ('the "Wine Quality" dataset'), and on
# such sentences the plain bag of words ranks better. `+"a phrase"` or `name:"..."` is Lucene.
_LUCENE_HINT = re.compile(
    # a field prefix, in any case as the parser reads it (`Name:email` is `name:email`)
    r"""(?:^|[\s(])(?i:""" + "|".join(sorted(QUERY_FIELDS, key=len, reverse=True)) + r"""):(?!\s)"""
    r"""|(?:^|[\s(])[+-](?=[^\W\d_]|["(])"""  # +must / -not (not "-5" or "x - y")
    r"""|(?:^|[\s(:])[^\W_]+~\d?(?=$|[\s)])"""  # fuzzy word~ / word~1
    r"""|(?:^|[\s(:])[^\W_]+\*(?=$|[\s)])"""  # prefix word* (not "\n* item")
    # a boost: word^2, "a phrase"^2, (a group)^2 (not a formula: "x^2", "2^10", "x^2+1")
    r"""|(?:(?:^|[\s(:])[^\W\d_][^\W_]+|[")])\^(?:\d+(?:\.\d+)?|\.\d+)(?=$|[\s)])"""
    r"""|(?:^|\s)(?:AND|OR|NOT|&&|\|\|)(?=\s)"""  # boolean operators, upper case only
)

# Every mark above holds one of these: a request without any (most) is not scanned for marks at all (the scan costs
# ~16 us on a 100-character request, a hybrid search asks three times; this test ~1 us).
_MAY_MARK = re.compile(r"[:+\-~*&|^]|AND|OR|NOT")

# A query with fewer syntax marks than one per this many words is a sentence (see looks_like_lucene).
_WORDS_PER_MARK = 8


def looks_like_lucene(query: str) -> bool:
    """True when the query uses Lucene syntax rather than being a plain sentence.

    A known field followed by a space ("Patient name: John") is prose, and so is a long request
    with an operator-looking word or two in it ("a logical expression A AND B", "compile with
    -O2"): someone writing Lucene writes mostly words and operators, so one mark in every
    `_WORDS_PER_MARK` words or more makes a query Lucene, and any mark in a short one.
    """
    if _MAY_MARK.search(query) is None:
        return False
    marks = sum(1 for _ in _LUCENE_HINT.finditer(query))
    if not marks:
        return False
    words = len(query.split())
    return words <= _WORDS_PER_MARK or marks * _WORDS_PER_MARK >= words
