"""The prompt-caching cost model: prefixes in render order, the providers' rules, the price table, LoopResult."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch._errors import ToolSearchError
from toolsearch.cost import Block, CacheRules, ModelPrice, PromptCache, load_prices, request_blocks
from toolsearch.loop import run
from toolsearch.providers import ChatRequest, Message, ScriptedModel, call, search
from toolsearch.providers.anthropic import anthropic_payload
from toolsearch.providers.openai import chat_payload
from toolsearch.session import SessionManager
from toolsearch.tokens import count_json_tokens, request_tokens, without_cache_markers

OPENAI = CacheRules("openai", min_cacheable_tokens=1024, increment_tokens=128, lifetime_seconds=300)
ANTHROPIC = CacheRules(
    "anthropic",
    min_cacheable_tokens=1024,
    lifetime_seconds=300,
    breakpoints=("tools", "system", "last"),
    lookback_blocks=20,
    deferred_tools_in_prefix=False,
)
GPT = ModelPrice("m", "openai", input=2.0, cache_read=0.5)
CLAUDE = ModelPrice("c", "anthropic", input=3.0, cache_read=0.3, cache_write=3.75)


def _b(part: str, key: str, tokens: int) -> Block:
    return Block(part, key, tokens)  # type: ignore[arg-type]


def _tools(*keys: str, tokens: int = 400) -> list[Block]:
    return [_b("tools", k, tokens) for k in keys]


def test_openai_reuses_the_longest_earlier_prefix_in_128_token_steps() -> None:
    cache = PromptCache(OPENAI, GPT, "openai_chat")
    first = [*_tools("a", "b", "c"), _b("system", "s", 100), _b("messages", "u", 50)]
    use = cache.blocks(first)
    assert (use.fresh, use.cache_read, use.cache_write) == (1350, 0, 0)
    second = [*first, _b("messages", "call", 30), _b("messages", "result", 30)]
    use = cache.blocks(second)
    assert use.cache_read == 1350 // 128 * 128  # 1,280: whole 128-token steps of the shared 1,350
    assert use.fresh == 1410 - 1280
    assert use.price_usd == pytest.approx((130 * 2.0 + 1280 * 0.5) / 1e6)
    assert use.uncached_price_usd == pytest.approx(1410 * 2.0 / 1e6)


def test_openai_caches_nothing_below_its_minimum() -> None:
    cache = PromptCache(OPENAI, GPT, "openai_chat")
    short = [*_tools("a"), _b("messages", "u", 100)]
    cache.blocks(short)
    assert cache.blocks([*short, _b("messages", "x", 10)]).cache_read == 0


def test_a_changed_tools_array_loses_everything_after_the_change() -> None:
    cache = PromptCache(OPENAI, GPT, "openai_chat")
    cache.blocks([*_tools("a", "b", "c"), _b("system", "s", 100)])
    # a tool inserted in the middle: only the first tool's prefix matches, below the minimum
    assert cache.blocks([*_tools("a", "new", "b", "c"), _b("system", "s", 100)]).cache_read == 0
    # a tool appended at the end: the old tools prefix (1,200 tokens) is still a prefix
    grown = cache.blocks([*_tools("a", "b", "c", "d"), _b("system", "s", 100)])
    assert grown.cache_read == 1152  # 1,200 in 128-token steps


def test_the_cache_expires_after_its_lifetime() -> None:
    cache = PromptCache(OPENAI, GPT, "openai_chat")
    blocks = _tools("a", "b", "c")
    cache.blocks(blocks, at=0)
    assert cache.blocks(blocks, at=299).cache_read > 0
    assert cache.blocks(blocks, at=299 + 301).cache_read == 0  # idle longer than the lifetime since the last use


def test_anthropic_writes_at_breakpoints_and_reads_the_tools_prefix_after_a_discovery() -> None:
    cache = PromptCache(ANTHROPIC, CLAUDE, "anthropic")
    first = [*_tools("a", "b", "c"), _b("system", "s", 100), _b("messages", "u", 50)]
    use = cache.blocks(first)
    assert (use.fresh, use.cache_write, use.cache_read) == (0, 1350, 0)
    # the injected form appends a discovered tool: the entry at the end of the old tools is read,
    # the system text and the messages after it are written again
    second = [*_tools("a", "b", "c", "d"), _b("system", "s", 100), _b("messages", "u", 50), _b("messages", "r", 20)]
    use = cache.blocks(second)
    assert (use.cache_read, use.cache_write, use.fresh) == (1200, 1770 - 1200, 0)
    assert use.price_usd == pytest.approx((1200 * 0.3 + 570 * 3.75) / 1e6)
    # a fixed tools array (the native form) reads the whole previous request
    third = [*second, _b("messages", "x", 10)]
    assert cache.blocks(third).cache_read == 1770


def test_anthropic_breakpoints_look_back_a_limited_number_of_blocks() -> None:
    cache = PromptCache(ANTHROPIC, CLAUDE, "anthropic")
    head = _tools("a", "b", "c")
    cache.blocks(head)  # an entry at the end of the tools only
    tail = [_b("messages", f"m{i}", 5) for i in range(25)]
    rules = CacheRules("anthropic", 1024, breakpoints=("last",), lookback_blocks=20)
    limited = PromptCache(rules, CLAUDE, "anthropic", entries=dict(cache.entries))
    assert limited.blocks(head + tail).cache_read == 0  # the entry is 25 blocks before the only breakpoint
    assert cache.blocks(head + tail).cache_read == 1200  # the tools breakpoint finds it


def test_anthropic_does_not_cache_a_prompt_below_the_minimum() -> None:
    cache = PromptCache(ANTHROPIC, CLAUDE, "anthropic")
    small = [_b("tools", "t", 200), _b("system", "s", 100), _b("messages", "u", 50)]
    assert cache.blocks(small).fresh == 350
    assert cache.blocks([*small, _b("messages", "r", 10)]).cache_read == 0


def _tool(name: str) -> Tool:
    return Tool(name, f"Does {name} things for the user with many options.", {"type": "object", "properties": {}})


def test_blocks_follow_the_render_order_and_count_like_the_token_counter() -> None:
    request = ChatRequest(
        messages=(Message.user("hello"),), system="be brief", search_tool=_tool("tool_search"),
        discovered=(_tool("alpha"),),
    )
    payload = chat_payload(request, "m")
    blocks = request_blocks(payload, "openai_chat")
    assert [b.part for b in blocks] == ["tools", "tools", "system", "messages"]
    assert sum(b.tokens for b in blocks) == request_tokens(payload).total


def test_anthropic_native_leaves_deferred_tools_out_and_prices_tool_references_where_they_stand() -> None:
    found = _tool("alpha")
    call_ = search("alpha", id="c1")
    request = ChatRequest(
        messages=(
            Message.user("find alpha"),
            Message.assistant(tool_calls=[call_]),
            Message.tool(call_, "found alpha", tool_references=[found]),
        ),
        search_tool=_tool("tool_search"),
        discovered=(found,),
        tool_search_mode="native",
    )
    payload = anthropic_payload(request, "m")
    assert any(t.get("defer_loading") for t in payload["tools"])
    blocks = request_blocks(payload, "anthropic", rules=ANTHROPIC)
    assert [b.part for b in blocks] == ["tools", "messages", "messages", "messages"]
    definition = count_json_tokens(found.to_anthropic())
    result_message = payload["messages"][-1]
    assert blocks[-1].marked  # the provider's breakpoint at the end of the conversation
    assert blocks[-1].tokens == count_json_tokens(without_cache_markers(result_message)) + definition
    # with a rule set that keeps deferred tools in the prefix (OpenAI), the tool is a block of its own
    assert [b.part for b in request_blocks(payload, "anthropic", rules=OPENAI)].count("tools") == 2


def test_the_shipped_price_table_cites_a_source_for_every_model() -> None:
    table = load_prices()
    assert table.model_for("anthropic").cache_read < table.model_for("anthropic").input
    assert table.rules_for("openai_chat").increment_tokens == 128
    assert table.rules_for("anthropic").breakpoints == ("tools", "system", "last")
    assert all(m.source.startswith("https://") for m in table.models.values())


def test_a_user_price_file_overrides_the_shipped_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"gpt-4.1": {"input": 1.0, "cache_read": 0.1}}}), encoding="utf-8")
    assert load_prices(path).model_for("openai_chat").input == 1.0
    assert load_prices(path).model_for("anthropic").input == load_prices().model_for("anthropic").input
    monkeypatch.setenv("TOOLSEARCH_PRICES", str(path))
    assert load_prices().model_for("openai_chat", "gpt-4.1").cache_read == 0.1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"models": {"gpt-4.1": {"input": -1}}}), "non-negative number"),
        (json.dumps({"models": {"x": {"provider": "nobody", "input": 1, "cache_read": 1}}}), "'provider' must be"),
    ],
)
def test_a_bad_price_file_says_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ToolSearchError, match=message):
        load_prices(path)


def test_loop_result_reports_cache_tokens_and_price_per_request() -> None:
    tools = [_tool(f"tool_{i}") for i in range(60)]
    sessions = SessionManager(ToolIndex.build(tools, backend="bm25"))
    model = ScriptedModel([call("tool_3"), call("tool_4"), "done"], format="anthropic")
    result = run(
        model,
        "use tool 3 then tool 4",
        session=sessions.create("s", allowed=None),
        functions={t.name: (lambda **_: "ok") for t in tools},
        tool_search="off",
    )
    assert len(result.requests) == 3
    first, second, third = (r.cache for r in result.requests)
    assert first is not None and second is not None and third is not None
    assert first.cache_read == 0 and first.cache_write > 1024  # every tool: above the minimum, written once
    assert second.cache_read >= first.cache_write  # the whole first request is a prefix of the second
    assert third.cache_read >= second.cache_read
    assert result.cache_read_tokens == first.cache_read + second.cache_read + third.cache_read
    assert result.fresh_tokens + result.cache_write_tokens + result.cache_read_tokens == sum(
        r.cache.total for r in result.requests if r.cache
    )
    assert 0 < result.price_usd < result.cache.uncached_price_usd
    assert result.requests[1].to_dict()["cache"]["cache_read"] == second.cache_read


def _anthropic_request(*messages: Message, discovered: tuple[Tool, ...] = ()) -> ChatRequest:
    return ChatRequest(
        messages=messages, system="Use the tools. " * 400, search_tool=_tool("tool_search"), discovered=discovered
    )


def test_anthropic_breakpoints_are_the_blocks_a_request_marks() -> None:
    request = _anthropic_request(Message.user("find alpha"), discovered=(_tool("alpha"), _tool("beta")))
    payload = anthropic_payload(request, "m")
    blocks = request_blocks(payload, "anthropic", rules=ANTHROPIC)
    # the last tool, the system text and the last message: where cost.py's default rules put them
    assert [b.part for b in blocks if b.marked] == ["tools", "system", "messages"]
    assert [b.marked for b in blocks if b.part == "tools"] == [False, False, True]
    # markers are not content: the same request without them counts and matches the same
    unmarked = request_blocks(anthropic_payload(request, "m", prompt_caching=False), "anthropic", rules=ANTHROPIC)
    assert [(b.key, b.tokens) for b in unmarked] == [(b.key, b.tokens) for b in blocks]
    assert not any(b.marked for b in unmarked)
    assert request_tokens(payload) == request_tokens(anthropic_payload(request, "m", prompt_caching=False))


def test_anthropic_caches_only_what_a_request_marks() -> None:
    first = _anthropic_request(Message.user("find alpha"))
    call_ = call("alpha", id="c1")
    second = _anthropic_request(
        Message.user("find alpha"), Message.assistant(tool_calls=[call_]), Message.tool(call_, "ok")
    )
    marked = PromptCache(ANTHROPIC, CLAUDE, "anthropic")
    assert marked.request(anthropic_payload(first, "m")).cache_write > 1024
    assert marked.request(anthropic_payload(second, "m")).cache_read > 1024  # the whole first request
    # without cache_control the API caches nothing, and neither does the model of it
    plain = PromptCache(ANTHROPIC, CLAUDE, "anthropic")
    for request in (first, second):
        use = plain.request(anthropic_payload(request, "m", prompt_caching=False))
        assert (use.cache_write, use.cache_read) == (0, 0) and use.fresh == use.total > 1024
    # a top-level cache_control (the API's automatic caching) is a breakpoint on the last block
    auto = PromptCache(ANTHROPIC, CLAUDE, "anthropic")
    options = {"cache_control": {"type": "ephemeral"}}
    auto.request(anthropic_payload(first, "m", prompt_caching=False, **options))
    assert auto.request(anthropic_payload(second, "m", prompt_caching=False, **options)).cache_read > 1024


def test_anthropic_marks_the_last_loaded_tool_not_a_deferred_one() -> None:
    found = _tool("alpha")
    call_ = search("alpha", id="c1")
    request = ChatRequest(
        messages=(
            Message.user("find alpha"),
            Message.assistant(tool_calls=[call_]),
            Message.tool(call_, "found alpha", tool_references=[found]),
        ),
        search_tool=_tool("tool_search"),
        discovered=(found,),
        tool_search_mode="native",
    )
    tools = anthropic_payload(request, "m")["tools"]
    assert [("cache_control" in t, bool(t.get("defer_loading"))) for t in tools] == [(True, False), (False, True)]


def test_anthropic_usage_counts_the_part_of_the_prompt_served_from_or_written_to_the_cache() -> None:
    from anthropic.types import Message as AnthropicMessage

    from toolsearch.providers.anthropic import parse_message
    from toolsearch.tools import NameMap

    response = AnthropicMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            # Anthropic reports the uncached tail apart from the cache reads and writes
            "usage": {
                "input_tokens": 12,
                "output_tokens": 3,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 2000,
            },
        }
    )
    usage = parse_message(response, NameMap()).usage
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens, usage.total_tokens) == (2112, 2000, 2115)


def test_gemini_payloads_are_blocks_in_render_order_and_priced_with_implicit_caching() -> None:
    from toolsearch.providers.gemini import gemini_payload

    request = ChatRequest(
        messages=(Message.user("hello"),), system="be brief", search_tool=_tool("tool_search"),
        discovered=(_tool("alpha"),),
    )
    payload = gemini_payload(request, "gemini-2.5-flash")
    blocks = request_blocks(payload, "gemini")
    assert [b.part for b in blocks] == ["tools", "tools", "system", "messages"]
    assert sum(b.tokens for b in blocks) == request_tokens(payload).total
    assert request_tokens(payload).tools > 0 and request_tokens(payload).system > 0
    # the shipped rules: an automatic prefix cache from 1,024 tokens, reads at $0.03 of $0.30, no write charge
    cache = PromptCache.for_format("gemini")
    assert (cache.price.model, cache.price.input, cache.price.cache_read) == ("gemini-2.5-flash", 0.3, 0.03)
    big = [*_tools("a", "b", "c"), _b("messages", "m1", 100)]
    first = cache.blocks(big)
    second = cache.blocks([*big, _b("messages", "m2", 50)])
    assert (first.cache_write, first.cache_read) == (0, 0)
    assert (second.fresh, second.cache_read) == (50, 1300)
    assert second.price_usd == pytest.approx((50 * 0.3 + 1300 * 0.03) / 1e6)


def test_a_model_is_priced_as_the_table_entry_it_names_and_an_unknown_one_warns_once() -> None:
    import warnings

    from toolsearch import UnknownModelPriceWarning

    table = load_prices()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known model, a dated snapshot or Gemini's models/ prefix: no warning
        for fmt, model, entry in [("openai_chat", "gpt-5-mini-2025-08-07", "gpt-5-mini"),
                                  ("anthropic", "claude-opus-4-6-20260101", "claude-opus-4-6"),
                                  ("gemini", "models/gemini-2.5-pro", "gemini-2.5-pro"),
                                  ("openai_chat", "gpt-4.1", "gpt-4.1")]:
            price = table.model_for(fmt, model)
            assert (price.model, price.priced_as, price.input) == (model, entry, table.models[entry].input)
        assert table.rules_for("gemini", "models/gemini-2.5-pro").min_cacheable_tokens == 2048
    unknown = "gemini-2.5-flash-lite-test-only"  # another model, not a snapshot of gemini-2.5-flash
    with pytest.warns(UnknownModelPriceWarning, match=f"{unknown}.*'gemini-2.5-flash'"):
        price = table.model_for("gemini", unknown)
    assert (price.model, price.priced_as) == (unknown, "gemini-2.5-flash")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PromptCache.for_format("gemini", unknown).price.priced_as == "gemini-2.5-flash"  # warned once


def test_a_scripted_run_is_priced_as_the_providers_default_without_a_warning() -> None:
    import warnings

    from toolsearch import UnknownModelPriceWarning

    sessions = SessionManager(ToolIndex.build([Tool("send_email", "Send an email")], "regex"))
    functions = {"send_email": lambda **_: "ok"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownModelPriceWarning)  # the demo, the main job, runs a scripted model
        result = run(ScriptedModel([call("send_email"), "done"]), "mail", session=sessions.create("a"),
                     functions=functions)
    assert result.requests[0].cache is not None and result.requests[0].cache.price_usd > 0
    with pytest.warns(UnknownModelPriceWarning, match="'made-up-model'"):
        run(ScriptedModel([call("send_email"), "done"], priced_as="made-up-model"), "mail",
            session=sessions.create("b"), functions=functions)
