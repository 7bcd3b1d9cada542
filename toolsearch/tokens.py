"""Exact, offline token counts (o200k_base by default) for text, tool definitions and request payloads.

How a request is counted (`count_request_tokens`): a provider payload is split into three parts
and each is serialised the same way every time, then tokenised exactly with the named encoding:

- **system**: the system text (`system` for Anthropic, `instructions` for OpenAI Responses, and the
  content of `system` / `developer` messages for Chat Completions) — the text itself;
- **messages**: every other message or input item — each as compact JSON (`ensure_ascii=False`,
  separators `,` and `:`), so tool calls, tool results and content blocks all count;
- **tools**: each tool definition as compact JSON, exactly as it would be sent.

A loop sends the same definitions on every request, so each definition is serialised and
tokenised once per process (`definition_json`, `definition_tokens`): the cache is keyed by the
definition's content (its `marshal` bytes, which fix every key, value, type and order the JSON
depends on), so a definition changed in place is rendered anew, and the figures are those of
rendering every request from scratch.

Anthropic's `cache_control` markers are left out of every count: they say where the prompt cache
ends, they are not prompt text (`without_cache_markers`).

The figures are exact for that serialisation, in the named encoding: exact for OpenAI's formats;
for Anthropic and Gemini requests, whose providers count with tokenizers of their own, they are
estimates, fair for comparing requests with each other (`count_wording` says which, in one place
for every report). They are not the provider's bill: providers render tools and messages into
their own internal template (adding tokens per message and per tool), and Anthropic adds a
tool-use system prompt to every request with tools (346 tokens under `tool_choice` auto, per
`toolsearch/data/prices.json`), which these counts leave out and `toolsearch.cost` prices. Use
the provider-reported `usage` (kept next to these counts by the loop) for billing, and these
counts to compare requests with each other (baseline vs tool search) reproducibly.
"""

from __future__ import annotations

import json
import marshal
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from ._errors import ToolSearchError
from .tools import Tool

DEFAULT_ENCODING = "o200k_base"
ENCODINGS = ("o200k_base", "cl100k_base")

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "RequestTokens",
    "count_tokens",
    "count_json_tokens",
    "tool_tokens",
    "count_request_tokens",
    "request_tokens",
    "compact_json",
    "content_key",
    "count_wording",
    "definition_json",
    "without_cache_markers",
]

_lock = threading.Lock()
_encoders: dict[str, Any] = {}


def _encoder(encoding: str) -> Any:
    enc = _encoders.get(encoding)
    if enc is not None:
        return enc
    if encoding not in ENCODINGS:
        raise ToolSearchError(f"unknown encoding {encoding!r}; choose one of: {', '.join(ENCODINGS)}")
    with _lock:
        enc = _encoders.get(encoding)
        if enc is None:
            import bpe_openai  # the tokenizer tables ship inside the package: no download

            enc = bpe_openai.get_encoding(encoding)
            _encoders[encoding] = enc
    return enc


def compact_json(value: Any) -> str:
    """The one JSON serialisation every count uses."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# The tokenizer refuses one input of 1,000,000 characters or more, or of more than 200,000 tokens: a longer
# text is encoded in pieces of at most this many characters (at most 4 tokens a character: 160,000 tokens).
_PIECE_CHARS = 40_000
# Where a piece may end, best first, each searched for its last match in the piece's second half: before a
# space that follows a non-space (the tokenizer splits there itself, so the count stays exact), after a line
# break that a non-space follows, after any whitespace. Failing all three (one 40,000-character word) a piece
# ends at its limit; each cut but the first kind can move the count by about one token.
_CUTS = tuple(re.compile(pattern, re.DOTALL) for pattern in (r".*\S(?= )", r".*[\r\n](?=\S)", r".*\s"))


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Exact number of tokens of `text`; special-token strings count as ordinary text.

    Any length is counted: a text of more than `_PIECE_CHARS` characters (a huge tool result or a
    pasted document) is encoded in pieces cut at whitespace, where the tokenizer splits anyway, so
    the count stays exact or within about a token per piece.
    """
    if not text:
        return 0
    encoder = _encoder(encoding)
    if len(text) <= _PIECE_CHARS:
        return len(encoder.encode_ordinary(text))
    return sum(len(encoder.encode_ordinary(piece)) for piece in _pieces(text))


