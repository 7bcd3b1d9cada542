"""A local HTTP server that speaks the OpenAI, Anthropic and Gemini wire formats and replays scripted model turns.

The real `openai` / `anthropic` / `google-genai` clients talk to it through `base_url`; every request is recorded
(path, headers, parsed JSON body) and answered with the next scripted turn, rendered into the
provider's exact response shape (JSON, or SSE when the request says `"stream": true`):

    with FakeLLMServer(Turn(tool_calls=[("tool_search", {"query": "weather"})]), Turn(text="done")) as server:
        client = server.openai()                 # openai.OpenAI(base_url=..., max_retries=0)
        client.chat.completions.create(...)
        assert server.requests[0].tool_names == ["tool_search"]

A turn is a provider-neutral `Turn` (text and/or tool calls), an `ErrorTurn` (HTTP error status
with the provider's error body) or a callable `policy(request) -> Turn` that reacts to what the
client sent; `request` is the recorded `Request`, which reads like the JSON body (`request["tools"]`)
and adds provider-neutral helpers (`tool_names`, `find_tool`, `tool_results()`...).

Strict by default: before answering, every request is checked against the rules the real API
enforces (tests/fakes/provider_rules.py; the table with sources is in docs/testing.md). A request
that breaks one gets HTTP 400 with the provider's error body, so the SDK raises its real
`BadRequestError`; it is also kept in `violations`, and leaving the `with` block with one still
there fails the test even when the client absorbed the error (`take_violations()` clears them
for a test that expects the refusal).

Endpoints: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages`,
`POST /v1/messages/count_tokens`, and Gemini's `POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse` (also under `/v1/`). Token counts are deterministic: input = len(raw body) // 4,
output = len(rendered content) // 4 (at least 1 each).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

from .provider_rules import Violation, check_anthropic, check_chat, check_gemini, check_responses

__all__ = [
    "ANTHROPIC_MESSAGES",
    "GEMINI",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "ErrorTurn",
    "FakeLLMServer",
    "Policy",
    "Request",
    "ToolCall",
    "ToolResult",
    "Turn",
]

OPENAI_CHAT = "openai.chat"
OPENAI_RESPONSES = "openai.responses"
ANTHROPIC_MESSAGES = "anthropic"
GEMINI = "gemini"
# models/{model}:generateContent and :streamGenerateContent (the model name is part of the path), under
# either API version (the SDK uses v1beta by default and v1 with a base_url from $GOOGLE_GEMINI_BASE_URL)
_GEMINI_ROUTE = re.compile(
    r"^/v1(?:beta)?/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)

_ROUTES = {
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/responses": OPENAI_RESPONSES,
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/messages/count_tokens": ANTHROPIC_MESSAGES,
}


def _route(path: str) -> str | None:
    """The provider a path belongs to, None for a path no provider serves."""
    path = path.split("?", 1)[0]
    return _ROUTES.get(path) or (GEMINI if _GEMINI_ROUTE.match(path) else None)


_CREATED = 1_700_000_000  # fixed timestamp: responses are byte-for-byte reproducible


# --- scripted turns ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One tool call the fake model makes; `arguments` as a dict, or a raw string (sent verbatim to OpenAI)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    namespace: str | None = None  # Responses API: the namespace tool the function sits in

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"))

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as a JSON object (Anthropic `input`, Responses `tool_search_call.arguments`)."""
        if not isinstance(self.arguments, str):
            return dict(self.arguments)
        parsed = json.loads(self.arguments)
        if not isinstance(parsed, dict):
            raise ValueError(f"tool call {self.name!r}: arguments must be a JSON object for this provider")
        return parsed


ToolCallSpec: TypeAlias = ToolCall | tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str]


def _as_tool_call(spec: ToolCallSpec) -> ToolCall:
    if isinstance(spec, ToolCall):
        return spec
    if isinstance(spec, tuple) and len(spec) in (2, 3) and isinstance(spec[0], str):
        return ToolCall(spec[0], spec[1], spec[2] if len(spec) == 3 else None)  # type: ignore[misc]
    raise TypeError(f"a tool call is ToolCall(...) or (name, arguments[, id]), got {spec!r}")


