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
`TOOLSEARCH_PRICES` (or `load_prices(path)`) at a file of the same shape to override them: a
model or provider it names has the fields it gives changed and keeps the shipped others. The file is
checked: a figure that is not a finite, non-negative number, an entry that is not an object, a
count that is not a whole number is a PriceTableError naming the file, the entry and the field.
The prices cover input tokens only: both arms of a comparison produce about the same output.

What else a request's price follows:

- **Lifetimes**: an entry lives `lifetime_seconds` from its last use, or the lifetime the request
  chooses among the provider's `lifetimes`: Anthropic's `cache_control` `ttl` ("5m", "1h"; a
  1-hour write bills at the model's `cache_write_1h`), OpenAI's `prompt_cache_retention`
  ("in_memory", "24h"; the same prices). A lifetime the table does not name is a PriceTableError.
- **Long prompts**: a model's `long_context` tier (Gemini 2.5 Pro above 200,000 tokens) prices
  every token of a prompt longer than its `above_tokens` at the tier's rates.
- **Tool-use system prompt**: Anthropic adds one to every request that carries tools (346 tokens
  under `tool_choice` auto or none, 313 under any or tool, per the table); it is priced as one
  more block at the head of the tools.
- **A model of another provider** (Claude through an OpenAI-compatible endpoint): priced at its
  own rates with nothing cached, with an UnknownModelPriceWarning once per format and model: the
  format's own caching is not what serves it. A price-file entry that files the model under the
  format's provider prices it with that provider's caching instead.
- **A conversation over several runs**: `PromptCache.state` gives the entries as plain JSON data
  and `PromptCache.resume` takes them over, so a resumed run's first request reads what the
  earlier run left (the loop passes them on as `LoopResult.cache_state` / `run(cache_state=...)`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ._errors import InvalidArgumentError, PriceTableError, UnknownModelPriceWarning
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
    "PriceTier",
    "PromptCache",
    "load_prices",
    "request_blocks",
]

Part = Literal["tools", "system", "messages"]
_FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")


@dataclass(frozen=True, slots=True)
class PriceTier:
    """The rates a model bills instead of its own for a prompt of more than `above_tokens` input tokens.

    Every token of such a prompt, read from cache or not, bills at the tier's rates, as Google bills
    Gemini 2.5 Pro prompts over 200,000 tokens (`cache_write` None: writes cost the tier's input rate).
    """

    above_tokens: int
    input: float
    cache_read: float
    cache_write: float | None = None
    cache_write_1h: float | None = None
    output: float | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model's input prices in USD per million tokens (`cache_write` None: writes cost the input rate).

    `model` is the model asked about; `priced_as` the price table's entry whose figures these are:
    the same model, the entry of a dated snapshot (`gpt-5-mini-2025-08-07` is `gpt-5-mini`), or, for
    a model the table does not know, the provider's default model (`PriceTable.model_for` warns).
    `cache_write_1h` prices writes to Anthropic's 1-hour cache (`ttl: "1h"`); `long_context` the
    prompts over its threshold (`for_prompt`).
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
    cache_write_1h: float | None = None
    long_context: PriceTier | None = None

    def __post_init__(self) -> None:
        if not self.priced_as:
            object.__setattr__(self, "priced_as", self.model)

    def for_prompt(self, tokens: int) -> ModelPrice:
        """The rates that bill a prompt of `tokens` input tokens: the `long_context` tier's above its threshold."""
        tier = self.long_context
        if tier is None or tokens <= tier.above_tokens:
            return self
        return replace(
            self,
            input=tier.input,
            cache_read=tier.cache_read,
            cache_write=tier.cache_write,
            cache_write_1h=tier.cache_write_1h,
            output=tier.output,
            long_context=None,
        )

    def write_rate(self, ttl: str | None = None) -> float:
        """USD per million tokens written to the cache with lifetime `ttl` (None: the provider's default)."""
        if ttl == "1h":  # Anthropic's 1-hour cache, the one lifetime with a write price of its own
            if self.cache_write_1h is None:
                raise PriceTableError(
                    f"model {self.priced_as!r} has no 'cache_write_1h' price for writes to the 1-hour cache "
                    "(cache_control ttl '1h'); give its entry one in a price file (TOOLSEARCH_PRICES or "
                    "load_prices(path))"
                )
            return self.cache_write_1h
        return self.cache_write if self.cache_write is not None else self.input


@dataclass(frozen=True, slots=True)
class CacheRules:
    """How a provider caches prompt prefixes (see the module docstring).

    `lifetimes` are the lifetimes a request may choose, by the name it gives them (Anthropic's
    `cache_control` ttl, OpenAI's `prompt_cache_retention`); `tool_use_prompt_tokens` the tokens of
    the system prompt the provider adds to a request with tools, by `tool_choice` type; `caches`
    False prices every token fresh (a model of another provider sent through this format).
    """

    provider: str
    min_cacheable_tokens: int
    increment_tokens: int = 1
    lifetime_seconds: float = 300.0
    breakpoints: tuple[str, ...] | None = None  # None: every prefix is cached automatically
    lookback_blocks: int | None = None
    deferred_tools_in_prefix: bool = True
    lifetimes: tuple[tuple[str, float], ...] = ()
    tool_use_prompt_tokens: tuple[tuple[str, int], ...] = ()
    caches: bool = True

    def lifetime(self, name: str | None) -> float:
        """Seconds an entry lives under the lifetime a request names (None: the default `lifetime_seconds`)."""
        if name is None:
            return self.lifetime_seconds
        for known, seconds in self.lifetimes:
            if known == name:
                return seconds
        known_names = ", ".join(repr(k) for k, _ in self.lifetimes) or "none"
        raise PriceTableError(
            f"the cache lifetime {name!r} a request asks for (cache_control ttl or prompt_cache_retention) is not "
            f"one the price table knows for {self.provider} ({known_names}); use one of those, or add it to "
            f"providers.{self.provider}.lifetimes in a price file (TOOLSEARCH_PRICES or load_prices(path))"
        )

    def tool_use_tokens(self, tool_choice: Any) -> int:
        """Tokens of the tool-use system prompt for a request with tools under `tool_choice` (0: none is added)."""
        if not self.tool_use_prompt_tokens:
            return 0
        table = dict(self.tool_use_prompt_tokens)
        kind = tool_choice.get("type") if isinstance(tool_choice, Mapping) else tool_choice
        return table.get(kind if isinstance(kind, str) else "auto", table.get("auto", 0))


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
        """The provider's rules, with the model's own minimum cacheable length where the table gives one.

        A model the table files under another provider than the one behind `fmt` (Claude through an
        OpenAI-compatible endpoint) is cached by neither: the rules cache nothing, keep the model's
        own provider's tool-use prompt, and an UnknownModelPriceWarning says so once per format and model.
        """
        rules = self.rules[self.provider(fmt)]
        price = self.model_for(fmt, model)
        if price.provider != rules.provider:
            _warn_other_provider(fmt, price, rules.provider)
            own = self.rules[price.provider]
            return replace(rules, caches=False, tool_use_prompt_tokens=own.tool_use_prompt_tokens)
        if price.min_cacheable_tokens is not None:
            rules = replace(rules, min_cacheable_tokens=price.min_cacheable_tokens)
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


def _warn_other_provider(fmt: str, price: ModelPrice, provider: str) -> None:
    with _warned_lock:
        if (f"{fmt} format", price.model) in _warned:  # apart from _warn_unknown's (provider, model)
            return
        _warned.add((f"{fmt} format", price.model))
    warnings.warn(
        f"model {price.model!r} is {price.provider}'s in the price table but is sent in the {fmt} format "
        f"({provider}'s): it is priced at its own rates with nothing read from cache, since {provider}'s caching "
        f"does not serve it; to price it with {provider}'s caching (a proxy that caches), give it an entry with "
        f"\"provider\": {provider!r} in a price file (TOOLSEARCH_PRICES or load_prices(path))",
        UnknownModelPriceWarning,
        stacklevel=4,
    )


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, field by field: a model or provider entry it names changes the fields it gives
    and keeps the rest (a `null` field removes the shipped one); any other top-level key is replaced.

    A file that restates a shipped model's input and read rates keeps its write rates, its minimum and its
    1-hour rate, facts of the provider's billing that a file in the documented two-figure shape never gives:
    replacing the entry whole billed Claude writes at the input rate and priced reads below the model's minimum,
    without a word. A file that re-prices `input` gives the write rates it changes, as it does any other figure.
    """
    out = copy.deepcopy(base)
    for key, value in override.items():
        shipped = out.get(key)
        if key in ("providers", "models") and isinstance(value, Mapping) and isinstance(shipped, dict):
            for name, entry in value.items():
                old = shipped.get(name)
                if isinstance(entry, Mapping) and isinstance(old, Mapping):
                    merged = {**old, **entry}
                    tier, old_tier = entry.get("long_context"), old.get("long_context")
                    if isinstance(tier, Mapping) and isinstance(old_tier, Mapping):
                        merged["long_context"] = {**old_tier, **tier}  # a tier's rates, like the model's
                    entry = merged
                shipped[name] = copy.deepcopy(entry)
        else:
            out[key] = copy.deepcopy(value)
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


_SHIPPED_FILE = "toolsearch/data/prices.json"


@dataclass(frozen=True, slots=True)
class _Origin:
    """Which file a figure of the merged table came from, so an error names the file to fix."""

    user: str | None = None  # the price file merged over the shipped one
    override: Mapping[str, Any] = field(default_factory=dict)

    def of(self, section: str, name: str | None = None, key: str | None = None) -> str:
        """The file that gave `section` (`providers` / `models`), its entry `name`, and that entry's `key`."""
        given: Any = self.override.get(section)
        if name is not None:
            given = given.get(name) if isinstance(given, Mapping) else None
            # a field comes from the file that gives it (the price file merges over the shipped entry field by
            # field); one missing from an entry the shipped table lacks is the price file's to give
            shipped = _shipped().get(section)
            if key is not None and isinstance(given, Mapping) and isinstance(shipped, Mapping) and name in shipped:
                given = given.get(key)
        if self.user is not None and given is not None:
            return f"{self.user} (a price file over {_SHIPPED_FILE})"
        return _SHIPPED_FILE


class _Entry:
    """One provider or model entry of a price table, read field by field with its type checked.

    Every error names the file, the entry and the field, says what the field must be and what it
    holds: a price table that reads NaN, a string or a negative step would otherwise price every run
    wrongly without a word, or fail each run with an error that names none of them.
    """

    def __init__(self, origin: _Origin, section: str, name: str, entry: Any, *, file: str | None = None) -> None:
        self.origin, self.section, self.name = origin, section, name
        self.file = file  # the file of an entry inside another (a model's long_context): the outer entry's
        if not isinstance(entry, Mapping):
            raise PriceTableError(
                f"{file or origin.of(section, name)}: {section}.{name} must be an object of fields "
                f"({'rules' if section == 'providers' else 'prices'}), got {type(entry).__name__} {entry!r:.80}"
            )
        self.entry = entry

    def fail(self, key: str, must: str) -> PriceTableError:
        where = f"{self.file or self.origin.of(self.section, self.name, key)}: {self.section}.{self.name}"
        if key not in self.entry:  # a model new to the table gives every figure: there is no shipped one to keep
            return PriceTableError(f"{where}: '{key}' is missing; it must be {must}")
        return PriceTableError(f"{where}: '{key}' must be {must}, got {self.entry[key]!r:.80}")

    def price(self, key: str, *, required: bool = True) -> float | None:
        """A price in USD per million tokens: a finite number, zero or more."""
        value = self.entry.get(key)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise self.fail(key, "a finite, non-negative number (USD per million tokens)")
        return float(value)

    def seconds(self, key: str) -> float:
        value = self.entry.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise self.fail(key, "a finite number of seconds above zero")
        return float(value)

    def count(self, key: str, *, minimum: int, required: bool = False, default: int | None = None) -> int | None:
        """A whole number of tokens or blocks, at least `minimum` (1.0 is taken as 1; 1.5, "1k", true are not)."""
        value = self.entry.get(key)
        if value is None and not required:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"a whole number of at least {minimum}")
        return value

    def text(self, key: str, *, required: bool = False) -> str:
        value = self.entry.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise self.fail(key, "a non-empty string" if required else "a string")
        return value

    def names(self, key: str, *, required: bool = False, allowed: Sequence[str] = ()) -> tuple[str, ...] | None:
        """A list of names (formats, breakpoints), each among `allowed` when it is given; None when absent."""
        value = self.entry.get(key)
        if value is None and not required:
            return None
        names = value if isinstance(value, list) and all(isinstance(v, str) and v for v in value) else None
        if names is None or (allowed and not set(names) <= set(allowed)):  # [] is a list: a provider of no format
            one_of = f" among {', '.join(map(repr, allowed))}" if allowed else ""
            raise self.fail(key, f"a list of names{one_of}")
        return tuple(names)

    def table(self, key: str, read: Callable[[Any], Any], must: str) -> tuple[tuple[str, Any], ...]:
        """An object of names to values (`lifetimes`, tool-use prompt tokens), each read by `read` (None: refused)."""
        value = self.entry.get(key)
        if value is None:
            return ()
        pairs = list(value.items()) if isinstance(value, Mapping) else None
        read_pairs = [(k, read(v)) for k, v in pairs or ()]
        if pairs is None or not all(isinstance(k, str) and k and v is not None for k, v in read_pairs):
            raise self.fail(key, f"an object of names to {must}")
        return tuple(read_pairs)


