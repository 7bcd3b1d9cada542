"""What a conversation's requests cost under the providers' prompt caching: fresh, cache-write and cache-read tokens.

    cache = PromptCache.for_format("anthropic")          # one per conversation
    use = cache.request(payload)                          # each request, in order
    use.fresh, use.cache_write, use.cache_read, use.price_usd

A request is split into blocks in the provider's render order (tools, then the system text, then
each message), each counted exactly like `toolsearch.tokens` counts it. The tokens served from
cache are the longest prefix of blocks this request shares with an earlier request of the same
conversation that the provider would have cached, within the cache lifetime:

- **Anthropic**: entries are written at cache breakpoints only, and only for prefixes of at least
  the model's minimum cacheable length; a breakpoint finds an entry at most `lookback_blocks`
  blocks before it. The breakpoints are the blocks a request marks with `cache_control` (a
  top-level `cache_control` marks the last block); toolsearch's Anthropic provider marks the end of
  the tools, the end of the system text and the last block (three of the four allowed), the
  price table's default `breakpoints`. A request without markers caches nothing. Tokens up to the entry found are
  read, tokens from there to the last cacheable breakpoint are written, the rest are fresh. A
  tool sent with `defer_loading` is not part of the prompt; a `tool_reference` block costs the
  definition it expands to, where it stands in the messages.
- **OpenAI**: automatic; any prefix of an earlier prompt of at least 1,024 tokens is reused, in
  128-token steps; writes cost nothing extra unless the price table gives a `cache_write` rate.
- **Gemini**: implicit caching, automatic in the same way (a shared prefix of at least the model's
  minimum, 1,024 tokens for 2.5 Flash and 2,048 for 2.5 Pro, is read at the cached rate; writes
  cost nothing). Explicit `cachedContents` (paid storage) is not modelled.

Matching is per block (a tool definition, the system text, one message), not per token: a block
that differs anywhere counts as differing from its start. `cache_control` markers are not content:
a block matches an earlier one with or without them. Prices (USD per million tokens) and the
rules come from `toolsearch/data/prices.json`, which cites the providers' pages; point
`TOOLSEARCH_PRICES` (or `load_prices(path)`) at a file of the same shape to override them. The
prices cover input tokens only: both arms of a comparison produce about the same output.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ._errors import PriceTableError, UnknownModelPriceWarning
from .tokens import (
    DEFAULT_ENCODING,
    by_content,
    compact_json,
    count_tokens,
    definition_json,
    definition_tokens,
    payload_parts,
    payload_tools,
    text_of,
    without_cache_markers,
)

__all__ = [
    "Block",
    "CacheRules",
    "CacheUse",
    "ModelPrice",
    "PriceTable",
    "PromptCache",
    "load_prices",
    "request_blocks",
]

Part = Literal["tools", "system", "messages"]
_FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model's input prices in USD per million tokens (`cache_write` None: writes cost the input rate).

    `model` is the model asked about; `priced_as` the price table's entry whose figures these are:
    the same model, the entry of a dated snapshot (`gpt-5-mini-2025-08-07` is `gpt-5-mini`), or, for
    a model the table does not know, the provider's default model (`PriceTable.model_for` warns).
    """

    model: str
    provider: str
    input: float
    cache_read: float
    cache_write: float | None = None
    output: float | None = None
    min_cacheable_tokens: int | None = None
    source: str = ""
    priced_as: str = ""

    def __post_init__(self) -> None:
        if not self.priced_as:
            object.__setattr__(self, "priced_as", self.model)


@dataclass(frozen=True, slots=True)
class CacheRules:
    """How a provider caches prompt prefixes (see the module docstring)."""

    provider: str
    min_cacheable_tokens: int
    increment_tokens: int = 1
    lifetime_seconds: float = 300.0
    breakpoints: tuple[str, ...] | None = None  # None: every prefix is cached automatically
    lookback_blocks: int | None = None
    deferred_tools_in_prefix: bool = True