@dataclass(frozen=True)
class Turn:
    """One scripted model reply, provider-neutral.

    `stop_reason` overrides the provider's finish reason, written in that provider's vocabulary
    (`"length"`, `"max_tokens"`, `"max_output_tokens"`); by default it follows from the tool calls.
    `usage` overrides the (input, output) token counts. `delay` sleeps before answering.
    """

    text: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    stop_reason: str | None = None
    usage: tuple[int, int] | None = None
    delay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(_as_tool_call(c) for c in self.tool_calls))

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return self.tool_calls  # type: ignore[return-value]


@dataclass(frozen=True)
class ErrorTurn:
    """An HTTP error answer with the provider's error JSON (type derived from the status unless given)."""

    status: int = 500
    message: str = "scripted error"
    type: str | None = None
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    param: str | None = None  # OpenAI: the request field the error is about


Reply: TypeAlias = Turn | ErrorTurn
Policy: TypeAlias = Callable[["Request"], Reply | str]
Script: TypeAlias = Reply | Policy | str


# --- recorded requests ------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """A tool result the client sent back, whatever the provider's shape."""

    call_id: str
    text: str
    is_error: bool | None = None
    references: tuple[str, ...] = ()  # tool names: Anthropic `tool_reference` blocks, Responses `tool_search_output`
    raw: Mapping[str, Any] = field(default_factory=dict)