def _positive_seconds(value: Any) -> float | None:
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def _token_count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _table(data: Mapping[str, Any], origin: _Origin) -> PriceTable:
    providers = data.get("providers")
    models = data.get("models")
    if not isinstance(providers, Mapping) or not isinstance(models, Mapping):
        bad = "providers" if not isinstance(providers, Mapping) else "models"
        raise PriceTableError(
            f"{origin.of(bad)}: the price table needs 'providers' and 'models' objects; '{bad}' is "
            f"{type(data.get(bad)).__name__}"
        )
    rules: dict[str, CacheRules] = {}
    defaults: dict[str, str] = {}
    formats: dict[str, str] = {}
    formats_given: dict[str, bool] = {}  # whether the price file (not the shipped table) files the format there
    for name, raw in providers.items():
        p = _Entry(origin, "providers", name, raw)
        breakpoints = p.names("breakpoints", allowed=("tools", "system", "last"))
        deferred = p.entry.get("deferred_tools_in_prefix", True)
        if not isinstance(deferred, bool):
            raise p.fail("deferred_tools_in_prefix", "true or false")
        rules[name] = CacheRules(
            provider=name,
            min_cacheable_tokens=p.count("min_cacheable_tokens", minimum=0, required=True) or 0,
            increment_tokens=p.count("increment_tokens", minimum=1, default=1) or 1,
            lifetime_seconds=p.seconds("lifetime_seconds"),
            breakpoints=breakpoints,
            lookback_blocks=p.count("lookback_blocks", minimum=1),
            deferred_tools_in_prefix=deferred,
            lifetimes=p.table("lifetimes", _positive_seconds, "seconds above zero"),
            tool_use_prompt_tokens=p.table("tool_use_system_prompt_tokens", _token_count, "whole token counts"),
        )
        defaults[name] = p.text("default_model", required=True)
        # a format the price file gives a provider is taken from the shipped provider that had it (Azure's
        # OpenAI endpoints filed under a provider of their own); two providers the same file files it under clash
        given = origin.of("providers", name, "formats") != _SHIPPED_FILE
        for fmt in p.names("formats", required=True) or ():
            if fmt in formats and formats_given[fmt] == given:
                raise p.fail(
                    "formats",
                    f"formats no other provider names ({fmt!r} is providers.{formats[fmt]}'s too); a format has "
                    "one provider: to move one, list it under one provider only in the price file",
                )
            if fmt not in formats or given:
                formats[fmt], formats_given[fmt] = name, given
    prices: dict[str, ModelPrice] = {}
    for model, raw in models.items():
        m = _Entry(origin, "models", model, raw)
        provider = m.entry.get("provider")
        if provider not in rules:
            raise m.fail("provider", f"one of {', '.join(sorted(rules))}")
        prices[model] = ModelPrice(
            model=model,
            provider=provider,
            input=m.price("input") or 0.0,
            cache_read=m.price("cache_read") or 0.0,
            cache_write=m.price("cache_write", required=False),
            output=m.price("output", required=False),
            min_cacheable_tokens=m.count("min_cacheable_tokens", minimum=0),
            source=m.text("source"),
            cache_write_1h=m.price("cache_write_1h", required=False),
            long_context=_tier(m),
        )
    for provider, model in defaults.items():
        if model not in prices:
            raise PriceTableError(
                f"{origin.of('providers', provider, 'default_model')}: providers.{provider}.default_model {model!r} "
                "has no entry in 'models'"
            )
    return PriceTable(prices, rules, defaults, formats, str(data.get("retrieved") or ""))


