"""Gemini `generateContent` through the official `google-genai` SDK (`genai.Client`, sync or `.aio`).

Tools are sent as one `Tool` of `function_declarations`, each with its JSON Schema as
`parameters_json_schema` (full JSON Schema, where `parameters` takes only an OpenAPI subset). A
model turn is `{"role": "model", "parts": [text, function_call, ...]}`; every call of a turn is
answered by one `function_response` part, all in the next user turn, in call order, with the
result under `output` (or `error`), as the API documents. The Gemini Developer API sends no call
ids, so a call without one gets a local id (`gemini-call-N`) that is never sent back: the response
is matched by its place and name. Thought signatures the model attaches to its parts are kept and
replayed with them, which Gemini 3 requires for function calling. Gemini names must start with a
letter or `_`: a provider-safe alias that starts otherwise (`3d_print`) is sent as `_3d_print` (one
that would then pass 64 characters keeps its first 55 and ends in an 8-digit digest of the alias, so
two such names never meet, and each maps back to its tool).

Schema injection only: Gemini has no native deferred-tool form. Gemini caches prompt prefixes by
itself (implicit caching), so nothing is marked; `toolsearch.cost` prices the reused prefix.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import re
from typing import Any

from .._errors import joined_sentences
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
from ._wire import check_stop, token_count
from ._wire import dump as _dump
from ._wire import get as _get
from .drive import (
    StreamCall,
    StreamsByCall,
    call_async,
    call_sync,
    check_client,
    reject_stream_option,
    retry_sentence,
    stream_cut_short,
)

__all__ = [
    "GeminiModel", "GeminiStreamAssembler", "gemini_declaration", "gemini_payload", "parse_response", "wire_name",
]

# pydantic: the SDK validates an answer into its types, and a malformed one fails there (a ValidationError)
_SDK_MODULES = ("google.genai", "httpx", "google.auth", "pydantic", "pydantic_core")
LOCAL_ID = "gemini-call-"  # ids made here for calls the API sent without one; never sent back
_local_ids = itertools.count(1)
# Gemini names must start with a letter or "_"; a provider-safe alias may start with a digit or "-"
_GEMINI_START = re.compile(r"^[A-Za-z_]")


_WIRE_KEPT = 55  # of an alias too long for "_" + alias, the characters kept before its digest


def wire_name(alias: str) -> str:
    """The name Gemini is sent for a provider-safe alias: `_` put before one that starts otherwise.

    `_` + alias past 64 characters is `_` + its first 55 characters + 8 hex digits of its SHA-256:
    unique per alias (two long names that differ only at the end no longer meet) and mapped back
    by `_original`.
    """
    if _GEMINI_START.match(alias):
        return alias
    if len(alias) < 64:
        return f"_{alias}"
    digest = hashlib.sha256(alias.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"_{alias[:_WIRE_KEPT]}{digest}"


def _original(names: NameMap, sent: str) -> str:
    """The tool name behind a name Gemini sent back (see `wire_name`)."""
    found = names.original(sent)
    if found is None and sent.startswith("_"):
        found = names.original(sent[1:])
    if found is None and len(sent) == 64 and sent.startswith("_"):
        # a shortened wire name: the alias of the request's tools whose wire name it is
        prefix = sent[1 : 1 + _WIRE_KEPT]
        aliases: dict[str, str] = getattr(names, "_to_name", {})  # NameMap's aliases (it lists none publicly)
        found = next((names.original(a) for a in aliases if a.startswith(prefix) and wire_name(a) == sent), None)
    return found or sent



def gemini_declaration(tool: Tool, name: str) -> dict[str, Any]:
    """A tool as a Gemini `FunctionDeclaration` (SDK field names)."""
    return {"name": name, "description": tool.description, "parameters_json_schema": dict(tool.input_schema)}


def _signature(value: Any) -> str | None:
    """A thought signature as the JSON body carries it (base64), whatever form the SDK gave it in."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def gemini_payload(request: ChatRequest, model: str, names: NameMap | None = None, **options: Any) -> dict[str, Any]:
    """The `client.models.generate_content(**payload)` arguments for a request.

    `options` are merged into `config` (temperature, tool_config, thinking_config, ...).
    """
    names = names or request.name_map()
    contents: list[dict[str, Any]] = []
    system_parts = [request.system] if request.system else []
    for m in request.messages:
        if m.role == "system":
            system_parts.append(m.content)
        elif m.role == "user":
            contents.append({"role": "user", "parts": [{"text": m.content}]})
        elif m.role == "assistant":
            signatures = dict(m.provider_items) if m.provider == "gemini" else {}
            parts: list[dict[str, Any]] = []
            if m.content:
                parts.append({"text": m.content})
            for c in m.tool_calls:
                call: dict[str, Any] = {"name": wire_name(names.safe(c.name)), "args": dict(c.arguments)}
                if not c.id.startswith(LOCAL_ID):
                    call["id"] = c.id
                part: dict[str, Any] = {"function_call": call}
                if signatures.get(c.id):
                    part["thought_signature"] = signatures[c.id]
                parts.append(part)
            if parts:  # an empty reply is left out: the API refuses a content without parts
                contents.append({"role": "model", "parts": parts})
        else:
            response: dict[str, Any] = {"name": wire_name(names.safe(m.name or "")),
                                        "response": {"error" if m.is_error else "output": m.content}}
            if m.tool_call_id and not m.tool_call_id.startswith(LOCAL_ID):
                response["id"] = m.tool_call_id
            last = contents[-1] if contents else None
            answering = last is not None and last["role"] == "user" and all(
                "function_response" in p for p in last["parts"]
            )
            if answering and last is not None:
                last["parts"].append({"function_response": response})  # one turn answers all of a turn's calls
            else:
                contents.append({"role": "user", "parts": [{"function_response": response}]})
    config: dict[str, Any] = {}
    if system_parts:
        config["system_instruction"] = "\n\n".join(system_parts)
    declarations = [gemini_declaration(t, wire_name(names.safe(t.name))) for t in request.tools]
    if declarations:
        config["tools"] = [{"function_declarations": declarations}]
    config.update(options)
    payload: dict[str, Any] = {"model": model, "contents": contents}
    if config:
        payload["config"] = config
    return payload



