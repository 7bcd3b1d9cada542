"""MCP servers as a tool source: connect, list every page, namespace the tools, route calls, follow changes."""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import logging
import math
import os
import random
import re
import secrets
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO, overload

import anyio
import anyio.abc
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.server.validation import wants_sampling_tools
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from .._errors import InvalidToolError, MCPConfigError, UpstreamError, named_error
from .._redact import RedactedRecords
from .._untrusted import MAX_DEPTH, clean_text
from ..catalog import Catalog
from ..executor import DEFAULT_MAX_RESULT_BYTES
from ..tools import MAX_DESCRIPTION_CHARS, MAX_SCHEMA_CHARS, SAFE_NAME_KEPT, Tool, provider_safe_name
from .config import MCPConfig, ServerConfig, load_config, parse_config

__all__ = [
    "SEPARATOR",
    "MCPToolSource",
    "UpstreamServer",
    "UpstreamError",
    "CollectedTools",
    "collect_tools",
    "namespaced_name",
    "tool_from_mcp",
    "upstream_of",
    "mcp_definition",
    "error_result",
    "restart_delay",
    "InputRound",
    "ProgressSink",
]

logger = logging.getLogger("toolsearch.mcp")

SEPARATOR = "__"
"""Between server and tool name: `time__get_current_time`. Provider-safe, and rare inside tool names."""

RESTART_WINDOW = 60.0  # seconds: a server that crashes sooner than this after starting is crash-looping
# A crashed server is restarted after RESTART_FIRST seconds, then (while it keeps failing or crashing within
# RESTART_WINDOW of each start) after twice as long each time, up to RESTART_CAP: a server that cannot run costs a
# process start a minute, not a loop, and one that crashed once is back within about a second.
RESTART_FIRST = 1.0
RESTART_CAP = 60.0
# A call to a server that is down waits for its next restart attempt when that is due this soon; else it fails at once,
# saying when the next attempt is.
CALL_WAITS_FOR_RESTART = 5.0
MAX_PAGES = 1_000  # a server whose cursor never ends cannot hang startup
# The longest line a stdio server's answer to tools/list may be (one page of its tools): a call's answer is limited
# by its `maxResultBytes` (`UpstreamServer.message_limit`), a listing is not, but is not read without end either.
LISTING_LINE_LIMIT = 64 * 1024 * 1024
ERROR_CHARS = 2_000  # of an upstream's error message passed on: the start says what went wrong, 5 MB say no more
PROGRESS_CHARS = 500  # of an upstream's progress message passed on: a status line, not a channel for documents
STDERR_CHARS = 1_000  # of a line a stdio server writes on its stderr passed on: a log line, not a channel either
PROBE_TIMEOUT = 10.0  # seconds a server/discover probe may take; no answer means the handshake era (spec)
# seconds a ping may take that asks whether an HTTP server is still there after one request's stream ended unanswered
PING_TIMEOUT = 10.0
# A 2026-07-28 server without subscriptions/listen is re-listed when its list's ttlMs runs out, within
# these bounds: ttlMs 0 (the SDK's default, "immediately stale") must not mean a re-listing loop.
RELIST_FLOOR = 5.0
RELIST_CEILING = 300.0
# Announced changes of one server are re-listed at most once per RELIST_GAP seconds: a server announcing a change
# every few milliseconds costs one listing a second (the announcements meanwhile all wait for the next one), not a
# listing loop that starves the other servers and never gets round to applying what it read.
RELIST_GAP = 1.0
CHANGES_LOGGED = 10  # changed definitions one listing logs by name; the rest are counted on one line
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")

State = Literal["idle", "starting", "ready", "failed", "crashed", "stopped"]
ChangeListener = Callable[["UpstreamServer"], Awaitable[None]]
ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]
"""Where a call's progress goes (progress, total, message): the calling client, under its own progress token."""


@dataclass(frozen=True, slots=True)
class InputRound:
    """The client's side of a call whose tool may ask for input first (MCP 2026-07-28, SEP-2322): a client of that
    revision takes the upstream's `InputRequiredResult` as the answer, answers its requests itself (those its
    `capabilities` cover) and calls again with the `responses` and the echoed `state`, which reach the upstream
    unchanged (the state is the upstream's, opaque here, and checked by it)."""

    responses: types.InputResponses | None = None
    state: str | None = None
    capabilities: types.ClientCapabilities | None = None


class _ProbeClosedPipe(Exception):
    """A stdio server closed its pipe on the server/discover probe: start it again, with the handshake."""


class _ModernAfterAll(Exception):
    """The handshake was refused with a 2026 version: the server took the abandoned probe after all."""


def _supported_versions(data: Any) -> list[str]:
    """The `supported` list of an UnsupportedProtocolVersion error's data; empty when it has none."""
    try:
        return types.UnsupportedProtocolVersionErrorData.model_validate(data).supported
    except ValidationError:
        return []


# --- tools ------------------------------------------------------------------------------------


def restart_delay(attempt: int, *, rng: random.Random | None = None) -> float:
    """Seconds to wait before restart attempt `attempt` (1: the first after a crash): RESTART_FIRST, doubled for each
    attempt after it up to RESTART_CAP, then jittered to between half and all of that, so that servers which crashed
    together (one cause, or one gateway restarted) do not all restart in step."""
    doublings: int = min(max(attempt, 1) - 1, 16)
    whole = min(RESTART_CAP, RESTART_FIRST * 2.0**doublings)
    share: float = (rng or random).random()
    return whole / 2 + share * whole / 2


def namespaced_name(server: str, tool: str, *, separator: str = SEPARATOR) -> str:
    """The name a tool gets in the combined catalog: `<server><separator><tool>`, provider-safe."""
    return provider_safe_name(f"{_prefix(server)}{separator}{tool}")


def _prefix(server: str) -> str:
    return _UNSAFE.sub("_", server).strip("_") or "server"


def _name_prefix(server: str, separator: str) -> str:
    """How every tool name of `server` starts, as far as `provider_safe_name` keeps a long name's start: what routes a
    name to its server, and what two servers may not share (`check_namespaces`)."""
    return f"{_prefix(server)}{separator}"[:SAFE_NAME_KEPT]


def check_namespaces(servers: Iterable[str], separator: str = SEPARATOR) -> None:
    """Refuse two servers whose tools' names could coincide, so that no server can take another's tool.

    Server `a` listing `b__c` and server `a__b` listing `c` both give `a__b__c`; so do `a` and `a.`
    (one prefix), and names that agree in the part of a long name `provider_safe_name` keeps before
    its 32-bit digest, which a server can search for. Routing by first server would send the other's
    calls to whichever server listed the name first, so the config is refused instead.
    """
    seen: dict[str, str] = {}
    for server in servers:
        mine = _name_prefix(server, separator)
        for other, theirs in seen.items():
            if mine.startswith(theirs) or theirs.startswith(mine):
                raise MCPConfigError(
                    f"servers {other!r} and {server!r}: their tools' names could coincide (each is the server's "
                    f"name, '_' for '.', then {separator!r} and the tool's name, so {theirs!r}... and {mine!r}... "
                    "overlap), and one server could take the other's tool by listing such a name. Rename one so "
                    f"that neither name starts with the other followed by {separator!r}"
                )
        seen[server] = mine


# What a client is shown of a tool beside its input schema (which `Tool` limits to MAX_SCHEMA_CHARS), in characters
# of JSON: every client takes a tool in whole, in one message, so one 3 MB output schema or title made every
# tools/list of a handshake-era HTTP session fail (the MCP SDK reads at most 1 MiB per event).
_SHOWN_LIMITS = {"outputSchema": MAX_SCHEMA_CHARS, "title": MAX_DESCRIPTION_CHARS, "annotations": MAX_DESCRIPTION_CHARS}
_SHOWN_NAMES = {"outputSchema": "output schema", "title": "title", "annotations": "annotations"}


def _check_shown_sizes(data: Mapping[str, Any]) -> None:
    """Refuse a definition whose output schema, title or annotations is over its limit (`_SHOWN_LIMITS`)."""
    for key, limit in _SHOWN_LIMITS.items():
        value = data.get(key)
        if value is None:
            continue
        try:
            size = len(value) if isinstance(value, str) else len(json.dumps(value))
        except (TypeError, ValueError, RecursionError):
            continue  # not JSON: Tool's own checks name what is wrong with it
        if size > limit:
            name = data.get("name")
            raise InvalidToolError(
                f"tool {str(name)[:80]!r}: {_SHOWN_NAMES[key]} is {size:,} characters"
                f"{'' if isinstance(value, str) else ' of JSON'}; the limit is {limit:,}"
            )


def tool_from_mcp(definition: Any, server: str, *, separator: str = SEPARATOR) -> Tool:
    """Convert one upstream MCP tool; the original name and output schema stay in `metadata["mcp"]`.

    A definition larger than a client can take in (`_SHOWN_LIMITS`, and `Tool`'s own limits) is InvalidToolError.
    """
    data = (
        definition.model_dump(by_alias=True, exclude_none=True, mode="json")
        if hasattr(definition, "model_dump")
        else dict(definition)
    )
    _check_shown_sizes(data)
    base = Tool.from_mcp(data, namespace=server)
    origin: dict[str, Any] = {"server": server, "name": base.name}
    if isinstance(data.get("outputSchema"), Mapping):
        origin["outputSchema"] = data["outputSchema"]
    return Tool(
        name=namespaced_name(server, base.name, separator=separator),
        description=base.description,
        input_schema=base.input_schema,
        namespace=server,
        tags=base.tags,
        # Only what a client is shown again (mcp_definition, through Tool.to_mcp) and the origin: the output schema
        # is kept once, in the origin, and `icons` and the like stay out, since a definition's fingerprint covers
        # its metadata and a field an upstream changes would read as a changed tool to every session (pinning.py).
        metadata={**{k: v for k, v in base.metadata.items() if k in _SHOWN_METADATA and v}, "mcp": origin},
    )


_SHOWN_METADATA = ("title", "annotations")


def upstream_of(tool: Tool) -> tuple[str, str] | None:
    """(server, original tool name) for a tool that came from an MCP server, else None."""
    origin = tool.metadata.get("mcp")
    if isinstance(origin, Mapping) and isinstance(origin.get("server"), str) and isinstance(origin.get("name"), str):
        return origin["server"], origin["name"]
    return None


def mcp_definition(tool: Tool) -> types.Tool:
    """The MCP `Tool` a gateway client sees: our name, the upstream's schema, title, annotations (`Tool.to_mcp`),
    and the upstream's output schema, which the gateway relays results for as they come."""
    origin = tool.metadata.get("mcp")
    data = tool.to_mcp()
    if isinstance(origin, Mapping) and isinstance(origin.get("outputSchema"), Mapping):
        data["outputSchema"] = origin["outputSchema"]
    return types.Tool.model_validate(data, by_name=False)


