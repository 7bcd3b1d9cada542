"""A deterministic agent policy for the token benchmark: search with the task's words, call what it needs, answer.

The policy plays the model inside the real loop (`ScriptedModel(policy=AgentPolicy(...))`). It knows
which tools the task needs (the model's intent) but may only call a tool that the request it is
answering carries. Its search queries come from the task text alone, never from the labels:

1. a task of several parts ("Do A. Then do B; and then C.") is searched part by part, in parallel;
   a one-part task with its text (for the regex backend: an alternation of its content words);
2. while a needed tool is still missing: each part's capability (its content words without the
   specifics: quoted strings, names, numbers), with 10 results, as an agent rewords a query;
3. then the task's keywords (content words minus stopwords), with 10 results;
4. last, the first round's queries again with 10 results: "show me more".

The meta-tool leaves tools the session already has out of its results, so a reworded or
repeated search brings new candidates rather than the same ones.

Needed tools that are visible are called in the same turn as any further search (parallel calls),
once each, with arguments built from their schema; when nothing is left to call or search, it
answers. Without a search tool (the baseline) it calls the needed tools directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolsearch.providers._base import ChatRequest, ToolCall
from toolsearch.providers.scripted import ScriptedTurn, call, example_arguments, search
from toolsearch.tools import Tool

__all__ = [
    "AgentPolicy",
    "QueryStyle",
    "SearchStep",
    "capability_words",
    "content_words",
    "split_clauses",
    "regex_pattern",
    "query_plan",
]

QueryStyle = Literal["regex", "text"]  # a pattern, or natural language / keywords

MAX_QUERY_CHARS = 500  # a model writes a search query, not the whole prompt (Anthropic's BM25 limit)
MAX_PATTERN_CHARS = 200  # Anthropic's regex tool-search limit
MAX_CLAUSES = 12
MORE_RESULTS = 10

# Function words and request fillers; capability verbs (find, get, send, ...) are kept on purpose.
_STOPWORD_TEXT = (
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by could did do does doing down during each few for from further had has have "
    "having he her here hers herself him himself his how i if in into is it its itself just me more most "
    "my myself no nor not now of off on once only or other our ours ourselves out over own same she "
    "should so some such than that the their theirs them themselves then there these they this those "
    "through to too under until up very was we were what when where which while who whom why will with "
    "would you your yours yourself yourselves can may might must shall please kindly want wanted need "
    "needs like help let know tell give also using use via based given specific certain following "
    "provided respectively e g etc"
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"\w+", re.UNICODE)
# A quoted span: the opening quote follows no word character, so "I'm" and "users'" open nothing.
_QUOTED = re.compile(r"(?<!\w)'[^'\n]+'(?!\w)|\"[^\"\n]+\"|\u201c[^\u201d\n]+\u201d|\u2018[^\u2019\n]+\u2019")
_SENTENCE_START = re.compile(r"^\W*\w+")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
# Step connectives only: a bare "and" / "also" joins the parts of one request more often than two requests.
_CONJUNCTION = re.compile(r",\s*(?:and\s+)?then\s+|\s+and\s+(?:then|also)\s+", re.I)
# Sequencing words that open a part ("Then, send ..."): not part of what the part asks for.
_LEAD = re.compile(
    r"^(?:(?:and|then|next|finally|also|additionally|lastly|afterwards?|after that|moreover|furthermore|besides)"
    r"\b[\s,]*)+",
    re.I,
)


@dataclass(frozen=True, slots=True)
class SearchStep:
    """One tool_search call the policy will make: the query and how many results it asks for."""

    query: str
    max_results: int | None = None  # None: the meta-tool's default


def content_words(text: str) -> list[str]:
    """Lower-case words of `text` minus stopwords, numbers and one-letter tokens, first occurrence order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) < 2 or word in STOPWORDS or any(ch.isdigit() for ch in word) or word.startswith("_"):
            continue
        seen.setdefault(word, None)
    return list(seen)


def split_clauses(text: str) -> list[str]:
    """Split a request into its parts (sentences, `;`, `, and`, `then`, `also`), keeping parts with 2+ content words."""
    parts: list[str] = []
    for sentence in _SENTENCE.split(text):
        for piece in _CONJUNCTION.split(sentence):
            piece = _LEAD.sub("", piece.strip(" ,.;")).strip(" ,.;")
            if len(content_words(piece)) >= 2:
                parts.append(piece)
    return parts[:MAX_CLAUSES]