class Request(Mapping[str, Any]):
    """One recorded request; reads like its JSON body, plus provider-neutral helpers."""

    def __init__(self, method: str, path: str, headers: Mapping[str, str], raw: bytes, body: Any) -> None:
        self.method = method
        self.path = path
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.raw = raw
        self.body: dict[str, Any] = body if isinstance(body, dict) else {}
        self.provider = _route(path) or (
            ANTHROPIC_MESSAGES if "anthropic-version" in self.headers else OPENAI_CHAT
        )
        self.reply: Reply | None = None  # what the server answered with
        self.status: int | None = None
        self.violation: Violation | None = None  # the API rule the request broke (answered with a 400)

    # Mapping over the body, so a policy can treat the request as the JSON it received.
    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.body)

    def __len__(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return f"Request({self.method} {self.path}, tools={self.tool_names})"

    @property
    def stream(self) -> bool:
        if self.provider == GEMINI:
            return self.path.split("?", 1)[0].endswith(":streamGenerateContent")
        return bool(self.body.get("stream"))

    @property
    def model(self) -> str:
        gemini = _GEMINI_ROUTE.match(self.path.split("?", 1)[0])
        if gemini:
            return gemini.group("model")
        return str(self.body.get("model") or "fake-model")

    # --- tools ---------------------------------------------------------------------------

    @property
    def tools(self) -> list[dict[str, Any]]:
        tools = [t for t in self.body.get("tools") or [] if isinstance(t, dict)]
        if self.provider == GEMINI:  # each Tool holds functionDeclarations: the functions are the tools
            return [d for t in tools for d in t.get("functionDeclarations") or [] if isinstance(d, dict)]
        return tools

    @property
    def tool_names(self) -> list[str]:
        """Top-level tool names in request order; an unnamed typed tool (Responses `tool_search`) by its type."""
        return [_tool_name(t) for t in self.tools]

    def _flat_tools(self) -> Iterator[tuple[dict[str, Any], str | None]]:
        for tool in self.tools:
            if tool.get("type") == "namespace":
                for inner in tool.get("tools") or []:
                    yield inner, tool.get("name")
            else:
                yield tool, None

    def tool(self, name: str) -> dict[str, Any] | None:
        """A tool definition by name, looking inside Responses namespaces too."""
        for tool, _ in self._flat_tools():
            if _tool_name(tool) == name:
                return tool
        return None

    def parameters(self, name: str) -> dict[str, Any] | None:
        """The JSON schema a tool was sent with, or None when it was sent without one (or not at all)."""
        tool = self.tool(name)
        if tool is None:
            return None
        fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
        schema = next((fn[k] for k in _SCHEMA_KEYS if k in fn), None)
        return schema if isinstance(schema, dict) else None

    @property
    def deferred_tool_names(self) -> list[str]:
        """Tools sent with `defer_loading: true` (Anthropic and Responses native tool search)."""
        return [_tool_name(t) for t, _ in self._flat_tools() if t.get("defer_loading")]

    @property
    def loaded_tool_names(self) -> list[str]:
        """Top-level tools the model sees up front (not deferred)."""
        return [_tool_name(t) for t in self.tools if not t.get("defer_loading")]

    @property
    def callable_tool_names(self) -> list[str]:
        """Tools the model can call now: loaded ones, plus those a native tool search delivered in the
        history (Responses `tool_search_output` items; deferred tools named by Anthropic `tool_reference`s)."""
        names = list(self.loaded_tool_names)
        deferred = set(self.deferred_tool_names)
        for item in self.messages:
            if item.get("type") == "tool_search_output":
                names += [_tool_name(t) for t in item.get("tools") or [] if isinstance(t, dict)]
            content = item.get("content")
            for block in content if isinstance(content, list) else []:
                inner = block.get("content") if isinstance(block, dict) else None
                for ref in inner if isinstance(inner, list) else []:
                    if (
                        isinstance(ref, dict)
                        and ref.get("type") == "tool_reference"
                        and ref.get("tool_name") in deferred
                    ):
                        names.append(ref["tool_name"])
        return list(dict.fromkeys(names))

    def find_tool(self, contains: str) -> str | None:
        """The first callable tool whose name contains `contains` (case-insensitive), as sent."""
        needle = contains.lower()
        for name in self.callable_tool_names:
            if needle in name.lower():
                return name
        return None

    # --- conversation --------------------------------------------------------------------

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Chat/Anthropic `messages`; Responses `input` as a list of items; Gemini `contents`."""
        if self.provider == GEMINI:
            return [c for c in self.body.get("contents") or [] if isinstance(c, dict)]
        if self.provider == OPENAI_RESPONSES:
            items = self.body.get("input")
            if isinstance(items, str):
                return [{"role": "user", "content": items}]
            return [i for i in items or [] if isinstance(i, dict)]
        return [m for m in self.body.get("messages") or [] if isinstance(m, dict)]

    @property
    def system(self) -> str:
        """The system prompt, whichever way the provider carries it."""
        if self.provider == ANTHROPIC_MESSAGES:
            return _text_of(self.body.get("system"))
        if self.provider == GEMINI:
            return _text_of((self.body.get("systemInstruction") or {}).get("parts"))
        if self.provider == OPENAI_RESPONSES:
            parts = [_text_of(self.body.get("instructions"))]
            parts += [_text_of(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer")]
            return "\n".join(p for p in parts if p)
        return "\n".join(_text_of(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer"))

    def user_texts(self) -> list[str]:
        """Text of every user message (tool results excluded)."""
        out = []
        for m in self.messages:
            if m.get("role", "user" if self.provider == GEMINI else None) != "user":  # Gemini's default role
                continue
            text = _text_of(m.get("content", m.get("parts")))
            if text:
                out.append(text)
        return out

    @property
    def user_text(self) -> str:
        """The first user message's text: a stable key for telling concurrent conversations apart."""
        texts = self.user_texts()
        return texts[0] if texts else ""

    @property
    def assistant_turns(self) -> int:
        """How many model turns the history already holds."""
        if self.provider == GEMINI:
            return sum(1 for m in self.messages if m.get("role") == "model")
        if self.provider != OPENAI_RESPONSES:
            return sum(1 for m in self.messages if m.get("role") == "assistant")
        turns, in_turn = 0, False
        for item in self.messages:
            is_model = item.get("role") == "assistant" or item.get("type") in _RESPONSES_MODEL_ITEMS
            if is_model and not in_turn:
                turns += 1
            in_turn = is_model
        return turns

    def history_calls(self) -> list[ToolCall]:
        """Every tool call the model made earlier in the conversation, with its call id."""
        calls: list[ToolCall] = []
        for m in self.messages:
            if self.provider == OPENAI_CHAT and m.get("role") == "assistant":
                for c in m.get("tool_calls") or []:
                    fn = c.get("function") or {}
                    calls.append(ToolCall(fn.get("name", ""), fn.get("arguments", ""), c.get("id")))
            elif self.provider == ANTHROPIC_MESSAGES and m.get("role") == "assistant":
                content = m.get("content")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        calls.append(ToolCall(block.get("name", ""), block.get("input") or {}, block.get("id")))
            elif self.provider == OPENAI_RESPONSES and m.get("type") == "function_call":
                calls.append(ToolCall(m.get("name", ""), m.get("arguments", ""), m.get("call_id"), m.get("namespace")))
            elif self.provider == GEMINI and m.get("role") == "model":
                fns = [p["functionCall"] for p in m.get("parts") or [] if isinstance(p, dict) and "functionCall" in p]
                for position, fn in enumerate(f for f in fns if isinstance(f, dict)):
                    # no id from the API: a call is known by its place in the turn, as its response is
                    call_id = fn.get("id") or f"{fn.get('name', '')}#{position}"
                    calls.append(ToolCall(fn.get("name", ""), fn.get("args") or {}, call_id))
            elif self.provider == OPENAI_RESPONSES and m.get("type") == "tool_search_call":
                args = m.get("arguments")
                calls.append(ToolCall("tool_search", args if isinstance(args, (dict, str)) else {}, m.get("call_id")))
        return calls

    def tool_results(self) -> list[ToolResult]:
        """The tool results at the end of the conversation (the answers to the model's last turn)."""
        msgs = self.messages
        out: list[ToolResult] = []
        if self.provider == OPENAI_CHAT:
            for m in reversed(msgs):
                if m.get("role") != "tool":
                    break
                out.append(ToolResult(str(m.get("tool_call_id")), _text_of(m.get("content")), None, (), m))
            return out[::-1]
        if self.provider == GEMINI:
            last = msgs[-1] if msgs else {}
            parts = last.get("parts") or [] if last.get("role", "user") == "user" else []
            fns = [p for p in parts if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
            for position, part in enumerate(fns):
                fn = part["functionResponse"]
                response = fn.get("response") if isinstance(fn.get("response"), dict) else {}
                value = response.get("error", response.get("output", response))
                text = value if isinstance(value, str) else json.dumps(value)
                call_id = fn.get("id") or f"{fn.get('name', '')}#{position}"
                out.append(ToolResult(str(call_id), text, "error" in response, (), part))
            return out
        if self.provider == ANTHROPIC_MESSAGES:
            last = msgs[-1] if msgs else {}
            content = last.get("content") if last.get("role") == "user" else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    refs = tuple(
                        b.get("tool_name", "")
                        for b in (inner if isinstance(inner, list) else [])
                        if isinstance(b, dict) and b.get("type") == "tool_reference"
                    )
                    out.append(
                        ToolResult(str(block.get("tool_use_id")), _text_of(inner), block.get("is_error"), refs, block)
                    )
            return out
        for item in reversed(msgs):
            kind = item.get("type")
            if kind == "function_call_output":
                out.append(ToolResult(str(item.get("call_id")), _text_of(item.get("output")), None, (), item))
            elif kind == "tool_search_output":
                refs = tuple(_tool_name(t) for t in item.get("tools") or [] if isinstance(t, dict))
                out.append(ToolResult(str(item.get("call_id")), "", None, refs, item))
            else:
                break
        return out[::-1]


_RESPONSES_MODEL_ITEMS = {"function_call", "tool_search_call", "reasoning"}
# where each format keeps a tool's JSON schema (Gemini: proto JSON takes either spelling)
_SCHEMA_KEYS = ("parameters", "input_schema", "parametersJsonSchema", "parameters_json_schema")


def _tool_name(tool: Mapping[str, Any]) -> str:
    fn = tool.get("function")
    if isinstance(fn, dict) and fn.get("name"):
        return str(fn["name"])
    return str(tool.get("name") or tool.get("type") or "")


def _text_of(content: Any) -> str:
    """Plain text of a message content in any provider's shape (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


# --- rendering --------------------------------------------------------------------------------


class _Ids:
    """Deterministic, provider-styled ids, unique per server."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self, prefix: str) -> str:
        with self._lock:
            n = next(self._counter)
        return f"{prefix}fake{n:06d}"


def _pieces(text: str, size: int = 12) -> list[str]:
    """Split text into streaming deltas (never empty: a single "" when text is empty)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text) or [""]


def _output_tokens(turn: Turn) -> int:
    if turn.usage:
        return turn.usage[1]
    size = len(turn.text or "") + sum(len(c.name) + len(c.arguments_json()) for c in turn.calls)
    return max(1, size // 4)


def _input_tokens(turn: Turn | None, request: Request) -> int:
    if turn is not None and turn.usage:
        return turn.usage[0]
    return max(1, len(request.raw) // 4)


# OpenAI Chat Completions ---------------------------------------------------------------------


def _chat_usage(inp: int, out: int) -> dict[str, Any]:
    return {
        "prompt_tokens": inp,
        "completion_tokens": out,
        "total_tokens": inp + out,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_call_ids(turn: Turn, ids: _Ids) -> list[str]:
    return [c.id or ids("call_") for c in turn.calls]


def render_chat(turn: Turn, request: Request, ids: _Ids) -> dict[str, Any]:
    call_ids = _chat_call_ids(turn, ids)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None, "annotations": []}
    if turn.calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
            for cid, c in zip(call_ids, turn.calls, strict=True)
        ]
    finish = turn.stop_reason or ("tool_calls" if turn.calls else "stop")
    return {
        "id": ids("chatcmpl-"),
        "object": "chat.completion",
        "created": _CREATED,
        "model": request.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": _chat_usage(_input_tokens(turn, request), _output_tokens(turn)),
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def render_chat_stream(turn: Turn, request: Request, ids: _Ids) -> Iterator[str]:
    completion_id = ids("chatcmpl-")
    include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
    call_ids = _chat_call_ids(turn, ids)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        data: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": _CREATED,
            "model": request.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            data["usage"] = None
        return _sse(data)

    yield chunk({"role": "assistant", "content": "" if turn.text is not None else None, "refusal": None})
    if turn.text:
        for piece in _words(turn.text):
            yield chunk({"content": piece})
    for index, (cid, call) in enumerate(zip(call_ids, turn.calls, strict=True)):
        head = {"index": index, "id": cid, "type": "function", "function": {"name": call.name, "arguments": ""}}
        yield chunk({"tool_calls": [head]})
        for piece in _pieces(call.arguments_json()):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, turn.stop_reason or ("tool_calls" if turn.calls else "stop"))
    if include_usage:
        yield _sse(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": _CREATED,
                "model": request.model,
                "service_tier": "default",
                "system_fingerprint": "fp_fake",
                "choices": [],
                "usage": _chat_usage(_input_tokens(turn, request), _output_tokens(turn)),
            }
        )
    yield "data: [DONE]\n\n"


# OpenAI Responses ----------------------------------------------------------------------------


def _responses_usage(inp: int, out: int) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


def _is_client_tool_search(call: ToolCall, request: Request) -> bool:
    """A call to the Responses API's typed `tool_search` tool (rendered as a `tool_search_call` item)."""
    return call.name == "tool_search" and any(
        t.get("type") == "tool_search" and not t.get("name") for t in request.tools
    )


def _responses_items(turn: Turn, request: Request, ids: _Ids) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.text is not None:
        items.append(
            {
                "id": ids("msg_"),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}],
            }
        )
    for call in turn.calls:
        call_id = call.id or ids("call_")
        if _is_client_tool_search(call, request):
            items.append(
                {
                    "id": ids("tsc_"),
                    "type": "tool_search_call",
                    "call_id": call_id,
                    "execution": "client",
                    "status": "completed",
                    "arguments": call.arguments_object(),
                }
            )
            continue
        item = {
            "id": ids("fc_"),
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": call.name,
            "arguments": call.arguments_json(),
        }
        if call.namespace:
            item["namespace"] = call.namespace
        items.append(item)
    return items


