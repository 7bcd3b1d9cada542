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
_FIELD_NAMES = "|".join(sorted(QUERY_FIELDS, key=len, reverse=True))
_LUCENE_HINT = re.compile(
    # a field prefix in lower case, as Lucene's field names are written (a capitalised one is below)
    r"""(?:^|[\s(])(?:""" + _FIELD_NAMES + r"""):(?!\s)"""
    r"""|(?:^|[\s(])[+-](?=[^\W\d_]|["(])"""  # +must / -not (not "-5" or "x - y")
    r"""|(?:^|[\s(:])[^\W_]+~\d?(?=$|[\s)])"""  # fuzzy word~ / word~1
    r"""|(?:^|[\s(:])[^\W_]+\*(?=$|[\s)])"""  # prefix word* (not "\n* item")
    r"""|(?:^|\s)(?:AND|OR|NOT|&&|\|\|)(?=\s)"""  # boolean operators, upper case only
)
# A boost, `word^2` or `"a phrase"^2`, on a word of three letters or more: a power in a formula or of a unit is
# not one (`x^2`, `2^10`, `(x+1)^2`, `km^2`, `ft^2`), and neither is a word's after a number (`3 feet^2`, see
# _after_number). A boosted `(group)^2` is read where another mark makes the query Lucene, but is no mark itself.
_BOOST_HINT = re.compile(r"""(?:(?:^|(?<=[\s(:]))[^\W\d_]{3,}|")\^(?:\d+(?:\.\d+)?|\.\d+)(?=$|[\s)])""")
_NUMBER = re.compile(r"\d[\d.,]*")
# A field clause in any case, `Name:email` or `Name:"send email"`; see _fields_only.
_FIELD_CLAUSE = re.compile(r"""\s*(?i:""" + _FIELD_NAMES + r"""):("[^"]*"|[^\s"]+)\s*""")

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
    `_WORDS_PER_MARK` words or more makes a query Lucene, and any mark in a short one. A
    capitalised field is a label in prose ("Server:db-2 reboot", "Tags:urgent create a task",
    "Name:John Smith"), so it makes a query Lucene only when the query is nothing but field
    clauses with values not in capitals (`Name:email`); a query that is Lucene by another mark
    reads it as a field all the same.
    """
    if _MAY_MARK.search(query) is None:
        return False
    marks = sum(1 for _ in _LUCENE_HINT.finditer(query))
    marks += sum(1 for m in _BOOST_HINT.finditer(query) if not _after_number(query, m.start()))
    if not marks:
        return ":" in query and _fields_only(query)
    words = len(query.split())
    return words <= _WORDS_PER_MARK or marks * _WORDS_PER_MARK >= words


def _after_number(query: str, start: int) -> bool:
    """Whether the word at `start` follows a number (`3 feet^2`): a quantity's unit, its `^2` a power."""
    before = query[max(0, start - 40) : start].split()  # (a bounded look back: a boost mark is common)
    return bool(before) and _NUMBER.fullmatch(before[-1]) is not None


def _fields_only(query: str) -> bool:
    """Whether the query is nothing but field clauses, in any case, whose values do not start with a capital
    (`Name:email`, `Name:email Tags:public`, not `Name:John`): where a capitalised field is a field."""
    at, values = 0, []
    while at < len(query):
        clause = _FIELD_CLAUSE.match(query, at)
        if clause is None:
            return False
        values.append(clause.group(1))
        at = clause.end()
    return bool(values) and not any(value[0].isupper() for value in values)
