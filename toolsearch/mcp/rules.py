"""The gateway's rules, once for both protocol eras: search, list and admit a call, for a caller resolved per request.

`GatewayRules` is built from explicit parts (the index, the meta-tool, the rug-pull pins, the usage
log, the executor's rules, the upstream source, the settings) and holds no conversation state: each
era opens its own session view (a handshake-era session, a 2026-era context handle or scratch
session) and hands it here with the `Asker` its request resolved to. The era adapters parse the wire,
resolve the asker once per request (`resolve`), call these rules, and write the wire.

Rights are decided on every request: a session or handle carries no rights of its own (it is kept
with none), and every rule here first binds the view to the asker's allowed set, which comes from
the policy applied to the caller of *this* request (the token it presented). Narrowing, revoking or
expiring a token therefore takes effect on the next request, for search, list and call alike.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import anyio.to_thread
import mcp_types as types

from .._errors import AugmentationError
from ..catalog import Catalog
from ..executor import ExecutorConfig, ToolExecutor, invalid_arguments_text
from ..index import ToolIndex
from ..metatool import MetaToolOutcome, ToolSearchMetaTool
from ..providers import ToolCall
from ..session import Session, pinned_in
from ..tools import Tool
from ..usage import usage_not_recorded
from .caller import Caller, caller_of_request, request_scope
from .caps import owner_of
from .metatools import CALL_TOOL, schema_problems
from .pinning import DefinitionPins, Repinned
from .settings import GatewaySettings
from .source import (
    SEPARATOR,
    InputRound,
    MCPToolSource,
    ProgressSink,
    definition_changes,
    error_result,
    namespaced_name,
    upstream_of,
)
from .usage_feed import GatewayUsage

__all__ = ["Admitted", "Asker", "Found", "GatewayRules", "progress_sink", "resolve_pins"]

logger = logging.getLogger("toolsearch.mcp")


def resolve_pins(patterns: Iterable[str], catalog: Catalog) -> tuple[list[str], list[str]]:
    """Expand pins: an exact tool name, a server name (all its tools) or a glob (`time__*`).

    Returns (pinned names, patterns that matched nothing).
    """
    names = catalog.names
    pinned: dict[str, None] = {}
    unmatched: list[str] = []
    for pattern in patterns:
        if pattern in catalog:
            hits = [pattern]
        elif pattern in catalog.namespaces:
            members = catalog.names_in([pattern])
            hits = [n for n in names if n in members]
        else:
            hits = fnmatch.filter(names, pattern)
        if not hits:
            unmatched.append(pattern)
        for name in hits:
            pinned.setdefault(name, None)
    return list(pinned), unmatched


def progress_sink(ctx: Any, params: types.CallToolRequestParams) -> ProgressSink | None:
    """Where an upstream's progress for this tools/call goes, in either era: to its client, under the progress token
    the client gave (the SDK's request-scoped session sends it with this request's id, so over HTTP it rides the
    call's own response stream); None when the client gave none, and then none is asked of the upstream. (A `true`
    token reaches here as 1, which the SDK's `report_progress` then refuses: validation of the request made it one.)"""
    if (params.meta or {}).get("progress_token") is None:
        return None
    sink: ProgressSink = ctx.session.report_progress
    return sink


@dataclass(frozen=True, slots=True)
class Asker:
    """Whom one request is served for, resolved once at its edge.

    `allowed` is what the policy gives this request's caller now (None: every tool); `owner` is whom
    new state (a session, a context handle) counts against, None on stdio.
    """

    caller: Caller
    allowed: frozenset[str] | None
    owner: str | None = None
    # Whether the policy gives the caller any tool at all, listed now or not: an empty `allowed` of a caller with
    # rights means its tools are not listed now (a server down), not that it has none (what tool_search says).
    granted: bool = True


@dataclass(frozen=True, slots=True)
class Found:
    """A search: the meta-tool's outcome, the tools to show (found, then earlier ones re-pinned to a
    changed definition) and what was re-pinned."""

    outcome: MetaToolOutcome
    tools: tuple[Tool, ...] = ()
    repinned: tuple[Repinned, ...] = ()


@dataclass(frozen=True, slots=True)
class Admitted:
    """A call that may go: the tool, its own arguments, the augmented values (None without an
    augmentation), whether it joined the conversation's tools, and the id its use is logged under."""

    name: str
    arguments: dict[str, Any]
    values: dict[str, Any] | None
    joined: bool
    usage_id: str


class GatewayRules:
    """Search, list and admit a call, the same for both protocol eras (see the module docstring)."""

    def __init__(
        self,
        *,
        index: ToolIndex,
        metatool: ToolSearchMetaTool,
        source: MCPToolSource,
        settings: GatewaySettings,
        usage: GatewayUsage,
    ) -> None:
        self.index = index
        self.metatool = metatool
        self.source = source
        self.settings = settings
        self.usage = usage
        # the executor's allow/discover rules, as the gateway applies them: a tool called by name joins
        self.executor = ToolExecutor(
            metatool=metatool,
            config=ExecutorConfig(tool_timeout=None, undiscovered="execute", provider_names=False),
            augment=settings.augment,
        )
        per_server = {server.name: server.changed_tools for server in source.config.servers}
        self.pins = DefinitionPins(settings.options.changed_tools, per_server)
        if settings.augment is not None:  # at start a colliding tool stops the gateway: the operator fixes it once
            settings.augment.check(index.catalog, catalog_key=index.catalog.hash)
        self._withheld: tuple[str, dict[str, str]] = ("", {})
        self._allowed: dict[int, tuple[frozenset[str], str, frozenset[str]]] = {}
        self.pinned: list[str] = []
        self._visible: dict[tuple[str, frozenset[str]], str] = {}
        # Counts the policy reloads that took effect: the gateway compares it around `resolve` and tells the clients
        # whose tools the new rights changed (as after an upstream change).
        self.policy_version = 0
        self.rebind(index, announce=False)
        for pattern in resolve_pins(settings.pinned, index.catalog)[1]:
            logger.warning("pin %r matches no tool; it is ignored", pattern)
        check_servers = getattr(settings.policy, "check_servers", None)  # (a ToolPolicy; a plug-in's may not have it)
        if callable(check_servers):  # PolicyError: a rule naming a server this gateway does not front
            fronted = {server.name: _tool_prefix(server.name) for server in source.config.servers}
            disabled = getattr(source.config, "disabled", ())  # a rule may name them: accepted, with an INFO line
            if disabled:
                check_servers(fronted, disabled={name: _tool_prefix(name) for name in disabled})
            else:
                check_servers(fronted)
        self._unmatched_policy_tools()

    # --- the index and what it holds -----------------------------------------------------------

    def rebind(self, index: ToolIndex, *, announce: bool = True) -> None:
        """The catalog changed (an upstream's tools did): pins resolved again, augmentation checked again."""
        self.index = index
        self.pinned = resolve_pins(self.settings.pinned, index.catalog)[0]
        before = set(self._withheld[1])
        withheld = self.withheld()
        for name in withheld.keys() - before if announce else ():  # said once per tool, where the operator looks
            logger.error("an upstream tool cannot be offered with --augment: %s is left out: %s", name, withheld[name])

    def withheld(self) -> dict[str, str]:
        """{tool name: why} for the tools that collide with the augmented fields: never shown, found or called."""
        augment = self.settings.augment
        catalog = self.index.catalog
        if augment is None:
            return {}
        if self._withheld[0] != catalog.hash:
            clashes = augment.collisions(catalog, catalog_key=catalog.hash)
            self._withheld = (catalog.hash, {name: _collision_text(fields) for name, fields in clashes.items()})
        return self._withheld[1]

    def exposed(self, tool: Tool) -> Tool | None:
        """An upstream tool as clients are shown it: with the augmented fields when there are any; None when
        they collide with its own parameters (such a tool is not offered)."""
        augment = self.settings.augment
        if augment is None:
            return tool
        try:
            return augment.extend(tool)
        except AugmentationError:
            return None

    # --- who asks ------------------------------------------------------------------------------

    def resolve(self, ctx: Any) -> Asker:
        """The one caller resolution of a request: its caller (the token it carries), what the policy
        gives that caller now, and whom new state counts against (over HTTP)."""
        caller = caller_of_request(ctx)
        scope = request_scope(ctx)
        # The policy file's identity is checked here, once per request (one os.stat): an edit decides this request.
        refresh = getattr(self.settings.policy, "refresh", None)
        if callable(refresh) and refresh():
            self.policy_version += 1
            self._unmatched_policy_tools()
        return self.asker_for(caller, None if scope is None else owner_of(scope))

    def asker_for(self, caller: Caller, owner: str | None = None) -> Asker:
        """`caller` with what the policy gives it now (the policy file is not checked again: `resolve` does, once
        per request): for a request resolved before the catalog changed, and for a listener between requests."""
        allowed = self.allowed_for(caller)
        return Asker(caller, allowed, owner, granted=allowed is None or bool(allowed) or self._grants(caller))

    def _grants(self, caller: Caller) -> bool:
        """Whether the policy gives `caller` any tool, listed now or not (asked only of a caller with none listed)."""
        policy = self.settings.policy
        grants = getattr(policy, "grants", None)  # (a ToolPolicy; a plug-in's answers for the catalog only)
        if callable(grants):
            return bool(grants(caller))
        return policy is None or bool(policy.allowed(caller, self.index.catalog))

    def _unmatched_policy_tools(self) -> None:
        """Warn of each `tools` pattern of the policy that matches no tool now (an upstream may list it later)."""
        unmatched = getattr(self.settings.policy, "unmatched_tools", None)
        if not callable(unmatched):
            return
        for rule, pattern in unmatched(self.index.catalog):
            logger.warning(
                "policy %s: rule %d names the tool %r, which matches no tool of this gateway now (its tools are "
                "named server__tool); it allows nothing until an upstream lists such a tool",
                getattr(self.settings.policy, "source", "policy"),
                rule,
                pattern,
            )

    def allowed_for(self, caller: Caller) -> frozenset[str] | None:
        """The tool names `caller` may list, search and call (None: all), per the settings' policy."""
        policy = self.settings.policy
        if policy is None:
            return None
        catalog = self.index.catalog
        allowed = policy.allowed(caller, catalog)
        if allowed is None:
            return None
        # Asked on every request: a policy answers with the same set for the same rules and catalog
        # (ToolPolicy caches it), so its check against the catalog is kept with it, not redone.
        kept = self._allowed.get(id(allowed))
        if kept is not None and kept[0] is allowed and kept[1] == catalog.hash:
            return kept[2]
        filtered = frozenset(n for n in allowed if n in catalog)
        if len(self._allowed) >= 256:
            self._allowed.clear()
        self._allowed[id(allowed)] = (allowed, catalog.hash, filtered)
        return filtered

    def visible_fingerprint(self, allowed: frozenset[str] | None) -> str:
        """A digest of the definitions of every tool `allowed` covers in the catalog (None: all): a client of those
        rights can see a change of the catalog only when it changes (what it is told of, in both eras)."""
        catalog = self.index.catalog
        if allowed is None:
            return catalog.hash
        key = (catalog.hash, allowed)
        digest = self._visible.get(key)
        if digest is None:
            withheld = self.withheld()
            parts = (f"{n}\0{catalog[n].fingerprint}" for n in sorted(allowed) if n in catalog and n not in withheld)
            digest = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
            while len(self._visible) >= 256:  # the oldest goes (a catalog change leaves its keys behind), not all:
                self._visible.pop(next(iter(self._visible)), None)  # clearing thrashed it past 256 rights sets
            self._visible[key] = digest
        return digest

    def seen_by(self, caller: Caller) -> str:
        """`visible_fingerprint` of what the policy gives `caller` now."""
        return self.visible_fingerprint(self.allowed_for(caller))

    def by_rights(self, callers: Sequence[Caller], digest: Callable[[Asker], str]) -> list[str]:
        """`digest` of each caller's asker, worked out once per distinct set of rights however many callers hold it
        (a policy with a rule per user gives as many sets as users, and a digest walks the tools its set covers):
        what each era compares to tell a client of a change to its own tools only."""
        done: dict[frozenset[str] | None, str] = {}
        seen: list[str] = []
        for caller in callers:
            asker = self.asker_for(caller)
            if asker.allowed not in done:
                done[asker.allowed] = digest(asker)
            seen.append(done[asker.allowed])
        return seen

    def pinned_in(self, index: ToolIndex) -> list[str]:
        """The always-shown tools a new session starts with, of those `index` holds (it may be a moment
        behind or ahead of the rules' own while a catalog change is applied): the sessions' own rule
        (session.pinned_in), with every tool allowed, since a request's rights are bound per request."""
        return pinned_in(self.pinned, index)

    @property
    def varies_by_caller(self) -> bool:
        """Whether what a caller may use depends on who it is (a policy is set): lists are then private."""
        return self.settings.policy is not None

    @property
    def everyone(self) -> Asker:
        """An asker allowed every tool (for what is the same for all: the unfiltered stable list)."""
        return Asker(Caller(key="everyone", subject="everyone"), None)

    def bind(self, session: Session, asker: Asker) -> Session:
        """The view `session` with this request's rights: what the asker's current token allows, nothing kept."""
        session.allowed = asker.allowed
        return session

    def may_show(self, asker: Asker, name: str) -> bool:
        return (
            name in self.index.catalog
            and (asker.allowed is None or name in asker.allowed)
            and (name not in self.withheld())
        )

    # --- list ----------------------------------------------------------------------------------

    def instructions(self, asker: Asker, *, modern: bool) -> str:
        """What a client is told at initialize (or server/discover): the asker's own tools and servers only."""
        catalog = self.index.catalog
        withheld = self.withheld()
        names = [n for n in (catalog.names if asker.allowed is None else asker.allowed) if n not in withheld]
        servers: dict[str, None] = {}
        for name in names:
            namespace = catalog[name].namespace if name in catalog else None
            if namespace is not None:
                servers[namespace] = None
        order = {ns: i for i, ns in enumerate(catalog.namespaces)}
        listed = ", ".join(sorted(servers, key=lambda ns: order.get(ns, len(order)))) or "none"
        text = f"This server fronts {len(names)} tools from these MCP servers: {listed}. "
        search = self.metatool.name
        if modern:
            return text + (
                f"Call `{search}` with a short description of what you need: it returns the "
                f"definitions of the tools it finds; call one through `{CALL_TOOL}` with its name and arguments."
            )
        text += (
            f"Only a few are loaded: call `{search}` with a short description of what you need; "
            "the tools it finds are added to your tool list."
        )
        if self.settings.call_tool:
            text += f" If your tool list does not update, call found tools through `{CALL_TOOL}`."
        return text

    def pinned_tools(self, asker: Asker) -> list[Tool]:
        """The always-shown tools the asker may use, as clients are shown them (their current definitions)."""
        catalog = self.index.catalog
        shown = (self.exposed(catalog[n]) for n in self.pinned if self.may_show(asker, n))
        return [t for t in shown if t is not None]

    def shown(self, asker: Asker, session: Session) -> list[Tool]:
        """The upstream tools a conversation is shown now: its pinned and found tools the asker may use,
        each as the conversation first saw it (rug-pull pins, recorded on first sight), as clients see it."""
        self.bind(session, asker)
        visible = [t for t in session.visible_tools() if t.metadata.get("mcp") and self.may_show(asker, t.name)]
        pins = self.pins.record(session, visible)
        shown = (self.exposed(self.pins.view(tool, pins).shown) for tool in visible)
        return [t for t in shown if t is not None]

    # --- search --------------------------------------------------------------------------------

    def search(self, asker: Asker, session: Session, arguments: Mapping[str, Any], usage_id: str) -> Found:
        """Search for the asker (its allowed tools; withheld ones and weak matches left out, with a note),
        re-pin the conversation's tools to their current definitions (it is shown them again), and log
        the search under `usage_id`. Found tools are catalog definitions; `exposed` shows them."""
        self.bind(session, asker)
        outcome = self.metatool.run(
            session,
            arguments,
            withheld=self.withheld(),
            min_relative_score=self.settings.min_relative_score,
            rights_unlisted=asker.granted,
        )
        if not outcome.ok:
            return Found(outcome)
        found = list(outcome.tools)
        names = {t.name for t in found}
        loaded = [
            t
            for t in session.visible_tools()
            if t.metadata.get("mcp") and t.name not in names and self.may_show(asker, t.name)
        ]
        repinned = self.pins.refresh(session, [t for t in found if t.metadata.get("mcp")] + loaded)
        found += [r.tool for r in repinned if r.tool.name not in names]
        shown = [t.name for t in outcome.tools] + list(outcome.already_loaded)  # the search's own hits
        try:
            self.usage.catalog_changed(self.index.catalog.hash)
            self.usage.searched(usage_id, outcome.query, shown)
        except Exception as exc:  # a usage store that fails (Redis down) costs learning, never the search
            usage_not_recorded(self.usage.recorder, exc, "a tool search")
        return Found(outcome, tuple(found), tuple(repinned))

    # --- admit a call --------------------------------------------------------------------------

    def admit(
        self, asker: Asker, session: Session, name: str, arguments: Mapping[str, Any], *, unfound_hint: str = ""
    ) -> Admitted | types.CallToolResult:
        """The rules before a call, in order: the asker's rights (a forbidden tool is answered as a missing
        one), not withheld, found first (`require_discovery`; `unfound_hint` adds how), the executor's
        allow and discover rules (a tool called by name joins the conversation), not held or blocked as
        changed (rug-pull pins), augmented values and arguments valid (the executor's checks, against the
        schema the conversation saw). A refusal is the tool error to answer with."""
        self.bind(session, asker)
        search = self.metatool.name
        joined = not session.is_visible(name)
        if session.is_allowed(name):  # only what the asker may use is told apart from a missing tool
            why = self.withheld().get(name)
            if why is not None:
                return error_result(f"Tool {name!r} cannot be called through this gateway: {why}.")
            if joined and self.settings.require_discovery:
                return error_result(
                    f"Tool {name!r} was not found by {search} here, and this gateway calls only found tools. "
                    f"Call {search} first{unfound_hint}, then call it again."
                )
        call = ToolCall("", name, dict(arguments))
        refused = self.executor.admit(session, call)
        if refused is not None:
            return error_result(refused.content)
        tool = self.index.catalog.get(name)
        if tool is None:  # removed by an upstream change a moment ago
            return error_result(f"Tool {name!r} is no longer offered. Call {search} to find another.")
        held = self.held(tool)
        if held is not None:
            return held
        pinned = self.pins.view(tool, self.pins.record(session, [tool]))  # a first call is a first sighting
        if pinned.blocked:
            return self.blocked(tool, pinned.shown)
        own, values = dict(arguments), None
        if self.settings.augment is not None:
            try:
                split, values, problems = self.executor.split_augmented(session, call)
            except AugmentationError as exc:  # collides since the last catalog check: refused like a withheld tool
                return error_result(f"Tool {name!r} cannot be called through this gateway: {exc}.")
            if problems:
                return error_result(invalid_arguments_text(name, problems))
            own = dict(split.arguments)
        problem = schema_problems(pinned.shown, own)  # "keep": the schema the conversation saw, never an unseen one
        if problem is not None:
            return problem
        if not joined:
            session.touch([name])
        return Admitted(name, own, values, joined, session.id)

    def held(self, tool: Tool) -> types.CallToolResult | None:
        """In "block" mode, the refusal of a call to a tool whose server announced a change the index
        has not caught up with (re-listing, or listed anew but not yet indexed); None when it may go.

        Everyone is held, not only sessions that saw the tool: what the index holds, which a call
        would be checked and pinned against, is no longer what the upstream runs.
        """
        origin = upstream_of(tool)
        if origin is None or self.pins.policy_for(tool) != "block":
            return None
        server, original = origin
        live = self.source.definition(tool.name)
        if not self.source.changing(server) and live is not None and live.fingerprint == tool.fingerprint:
            return None
        logger.warning(
            "held a call to %r of MCP server %r: its tools changed and are being re-read (changedTools: block)",
            original,
            server,
        )
        return error_result(
            f"MCP server {server!r} announced that its tools changed, and this gateway is re-reading them; it does "
            f"not call them unseen meanwhile, so {tool.name!r} did not run. Wait a moment, call "
            f"{self.metatool.name} to see its current definition, then decide whether to call it."
        )

    def blocked(self, tool: Tool, seen: Tool) -> types.CallToolResult:
        server, original = upstream_of(tool) or ("?", tool.name)
        what = " and ".join(definition_changes(seen, tool)) if seen is not tool else "definition"
        logger.warning(
            "refused a call to %r of MCP server %r: its %s changed after the client saw it (changedTools: block)",
            original,
            server,
            what,
        )
        return error_result(
            f"Tool {tool.name!r} (MCP server {server!r}) changed its {what} after you loaded it, and this gateway "
            f"does not call changed tools unseen. Call {self.metatool.name} to see its current definition "
            "(your tool list is updated), then decide whether to call it."
        )

    # --- the call ------------------------------------------------------------------------------

    @overload
    async def call(
        self,
        asker: Asker,
        admitted: Admitted,
        call_id: str,
        *,
        progress: ProgressSink | None = None,
        input_round: None = None,
    ) -> types.CallToolResult: ...

    @overload
    async def call(
        self,
        asker: Asker,
        admitted: Admitted,
        call_id: str,
        *,
        progress: ProgressSink | None = None,
        input_round: InputRound,
    ) -> types.CallToolResult | types.InputRequiredResult: ...

    async def call(
        self,
        asker: Asker,
        admitted: Admitted,
        call_id: str,
        *,
        progress: ProgressSink | None = None,
        input_round: InputRound | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run an admitted call: its augmented values logged and consumed, the upstream called with its own
        arguments (its progress to `progress`; `input_round`: the client takes a request for input, see
        `MCPToolSource.call_tool`), its outcome logged for the usage log."""
        if admitted.values is not None:
            # The operator asked to see why each call is made: one log line per call (values cut short).
            values = json.dumps(admitted.values, ensure_ascii=False)[:1000]
            logger.info("augmented call %s by %s: %s", admitted.name, asker.caller.key, values)
            self.executor.consume(admitted.name, admitted.values, call_id)
        limit = self.settings.options.max_result_bytes
        result = await self.source.call_tool(
            admitted.name, admitted.arguments, max_result_bytes=limit, progress=progress, input_round=input_round
        )
        if isinstance(result, types.InputRequiredResult):
            return result  # not done yet: the round that completes it is the one the usage log counts
        ok = not result.is_error
        try:
            if ok and self.usage.remote:  # a Redis round trip: off the event loop, which serves every other request
                await anyio.to_thread.run_sync(self.usage.called, admitted.usage_id, admitted.name, ok)
            else:
                self.usage.called(admitted.usage_id, admitted.name, ok)
        except Exception as exc:  # the tool ran: its answer stands (an error would invite a second run)
            usage_not_recorded(self.usage.recorder, exc, f"a call of {admitted.name!r}")
        return result


def _tool_prefix(server: str) -> str:
    """What the gateway's names of `server`'s tools start with, before the separator (`my.bank` -> `my_bank`)."""
    named = namespaced_name(server, "t")
    tail = f"{SEPARATOR}t"
    return named[: -len(tail)] if named.endswith(tail) else server


def _collision_text(fields: Iterable[str]) -> str:
    names = ", ".join(repr(f) for f in fields)
    return (
        f"its own parameter(s) {names} have the name of a field this gateway adds to every tool (--augment), "
        "so its calls could not keep their own arguments; the gateway's operator can rename that field"
    )
