"""A price file over the shipped table: every figure checked (an error names the file, the entry and the field), a
model or provider it names changed field by field (the shipped fields it does not give kept), and a run under a
price file that fails its checks warned and left unpriced, not stopped."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch._errors import PriceTableError
from toolsearch.cost import PromptCache, load_prices
from toolsearch.loop import run
from toolsearch.providers import ChatRequest, Message, ScriptedModel, call
from toolsearch.providers.anthropic import anthropic_payload
from toolsearch.session import SessionManager


def _file(tmp_path: Path, text: str, name: str = "prices.json") -> Path:
    path = tmp_path / name  # load_prices reads each path once: a second table in one test takes another name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "entry", "field", "must"),
    [
        ('{"models": {"gpt-4.1": {"input": NaN, "cache_read": 0.5}}}', "models.gpt-4.1", "input", "finite"),
        ('{"models": {"gpt-4.1": {"input": 2, "cache_read": Infinity}}}', "models.gpt-4.1", "cache_read", "finite"),
        ('{"models": {"gpt-4.1": {"input": 2, "cache_read": 0.5, "cache_write": -1}}}', "models.gpt-4.1",
         "cache_write", "non-negative"),
        ('{"models": {"gpt-4.1": {"input": "2", "cache_read": 0.5}}}', "models.gpt-4.1", "input", "number"),
        ('{"models": {"gpt-4.1": {"input": 2, "cache_read": 0.5, "min_cacheable_tokens": "1k"}}}', "models.gpt-4.1",
         "min_cacheable_tokens", "whole number"),
        ('{"providers": {"openai": {"increment_tokens": -128}}}', "providers.openai", "increment_tokens",
         "at least 1"),
        ('{"providers": {"openai": {"increment_tokens": 12.5}}}', "providers.openai", "increment_tokens",
         "whole number"),
        ('{"providers": {"openai": {"lifetime_seconds": 0}}}', "providers.openai", "lifetime_seconds", "above zero"),
        ('{"providers": {"openai": {"lookback_blocks": true}}}', "providers.openai", "lookback_blocks",
         "whole number"),
        ('{"providers": {"openai": {"formats": "openai_chat"}}}', "providers.openai", "formats", "list of names"),
        ('{"providers": {"openai": {"lifetimes": {"24h": "a day"}}}}', "providers.openai", "lifetimes", "seconds"),
        ('{"providers": {"anthropic": {"tool_use_system_prompt_tokens": {"auto": -1}}}}', "providers.anthropic",
         "tool_use_system_prompt_tokens", "whole token counts"),
        ('{"providers": {"openai": {"deferred_tools_in_prefix": "no"}}}', "providers.openai",
         "deferred_tools_in_prefix", "true or false"),
        ('{"models": {"gemini-2.5-pro": {"input": 1.25, "cache_read": 0.125, "long_context": '
         '{"above_tokens": 200000, "input": NaN, "cache_read": 0.25}}}}', "models.gemini-2.5-pro.long_context",
         "input", "finite"),
    ],
)
def test_a_bad_figure_names_the_file_the_entry_and_the_field(
    tmp_path: Path, text: str, entry: str, field: str, must: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(PriceTableError) as caught:
        load_prices(path)
    message = str(caught.value)
    assert message.startswith(str(path)), message
    assert f"{entry}: '{field}' must be" in message and must in message, message


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ('{"models": {"gpt-4.1": 2.5}}', "models.gpt-4.1"),
        ('{"providers": {"openai": "automatic"}}', "providers.openai"),
    ],
)
def test_an_entry_that_is_not_an_object_is_named(tmp_path: Path, text: str, entry: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(PriceTableError, match=rf"^{re.escape(str(path))}.*: {re.escape(entry)} must be an object"):
        load_prices(path)


@pytest.mark.parametrize("fmt", ["openai_chat", "anthropic"])
@pytest.mark.parametrize(
    "text, says",
    [
        ('{"models": {"gpt-4.1": 2.5}}', r"models\.gpt-4\.1 must be an object"),
        ('{"models": {"my-model": {"provider": "openai", "input": 1.0}}}',
         r"models\.my-model: 'cache_read' is missing"),
    ],
)
def test_a_run_under_a_bad_price_file_warns_and_is_unpriced_with_the_file_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, text: str, says: str
) -> None:
    # the price is a measurement: a price file that fails its checks leaves the run unpriced, as a request the
    # table cannot price does, instead of stopping every run of every model
    path = _file(tmp_path, text)
    monkeypatch.setenv("TOOLSEARCH_PRICES", str(path))
    with pytest.raises(PriceTableError, match=says):
        load_prices()
    sessions = SessionManager(ToolIndex.build([Tool("send_email", "Send an email")], "regex"))
    loaded = rf"no price: the price table could not be loaded: {re.escape(str(path))}.*{says}"
    with pytest.warns(UserWarning, match=loaded):
        result = run(ScriptedModel([call("send_email"), "done"], format=fmt), "mail", session=sessions.create("s"),
                     functions={"send_email": lambda **_: "ok"})
    assert result.output == "done" and result.price_usd is None
    assert result.unpriced is not None and re.search(says, result.unpriced)


def test_a_model_the_file_names_changes_the_fields_it_gives_and_keeps_the_rest(tmp_path: Path) -> None:
    # the documented shape, one figure: the run is priced, the other model of the same run alike
    path = _file(tmp_path, json.dumps({"models": {"claude-sonnet-4-6": {"input": 2.4}}}))
    shipped, price = load_prices().models["claude-sonnet-4-6"], load_prices(path).models["claude-sonnet-4-6"]
    assert price.input == 2.4 and price == dataclasses.replace(shipped, input=2.4)
    # a model the file does not name keeps every shipped figure
    assert load_prices(path).models["claude-opus-4-6"] == load_prices().models["claude-opus-4-6"]
    # null removes a shipped field: the 1-hour rate, and with it the pricing of 1-hour writes
    path = _file(tmp_path, json.dumps({"models": {"claude-sonnet-4-6": {"cache_write_1h": None}}}), "null.json")
    assert load_prices(path).models["claude-sonnet-4-6"] == dataclasses.replace(shipped, cache_write_1h=None)


def test_restating_a_claude_models_prices_keeps_its_write_rates_minimum_and_one_hour_rate(tmp_path: Path) -> None:
    # the shipped figures in the docs/benchmarks.md shape: the bill must not change (writes at $5 instead of $6.25,
    # reads priced below Opus's 4,096-token minimum, 1-hour writes unpriced, replacing the entry whole)
    path = _file(tmp_path, json.dumps({"models": {"claude-opus-4-6": {"input": 5.0, "cache_read": 0.5}}}))
    assert load_prices(path).models["claude-opus-4-6"] == load_prices().models["claude-opus-4-6"]
    tools = tuple(Tool(f"t{i}", "does a thing " * 120) for i in range(5))  # ~2,300 tokens: under 4,096
    requests = [
        ChatRequest(messages=(Message.user("hi"),), system="Be careful.", pinned=tools),
        ChatRequest(messages=(Message.user("hi"), Message.assistant("hello"), Message.user("more")),
                    system="Be careful.", pinned=tools),
    ]
    for options in ({}, {"cache_control": {"type": "ephemeral", "ttl": "1h"}}):
        bills = []
        for table in (load_prices(), load_prices(path)):
            cache = PromptCache.for_format("anthropic", "claude-opus-4-6", prices=table)
            payloads = [anthropic_payload(r, "claude-opus-4-6", **options) for r in requests]
            bills.append([cache.request(p, at=i) for i, p in enumerate(payloads)])
        assert bills[0] == bills[1] and bills[1][1].cache_read == 0  # Opus caches nothing below 4,096 tokens


def test_a_price_file_may_file_an_openai_format_under_a_provider_of_its_own(tmp_path: Path) -> None:
    azure = {"formats": ["openai_chat"], "default_model": "gpt-4.1", "lifetime_seconds": 300,
             "increment_tokens": 128, "min_cacheable_tokens": 1024}
    model = {"gpt-4.1": {"provider": "azure", "input": 2.2, "cache_read": 0.55}}
    table = load_prices(_file(tmp_path, json.dumps({"providers": {"azure": azure}, "models": model})))
    assert (table.formats["openai_chat"], table.formats["openai_responses"]) == ("azure", "openai")
    assert PromptCache.for_format("openai_chat", "gpt-4.1", prices=table).price.input == 2.2
    # both formats: the shipped provider may be left with none
    both = {"azure": {**azure, "formats": ["openai_chat", "openai_responses"]}, "openai": {"formats": []}}
    table = load_prices(_file(tmp_path, json.dumps({"providers": both, "models": model}), "both.json"))
    assert (table.formats["openai_chat"], table.formats["openai_responses"]) == ("azure", "azure")
    # one file filing a format under two providers is refused, saying how to move one
    clash = {"azure": azure, "openai": {"formats": ["openai_chat"]}}
    with pytest.raises(PriceTableError, match=r"'openai_chat' is providers\.\w+'s too\); a format has one provider"):
        load_prices(_file(tmp_path, json.dumps({"providers": clash, "models": model}), "clash.json"))


def test_a_provider_the_file_names_changes_only_the_rules_it_gives(tmp_path: Path) -> None:
    path = _file(tmp_path, json.dumps({"providers": {"openai": {"min_cacheable_tokens": 1, "increment_tokens": 1}}}))
    rules, shipped = load_prices(path).rules["openai"], load_prices().rules["openai"]
    assert (rules.min_cacheable_tokens, rules.increment_tokens) == (1, 1)
    assert (rules.lifetime_seconds, rules.lifetimes) == (shipped.lifetime_seconds, shipped.lifetimes)