def error_result(message: str) -> types.CallToolResult:
    """A tool result the model reads as an error (`isError`), never a protocol failure."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def definition_changes(old: Tool, new: Tool) -> list[str]:
    """What differs between two definitions of one tool, in words for a log line."""
    changes = []
    if old.description != new.description:
        changes.append("description")
    if dict(old.input_schema) != dict(new.input_schema):
        changes.append("input schema")
    old_origin, new_origin = old.metadata.get("mcp") or {}, new.metadata.get("mcp") or {}
    if old_origin.get("outputSchema") != new_origin.get("outputSchema"):
        changes.append("output schema")
    if not changes:
        changes.append("title, annotations or other metadata")
    return changes


# --- listing --------------------------------------------------------------------------------------


async def _list_page(
    session: ClientSession, params: types.PaginatedRequestParams | None
) -> tuple[types.ListToolsResult, list[str]]:
    """One page of tools/list, and a line for each malformed definition left out of it.

    The SDK validates a page as one object, so one malformed tool would sink the whole server.
    When that happens the page is fetched again as plain JSON and each definition is checked on
    its own; the good ones are handed back to the session's cache (its `call_tool` looks output
    schemas up there, and would otherwise re-list, strictly, and fail again).
    """
    try:
        return await session.list_tools(params=params), []
    except ValidationError as strict_error:
        send_raw = getattr(getattr(session, "_dispatcher", None), "send_raw_request", None)
        absorb = getattr(session, "_absorb_tool_listing", None)
        if send_raw is None or absorb is None:  # an SDK without these internals: fail as before
            raise strict_error from None
    data: dict[str, Any] = {"method": "tools/list"}
    if params is not None:
        data["params"] = params.model_dump(by_alias=True, exclude_none=True)
    opts: dict[str, Any] = {}
    stamp = getattr(session, "_stamp", None)
    if stamp is not None:  # the protocol-version header (and _meta) the SDK adds to every request
        stamp(data, opts)
    raw = await send_raw(data["method"], data.get("params"), opts)
    entries = raw.get("tools") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list):
        raise UpstreamError("tools/list answered without a 'tools' list")
    tools: list[types.Tool] = []
    problems: list[str] = []
    for position, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        label = f"tool {name!r}" if isinstance(name, str) else f"tool number {position + 1} of the page"
        try:
            tools.append(types.Tool.model_validate(entry, by_name=False))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "definition"
            problems.append(f"{label}: malformed definition ({where}: {first['msg']})")
    cursor = raw.get("nextCursor")
    ttl = raw.get("ttlMs")
    page = types.ListToolsResult(
        tools=tools,
        next_cursor=cursor if isinstance(cursor, str) and cursor else None,
        ttl_ms=ttl if isinstance(ttl, int) and ttl >= 0 else 0,
    )
    complete = params is None and page.next_cursor is None
    return absorb(page, complete=complete), problems


# --- one upstream server ----------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe_failure(config: ServerConfig, exc: BaseException, scrub: Callable[[str], str] = str) -> str:
    """Why a server failed to start, in words; `scrub` hides its configured secrets in what it said (before any cut,
    so that no part of one is left at the cut)."""
    exc = _leaf(exc)
    if isinstance(exc, UpstreamError):
        return str(exc)
    if isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED:
        if config.transport == "stdio":
            return (
                f"the process exited or closed its output before completing the MCP handshake; "
                f"run `{config.describe()}` by hand to see its error"
            )
        return "the server closed the connection before completing the MCP handshake"
    if isinstance(exc, FileNotFoundError) and config.transport == "stdio":
        return f"command not found: {config.command!r} (check 'command' and PATH)"
    if isinstance(exc, OSError) and config.transport == "stdio":
        return f"cannot start `{config.describe()}`: {exc.strerror or exc}"
    if isinstance(exc, MCPError) and isinstance(exc.error.data, _TooLarge):
        return (
            f"it answered with a message over {exc.error.data.limit:,} bytes, more than this gateway reads in one "
            "(over HTTP: 3 times 'maxResultBytes' plus 64 KiB, at least 1 MiB); have it list fewer tools per page, "
            "or raise 'maxResultBytes'"
        )
    if isinstance(exc, MCPError) and isinstance(exc.error.data, _Unreadable):
        return f"it answered with a line that {exc.error.data.reason}: {exc.error.data.excerpt}"
    if isinstance(exc, MCPError):
        data = exc.error.data
        code = data.code if isinstance(data, _UpstreamCode) else exc.error.code
        said = _server_text(exc.error.message, ERROR_CHARS, scrub, counted=True)
        return f"the server answered with an error: {said} (code {code})"
    name = type(exc).__name__
    if config.transport != "stdio" and ("Connect" in name or "Transport" in name or "HTTP" in name):
        # as written, variables unexpanded: a ${VAR} anywhere in it (a hosted service's key in the path, say) may
        # have expanded to a credential
        return f"cannot reach {config.describe()}: {exc or name}"
    return named_error(exc)


def _unreadable_line(error: Exception) -> str:
    """The text of a line the transport rejected as JSON-RPC, when the error carries it."""
    if isinstance(error, ValidationError):
        problems = error.errors()
        raw = problems[0].get("input") if problems else None
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if isinstance(raw, str):
            return raw
    return str(error) or type(error).__name__


def _result_bytes(result: types.CallToolResult | types.InputRequiredResult, limit: int) -> int:
    """The size of a result as JSON, in bytes (counted in characters first: cheap, and a lower bound)."""
    text = result.model_dump_json(by_alias=True, exclude_none=True)
    return len(text) if len(text) > limit else len(text.encode())


def _reserved(key: str) -> bool:
    """Whether a `_meta` key is in MCP's own namespace: a prefix (before the '/') with a label `modelcontextprotocol`
    or `mcp` (`io.modelcontextprotocol/serverInfo`, `mcp.dev/...`), which the spec reserves for the protocol."""
    prefix, slash, _ = key.rpartition("/")
    return bool(slash) and any(label in ("modelcontextprotocol", "mcp") for label in prefix.lower().split("."))


def _kept_meta(meta: Any) -> Any:
    """A `_meta` without the keys in MCP's own namespace (`meta` itself when it has none)."""
    if not isinstance(meta, dict) or not any(_reserved(str(k)) for k in meta):
        return meta
    return {k: v for k, v in meta.items() if not _reserved(str(k))} or None


def _own_meta(result: types.CallToolResult) -> types.CallToolResult:
    """A result without the upstream's protocol `_meta` keys, on it and on its content: they describe the upstream's
    connection (its server info, its request state), not the gateway's, and a client would take them as the
    gateway's. The upstream's own keys pass on."""
    content = []
    for block in result.content:
        own = getattr(block, "meta", None)
        cleaned = _kept_meta(own)
        content.append(block if cleaned is own else block.model_copy(update={"meta": cleaned}))
    meta = _kept_meta(result.meta)
    if meta is result.meta and all(a is b for a, b in zip(content, result.content, strict=True)):
        return result
    return result.model_copy(update={"meta": meta, "content": content})


def _server_text(
    text: str, limit: int, scrub: Callable[[str], str], *, cut: bool = False, counted: bool = False
) -> str:
    """Words a server sent (an error, a progress message, a stderr line), fit for a model, a client and a log line:
    its configured secrets hidden (`scrub`), on one line without what a reader cannot see (`_plain`), at most `limit`
    characters and "..." where there were more (`cut`: `text` is the start of a longer one; `counted`: how many more,
    said). Scrubbed before `_plain` and after it: `_plain` drops an invisible character (a zero-width space) that
    split a secret, and so joins it again."""
    text = scrub(_plain(scrub(text)))
    if len(text) <= limit and not cut:
        return text
    if counted:
        return f"{text[:limit]}... ({len(text) - limit:,} characters of the server's message left out)"
    return text[:limit] + "..."


def _short(exc: BaseException, limit: int = 300, *, scrub: Callable[[str], str] = str) -> str:
    return _server_text(str(exc), limit, scrub) or type(exc).__name__  # an error's text may quote what it was sent


class _ProgressRelay:
    """One call's progress from its upstream, passed on to the client (`sink`): the numbers as sent, except a value
    that does not move forward or is not finite (the spec has progress increase with each notification, and the SDK
    delivers each in a task of its own, so two may arrive out of order); the message cleaned and cut like any text a
    server sends (`_progress_text`); and nothing once the call has its answer (the client's request is over)."""

    def __init__(self, sink: ProgressSink, scrub: Callable[[str], str]) -> None:
        self.sink = sink
        self.scrub = scrub
        self.last: float | None = None
        self.done = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self.done or not math.isfinite(progress) or (self.last is not None and progress <= self.last):
            return
        self.last = progress
        if total is not None and not math.isfinite(total):
            total = None
        try:
            await self.sink(progress, total, _progress_text(message, self.scrub))
        except Exception as exc:  # the client went away meanwhile: the call's answer is what matters
            logger.debug("could not pass on a progress notification: %s", exc)


def _progress_text(message: str | None, scrub: Callable[[str], str]) -> str | None:
    """A progress message fit for a client and a model: its configured secrets hidden, on one line without what a
    reader cannot see (`_plain`), and at most PROGRESS_CHARS characters. Only its start is read at all: a server may
    send many, each as long as its messages may be."""
    if message is None:
        return None
    read = message[: PROGRESS_CHARS * 8]
    return _server_text(read, PROGRESS_CHARS, scrub, cut=len(read) < len(message)) or None


def _asked(requests: Iterable[Any]) -> str:
    """What input requests ask for, in words: `a question for the user (elicitation)`."""
    kinds: list[str] = []
    for request in requests:
        if isinstance(request, types.ElicitRequest):
            url = isinstance(request.params, types.ElicitRequestURLParams)
            kind = "the user to open a web page (URL elicitation)" if url else "a question for the user (elicitation)"
        elif isinstance(request, types.CreateMessageRequest):
            kind = "a reply from the client's model (sampling)"
        else:
            kind = "the client's root folders (roots)"
        if kind not in kinds:
            kinds.append(kind)
    return ", ".join(kinds) or "a call again with the state it returned"


def _can_answer(capabilities: types.ClientCapabilities | None, request: Any) -> bool:
    """Whether a client that declared `capabilities` answers the input request `request` (as the SDK's servers check
    them before they ask)."""
    if capabilities is None:
        return False
    if isinstance(request, types.ElicitRequest):
        have = capabilities.elicitation
        if have is None:
            return False
        if isinstance(request.params, types.ElicitRequestURLParams):
            return have.url is not None
        return have.form is not None or have.url is None  # a bare `elicitation: {}` (before modes) means forms
    if isinstance(request, types.CreateMessageRequest):
        sampling = capabilities.sampling
        tool_use = wants_sampling_tools(request.params.tools, request.params.tool_choice)  # `tools: []` counts
        return sampling is not None and (not tool_use or sampling.tools is not None)
    return capabilities.roots is not None


def _plain(text: str) -> str:
    """Text a server sent, on one line and without what a reader cannot see: terminal escapes, bidirectional
    overrides and tag characters hide instructions from a person reading the log while the model reads them, and
    a line end would let the server write log lines of its own."""
    return " ".join(clean_text(text).split())


_HIGH = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
# A surrogate escape without its pair: JSON allows it, but it names no character, and the SDK's
# parser rejects the whole message (one bad tool would lose its server's whole tools/list page).
_LONE_SURROGATE = re.compile(rf"{_HIGH}(?!{_LOW})|(?<!{_HIGH}){_LOW}")
_REPLACED = "\ufffd"
_BROKEN_TEXT = (
    "its definition holds text that is not valid Unicode (a lone surrogate escape); fix the server's tool definition"
)


def _refused_json(error: Exception) -> tuple[str | bytes, str] | None:
    """(the line, the reader's words) when the SDK's JSON reader refused a line; None for any other error."""
    if not isinstance(error, ValidationError):
        return None
    problems = error.errors()
    if not problems or problems[0].get("type") != "json_invalid":
        return None
    raw = problems[0].get("input")
    return (raw, str(problems[0].get("msg", ""))) if isinstance(raw, str | bytes) else None


def _repair_message(error: Exception) -> SessionMessage | None:
    """A message the SDK could not parse because of lone surrogate escapes, parsed with them replaced."""
    refused = _refused_json(error)
    if refused is None:
        return None
    raw = refused[0].decode("utf-8", "replace") if isinstance(refused[0], bytes) else refused[0]
    if not _LONE_SURROGATE.search(raw):
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(_LONE_SURROGATE.sub(r"\\ufffd", raw)))
    except ValueError:
        return None


def _deep_listing(error: Exception) -> SessionMessage | None:
    """A tools/list answer the SDK's JSON reader refused only for its depth (about 200 levels), read by another.

    One tool's schema nested that deep would otherwise sink every tool of its server. Python's reader
    goes deeper (to its recursion limit); the message is then checked as Python data, which the SDK
    does not walk into a schema, and the deep tool alone is refused when it is converted (`Walk`'s
    depth limit). Only a listing: a deep call result could not be relayed (pydantic will not write
    it as JSON either), so that call fails as an unreadable answer.
    """
    refused = _refused_json(error)
    if refused is None or "recursion limit" not in refused[1]:
        return None
    try:
        data = json.loads(refused[0])
    except (ValueError, RecursionError):
        return None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data))
    except (ValueError, RecursionError):
        return None


# --- lines a stdio server should not have written ------------------------------------------------

