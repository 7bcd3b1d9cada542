"""Anthropic Messages through the official `anthropic` SDK (sync or async clients).

Schema injection by default. With `tool_search_mode="native"` the discovered tools are sent with
`defer_loading: true` and each tool_search result is a `tool_result` whose content is
`tool_reference` blocks (`ToolReferenceBlockParam` in the SDK), which the API expands into the
tools' definitions in place — keeping the tools prefix, and so the prompt cache, stable. A
discovered tool that no `tool_reference` of the history names (one an earlier run of the session
found) is sent loaded instead, since nothing would load it.

Prompt caching is on by default: Anthropic caches a prompt only up to explicit `cache_control`
breakpoints, so each request marks three of the four allowed — the last loaded tool (deferred
tools may not carry one), the system text and the last block of the conversation, which moves
forward every request so the next one reads everything before it from cache. These are the
breakpoints `toolsearch.cost` prices. `AnthropicModel(..., prompt_caching=False)` sends none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..tools import NameMap, Tool
from ._base import (
    ChatRequest,
    EventHandler,
    Message,
    ModelTurn,
    ProviderError,
    StreamEvent,
    ToolCall,
    Usage,
    call_text,
    parse_arguments,
)
from ._wire import anthropic_call_id, token_count, unique_call_ids
from ._wire import dump as _dump
from ._wire import get as _get
from .drive import (
    StreamCall,
    StreamsByCall,
    call_async,
    call_sync,
    check_client,
    reject_stream_option,
    stream_cut_short,
)

__all__ = ["AnthropicModel", "AnthropicStreamAssembler", "anthropic_payload", "parse_message"]

DEFAULT_MAX_TOKENS = 4096
_SDK_MODULES = ("anthropic", "httpx")
_EPHEMERAL = {"type": "ephemeral"}  # the default 5-minute cache
_UNCACHEABLE = ("thinking", "redacted_thinking")  # blocks the API refuses a cache_control on




def anthropic_payload(
    request: ChatRequest,
    model: str,
    names: NameMap | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    prompt_caching: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """The `client.messages.create(**payload)` arguments for a request.

    Consecutive tool results are grouped into one user message, as the API requires. With
    `prompt_caching`, `cache_control` breakpoints end the tools, the system text and the
    conversation (see the module docstring); a top-level `cache_control` in `options` (the API's
    automatic caching) takes the place of the last one, and its `ttl` is the other two's too
    (`cache_control={"type": "ephemeral", "ttl": "1h"}` caches all for an hour: the API refuses a
    5-minute breakpoint ahead of a 1-hour one).
    """
    names = names or request.name_map()
    native = request.tool_search_mode == "native"
    messages: list[dict[str, Any]] = []
    system_parts = [request.system] if request.system else []
    referenced: dict[str, Tool] = {}
    ids = _WireIds()

    def user_blocks() -> list[dict[str, Any]]:
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "user" and isinstance(last["content"], list):
            return last["content"]  # type: ignore[no-any-return]
        blocks: list[dict[str, Any]] = []
        messages.append({"role": "user", "content": blocks})
        return blocks

    for m in request.messages:
        if m.role == "system":
            system_parts.append(m.content)
        elif m.role == "user":
            user_blocks().append({"type": "text", "text": m.content})
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.provider == "anthropic":
                blocks.extend(_dump(b) for b in m.provider_items)  # thinking blocks, replayed verbatim
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": ids.call(c.id), "name": names.safe(c.name), "input": dict(c.arguments)}
                )
            if blocks:  # an empty reply is left out: the API refuses empty text blocks
                messages.append({"role": "assistant", "content": blocks})
        else:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": ids.result(m.tool_call_id or "")}
            if native and m.tool_references and not m.is_error:
                block["content"] = [
                    {"type": "tool_reference", "tool_name": names.safe(t.name)} for t in m.tool_references
                ]
                referenced.update((t.name, t) for t in m.tool_references)
            else:
                block["content"] = m.content
            if m.is_error:
                block["is_error"] = True
            user_blocks().append(block)
    # A plain user turn reads best as a string.
    for msg in messages:
        content = msg["content"]
        if msg["role"] == "user" and len(content) == 1 and content[0].get("type") == "text":
            msg["content"] = content[0]["text"]

    tools: list[dict[str, Any]] = [t.to_anthropic(name=names.safe(t.name)) for t in request.pinned]
    if request.search_tool is not None:
        tools.append(request.search_tool.to_anthropic(name=names.safe(request.search_tool.name)))
    if native:
        # Every tool a tool_reference names must be in `tools`, deferred, or the API rejects the request; the
        # reference loads it where it stands. A discovered tool no reference of this history names (found by an
        # earlier run of the session) would be deferred with nothing to load it, out of the model's reach: it is
        # sent loaded.
        discovered = {t.name: t for t in request.discovered}
        for name, tool in referenced.items():
            discovered.setdefault(name, tool)
        pinned = {t.name for t in request.pinned}
        tools.extend(
            {**t.to_anthropic(name=names.safe(t.name)), **({"defer_loading": True} if t.name in referenced else {})}
            for t in discovered.values()
            if t.name not in pinned
        )
    else:
        tools.extend(t.to_anthropic(name=names.safe(t.name)) for t in request.discovered)
    payload: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system_parts:
        payload["system"] = "\n\n".join(system_parts)
    if tools:
        payload["tools"] = tools
    payload.update(options)
    if prompt_caching:
        automatic = options.get("cache_control")
        marker = dict(automatic) if isinstance(automatic, Mapping) else _EPHEMERAL
        _mark_breakpoints(payload, conversation="cache_control" not in options, marker=marker)
    return payload


def _ttl_seconds(marker: Any) -> float:
    """A `cache_control` marker's lifetime in seconds ("5m", "1h"; none given: the API's 5 minutes)."""
    ttl = marker.get("ttl") if isinstance(marker, Mapping) else None
    if isinstance(ttl, str) and len(ttl) > 1 and ttl[:-1].isdigit() and ttl[-1] in "smh":
        return int(ttl[:-1]) * {"s": 1, "m": 60, "h": 3600}[ttl[-1]]
    return 300.0


def _longest(marker: Mapping[str, Any], system: Any) -> dict[str, Any]:
    """The tools breakpoint: `marker`, or the longest lifetime the caller's own system blocks name when that is
    longer. The tools come before the system text, and the API refuses a breakpoint with a shorter lifetime
    ahead of a longer one (a 5-minute tools breakpoint before a caller's 1-hour system block)."""
    blocks = system if isinstance(system, list) else []
    own = [b["cache_control"] for b in blocks if isinstance(b, Mapping) and isinstance(b.get("cache_control"), Mapping)]
    longest = max(own, key=_ttl_seconds, default=None)
    if longest is not None and _ttl_seconds(longest) > _ttl_seconds(marker):
        return {**marker, "ttl": longest["ttl"]}
    return dict(marker)


class _WireIds:
    """Call ids as Anthropic accepts them (`^[a-zA-Z0-9_-]+$`), the same for a tool_use and its tool_result.

    A history may hold ids from another provider ("functions.get_time:0") or none at all (""): an id
    the pattern refuses is sent as `anthropic_call_id(id)`; an empty one gets `toolu_noid_N`, N counting
    the empty ids of the history in order (stable from one request to the next, so the prompt cache
    holds), and an empty-id result answers the oldest empty-id call not yet answered.
    """

    def __init__(self) -> None:
        self.empty = 0
        self.waiting: list[str] = []

    def call(self, call_id: str) -> str:
        if call_id:
            return anthropic_call_id(call_id)
        self.empty += 1
        made = f"toolu_noid_{self.empty}"
        self.waiting.append(made)
        return made

    def result(self, call_id: str) -> str:
        if call_id:
            return anthropic_call_id(call_id)
        if self.waiting:
            return self.waiting.pop(0)
        self.empty += 1
        return f"toolu_noid_{self.empty}"


def _mark_breakpoints(payload: dict[str, Any], *, conversation: bool, marker: Mapping[str, Any] = _EPHEMERAL) -> None:
    """Put `marker` as `cache_control` on the last loaded tool, the system text and (with `conversation`) the
    last block.

    Marked blocks are copies: a tool's definition may be shared with other requests.
    """
    tools: list[dict[str, Any]] = payload.get("tools") or []
    loaded = [i for i, t in enumerate(tools) if not t.get("defer_loading")]
    if loaded:
        tools[loaded[-1]] = {**tools[loaded[-1]], "cache_control": _longest(marker, payload.get("system"))}
    if isinstance(payload.get("system"), str) and payload["system"]:  # a caller's own system blocks stay as given
        payload["system"] = [{"type": "text", "text": payload["system"], "cache_control": dict(marker)}]
    messages: list[dict[str, Any]] = payload["messages"]
    if not conversation or not messages:
        return
    last = messages[-1]
    content = last["content"]
    if isinstance(content, str):
        if content.strip():
            last["content"] = [{"type": "text", "text": content, "cache_control": dict(marker)}]
        return
    for i in range(len(content) - 1, -1, -1):
        block = content[i]
        if block.get("type") in _UNCACHEABLE or (block.get("type") == "text" and not block.get("text", "").strip()):
            continue
        content[i] = {**block, "cache_control": dict(marker)}
        return


def parse_message(response: Any, names: NameMap) -> ModelTurn:
    """A ModelTurn from an Anthropic `Message` (object or dict); aliases mapped back to tool names."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    kept: list[Any] = []
    for block in _get(response, "content") or ():
        kind = _get(block, "type")
        if kind == "text":
            texts.append(_get(block, "text") or "")
        elif kind == "tool_use":
            alias = call_text(_get(block, "name"), "name")
            args, error = parse_arguments(_get(block, "input"))
            calls.append(ToolCall(call_text(_get(block, "id"), "id"), names.original(alias) or alias, args, error))
        elif kind in ("thinking", "redacted_thinking"):
            kept.append(_dump(block))
    calls = unique_call_ids(calls, "toolu_")
    usage = _get(response, "usage")
    parsed_usage = None
    if usage is not None:
        # Anthropic's input_tokens leaves out what was read from or written to the cache: add them
        # back, so input_tokens is the whole prompt as OpenAI reports it, and keep both parts apart
        # (writes bill at 1.25x the input rate, 2x for the 1-hour cache): the record is the bill
        read = token_count(_get(usage, "cache_read_input_tokens"), "cache_read_input_tokens", "Anthropic")
        written = token_count(_get(usage, "cache_creation_input_tokens"), "cache_creation_input_tokens", "Anthropic")
        by_ttl = _get(usage, "cache_creation")
        written_1h = token_count(
            _get(by_ttl, "ephemeral_1h_input_tokens") if by_ttl is not None else None,
            "cache_creation.ephemeral_1h_input_tokens",
            "Anthropic",
        )
        inp = token_count(_get(usage, "input_tokens"), "input_tokens", "Anthropic")
        if inp is not None:
            inp += (read or 0) + (written or 0)
        out = token_count(_get(usage, "output_tokens"), "output_tokens", "Anthropic")
        parsed_usage = Usage(
            input_tokens=inp,
            output_tokens=out,
            total_tokens=(inp or 0) + (out or 0) if inp is not None or out is not None else None,
            cached_input_tokens=read,
            cache_write_tokens=written,
            cache_write_1h_tokens=written_1h,
        )
    message = Message("assistant", "".join(texts), tuple(calls), provider="anthropic", provider_items=tuple(kept))
    return ModelTurn(message, parsed_usage, _get(response, "stop_reason"), response)


class AnthropicStreamAssembler:
    """Assembles Messages stream events (objects or dicts) into the turn `parse_message` would give.

    Content blocks are rebuilt by index: text from `text_delta`s (passed on as they come),
    tool_use input from the concatenated `input_json_delta`s (a call is announced at its block's
    start), thinking blocks with their signature so they can be replayed. Usage: input from
    `message_start`, output (and any later figures) from `message_delta`. A stream that ends before
    `message_delta` gave the stop reason or `message_stop` came was cut short: `finish` raises a
    ProviderError rather than pass a part of a turn off as the answer.
    """

    def __init__(self, names: NameMap) -> None:
        self.names = names
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stopped = False

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = _get(event, "type")
        if kind == "message_start":
            self.message = dict(_dump(_get(event, "message")) or {})
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            index = _get(event, "index") or 0
            block = dict(_dump(_get(event, "content_block")) or {})
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                self.partial_json[index] = []
                alias, call_id = call_text(block.get("name"), "name"), call_text(block.get("id"), "id")
                # the id the call runs under, given now so its start event and its result agree
                others = [ToolCall(b.get("id") or "", "") for i, b in self.blocks.items() if i != index
                          and b.get("type") == "tool_use"]
                call_id = unique_call_ids([*others, ToolCall(call_id, "")], "toolu_")[-1].id
                block["id"] = call_id
                return [StreamEvent.tool_call_start(call_id, self.names.original(alias) or alias)]
            if block.get("type") == "text" and block.get("text"):
                return [StreamEvent.text_delta(block["text"])]
        elif kind == "content_block_delta":
            return self._delta(_get(event, "index") or 0, _get(event, "delta"))
        elif kind == "content_block_stop":
            index = _get(event, "index") or 0
            parts = self.partial_json.pop(index, None)
            if parts:  # the JSON text as sent; parse_message parses it (and explains when it is broken)
                self.blocks[index]["input"] = "".join(parts)
        elif kind == "message_delta":
            self.stop_reason = _get(_get(event, "delta"), "stop_reason") or self.stop_reason
            usage = _dump(_get(event, "usage")) or {}
            self.usage.update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = _get(event, "error")
            raise ProviderError(f"the Anthropic stream reported an error: {_get(error, 'message') or error}")
        return []

    def _delta(self, index: int, delta: Any) -> list[StreamEvent]:
        block = self.blocks.setdefault(index, {})
        kind = _get(delta, "type")
        if kind == "text_delta":
            text = _get(delta, "text") or ""
            block["text"] = (block.get("text") or "") + text
            return [StreamEvent.text_delta(text)] if text else []
        if kind == "input_json_delta":
            self.partial_json.setdefault(index, []).append(_get(delta, "partial_json") or "")
        elif kind == "thinking_delta":
            block["thinking"] = (block.get("thinking") or "") + (_get(delta, "thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = _get(delta, "signature")
        return []

    def finish(self) -> ModelTurn:
        # an empty stream (a proxy whose upstream failed at once) is cut short as one that stops an event later:
        # retrying may help. Only a stream that ended properly yet never sent message_start is malformed
        if not self.stopped and self.stop_reason is None:  # neither message_delta's stop_reason nor message_stop
            raise stream_cut_short("Anthropic Messages", "message_stop")
        if not self.message:
            raise ProviderError(
                "the Anthropic stream ended its turn without ever sending message_start, so no turn was received; "
                "the server or a proxy before it does not speak the Messages stream protocol: check base_url"
            )
        for index, parts in self.partial_json.items():  # a block the stream never closed
            self.blocks[index]["input"] = "".join(parts)
        message = {
            **self.message,
            "content": [self.blocks[i] for i in sorted(self.blocks)],
            "stop_reason": self.stop_reason,
            "usage": self.usage,
        }
        return parse_message(message, self.names)


class AnthropicModel(StreamsByCall):
    """Anthropic Messages through `anthropic.Anthropic` or `anthropic.AsyncAnthropic`.

    `options` go to every `messages.create` call (temperature, thinking, ...); `stream` / `astream`
    send the same request with `stream=True`. `prompt_caching=False` sends no `cache_control`
    breakpoints (Anthropic then caches nothing).
    """

    format = "anthropic"

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        prompt_caching: bool = True,
        **options: Any,
    ) -> None:
        reject_stream_option(options)
        check_client(
            "AnthropicModel", client, "messages.create",
            "an Anthropic client (anthropic.Anthropic() or anthropic.AsyncAnthropic())", model,
        )
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.prompt_caching = prompt_caching
        self.options = options

    def _build(self, request: ChatRequest) -> tuple[dict[str, Any], NameMap]:
        names = request.name_map()
        payload = anthropic_payload(
            request, self.model, names, max_tokens=self.max_tokens, prompt_caching=self.prompt_caching, **self.options
        )
        return payload, names

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        return self._build(request)[0]

    def complete(self, request: ChatRequest) -> ModelTurn:
        payload, names = self._build(request)
        return parse_message(call_sync(self.client.messages.create, payload, "Anthropic", _SDK_MODULES), names)

    async def acomplete(self, request: ChatRequest) -> ModelTurn:
        payload, names = self._build(request)
        response = await call_async(self.client.messages.create, payload, "Anthropic", _SDK_MODULES)
        return parse_message(response, names)

    def _streamed(self, request: ChatRequest, on_event: EventHandler | None, *, asynchronous: bool) -> StreamCall:
        payload, names = self._build(request)
        payload["stream"] = True
        assembler = AnthropicStreamAssembler(names)
        return StreamCall(self.client.messages.create, payload, assembler, on_event, "Anthropic", _SDK_MODULES)

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r})"
