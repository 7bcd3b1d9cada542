"""OpenAI Chat Completions and Responses through the official `openai` SDK (sync or async clients).

Payload builders (`chat_payload`, `responses_payload`) and response parsers are plain functions,
so the scripted model can render the same requests without a client. Tool names are sent as
provider-safe aliases (`tools.NameMap`) and mapped back on the way in.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

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
from ._wire import check_stop, stop_kind, token_count, unique_call_ids
from ._wire import dump as _dump
from ._wire import get as _get
from .drive import (
    StreamAssembler,
    StreamCall,
    StreamsByCall,
    call_async,
    call_sync,
    check_client,
    reject_stream_option,
    stream_cut_short,
)

_SDK_MODULES = ("openai", "httpx")

__all__ = [
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "chat_payload",
    "responses_payload",
    "parse_chat_completion",
    "parse_response",
    "ChatStreamAssembler",
    "ResponsesStreamAssembler",
]




# --- Chat Completions ------------------------------------------------------------------------


def chat_payload(request: ChatRequest, model: str, names: NameMap | None = None, **options: Any) -> dict[str, Any]:
    """The `client.chat.completions.create(**payload)` arguments for a request.

    Chat Completions has no native tool search, so the tools are always schema-injected.
    """
    names = names or request.name_map()
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for m in request.messages:
        if m.role in ("system", "user"):
            messages.append({"role": m.role, "content": m.content})
        elif m.role == "assistant":
            # content may be null only beside tool_calls; an empty reply stays an (empty) string
            item: dict[str, Any] = {"role": "assistant", "content": (m.content or None) if m.tool_calls else m.content}
            if m.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": names.safe(c.name), "arguments": c.arguments_json()},
                    }
                    for c in m.tool_calls
                ]
            messages.append(item)
        else:
            messages.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
    payload: dict[str, Any] = {"model": model, "messages": messages}
    tools = [t.to_openai(name=names.safe(t.name)) for t in request.tools]
    if tools:
        payload["tools"] = tools
    payload.update(options)
    return payload


def parse_chat_completion(response: Any, names: NameMap) -> ModelTurn:
    """A ModelTurn from a `ChatCompletion` (object or dict); aliases mapped back to tool names."""
    choices = _get(response, "choices") or []
    if not choices:
        raise ProviderError("the Chat Completions response has no choices")
    choice = choices[0]
    msg = _get(choice, "message")
    if msg is None or isinstance(msg, str | bytes | int | float | list | tuple):
        raise ProviderError(
            f"the Chat Completions answer's choices[0].message is {type(msg).__name__} {msg!r:.60}, not an object "
            "with role, content and tool_calls: the provider's (or a proxy's) answer is malformed"
        )
    calls: list[ToolCall] = []
    for tc in _get(msg, "tool_calls") or ():
        fn = _get(tc, "function")
        alias = call_text(_get(fn, "name"), "name")
        args, error = parse_arguments(_get(fn, "arguments"))
        calls.append(ToolCall(call_text(_get(tc, "id"), "id"), names.original(alias) or alias, args, error))
    parsed_usage = _usage(_get(response, "usage"), "prompt_tokens", "completion_tokens", "Chat Completions")
    # a refusal comes in `refusal` with content null: it is the reply's text all the same, and the turn is refused
    refusal = _chat_text(_get(msg, "refusal"), "refusal")
    text = _chat_text(_get(msg, "content"), "content") or refusal
    calls = unique_call_ids(calls, "call_")
    message = Message("assistant", text, tuple(calls), provider="openai_chat")
    reason = _get(choice, "finish_reason")
    return ModelTurn(message, parsed_usage, reason, response, "refused" if refusal else stop_kind(reason))


def _usage(usage: Any, inputs: str, outputs: str, api: str) -> Usage | None:
    """An answer's token counts, each checked (`token_count`): Chat Completions names them prompt/completion
    tokens, Responses input/output tokens; the cached ones sit in `<inputs>_details`."""
    if usage is None:
        return None
    details = _get(usage, f"{inputs}_details")
    return Usage(
        input_tokens=token_count(_get(usage, inputs), inputs, api),
        output_tokens=token_count(_get(usage, outputs), outputs, api),
        total_tokens=token_count(_get(usage, "total_tokens"), "total_tokens", api),
        cached_input_tokens=token_count(
            _get(details, "cached_tokens") if details is not None else None, f"{inputs}_details.cached_tokens", api
        ),
    )


def _chat_text(value: Any, field: str) -> str:
    """A Chat Completions message's `content` (or `refusal`) as text: a string, or a list of text parts
    (what several OpenAI-compatible servers send) joined; ProviderError for anything else."""
    if value is None or isinstance(value, str):
        return value or ""
    if not isinstance(value, list | tuple):
        raise ProviderError(
            f"the Chat Completions answer's choices[0].message.{field} is {type(value).__name__} {value!r:.60}, "
            "not text or a list of text parts: the provider's (or a proxy's) answer is malformed"
        )
    texts: list[str] = []
    for i, part in enumerate(value):
        kind = _get(part, "type")
        key = "refusal" if kind == "refusal" else "text"
        text = _get(part, key) if kind in ("text", "output_text", "refusal") else None
        if not isinstance(text, str):
            raise ProviderError(
                f"the Chat Completions answer's choices[0].message.{field}[{i}] is a part of type {kind!r} "
                f"({_dump(part)!r:.80}); only text parts can be read as the reply: the provider's answer is "
                "malformed or uses content this client does not support"
            )
        texts.append(text)
    return "".join(texts)


class ChatStreamAssembler:
    """Assembles `ChatCompletionChunk`s (objects or dicts) into the turn `parse_chat_completion` would give.

    Text deltas are passed on as they come; a tool call is announced once its name is known, and
    its arguments are the concatenation of every fragment sent for its `index` (see `_slot` for the
    one case where a fragment of the same `index` starts another call: some OpenAI-compatible
    servers send every parallel call whole under `index: 0`). Usage comes from the last chunk
    (`stream_options={"include_usage": True}`); only choice 0 is read.

    A stream without a `finish_reason` is judged in `finish`: one the server did not close with
    `data: [DONE]` (`done` is False: `OpenAIChatModel` watches for it) was cut short, and raises; one
    it closed so (or where that could not be watched, `done` None) is taken as the answer, with a
    warning, when its calls' arguments are whole JSON, since some servers never send a
    `finish_reason`, and raises when a call's arguments are unfinished.
    """

    def __init__(self, names: NameMap) -> None:
        self.names = names
        self.response_id: str | None = None
        self.model: str | None = None
        self.texts: list[str] = []
        self.refusals: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # by order of arrival
        self.current: dict[int, int] = {}  # a fragment's `index` -> the key in `calls` of the call it continues
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.done: bool | None = None  # whether the server closed the stream with `data: [DONE]`; None: unknown

    def feed(self, chunk: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        self.response_id = self.response_id or _get(chunk, "id")
        self.model = self.model or _get(chunk, "model")
        usage = _get(chunk, "usage")
        if usage is not None:
            self.usage = _dump(usage)
        for choice in _get(chunk, "choices") or ():
            if (_get(choice, "index") or 0) != 0:
                continue
            self.finish_reason = _get(choice, "finish_reason") or self.finish_reason
            delta = _get(choice, "delta")
            if delta is None:
                continue
            content = _get(delta, "content")
            if content:
                self.texts.append(content)
                events.append(StreamEvent.text_delta(content))
            refusal = _get(delta, "refusal")
            if refusal:
                self.refusals.append(refusal)
                events.append(StreamEvent.text_delta(refusal))
            for fragment in _get(delta, "tool_calls") or ():
                fn = _get(fragment, "function")
                name = call_text(_get(fn, "name"), "name") if fn is not None else None
                arguments = _get(fn, "arguments") if fn is not None else None
                slot = self._slot(_get(fragment, "index"), call_text(_get(fragment, "id"), "id"), name, arguments)
                if name and not slot["name"]:
                    slot["name"] = name
                    # the id the call runs under, given now so its start event and its result agree
                    others = [s["id"] for s in self.calls.values() if s is not slot]
                    slot["id"] = unique_call_ids(
                        [ToolCall(i, "") for i in others] + [ToolCall(slot["id"], "")], "call_"
                    )[-1].id
                    events.append(StreamEvent.tool_call_start(slot["id"], self.names.original(name) or name))
                if arguments:
                    slot["arguments"].append(arguments)
        return events

    def _slot(self, index: Any, call_id: str, name: str | None, arguments: Any) -> dict[str, Any]:
        """The call a fragment belongs to: its index's call, or a new one when the fragment starts another.

        A call's fragments share its `index`, and servers vary the rest: Poolside sends a new id on every
        arguments fragment, older mlx-openai-server a fresh id on every delta, MiniMax (through NVIDIA NIM) and
        vLLM's GLM parser repeat the name on every fragment, vLLM ends with an empty arguments fragment. None of
        that is a new call. Ollama and some gateways send each parallel call whole under `index: 0`, with its own
        id and name. So a fragment starts a new call only when it brings a name, the call so far has its name,
        and its arguments are no open object (a call's arguments are whole before the next call starts). Then,
        once the call has arguments, an id other than the call's, another name, or arguments of its own (merged
        after a whole object, they could never be valid JSON) start a new call; before the call has any, only
        another name does (a server that sends a fresh id with every fragment may repeat the name too). The
        same id is always the same call.
        """
        key = self.current.get(index) if index is not None else None
        slot = self.calls.get(key) if key is not None else None
        if slot is not None and name and slot["name"]:
            # only here is the shape read, caught up with the fragments since: a stream that never repeats a
            # name (OpenAI's own) scans nothing
            shape = slot["shape"].caught_up(slot["arguments"])
            same_id = bool(call_id) and call_id == slot["sent_id"]
            other_id = bool(call_id) and bool(slot["sent_id"]) and not same_id
            other_name = name != slot["name"] and not same_id
            more = isinstance(arguments, str) and bool(arguments.strip()) and not same_id
            if shape != "open" and (other_name if shape == "blank" else (other_id or other_name or more)):
                slot = None
        if slot is None:
            key = len(self.calls)
            slot = self.calls[key] = {
                "id": "", "sent_id": "", "name": "", "arguments": [], "shape": _ArgumentShape(),
            }
            if index is not None:
                self.current[index] = key
        if call_id and not slot["sent_id"]:
            slot["sent_id"] = call_id
            if not slot["name"]:  # once announced, a call keeps the id its start event gave
                slot["id"] = call_id
        return slot

    def completion(self) -> dict[str, Any]:
        """The assembled stream as a `ChatCompletion`-shaped dict."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.texts) or None}
        if self.refusals:
            message["refusal"] = "".join(self.refusals)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"],
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])},
                }
                for _, slot in sorted(self.calls.items())
            ]
        out: dict[str, Any] = {
            "id": self.response_id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.usage is not None:
            out["usage"] = self.usage
        return out

    def finish(self) -> ModelTurn:
        if self.finish_reason is not None:
            return parse_chat_completion(self.completion(), self.names)
        self._refuse_no_answer()
        turn = parse_chat_completion(self.completion(), self.names)
        self._judge_unfinished(turn.message.tool_calls)
        return turn

    def _refuse_no_answer(self) -> None:
        """A stream that gave no `finish_reason`, and no `[DONE]` or nothing at all: no answer."""
        api = "OpenAI Chat Completions"
        if self.done is False:  # no [DONE] either: the body ended early, as a proxy whose upstream failed ends it
            raise stream_cut_short(
                api, "the chunk that gives its finish_reason and without `data: [DONE]`",
                "; if the server never closes its streams so, run without streaming: stream=False",
            )
        if not self.texts and not self.refusals and not self.calls:
            raise ProviderError(
                f"the {api} stream ended without any choice and no finish_reason. {_NO_FINISH}: through one, "
                f"{_UNSTREAMED}."
            )

    def _judge_unfinished(self, calls: Sequence[ToolCall]) -> None:
        """A stream that gave no `finish_reason`, read into `calls` (one per slot, in order): raise unless it is
        a whole answer from a server that never sends one (see the class docstring); warn when it is taken as the
        answer. Each call's arguments were parsed once, into the turn; only those it refused are read again, to
        tell a whole object it refused (nested too deeply: the loop answers that call) from unfinished text."""
        api = "OpenAI Chat Completions"
        for (_, slot), call in zip(sorted(self.calls.items()), calls, strict=True):
            text = "".join(slot["arguments"])
            if not slot["name"] or (call.arguments_error is not None and not _json_object_or_blank(text)):
                raise ProviderError(
                    f"the {api} stream ended without a finish_reason while its tool call "
                    f"{slot['name'] or '(no name)'!r} was unfinished (arguments {text[-60:]!r} are no whole JSON "
                    "object), so the turn is incomplete and none of its tool calls ran: the server or a proxy "
                    f"stopped the answer early. {_NO_FINISH}: through one, {_UNSTREAMED}."
                )
        warnings.warn(
            f"the {api} stream of model {self.model or '(unnamed)'!r} ended without a finish_reason. {_NO_FINISH}: "
            "the answer was taken as whole because the server closed the stream normally and every tool call's "
            f"arguments are whole JSON. If answers look cut short, {_UNSTREAMED}.",
            UserWarning,
            stacklevel=2,
        )


_NO_FINISH = "Some OpenAI-compatible servers never send a finish_reason (\"\" or null on every chunk)"
_UNSTREAMED = "run without streaming (stream=False, and no on_text / on_event): an unstreamed answer comes whole"


class _ArgumentShape:
    """How far a streamed call's arguments have come: `blank` (nothing but spaces yet), `open` (an object not
    closed yet), `whole` (one closed object, nothing after it), or `other` (anything else).

    Read only when asked (`caught_up`), and then only the fragments that came since it was last asked, so each
    character is read at most once: joining and parsing everything so far for every fragment would take time
    quadratic in the arguments' length (a streamed file write of 100 kB: seconds of the event loop). Brackets only
    are counted, never checked against each other: whether the text is valid JSON is for `parse_arguments` to say
    once, when the turn is complete.
    """

    __slots__ = ("depth", "escaped", "in_string", "scanned", "state")

    def __init__(self) -> None:
        self.state = "blank"
        self.depth = 0
        self.in_string = False
        self.escaped = False  # the fragment before ended inside a string on a backslash
        self.scanned = 0  # how many of the call's fragments have been read

    def caught_up(self, fragments: list[Any]) -> str:
        """The state of a call's arguments `fragments` (the fragments it was last asked about, and any since)."""
        while self.scanned < len(fragments):
            self._add(fragments[self.scanned])
            self.scanned += 1
        return self.state

    def _add(self, text: str) -> None:
        if not isinstance(text, str) or self.state == "other":
            return
        i, end = 0, len(text)
        while i < end:
            if self.in_string:
                if self.escaped:  # the character after a backslash never ends the string
                    self.escaped = False
                    i += 1
                    continue
                found = _STRING_STOP.search(text, i)
                if found is None:
                    return
                i = found.end()
                if found.group() == '"':
                    self.in_string = False
                else:
                    self.escaped = True
                continue
            char = text[i]
            i += 1
            if char.isspace():
                continue
            if self.state == "blank":
                self.state, self.depth = ("open", 1) if char == "{" else ("other", 0)
            elif self.state == "whole":
                self.state = "other"  # something after the object
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.state = "whole"
            if self.state == "other":
                return


_STRING_STOP = re.compile(r'["\\]')


def _json_object_or_blank(text: str) -> bool:
    """Whether a call's arguments are complete: a JSON object, or none at all (a call without arguments)."""
    if not text.strip():
        return True
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


_EXPECTED_CLIENT = "an OpenAI client (openai.OpenAI(), openai.AsyncOpenAI(), or their Azure kind)"


class _OpenAIBase(StreamsByCall):
    format = "openai"

    _endpoint_name = ""  # the SDK endpoint the subclass calls, checked on the client when the model is made

    def __init__(self, client: Any, model: str, **options: Any) -> None:
        reject_stream_option(options)
        check_client(type(self).__name__, client, self._endpoint_name, _EXPECTED_CLIENT, model)
        self.client = client
        self.model = model
        self.options = options

    def _endpoint(self) -> Any:
        """The SDK method `_endpoint_name` names, the one `check_client` checked, looked up on the client."""
        return operator.attrgetter(self._endpoint_name)(self.client)

    def _build(self, request: ChatRequest) -> tuple[dict[str, Any], NameMap]:
        raise NotImplementedError

    def _parse(self, response: Any, names: NameMap, request: ChatRequest) -> ModelTurn:
        raise NotImplementedError

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        return self._build(request)[0]

    def complete(self, request: ChatRequest) -> ModelTurn:
        payload, names = self._build(request)
        response = call_sync(self._endpoint(), payload, "OpenAI", _SDK_MODULES)
        return self._parse(response, names, request)

    async def acomplete(self, request: ChatRequest) -> ModelTurn:
        payload, names = self._build(request)
        response = await call_async(self._endpoint(), payload, "OpenAI", _SDK_MODULES)
        return self._parse(response, names, request)

    def _stream_options(self) -> dict[str, Any]:
        return {"stream": True}

    def _assembler(self, names: NameMap, request: ChatRequest) -> StreamAssembler:
        raise NotImplementedError

    def _streamed(self, request: ChatRequest, on_event: EventHandler | None, *, asynchronous: bool) -> StreamCall:
        payload, names = self._build(request)
        payload.update(self._stream_options())
        assembler = self._assembler(names, request)
        return StreamCall(self._endpoint(), payload, assembler, on_event, "OpenAI", _SDK_MODULES)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


class OpenAIChatModel(_OpenAIBase):
    """Chat Completions through `openai.OpenAI` or `openai.AsyncOpenAI` (any base_url, proxies too).

    `options` are passed to every `chat.completions.create` call (temperature, max_tokens, ...).
    """

    format = "openai_chat"
    _endpoint_name = "chat.completions.create"

    def _build(self, request: ChatRequest) -> tuple[dict[str, Any], NameMap]:
        names = request.name_map()
        return chat_payload(request, self.model, names, **self.options), names

    def _parse(self, response: Any, names: NameMap, request: ChatRequest) -> ModelTurn:
        return parse_chat_completion(response, names)

    def _stream_options(self) -> dict[str, Any]:
        # without include_usage a streamed completion reports no usage at all
        user = self.options.get("stream_options")
        return {"stream": True, "stream_options": {"include_usage": True, **(user or {})}}

    def _assembler(self, names: NameMap, request: ChatRequest) -> StreamAssembler:
        return ChatStreamAssembler(names)

    def _streamed(self, request: ChatRequest, on_event: EventHandler | None, *, asynchronous: bool) -> StreamCall:
        call = super()._streamed(request, on_event, asynchronous=asynchronous)
        assembler = cast(ChatStreamAssembler, call.assembler)
        return dataclasses.replace(call, opened=lambda stream: _watching_done(stream, assembler))


def _watching_done(stream: Any, assembler: ChatStreamAssembler) -> Any:
    """`stream`, just opened, watched for the `data: [DONE]` line that closes a whole Chat Completions stream,
    noted in `assembler.done`: what tells a server that never sends a `finish_reason` from a stream a proxy cut
    short.

    The openai SDK reads that line and drops it; its SSE decoder (`Stream._decoder`, private) is the one place it
    passes. A stream without one (a wrapped client's, another SDK version's) is left unwatched: `done` stays None.
    """
    decoder = getattr(stream, "_decoder", None)
    if callable(getattr(decoder, "iter_bytes", None)) and callable(getattr(decoder, "aiter_bytes", None)):
        try:
            stream._decoder = _DoneWatch(decoder, assembler)
        except (AttributeError, TypeError):  # a stream that will not take it: unwatched
            return stream
        assembler.done = False
    return stream


class _DoneWatch:
    """An openai SDK SSE decoder, passed through, that notes in `assembler.done` the `[DONE]` event."""

    def __init__(self, decoder: Any, assembler: ChatStreamAssembler) -> None:
        self._decoder = decoder
        self._assembler = assembler

    def _seen(self, event: Any) -> Any:
        data = getattr(event, "data", None)
        if isinstance(data, str) and data.startswith("[DONE]"):
            self._assembler.done = True
        return event

    def iter_bytes(self, iterator: Any) -> Iterator[Any]:
        for event in self._decoder.iter_bytes(iterator):
            yield self._seen(event)

    async def aiter_bytes(self, iterator: Any) -> AsyncIterator[Any]:
        async for event in self._decoder.aiter_bytes(iterator):
            yield self._seen(event)


# --- Responses -------------------------------------------------------------------------------


def _native_search_tool(tool: Tool) -> dict[str, Any]:
    return {
        "type": "tool_search",
        "execution": "client",
        "description": tool.description,
        "parameters": tool.input_schema,
    }


def responses_payload(
    request: ChatRequest, model: str, names: NameMap | None = None, *, strict: bool | None = False, **options: Any
) -> dict[str, Any]:
    """The `client.responses.create(**payload)` arguments for a request.

    With `tool_search_mode="native"` the meta-tool is sent as a client-executed `tool_search`
    tool; its calls arrive as `tool_search_call` items and results go back as
    `tool_search_output` items carrying the found tools' definitions, so those tools are not
    repeated in `tools`. A search that found nothing (or had bad input) also gets a developer
    message with the instructive text, since `tool_search_output` has no text field.

    Function tools carry `strict` (False by default: catalog schemas are rarely strict-compatible,
    and the SDK's `FunctionToolParam` requires the key).

    With `store=False` nothing is kept on OpenAI's side, so a reasoning item can be replayed only
    with its `encrypted_content`: the request asks for it (`include=["reasoning.encrypted_content"]`)
    once the model shows it reasons (`reasoning=` is given, or the history holds a reasoning item:
    the API refuses that `include` for a model that does not reason), and a reasoning item without it
    is left out of the replay (the API refuses a bare one: "Items are not persisted when `store` is
    set to false").
    """
    names = names or request.name_map()
    stateless = options.get("store") is False

    def function(tool: Tool) -> dict[str, Any]:
        return {**tool.to_openai(name=names.safe(tool.name), responses=True), "strict": strict}

    native = request.tool_search_mode == "native"
    items: list[dict[str, Any]] = []
    delivered: set[str] = set()
    for m in request.messages:
        if m.role in ("system", "user"):
            items.append({"role": m.role, "content": m.content})
        elif m.role == "assistant":
            if m.provider == "openai_responses":  # reasoning items, replayed verbatim
                items.extend(i for i in map(_dump, m.provider_items) if not (stateless and _bare_reasoning(i)))
            if m.content:
                items.append({"role": "assistant", "content": m.content})
            for c in m.tool_calls:
                if c.kind == "tool_search" and native:
                    items.append(
                        {
                            "type": "tool_search_call",
                            "call_id": c.id,
                            "execution": "client",
                            "arguments": dict(c.arguments),
                        }
                    )
                else:
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": c.id,
                            "name": names.safe(c.name),
                            "arguments": c.arguments_json(),
                        }
                    )
        elif m.call_kind == "tool_search" and native:
            delivered.update(t.name for t in m.tool_references)
            items.append(
                {
                    "type": "tool_search_output",
                    "call_id": m.tool_call_id,
                    "execution": "client",
                    "status": "completed",
                    "tools": [function(t) for t in m.tool_references],
                }
            )
            if not m.tool_references:
                # tool_search_output carries no text: say what went wrong (or that nothing matched) beside it
                items.append({"role": "developer", "content": f"{m.name or 'tool_search'} result: {m.content}"})
        else:
            items.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content})
    tools: list[dict[str, Any]] = [function(t) for t in request.pinned]
    if request.search_tool is not None:
        st = request.search_tool
        tools.append(_native_search_tool(st) if native else function(st))
    tools.extend(function(t) for t in request.discovered if t.name not in delivered)
    payload: dict[str, Any] = {"model": model, "input": items}
    if request.system:
        payload["instructions"] = request.system
    if tools:
        payload["tools"] = tools
    payload.update(options)
    reasons = "reasoning" in options or any(
        m.provider == "openai_responses" and m.provider_items for m in request.messages
    )
    if stateless and reasons:
        include = list(options.get("include") or ())
        if _ENCRYPTED_REASONING not in include:
            payload["include"] = [*include, _ENCRYPTED_REASONING]
    return payload


