"""The one registry of wire formats: how each renders a tool, reads a call, renders a result.

    render_tools("anthropic", tools, name_map)        # the request's tools array
    parse_tool_call(raw_call)                         # a neutral ToolCall from any format's call
    render_result("openai_chat", call, "42")          # the message/block that answers a call
    augment_request(request, augmentation)            # every tool a request exposes, augmented

An augmentation (`toolsearch.augment`) is rendered here, once, for every format: the request's
tools (pinned, search tool, discovered, and the tools search results deliver natively as
`tool_reference` / `tool_search_output`) become their augmented Tools, and each format renders
those as it renders any tool.

Adding a format means one `WireFormat(...)` here, named in `_BUILT_IN` and pyproject.toml (plus its
tests), or, from another package, an entry point in the `toolsearch.wire_formats` group naming a
WireFormat (docs/plugins.md); no other module branches on format names. A format with a `payload`
renders whole chat requests and can drive a `ScriptedModel`, the demo and the token benchmark.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    PluginError,
    PluginWarning,
    UnknownFormatError,
    named_error,
)
from ..plugins import PluginRegistry, named_instance
from ..tools import NameMap, Tool, provider_safe_name
from ._base import ChatRequest, ToolCall, parse_arguments

if TYPE_CHECKING:
    from ..augment import Augmentation

__all__ = [
    "WireFormat",
    "FORMATS",
    "register_format",
    "get_format",
    "format_names",
    "chat_format_names",
    "render_tools",
    "render_result",
    "parse_tool_call",
    "request_payload",
    "augment_tools",
    "augment_request",
]

RenderTool = Callable[[Tool, str], dict[str, Any]]
ParseCall = Callable[[Mapping[str, Any], str], ToolCall | None]
RenderResult = Callable[[ToolCall, str, bool], dict[str, Any]]
Payload = Callable[[ChatRequest, str], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class WireFormat:
    """One provider wire format.

    - `render_tool(tool, alias)`: the tool's definition as the format sends it, under `alias`.
    - `parse_call(data, search_name)`: a neutral ToolCall from one call in this format's shape
      (a JSON mapping), or None when `data` is not in this format's shape.
    - `render_result(call, content, is_error)`: what answers the call in this format.
    - `payload(request, model)`: the whole request's arguments for the provider SDK; None for
      formats that are not chat APIs (MCP, plain JSON).
    """

    name: str
    label: str
    render_tool: RenderTool
    parse_call: ParseCall
    render_result: RenderResult
    payload: Payload | None = None


# The built-in formats, in the order calls are parsed; the same list as pyproject.toml's
# [project.entry-points."toolsearch.wire_formats"] (a test compares them). Gemini comes before the
# plain shapes: a Gemini call has a `name` too, and would read as a plain call without arguments.
_BUILT_IN = ("openai_chat", "openai_responses", "anthropic", "gemini", "mcp", "json")
FORMATS: PluginRegistry[WireFormat] = PluginRegistry(
    "tool format",
    "toolsearch.wire_formats",
    [(name, f"toolsearch.providers.registry:{name.upper()}") for name in _BUILT_IN],
    named_instance(WireFormat, "toolsearch.providers.WireFormat"),
    error=UnknownFormatError,
)


def register_format(fmt: WireFormat) -> None:
    """Add (or replace) a format in this process; calls are parsed by trying formats in `format_names()` order.

    An installed package can instead declare it under the `toolsearch.wire_formats` entry-point group.
    """
    if not isinstance(fmt, WireFormat):
        raise ArgumentTypeError(f"register_format needs a WireFormat, got {type(fmt).__name__}")
    FORMATS.register(fmt.name, fmt, replace=True)


def format_names() -> list[str]:
    """Every format: built-ins, then those registered in code, then plug-ins (nothing is imported)."""
    return FORMATS.names()


def _formats_in_order() -> Iterator[WireFormat | PluginError]:
    """Each format in `format_names()` order, loaded only when the caller goes on to it.

    A plug-in that fails to load comes as its PluginError: one broken plug-in must not stop the
    built-ins (or other plug-ins) from being used by whoever did not ask for it.
    """
    for name in FORMATS.names():
        try:
            found = FORMATS.find(name)
        except PluginError as exc:
            yield exc
            continue
        if found is not None:  # None: unregistered since the names were listed
            yield found


def _left_out(error: PluginError, where: str) -> None:
    warnings.warn(f"left out of {where}: {error}", PluginWarning, stacklevel=3)


def _skipped(fmt: WireFormat, exc: Exception) -> None:
    """Warn that a wire format's `parse_call` raised reading a call, naming where the format comes from."""
    entry = FORMATS.entry(fmt.name)
    where = entry.describe(FORMATS.group) if entry is not None else "registered in code (register_format)"
    warnings.warn(
        f"the tool format {fmt.name!r} ({where}) raised {named_error(exc, str(exc)[:200])} in parse_call, so it "
        "was skipped for this call; a parse_call must return None for a call that is not in its format's shape "
        "(fix or update the plug-in)",
        PluginWarning,
        stacklevel=4,
    )


