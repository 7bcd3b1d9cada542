"""A deterministic ChatModel for tests and benchmarks: a list of turns, or a policy callable.

    model = ScriptedModel([
        reply(search("weather")),                       # turn 1: search
        reply(call("get_weather", city="Paris")),        # turn 2: call what it found
        "It is sunny in Paris.",                        # turn 3: answer
    ])

    model = ScriptedModel(policy=search_and_call())      # search with the task text, call the top hit

Requests are rendered exactly as a real provider would (`format`), so token accounting over a
scripted run measures real payloads.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._errors import InvalidArgumentError, UnknownFormatError
from ..tools import Tool
from ._base import ChatRequest, EventHandler, Message, ModelTurn, ProviderError, StreamEvent, ToolCall, Usage
from .drive import adeliver_event, adrive, deliver_event, drive, replay
from .registry import chat_format_names, request_payload

__all__ = [
    "ScriptedModel",
    "ScriptedTurn",
    "Policy",
    "call",
    "search",
    "reply",
    "search_and_call",
    "example_arguments",
]

ScriptedTurn = ModelTurn | Message | str | ToolCall | Sequence[ToolCall]
Policy = Callable[[ChatRequest], ScriptedTurn]


def call(name: str, arguments: Mapping[str, Any] | None = None, *, id: str = "", **kwargs: Any) -> ToolCall:
    """A function call; arguments as a mapping or keywords. An empty id is filled in by the model."""
    return ToolCall(id=id, name=name, arguments={**(arguments or {}), **kwargs})


def search(
    query: str,
    max_results: int | None = None,
    *,
    namespace: str | None = None,
    id: str = "",
    tool: str = "tool_search",
    native: bool = False,
) -> ToolCall:
    """A tool_search call (`native=True`: as a provider-native search call)."""
    args: dict[str, Any] = {"query": query}
    if max_results is not None:
        args["max_results"] = max_results
    if namespace is not None:
        args["namespace"] = namespace
    return ToolCall(id=id, name=tool, arguments=args, kind="tool_search" if native else "function")


def reply(*calls: ToolCall, text: str = "", usage: Usage | None = None) -> ModelTurn:
    """An assistant turn with optional text and tool calls."""
    return ModelTurn(Message("assistant", text, tuple(calls)), usage, "tool_calls" if calls else "stop")


def example_arguments(schema: Mapping[str, Any], *, include_optional: bool = False) -> dict[str, Any]:
    """Arguments that satisfy a tool's schema (required parameters; enums, defaults and bounds honoured)."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    out: dict[str, Any] = {}
    for name, prop in properties.items():
        if name in required or include_optional:
            out[name] = _example_value(prop if isinstance(prop, Mapping) else {})
    return out