# The SDK's stdio reader decodes strictly: one byte that is not UTF-8 raises inside it, and it then
# drains (discards) the server's output for as long as the process lives, so every later call times
# out. This codec decodes UTF-8 with such bytes kept as escapes (U+DC80..U+DCFF): the bad line reaches
# the session as a line the parser refuses, and the next line is read as usual. `<name>-<key>` is the
# codec of one server's pipe (`_READERS`), whose lines it limits (`_LineDecoder`).
_STDIO_ENCODING = "toolsearch-utf-8-escaped"
_READERS: weakref.WeakValueDictionary[str, UpstreamServer] = weakref.WeakValueDictionary()
_READER_KEYS = itertools.count(1)
_LINE_KEPT = 4_096  # bytes kept from each end of a line over its limit: where its request id is
# Between the two ends of a line that was cut: no server can write it, since none can guess it.
_CUT = f"\x00toolsearch-cut-{secrets.token_hex(8)}\x00"


class _LineDecoder(codecs.IncrementalDecoder):
    """UTF-8 with bytes that are not UTF-8 kept as escapes, handed on one whole line at a time, and a line
    longer than its server's limit (`UpstreamServer.line_limit`) not kept.

    Whole lines: the SDK's reader joins its buffer to every chunk it reads (`buffer + chunk`), which for a
    line of N bytes read 64 kB at a time copies N² / 128 kB bytes (a 40 MB answer: 10 s and 374 MB, every
    other server stalled meanwhile); handed whole lines, its buffer stays empty. A line over the limit keeps
    its first and last `_LINE_KEPT` bytes, joined by `_CUT` and the limit, and `_Screen` answers its request
    with an oversized error: at once when its first bytes name the request (the rest is read and dropped),
    else at its end.
    """

    def __init__(self, errors: str = "strict", key: str = "") -> None:
        super().__init__("surrogateescape")  # whatever the reader asks for: this is the point of the codec
        self.key = key
        self.reset()

    def reset(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._cut_at: int | None = None  # the limit the line went over, once it did
        self._head = self._tail = b""
        self._answered = False
        self._roomy = False  # a JSON-RPC error: read up to LISTING_LINE_LIMIT

    def decode(self, input: Any, final: bool = False) -> str:  # input: bytes, as the stdio reader reads them
        data = bytes(input)
        out: list[str] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._take(data[start:end], out)
            out.append(self._line())
            start = end + 1
        self._take(data[start:], out)
        if final and (self._parts or self._cut_at is not None):
            out.append(self._line().removesuffix("\n"))  # an unended last line, as the reader would see it
        return "".join(out)

    def _take(self, piece: bytes, out: list[str]) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._cut_at is not None:
            self._tail = (self._tail + piece)[-_LINE_KEPT:]
            return
        self._parts.append(piece)
        server = _READERS.get(self.key)
        limit = None if server is None else LISTING_LINE_LIMIT if self._roomy else server.line_limit()
        if limit is None or self._size <= limit:
            return
        line = b"".join(self._parts)
        head = line[:_LINE_KEPT].decode("utf-8", "surrogateescape")
        if limit < LISTING_LINE_LIMIT and _at_top_level(head, _ERROR_KEY) is not None:
            # an error, not a result: its message is cut where it is passed on (ERROR_CHARS), so it is read
            # whole unless it outgrows what a listing may be
            self._parts, self._roomy = [line], True
            return
        self._parts, self._cut_at = [], limit
        self._head, self._tail = line[:_LINE_KEPT], line[-_LINE_KEPT:]
        if _at_top_level(head, _METHOD_KEY) is None and _answer_id(head) is not None:
            # its request is answered now, not when (if ever) the line ends
            out.append(f"{head}{_CUT}{limit}{_CUT}\n")
            self._answered = True

    def _line(self) -> str:
        if self._cut_at is None:
            text = b"".join(self._parts).decode("utf-8", "surrogateescape") + "\n"
        elif self._answered:
            text = ""
        else:
            head, tail = (part.decode("utf-8", "surrogateescape") for part in (self._head, self._tail))
            text = f"{head}{_CUT}{self._cut_at}{_CUT}{tail}\n"
        self.reset()
        return text


def _find_codec(name: str) -> codecs.CodecInfo | None:
    base = _STDIO_ENCODING.replace("-", "_")
    if name != base and not name.startswith(f"{base}_"):
        return None
    utf8 = codecs.lookup("utf-8")
    return codecs.CodecInfo(
        utf8.encode,
        utf8.decode,
        name=_STDIO_ENCODING,
        incrementalencoder=utf8.incrementalencoder,
        incrementaldecoder=partial(_LineDecoder, key=name[len(base) + 1 :]),
    )


codecs.register(_find_codec)


class _QuietParseFailures(logging.Filter):
    """Drops the SDK's traceback for a line it cannot parse: `_Screen` logs each such line once, with its server."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Failed to parse JSONRPC message from server"


logging.getLogger("mcp.client.stdio").addFilter(_QuietParseFailures())

# Loggers that write an HTTP upstream's URL whole, user info and `?token=` with it: the HTTP client at INFO (`HTTP
# Request: POST http://bob:pw@host/mcp?token=t ...`, one line per request) and the SDK's HTTP transports at DEBUG
# (`Connecting to StreamableHTTP endpoint: <url>`). The gateway quiets them when it sets up logging itself; a library
# user's `logging.basicConfig(level=logging.INFO)`, or a host's that set up the gateway's logging, does not.
# Each gets a `RedactedRecords` filter here, once, as `mcp.client.stdio` gets its own above.
_URL_LOGGERS = ("httpx2", "httpx", "mcp.client.streamable_http", "mcp.client.sse")
for _name in _URL_LOGGERS:
    logging.getLogger(_name).addFilter(RedactedRecords())

# Error codes the SDK gives its own outcomes. An upstream's error under one of them (JSON-RPC's
# "server error" range starts at -32000, so servers do send it) must not read as a crash or a timeout.
_SDK_CODES = frozenset({CONNECTION_CLOSED, REQUEST_TIMEOUT})
_ANSWER_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_ERROR_KEY = re.compile(r'"error"\s*:\s*\{')
_METHOD_KEY = re.compile(r'"method"\s*:')
_NOISE_LOGGED = 10  # lines that are not MCP logged per connection; a server that logs to stdout would flood


@dataclass(frozen=True, slots=True)
class _Unreadable:
    """The error data of an answer that could not be read: made here, so no upstream can forge one."""

    reason: str
    excerpt: str


@dataclass(frozen=True, slots=True)
class _UpstreamCode:
    """The error data of an upstream's error sent under a code the SDK keeps for its own outcomes."""

    code: int
    data: Any


@dataclass(frozen=True, slots=True)
class _StreamLost:
    """The error data of a request whose HTTP response stream ended without its answer (the SDK transport's own
    outcome, see `_STREAM_LOST`): that one stream ended, which alone does not say the connection did."""

    reason: str


@dataclass(frozen=True, slots=True)
class _TooLarge:
    """The error data of an answer not read past `limit` bytes (an SSE event over HTTP, a line over stdio)."""

    limit: int


# What the MCP SDK's streamable HTTP transport answers a request with when the stream that would carry the answer
# broke (the server died or dropped it mid-call) or outgrew its event size limit: its own outcomes, not the server's.
# An upstream could send the same words under the same code, but then it only makes itself look gone (restarted).
_STREAM_LOST = ("SSE stream ended without a response", "SSE stream ended and reconnection attempts were exhausted")
_STREAM_FAILED = "SSE stream failed: "
_EVENT_TOO_LARGE = re.compile(r"SSE stream failed: Server-sent event exceeded the (\d+) byte limit")


def _transport_made(error: types.ErrorData) -> bool:
    """Whether an error on an HTTP connection's read stream is the SDK transport's own (see `_STREAM_LOST`)."""
    return (
        error.code == CONNECTION_CLOSED
        and error.data is None
        and (error.message in _STREAM_LOST or error.message.startswith(_STREAM_FAILED))
    )


class _RelaySession(ClientSession):
    """The SDK's client session, less its check of a result against the tool's output schema.

    A gateway relays results to a client that was given the same output schema and checks them
    itself. The SDK's check runs the server's own `pattern` regexes on the event loop, where `re`
    holds the interpreter until it is done: one server whose pattern backtracks catastrophically
    (`^(a+)+$` against 31 characters: 83 s) froze every client of every server.
    """

    async def validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        return None


def _at_top_level(raw: str, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The first match of `pattern` (a key) in the top-level object of a JSON text that may be broken or cut off."""
    for found in pattern.finditer(raw):
        before = _JSON_STRING.sub("", raw[: found.start()])
        if '"' not in before and before.count("{") + before.count("[") - before.count("}") - before.count("]") == 1:
            return found
    return None


def _answer_id(raw: str) -> int | str | None:
    """The request id an unreadable line answers, when one can be found; None for a request, a notification or noise.

    Valid JSON gives it exactly. A line cut off or broken otherwise gives the first "id" at the top
    level of its text: servers write it before the result, as the SDKs do.
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # nested past the parser's depth: valid JSON, read as a broken line
        found = _at_top_level(raw, _ANSWER_ID)
        if found is None:
            return None
        try:  # `"id": "C:\Users\..."` (a debug line with a Windows path) is no JSON string: no id
            ident = json.loads(found.group(1))
        except ValueError:
            return None
        return ident if isinstance(ident, int | str) else None
    if not isinstance(data, dict) or "method" in data:
        return None
    ident = data.get("id")
    return ident if isinstance(ident, int | str) and not isinstance(ident, bool) else None


def _unparsed_line(error: Exception) -> str | None:
    """The line a transport could not parse, as text (undecodable bytes kept as surrogates); None for another error."""
    if not isinstance(error, ValidationError):
        return None
    problems = error.errors()
    raw = problems[0].get("input") if problems else None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "surrogateescape")
    return raw if isinstance(raw, str) else None


def _screened(error: Exception) -> tuple[str, str] | None:
    """(the line as text, what is wrong with it) for a line the transport could not parse; None without the line."""
    raw = _unparsed_line(error)
    if raw is None:
        return None
    problems = error.errors() if isinstance(error, ValidationError) else []  # (it is: the line came from one)
    text = raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if text != raw:
        return text, "is not valid UTF-8"
    if problems[0].get("type") != "json_invalid":
        return text, "is not a JSON-RPC message"
    said = str(problems[0].get("msg", ""))
    if "recursion limit" in said:
        return text, "nests deeper than the MCP client reads (about 200 levels)"
    if "number out of range" in said:
        return text, "holds a number too long for the MCP client to read"
    return text, "is not JSON"


def _excerpt(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


class _Screen:
    """What a server's transport reads, screened before the session sees it (one per connection).

    - a message rejected only for lone surrogate escapes is repaired (one log line);
    - a line that cannot be read but answers a request becomes an error answer to that request, so
      the call fails at once, naming the fault, instead of waiting out its timeout;
    - an upstream error under a code the SDK keeps for itself is renamed INTERNAL_ERROR;
    - any other unreadable line goes on as it is (start-up reads it as noise) and is logged, the first
      `_NOISE_LOGGED` of a connection (a server that logs to stdout would flood the gateway's log).
    """

    def __init__(
        self, server: str, on_repair: Callable[[], None], scrub: Callable[[str], str] = str, *, http: bool = False
    ) -> None:
        self.server = server
        self.on_repair = on_repair
        self.scrub = scrub  # the server's configured secrets out of what is logged of its lines
        self.http = http  # the SDK's HTTP transport puts errors of its own on the read stream (`_transport_made`)
        self.noise = 0

    def __call__(self, item: Any) -> Any:
        if isinstance(item, SessionMessage):
            message = item.message
            if not isinstance(message, types.JSONRPCError):
                return item
            error = message.error
            # Its message scrubbed as it comes in, before the session sees it: the SDK's CLIENT span of the request it
            # answers (`MCP send tools/call <name>`) takes it as its status, for any tracer provider set
            # (docs/tracing.md), and a 401 quoting the token the server was given must not reach a trace backend.
            # (What it is, below, is read from the message as sent: a secret could be a word of the SDK's.)
            said = self.scrub(error.message)
            if error.code in _SDK_CODES:
                if self.http and _transport_made(error):
                    too_large = _EVENT_TOO_LARGE.match(error.message)
                    if too_large is None:
                        # one request's stream ended or broke (a proxy's read timeout does this to a long call; so
                        # does the server dying): still CONNECTION_CLOSED, marked so a call can ask which it was
                        lost = types.ErrorData(code=CONNECTION_CLOSED, message=said, data=_StreamLost(said))
                        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=lost))
                    answer = types.ErrorData(
                        code=INTERNAL_ERROR, message=said, data=_TooLarge(int(too_large.group(1)))
                    )
                    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=answer))
                renamed = types.ErrorData(code=INTERNAL_ERROR, message=said, data=_UpstreamCode(error.code, error.data))
                return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=renamed))
            if said == error.message:
                return item
            error = error.model_copy(update={"message": said})
            return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error), metadata=item.metadata)
        if not isinstance(item, Exception):
            return item
        cut = _cut_line(item)
        if cut is not None:
            return self._too_large(item, *cut)
        deep = _deep_listing(item)
        if deep is not None:
            logger.warning(
                "MCP server %r: its tool list nests deeper than the MCP client reads; it was read another way, "
                "and the tools nested too deeply are left out",
                self.server,
            )
            return deep
        repaired = _repair_message(item)
        if repaired is not None:
            logger.warning(
                "MCP server %r: a message held a lone surrogate escape (text that is not valid Unicode); "
                "it was replaced by U+FFFD",
                self.server,
            )
            self.on_repair()
            return repaired
        screened = _screened(item)
        ident = _answer_id(screened[0]) if screened is not None else None
        if screened is not None and ident is not None:
            text, reason = screened
            error = types.ErrorData(
                code=INTERNAL_ERROR,
                message=f"it answered with a line that {reason}",
                data=_Unreadable(reason, _excerpt(self.scrub(text))),  # logged by whoever waits for the answer
            )
            return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))
        if screened is None:  # not a line at all (a transport's own error): the session reports it
            return item
        return self._noisy(item, screened[0])

    def _too_large(self, item: Exception, head: str, limit: int, tail: str) -> Any:
        """A line the reader stopped keeping at `limit` bytes: an oversized error to the request it answers."""
        ident = None
        if _at_top_level(head, _METHOD_KEY) is None:  # a request or notification of the server's answers nothing
            ident = _answer_id(head)
            if ident is None:
                ident = _last_id(tail)
        if ident is None:
            return self._noisy(item, f"{head}... (a line over {limit:,} bytes, not read)")
        error = types.ErrorData(
            code=INTERNAL_ERROR, message=f"it answered with a line over {limit:,} bytes", data=_TooLarge(limit)
        )
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))

    def _noisy(self, item: Exception, line: str) -> Any:
        self.noise += 1
        if self.noise <= _NOISE_LOGGED:
            more = "; later ones are not logged" if self.noise == _NOISE_LOGGED else ""
            logger.warning(
                "MCP server %r wrote a line that is not an MCP message (ignored%s): %s",
                self.server,
                more,
                _excerpt(self.scrub(line)),
            )
        return item