def chat_format_names() -> list[str]:
    """Formats that render whole chat requests (usable by ScriptedModel, the demo and benchmarks).

    A plug-in that fails to load is left out with a PluginWarning naming it (`get_format` of its name raises).
    """
    names: list[str] = []
    for fmt in _formats_in_order():
        if isinstance(fmt, PluginError):
            _left_out(fmt, "the chat formats")
        elif fmt.payload is not None:
            names.append(fmt.name)
    return names


def get_format(name: str) -> WireFormat:
    """The format called `name`; UnknownFormatError (a ValueError) naming the known formats otherwise."""
    found = FORMATS.find(name) if isinstance(name, str) else None
    if found is None:
        raise UnknownFormatError(
            f"unknown tool format {name!r}; use one of: {', '.join(FORMATS.names())}. {FORMATS.install_hint()}"
        )
    return found


def render_tools(
    format: str,
    tools: Iterable[Tool],
    name_map: NameMap | None = None,
    *,
    augment: Augmentation | None = None,
    search_name: str = "tool_search",
) -> list[dict[str, Any]]:
    """The tools array in `format`, each tool under its provider-safe alias from `name_map`.

    With `augment`, every tool but the one named `search_name` (unless the augmentation covers
    the search tool too) carries the augmented fields.
    """
    fmt = get_format(format)
    names = name_map if name_map is not None else NameMap()
    return [fmt.render_tool(tool, names.add(tool.name)) for tool in augment_tools(tools, augment, search_name)]


def augment_tools(tools: Iterable[Tool], augment: Augmentation | None, search_name: str) -> list[Tool]:
    """The tools as a request exposes them: augmented (all but the search tool, unless asked)."""
    if augment is None:
        return list(tools)
    return [augment.extend(t) if augment.applies_to(t, search_name) else t for t in tools]


def augment_request(request: ChatRequest, augment: Augmentation | None) -> ChatRequest:
    """`request` with every tool it exposes augmented: its tools and the tools its history's search
    results deliver (native forms load those definitions from the results). Names are unchanged."""
    if augment is None:
        return request
    search = request.search_tool
    search_name = search.name if search is not None else ""

    def each(tools: Iterable[Tool]) -> tuple[Tool, ...]:
        return tuple(augment_tools(tools, augment, search_name))

    messages = tuple(
        replace(m, tool_references=each(m.tool_references)) if m.tool_references else m for m in request.messages
    )
    return replace(
        request,
        messages=messages,
        pinned=each(request.pinned),
        search_tool=each([search])[0] if search is not None else None,
        discovered=each(request.discovered),
    )


def render_result(format: str, call: ToolCall, content: str, *, is_error: bool = False) -> dict[str, Any]:
    """The message or block that answers `call` in `format`."""
    return get_format(format).render_result(call, content, is_error)


def parse_tool_call(raw: Any, *, search_name: str = "tool_search") -> ToolCall:
    """A neutral ToolCall from a neutral call, or any registered format's call object or dict.

    Formats are tried in `format_names()` order (built-ins first), each loaded only when the ones
    before it did not read the call. A plug-in that fails to load is skipped with a PluginWarning;
    when no format reads the call, the PluginError of the first such plug-in is raised (the call
    may have been its shape). A plug-in format whose `parse_call` raises (where it should return
    None for a shape not its own) is skipped too, with a PluginWarning naming its entry point, and
    the call gets the answer the other formats give it. Names are returned as sent (aliases are
    resolved by the session).
    """
    if isinstance(raw, ToolCall):
        return raw
    data = raw.model_dump(mode="json") if hasattr(raw, "model_dump") else raw
    if not isinstance(data, Mapping):
        raise ArgumentTypeError(f"cannot read a tool call from {type(raw).__name__}: pass a ToolCall or provider call")
    broken: PluginError | None = None
    for fmt in _formats_in_order():
        if isinstance(fmt, PluginError):
            _left_out(fmt, "the formats that read a tool call")
            broken = broken or fmt
            continue
        try:
            call = fmt.parse_call(data, search_name)
        except Exception as exc:
            if fmt.name in _BUILT_IN:  # ours: a bug to see, not a plug-in to step around
                raise
            # A plug-in's parse_call that raises on a shape not its own (where it should return None) must not
            # replace the answer the built-ins give that call with its own bare error: it is skipped, named.
            _skipped(fmt, exc)
            continue
        if call is not None:
            return call
    if broken is not None:
        raise PluginError(f"no tool format reads a call with keys {sorted(data)}, and {broken}") from broken
    raise ArgumentTypeError(f"a tool call needs at least a 'name'; got keys {sorted(data)}")


def request_payload(format: str, request: ChatRequest, model: str) -> dict[str, Any]:
    """The provider SDK arguments for a whole chat request in `format`."""
    fmt = get_format(format)
    if fmt.payload is None:
        raise InvalidArgumentError(f"format {format!r} is not a chat API; use one of: {', '.join(chat_format_names())}")
    return fmt.payload(request, model)


# --- the built-in formats -----------------------------------------------------------------------


