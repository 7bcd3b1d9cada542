"""What a run is priced as: None (with the reason) when it is not priced at all, a model of another provider without
that format's caching (with a warning), Anthropic's tool-use system prompt on every request with tools, and the token
reports' wording for counts that estimate another provider's tokenizer."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from toolsearch import Tool, ToolIndex, UnknownModelPriceWarning
from toolsearch.cost import PromptCache, load_prices
from toolsearch.loop import run
from toolsearch.providers import ChatRequest, Message, ScriptedModel, call, registry
from toolsearch.providers.anthropic import anthropic_payload
from toolsearch.providers.openai import chat_payload
from toolsearch.providers.registry import get_format, register_format
from toolsearch.session import SessionManager
from toolsearch.tokens import request_tokens

EMAIL = Tool("send_email", "Send an email " + "with care " * 50)
FUNCTIONS: dict[str, Callable[..., Any]] = {"send_email": lambda **_: "ok"}
BIG = tuple(Tool(f"tool_{i}", "Looks things up in the archive. " * 60) for i in range(4))


@pytest.fixture(scope="module")
def sessions() -> SessionManager:
    return SessionManager(ToolIndex.build([EMAIL], "regex"))


# --- a run that was not priced ----------------------------------------------------------------------


def test_a_run_that_counted_no_tokens_has_no_price_and_says_why(sessions: SessionManager) -> None:
    result = run(ScriptedModel([call("send_email"), "done"]), "mail", session=sessions.create("uncounted"),
                 functions=FUNCTIONS, count_tokens=False)
    assert result.price_usd is None and result.cache is None and result.cache_read_tokens is None  # not 0.0: free
    assert result.unpriced is not None and "count_tokens=False" in result.unpriced
    assert result.cache_state is None


def test_a_run_in_a_format_the_table_lacks_has_no_price_warns_and_says_why(sessions: SessionManager) -> None:
    register_format(replace(get_format("openai_chat"), name="cost53_chat", label="Cost53 Chat"))  # a plug-in's
    try:
        model = ScriptedModel([call("send_email"), "done"], format="cost53_chat")
        with pytest.warns(UserWarning, match="no caching rules for wire format 'cost53_chat'"):
            result = run(model, "mail", session=sessions.create("plug-in"), functions=FUNCTIONS)
    finally:
        registry.FORMATS.unregister("cost53_chat")  # registered for this test only
    assert result.total_tokens > 0  # counted, but not priced
    assert result.price_usd is None and result.fresh_tokens is None
    assert result.unpriced is not None and "'cost53_chat'" in result.unpriced


def test_a_request_the_table_cannot_price_leaves_the_run_unpriced_not_failed(sessions: SessionManager) -> None:
    # a caller's own cache_control with a lifetime the table does not know: the run goes on, without a price
    model = ScriptedModel([call("send_email"), "done"], format="anthropic")
    model.payload = lambda request: {  # type: ignore[method-assign]
        **anthropic_payload(request, "claude-sonnet-4-6"), "cache_control": {"type": "ephemeral", "ttl": "2d"}
    }
    with pytest.warns(UserWarning, match="'2d'"):
        result = run(model, "mail", session=sessions.create("bad-ttl"), functions=FUNCTIONS)
    assert result.output == "done" and result.price_usd is None
    assert result.unpriced is not None and result.unpriced.startswith("request 1 could not be priced")


# --- a model of another provider ---------------------------------------------------------------------


def test_a_model_of_another_provider_is_priced_without_the_formats_caching_and_warned() -> None:
    def payload(*turns: Message) -> dict[str, Any]:
        return chat_payload(ChatRequest(messages=turns, pinned=BIG), "claude-sonnet-4-6")

    with pytest.warns(UnknownModelPriceWarning, match="'claude-sonnet-4-6' is anthropic's.*openai_chat format"):
        cache = PromptCache.for_format("openai_chat", "claude-sonnet-4-6")
    first = cache.request(payload(Message.user("hi")))
    second = cache.request(payload(Message.user("hi"), Message.assistant("ok"), Message.user("more")))
    for use in (first, second):  # Claude's own input rate, nothing read or written
        assert (use.cache_read, use.cache_write, use.fresh) == (0, 0, use.total)
        assert use.price_usd == pytest.approx(use.total * 3.0 / 1e6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per format and model
        PromptCache.for_format("openai_chat", "claude-sonnet-4-6")


def test_a_price_file_that_files_the_model_under_the_formats_provider_gets_its_caching(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    entry = {"provider": "openai", "input": 3.0, "cache_read": 0.3, "source": "my proxy's price list"}
    path.write_text(json.dumps({"models": {"claude-via-proxy": entry}}), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = PromptCache.for_format("openai_chat", "claude-via-proxy", prices=load_prices(path))
    payload = chat_payload(ChatRequest(messages=(Message.user("hi"),), pinned=BIG), "claude-via-proxy")
    cache.request(payload)
    assert cache.request(payload).cache_read > 1_024


# --- Anthropic's tool-use system prompt -------------------------------------------------------------


def test_anthropic_requests_with_tools_pay_the_tool_use_system_prompt() -> None:
    rules = load_prices().rules["anthropic"]
    assert dict(rules.tool_use_prompt_tokens) == {"auto": 346, "none": 346, "any": 313, "tool": 313}
    request = ChatRequest(messages=(Message.user("hi"),), pinned=(Tool("t", "d"),))
    choices: list[tuple[dict[str, Any], int]] = [
        ({}, 346), ({"tool_choice": {"type": "any"}}, 313), ({"tool_choice": {"type": "none"}}, 346)
    ]
    for options, overhead in choices:
        payload = anthropic_payload(request, "claude-sonnet-4-6", prompt_caching=False, **options)
        use = PromptCache.for_format("anthropic").request(payload)
        assert use.total == request_tokens(payload).total + overhead, options
    plain = anthropic_payload(ChatRequest(messages=(Message.user("hi"),)), "claude-sonnet-4-6", prompt_caching=False)
    assert PromptCache.for_format("anthropic").request(plain).total == request_tokens(plain).total  # no tools: none
    chat = chat_payload(request, "gpt-4.1")
    assert PromptCache.for_format("openai_chat").request(chat).total == request_tokens(chat).total  # not OpenAI's


def test_the_tool_use_prompt_is_cached_with_the_tools_it_precedes() -> None:
    payload = anthropic_payload(ChatRequest(messages=(Message.user("hi"),), pinned=BIG), "claude-sonnet-4-6")
    cache = PromptCache.for_format("anthropic")
    first = cache.request(payload)
    assert first.cache_write == first.total == request_tokens(payload).total + 346
    assert cache.request(payload).cache_read == first.total


# --- what the token reports call their counts ---------------------------------------------------------


def test_counts_of_another_providers_requests_are_called_estimates_in_one_wording() -> None:
    from toolsearch.tokens import count_wording  # the one wording the demo and the token benchmark share

    assert count_wording("openai_chat") == "exact o200k_base counts"
    wording = count_wording("anthropic", compared="the arms")
    assert "exact" not in wording and "an estimate of Anthropic's" in wording and "the arms" in wording
    assert count_wording("gemini", noun="input tokens").endswith("and an estimate of Gemini's)")


def test_the_token_benchmark_calls_anthropic_counts_estimates_and_names_the_tool_use_prompt(tmp_path: Path) -> None:
    from benchmarks import tokens as bench  # the clone's root is on the path (pyproject's pythonpath)
    from benchmarks.lib import resolve_datasets

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "tools.jsonl").write_text(json.dumps(EMAIL.to_dict()) + "\n", encoding="utf-8")
    task = {"id": "t1", "query": "Send an email to Bob saying hello.", "relevant": ["send_email"]}
    (folder / "queries.jsonl").write_text(json.dumps(task) + "\n", encoding="utf-8")
    texts = {}
    for fmt in ("anthropic", "openai_chat"):
        report = bench.run(resolve_datasets([str(folder)]), ["bm25"], [None], limit=1, fmt=fmt)
        texts[fmt] = bench.render_markdown(report)
    anthropic, openai = texts["anthropic"], texts["openai_chat"]
    assert "exact" not in anthropic.split("## ")[0] and "estimate of Anthropic's" in anthropic
    assert "tool-use system prompt of 346 tokens" in anthropic and "a few template tokens" not in anthropic
    assert "Mean exact o200k_base input tokens per task" in openai and "tool-use system prompt" not in openai