def _cut_line(error: Exception) -> tuple[str, int, str] | None:
    """(its first bytes, the limit, its last bytes) of a line `_LineDecoder` cut; None for any other error."""
    raw = _unparsed_line(error)
    if raw is None or _CUT not in raw:
        return None
    head, limit, tail = raw.split(_CUT, 2)
    return head, int(limit), tail


_LAST_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')


def _last_id(tail: str) -> int | str | None:
    """The request id at the very end of a line (`..."id": 7}`: written last, as the TypeScript SDK writes it)."""
    found = _LAST_ID.search(tail)
    if found is None:
        return None
    try:
        ident = json.loads(found.group(1))
    except ValueError:
        return None
    return ident if isinstance(ident, int | str) and not isinstance(ident, bool) else None


@asynccontextmanager
async def _screening(read: Any, screen: _Screen) -> AsyncIterator[Any]:
    """The transport's read stream, each item passed through `screen`."""
    send, receive = anyio.create_memory_object_stream[Any](0)

    async def pump() -> None:
        async with send:
            async for item in read:
                try:
                    screened = screen(item)
                except Exception as exc:  # a fault of our own reading must cost one line, never the connection
                    logger.warning(
                        "MCP server %r: a message could not be screened (%s); passed on as read",
                        screen.server,
                        _short(exc),
                    )
                    screened = item
                await send.send(screened)

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(pump)
        yield receive
        tg.cancel_scope.cancel()


_STDERR_READ = 8 * STDERR_CHARS  # bytes of one stderr line read (a character may take 4); the rest of it is skipped
_STDERR_DRAIN = 1.0  # seconds a closed connection waits for the last stderr lines of its stopped server
_ERRLOG_WRITES = threading.Lock()  # one stream may take the lines of many servers, each read by a thread of its own