def _pieces(text: str, size: int = _PIECE_CHARS) -> Iterator[str]:
    """`text` in consecutive pieces of at most `size` characters, each ending where the tokenizer
    splits anyway when the piece has such a place in its second half (see `_CUTS`)."""
    start = 0
    while len(text) - start > size:
        limit = start + size
        floor = start + size // 2
        end = limit
        for cut in _CUTS:
            found = cut.match(text, floor, limit)
            if found is not None and found.end() > floor:
                end = found.end()
                break
        yield text[start:end]
        start = end
    yield text[start:]


def count_json_tokens(value: Any, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens of a JSON-able value in the compact serialisation."""
    return count_tokens(compact_json(value), encoding)


_CACHE_SIZE = 65_536
_rendered: dict[bytes, str] = {}  # content key -> compact JSON, oldest first


def content_key(value: Any) -> bytes | None:
    """Bytes that determine `compact_json(value)`: equal keys render to identical JSON.

    `marshal` (version 2: no back-references, so the bytes depend on the value alone) writes every
    dict key in order and keeps str, int, float, bool, None, list and tuple apart, which is all
    the JSON depends on; it is about five times faster than rendering the JSON. None for a value
    marshal cannot write (a subclass, a model object): such a value is rendered every time.
    """
    try:
        return marshal.dumps(value, 2)
    except ValueError:
        return None


_T = TypeVar("_T")


def by_content(cache: dict[bytes, _T], value: Any, make: Callable[[Any], _T]) -> _T:
    """`make(value)`, kept in `cache` under the value's `content_key` (made anew when it has none).

    At most `_CACHE_SIZE` entries, the oldest dropped first: a catalog larger than that still works.
    """
    key = content_key(value)
    if key is None:
        return make(value)
    found = cache.get(key)
    if found is None:
        found = make(value)
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)), None)
        cache[key] = found
    return found


def definition_json(definition: Any) -> str:
    """`compact_json` of a tool definition, rendered once per content (see `content_key`)."""
    return by_content(_rendered, definition, compact_json)


@lru_cache(maxsize=_CACHE_SIZE)
def definition_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """`count_tokens` for a tool definition's text, cached: a loop sends the same ones on every request."""
    return count_tokens(text, encoding)


def tool_tokens(tool: Tool, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens of one tool's definition (Chat Completions function shape), cached per definition."""
    return definition_tokens(definition_json(tool.to_openai()), encoding)


@dataclass(frozen=True, slots=True)
class RequestTokens:
    """Tokens of one request, by part (see the module docstring for the method)."""

    system: int
    messages: int
    tools: int
    encoding: str = DEFAULT_ENCODING

    @property
    def total(self) -> int:
        return self.system + self.messages + self.tools

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "messages": self.messages,
            "tools": self.tools,
            "total": self.total,
            "encoding": self.encoding,
        }


def text_of(content: Any) -> str:
    """A message content as text: a string as is, text blocks joined, anything else as compact JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, Mapping):
        parts = []
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(compact_json(block))
        return "\n".join(parts)
    return compact_json(content)


def payload_parts(payload: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    """A request's system texts (`system` / `instructions`) and its message items as plain data.

    Items are Chat / Messages `messages`, the Responses `input` (a string is one user message) or
    Gemini `contents` (its system text is `config.system_instruction`); system-role items are left
    among them for the caller to place.
    """
    system = [text_of(payload[key]) for key in ("system", "instructions") if payload.get(key)]
    config = payload.get("config")
    if isinstance(config, Mapping) and config.get("system_instruction"):
        system.append(text_of(config["system_instruction"]))
    items = payload.get("messages")
    if items is None:
        items = payload.get("input", payload.get("contents", []))
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    return system, [item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else item for item in items]


def payload_tools(payload: Mapping[str, Any]) -> list[Any]:
    """A request's tool definitions: `tools`, or Gemini's `config.tools[*].function_declarations`."""
    config = payload.get("config")
    if "tools" not in payload and isinstance(config, Mapping):
        return [d for tool in config.get("tools") or () for d in _plain_dict(tool).get("function_declarations") or ()]
    return list(payload.get("tools") or ())


def _plain_dict(value: Any) -> Mapping[str, Any]:
    value = value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value
    return value if isinstance(value, Mapping) else {}


def without_cache_markers(item: Any) -> Any:
    """A tool definition or message without its `cache_control` markers (on it or its content blocks).

    A content of one marked text block comes back as the string it stands for (how the Anthropic
    provider sends an unmarked plain turn), so a turn counts and matches the same marked or not.
    """
    if not isinstance(item, Mapping):
        return item
    content = item.get("content")
    marked_blocks = isinstance(content, list) and any(isinstance(b, Mapping) and "cache_control" in b for b in content)
    if "cache_control" not in item and not marked_blocks:
        return item  # the common case: no copy
    out = {k: v for k, v in item.items() if k != "cache_control"}
    if marked_blocks and isinstance(content, list):
        blocks = [
            {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, Mapping) else b for b in content
        ]
        only = blocks[0] if len(blocks) == 1 else None
        # a string content is one text block to the API: a turn marked as a block is the same turn as a string
        plain = isinstance(only, dict) and only.keys() == {"type", "text"} and only["type"] == "text"
        out["content"] = only["text"] if plain and only is not None else blocks
    return out


def request_tokens(payload: Mapping[str, Any], encoding: str = DEFAULT_ENCODING) -> RequestTokens:
    """Count a provider request payload by part: system, messages (or Responses `input`), tools.

    Understands Chat Completions (`messages` with system/developer roles), Responses
    (`instructions` + `input`, a string or a list of items), Anthropic Messages (`system` +
    `messages`) and Gemini (`config.system_instruction` + `contents`). Other keys (model,
    temperature, ...) are not counted.
    """
    system_parts, items = payload_parts(payload)
    message_tokens = 0
    for data in items:
        if isinstance(data, Mapping) and data.get("role") in ("system", "developer"):
            system_parts.append(text_of(data.get("content", "")))
            continue
        message_tokens += count_json_tokens(without_cache_markers(data), encoding)
    system_tokens = sum(count_tokens(part, encoding) for part in system_parts)
    tools = payload_tools(payload)
    tools_tokens = sum(definition_tokens(definition_json(without_cache_markers(t)), encoding) for t in tools)
    return RequestTokens(system_tokens, message_tokens, tools_tokens, encoding)


def count_wording(
    fmt: str, encoding: str = DEFAULT_ENCODING, *, noun: str = "counts", compared: str = "the runs"
) -> str:
    """What counts of `fmt` requests in `encoding` are, for a report: exact for OpenAI's formats; for any
    other provider's, whose tokenizer is its own, a fair comparison of `compared` and an estimate of its counts.

    The one wording the demo and the token benchmark use: `exact o200k_base counts`, or `o200k_base counts
    (OpenAI's tokenizer, not Anthropic's own: a fair comparison of the runs, and an estimate of Anthropic's)`.
    """
    if fmt.startswith("openai"):
        return f"exact {encoding} {noun}"
    from .providers.registry import get_format  # a plug-in format names its provider in its label

    try:
        provider = str(get_format(fmt).label).split()[0]
    except ToolSearchError:
        provider = fmt
    return (
        f"{encoding} {noun} (OpenAI's tokenizer, not {provider}'s own: a fair comparison of {compared}, "
        f"and an estimate of {provider}'s)"
    )


def count_request_tokens(payload: Mapping[str, Any], encoding: str = DEFAULT_ENCODING) -> int:
    """Total tokens of a request payload's system + messages + tools (see `request_tokens`)."""
    return request_tokens(payload, encoding).total