def capability_words(text: str) -> list[str]:
    """`content_words` of `text` without its specifics: quoted strings and capitalised words past a sentence's first.

    "Check the weather for Santa Rosa, CA on April 9th" gives `check weather`: what is asked, not for what.
    """
    kept: list[str] = []
    for sentence in _SENTENCE.split(_QUOTED.sub(" ", text)):
        first = _SENTENCE_START.match(sentence)
        start = first.end() if first else 0
        words = sentence[:start] + " " + " ".join(w for w in _WORD.findall(sentence[start:]) if not w[0].isupper())
        kept.extend(content_words(words))
    return list(dict.fromkeys(kept))


def regex_pattern(words: Sequence[str], *, max_chars: int = MAX_PATTERN_CHARS) -> str:
    """An alternation of whole words, `\\b(?:w1|w2|...)\\b`, as long as fits in `max_chars`."""
    chosen: list[str] = []
    for word in words:
        candidate = [*chosen, re.escape(word)]
        if len(r"\b(?:" + "|".join(candidate) + r")\b") > max_chars:
            break
        chosen = candidate
    if not chosen:
        return ""
    return r"\b(?:" + "|".join(chosen) + r")\b"


def _trim(text: str, limit: int = MAX_QUERY_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit]


def _query(text: str, style: QueryStyle) -> str:
    if style == "regex":
        return regex_pattern(content_words(text))
    return _trim(text)


def query_plan(task: str, style: QueryStyle = "text") -> list[list[SearchStep]]:
    """The search rounds for a task, derived from its text only; empty queries and repeats are dropped.

    A multi-part task is searched part by part (in parallel) first, a one-part task with its text.
    Then each part's capability words, the task's keywords, and the first round's queries again,
    all with more results (the meta-tool skips tools already loaded, so a repeat pages on).
    """
    parts = split_clauses(task)
    keywords = " ".join(content_words(task))
    keyword_step = SearchStep(_query(keywords, style) if style == "regex" else _trim(keywords), MORE_RESULTS)
    if len(parts) >= 2:
        rounds = [[SearchStep(_query(part, style)) for part in parts]]
    else:
        parts = [task]
        rounds = [[SearchStep(_query(task, style))]]
    rounds.append([SearchStep(_query(" ".join(capability_words(part)), style), MORE_RESULTS) for part in parts])
    rounds.append([keyword_step])
    rounds.append([SearchStep(_query(part, style), MORE_RESULTS) for part in parts])
    seen: set[tuple[str, int | None]] = set()
    plan: list[list[SearchStep]] = []
    for steps in rounds:
        kept = []
        for step in steps:
            key = (step.query, step.max_results)
            if step.query and key not in seen:
                seen.add(key)
                kept.append(step)
        if kept:
            plan.append(kept)
    return plan


class AgentPolicy:
    """The benchmark's model: a `ScriptedModel` policy that reads only the request it answers.

    `needed` are the tools the task needs (the intent); `style` is "regex" for the regex backend,
    else "text". One object drives one task in any number of runs (it keeps no state).
    """

    def __init__(
        self,
        task: str,
        needed: Sequence[str],
        *,
        style: QueryStyle = "text",
        answer: str = "Done.",
        fill: Mapping[str, Any] | None = None,
    ) -> None:
        self.task = task
        self.fill = dict(fill or {})  # values for parameters a call's tool has (an augmented `reason`)
        self.needed = tuple(dict.fromkeys(needed))
        self.style = style
        self.answer = answer
        self.plan = query_plan(task, style)

    def _arguments(self, tool: Tool) -> dict[str, Any]:
        arguments = example_arguments(tool.input_schema)
        properties = tool.input_schema.get("properties") or {}
        arguments.update({k: v for k, v in self.fill.items() if k in properties})
        return arguments

    def __call__(self, request: ChatRequest) -> ScriptedTurn:
        search_name = request.search_tool.name if request.search_tool is not None else None
        visible = {t.name: t for t in request.tools}
        rounds_used = 0
        attempted: set[str] = set()
        for message in request.messages:
            if message.role != "assistant":
                continue
            names = {c.name for c in message.tool_calls}
            if search_name is not None and search_name in names:
                rounds_used += 1
            attempted |= names - {search_name}
        pending = [n for n in self.needed if n not in attempted]  # one call each: a failed call is not retried
        calls: list[ToolCall] = [call(n, self._arguments(visible[n])) for n in pending if n in visible]
        missing = [n for n in pending if n not in visible]
        if missing and search_name is not None and rounds_used < len(self.plan):
            calls += [search(s.query, s.max_results, tool=search_name) for s in self.plan[rounds_used]]
        return calls if calls else self.answer