class _StderrRelay:
    """A stdio server's stderr, read line by line (by a thread of its own: a pipe is no socket on every platform),
    and passed on as docs/mcp.md says of the lines a server prints: scrubbed of what it was configured with, on one
    line without terminal escapes or other characters a reader cannot see (`_plain`: a server could clear the
    screen, retitle the terminal or forge a line of the gateway's), at most STDERR_CHARS characters.

    Where it goes (`errlog`): left out, or this process's own stderr (where the gateway's log goes), each line is
    logged on `toolsearch.mcp` at INFO after the server's name (`MCP server 'x' (stderr): ...`), so a host's logging
    set-up and `mcp serve --quiet` govern it as they do the gateway's own lines; any other stream gets each line as
    it is, its owner labelling it (`toolsearch build` writes `mcp server: ` before each).
    """

    def __init__(self, server: str, scrub: Callable[[str], str], errlog: TextIO | None) -> None:
        self.server = server
        self.scrub = scrub
        self.errlog = None if errlog is None or errlog is sys.stderr or errlog is sys.__stderr__ else errlog
        read_end, write_end = os.pipe()  # not inheritable (PEP 446): only the server gets the write end, as fd 2
        self._reader = os.fdopen(read_end, "rb")
        self.pipe: TextIO = os.fdopen(write_end, "w", encoding="utf-8")  # the server's stderr
        self._thread = threading.Thread(target=self._relay, name=f"toolsearch-mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def spawned(self) -> None:
        """The server holds its copy of the pipe (or never started): ours is closed, so its end ends the reading."""
        if not self.pipe.closed:
            self.pipe.close()

    async def drained(self) -> None:
        """Wait (at most _STDERR_DRAIN seconds) for the lines a stopped server wrote last to be passed on: a one-shot
        listing (`collect_tools`) returns with them. A process it left behind may hold the pipe open for longer."""
        deadline = anyio.current_time() + _STDERR_DRAIN
        while self._thread.is_alive() and anyio.current_time() < deadline:
            await anyio.sleep(0.01)

    def _relay(self) -> None:
        with self._reader:
            skipping = False  # the rest of a line longer than _STDERR_READ bytes
            while raw := self._reader.readline(_STDERR_READ):
                whole = raw.endswith(b"\n")
                if not skipping:
                    self._pass_on(raw.decode("utf-8", errors="replace"), cut=not whole and len(raw) == _STDERR_READ)
                skipping = not whole

    def _pass_on(self, text: str, *, cut: bool) -> None:
        if self.errlog is None and not logger.isEnabledFor(logging.INFO):
            return  # a log that drops it (`mcp serve --quiet`): not cleaned for nothing
        line = _server_text(text, STDERR_CHARS, self.scrub, cut=cut)
        if not line:
            return
        if self.errlog is None:
            logger.info("MCP server %r (stderr): %s", self.server, line)
            return
        try:
            with _ERRLOG_WRITES:
                self.errlog.write(line + "\n")
                self.errlog.flush()
        except (OSError, ValueError):  # its owner closed it (a server that outlived its connection): nowhere to go
            pass


class UpstreamServer:
    """One upstream MCP server: its connection, its current tools, and calls routed to it.

    A server whose connection ends (found by a call or a re-listing) is restarted in the background
    with backoff (`restart_delay`: about 1 s, then twice as long after each failed or crash-looping
    attempt, up to a minute, jittered), for as long as the gateway runs, or at most `max_restarts`
    attempts in a row when that is set; then it is down (calls say so, and how to recover). Once it
    has served RESTART_WINDOW seconds since its last start, a crash starts a new count.

    `remembered`: its tools as an earlier start listed them, served (found, not called) until it
    lists its own (see `MCPToolSource`).
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        separator: str = SEPARATOR,
        restart: bool = True,
        max_restarts: int | None = None,
        on_tools_changed: ChangeListener | None = None,
        errlog: TextIO | None = None,
        remembered: Iterable[Tool] = (),
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.config = config
        self.max_result_bytes = max_result_bytes  # the cap for calls when its config sets none
        self.separator = separator
        self.restart_enabled = restart
        self.max_restarts = max_restarts
        self.state: State = "idle"
        self.error: str | None = None
        self.restarts = 0  # restart attempts since it last served RESTART_WINDOW seconds
        self.next_restart: float | None = None  # when (anyio's clock) the next attempt is due, while one is scheduled
        self._reviver: anyio.CancelScope | None = None  # the background restarts, while they run
        self._attempted = anyio.Event()  # set when the next restart attempt has ended (a new one then)
        self.stopping = False  # set by `stop`: nothing is started, restarted or announced after it
        self.tools: tuple[Tool, ...] = ()
        self.skipped: list[str] = []  # upstream tools whose definitions we could not accept
        self.server_info: types.Implementation | None = None
        self._broken_text = False  # a message of this server had lone surrogates repaired (see _Screen)
        self.protocol_version: str | None = None  # what the gateway speaks with this server
        self.changes = "none"  # how it hears of tool changes: "notifications", "listen", "ttl" or "none"
        self._probe = True  # False once the server closed its pipe on a server/discover probe (stdio)
        self._noise: str | None = None  # the first line it wrote that is not JSON-RPC, for error messages
        self._on_noise: Callable[[], None] | None = None  # set while waiting on a probe or the handshake
        self._ttl_ms: int | None = None  # the shortest ttlMs of its last listing's pages
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        # What it sends back may quote what it was configured with (a 401 naming the token): hidden in every text of
        # its that reaches the model or the log.
        self._scrub = config.scrubber()
        self._listing = 0  # tools/list requests in flight, which `line_limit` allows longer lines
        self._call_limits: list[int] = []  # the result limits of the calls in flight (`message_limit`)
        self._reader_key = str(next(_READER_KEYS))
        _READERS[self._reader_key] = self
        self._session: ClientSession | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._stop = anyio.Event()
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._done.set()
        self._lifecycle = anyio.Lock()
        self._refresh_lock = anyio.Lock()
        self._refresh_pending = False
        self._pending_announced = False  # the pending listing follows an announcement: it holds calls (block)
        self._relisted_at: float | None = None  # when its last re-listing ended (anyio's clock), for RELIST_GAP
        self._gap_logged = False  # the line saying announcements wait for RELIST_GAP: once per connection
        # True from a change notification until its re-listing is applied: "block" holds calls meanwhile.
        self.relisting = False
        self._generation = 0
        self._listing_problems: list[str] = []
        self._conversions: dict[bytes, Tool | str] = {}  # by the digest of a definition's JSON, its last listing's
        self._ready_at: float | None = None
        # Tools remembered from an earlier start stand in for its own until it lists them (or fails to start):
        # `listed` is set then, once the change (if any) has been announced.
        self.tools = tuple(remembered)
        self.remembered = bool(self.tools)
        self.listed = anyio.Event()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self._session is not None

    def __repr__(self) -> str:
        return f"UpstreamServer({self.name!r}, {self.state}, {len(self.tools)} tools)"

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> bool:
        """Connect, handshake and list tools within the startup timeout; False (with `error`) on failure."""
        async with self._lifecycle:
            return await self._start_locked(task_group)

    async def _start_locked(self, task_group: anyio.abc.TaskGroup, *, restart: bool = False) -> bool:
        self._task_group = task_group
        self._generation += 1
        self._gap_logged = False
        self.state, self.error = "starting", None
        self._stop, self._ready, self._done = anyio.Event(), anyio.Event(), anyio.Event()
        self._scope = anyio.CancelScope()
        task_group.start_soon(self._run, self._scope, self._stop, self._ready, self._done)
        with anyio.move_on_after(self.config.startup_timeout):
            await self._ready.wait()
        if not self._ready.is_set():
            self._scope.cancel()
            self.state = "failed"
            self.error = (
                f"did not finish starting (connect, handshake, tools/list) within "
                f"{self.config.startup_timeout:g} s; raise 'startupTimeout' if it is just slow"
            )
            with anyio.move_on_after(10):
                await self._done.wait()
        ok = self.ready  # the runner task moved the state on while we waited
        if not ok and not restart and not self.stopping:  # a failed restart is logged with when the next one is due
            logger.warning("MCP server %r skipped: %s", self.name, self.error)
        return ok

    async def stop(self) -> None:
        """Close the connection (stdio: stdin closed, then the process tree is terminated); no restart follows."""
        self.stopping = True
        if self._reviver is not None:
            self._reviver.cancel()
        if self.state == "starting" and self._scope is not None:
            self._scope.cancel()  # a start in progress (in the background, say) ends now, not when it would finish
        async with self._lifecycle:
            await self._stop_locked()
            self.state = "stopped"

    async def _stop_locked(self) -> None:
        self._stop.set()
        with anyio.move_on_after(10):
            await self._done.wait()
        if not self._done.is_set() and self._scope is not None:
            self._scope.cancel()
            with anyio.move_on_after(5):
                await self._done.wait()

    async def _run(self, scope: anyio.CancelScope, stop: anyio.Event, ready: anyio.Event, done: anyio.Event) -> None:
        generation = self._generation  # a run that outlives its restart must not touch the next run's state

        def current() -> bool:
            return generation == self._generation

        session: ClientSession | None = None
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    session, modern = await self._connect(stack)
                    listed = await self._list_all(session)
                    watching = None
                    if modern:  # 2026-era servers announce changes only on a subscriptions/listen stream
                        watching = await stack.enter_async_context(anyio.create_task_group())
                        await watching.start(self._watch, session)
                    if current():
                        self.server_info = session.server_info
                        self.protocol_version = session.protocol_version
                        if not modern:
                            self.changes = "notifications"
                        self._apply(listed)
                        self._session = session
                        self.state = "ready"
                        self._ready_at = anyio.current_time()
                        logger.info("MCP server %r: %s", self.name, self.era)
                    ready.set()
                    await stop.wait()
                    if watching is not None:
                        watching.cancel_scope.cancel()
        except Exception as exc:  # any failure is reported, the other servers go on
            if not ready.is_set() and current():
                self.state, self.error = "failed", self._failure(exc)
            elif not stop.is_set():
                why = _short(_leaf(exc), scrub=self._scrub)
                logger.warning("MCP server %r: connection ended with an error: %s", self.name, why)
                if current() and self.state == "ready":
                    # its session is gone: down, and restarted like a crash (left "ready", no call would restart it)
                    self._went_down(f"the connection ended with an error: {why}")
        finally:
            if current():
                if self._session is session:
                    self._session = None
                if not ready.is_set() and self.state == "starting":
                    self.state, self.error = "failed", "startup was cancelled"
            ready.set()
            done.set()

    @property
    def era(self) -> str:
        """The protocol era it is spoken to in, and how its tool changes reach the gateway, in words."""
        version = self.protocol_version
        if version is None:
            return "not connected"
        if version not in MODERN_PROTOCOL_VERSIONS:
            return f"speaks {version} (initialize handshake; changes via notifications/tools/list_changed)"
        how = {
            "listen": "changes via subscriptions/listen",
            "ttl": f"no subscriptions/listen: re-listed every {self.relist_after():g} s, as its list's ttlMs allows",
        }.get(self.changes, "no change notifications")
        return f"speaks {version} ({how})"

    def _failure(self, exc: BaseException) -> str:
        message = _describe_failure(self.config, exc, self._scrub)
        if self._noise is not None and self._noise not in message:
            message += f"; it wrote to stdout a line that is not an MCP message: {self._noise!r}"
        return self._scrub(message)  # it may quote what the server was given to log in with

    async def _open(self, stack: AsyncExitStack) -> ClientSession:
        read, write = await stack.enter_async_context(self._transport())
        return await stack.enter_async_context(
            _RelaySession(
                read,
                write,
                message_handler=self._on_message,
                client_info=types.Implementation(name="toolsearch", version=_version()),
            )
        )

    async def _connect(self, stack: AsyncExitStack) -> tuple[ClientSession, bool]:
        """A session in the newest era both sides speak, and True when that is the 2026-07-28 era.

        A stdio server that closes its pipe on the server/discover probe (some servers of the
        handshake era exit on an unknown method) is started again and spoken to with the handshake,
        without a probe, for as long as this gateway runs.
        """
        self._noise = None
        if not (self.config.transport == "stdio" and self._probe):
            session = await self._open(stack)
            return session, await self._negotiate(session)
        attempt = AsyncExitStack()
        try:
            session = await self._open(attempt)
            modern = await self._negotiate(session)
        except _ProbeClosedPipe:
            await attempt.aclose()
            self._probe = False
            logger.warning(
                "MCP server %r closed its pipe when probed with server/discover; started it again with the handshake",
                self.name,
            )
            session = await self._open(stack)
            return session, await self._negotiate(session)
        except BaseException:
            await attempt.aclose()
            raise
        await stack.enter_async_context(attempt)
        return session, modern

    async def _answered(self, request: Callable[[], Awaitable[Any]], timeout: float, *, noise: bool = True) -> Any:
        """`request()`'s answer; None when `timeout` passes or (`noise`) the server writes a line that is not MCP."""
        with anyio.move_on_after(timeout) as waiting:
            self._on_noise = waiting.cancel if noise else None
            try:
                return await request()
            finally:
                self._on_noise = None
        return None

    async def _negotiate(self, session: ClientSession) -> bool:
        """The newest protocol both sides speak: True for the 2026-07-28 era, False for the handshake.

        Every server is probed with `server/discover` first (stdio: once per process, its first
        request, as the spec's stdio binding says; a dual-era server then serves that pipe in the
        2026 era). No answer, an error that is not a 2026 error, or an answer that is not a
        discover result means a handshake-era server. Over HTTP, where every request names its
        era, a 2026-capable server that cannot announce tool changes in that era (no
        `subscriptions/listen`) is still spoken to with the handshake, where it can; over stdio
        the probe has already chosen, and such a server is re-listed when its list's ttlMs runs out.
        """
        if self.config.transport == "sse" or (self.config.transport == "stdio" and not self._probe):
            await self._handshake(session)
            return False
        discovered = await self._discover(session)
        if discovered is None:
            try:
                await self._handshake(session)
                return False
            except _ModernAfterAll:  # the probe was abandoned (a stray line), but the server took it: 2026
                discovered = await self._discover(session, patient=True)
            if discovered is None:
                raise UpstreamError("it refused the initialize handshake as a 2026-07-28 server, then failed the probe")
        tools = discovered.capabilities.tools
        if self.config.transport == "http" and (tools is None or not tools.list_changed):
            try:
                await session.initialize()  # the handshake era can tell us of changes; this server's 2026 era cannot
                return False
            except MCPError:
                pass  # a 2026-only server
        session.adopt(discovered)
        return True

    async def _discover(self, session: ClientSession, *, patient: bool = False) -> types.DiscoverResult | None:
        """The server's discover result at a version both sides speak, or None for a handshake-era server.

        `patient`: a line that is not MCP does not end the wait (the server is known to speak 2026).
        """
        stdio = self.config.transport == "stdio"
        timeout = min(PROBE_TIMEOUT, self.config.startup_timeout / 3)
        version = LATEST_MODERN_VERSION
        for attempt in range(2):
            try:
                raw = await self._answered(partial(session.send_discover, version), timeout, noise=not patient)
            except MCPError as exc:
                if exc.error.code == CONNECTION_CLOSED and stdio:
                    raise _ProbeClosedPipe from exc
                if exc.error.code != UNSUPPORTED_PROTOCOL_VERSION:
                    return None  # any other error: the handshake era (never keyed on one code: spec)
                supported = _supported_versions(exc.error.data)
                mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in supported]
                if mutual and attempt == 0:
                    version = mutual[-1]
                    continue
                if supported and not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                    raise UpstreamError(
                        f"it speaks only MCP {', '.join(supported)}, and this gateway speaks "
                        f"{', '.join([*HANDSHAKE_PROTOCOL_VERSIONS[-1:], *MODERN_PROTOCOL_VERSIONS])}"
                    ) from None
                return None
            if raw is None:
                return None  # no answer in time, or a line that is not MCP: not a 2026 server
            try:
                result = types.DiscoverResult.model_validate(raw)
            except ValidationError:
                return None
            if not any(v in result.supported_versions for v in MODERN_PROTOCOL_VERSIONS):
                return None  # it answers discover but offers only handshake-era versions
            return result
        return None

    async def _handshake(self, session: ClientSession) -> None:
        """The initialize handshake; a server that answers it only with lines that are not MCP fails at once."""
        noisy = self._noise is not None
        try:
            answer = await self._answered(session.initialize, self.config.startup_timeout)
        except MCPError as exc:
            supported = _supported_versions(exc.error.data)
            if exc.error.code == UNSUPPORTED_PROTOCOL_VERSION and any(v in MODERN_PROTOCOL_VERSIONS for v in supported):
                raise _ModernAfterAll from None
            if exc.error.code == UNSUPPORTED_PROTOCOL_VERSION:
                raise UpstreamError(
                    f"it refused the initialize handshake and speaks only MCP {', '.join(supported) or '(unnamed)'}"
                ) from None
            raise
        if answer is None:
            if self._noise is None:
                raise UpstreamError("it did not answer the initialize handshake")
            raise UpstreamError(
                f"it answered {'the server/discover probe and ' if noisy else ''}the initialize handshake with "
                f"output that is not JSON-RPC ({self._noise!r}); an MCP server writes only MCP messages to stdout"
            )

    async def _watch(self, session: ClientSession, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Re-list the tools whenever the 2026-era server says they changed, for as long as the connection lives.

        A server that does not serve `subscriptions/listen` (no `tools.listChanged` in its discover
        result), refuses it, or ends the stream, is re-listed instead when its list's `ttlMs` runs
        out (what the spec asks of a caching client), within RELIST_FLOOR and RELIST_CEILING seconds.
        """
        from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, listen

        started = False
        capabilities = session.server_capabilities
        if capabilities is not None and capabilities.tools is not None and capabilities.tools.list_changed:
            try:
                async with listen(session, tools_list_changed=True) as subscription:
                    self.changes = "listen"
                    task_status.started()
                    started = True
                    async for _event in subscription:
                        self._announced()
            except (MCPError, ListenNotSupportedError, SubscriptionLost, TimeoutError) as exc:
                logger.warning(
                    "MCP server %r: no subscriptions/listen stream (%s); re-listing on ttlMs",
                    self.name,
                    _short(exc, ERROR_CHARS, scrub=self._scrub),
                )
        self.changes = "ttl"
        if not started:  # start-up goes on; changes are found by re-listing
            task_status.started()
        while True:
            await anyio.sleep(self.relist_after())
            if self._session is not session:  # not ready yet, or its connection ended (a re-listing finds that)
                if self.state == "starting":
                    continue
                return
            await self.refresh(announced=False)

    def relist_after(self) -> float:
        """Seconds until a 2026-era server without subscriptions/listen is re-listed: its ttlMs, bounded."""
        ttl = (self._ttl_ms or 0) / 1000
        return min(max(ttl, RELIST_FLOOR), RELIST_CEILING)

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        screen = _Screen(self.name, self._repaired, self._scrub, http=self.config.transport == "http")
        async with self._raw_transport() as (read, write), _screening(read, screen) as screened:
            yield screened, write

    def _repaired(self) -> None:
        self._broken_text = True

    @asynccontextmanager
    async def _raw_transport(self) -> AsyncIterator[Any]:
        config = self.config
        if config.transport == "stdio":
            params = StdioServerParameters(
                command=config.command or "",
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
                encoding=f"{_STDIO_ENCODING}-{self._reader_key}",  # its lines limited by `line_limit`
            )
            relay = _StderrRelay(self.name, self._scrub, self._errlog)
            try:
                async with stdio_client(params, errlog=relay.pipe) as streams:
                    relay.spawned()
                    yield streams
            finally:
                relay.spawned()
                await relay.drained()
        elif config.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client
            async with (
                create_mcp_http_client(headers=dict(config.headers) or None) as client,
                streamable_http_client(
                    config.url or "", http_client=client, max_sse_event_size=self.message_limit()
                ) as streams,
            ):
                yield streams
        else:
            from mcp.client.sse import sse_client
            async with sse_client(config.url or "", headers=dict(config.headers) or None) as streams:
                yield streams

    def message_limit(self) -> int:
        """The largest message read from this server (an SSE event over HTTP, a line over stdio): room for any
        result within its `maxResultBytes` as sent (a server may escape each non-ASCII character as `\\uXXXX`,
        three times its UTF-8 bytes), so that such a result is read, measured and refused as oversized by one rule
        on every transport; never less than the MCP SDK's default SSE limit (1 MiB). A larger one is not read
        further, and its call is told it was too large. Without a `maxResultBytes` of its own, a call in flight that
        allows more (`call(max_result_bytes=...)`) raises it for a stdio server, whose lines are measured as they
        come; an HTTP connection's event limit is set when it connects."""
        from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE

        cap = self.config.max_result_bytes or max([self.max_result_bytes, *self._call_limits])
        return max(DEFAULT_MAX_SSE_EVENT_SIZE, 3 * cap + 65_536)

    def line_limit(self) -> int:
        """The longest line read from this stdio server (`_LineDecoder`): `message_limit`, or while it lists its
        tools (a page of them is one line) at least LISTING_LINE_LIMIT."""
        limit = self.message_limit()
        return max(limit, LISTING_LINE_LIMIT) if self._listing else limit

    async def _list_all(self, session: ClientSession) -> list[types.Tool]:
        """Every page of tools/list; a repeated cursor or too many pages is an error, not a hang.

        Malformed definitions are left out and named in `_listing_problems` (reported by `_apply`).
        """
        self._listing += 1
        try:
            return await self._list_pages(session)
        finally:
            self._listing -= 1

    async def _list_pages(self, session: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        problems: list[str] = []
        cursor: str | None = None
        seen: set[str] = set()
        ttl: int | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page, rejected = await _list_page(session, params)
            tools.extend(page.tools)
            problems.extend(rejected)
            ttl = page.ttl_ms if ttl is None else min(ttl, page.ttl_ms)  # the listing is fresh as its stalest page
            cursor = page.next_cursor
            if not cursor:
                self._listing_problems = problems
                self._ttl_ms = ttl
                return tools
            if cursor in seen:
                raise UpstreamError(  # the server's text: cut, on one line (repr), its secrets hidden
                    f"tools/list repeated the cursor {_excerpt(self._scrub(cursor))}; the server's pagination loops"
                )
            seen.add(cursor)
        raise UpstreamError(f"tools/list returned more than {MAX_PAGES} pages")

    def _convert(self, definition: types.Tool) -> Tool | str:
        """The tool, or why it is skipped."""
        try:
            return tool_from_mcp(definition, self.name, separator=self.separator)
        except InvalidToolError as exc:
            return str(exc)
        except PydanticSerializationError:  # a definition read past the SDK's depth (_deep_listing)
            return f"tool {definition.name!r}: its definition is nested deeper than {MAX_DEPTH} levels"
        except UnicodeError:  # e.g. a lone surrogate escape ("\\ud800"): valid JSON, not encodable text
            return f"tool {definition.name!r}: {_BROKEN_TEXT}"

    def _apply(self, listed: list[types.Tool]) -> bool:
        """Convert and store the listed tools; True when anything changed.

        A definition we cannot accept is skipped with a warning naming the server and the tool;
        the rest are listed. A tool whose definition changed is logged by name (see docs/mcp.md,
        "Pinned tool definitions").
        """
        converted: list[Tool] = []
        skipped: list[str] = list(self._listing_problems)
        self._listing_problems = []
        seen: set[str] = set()
        broken, self._broken_text = self._broken_text, False
        # A definition listed as before is not converted again (a conversion checks every character of it, on the
        # event loop): a static server of 15,000 tools re-listed on ttlMs stalled every client for 1.5 s each time.
        known, self._conversions = self._conversions, {}
        for definition in listed:
            try:
                text: str | None = definition.model_dump_json(by_alias=True, exclude_none=True)
            except (PydanticSerializationError, ValueError):  # too deep to write: converting it says why
                text = None
            if broken and text is not None and _REPLACED in text:
                skipped.append(f"tool {definition.name!r}: {_BROKEN_TEXT}")
                continue
            key = None if text is None else hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
            outcome = known.get(key) if key is not None else None
            if outcome is None:
                outcome = self._convert(definition)
            if key is not None:
                self._conversions[key] = outcome
            if isinstance(outcome, str):
                skipped.append(outcome)
                continue
            tool = outcome
            if tool.name in seen:
                skipped.append(f"tool {definition.name!r} is listed more than once; the first definition is kept")
                continue
            seen.add(tool.name)
            converted.append(tool)
        for message in skipped:
            if message not in self.skipped:
                logger.warning(
                    "MCP server %r: skipped a tool (the others are listed): %s", self.name, self._scrub(message)
                )
        self.skipped = skipped
        before = {t.name: t for t in self.tools}
        redefined = 0
        for tool in converted:
            old = before.get(tool.name)
            if old is not None and old.fingerprint != tool.fingerprint:
                redefined += 1
                if redefined > CHANGES_LOGGED:
                    continue  # a listing that redefines 200 tools is one line more, not 200
                origin = upstream_of(tool)
                logger.warning(
                    "MCP server %r changed the definition of tool %r (%s)",
                    self.name,
                    origin[1] if origin else tool.name,
                    ", ".join(definition_changes(old, tool)),
                )
        if redefined > CHANGES_LOGGED:
            logger.warning(
                "MCP server %r changed the definitions of %d more tools in the same listing (not named)",
                self.name,
                redefined - CHANGES_LOGGED,
            )
        changed = [t.fingerprint for t in converted] != [t.fingerprint for t in self.tools]
        self.tools = tuple(converted)
        return changed

    # --- list changes -----------------------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        # Runs inline in the session's receive loop: never do session I/O here, spawn it.
        if isinstance(message, Exception):  # a line the transport could not read as JSON-RPC
            if self._noise is None:
                line = self._scrub(_unreadable_line(message))
                self._noise = line if len(line) <= 120 else line[:120] + "..."
            if self._on_noise is not None:
                self._on_noise()
            return
        if isinstance(message, types.ToolListChangedNotification):
            self._announced()

    def _announced(self) -> None:
        """The server said its tools changed: a re-listing under way is followed by one more, however many
        announcements come. Calls are held (changedTools: block) only while a listing runs: from now when it starts
        at once, not while one waits out RELIST_GAP (a server announcing after each call would have most calls
        refused for up to a second)."""
        if self._refresh_lock.locked():
            self._refresh_pending = True
            self._pending_announced = True
        elif self._task_group is not None:
            if self._relist_wait() <= 0:
                self.relisting = True
            self._task_group.start_soon(self.refresh)

    def _relist_wait(self) -> float:
        """Seconds until the next re-listing may start (RELIST_GAP after the last one ended)."""
        return 0.0 if self._relisted_at is None else self._relisted_at + RELIST_GAP - anyio.current_time()

    async def refresh(self, *, announced: bool = True) -> bool:
        """Re-list the tools (as after tools/list_changed); True when they changed.

        `announced=False` (a re-listing on ttlMs, no change known): calls are not held meanwhile; else they are
        held while the listing runs, not while it waits out the gap. Re-listings of one server are RELIST_GAP apart
        and never overlap: a call while one runs asks for one more after it, and each listing that changed the
        tools is announced at once (a flood of announcements must not hold back the change it announces). A
        listing is bounded by `startupTimeout`, as at start-up.
        """
        if self._refresh_lock.locked():
            self._refresh_pending = True  # one more listing after this one covers every announcement meanwhile
            self._pending_announced = self._pending_announced or announced
            return False
        changed = False
        hold = announced
        async with self._refresh_lock:
            try:
                while True:
                    wait = self._relist_wait()
                    if wait > 0:
                        self.relisting = False  # nothing is being read yet: calls go on, on the tools as listed
                        self._log_gap()
                        await anyio.sleep(wait)
                    hold, self._pending_announced = hold or self._pending_announced, False
                    self._refresh_pending = False
                    session = self._session
                    if session is None:
                        return changed
                    self.relisting = hold
                    listed = await self._relist(session)
                    self._relisted_at = anyio.current_time()
                    self.relisting = hold = False  # the hold ends with the listing; a next one holds when it runs
                    if listed is not None and self._apply(listed):
                        changed = True
                        if self._on_tools_changed is not None:
                            await self._on_tools_changed(self)
                    if not (self._refresh_pending and self._session is session):
                        return changed
            finally:
                self.relisting = False

    async def _relist(self, session: ClientSession) -> list[types.Tool] | None:
        """Every page of tools/list within `startupTimeout`; None (logged) when it fails or runs out, and the tools
        stay as last listed. A re-listing that finds the connection gone marks the server crashed."""
        try:
            with anyio.move_on_after(self.config.startup_timeout):
                return await self._list_all(session)
        except Exception as exc:
            cause = _leaf(exc)
            closed = isinstance(cause, MCPError) and cause.error.code == CONNECTION_CLOSED
            if closed and isinstance(cause, MCPError) and isinstance(cause.error.data, _StreamLost):
                closed = not await self._still_connected(session)  # that listing's stream alone ended: see `call`
            if closed and self._session is session:
                # found by a re-listing, not a call: crashed, and restarted like any crash
                self._went_down("the connection closed while its tools were re-listed")
            # its words are the server's: one line, cut, its configured secrets hidden (as on every other path)
            logger.warning(
                "MCP server %r: re-listing tools failed: %s", self.name, _short(cause, ERROR_CHARS, scrub=self._scrub)
            )
            return None
        logger.warning(
            "MCP server %r: re-listing its tools got no answer within %g s (startupTimeout); they stay as last "
            "listed, its calls go on, and its next announcement is re-listed again",
            self.name,
            self.config.startup_timeout,
        )
        return None

    def _log_gap(self) -> None:
        if self._gap_logged:
            return
        self._gap_logged = True
        logger.warning(
            "MCP server %r announces tool changes less than %g s apart; it is re-listed at most once per %g s, "
            "each re-listing covering every announcement before it (logged once per connection)",
            self.name,
            RELIST_GAP,
            RELIST_GAP,
        )

    # --- calls --------------------------------------------------------------------------------

    # --- restarts ---------------------------------------------------------------------------

    def _went_down(self, why: str) -> float | None:
        """The connection ended (`why`): restarts are scheduled; the seconds to the next attempt, None without one."""
        if self._ready_at is not None and anyio.current_time() - self._ready_at > RESTART_WINDOW:
            self.restarts = 0  # it served a good while since its last start: a new crash, not a crash loop
        self._session, self.state, self.error = None, "crashed", why
        return self._schedule_restart()

    def _gave_up(self) -> bool:
        return self.max_restarts is not None and self.restarts >= self.max_restarts

    def _schedule_restart(self) -> float | None:
        """Have the background restarts bring the server back (started unless running); the seconds until the next
        attempt, or None when it is not restarted (restarts off, stopped, or `max_restarts` used up)."""
        task_group = self._task_group
        if not self.restart_enabled or task_group is None or self.stopping or self._gave_up():
            return None
        now = anyio.current_time()
        if self.next_restart is None:
            delay = restart_delay(self.restarts + 1)
            self.next_restart = now + delay
            logger.warning("MCP server %r: restart attempt %d in %.1f s", self.name, self.restarts + 1, delay)
        if self._reviver is None:
            self._reviver = anyio.CancelScope()  # before the task runs: one reviver at a time
            task_group.start_soon(self._revive, self._reviver)
        return max(0.0, self.next_restart - now)

    async def _revive(self, scope: anyio.CancelScope) -> None:
        """Restart attempts, each when it is due, until one is not scheduled (it is up, gave up, or was stopped)."""
        try:
            with scope:
                while self.next_restart is not None:
                    await anyio.sleep(max(0.0, self.next_restart - anyio.current_time()))
                    await self._restart()  # a failed attempt schedules the next one
        finally:
            if self._reviver is scope:
                self._reviver = None

    async def _restart(self) -> bool:
        """One restart attempt (the reviver's); True when the server is up after it."""
        changed = False
        async with self._lifecycle:
            attempted = self._attempted
            try:
                self.next_restart = None
                if self.ready:
                    return True  # it came back another way
                task_group = self._task_group
                if not self.restart_enabled or task_group is None or self.stopping or self._gave_up():
                    return False
                self.restarts += 1
                logger.warning("MCP server %r: restarting (attempt %d)", self.name, self.restarts)
                await self._stop_locked()
                before = [t.fingerprint for t in self.tools]
                ok = await self._start_locked(task_group, restart=True)
                if not ok:
                    self._failed_restart()
                changed = ok and [t.fingerprint for t in self.tools] != before
            finally:
                self._attempted = anyio.Event()
                attempted.set()  # the calls that waited for this attempt go on
        if changed and self._on_tools_changed is not None:
            await self._on_tools_changed(self)
        return ok

    def _failed_restart(self) -> None:
        if self._gave_up():
            self.error = f"{self.error}; {self._left_down()}"
            logger.error("MCP server %r: restart attempt %d failed; %s", self.name, self.restarts, self._left_down())
            return
        delay = restart_delay(self.restarts + 1)
        self.next_restart = anyio.current_time() + delay
        logger.warning(
            "MCP server %r: restart attempt %d failed (%s); the next in %.1f s",
            self.name,
            self.restarts,
            self.error,
            delay,
        )

    def _left_down(self) -> str:
        return (
            f"left down after {self.restarts} restart attempts in a row (max_restarts): fix what its log says, then "
            "restart the gateway"
        )

    def _down_text(self, tool: str) -> str:
        """What a call to this server while it is down is told: why, and what comes next."""
        text = f"MCP server {self.name!r} is not available ({self.error or self.state}), so {tool!r} cannot run now. "
        if self.next_restart is not None:
            due = max(0.1, self.next_restart - anyio.current_time())
            return text + (
                f"It is being restarted: attempt {self.restarts + 1} is due in about {due:.1f} s. Use a tool of "
                "another server, or try again later."
            )
        if self._gave_up():
            return text + "It will not be restarted; use a tool of another server."
        return text + "Use a tool of another server, or try again later."

    async def _session_for_call(self) -> ClientSession | None:
        if not self.ready and self.state in ("crashed", "failed"):
            # down: it is restarted with backoff; a call waits for an attempt that is due soon, else fails at once
            attempted = self._attempted
            wait = self._schedule_restart()
            if wait is not None and wait <= CALL_WAITS_FOR_RESTART:
                with anyio.move_on_after(wait + self.config.startup_timeout + 10):
                    await attempted.wait()
        if self.state == "starting":
            with anyio.move_on_after(self.config.startup_timeout):
                await self._ready.wait()
        return self._session if self.ready else None

    @overload
    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        *,
        max_result_bytes: int | None = None,
        progress: ProgressSink | None = None,
        input_round: None = None,
    ) -> types.CallToolResult: ...

    @overload
    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        *,
        max_result_bytes: int | None = None,
        progress: ProgressSink | None = None,
        input_round: InputRound,
    ) -> types.CallToolResult | types.InputRequiredResult: ...

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        *,
        max_result_bytes: int | None = None,
        progress: ProgressSink | None = None,
        input_round: InputRound | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Call `tool` (the upstream's own name). Every failure comes back as an `isError` result.

        A result larger than the server's `maxResultBytes` (else `max_result_bytes`, else
        DEFAULT_MAX_RESULT_BYTES) is replaced by an error saying so: see `_oversized`. With `progress`, the upstream
        is asked for progress, which goes there (`_ProgressRelay`). A tool that asks for input first (an
        `InputRequiredResult`) is answered with that result when `input_round` says the client takes it and can
        answer it, else with a tool error saying so (`_input_required`).
        """
        session = await self._session_for_call()
        if session is None:
            return error_result(self._down_text(tool))
        limit = self.config.max_result_bytes or max_result_bytes or self.max_result_bytes
        self._call_limits.append(limit)  # its answer is read as far as its own limit allows (`message_limit`)
        relay = None if progress is None else _ProgressRelay(progress, self._scrub)
        try:
            # Always allowed: refused, the SDK raises with advice for its programmer, which no model can follow.
            result = await session.call_tool(
                tool,
                dict(arguments) if arguments else None,
                read_timeout_seconds=self.config.call_timeout,
                progress_callback=relay,
                input_responses=input_round.responses if input_round is not None else None,
                request_state=input_round.state if input_round is not None else None,
                allow_input_required=True,
            )
        except MCPError as exc:
            code = exc.error.code
            if code == CONNECTION_CLOSED:
                if isinstance(exc.error.data, _StreamLost) and await self._still_connected(session):
                    return self._stream_lost(tool, exc.error.data)
                return await self._crashed(tool, session)
            if code == REQUEST_TIMEOUT:
                logger.warning(
                    "MCP server %r: %r did not answer within %g s", self.name, tool, self.config.call_timeout
                )
                return error_result(
                    f"MCP server {self.name!r} did not answer {tool!r} within {self.config.call_timeout:g} s, so the "
                    "gateway stopped waiting (the call may still be running there; a late answer is dropped). "
                    "Do not assume it worked: check its effect, or retry with a smaller request."
                )
            if isinstance(exc.error.data, _TooLarge):
                return self._oversized(tool, None, limit, read=exc.error.data.limit)
            if isinstance(exc.error.data, _Unreadable):
                logger.warning(
                    "MCP server %r: the answer to %r was a line that %s; the call failed, the connection reads on: %s",
                    self.name,
                    tool,
                    exc.error.data.reason,
                    exc.error.data.excerpt,
                )
                return error_result(
                    f"MCP server {self.name!r} answered {tool!r} with a line that {exc.error.data.reason}, so its "
                    "result cannot be read. The tool may have run: check its effect before you retry it."
                )
            said = _server_text(exc.error.message, ERROR_CHARS, self._scrub, counted=True)
            return error_result(f"MCP server {self.name!r} rejected the call to {tool!r}: {said}")
        except ValidationError as exc:  # an answer that is not a tool result at all
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "result"
            return error_result(
                f"MCP server {self.name!r}: calling {tool!r} failed: it answered with a malformed result "
                f"({where}: {first['msg']}). The tool may have run, but its result cannot be read; use another tool."
            )
        except Exception as exc:  # an answer the SDK refuses otherwise
            said = _short(_leaf(exc), scrub=self._scrub)
            return error_result(f"MCP server {self.name!r}: calling {tool!r} failed: {said}")
        finally:
            self._call_limits.remove(limit)
            if relay is not None:
                relay.done = True
        size = _result_bytes(result, limit)
        if size > limit and isinstance(result, types.InputRequiredResult):  # it asked before running: nothing ran
            logger.warning("MCP server %r: the input request of %r (%s bytes) is over the limit of %s bytes; it was "
                           "dropped", self.name, tool, f"{size:,}", f"{limit:,}")
            return error_result(
                f"MCP server {self.name!r} asked for input before running {tool!r}, in a request ({size:,} bytes) "
                f"larger than this gateway passes on ({limit:,} bytes), so the call did not run. Run that tool from a "
                "client connected to the server directly."
            )
        if size > limit:
            return self._oversized(tool, size, limit)
        if isinstance(result, types.InputRequiredResult):
            return self._input_required(tool, result, input_round)
        if result.is_error:
            result = self._scrubbed(result)
        return _own_meta(result)

    def _input_required(
        self, tool: str, result: types.InputRequiredResult, input_round: InputRound | None
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The answer to a call of `tool` that asks for input before it can finish: the upstream's result as sent
        (less its protocol `_meta`) for a client that takes it and can answer each of its requests, else a tool error
        that says what the tool asks for and where it can be answered (a client that took the result without being
        able to answer it would fail the call with no word to the model)."""
        requests = list((result.input_requests or {}).values())
        asked = _asked(requests)
        if input_round is not None:
            unanswered = [r for r in requests if not _can_answer(input_round.capabilities, r)]
            if not unanswered:
                meta = _kept_meta(result.meta)
                return result if meta is result.meta else result.model_copy(update={"meta": meta})
            missing = _asked(unanswered)
            why = "did not declare that it can answer " + ("them" if missing == asked else missing)
        else:
            # A client of the handshake era knows no InputRequiredResult; asking it in its own terms (elicitation/create
            # and the like, then the upstream again with the answers) is not done here.
            why = "speaks an earlier revision"
        logger.info("MCP server %r: %r asks for input (%s); not passed on: the client %s", self.name, tool, asked, why)
        return error_result(
            f"MCP server {self.name!r}: {tool!r} asks for input before it can finish: {asked}. This gateway passes "
            f"such requests on only to clients of MCP 2026-07-28 that can answer them, and the client in use {why}, "
            "so the call did not complete. Do not retry it here: tell the user that this tool needs their input; "
            f"they can give it by running the tool from a client connected to MCP server {self.name!r} directly, or "
            "from a client of MCP 2026-07-28 that answers such requests."
        )

    def _scrubbed(self, result: types.CallToolResult) -> types.CallToolResult:
        """A tool error with this server's configured secrets hidden in its text: servers report most failures this
        way, and a failed login quotes the credential it was given. A result that is not an error is the tool's
        data, passed on as sent."""
        content: list[Any] = []
        for block in result.content:
            if isinstance(block, types.TextContent):
                text = self._scrub(block.text)
                if text != block.text:
                    block = block.model_copy(update={"text": text})
            content.append(block)
        if all(a is b for a, b in zip(content, result.content, strict=True)):
            return result
        return result.model_copy(update={"content": content})

    def _oversized(self, tool: str, size: int | None, limit: int, *, read: int = 0) -> types.CallToolResult:
        # An error, not a truncated result: a cut-off list or JSON document reads as complete to a
        # model, and structured or binary content cannot be cut meaningfully. The call did run, so
        # the message says not to repeat it to see the result. `size` None: reading stopped after `read` bytes.
        measured = f"{size:,} bytes" if size is not None else f"over {read:,} bytes"
        logger.warning(
            "MCP server %r: the result of %r (%s) is over the limit of %s bytes; it was dropped",
            self.name,
            tool,
            measured,
            f"{limit:,}",
        )
        return error_result(
            f"The call to {tool!r} on MCP server {self.name!r} ran, but its result ({measured}) is larger than "
            f"this gateway passes on ({limit:,} bytes), so it was dropped. Do not repeat the same call to see it: "
            "ask for less (a narrower query, a filter, a page or a limit argument, if the tool has one)."
        )

    async def _still_connected(self, session: ClientSession) -> bool:
        """Whether `session`'s connection still carries requests, asked with a ping after one request's HTTP
        stream ended without its answer: that stream alone ending (a proxy's read timeout on a long call) is no
        reason to restart the server and fail every other call in flight; the server being gone is. A ping that
        gets no answer in time proves neither, so the connection is left as it is (its next failure says more)."""
        with anyio.move_on_after(min(self.config.startup_timeout, PING_TIMEOUT)):
            try:
                await session.send_ping()
            except MCPError as exc:  # any answer, an error included, came over a live connection
                return exc.error.code != CONNECTION_CLOSED or isinstance(exc.error.data, _StreamLost)
            except Exception:  # the transport could not send it: the server is gone
                return False
        return True

    def _stream_lost(self, tool: str, lost: _StreamLost) -> types.CallToolResult:
        """A call whose HTTP response stream ended without its answer, on a connection that still works."""
        logger.warning(
            "MCP server %r: the response stream of %r ended without its answer (%s); the server still answers, "
            "so only this call failed",
            self.name,
            tool,
            lost.reason,
        )
        return error_result(
            f"MCP server {self.name!r}: the response to {tool!r} never came: its HTTP stream ended without an answer "
            "(a proxy's read timeout on a long call does this). Whether the call ran is unknown: it may have run, "
            "in full or in part. Check its effect before you retry it."
        )

    async def _crashed(self, tool: str, session: ClientSession) -> types.CallToolResult:
        """The connection of `session` closed under a call. Only the current connection's end takes the server down
        and schedules a restart: a call on an earlier one (ended by a restart) must not mark the new one crashed."""
        logger.warning("MCP server %r: connection lost during %r", self.name, tool)
        message = (
            f"MCP server {self.name!r} stopped (connection closed) while running {tool!r}; the call did not finish."
        )
        if self._session is not session:  # its end was seen already (a restart, a re-listing): nothing to change
            return error_result(f"{message} {self._since_ended()}")
        wait = self._went_down(f"the connection closed while {tool!r} was running")
        if wait is not None:
            message += (
                f" The server is being restarted (attempt {self.restarts + 1}, in about {max(wait, 0.1):.1f} s); check "
                "whether the call had an effect before you retry it."
            )
        elif self._gave_up():
            self.error = f"{self.error}; {self._left_down()}"
            logger.error("MCP server %r: %s", self.name, self._left_down())
            message += " It is down and will not be restarted; use another tool."
        else:
            self.error = f"{self.error}; not restarted"
            message += " It is down and will not be restarted; use another tool."
        return error_result(message)

    def _since_ended(self) -> str:
        """What a call whose connection had already been found ended is told of the server now."""
        check = "check whether the call had an effect before you retry it."
        if self.ready:
            return f"It has been restarted since; {check}"
        if self.state == "starting":
            return f"It is being restarted now; {check}"
        if self.next_restart is not None:
            due = max(0.1, self.next_restart - anyio.current_time())
            return f"The server is being restarted (attempt {self.restarts + 1}, in about {due:.1f} s); {check}"
        return "It is down; use another tool."


