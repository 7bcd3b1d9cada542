"""A price file over the shipped table: every figure checked (an error names the file, the entry and the field), and
a model it names replaced whole, as the docs say, while a provider keeps the rules the file does not give."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch._errors import PriceTableError
from toolsearch.cost import load_prices
from toolsearch.loop import run
from toolsearch.providers import ScriptedModel, call
from toolsearch.session import SessionManager


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.json"
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


def test_a_run_under_a_bad_price_file_fails_with_the_file_named_not_a_bare_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSEARCH_PRICES", str(_file(tmp_path, '{"models": {"gpt-4.1": 2.5}}')))
    sessions = SessionManager(ToolIndex.build([Tool("send_email", "Send an email")], "regex"))
    with pytest.raises(PriceTableError, match=r"models\.gpt-4\.1 must be an object"):
        run(ScriptedModel([call("send_email"), "done"]), "mail", session=sessions.create("s"),
            functions={"send_email": lambda **_: "ok"})


def test_a_model_the_file_names_is_replaced_whole(tmp_path: Path) -> None:
    shipped = load_prices().models["claude-sonnet-4-6"]
    path = _file(tmp_path, json.dumps({"models": {"claude-sonnet-4-6": {"input": 1.0, "cache_read": 0.1}}}))
    price = load_prices(path).models["claude-sonnet-4-6"]
    # none of the shipped figures survives: a write at $3.75 on a $1 input would be nobody's price
    assert (price.input, price.cache_read, price.cache_write, price.cache_write_1h) == (1.0, 0.1, None, None)
    assert (price.min_cacheable_tokens, price.source) == (None, "")
    assert price.provider == shipped.provider == "anthropic"  # whose model it is, kept when the file says nothing
    # a model the file does not name keeps every shipped figure
    assert load_prices(path).models["claude-opus-4-6"] == load_prices().models["claude-opus-4-6"]


def test_a_provider_the_file_names_changes_only_the_rules_it_gives(tmp_path: Path) -> None:
    path = _file(tmp_path, json.dumps({"providers": {"openai": {"min_cacheable_tokens": 1, "increment_tokens": 1}}}))
    rules, shipped = load_prices(path).rules["openai"], load_prices().rules["openai"]
    assert (rules.min_cacheable_tokens, rules.increment_tokens) == (1, 1)
    assert (rules.lifetime_seconds, rules.lifetimes) == (shipped.lifetime_seconds, shipped.lifetimes)