@dataclass(frozen=True, slots=True)
class CacheUse:
    """Input tokens of one request (or a sum of requests) by how they are billed, and their price."""

    fresh: int = 0
    cache_write: int = 0
    cache_read: int = 0
    price_usd: float = 0.0
    uncached_price_usd: float = 0.0  # the same tokens with caching off

    @property
    def total(self) -> int:
        return self.fresh + self.cache_write + self.cache_read

    def __add__(self, other: CacheUse) -> CacheUse:
        return CacheUse(
            self.fresh + other.fresh,
            self.cache_write + other.cache_write,
            self.cache_read + other.cache_read,
            self.price_usd + other.price_usd,
            self.uncached_price_usd + other.uncached_price_usd,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fresh": self.fresh,
            "cache_write": self.cache_write,
            "cache_read": self.cache_read,
            "total": self.total,
            "price_usd": self.price_usd,
            "uncached_price_usd": self.uncached_price_usd,
        }


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Prices per model and caching rules per provider, with a default model for each wire format."""

    models: Mapping[str, ModelPrice]
    rules: Mapping[str, CacheRules]
    default_models: Mapping[str, str]  # provider -> model
    formats: Mapping[str, str]  # wire format -> provider
    retrieved: str = ""

    def model_for(self, fmt: str, model: str | None = None) -> ModelPrice:
        """The price of `model`, or of the default model of the provider behind `fmt`.

        `model` is read as providers name it: Gemini's `models/` prefix is dropped, and a dated or
        versioned snapshot (`gpt-5-mini-2025-08-07`, `claude-opus-4-6-20260101`, `...@20250101`,
        `...-latest`) is priced as the longest model of the table it extends. A model the table still
        does not know is priced as the provider's default, with an UnknownModelPriceWarning (once per
        model) naming both; `priced_as` on the result says which entry was used.
        """
        provider = self.provider(fmt)
        if model is None:
            return self.models[self.default_models[provider]]
        found = self.known_model(model)
        if found is not None:
            entry = self.models[found]
            return entry if found == model else replace(entry, model=model, priced_as=found)
        stand_in = self.default_models[provider]
        _warn_unknown(model, stand_in, provider)
        return replace(self.models[stand_in], model=model, priced_as=stand_in)

    def known_model(self, model: str) -> str | None:
        """The table's entry for `model` as providers name it (see `model_for`), None when there is none."""
        name = model.removeprefix("models/")
        if name in self.models:
            return name
        extended = [k for k in self.models if name.startswith(k) and _SNAPSHOT.match(name, len(k))]
        return max(extended, key=len) if extended else None

    def provider(self, fmt: str) -> str:
        try:
            return self.formats[fmt]
        except KeyError:
            raise PriceTableError(
                f"no caching rules for wire format {fmt!r}; the price table knows: {', '.join(sorted(self.formats))}"
            ) from None

    def rules_for(self, fmt: str, model: str | None = None) -> CacheRules:
        """The provider's rules, with the model's own minimum cacheable length where the table gives one."""
        rules = self.rules[self.provider(fmt)]
        price = self.model_for(fmt, model)
        if price.min_cacheable_tokens is not None:
            rules = CacheRules(
                rules.provider,
                price.min_cacheable_tokens,
                rules.increment_tokens,
                rules.lifetime_seconds,
                rules.breakpoints,
                rules.lookback_blocks,
                rules.deferred_tools_in_prefix,
            )
        return rules