def parse_response(response: Any, names: NameMap) -> ModelTurn:
    """A ModelTurn from a `GenerateContentResponse` (object or dict); aliases mapped back to tool names."""
    candidates = _get(response, "candidates") or []
    if not candidates:
        feedback = _dump(_get(response, "prompt_feedback"))
        if _get(feedback, "block_reason") is not None:  # blocked again each time it is sent as it is
            raise ProviderError(
                joined_sentences(
                    f"Gemini returned no candidate (prompt feedback: {feedback})",
                    retry_sentence(
                        False, "the prompt was blocked", "change the prompt, or the request's safety_settings"
                    ),
                ),
                retryable=False,
            )
        raise ProviderError(f"Gemini returned no candidate (prompt feedback: {feedback or 'none'})")
    candidate = candidates[0]
    texts: list[str] = []
    calls: list[ToolCall] = []
    signatures: list[tuple[str, str]] = []
    for part in _get(_get(candidate, "content"), "parts") or ():
        fn = _get(part, "function_call")
        if fn is not None:
            alias = call_text(_get(fn, "name"), "name")
            args, error = parse_arguments(_get(fn, "args"))
            call_id = _get(fn, "id") or f"{LOCAL_ID}{next(_local_ids)}"
            calls.append(ToolCall(call_id, _original(names, alias), args, error))
            signature = _signature(_get(part, "thought_signature"))
            if signature:
                signatures.append((call_id, signature))
        elif _get(part, "text") and not _get(part, "thought"):
            texts.append(_get(part, "text"))
    usage = _get(response, "usage_metadata")
    parsed_usage = None
    if usage is not None:
        inp = token_count(_get(usage, "prompt_token_count"), "prompt_token_count", "Gemini")
        out = token_count(_get(usage, "candidates_token_count"), "candidates_token_count", "Gemini")
        # a thinking model's thoughts are output tokens, billed as such, that the API counts apart
        thoughts = token_count(_get(usage, "thoughts_token_count"), "thoughts_token_count", "Gemini")
        if thoughts is not None:
            out = (out or 0) + thoughts
        parsed_usage = Usage(
            input_tokens=inp,
            output_tokens=out,
            total_tokens=token_count(_get(usage, "total_token_count"), "total_token_count", "Gemini"),
            cached_input_tokens=token_count(
                _get(usage, "cached_content_token_count"), "cached_content_token_count", "Gemini"
            ),
        )
    reason = _get(candidate, "finish_reason")
    stop = getattr(reason, "value", reason)
    check_stop(stop, "Gemini")  # a missing thought signature, a disabled account: no reply to use or retry
    message = Message("assistant", "".join(texts), tuple(calls), provider="gemini", provider_items=tuple(signatures))
    return ModelTurn(message, parsed_usage, str(stop) if stop is not None else None, response)