def _responses_envelope(
    response_id: str, request: Request, turn: Turn, output: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    body = request.body
    incomplete = turn.stop_reason if turn.stop_reason in ("max_output_tokens", "content_filter") else None
    if status == "completed" and incomplete:
        status = "incomplete"
    done = status != "in_progress"
    return {
        "id": response_id,
        "object": "response",
        "created_at": _CREATED,
        "completed_at": _CREATED if done else None,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete and done else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": request.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": request.tools,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": _responses_usage(_input_tokens(turn, request), _output_tokens(turn)) if done else None,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def render_responses(turn: Turn, request: Request, ids: _Ids) -> dict[str, Any]:
    return _responses_envelope(ids("resp_"), request, turn, _responses_items(turn, request, ids), "completed")


def render_responses_stream(turn: Turn, request: Request, ids: _Ids) -> Iterator[str]:
    response_id = ids("resp_")
    items = _responses_items(turn, request, ids)
    seq = itertools.count()

    def event(kind: str, **data: Any) -> str:
        return _sse({"type": kind, "sequence_number": next(seq), **data}, event=kind)

    pending = _responses_envelope(response_id, request, turn, [], "in_progress")
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event(
                "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=empty_part
            )
            for piece in _words(text):
                yield event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            yield event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            yield event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=item["content"][0],
            )
        elif item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _pieces(item["arguments"]):
                yield event(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece
                )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
            )
        else:
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress"})
        yield event("response.output_item.done", output_index=index, item=item)
    final = _responses_envelope(response_id, request, turn, items, "completed")
    yield event("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)


# Anthropic Messages --------------------------------------------------------------------------


def _anthropic_usage(inp: int, out: int) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "service_tier": "standard",
    }


