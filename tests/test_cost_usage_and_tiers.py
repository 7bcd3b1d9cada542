"""The provider's usage keeps Anthropic's cache writes (and their 1-hour part) apart from fresh input, and a long
prompt is priced at its model's long-context tier (Gemini 2.5 Pro above 200,000 tokens)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage

from toolsearch.cost import PromptCache, load_prices
from toolsearch.providers.anthropic import parse_message
from toolsearch.tools import NameMap


def _answer(usage: dict[str, Any]) -> AnthropicMessage:
    return AnthropicMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
    )


def test_anthropic_usage_keeps_cache_writes_and_their_one_hour_part_apart() -> None:
    fresh = parse_message(_answer({"input_tokens": 20_000, "output_tokens": 5, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 0}), NameMap()).usage
    written = parse_message(_answer({
        "input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 19_990, "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 19_990},
    }), NameMap()).usage
    assert fresh is not None and written is not None
    # the same prompt of 20,000 tokens, billed $0.06 fresh and $0.12 as a 1-hour write: recorded apart
    assert fresh.input_tokens == written.input_tokens == 20_000 and fresh != written
    assert written.cache_write_tokens == written.cache_write_1h_tokens == 19_990
    assert written.fresh_input_tokens == 10
    assert (fresh.cache_write_tokens, fresh.fresh_input_tokens) == (0, 20_000)
    assert written.to_dict()["cache_write_1h_tokens"] == 19_990
    mixed = parse_message(_answer({
        "input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000,
        "cache_creation": {"ephemeral_5m_input_tokens": 60, "ephemeral_1h_input_tokens": 40},
    }), NameMap()).usage
    assert mixed is not None
    assert (mixed.input_tokens, mixed.cached_input_tokens, mixed.cache_write_tokens, mixed.cache_write_1h_tokens,
            mixed.fresh_input_tokens) == (2112, 2000, 100, 40, 12)


def _gemini(words: int) -> dict[str, Any]:
    doc = "The quarterly report lists revenue for every region. " * words
    return {"model": "gemini-2.5-pro", "contents": [{"role": "user", "parts": [{"text": doc}]}]}


def test_a_gemini_pro_prompt_over_200k_tokens_is_priced_at_the_long_context_rates() -> None:
    tier = load_prices().models["gemini-2.5-pro"].long_context
    assert tier is not None and (tier.above_tokens, tier.input, tier.cache_read) == (200_000, 2.5, 0.25)
    assert tier.source.startswith("https://ai.google.dev/")
    long = PromptCache.for_format("gemini", "gemini-2.5-pro")
    first = long.request(_gemini(25_000))
    assert first.total > 200_000
    assert first.price_usd == pytest.approx(first.total * 2.5 / 1e6) == first.uncached_price_usd
    again = long.request(_gemini(25_000))  # the same prompt: read from the implicit cache at the tier's read rate
    assert again.cache_read == again.total and again.price_usd == pytest.approx(again.total * 0.25 / 1e6)
    short = PromptCache.for_format("gemini", "gemini-2.5-pro").request(_gemini(1_000))
    assert short.total < 200_000 and short.price_usd == pytest.approx(short.total * 1.25 / 1e6)


def test_a_price_file_gives_a_model_a_tier(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    entry = {"provider": "openai", "input": 1.0, "cache_read": 0.1,
             "long_context": {"above_tokens": 1_000, "input": 3.0, "cache_read": 0.3, "source": "my contract"}}
    path.write_text(json.dumps({"models": {"my-model": entry}}), encoding="utf-8")
    cache = PromptCache.for_format("openai_chat", "my-model", prices=load_prices(path))
    payload = {"messages": [{"role": "user", "content": "word " * 2_000}]}
    use = cache.request(payload)
    assert use.total > 1_000 and use.price_usd == pytest.approx(use.total * 3.0 / 1e6)