def _tier(m: _Entry) -> PriceTier | None:
    """A model's `long_context` tier: `above_tokens`, and the rates of a prompt longer than that."""
    raw = m.entry.get("long_context")
    if raw is None:
        return None
    tier = _Entry(m.origin, m.section, f"{m.name}.long_context", raw, file=m.origin.of(m.section, m.name))
    return PriceTier(
        above_tokens=tier.count("above_tokens", minimum=1, required=True) or 1,
        input=tier.price("input") or 0.0,
        cache_read=tier.price("cache_read") or 0.0,
        cache_write=tier.price("cache_write", required=False),
        cache_write_1h=tier.price("cache_write_1h", required=False),
        output=tier.price("output", required=False),
        source=tier.text("source"),
    )


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The shipped price table, with the file at `path` (else `$TOOLSEARCH_PRICES`, if set) over it.

    A model or provider the file names has the fields the file gives changed and keeps the shipped ones
    (a `null` field removes one); a model new to the table gives every required figure. PriceTableError,
    naming the file, the entry and the field, for a figure that is not a finite non-negative number, an entry that is
    not an object, a count that is not a whole number, a rule of the wrong kind.
    """
    chosen = path if path is not None else os.environ.get("TOOLSEARCH_PRICES") or None
    return _load(str(chosen) if chosen is not None else None)


@cache
def _load(chosen: str | None) -> PriceTable:  # every run reads the table: parse each file once
    data = _shipped()
    override: dict[str, Any] = {}
    if chosen is not None:
        override = _read_json(Path(chosen))
        data = _merge(data, override)
    return _table(data, _Origin(chosen, override))


# --- blocks in render order ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of a rendered request: a tool definition, the system text or one message."""

    part: Part
    key: str  # a digest of the block's content
    tokens: int
    marked: bool = False  # it carries a cache_control breakpoint
    ttl: str | None = None  # the lifetime its breakpoint names (cache_control ttl); None: the default


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
    ttl: str | None