def _anthropic_blocks(turn: Turn, ids: _Ids) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.text is not None:
        blocks.append({"type": "text", "text": turn.text})
    for call in turn.calls:
        blocks.append(
            {"type": "tool_use", "id": call.id or ids("toolu_"), "name": call.name, "input": call.arguments_object()}
        )
    return blocks


def render_anthropic(turn: Turn, request: Request, ids: _Ids) -> dict[str, Any]:
    return {
        "id": ids("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": _anthropic_blocks(turn, ids),
        "stop_reason": turn.stop_reason or ("tool_use" if turn.calls else "end_turn"),
        "stop_sequence": None,
        "usage": _anthropic_usage(_input_tokens(turn, request), _output_tokens(turn)),
    }


def render_anthropic_stream(turn: Turn, request: Request, ids: _Ids) -> Iterator[str]:
    blocks = _anthropic_blocks(turn, ids)
    start: dict[str, Any] = {
        "id": ids("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(_input_tokens(turn, request), 1),
    }
    yield _sse({"type": "message_start", "message": start}, event="message_start")
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _words(block["text"])]
        else:
            opening = {**block, "input": {}}
            partial = json.dumps(block["input"], separators=(",", ":"))
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": p} for p in _pieces(partial)]
        yield _sse(
            {"type": "content_block_start", "index": index, "content_block": opening}, event="content_block_start"
        )
        if index == 0:
            yield _sse({"type": "ping"}, event="ping")
        for delta in deltas:
            yield _sse({"type": "content_block_delta", "index": index, "delta": delta}, event="content_block_delta")
        yield _sse({"type": "content_block_stop", "index": index}, event="content_block_stop")
    stop = turn.stop_reason or ("tool_use" if turn.calls else "end_turn")
    yield _sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": _output_tokens(turn)},
        },
        event="message_delta",
    )
    yield _sse({"type": "message_stop"}, event="message_stop")