def _version() -> str:
    from .. import __version__

    return __version__


# --- many servers ---------------------------------------------------------------------------------


SourceListener = Callable[["MCPToolSource", str], Awaitable[None]]


class MCPToolSource:
    """Tools from many MCP servers, namespaced by server, kept current, with calls routed back.

    Use as an async context manager. Servers start concurrently; one that fails to start or times
    out is logged and listed in `failures`, and the others still work.

    `remembered`: the tools an earlier start listed (a catalog of namespaced tools). Entering then
    returns at once: the servers start in the background, each standing in with its remembered tools
    until it lists its own, which then replace them (a difference is announced to the listeners as
    any change is, and logged by tool; a server that fails to start loses its remembered tools).
    `listed()` waits for that; a call is routed only once its server listed its own tools.

    `errlog`: where the lines the stdio servers write on their stderr go, each scrubbed of what its server was
    configured with, without terminal escapes and cut to STDERR_CHARS characters. Left out (or `sys.stderr`), each
    is logged on `toolsearch.mcp` at INFO after its server's name: `MCP server 'time' (stderr): ...`. Another stream
    gets each line as it is.
    """

    def __init__(
        self,
        config: MCPConfig | Mapping[str, Any] | str | Path,
        *,
        separator: str = SEPARATOR,
        restart: bool = True,
        max_restarts: int | None = None,
        errlog: TextIO | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        remembered: Iterable[Tool] | None = None,
    ) -> None:
        if isinstance(config, str | Path):
            config = load_config(config)
        elif not isinstance(config, MCPConfig):
            config = parse_config(config)
        check_namespaces((server.name for server in config.servers), separator)
        self.config = config
        self.separator = separator
        self.max_result_bytes = max_result_bytes
        self._listeners: list[SourceListener] = []
        self.background = remembered is not None
        kept: dict[str, list[Tool]] = {}
        for tool in remembered or ():
            origin = upstream_of(tool)
            if origin is not None:
                kept.setdefault(origin[0], []).append(tool)
        self.servers: dict[str, UpstreamServer] = {
            server.name: UpstreamServer(
                server,
                separator=separator,
                restart=restart,
                max_restarts=max_restarts,
                on_tools_changed=self._server_changed,
                errlog=errlog,
                remembered=kept.get(server.name, ()),
                max_result_bytes=max_result_bytes,
            )
            for server in config.servers
        }
        self._stack: AsyncExitStack | None = None
        self._routes: dict[str, tuple[UpstreamServer, str]] = {}
        self._tools: list[Tool] = []

    # --- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> MCPToolSource:
        stack = AsyncExitStack()
        task_group = await stack.enter_async_context(anyio.create_task_group())
        stack.push_async_callback(self._stop_all)
        self._stack = stack
        if self.background:
            self._rebuild()  # the remembered tools, until each server lists its own
            for server in self.servers.values():
                task_group.start_soon(self._start_in_background, server, task_group)
            return self
        try:
            async with anyio.create_task_group() as starting:
                for server in self.servers.values():
                    starting.start_soon(server.start, task_group)
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._rebuild()
        for server in self.servers.values():
            server.listed.set()
        return self

    async def _start_in_background(self, server: UpstreamServer, task_group: anyio.abc.TaskGroup) -> None:
        remembered = [t.fingerprint for t in server.tools]
        try:
            if not await server.start(task_group):
                server.tools = ()  # its remembered tools are not offered by anything now
            server.remembered = False
            if [t.fingerprint for t in server.tools] != remembered and not server.stopping:
                await self._server_changed(server)
        finally:
            server.listed.set()

    @property
    def all_listed(self) -> bool:
        """Whether every server has listed its own tools (or failed to start): nothing is answered from memory."""
        return all(server.listed.is_set() for server in self.servers.values())

    async def listed(self, name: str | None = None) -> None:
        """Return once the server offering `name` (every server, when `name` is None or no server offers it yet) has
        listed its own tools, or failed to start, and the listeners have heard of any change: at a start from
        remembered tools, a call is admitted against what its server lists now, never a remembered definition."""
        hit = self._routes.get(name) if name is not None else None
        for server in [hit[0]] if hit is not None else list(self.servers.values()):
            await server.listed.wait()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def _stop_all(self) -> None:
        async with anyio.create_task_group() as stopping:
            for server in self.servers.values():
                stopping.start_soon(server.stop)

    # --- catalog --------------------------------------------------------------------------

    @property
    def failures(self) -> dict[str, str]:
        """Servers that are not serving, with the reason."""
        return {n: s.error or s.state for n, s in self.servers.items() if s.state in ("failed", "crashed")}

    @property
    def ready(self) -> list[str]:
        return [n for n, s in self.servers.items() if s.ready]

    def tools(self) -> list[Tool]:
        """Every tool of every server, in config order then server order."""
        return list(self._tools)

    def catalog(self) -> Catalog:
        return Catalog(self._tools)

    def route(self, name: str) -> tuple[str, str] | None:
        """(server, original name) for a namespaced tool name, or None when no server has it."""
        hit = self._routes.get(name)
        return (hit[0].name, hit[1]) if hit else None

    def definition(self, name: str) -> Tool | None:
        """The namespaced tool's definition as its server last listed it (ahead of any index built from `catalog`)."""
        hit = self._routes.get(name)
        if hit is None:
            return None
        return next((t for t in hit[0].tools if t.name == name), None)

    def changing(self, server: str) -> bool:
        """True while `server` announced a change to its tools that is not re-listed yet, or stands in with tools
        remembered from an earlier start."""
        upstream = self.servers.get(server)
        return upstream is not None and (upstream.relisting or upstream.remembered)

    def add_listener(self, listener: SourceListener) -> None:
        """Call `listener(source, server_name)` after a server's tools changed."""
        self._listeners.append(listener)

    def _rebuild(self) -> None:
        routes: dict[str, tuple[UpstreamServer, str]] = {}
        tools: list[Tool] = []
        for server in self.servers.values():
            for tool in server.tools:
                if tool.name in routes:
                    other = routes[tool.name][0].name
                    logger.warning(
                        "tool %r of MCP server %r has the same name as one of %r; it is left out",
                        tool.name,
                        server.name,
                        other,
                    )
                    continue
                origin = upstream_of(tool)
                routes[tool.name] = (server, origin[1] if origin else tool.name)
                tools.append(tool)
        self._routes, self._tools = routes, tools

    async def _server_changed(self, server: UpstreamServer) -> None:
        self._rebuild()
        logger.info("MCP server %r: tool list changed (%d tools)", server.name, len(server.tools))
        for listener in list(self._listeners):
            try:
                await listener(self, server.name)
            except Exception:  # one listener's bug must not stop the others
                logger.exception("tool-change listener failed")

    async def refresh(self, server: str | None = None) -> None:
        """Re-list one server's tools (or every server's)."""
        targets = [self.servers[server]] if server else list(self.servers.values())
        for upstream in targets:
            await upstream.refresh()

    # --- calls ----------------------------------------------------------------------------

    @overload
    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        max_result_bytes: int | None = None,
        progress: ProgressSink | None = None,
        input_round: None = None,
    ) -> types.CallToolResult: ...

    @overload
    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        max_result_bytes: int | None = None,
        progress: ProgressSink | None = None,
        input_round: InputRound,
    ) -> types.CallToolResult | types.InputRequiredResult: ...

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        max_result_bytes: int | None = None,
        progress: ProgressSink | None = None,
        input_round: InputRound | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Call a tool by its namespaced name; unknown names and upstream failures are `isError` results.

        `max_result_bytes` caps the result for servers whose config does not set `maxResultBytes`
        (default: the source's `max_result_bytes`). `progress` receives the upstream's progress notifications for
        this call (numbers as sent, messages cleaned and cut); without it none are asked for. `input_round`: the
        caller takes an `InputRequiredResult` (MCP 2026-07-28) from a tool that asks for input, and carries the
        answers and state of its retry; without it such a tool's answer is a tool error saying so.
        """
        await self.listed(name)  # a remembered definition is never called: its server's own listing is
        hit = self._routes.get(name)
        if hit is None:
            down = self._down_server_of(name)
            if down is not None:
                # A tool of a configured server that is down here, which a catalog shared with other workers (where it
                # is up) still holds, so searches offer it: said as the server being down, and its restart tried as for
                # any call to it. "Search for tools first" would send the model back to the search that offered it.
                if await down._session_for_call() is None:
                    return error_result(down._down_text(name))
                listed = next((t for t in down.tools if t.name == name), None)  # it is back: its own list says
                origin = None if listed is None else upstream_of(listed)
                hit = None if origin is None else (down, origin[1])
        if hit is None:
            return error_result(f"no MCP server offers a tool named {name!r}; search for tools first")
        server, original = hit
        limit = max_result_bytes or self.max_result_bytes
        return await server.call(
            original, arguments, max_result_bytes=limit, progress=progress, input_round=input_round
        )

    def _down_server_of(self, name: str) -> UpstreamServer | None:
        """The configured server whose namespace the tool name `name` is in (its tools are named by its prefix and the
        separator, see `check_namespaces`), when that server is not serving; else None."""
        for server in self.servers.values():
            if name.startswith(_name_prefix(server.name, self.separator)):
                return None if server.ready else server
        return None


# --- one-shot listing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectedTools:
    """Tools listed from every server that answered, and why the others did not."""

    tools: list[Tool]
    failures: dict[str, str] = field(default_factory=dict)


async def acollect_tools(
    config: MCPConfig | Mapping[str, Any] | str | Path, *, separator: str = SEPARATOR, errlog: TextIO | None = None
) -> CollectedTools:
    async with MCPToolSource(config, separator=separator, restart=False, errlog=errlog) as source:
        return CollectedTools(source.tools(), source.failures)


def collect_tools(
    config: MCPConfig | Mapping[str, Any] | str | Path, *, separator: str = SEPARATOR, errlog: TextIO | None = None
) -> CollectedTools:
    """Start every configured server, list its tools, stop it: a snapshot for indexing. `errlog` gets the lines the
    stdio servers write on their stderr, cleaned (default: the `toolsearch.mcp` log; see `MCPToolSource`)."""
    return anyio.run(lambda: acollect_tools(config, separator=separator, errlog=errlog))