class GeminiStreamAssembler:
    """Assembles `generate_content_stream` chunks into the turn `parse_response` would give.

    Text parts arrive in pieces (each passed on as it comes); a function call arrives whole in one
    chunk. Usage and the finish reason are the last chunk's; a stream whose chunks never gave a
    finish reason was cut short, and `finish` raises a ProviderError rather than pass a part of a
    turn off as the answer. A blocked prompt streams one chunk, with its `prompt_feedback` and no
    candidate: that is the error `parse_response` gives the same answer unstreamed, not a cut.
    """

    def __init__(self, names: NameMap) -> None:
        self.names = names
        self.parts: list[Any] = []
        self.usage: Any = None
        self.finish_reason: Any = None
        self.candidates = False  # whether any chunk brought a candidate
        self.prompt_feedback: Any = None

    def feed(self, chunk: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if _get(chunk, "prompt_feedback") is not None:
            self.prompt_feedback = _get(chunk, "prompt_feedback")
        for candidate in (_get(chunk, "candidates") or [])[:1]:
            self.candidates = True
            for part in _get(_get(candidate, "content"), "parts") or ():
                part = _dump(part)
                self.parts.append(part)
                fn = _get(part, "function_call")
                if fn is not None:
                    alias = call_text(_get(fn, "name"), "name")
                    name = _original(self.names, alias)
                    call_id = call_text(_get(fn, "id"), "id")
                    if not call_id and isinstance(fn, dict):
                        # the local id the call runs under, given now so its start event and its result agree
                        call_id = fn["id"] = f"{LOCAL_ID}{next(_local_ids)}"
                    events.append(StreamEvent.tool_call_start(call_id, name))
                elif _get(part, "text") and not _get(part, "thought"):
                    events.append(StreamEvent.text_delta(_get(part, "text")))
            self.finish_reason = _get(candidate, "finish_reason") or self.finish_reason
        if _get(chunk, "usage_metadata") is not None:
            self.usage = _dump(_get(chunk, "usage_metadata"))
        return events

    def finish(self) -> ModelTurn:
        # a stream with no chunk at all (a proxy whose upstream failed at once) is cut short as one that stops a
        # chunk later: it gave no finish reason either, so it takes the same error, and retrying may help
        if not self.candidates and _get(self.prompt_feedback, "block_reason") is not None:
            # a blocked prompt, no cut: parse_response raises what the same answer unstreamed raises
            return parse_response({"candidates": [], "prompt_feedback": self.prompt_feedback}, self.names)
        if self.finish_reason is None:  # the last chunk of a whole answer gives it
            raise stream_cut_short("Gemini", "a chunk that gives its finish_reason")
        response = {
            "candidates": [{"content": {"role": "model", "parts": self.parts}, "finish_reason": self.finish_reason}],
            "usage_metadata": self.usage,
        }
        return parse_response(response, self.names)


class GeminiModel(StreamsByCall):
    """Gemini through `google.genai.Client` (`client.models` for sync calls, `client.aio.models` for async).

    `options` go to every request's `config` (temperature, thinking_config, ...); `stream` / `astream`
    call `generate_content_stream`.
    """

    format = "gemini"

    def __init__(self, client: Any, model: str, **options: Any) -> None:
        reject_stream_option(options)
        check_client("GeminiModel", client, "models.generate_content", "a google-genai client (genai.Client())", model)
        self.client = client
        self.model = model
        self.options = options

    def _build(self, request: ChatRequest) -> tuple[dict[str, Any], NameMap]:
        names = request.name_map()
        return gemini_payload(request, self.model, names, **self.options), names

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        return self._build(request)[0]

    def complete(self, request: ChatRequest) -> ModelTurn:
        payload, names = self._build(request)
        response = call_sync(self.client.models.generate_content, payload, "Gemini", _SDK_MODULES)
        return parse_response(response, names)

    async def acomplete(self, request: ChatRequest) -> ModelTurn:
        payload, names = self._build(request)
        response = await call_async(self.client.aio.models.generate_content, payload, "Gemini", _SDK_MODULES)
        return parse_response(response, names)

    def _streamed(self, request: ChatRequest, on_event: EventHandler | None, *, asynchronous: bool) -> StreamCall:
        payload, names = self._build(request)
        models = self.client.aio.models if asynchronous else self.client.models
        create = models.generate_content_stream
        return StreamCall(create, payload, GeminiStreamAssembler(names), on_event, "Gemini", _SDK_MODULES)

    def __repr__(self) -> str:
        return f"GeminiModel(model={self.model!r})"
