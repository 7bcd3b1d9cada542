"""The tool_search meta-tool: its definition per session, argument checks, and compact result text."""

from __future__ import annotations

import difflib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from . import tracing
from ._errors import InvalidArgumentError, InvalidQueryError, InvalidToolError, joined_sentences, wrong_type
from .index import MAX_QUERY_CHARS
from .results import SearchResult
from .tools import Tool

if TYPE_CHECKING:
    from .session import DiscoveryUpdate, Session

__all__ = ["ToolSearchMetaTool", "MetaToolOutcome", "query_help", "system_prompt_suffix", "one_line_summary"]

# A backend's spec says how to query it (BackendSpec.query_syntax / search_hint); these serve a backend
# without a spec (an object passed to ToolIndex directly) or a spec that says nothing.
_GENERIC_SYNTAX = "A few keywords describing the capability you need, e.g. `send email`."
_GENERIC_HINT = "use a few plain keywords describing the capability"
_SUMMARY_CHARS = 160
_MAX_SKIPPED = 100  # most loaded tools a search over-fetches past
# A session allowed no tool at all (a gateway's policy gives its caller none): searching again cannot help. Said of
# the caller's own rights only, so it tells nothing of what others may use.
_NO_RIGHTS = "Your access rights give you no tools here, so no search can find one; ask the operator for access."
# Rights that name tools none of which is listed now (their server is down, or they are withheld): said as neutrally,
# for the same reason, and without sending the caller to ask for access it has.
_NONE_LISTED = "None of the tools your access rights give you is available right now; try again later."


def _no_tools(rights_unlisted: bool) -> str:
    return _NONE_LISTED if rights_unlisted else _NO_RIGHTS


# Line and paragraph breaks, tabs and other control characters: what would start a line of its own in a result.
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def on_one_line(text: str) -> str:
    """`text` with each line break or control character written as its escape (`\\n`, `\\u2028`): a name printed
    into the search tool's text or the system prompt cannot begin a line that reads as ours."""
    return _BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def one_line_summary(text: str, limit: int = _SUMMARY_CHARS) -> str:
    """The first sentence (or line) of a description, cut to `limit` characters."""
    text = " ".join(text.split())
    if not text:
        return "(no description)"
    for stop in (". ", "? ", "! "):
        cut = text.find(stop)
        if 0 < cut < limit:
            text = text[: cut + 1]
            break
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def query_help(backend_name: str, backend: object = None) -> tuple[str, str]:
    """How to query a backend: (syntax for the `query` parameter, hint after a bad query or no match).

    The backend object's own `query_syntax` wins, then its spec's, then a generic text.
    """
    from .backends import find_backend_spec

    spec = find_backend_spec(backend_name)
    custom = getattr(backend, "query_syntax", None)
    syntax = custom if isinstance(custom, str) and custom else (spec.query_syntax if spec else "") or _GENERIC_SYNTAX
    hint = (spec.search_hint if spec else "") or _GENERIC_HINT
    return syntax, hint


def _backend_syntax(session: Session) -> tuple[str, str]:
    return query_help(session.index.backend_name, session.index.backend)