def _chat_call(data: Mapping[str, Any], search_name: str) -> ToolCall | None:
    fn = data.get("function")
    if not isinstance(fn, Mapping):
        return None
    return ToolCall.from_json(data.get("id") or "", fn.get("name") or "", fn.get("arguments"))


def _responses_call(data: Mapping[str, Any], search_name: str) -> ToolCall | None:
    kind = data.get("type")
    call_id = data.get("call_id") or data.get("id") or ""
    if kind == "function_call":
        return ToolCall.from_json(call_id, data.get("name") or "", data.get("arguments"))
    if kind == "tool_search_call":  # client-executed tool search
        args, error = parse_arguments(data.get("arguments"))
        return ToolCall(call_id, search_name, args, error, kind="tool_search")
    return None


def _anthropic_call(data: Mapping[str, Any], search_name: str) -> ToolCall | None:
    if data.get("type") != "tool_use" and "input" not in data:
        return None
    args, error = parse_arguments(data.get("input"))
    return ToolCall(data.get("id") or "", data.get("name") or "", args, error)


def _gemini_call(data: Mapping[str, Any], search_name: str) -> ToolCall | None:
    # a Gemini FunctionCall: {"name", "args", "id"?}; `args` (not `arguments`) tells it from the plain shape
    if "args" not in data or "arguments" in data or not data.get("name"):
        return None
    args, error = parse_arguments(data.get("args"))
    return ToolCall(data.get("id") or "", data["name"], args, error)


def _gemini_result(call: ToolCall, content: str, is_error: bool) -> dict[str, Any]:
    from .gemini import wire_name

    # named as the function was declared (tools_for_request(session, "gemini")), not by its catalog name
    name = wire_name(provider_safe_name(call.name)) if call.name else call.name
    response: dict[str, Any] = {"name": name, "response": {"error" if is_error else "output": content}}
    if call.id:
        response["id"] = call.id
    return {"function_response": response}


def _plain_call(data: Mapping[str, Any], search_name: str) -> ToolCall | None:
    # MCP `tools/call` params and the plain JSON shape are both {"name", "arguments"} (+ "id")
    if not data.get("name"):
        return None
    args, error = parse_arguments(data.get("arguments"))
    return ToolCall(data.get("id") or "", data["name"], args, error)


def _anthropic_result(call: ToolCall, content: str, is_error: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": content}
    if is_error:
        out["is_error"] = True
    return out


def _chat_payload(request: ChatRequest, model: str) -> dict[str, Any]:
    from .openai import chat_payload

    return chat_payload(request, model)


def _responses_payload(request: ChatRequest, model: str) -> dict[str, Any]:
    from .openai import responses_payload

    return responses_payload(request, model)


def _anthropic_payload(request: ChatRequest, model: str) -> dict[str, Any]:
    from .anthropic import anthropic_payload

    return anthropic_payload(request, model)


def _gemini_payload(request: ChatRequest, model: str) -> dict[str, Any]:
    from .gemini import gemini_payload

    return gemini_payload(request, model)


def _gemini_tool(tool: Tool, alias: str) -> dict[str, Any]:
    from .gemini import gemini_declaration, wire_name

    return gemini_declaration(tool, wire_name(alias))


OPENAI_CHAT = WireFormat(
    name="openai_chat",
    label="OpenAI Chat Completions",
    render_tool=lambda tool, alias: tool.to_openai(name=alias),
    parse_call=_chat_call,
    render_result=lambda call, content, is_error: {"role": "tool", "tool_call_id": call.id, "content": content},
    payload=_chat_payload,
)
OPENAI_RESPONSES = WireFormat(
    name="openai_responses",
    label="OpenAI Responses",
    render_tool=lambda tool, alias: tool.to_openai(name=alias, responses=True),
    parse_call=_responses_call,
    render_result=lambda call, content, is_error: {
        "type": "function_call_output",
        "call_id": call.id,
        "output": content,
    },
    payload=_responses_payload,
)
ANTHROPIC = WireFormat(
    name="anthropic",
    label="Anthropic Messages",
    render_tool=lambda tool, alias: tool.to_anthropic(name=alias),
    parse_call=_anthropic_call,
    render_result=_anthropic_result,
    payload=_anthropic_payload,
)
GEMINI = WireFormat(
    name="gemini",
    label="Gemini generateContent",
    render_tool=_gemini_tool,
    parse_call=_gemini_call,
    render_result=_gemini_result,
    payload=_gemini_payload,
)
MCP = WireFormat(
    name="mcp",
    label="MCP",
    render_tool=lambda tool, alias: tool.to_mcp(name=alias),
    parse_call=_plain_call,
    render_result=lambda call, content, is_error: {
        "content": [{"type": "text", "text": content}],
        "isError": is_error,
    },
)
JSON = WireFormat(
    name="json",
    label="plain JSON",
    render_tool=lambda tool, alias: {**tool.to_dict(), "name": alias},
    parse_call=_plain_call,
    render_result=lambda call, content, is_error: {
        "tool_call_id": call.id,
        "name": call.name,
        "content": content,
        "is_error": is_error,
    },
)
