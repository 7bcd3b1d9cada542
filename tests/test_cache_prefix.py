"""Cache-stable exposure: within a session each request extends the previous one, through the real SDKs.

The loop drives the real `openai` / `anthropic` clients against the local fake server, which records
every request body. Request by request, across two runs of one conversation: the tools array keeps
every tool it had, in place (pinned, tool_search, then discovered tools in discovery order), the
meta-tool's definition and the system text never change, and the earlier messages come back
unchanged, so a provider's prompt cache keeps everything up to the new part. The native forms
(Anthropic `defer_loading` + `tool_reference`, Responses client `tool_search`) keep the loaded tools
array fixed. The cost model, run over the recorded bodies, reads back exactly what was kept.

Anthropic caches only up to `cache_control` breakpoints, so its requests carry three: the last
loaded tool, the system text and the last block. A marker is not content (the cache matches
blocks without it), so the prefix checks compare requests with their markers taken off.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeLLMServer, Request, Turn

from toolsearch import Tool, ToolIndex, provider_safe_name
from toolsearch.cost import CacheRules, ModelPrice, PromptCache
from toolsearch.loop import run
from toolsearch.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from toolsearch.session import SessionManager
from toolsearch.tokens import without_cache_markers

FORMS = [
    ("openai_chat", "schema"),
    ("openai_responses", "schema"),
    ("openai_responses", "native"),
    ("anthropic", "schema"),
    ("anthropic", "native"),
]


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(demo_tools, backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def _model(fmt: str, server: FakeLLMServer) -> Any:
    if fmt == "openai_chat":
        return OpenAIChatModel(server.openai(), "gpt-test")
    if fmt == "openai_responses":
        return OpenAIResponsesModel(server.openai(), "gpt-test")
    return AnthropicModel(server.anthropic(), "claude-test", max_tokens=256)


def _search(query: str) -> Turn:
    return Turn(tool_calls=[("tool_search", {"query": query, "max_results": 2})])


def _name(tool: dict[str, Any]) -> str:
    return str(tool.get("name") or tool.get("function", {}).get("name") or tool.get("type"))


def _loaded(request: Request) -> list[dict[str, Any]]:
    return [without_cache_markers(t) for t in request.tools if not t.get("defer_loading")]


def _tools(request: Request) -> list[dict[str, Any]]:
    return [without_cache_markers(t) for t in request.tools]


def _messages(request: Request) -> list[dict[str, Any]]:
    return [without_cache_markers(m) for m in request.messages]


def _markers(request: Request) -> list[str]:
    """Where an Anthropic request puts its cache_control breakpoints."""
    found = [f"tool {_name(t)}" for t in request.tools if "cache_control" in t]
    system = request.body.get("system")
    found += ["system" for b in system or () if isinstance(system, list) and "cache_control" in b]
    for i, m in enumerate(request.messages):
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        found += [f"message {i} block {j}" for j, b in enumerate(blocks) if "cache_control" in b]
    return found


def _conversation(fmt: str, mode: str, server: FakeLLMServer, index: ToolIndex) -> tuple[Any, list[str]]:
    """Two runs of one session: two searches then an answer, then a follow-up turn with one more search."""
    pinned = index.catalog.names[0]
    session = SessionManager(index).create("cache", pinned=[pinned])
    server.enqueue(_search("weather forecast"), _search("send an email"), Turn(text="Done."))
    first = run(_model(fmt, server), "Weather in Paris, then email it.", session=session, tool_search_mode=mode)
    server.enqueue(_search("create a calendar event"), Turn(text="Booked."))
    run(
        _model(fmt, server),
        [*first.messages, "Also put it in my calendar."],
        session=session,
        tool_search_mode=mode,
    )
    server.assert_consumed()
    return session, [pinned]


@pytest.mark.parametrize(("fmt", "mode"), FORMS)
def test_each_request_extends_the_previous_one(fmt: str, mode: str, server: FakeLLMServer, index: ToolIndex) -> None:
    session, pinned = _conversation(fmt, mode, server, index)
    requests = server.requests
    assert len(requests) == 5
    discovered = [provider_safe_name(n) for n in session.discovered]
    assert len(discovered) >= 4  # three searches found new tools

    search_definitions = [next(t for t in _tools(r) if _name(t) == "tool_search") for r in requests]
    assert all(d == search_definitions[0] for d in search_definitions)  # the meta-tool never changes
    assert len({r.system for r in requests}) == 1  # nor the system text

    for number, (prev, cur) in enumerate(itertools.pairwise(requests), 2):
        where = f"{fmt}/{mode}, request {number}"
        if mode == "native":
            # the loaded tools never change; Anthropic appends deferred tools, which are not in the prompt
            assert _loaded(cur) == _loaded(prev), where
        assert _tools(cur)[: len(prev.tools)] == _tools(prev), f"{where}: the tools array was reordered or changed"
        # the history comes back unchanged: everything before the new part is a prefix
        assert _messages(cur)[: len(prev.messages)] == _messages(prev), f"{where}: earlier messages changed"
        assert len(cur.messages) > len(prev.messages), where

    for number, request in enumerate(requests, 1):
        if fmt != "anthropic":
            assert "cache_control" not in request.raw.decode(), f"{fmt}: OpenAI caches without markers"
            continue
        # the last loaded tool (never a deferred one), the system text, the last block of the conversation
        last_loaded = _name(_loaded(request)[-1])
        final = len(request.messages) - 1
        blocks = request.messages[final]["content"]
        assert _markers(request) == [f"tool {last_loaded}", "system", f"message {final} block {len(blocks) - 1}"], (
            f"request {number}"
        )

    last = requests[-1]
    names = [_name(t) for t in _loaded(last)]
    if mode == "native":
        assert names == [provider_safe_name(pinned[0]), "tool_search"]
        if fmt == "anthropic":
            assert last.deferred_tool_names == discovered  # deferred in discovery order
    else:
        assert names == [provider_safe_name(pinned[0]), "tool_search", *discovered]  # pinned, search, discovered


@pytest.mark.parametrize(("fmt", "mode"), FORMS)
def test_the_cost_model_reads_back_what_each_form_kept(
    fmt: str, mode: str, server: FakeLLMServer, index: ToolIndex
) -> None:
    _conversation(fmt, mode, server, index)
    anthropic = fmt == "anthropic"
    # minimum 1 token: the demo prompts are short, and this checks prefixes, not thresholds
    rules = CacheRules(
        "anthropic" if anthropic else "openai",
        min_cacheable_tokens=1,
        breakpoints=("tools", "system", "last") if anthropic else None,
        lookback_blocks=20 if anthropic else None,
        deferred_tools_in_prefix=not anthropic,
    )
    cache = PromptCache(rules, ModelPrice("m", rules.provider, input=1.0, cache_read=0.1, cache_write=1.25), fmt)
    uses = [cache.request(r.body) for r in server.requests]
    for number, (prev, cur) in enumerate(itertools.pairwise(uses), 2):
        # the tools prefix is always kept; a fixed tools array (native, or no discovery) keeps the whole request
        assert cur.cache_read > 0, f"request {number}"
        if mode == "native":
            assert cur.cache_read == prev.total, f"{fmt}/{mode}, request {number}: the whole previous request is read"
    if mode == "schema":
        # a search that adds tools changes the tools array: what follows it is paid again
        assert any(cur.cache_read < prev.total for prev, cur in itertools.pairwise(uses))


@pytest.mark.parametrize("mode", ["schema", "native"])
def test_anthropic_prompt_caching_off_sends_no_breakpoints_and_caches_nothing(
    mode: str, server: FakeLLMServer, index: ToolIndex
) -> None:
    session = SessionManager(index).create("plain")
    server.enqueue(_search("weather forecast"), Turn(text="Done."))
    model = AnthropicModel(server.anthropic(), "claude-test", max_tokens=256, prompt_caching=False)
    result = run(model, "Weather in Paris?", session=session, tool_search_mode=mode)
    assert len(server.requests) == 2
    assert all("cache_control" not in r.raw.decode() for r in server.requests)
    # the loop's cost model knows: without breakpoints Anthropic caches nothing
    assert result.cache_read_tokens == result.cache_write_tokens == 0
    assert result.fresh_tokens == result.cache.total > 0
    assert result.price_usd == pytest.approx(result.cache.uncached_price_usd)


@pytest.mark.parametrize("fmt", ["openai_chat", "openai_responses"])
def test_openai_prompt_cache_key_reaches_the_api(fmt: str, server: FakeLLMServer, index: ToolIndex) -> None:
    # OpenAI caches automatically; a prompt_cache_key (here one per catalog) routes requests that
    # share a prefix to the same cache, and goes to every request like any other option
    session = SessionManager(index).create("keyed")
    server.enqueue(_search("weather forecast"), Turn(text="Done."))
    cls = OpenAIChatModel if fmt == "openai_chat" else OpenAIResponsesModel
    model = cls(server.openai(), "gpt-test", prompt_cache_key=f"toolsearch-{index.catalog.hash[:16]}")
    run(model, "Weather in Paris?", session=session)
    assert [r.body.get("prompt_cache_key") for r in server.requests] == [f"toolsearch-{index.catalog.hash[:16]}"] * 2