def _example_value(prop: Mapping[str, Any]) -> Any:
    if "const" in prop:
        return prop["const"]
    if prop.get("enum"):
        return prop["enum"][0]
    if "default" in prop:
        return prop["default"]
    for key in ("anyOf", "oneOf"):
        options = [o for o in prop.get(key) or () if isinstance(o, Mapping) and o.get("type") != "null"]
        if options:
            return _example_value(options[0])
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return int(prop.get("minimum", 1))
    if kind == "number":
        return float(prop.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "array":
        items = prop.get("items")
        n = int(prop.get("minItems", 0))
        return [_example_value(items if isinstance(items, Mapping) else {}) for _ in range(n)]
    if kind == "object":
        return example_arguments(prop)
    if kind == "null":
        return None
    text = "example"
    min_len = int(prop.get("minLength", 0))
    return text + "x" * max(0, min_len - len(text))


def _last_user_text(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.content
    return ""


def search_and_call(
    steps: Sequence[str] | None = None,
    *,
    max_results: int = 5,
    expected: Sequence[str | None] | None = None,
    arguments: Callable[[Tool], Mapping[str, Any]] | None = None,
    answer: str = "Done.",
    search_tool: str = "tool_search",
    native: bool = False,
) -> Policy:
    """A policy that, for each step, searches with the step's text and calls the tool it found.

    `steps` are the sub-task queries (default: one step, the last user message). For step i it
    calls `expected[i]` when that tool is among the step's hits, else the top hit; `arguments`
    builds the call's arguments (default: `example_arguments` of the tool's schema). After the
    last step it answers `answer`. The policy reads only the request, so one policy object can
    drive many runs.
    """

    def policy(request: ChatRequest) -> ScriptedTurn:
        queries = list(steps) if steps is not None else [_last_user_text(request)]
        searches = [m for m in request.messages if m.role == "tool" and m.name == search_tool]
        step = len(searches)
        last = next((m for m in reversed(request.messages) if m.role == "assistant"), None)
        if searches and last is not None and last.tool_calls and all(c.name == search_tool for c in last.tool_calls):
            # the previous turn searched: call what it found
            visible = {t.name for t in request.tools}
            candidates = [t for t in searches[-1].tool_references if t.name in visible]
            if candidates:
                want = expected[step - 1] if expected is not None and step - 1 < len(expected) else None
                chosen = next((t for t in candidates if t.name == want), candidates[0])
                args = dict(arguments(chosen)) if arguments else example_arguments(chosen.input_schema)
                return [call(chosen.name, args)]
        if step < len(queries):
            return [search(queries[step], max_results, tool=search_tool, native=native)]
        return answer

    return policy


def _stream_events(turn: ModelTurn) -> list[StreamEvent]:
    words = re.findall(r"\S+\s*|\s+", turn.message.content)
    events = [StreamEvent.text_delta(w) for w in words]
    return events + [StreamEvent.tool_call_start(c.id, c.name, c.kind) for c in turn.message.tool_calls]


class ScriptedModel:
    """A ChatModel that plays back `turns` in order, or asks `policy(request)` for each turn.

    A turn may be a ModelTurn, an assistant Message, a string (a final answer), a ToolCall or a
    list of ToolCalls, or a callable taking the ChatRequest and returning one of those. Calls
    without an id get `call_<turn>_<i>`. Every request is kept in `requests` (and its rendered
    provider payload in `payloads`). `format` picks the payload rendering: any chat format of the
    provider registry ("openai_chat", "openai_responses", "anthropic").
    """

    def __init__(
        self,
        turns: Iterable[ScriptedTurn | Policy] | None = None,
        *,
        policy: Policy | None = None,
        format: str = "openai_chat",
        model: str = "scripted",
        usage: Callable[[ChatRequest, dict[str, Any]], Usage | None] | None = None,
        priced_as: str | None = None,
    ) -> None:
        if (turns is None) == (policy is None):
            raise InvalidArgumentError(
                "give either turns or a policy:"
                " turns= lists the replies, policy= answers each request"
            )
        if format not in chat_format_names():
            raise UnknownFormatError(f"format must be one of {', '.join(chat_format_names())}; got {format!r}")
        self.format = format
        self.model = model
        # the model whose prices a run's requests are counted at: None is the format's provider's default model, with
        # no warning (toolsearch.cost warns of a model it has no price for, and a scripted one never has)
        self.priced_as = priced_as
        self._turns = list(turns) if turns is not None else None
        self._policy = policy
        self._usage = usage
        self._lock = threading.Lock()
        self.requests: list[ChatRequest] = []
        self.payloads: list[dict[str, Any]] = []

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        return request_payload(self.format, request, self.model)

    @property
    def remaining(self) -> int:
        """Turns not yet played (0 for a policy model)."""
        return 0 if self._turns is None else len(self._turns) - len(self.requests)

    def complete(self, request: ChatRequest) -> ModelTurn:
        payload = self.payload(request)
        with self._lock:
            number = len(self.requests)
            self.requests.append(request)
            self.payloads.append(payload)
        if self._turns is not None:
            if number >= len(self._turns):
                raise ProviderError(
                    f"the scripted model has only {len(self._turns)} turn(s); request {number + 1} has none"
                )
            spec: Any = self._turns[number]
        else:
            assert self._policy is not None
            spec = self._policy
        if callable(spec) and not isinstance(spec, (ToolCall, Message, ModelTurn)):
            spec = spec(request)
        turn = self._to_turn(spec, number + 1)
        if turn.usage is None and self._usage is not None:
            turn = ModelTurn(turn.message, self._usage(request, payload), turn.stop_reason, turn.raw)
        return turn

    async def acomplete(self, request: ChatRequest) -> ModelTurn:
        await asyncio.sleep(0)  # yield like a real client would, so concurrent runs interleave
        return self.complete(request)

    def stream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn:
        """`complete`, played back as a stream: the text word by word, then each call's start."""
        turn = self.complete(request)
        return drive(replay(turn, _stream_events(turn)), lambda event: deliver_event(on_event, event))

    async def astream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn:
        turn = await self.acomplete(request)
        return await adrive(replay(turn, _stream_events(turn)), lambda event: adeliver_event(on_event, event))

    def _to_turn(self, spec: Any, number: int) -> ModelTurn:
        if isinstance(spec, ModelTurn):
            turn = spec
        elif isinstance(spec, Message):
            turn = ModelTurn(spec, None, "tool_calls" if spec.tool_calls else "stop")
        elif isinstance(spec, str):
            turn = reply(text=spec)
        elif isinstance(spec, ToolCall):
            turn = reply(spec)
        elif isinstance(spec, Sequence) and all(isinstance(c, ToolCall) for c in spec):
            turn = reply(*spec)
        else:
            raise ProviderError(f"scripted turn {number} is a {type(spec).__name__}; expected a turn, text or calls")
        message = turn.message
        if any(not c.id for c in message.tool_calls):
            calls = tuple(
                c if c.id else ToolCall(f"call_{number}_{i}", c.name, c.arguments, c.arguments_error, c.kind)
                for i, c in enumerate(message.tool_calls, 1)
            )
            message = Message(
                "assistant", message.content, calls, provider=message.provider, provider_items=message.provider_items
            )
            turn = ModelTurn(message, turn.usage, turn.stop_reason, turn.raw)
        return turn

    def __repr__(self) -> str:
        kind = "policy" if self._policy is not None else f"{len(self._turns or [])} turns"
        return f"ScriptedModel({kind}, format={self.format!r})"