# Gemini generateContent ----------------------------------------------------------------------


def _gemini_usage(inp: int, out: int) -> dict[str, Any]:
    return {
        "promptTokenCount": inp,
        "candidatesTokenCount": out,
        "totalTokenCount": inp + out,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": inp}],
    }


def _gemini_parts(turn: Turn) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if turn.text:
        parts.append({"text": turn.text})
    for call in turn.calls:
        # The Gemini API sends no call id unless asked for one: a scripted id is passed on, else none.
        fn: dict[str, Any] = {"name": call.name, "args": call.arguments_object()}
        if call.id:
            fn["id"] = call.id
        parts.append({"functionCall": fn})
    return parts or [{"text": ""}]


def _gemini_finish(turn: Turn) -> str:
    return turn.stop_reason or "STOP"  # Gemini says STOP for function calls too


def render_gemini(turn: Turn, request: Request, ids: _Ids) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": _gemini_parts(turn)}, "finishReason": _gemini_finish(turn),
             "index": 0}
        ],
        "usageMetadata": _gemini_usage(_input_tokens(turn, request), _output_tokens(turn)),
        "modelVersion": request.model,
        "responseId": ids("resp_"),
    }


def render_gemini_stream(turn: Turn, request: Request, ids: _Ids) -> Iterator[str]:
    """Text in pieces, each function call whole in its own chunk (Gemini streams calls complete)."""
    response_id = ids("resp_")
    chunks: list[list[dict[str, Any]]] = [[{"text": piece}] for piece in _words(turn.text)] if turn.text else []
    chunks += [[part] for part in _gemini_parts(Turn(tool_calls=turn.calls))] if turn.calls else []
    chunks = chunks or [[{"text": ""}]]
    inp, out = _input_tokens(turn, request), _output_tokens(turn)
    for i, parts in enumerate(chunks):
        last = i == len(chunks) - 1
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if last:
            candidate["finishReason"] = _gemini_finish(turn)
        yield _sse({
            "candidates": [candidate],
            "usageMetadata": _gemini_usage(inp, out if last else 0),
            "modelVersion": request.model,
            "responseId": response_id,
        })


