"""Cache lifetimes a request chooses: Anthropic's cache_control ttl ("1h" billed and aged as the 1-hour cache) and
OpenAI's prompt_cache_retention ("24h"), priced through the real providers' payloads and the shipped price table."""

from __future__ import annotations

from typing import Any

import pytest

from toolsearch import Tool
from toolsearch._errors import PriceTableError
from toolsearch.cost import PromptCache, load_prices
from toolsearch.providers import ChatRequest, Message
from toolsearch.providers.anthropic import anthropic_payload
from toolsearch.providers.openai import chat_payload

ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}
TOOLS = tuple(Tool(f"tool_{i}", "Looks things up in the archive. " * 60) for i in range(4))  # ~1,600 tokens


def _anthropic(**options: Any) -> dict[str, Any]:
    request = ChatRequest(messages=(Message.user("hi"),), system="Be brief.", pinned=TOOLS)
    return anthropic_payload(request, "claude-sonnet-4-6", **options)


def test_a_one_hour_breakpoint_is_written_at_the_one_hour_rate_and_read_an_hour_long() -> None:
    price = load_prices().models["claude-sonnet-4-6"]
    assert price.cache_write_1h == 6.0  # the shipped table's 1-hour write rate, 2x input
    payload = _anthropic(cache_control=ONE_HOUR)  # the API's automatic caching, for an hour
    cache = PromptCache.for_format("anthropic", "claude-sonnet-4-6")
    first = cache.request(payload, at=0)
    assert first.cache_write == first.total and first.fresh == 0
    assert first.price_usd == pytest.approx(first.total * 6.0 / 1e6)  # not 3.75, the 5-minute rate
    later = cache.request(payload, at=600)  # ten minutes on: past 5 minutes, inside the hour
    assert (later.cache_read, later.cache_write) == (first.total, 0)
    assert later.price_usd == pytest.approx(first.total * 0.3 / 1e6)
    # read at 600 s, the entry lives until 600 + 3,600: gone only after that
    assert cache.request(payload, at=600 + 3_599).cache_read == first.total
    assert cache.request(payload, at=600 + 3_599 + 3_601).cache_read == 0


def test_the_default_breakpoints_still_expire_after_five_minutes() -> None:
    cache = PromptCache.for_format("anthropic", "claude-sonnet-4-6")
    payload = _anthropic()
    first = cache.request(payload, at=0)
    assert first.price_usd == pytest.approx(first.total * 3.75 / 1e6)
    assert cache.request(payload, at=600).cache_read == 0  # written again, not read


def test_the_provider_marks_every_breakpoint_with_the_lifetime_the_caller_chose() -> None:
    # the API refuses a 5-minute breakpoint ahead of a 1-hour one: the tools and system markers follow the option
    payload = _anthropic(cache_control=ONE_HOUR)
    marked = [t["cache_control"] for t in payload["tools"] if "cache_control" in t]
    marked += [b["cache_control"] for b in payload["system"] if "cache_control" in b]
    assert marked == [ONE_HOUR, ONE_HOUR] and payload["cache_control"] == ONE_HOUR
    assert [t.get("cache_control") for t in _anthropic()["tools"]][-1] == {"type": "ephemeral"}


def test_mixed_lifetimes_bill_each_segment_at_the_rate_of_the_breakpoint_that_ends_it() -> None:
    payload = _anthropic()
    payload["tools"][-1]["cache_control"] = ONE_HOUR  # the tools for an hour, the system and last turn for 5 minutes
    cache = PromptCache.for_format("anthropic", "claude-sonnet-4-6")
    first = cache.request(payload, at=0)
    tools_only = PromptCache.for_format("anthropic", "claude-sonnet-4-6").request(
        {**payload, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}, at=0
    )
    hour = tools_only.cache_write  # the tokens up to the 1-hour breakpoint (the tools and the tool-use prompt)
    assert 0 < hour < first.cache_write == first.total
    assert first.price_usd == pytest.approx((hour * 6.0 + (first.total - hour) * 3.75) / 1e6)
    assert cache.request(payload, at=600).cache_read == hour  # only the 1-hour entry outlives 5 minutes


def test_a_lifetime_the_table_does_not_know_is_refused() -> None:
    payload = _anthropic(cache_control={"type": "ephemeral", "ttl": "2h"})
    with pytest.raises(PriceTableError, match=r"'2h'.*anthropic \('5m', '1h'\)"):
        PromptCache.for_format("anthropic", "claude-sonnet-4-6").request(payload)
    request = ChatRequest(messages=(Message.user("hi"),), pinned=TOOLS)
    with pytest.raises(PriceTableError, match=r"'7d'.*openai \('in_memory', '24h'\)"):
        PromptCache.for_format("openai_chat", "gpt-4.1").request(
            chat_payload(request, "gpt-4.1", prompt_cache_retention="7d")
        )


def test_openai_extended_retention_keeps_the_prefix_for_a_day() -> None:
    request = ChatRequest(messages=(Message.user("hi"),), pinned=TOOLS)
    for retention, lifetime in (("24h", 86_400), ("in_memory", 300), (None, 300)):
        options: dict[str, Any] = {"prompt_cache_retention": retention} if retention else {}
        payload = chat_payload(request, "gpt-4.1", **options)
        cache = PromptCache.for_format("openai_chat", "gpt-4.1")
        first = cache.request(payload, at=0)
        assert cache.request(payload, at=lifetime - 1).cache_read == first.total // 128 * 128, retention
        assert cache.request(payload, at=2 * lifetime).cache_read == 0, retention


def test_a_callers_own_one_hour_system_blocks_get_a_one_hour_tools_breakpoint_ahead_of_them() -> None:
    # the tools come first: a 5-minute breakpoint there, ahead of the caller's 1-hour system block, the API refuses
    system = [{"type": "text", "text": "Rules. " * 400, "cache_control": ONE_HOUR}]
    request = ChatRequest(messages=(Message.user("hi"),), pinned=TOOLS)
    payload = anthropic_payload(request, "claude-sonnet-4-6", system=system)
    ttls = [t["cache_control"].get("ttl", "5m") for t in payload["tools"] if "cache_control" in t]
    ttls += [b["cache_control"].get("ttl", "5m") for b in payload["system"] if "cache_control" in b]
    ttls += [b["cache_control"].get("ttl", "5m") for m in payload["messages"] if isinstance(m["content"], list)
             for b in m["content"] if "cache_control" in b]
    assert ttls == ["1h", "1h", "5m"]  # longer lifetimes first, as the API requires
    assert payload["system"] == system  # the caller's blocks stay as given
    # 5-minute (or unmarked) system blocks leave the default
    short = [{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}]
    plain = anthropic_payload(request, "claude-sonnet-4-6", system=short)
    assert [t.get("cache_control") for t in plain["tools"]][-1] == {"type": "ephemeral"}