_tool_renders: dict[bytes, _ToolRender] = {}  # content key -> render, oldest first


def _render_tool(raw: Any) -> _ToolRender:
    tool = dict(_plain(raw))
    marked, ttl = _marker(tool)
    tool = without_cache_markers(tool)
    sent = definition_json(tool)
    deferred = bool(tool.pop("defer_loading", False))
    text = definition_json(tool) if deferred else sent
    name = tool.get("name") or (tool.get("function") or {}).get("name")
    return _ToolRender(_text_digest(sent), text, name if isinstance(name, str) else None, marked, deferred, ttl)


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


def _marker(item: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether a tool, a system block or a message carries a cache_control breakpoint, and the ttl it
    names (None: the provider's default lifetime); of several, the last one's, where the block ends."""
    markers = [item["cache_control"]] if "cache_control" in item else []
    content = item.get("content")
    if isinstance(content, list):
        markers += [b["cache_control"] for b in content if isinstance(b, Mapping) and "cache_control" in b]
    return (True, _ttl(markers[-1])) if markers else (False, None)


def _ttl(marker: Any) -> str | None:
    ttl = marker.get("ttl") if isinstance(marker, Mapping) else None
    return ttl if ttl is None or isinstance(ttl, str) else repr(ttl)  # not a name: refused by CacheRules.lifetime


def request_blocks(
    payload: Mapping[str, Any], fmt: str, encoding: str = DEFAULT_ENCODING, *, rules: CacheRules | None = None
) -> list[Block]:
    """A provider payload as blocks in render order: tools, system text, messages.

    With `rules.deferred_tools_in_prefix` false (Anthropic), tools sent with `defer_loading` are left
    out and each `tool_reference` costs the definition of the tool it names. A block that carries a
    `cache_control` marker is `marked` (counted and matched without it), with the marker's `ttl`.
    Where `rules` give the provider's tool-use system prompt (Anthropic), a request with tools starts
    with a block of that many tokens (by its `tool_choice`): a cost the payload's own text leaves out.
    """
    if fmt not in _FORMATS:
        raise PriceTableError(f"unknown wire format {fmt!r}; choose one of: {', '.join(_FORMATS)}")
    skip_deferred = rules is not None and not rules.deferred_tools_in_prefix
    tools: list[Block] = []
    definitions: dict[str, int] = {}
    sent = payload_tools(payload)
    for raw in sent:
        tool = _tool_render(raw)
        tokens = definition_tokens(tool.text, encoding)
        if tool.name is not None:
            definitions[tool.name] = tokens
        if tool.deferred and skip_deferred:
            continue
        tools.append(Block("tools", tool.key, tokens, tool.marked, tool.ttl))
    if rules is not None and sent:
        choice = payload.get("tool_choice")
        prompt = rules.tool_use_tokens(choice)
        if prompt:  # the same text for the same tool_choice: cached with the tools that follow it
            kind = choice.get("type") if isinstance(choice, Mapping) else choice
            tools.insert(0, Block("tools", _digest(f"\0tool-use system prompt\0{kind or 'auto'}"), prompt))
    system, items = payload_parts(payload)
    raw_system = payload.get("system")
    system_marked, system_ttl = False, None
    if isinstance(raw_system, list):
        for block in raw_system:
            if isinstance(block, Mapping) and _marker(block)[0]:
                system_marked, system_ttl = _marker(block)
    messages: list[Block] = []
    for item in items:
        if not messages and isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
            system.append(text_of(item.get("content", "")))  # a leading system message is the system text
            if _marker(item)[0]:
                system_marked, system_ttl = _marker(item)
            continue
        marked, ttl = _marker(item) if isinstance(item, Mapping) else (False, None)
        item = without_cache_markers(item)
        text = compact_json(item)
        tokens = count_tokens(text, encoding)  # what count_json_tokens does, without rendering twice
        if skip_deferred:
            tokens += sum(definitions.get(n, 0) for n in _references(item))
        messages.append(Block("messages", _digest(text), tokens, marked, ttl))
    out = tools
    if system:
        joined = "\n\n".join(system)
        out.append(Block("system", _digest(joined), count_tokens(joined, encoding), system_marked, system_ttl))
    out += messages
    automatic = payload.get("cache_control")
    if automatic and out:  # automatic caching: a breakpoint on the last block
        last = out[-1]
        out[-1] = Block(last.part, last.key, last.tokens, True, _ttl(automatic))
    return out


# --- the cache -------------------------------------------------------------------------------------


@dataclass(slots=True)
class PromptCache:
    """The cache entries of one conversation and the price of each request against them.

    `entries` maps the digest of a cached prefix to (its tokens, when it expires on this cache's
    clock, the lifetime a use renews it by). `state` / `resume` carry them from one run of a
    conversation to the next as plain JSON data.
    """

    rules: CacheRules
    price: ModelPrice
    fmt: str
    encoding: str = DEFAULT_ENCODING
    entries: dict[str, tuple[int, float, float]] = field(default_factory=dict)
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
        and a request without any caches nothing, as the API does; each marker's `ttl` is the lifetime
        of the entry it writes. Under automatic rules (OpenAI) the payload's `prompt_cache_retention`
        is the lifetime of every entry. A lifetime the rules do not name is a PriceTableError.
        """
        blocks = request_blocks(payload, self.fmt, self.encoding, rules=self.rules)
        explicit = self.rules.breakpoints is not None
        retention = None if explicit else payload.get("prompt_cache_retention")
        return self.blocks(blocks, at=at, unmarked_cache=not explicit, retention=retention)

    def blocks(
        self,
        blocks: Sequence[Block],
        *,
        at: float | None = None,
        unmarked_cache: bool = True,
        retention: str | None = None,
    ) -> CacheUse:
        """Bill one request given as blocks. Under breakpoint rules, marked blocks are the breakpoints;
        without any, the rules' default breakpoints, or none when `unmarked_cache` is false. Under
        automatic rules, `retention` names the lifetime of what the request stores."""
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
        written: dict[str | None, int] = {}  # tokens written, by the lifetime they are written for
        stored: list[tuple[int, float]] = []  # (block index, lifetime) of each entry this request leaves
        if not self.rules.caches:
            read = 0
        elif self.rules.breakpoints is None:
            lifetime = self.rules.lifetime(retention)
            read, write, indexes = self._automatic(prefixes, ends, total)
            written[None] = write  # OpenAI bills both retentions alike
            stored = [(i, lifetime) for i in indexes]
        else:
            read, written, stored = self._breakpoints(blocks, prefixes, ends, unmarked_cache)
        for i, lifetime in stored:
            self.entries[prefixes[i]] = (ends[i], now + lifetime, lifetime)
        write = sum(written.values())
        fresh = total - read - write
        p = self.price.for_prompt(total)  # a long prompt bills every token at its tier's rates
        cost = fresh * p.input + read * p.cache_read + sum(n * p.write_rate(ttl) for ttl, n in written.items() if n)
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
    ) -> tuple[int, dict[str | None, int], list[tuple[int, float]]]:
        """Anthropic: entries at breakpoints only; each breakpoint looks back a limited number of blocks.

        The tokens written are billed by the lifetime of the breakpoint that ends them, as Anthropic
        bills mixed lifetimes: up to the last 1-hour breakpoint at the 1-hour rate, the rest up to the
        last breakpoint at the 5-minute rate (the API takes longer lifetimes first only).
        """
        n = len(blocks)
        points: set[int] = {i for i, b in enumerate(blocks) if b.marked}  # last block of each breakpoint's prefix
        lifetimes = {p: self.rules.lifetime(blocks[p].ttl) for p in points}  # an unknown ttl is refused here
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
        read, stored = 0, []
        for point in points:
            for i in range(point, max(-1, point - lookback - 1), -1):
                if prefixes[i] in self.entries:
                    read = max(read, ends[i])
                    stored.append((i, self.entries[prefixes[i]][2]))  # a hit renews the entry by its lifetime
                    break
        cacheable = sorted(p for p in points if ends[p] >= self.rules.min_cacheable_tokens)
        written: dict[str | None, int] = {}
        done = read
        for point in cacheable:
            if ends[point] > done:
                ttl = blocks[point].ttl if blocks[point].marked else None
                written[ttl] = written.get(ttl, 0) + ends[point] - done
                done = ends[point]
        stored += [(p, lifetimes.get(p, self.rules.lifetime_seconds)) for p in cacheable]
        return read, written, stored

    def state(self, *, started: float) -> dict[str, Any]:
        """The live entries as plain JSON data, for a later run of the same conversation (`resume`).

        `started` is the wall-clock time (`time.time()`) of this cache's clock 0; the state records
        the wall-clock time of its last request and how long each entry had left then.
        """
        return {
            "version": _STATE_VERSION,
            "format": self.fmt,
            "model": self.price.model,
            "encoding": self.encoding,
            "at": started + self.clock,
            "entries": [
                [key, tokens, expiry - self.clock, lifetime]
                for key, (tokens, expiry, lifetime) in self.entries.items()
                if expiry >= self.clock
            ],
        }

    def resume(self, state: Mapping[str, Any], *, started: float) -> bool:
        """Take over the entries of `state` (an earlier run's `state()`) still alive at this cache's clock 0,
        the wall-clock time `started`. True when it did; False, leaving the cache cold, for the state of
        another wire format, model or encoding: another model's cache serves none of this one's requests.
        InvalidArgumentError for data that is no such state."""
        entries = state.get("entries") if isinstance(state, Mapping) else None
        at = state.get("at") if isinstance(state, Mapping) else None
        # the longest an entry can live under these rules: a longer lifetime, or more time left than the entry's
        # lifetime, is no state() of this cache's, and would price reads from a cache long gone
        longest = max([self.rules.lifetime_seconds, *(s for _, s in self.rules.lifetimes)])
        rows_ok = isinstance(entries, list) and all(
            isinstance(row, list | tuple)
            and len(row) == 4
            and isinstance(row[0], str)
            and _token_count(row[1]) is not None
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in row[2:])
            and 0 < row[3] <= longest
            and 0 <= row[2] <= row[3]
            for row in entries
        )
        ids = [state.get(k) for k in ("format", "model", "encoding")] if isinstance(state, Mapping) else []
        if (
            not isinstance(state, Mapping)
            or state.get("version") != _STATE_VERSION
            or not all(isinstance(v, str) for v in ids)
            or not rows_ok
            or isinstance(at, bool)
            or not isinstance(at, int | float)
            or not math.isfinite(at)
            or at > started + _CLOCK_SKEW
        ):
            raise InvalidArgumentError(
                "cache_state must be what LoopResult.cache_state (PromptCache.state) gave, as it gave it: an object "
                f"with version {_STATE_VERSION}, format, model and encoding strings, a finite 'at' (wall-clock "
                "seconds) no later than now, and entries of [key, tokens, seconds left, lifetime] within the "
                f"provider's lifetimes; got "
                f"{type(state).__name__ if not isinstance(state, Mapping) else 'an object of another shape'}"
            )
        if ids != [self.fmt, self.price.model, self.encoding]:
            return False
        assert isinstance(entries, list)
        offset = float(at) - started  # the state's last request, on this cache's clock
        for key, tokens, left, lifetime in entries:
            expiry = offset + float(left)
            if expiry >= 0:
                self.entries[key] = (tokens, expiry, float(lifetime))
        return True


_STATE_VERSION = 1
_CLOCK_SKEW = 60.0  # seconds a state's `at` may lie ahead of this run's start: another machine's clock