# Errors --------------------------------------------------------------------------------------

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    422: "invalid_request_error",
    429: "requests",
}
_OPENAI_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def render_error(provider: str, error: ErrorTurn, request_id: str) -> dict[str, Any]:
    if provider == GEMINI:  # google.rpc.Status, as the Gemini API answers errors
        status = error.type or _GEMINI_STATUS.get(error.status, "UNKNOWN")
        return {"error": {"code": error.status, "message": error.message, "status": status}}
    if provider == ANTHROPIC_MESSAGES:
        kind = error.type or _ANTHROPIC_ERROR_TYPES.get(error.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": error.message}, "request_id": request_id}
    kind = error.type or _OPENAI_ERROR_TYPES.get(error.status, "server_error")
    code = error.code if error.code is not None else _OPENAI_ERROR_CODES.get(error.status)
    return {"error": {"message": error.message, "type": kind, "param": error.param, "code": code}}


def _sse(data: Mapping[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"


_RENDER = {
    OPENAI_CHAT: (render_chat, render_chat_stream),
    OPENAI_RESPONSES: (render_responses, render_responses_stream),
    ANTHROPIC_MESSAGES: (render_anthropic, render_anthropic_stream),
    GEMINI: (render_gemini, render_gemini_stream),
}


# --- the server -------------------------------------------------------------------------------


def check_request(provider: str, path: str, body: Mapping[str, Any]) -> None:
    """Raise `Violation` when the real provider would refuse this request (see provider_rules)."""
    if provider == OPENAI_CHAT:
        check_chat(body)
    elif provider == OPENAI_RESPONSES:
        check_responses(body)
    elif provider == GEMINI:
        check_gemini(body)
    else:
        check_anthropic(body, count_tokens=path.endswith("/count_tokens"))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked SSE, as the real APIs
    timeout = 30  # an idle keep-alive connection never pins a thread for long
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, False)

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    def do_GET(self) -> None:
        self.server.owner._handle(self)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() closes live connections itself
    owner: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # stop() closes keep-alive connections under their handler threads; what the handler then
        # raises (a closed socket or file) is expected. Anything else still prints.
        if isinstance(sys.exc_info()[1], OSError | ValueError):
            return
        super().handle_error(request, client_address)


class FakeLLMServer:
    """Scripted OpenAI/Anthropic-compatible server on 127.0.0.1, in a background thread.

    `turns` are served in order (a policy in the queue is called once, for one request);
    `policy` answers every request once the queue is empty. With neither left, the request gets
    an HTTP 500 and the miss is recorded in `errors` (raised again when the `with` block exits).
    """

    def __init__(
        self, *turns: Script, policy: Policy | None = None, host: str = "127.0.0.1", strict: bool = True
    ) -> None:
        self._queue: deque[Script] = deque(turns)
        self.policy = policy
        self.strict = strict
        self.violations: list[Violation] = []
        self._host = host
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self.errors: list[BaseException] = []
        self._ids = _Ids()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self._host, 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        with self._lock:
            live = list(self._connections)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()
        if exc_type is None and self.errors:
            raise AssertionError(f"fake LLM server: {self.errors[0]}") from self.errors[0]
        if exc_type is None and self.violations:
            # The client may have absorbed the 400; a request the real API refuses still fails the test.
            first = self.violations[0]
            raise AssertionError(f"a request the real API refuses was sent ({first.rule}): {first}") from first

    def take_violations(self) -> list[Violation]:
        """The rule violations refused so far, cleared (a test that expects a refusal takes it)."""
        with self._lock:
            taken, self.violations = self.violations, []
        return taken

    def _track(self, conn: socket.socket, live: bool) -> None:
        with self._lock:
            (self._connections.add if live else self._connections.discard)(conn)

    # --- addresses and clients ------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake LLM server is not running; use start() or a with block")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def _client_options(self, options: dict[str, Any], base_url: str) -> dict[str, Any]:
        return {"api_key": "test-key", "max_retries": 0, "timeout": 30.0, "base_url": base_url, **options}

    def openai(self, **options: Any) -> Any:
        import openai

        return openai.OpenAI(**self._client_options(options, self.openai_base_url))

    def async_openai(self, **options: Any) -> Any:
        import openai

        return openai.AsyncOpenAI(**self._client_options(options, self.openai_base_url))

    @property
    def gemini_base_url(self) -> str:
        return self.url

    def _gemini_options(self, options: dict[str, Any]) -> dict[str, Any]:
        from google.genai import types

        http = types.HttpOptions(
            base_url=self.gemini_base_url, api_version="v1beta", timeout=30_000,
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return {"api_key": "test-key", "http_options": http, **options}

    def gemini(self, **options: Any) -> Any:
        """A `google.genai.Client` on this server (its `.aio` is the async client)."""
        from google import genai

        return genai.Client(**self._gemini_options(options))

    def anthropic(self, **options: Any) -> Any:
        import anthropic

        return anthropic.Anthropic(**self._client_options(options, self.anthropic_base_url))

    def async_anthropic(self, **options: Any) -> Any:
        import anthropic

        return anthropic.AsyncAnthropic(**self._client_options(options, self.anthropic_base_url))

    # --- script and records ---------------------------------------------------------------

    def enqueue(self, *turns: Script) -> None:
        with self._lock:
            self._queue.extend(turns)

    @property
    def pending(self) -> int:
        """Scripted turns not yet served."""
        with self._lock:
            return len(self._queue)

    def assert_consumed(self) -> None:
        with self._lock:
            left = list(self._queue)
        assert not left, f"{len(left)} scripted turn(s) never requested: {left!r}"

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, provider: str) -> list[Request]:
        return [r for r in self.requests if r.provider == provider]

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self.errors.clear()
            self.violations.clear()

    # --- request handling -----------------------------------------------------------------

    def _next_script(self) -> Script | None:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.policy

    def _resolve(self, request: Request) -> Reply:
        script = self._next_script()
        if script is None:
            raise LookupError(f"no scripted turn left for request #{len(self._requests)} to {request.path}")
        if callable(script) and not isinstance(script, (Turn, ErrorTurn)):
            script = script(request)
        if isinstance(script, str):
            script = Turn(text=script)
        if not isinstance(script, (Turn, ErrorTurn)):
            raise TypeError(f"a policy must return Turn, ErrorTurn or str, got {script!r}")
        return script

    def _handle(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0]
        raw = _read_body(handler)
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            body = None
            parse_error: str | None = f"request body is not valid JSON: {exc}"
        else:
            parse_error = None
        request = Request(handler.command, path, dict(handler.headers.items()), raw, body)
        with self._lock:
            self._requests.append(request)
        provider = request.provider
        request_id = self._ids("req_")
        id_header = "request-id" if provider == ANTHROPIC_MESSAGES else "x-request-id"

        def fail(status: int, message: str, param: str | None = None) -> None:
            request.status = status
            error = ErrorTurn(status, message, param=param)
            _send_json(handler, status, render_error(provider, error, request_id), {id_header: request_id})

        if handler.command != "POST" or _route(path) is None:
            fail(404, f"fake LLM server: no route for {handler.command} {path}")
            return
        if parse_error is not None or not isinstance(body, dict):
            fail(400, parse_error or "request body must be a JSON object")
            return
        if self.strict:
            try:
                check_request(provider, path, body)
            except Violation as violation:
                request.violation = violation
                with self._lock:
                    self.violations.append(violation)
                fail(400, violation.message, violation.param)
                return
        if path == "/v1/messages/count_tokens":
            request.status = 200
            _send_json(handler, 200, {"input_tokens": _input_tokens(None, request)}, {id_header: request_id})
            return
        try:
            reply = self._resolve(request)
        except Exception as exc:  # a broken policy must fail the test, not hang the client
            self.errors.append(exc)
            fail(500, f"fake LLM server: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            return
        request.reply = reply
        if reply.delay:
            time.sleep(reply.delay)
        if isinstance(reply, ErrorTurn):
            request.status = reply.status
            headers = {id_header: request_id, **reply.headers}
            _send_json(handler, reply.status, render_error(provider, reply, request_id), headers)
            return
        render, render_stream = _RENDER[provider]
        try:
            if request.stream:
                events = list(render_stream(reply, request, self._ids))
            else:
                payload = render(reply, request, self._ids)
        except Exception as exc:
            self.errors.append(exc)
            fail(500, f"fake LLM server cannot render {reply!r}: {exc}")
            return
        request.status = 200
        if request.stream:
            _send_sse(handler, events, {id_header: request_id})
        else:
            _send_json(handler, 200, payload, {id_header: request_id})


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    length = handler.headers.get("Content-Length")
    if length is not None:
        return handler.rfile.read(int(length))
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        data = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return bytes(data)
            data += handler.rfile.read(size)
            handler.rfile.readline()
    return b""


def _send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: Mapping[str, str]) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()


def _send_sse(handler: BaseHTTPRequestHandler, events: Sequence[str], headers: Mapping[str, str]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.end_headers()
    for event in events:
        data = event.encode()
        handler.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()