_ENCRYPTED_REASONING = "reasoning.encrypted_content"


def _bare_reasoning(item: Any) -> bool:
    """A reasoning item that only points at one kept on OpenAI's side: no `encrypted_content` to send back."""
    return isinstance(item, dict) and item.get("type") == "reasoning" and not item.get("encrypted_content")


def parse_response(response: Any, names: NameMap, search_tool: str | None = None) -> ModelTurn:
    """A ModelTurn from a Responses `Response` (object or dict); `tool_search_call` items become
    ToolCalls of kind "tool_search" named after the meta-tool.

    A response that failed, was cancelled or is not finished (status `failed`, `cancelled`, `queued`,
    `in_progress`) is a ProviderError quoting its `error`: it is no answer, not even a partial one.
    """
    check_stop(_get(response, "status"), "OpenAI Responses", _get(response, "error"))
    texts: list[str] = []
    calls: list[ToolCall] = []
    kept: list[Any] = []
    refused = False
    for item in _get(response, "output") or ():
        kind = _get(item, "type")
        if kind == "message":
            for part in _get(item, "content") or ():
                if _get(part, "type") == "output_text":
                    texts.append(_get(part, "text") or "")
                elif _get(part, "type") == "refusal":
                    texts.append(_get(part, "refusal") or "")
                    refused = True
        elif kind == "function_call":
            alias = call_text(_get(item, "name"), "name")
            args, error = parse_arguments(_get(item, "arguments"))
            calls.append(ToolCall(call_text(_get(item, "call_id"), "id"), names.original(alias) or alias, args, error))
        elif kind == "tool_search_call" and _get(item, "execution") == "client":
            args, error = parse_arguments(_get(item, "arguments"))
            call_id = _get(item, "call_id") or _get(item, "id") or ""
            calls.append(ToolCall(call_id, search_tool or "tool_search", args, error, kind="tool_search"))
        elif kind == "reasoning":
            kept.append(_dump(item))
    calls = unique_call_ids(calls, "call_")
    parsed_usage = _usage(_get(response, "usage"), "input_tokens", "output_tokens", "Responses")
    message = Message(
        "assistant", "".join(texts), tuple(calls), provider="openai_responses", provider_items=tuple(kept)
    )
    status = _get(response, "status")
    # an incomplete turn says why in incomplete_details: max_output_tokens (truncated) or content_filter (refused)
    kind = "refused" if refused else stop_kind(status, _get(_get(response, "incomplete_details"), "reason"))
    return ModelTurn(message, parsed_usage, status, response, kind)