class _Arguments(BaseModel):
    """tool_search arguments as models send them (`ToolSearchMetaTool.parse` refuses keys it does not know first)."""

    model_config = ConfigDict(extra="ignore", strict=False)

    query: str
    max_results: StrictInt | None = None  # the schema says integer: "3" and true are mistakes to report
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class MetaToolOutcome:
    """One tool_search call: the text for the model, and the search (None when the input was bad)."""

    text: str
    result: SearchResult | None = None
    error: str | None = None
    query: str | None = None
    max_results: int | None = None
    namespace: str | None = None
    update: DiscoveryUpdate | None = None
    already_loaded: tuple[str, ...] = ()  # matches left out of `result` because the session already has them

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools the search found (for native `tool_reference` / `tool_search_output` results)."""
        if self.result is None:
            return ()
        evicted = set(self.update.evicted) if self.update else set()
        return tuple(t for t in self.result.tools if t.name not in evicted)


class ToolSearchMetaTool:
    """The `tool_search` tool: definition per session, argument validation, compact results.

    `namespace_enum_limit`: the `namespace` parameter lists the session's namespaces as an enum
    when there are at most this many (a free string otherwise; None hides the parameter).
    `description` overrides the tool's description. With `skip_loaded` (the default), tools the
    session already has (pinned or discovered) are not listed again: a repeated or reworded search
    fills its `max_results` slots with new candidates and names the loaded matches in one line.
    """

    def __init__(
        self,
        name: str = "tool_search",
        *,
        default_results: int = 5,
        max_results: int = 10,
        namespace_enum_limit: int | None = 50,
        description: str | None = None,
        skip_loaded: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgumentError(f"the meta-tool's name must be a non-empty string, got {name!r}")
        for what, value in (("default_results", default_results), ("max_results", max_results)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise wrong_type(what, value, "a whole number")
        if not 1 <= default_results <= max_results:
            raise InvalidArgumentError(
                f"default_results must be between 1 and max_results ({max_results})"
                f", got {default_results!r}"
            )
        self.name = name
        self.default_results = default_results
        self.max_results = max_results
        self.namespace_enum_limit = namespace_enum_limit
        self.skip_loaded = skip_loaded
        self.description = description or (
            "Search the tool catalog for tools you do not have yet. Returns the best-matching tools' names "
            "and one-line summaries; their full definitions are added to your tools so you can call them in "
            "the next step. Call it whenever you need a capability none of your current tools provides; "
            "you may call it several times (in parallel too) with different queries."
        )
        self._cache: dict[tuple[str, tuple[str, ...] | None], Tool] = {}
        self._cache_lock = threading.Lock()

    # --- definition -------------------------------------------------------------------------

    def definition(self, session: Session) -> Tool:
        """The tool definition for this session (its backend's syntax, its namespaces)."""
        syntax, _ = _backend_syntax(session)
        namespaces = session.namespaces if self.namespace_enum_limit is not None else []
        enum = tuple(namespaces) if namespaces and len(namespaces) <= (self.namespace_enum_limit or 0) else None
        key = (session.index.backend_name + "\0" + syntax + ("\0ns" if namespaces else ""), enum)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        properties: dict[str, Any] = {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS, "description": syntax},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": self.max_results,
                "default": self.default_results,
                "description": f"How many tools to return (1-{self.max_results}, default {self.default_results}).",
            },
        }
        if namespaces:
            ns: dict[str, Any] = {"type": "string", "description": "Only search tools in this namespace."}
            if enum is not None:
                ns["enum"] = list(enum)
            else:
                ns["description"] += " Namespaces are listed in the system prompt."
            properties["namespace"] = ns
        tool = Tool(
            name=self.name,
            description=self.description,
            input_schema={"type": "object", "properties": properties, "required": ["query"]},
        )
        with self._cache_lock:
            self._cache[key] = tool
        return tool

    # --- running ----------------------------------------------------------------------------

    def _usage(self) -> str:
        return (
            f'Call {self.name} with a JSON object like {{"query": "<what you need>", '
            f'"max_results": {self.default_results}}}.'
        )

    def parse(
        self, session: Session, arguments: Mapping[str, Any] | str | None, *, rights_unlisted: bool = False
    ) -> tuple[_Arguments | None, str]:
        """Validate arguments; returns (arguments, "") or (None, instructive error text)."""
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                return None, f"{self.name} error: the arguments are not valid JSON ({exc}). {self._usage()}"
            except RecursionError:  # json's own limit on nesting, which a model's text can reach
                return None, f"{self.name} error: the arguments are nested too deeply. {self._usage()}"
        if not isinstance(arguments, Mapping):
            return None, f"{self.name} error: the arguments must be a JSON object. {self._usage()}"
        unknown = [str(key) for key in arguments if key not in _Arguments.model_fields]
        if unknown:  # a `limit` or `namespaces` left out silently would load tools the model asked not to see
            return None, self._unknown_arguments(session, unknown)
        try:
            args = _Arguments.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "arguments"
                msg = "is required" if err["type"] == "missing" else err["msg"].lower()
                problems.append(f"`{where}` {msg}")
            return None, f"{self.name} error: {'; '.join(problems)}. {self._usage()}"
        if not args.query.strip():
            return None, (
                f"{self.name} error: `query` is empty. Describe the capability you need, e.g. "
                f'"send an email" or "weather forecast". {self._usage()}'
            )
        if len(args.query.strip()) > MAX_QUERY_CHARS:  # checked here so no backend or model is touched
            return None, (
                f"{self.name} error: `query` is {len(args.query.strip())} characters; the limit is "
                f"{MAX_QUERY_CHARS}. Use a few keywords describing the capability. {self._usage()}"
            )
        if args.max_results is not None and not 1 <= args.max_results <= self.max_results:
            return None, (
                f"{self.name} error: `max_results` must be between 1 and {self.max_results} "
                f"(got {args.max_results}). {self._usage()}"
            )
        if args.namespace is not None:
            args.namespace = args.namespace.strip() or None
        if args.namespace is not None and args.namespace not in session.namespaces:
            known = session.namespaces
            more = f" and {len(known) - 50} more" if len(known) > 50 else ""
            listed = ", ".join(map(on_one_line, known[:50])) + more
            if known:
                advice = f"Use one of: {listed}."
            elif session.allowed is not None and not session.allowed:
                advice = _no_tools(rights_unlisted)
            elif session.allowed is not None:  # the catalog may have namespaces; this session's tools have none
                advice = "None of the tools available to you has a namespace; leave it out."
            else:
                advice = "This catalog has no namespaces; leave it out."
            # quoted cut, as unknown argument names are: a model's long text here would otherwise come back whole,
            # in this result and in every later request of the run
            said = args.namespace if len(args.namespace) <= 60 else f"{args.namespace[:60]}…"
            return None, f"{self.name} error: unknown namespace {said!r}. {advice}"
        return args, ""

    def _unknown_arguments(self, session: Session, unknown: Sequence[str]) -> str:
        """The answer to arguments holding keys tool_search does not take: which, and the ones it does take."""
        params = ["query", "max_results"] + (["namespace"] if session.namespaces else [])
        named = []
        for key in unknown[:5]:
            close = difflib.get_close_matches(key, params, n=1, cutoff=0.6)
            named.append(f"`{on_one_line(key[:60])}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        listed = ", ".join(f"`{p}`" for p in params)
        return (
            f"{self.name} error: unknown argument(s) {', '.join(named)}{more}; nothing was searched. Its arguments "
            f"are {listed} (only `query` is required). {self._usage()}"
        )

    def turn_tools(self, view: Session) -> tuple[tuple[Tool, ...], Tool, tuple[Tool, ...]]:
        """The tools of a request that searches, from one snapshot of the session (`session.view()`): its pinned
        tools, this search tool's definition and its discovered tools, once `check_clash` found none of the shown
        tools under this tool's name (providers refuse a request with two tools of one name).

        The one home of that rule for the requests the loop and `tools_for_request` make.
        """
        pinned, discovered = tuple(view.pinned_tools()), tuple(view.discovered_tools())
        shown = {t.name for t in pinned} | {t.name for t in discovered}
        self.check_clash(shown.__contains__)
        return pinned, self.definition(view), discovered

    def check_clash(self, shown: Callable[[str], bool]) -> None:
        """InvalidToolError when a tool shown beside this search tool (`shown(name)`) takes its name.

        Such a tool would be sent with the search tool under one name (providers refuse the request), and every
        call of that name would run the search. The rule of every entry point: `turn_tools` (the loop's requests
        and `tools_for_request`) and `ToolExecutor` apply it to the session's pinned and discovered tools (a
        search never offers such a tool: see `run`), the framework plug-ins to every tool of the agent (the
        framework holds them all). A run that offers no search tool (the loop's direct mode) applies none.
        """
        if shown(self.name):
            raise InvalidToolError(
                f"a catalog tool is named {self.name!r} like the search tool; rename it or pass "
                "metatool=ToolSearchMetaTool(name=...)"
            )

    def run(
        self,
        session: Session,
        arguments: Mapping[str, Any] | str | None,
        *,
        alias: Callable[[str], str] | None = None,
        withheld: Mapping[str, str] | None = None,
        min_relative_score: float = 0.0,
        rights_unlisted: bool = False,
    ) -> MetaToolOutcome:
        """Validate, search within the session (recording hits as discovered) and render the result.

        `alias` maps a tool name to the name the model sees (e.g. `provider_safe_name` when the
        tools array carries provider-safe aliases), so the text names tools the way they can be called.
        `withheld` ({tool name: why}) names tools that must not be offered although the session may use
        them (a gateway's tool whose parameters collide with its augmented fields; always, a catalog tool
        named like this search tool): a hit among them is left out, and the result says so and why.
        `min_relative_score` leaves out hits scoring below that fraction of the best hit's score (a best
        score of 0 or less sets no floor), with a note. `rights_unlisted`: a session allowed no tool has rights
        that name tools, none of which is listed now (a gateway's caller whose server is down); it is told so,
        not that its rights give it nothing.
        """
        if session.is_allowed(self.name):  # found, it would be shown beside this tool under one name (check_clash)
            withheld = {
                self.name: "a catalog tool named like the search tool cannot be offered",
                **(withheld or {}),
            }
        with tracing.retrieval(session.index, session.allowed) as traced:  # the loop, the executor, the gateway
            return traced.outcome(
                self._run(session, arguments, alias, withheld or {}, min_relative_score, rights_unlisted)
            )

    def _run(
        self,
        session: Session,
        arguments: Mapping[str, Any] | str | None,
        alias: Callable[[str], str] | None,
        withheld: Mapping[str, str],
        min_relative_score: float,
        rights_unlisted: bool = False,
    ) -> MetaToolOutcome:
        args, problem = self.parse(session, arguments, rights_unlisted=rights_unlisted)
        if args is None:
            return MetaToolOutcome(text=problem, error=problem)
        k = args.max_results or self.default_results
        namespaces = [args.namespace] if args.namespace else None
        query = args.query.strip()
        loaded = session.loaded_names() if self.skip_loaded else frozenset()
        # Over-fetch so that loaded (and withheld) matches do not use up the slots; the cap bounds the
        # cost for sessions with many pinned tools (they may then get fewer than k new tools).
        fetch = min(k + len(loaded) + len(withheld), k + _MAX_SKIPPED)
        try:
            result = session.search(query, fetch, namespaces=namespaces, record=False)
        except InvalidQueryError as exc:
            _, hint = _backend_syntax(session)
            text = joined_sentences(
                f"{self.name} could not run the query {query!r}: {exc}", f"How to search instead: {hint}."
            )
            return MetaToolOutcome(text=text, error=str(exc), query=query, max_results=k, namespace=args.namespace)
        best = result.hits[0].score if result.hits else 0.0
        result = _without(result, withheld, k)
        result, already = _new_hits(result, loaded, k)
        result = _above(result, min_relative_score * best if best > 0 else None, min_relative_score)
        update = session.discover(result.names) if result.hits else None
        return MetaToolOutcome(
            text=self.render(
                session,
                result,
                update,
                namespace=args.namespace,
                alias=alias,
                already_loaded=already,
                rights_unlisted=rights_unlisted,
            ),
            result=result,
            query=query,
            max_results=k,
            namespace=args.namespace,
            update=update,
            already_loaded=already,
        )

    def render(
        self,
        session: Session,
        result: SearchResult,
        update: DiscoveryUpdate | None,
        *,
        namespace: str | None = None,
        alias: Callable[[str], str] | None = None,
        already_loaded: Sequence[str] = (),
        rights_unlisted: bool = False,
    ) -> str:
        """Compact text: one line per tool (name, score, one-line summary), plus any notes.

        `already_loaded` names matches the session already has, which the result leaves out; `rights_unlisted`
        as for `run`.
        """
        where = f" in namespace {namespace!r}" if namespace else ""
        notes = [f"Note: {n}" for n in result.notes]
        named = alias or str

        def shown_name(name: str) -> str:  # one line per tool whatever a name holds (Tool refuses breaks: a 2nd guard)
            return on_one_line(named(name))

        if already_loaded:
            notes.insert(0, "Already loaded, not repeated: " + ", ".join(map(shown_name, already_loaded)) + ".")
        if not result.hits and already_loaded:
            lines = [
                f"No new tools for {result.query!r}{where}: its best matches are already loaded. Call one of them, "
                "or search with other words for a different capability."
            ]
            return "\n".join(lines + notes)
        if not result.hits and session.allowed is not None and not session.allowed:
            return f"No tools matched {result.query!r}{where}. {_no_tools(rights_unlisted)}"
        if not result.hits:
            _, hint = _backend_syntax(session)
            lines = [
                f"No tools matched {result.query!r}{where}. Try again with other words: synonyms, the action and "
                f"the object (e.g. 'create invoice'), or fewer terms; {hint}."
            ]
            return "\n".join(lines + notes)
        evicted = set(update.evicted) if update else set()
        shown = [(h, t) for h, t in zip(result.hits, result.tools, strict=True) if h.name not in evicted]
        lines = [f"Found {len(shown)} tool(s) for {result.query!r}{where}. They are now available: call them by name."]
        for hit, tool in shown:
            lines.append(f"- {shown_name(hit.name)} (score {hit.score:.3g}): {one_line_summary(tool.description)}")
        if update is not None and update.evicted:
            dropped = [n for n in update.evicted if n not in {h.name for h in result.hits}]
            over = [n for n in update.evicted if n in {h.name for h in result.hits}]
            if dropped:
                lines.append(
                    "Note: to stay within this session's tool budget these tools were unloaded: "
                    + ", ".join(map(shown_name, dropped))
                    + " (search again to reload one)."
                )
            if over:
                lines.append(
                    "Note: over this session's tool budget, not loaded: " + ", ".join(map(shown_name, over)) + "."
                )
        return "\n".join(lines + notes)


def _without(result: SearchResult, withheld: Mapping[str, str], k: int) -> SearchResult:
    """The result without withheld tools; a note for each one ranked among the first `k` (the rest never showed)."""
    if not withheld or not any(h.name in withheld for h in result.hits):
        return result
    kept = [i for i, h in enumerate(result.hits) if h.name not in withheld]
    notes = [f"{on_one_line(h.name)} left out: {withheld[h.name]}" for h in result.hits[:k] if h.name in withheld]
    return replace(
        result,
        hits=tuple(result.hits[i] for i in kept),
        tools=tuple(result.tools[i] for i in kept),
        notes=(*result.notes, *notes),
    )


def _above(result: SearchResult, floor: float | None, fraction: float) -> SearchResult:
    """The hits scoring at least `floor` (None: all of them); the count left out, as a note."""
    if floor is None or all(h.score >= floor for h in result.hits):
        return result
    kept = [i for i, h in enumerate(result.hits) if h.score >= floor]
    weak = len(result.hits) - len(kept)
    note = (
        f"{weak} weaker match(es) left out (scores below {fraction:.0%} of the best match's); if none of "
        "these tools fits, search again with other words."
    )
    return replace(
        result,
        hits=tuple(result.hits[i] for i in kept),
        tools=tuple(result.tools[i] for i in kept),
        notes=(*result.notes, note),
    )


def _new_hits(result: SearchResult, loaded: frozenset[str], k: int) -> tuple[SearchResult, tuple[str, ...]]:
    """The first `k` hits the session does not have yet, and the loaded hits ranked above the last kept one."""
    kept: list[int] = []
    skipped: list[int] = []
    for i, hit in enumerate(result.hits):
        if len(kept) == k:
            break
        (skipped if hit.name in loaded else kept).append(i)
    if not skipped and len(result.hits) <= k:
        return result, ()
    trimmed = replace(result, hits=tuple(result.hits[i] for i in kept), tools=tuple(result.tools[i] for i in kept))
    return trimmed, tuple(result.hits[i].name for i in skipped)


def system_prompt_suffix(
    session: Session,
    *,
    list_namespaces: bool = True,
    metatool: ToolSearchMetaTool | None = None,
    template: str | None = None,
    max_namespaces: int = 100,
) -> str:
    """A short addition to the system prompt telling the model to search when it lacks a tool.

    `template` may use `{tool}` (the meta-tool's name) and `{namespaces}` (a sentence listing
    them, or empty).
    """
    if not hasattr(session, "namespaces"):
        raise wrong_type("system_prompt_suffix: session", session, "a Session (SessionManager.create)")
    name = (metatool or ToolSearchMetaTool()).name
    namespaces = ""
    if list_namespaces and session.namespaces:
        known = session.namespaces
        listed = ", ".join(map(on_one_line, known[:max_namespaces]))
        more = f" and {len(known) - max_namespaces} more" if len(known) > max_namespaces else ""
        namespaces = f" Tool namespaces: {listed}{more}."
    text = template or (
        "You have only a few tools loaded. When you need a capability that none of your tools provide, "
        "call `{tool}` to find one; the tools it finds become callable in your next step.{namespaces}"
    )
    return text.format(tool=name, namespaces=namespaces)
