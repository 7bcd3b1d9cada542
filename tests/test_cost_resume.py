"""A conversation continued in a second run is priced against the cache the first run left: `LoopResult.cache_state`,
plain JSON data, passed back as `run(..., cache_state=...)`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch._errors import InvalidArgumentError
from toolsearch.cost import PromptCache
from toolsearch.loop import LoopResult, ToolSearchLoop, run
from toolsearch.providers import ScriptedModel, call, search
from toolsearch.session import SessionManager

TOOLS = [Tool(f"tool_{i}", f"Does thing number {i}. " + "Explains the thing at length. " * 40) for i in range(10)]
FUNCTIONS: dict[str, Callable[..., Any]] = {t.name: (lambda **_: "ok") for t in TOOLS}


@pytest.fixture(scope="module")
def sessions() -> SessionManager:
    return SessionManager(ToolIndex.build(TOOLS, "bm25"))


def _first(sessions: SessionManager, fmt: str, session_id: str) -> LoopResult:
    model = ScriptedModel([search("thing number 3", 5), call("tool_3"), "done"], format=fmt)
    return run(model, "do thing 3", session=sessions.create(session_id), functions=FUNCTIONS)


def _second(sessions: SessionManager, first: LoopResult, fmt: str, **options: Any) -> LoopResult:
    prompt: list[Any] = [*first.messages, {"role": "user", "content": "thanks"}]
    return run(ScriptedModel(["sure"], format=fmt), prompt, session=sessions.get(first.session_id),
               functions=FUNCTIONS, **options)


@pytest.mark.parametrize("fmt", ["openai_chat", "anthropic"])
def test_a_resumed_run_reads_what_the_run_it_continues_left_in_the_cache(sessions: SessionManager, fmt: str) -> None:
    first = _first(sessions, fmt, f"resume-{fmt}")
    state = json.loads(json.dumps(first.cache_state))  # plain data: kept anywhere a chat app keeps its history
    resumed = _second(sessions, first, fmt, cache_state=state).requests[0].cache
    cold = _second(sessions, first, fmt).requests[0].cache
    assert resumed is not None and cold is not None
    assert cold.cache_read == 0  # without the state: every run starts cold
    last = first.requests[-1].cache
    assert last is not None
    # the second run's first request repeats the first run's last one and adds a turn: that prefix is read
    assert resumed.cache_read >= last.total // 128 * 128 > 0
    assert resumed.price_usd < cold.price_usd / 2


def test_the_loop_object_takes_the_state_too(sessions: SessionManager) -> None:
    first = _first(sessions, "anthropic", "resume-loop")
    loop = ToolSearchLoop(ScriptedModel(["sure"], format="anthropic"), sessions, FUNCTIONS)
    result = loop.run([*first.messages, "thanks"], session_id=first.session_id, cache_state=first.cache_state)
    assert result.requests[0].cache is not None and result.requests[0].cache.cache_read > 0
    assert result.cache_state is not None and result.cache_state["entries"]


def test_a_state_of_another_model_or_one_that_expired_starts_cold(sessions: SessionManager) -> None:
    first = _first(sessions, "anthropic", "resume-other")
    assert first.cache_state is not None
    other = ScriptedModel(["sure"], format="anthropic", priced_as="claude-opus-4-6")  # another model's cache
    prompt: list[Any] = [*first.messages, "thanks"]
    session = sessions.get(first.session_id)
    moved = run(other, prompt, session=session, functions=FUNCTIONS, cache_state=first.cache_state)
    assert moved.requests[0].cache is not None and moved.requests[0].cache.cache_read == 0
    stale = {**first.cache_state, "at": first.cache_state["at"] - 3_600}  # an hour ago: past every 5-minute entry
    late = _second(sessions, first, "anthropic", cache_state=stale)
    assert late.requests[0].cache is not None and late.requests[0].cache.cache_read == 0


def test_a_state_that_is_not_one_is_refused_before_any_request(sessions: SessionManager) -> None:
    first = _first(sessions, "openai_chat", "resume-bad")
    model = ScriptedModel(["sure"], format="openai_chat")
    bad_states: list[Any] = [{"entries": "x"}, {**(first.cache_state or {}), "version": 99}, ["not", "a", "state"]]
    for bad in bad_states:
        with pytest.raises(InvalidArgumentError, match=r"LoopResult\.cache_state"):
            run(model, "hi", session=sessions.get(first.session_id), functions=FUNCTIONS, cache_state=bad)
    assert model.payloads == []  # nothing was sent


def test_the_state_round_trips_through_the_cache_itself() -> None:
    cache = PromptCache.for_format("openai_chat", "gpt-4.1")
    blocks = _blocks(1_400)
    first = cache.blocks(blocks, at=10)
    state = cache.state(started=1_000.0)  # clock 0 was wall-clock 1,000: the request at 1,010
    assert state["at"] == 1_010.0 and state["entries"]
    again = PromptCache.for_format("openai_chat", "gpt-4.1")
    assert again.resume(state, started=1_100.0)  # 90 s after it: still alive
    assert again.blocks(blocks).cache_read == first.total // 128 * 128
    expired = PromptCache.for_format("openai_chat", "gpt-4.1")
    assert expired.resume(state, started=1_010.0 + 301)
    assert expired.blocks(blocks).cache_read == 0


def _blocks(tokens: int) -> list[Any]:
    from toolsearch.cost import Block

    return [Block("tools", f"t{i}", tokens // 4) for i in range(4)]


def _state(**changes: Any) -> dict[str, Any]:
    """A real state a minute old, of a cache that wrote `_blocks(1_400)`, with `changes` over it."""
    cache = PromptCache.for_format("openai_chat", "gpt-4.1")
    cache.blocks(_blocks(1_400), at=0)
    return {**cache.state(started=1_000.0), **changes}


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda s: {**s, "at": 1e12}, id="at far in the future"),
        pytest.param(lambda s: {**s, "at": float("inf")}, id="at Infinity, which json.loads reads"),
        pytest.param(lambda s: {**s, "at": float("nan")}, id="at NaN"),
        pytest.param(lambda s: {**s, "entries": [[k, t, 1e300, life] for k, t, _, life in s["entries"]]},
                     id="more time left than the lifetime"),
        pytest.param(lambda s: {**s, "entries": [[k, t, left, 1e300] for k, t, left, _ in s["entries"]]},
                     id="a lifetime no provider offers"),
        pytest.param(lambda s: {**s, "entries": [[k, t, left, -5] for k, t, left, _ in s["entries"]]},
                     id="a negative lifetime"),
        pytest.param(lambda s: {**s, "entries": [[k, True, left, life] for k, _, left, life in s["entries"]]},
                     id="tokens true"),
        pytest.param(lambda s: {**s, "entries": [[k, -1, left, life] for k, _, left, life in s["entries"]]},
                     id="negative tokens"),
        pytest.param(lambda s: {k: v for k, v in s.items() if k not in ("format", "model", "encoding")},
                     id="no format, model or encoding"),
    ],
)
def test_a_state_no_cache_could_have_left_is_refused(bad: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    # accepted, these priced reads from a cache long gone (a 30-day-old state read 1,536 tokens), or started cold
    # without a word for a state missing the keys the error names as required
    state = bad(_state())
    with pytest.raises(InvalidArgumentError, match=r"LoopResult\.cache_state"):
        PromptCache.for_format("openai_chat", "gpt-4.1").resume(state, started=1_060.0)
    good = PromptCache.for_format("openai_chat", "gpt-4.1")
    assert good.resume(_state(), started=1_060.0) and good.blocks(_blocks(1_400)).cache_read > 0