class ResponsesStreamAssembler:
    """Assembles Responses stream events (objects or dicts) into the turn `parse_response` would give.

    Text (and refusal) deltas and call starts (`function_call`, client `tool_search_call` items)
    are passed on as they come; the turn itself is parsed from the final response that
    `response.completed` (or `.incomplete` / `.failed`) carries, usage included.
    """

    def __init__(self, names: NameMap, search_tool: str | None = None) -> None:
        self.names = names
        self.search_tool = search_tool
        self.response: Any = None

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = _get(event, "type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = _get(event, "delta")
            return [StreamEvent.text_delta(delta)] if delta else []
        if kind == "response.output_item.added":
            item = _get(event, "item")
            item_type = _get(item, "type")
            call_id = _get(item, "call_id") or _get(item, "id") or ""
            if item_type == "function_call":
                alias = call_text(_get(item, "name"), "name")
                return [StreamEvent.tool_call_start(call_id, self.names.original(alias) or alias)]
            if item_type == "tool_search_call" and _get(item, "execution") == "client":
                return [StreamEvent.tool_call_start(call_id, self.search_tool or "tool_search", "tool_search")]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.response = _get(event, "response")
        elif kind == "error":
            raise ProviderError(f"the Responses stream reported an error: {_get(event, 'message') or event}")
        return []

    def finish(self) -> ModelTurn:
        if self.response is None:
            raise stream_cut_short("OpenAI Responses", "response.completed")
        return parse_response(self.response, self.names, self.search_tool)


class OpenAIResponsesModel(_OpenAIBase):
    """The Responses API through `openai.OpenAI` or `openai.AsyncOpenAI`.

    Stateless: the whole history is sent as `input` each time (no `previous_response_id`), so it
    works through proxies and with `store=False` (a reasoning model's reasoning is then replayed by
    its encrypted content, asked for with `include`: see `responses_payload`). `strict` is sent on
    every function tool; `options` go to every `responses.create` call.
    """

    format = "openai_responses"
    _endpoint_name = "responses.create"

    def __init__(self, client: Any, model: str, *, strict: bool | None = False, **options: Any) -> None:
        super().__init__(client, model, **options)
        self.strict = strict

    def _build(self, request: ChatRequest) -> tuple[dict[str, Any], NameMap]:
        names = request.name_map()
        return responses_payload(request, self.model, names, strict=self.strict, **self.options), names

    def _parse(self, response: Any, names: NameMap, request: ChatRequest) -> ModelTurn:
        search = request.search_tool.name if request.search_tool is not None else None
        return parse_response(response, names, search)

    def _assembler(self, names: NameMap, request: ChatRequest) -> StreamAssembler:
        return ResponsesStreamAssembler(names, request.search_tool.name if request.search_tool is not None else None)