# what may follow a known model's name in a snapshot of it: a date or version (-2025-08-07, -20260101,
# -001, @20250101, :0) or -latest. Not a word: gpt-4.1-mini or gemini-2.5-flash-lite are other models.
_SNAPSHOT = re.compile(r"(?:[-@:]\d[\w.:-]*|-latest)$")
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_unknown(model: str, stand_in: str, provider: str) -> None:
    with _warned_lock:
        if (provider, model) in _warned:
            return
        _warned.add((provider, model))
    warnings.warn(
        f"the price table has no model {model!r}: it is priced as {provider}'s default {stand_in!r}, so its "
        f"costs may be wrong; add {model!r} to a price file of your own (TOOLSEARCH_PRICES or load_prices(path))",
        UnknownModelPriceWarning,
        stacklevel=3,
    )


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PriceTableError(f"cannot read the price table {path}: {exc}") from None
    except ValueError as exc:
        raise PriceTableError(f"the price table {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PriceTableError(f"the price table {path} must hold a JSON object with 'providers' and 'models'")
    return data


@cache
def _shipped() -> dict[str, Any]:
    text = resources.files("toolsearch").joinpath("data/prices.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def _number(entry: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> float | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PriceTableError(f"{where}: '{key}' must be a non-negative number (USD per million tokens), got {value!r}")
    return float(value)


def _table(data: Mapping[str, Any], origin: str) -> PriceTable:
    providers = data.get("providers")
    models = data.get("models")
    if not isinstance(providers, Mapping) or not isinstance(models, Mapping):
        raise PriceTableError(f"{origin}: the price table needs 'providers' and 'models' objects")
    rules: dict[str, CacheRules] = {}
    defaults: dict[str, str] = {}
    formats: dict[str, str] = {}
    for name, p in providers.items():
        where = f"{origin}: providers.{name}"
        breakpoints = p.get("breakpoints")
        minimum = _number(p, "min_cacheable_tokens", where)
        lifetime = _number(p, "lifetime_seconds", where)
        rules[name] = CacheRules(
            provider=name,
            min_cacheable_tokens=int(minimum or 0),
            increment_tokens=int(p.get("increment_tokens") or 1),
            lifetime_seconds=float(lifetime or 0),
            breakpoints=tuple(breakpoints) if breakpoints is not None else None,
            lookback_blocks=p.get("lookback_blocks"),
            deferred_tools_in_prefix=bool(p.get("deferred_tools_in_prefix", True)),
        )
        if not set(rules[name].breakpoints or ()) <= {"tools", "system", "last"}:
            raise PriceTableError(f"{where}: breakpoints may name only 'tools', 'system' and 'last'")
        defaults[name] = str(p.get("default_model") or "")
        for fmt in p.get("formats") or ():
            formats[str(fmt)] = name
    prices: dict[str, ModelPrice] = {}
    for model, m in models.items():
        where = f"{origin}: models.{model}"
        provider = m.get("provider")
        if provider not in rules:
            raise PriceTableError(f"{where}: 'provider' must be one of {', '.join(sorted(rules))}, got {provider!r}")
        minimum = m.get("min_cacheable_tokens")
        prices[model] = ModelPrice(
            model=model,
            provider=provider,
            input=_number(m, "input", where) or 0.0,
            cache_read=_number(m, "cache_read", where) or 0.0,
            cache_write=_number(m, "cache_write", where, required=False),
            output=_number(m, "output", where, required=False),
            min_cacheable_tokens=int(minimum) if minimum is not None else None,
            source=str(m.get("source") or ""),
        )
    for provider, model in defaults.items():
        if model not in prices:
            raise PriceTableError(f"{origin}: providers.{provider}.default_model {model!r} has no entry in 'models'")
    return PriceTable(prices, rules, defaults, formats, str(data.get("retrieved") or ""))


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The shipped price table, with the file at `path` (else `$TOOLSEARCH_PRICES`, if set) merged over it."""
    chosen = path if path is not None else os.environ.get("TOOLSEARCH_PRICES") or None
    return _load(str(chosen) if chosen is not None else None)


@cache
def _load(chosen: str | None) -> PriceTable:  # every run reads the table: parse each file once
    data = _shipped()
    origin = "toolsearch/data/prices.json"
    if chosen is not None:
        data = _merge(data, _read_json(Path(chosen)))
        origin = f"{origin} + {chosen}"
    return _table(data, origin)


# --- blocks in render order ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of a rendered request: a tool definition, the system text or one message."""

    part: Part
    key: str  # a digest of the block's content
    tokens: int
    marked: bool = False  # it carries a cache_control breakpoint


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@lru_cache(maxsize=65_536)
def _text_digest(text: str) -> str:
    return _digest(text)


@dataclass(frozen=True, slots=True)
class _ToolRender:
    """What a request's tool definition contributes to its blocks, computed once per definition content."""

    key: str  # digest of the definition as sent (without cache_control)
    text: str  # the text counted: as sent, less `defer_loading`
    name: str | None
    marked: bool
    deferred: bool


_tool_renders: dict[bytes, _ToolRender] = {}  # content key -> render, oldest first


def _render_tool(raw: Any) -> _ToolRender:
    tool = dict(_plain(raw))
    marked = "cache_control" in tool
    tool = without_cache_markers(tool)
    sent = definition_json(tool)
    deferred = bool(tool.pop("defer_loading", False))
    text = definition_json(tool) if deferred else sent
    name = tool.get("name") or (tool.get("function") or {}).get("name")
    return _ToolRender(_text_digest(sent), text, name if isinstance(name, str) else None, marked, deferred)


def _tool_render(raw: Any) -> _ToolRender:
    """`_render_tool`, cached by the definition's content: a loop sends the same tools on every request."""
    return by_content(_tool_renders, raw, _render_tool)


def _plain(item: Any) -> Any:
    return item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else item


def _references(value: Any) -> list[str]:
    """Names of the `tool_reference` blocks anywhere inside a message, in order.

    Walked with a stack, not by recursion: a message holds a model's tool-call arguments, which a
    provider hands over parsed however deep they are (500 levels raised RecursionError here).
    """
    found: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if item.get("type") == "tool_reference" and isinstance(item.get("tool_name"), str):
                found.append(item["tool_name"])
            else:
                stack.extend(reversed(list(item.values())))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
    return found


def _marked(item: Mapping[str, Any]) -> bool:
    """Whether a tool, a system block or a message carries a cache_control breakpoint."""
    if "cache_control" in item:
        return True
    content = item.get("content")
    return isinstance(content, list) and any(isinstance(b, Mapping) and "cache_control" in b for b in content)


def request_blocks(
    payload: Mapping[str, Any], fmt: str, encoding: str = DEFAULT_ENCODING, *, rules: CacheRules | None = None
) -> list[Block]:
    """A provider payload as blocks in render order: tools, system text, messages.

    With `rules.deferred_tools_in_prefix` false (Anthropic), tools sent with `defer_loading` are left
    out and each `tool_reference` costs the definition of the tool it names. A block that carries a
    `cache_control` marker is `marked` (counted and matched without it).
    """
    if fmt not in _FORMATS:
        raise PriceTableError(f"unknown wire format {fmt!r}; choose one of: {', '.join(_FORMATS)}")
    skip_deferred = rules is not None and not rules.deferred_tools_in_prefix
    tools: list[Block] = []
    definitions: dict[str, int] = {}
    for raw in payload_tools(payload):
        tool = _tool_render(raw)
        tokens = definition_tokens(tool.text, encoding)
        if tool.name is not None:
            definitions[tool.name] = tokens
        if tool.deferred and skip_deferred:
            continue
        tools.append(Block("tools", tool.key, tokens, tool.marked))
    system, items = payload_parts(payload)
    raw_system = payload.get("system")
    system_marked = isinstance(raw_system, list) and any(isinstance(b, Mapping) and _marked(b) for b in raw_system)
    messages: list[Block] = []
    for item in items:
        if not messages and isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
            system.append(text_of(item.get("content", "")))  # a leading system message is the system text
            system_marked = system_marked or _marked(item)
            continue
        marked = isinstance(item, Mapping) and _marked(item)
        item = without_cache_markers(item)
        text = compact_json(item)
        tokens = count_tokens(text, encoding)  # what count_json_tokens does, without rendering twice
        if skip_deferred:
            tokens += sum(definitions.get(n, 0) for n in _references(item))
        messages.append(Block("messages", _digest(text), tokens, marked))
    out = tools
    if system:
        joined = "\n\n".join(system)
        out.append(Block("system", _digest(joined), count_tokens(joined, encoding), system_marked))
    out += messages
    if payload.get("cache_control") and out:  # automatic caching: a breakpoint on the last block
        last = out[-1]
        out[-1] = Block(last.part, last.key, last.tokens, True)
    return out


# --- the cache -------------------------------------------------------------------------------------


@dataclass(slots=True)
class PromptCache:
    """The cache entries of one conversation and the price of each request against them."""

    rules: CacheRules
    price: ModelPrice
    fmt: str
    encoding: str = DEFAULT_ENCODING
    entries: dict[str, tuple[int, float]] = field(default_factory=dict)  # prefix digest -> (tokens, expiry)
    clock: float = 0.0

    @classmethod
    def for_format(
        cls, fmt: str, model: str | None = None, *, prices: PriceTable | None = None, encoding: str = DEFAULT_ENCODING
    ) -> PromptCache:
        table = prices or load_prices()
        return cls(table.rules_for(fmt, model), table.model_for(fmt, model), fmt, encoding)

    def request(self, payload: Mapping[str, Any], *, at: float | None = None) -> CacheUse:
        """Bill one request (sent at `at` seconds; default: right after the previous one) and update the cache.

        Under breakpoint rules (Anthropic) the request's `cache_control` markers are its breakpoints,
        and a request without any caches nothing, as the API does.
        """
        blocks = request_blocks(payload, self.fmt, self.encoding, rules=self.rules)
        explicit = self.rules.breakpoints is not None
        return self.blocks(blocks, at=at, unmarked_cache=not explicit)

    def blocks(self, blocks: Sequence[Block], *, at: float | None = None, unmarked_cache: bool = True) -> CacheUse:
        """Bill one request given as blocks. Under breakpoint rules, marked blocks are the breakpoints;
        without any, the rules' default breakpoints, or none when `unmarked_cache` is false."""
        now = self.clock if at is None else at
        self.clock = now
        self.entries = {k: v for k, v in self.entries.items() if v[1] >= now}
        prefixes: list[str] = []  # digest of blocks[:i+1]
        ends: list[int] = []  # tokens of blocks[:i+1]
        digest, total = "", 0
        for block in blocks:
            digest = _digest(digest + block.key)
            total += block.tokens
            prefixes.append(digest)
            ends.append(total)
        if self.rules.breakpoints is None:
            read, write, stored = self._automatic(prefixes, ends, total)
        else:
            read, write, stored = self._breakpoints(blocks, prefixes, ends, unmarked_cache)
        expiry = now + self.rules.lifetime_seconds
        for i in stored:
            self.entries[prefixes[i]] = (ends[i], expiry)
        fresh = total - read - write
        p = self.price
        write_rate = p.cache_write if p.cache_write is not None else p.input
        cost = fresh * p.input + write * write_rate + read * p.cache_read
        return CacheUse(fresh, write, read, cost / 1e6, total * p.input / 1e6)

    def _automatic(self, prefixes: list[str], ends: list[int], total: int) -> tuple[int, int, list[int]]:
        """OpenAI: the longest cached prefix, in increments, from the minimum up; every prefix is stored."""
        minimum, step = self.rules.min_cacheable_tokens, max(1, self.rules.increment_tokens)
        if total < minimum:
            return 0, 0, []
        matched = next((ends[i] for i in range(len(prefixes) - 1, -1, -1) if prefixes[i] in self.entries), 0)
        read = matched // step * step if matched >= minimum else 0
        write = total - read if self.price.cache_write is not None else 0
        return read, write, list(range(len(prefixes)))

    def _breakpoints(
        self, blocks: Sequence[Block], prefixes: list[str], ends: list[int], unmarked_cache: bool
    ) -> tuple[int, int, list[int]]:
        """Anthropic: entries at breakpoints only; each breakpoint looks back a limited number of blocks."""
        n = len(blocks)
        points: set[int] = {i for i, b in enumerate(blocks) if b.marked}  # last block of each breakpoint's prefix
        wanted = (self.rules.breakpoints or ()) if not points and unmarked_cache else ()
        tools_end = sum(1 for b in blocks if b.part == "tools") - 1
        system_end = tools_end + sum(1 for b in blocks if b.part == "system")
        if "tools" in wanted and tools_end >= 0:
            points.add(tools_end)
        if "system" in wanted and system_end > tools_end:
            points.add(system_end)
        if "last" in wanted and n:
            points.add(n - 1)
        lookback = self.rules.lookback_blocks if self.rules.lookback_blocks is not None else n
        read, hits = 0, []
        for point in points:
            for i in range(point, max(-1, point - lookback - 1), -1):
                if prefixes[i] in self.entries:
                    read = max(read, ends[i])
                    hits.append(i)  # a hit refreshes the entry's lifetime
                    break
        cacheable = sorted(p for p in points if ends[p] >= self.rules.min_cacheable_tokens)
        write = max(0, ends[cacheable[-1]] - read) if cacheable else 0
        return read, write, cacheable + hits
