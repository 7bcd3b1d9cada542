"""A bounded concurrency stress test: hundreds of sessions at once, with evictions and index updates.

Sessions search (tool_search), discover and call tools from a thread pool and from asyncio tasks at
the same time, while other threads update the shared index and churn sessions in and out (closed,
and evicted by a manager's size limit). It asserts what must never happen, not how fast anything
is: no session sees or calls a tool outside its allowed set, no exception escapes, no discovered
tool is lost. With STRESS_REPORT=path the counts are written there (benchmarks/reliability.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from toolsearch import SessionManager, Tool, ToolIndex, ToolSearchMetaTool, UnknownSessionError
from toolsearch.executor import ToolResult, ahandle_tool_calls, handle_tool_calls
from toolsearch.providers import ToolCall
from toolsearch.session import Session

NAMESPACES = ["mail", "calendar", "files", "crm", "billing", "weather", "chat", "issues"]
VERBS = ["create", "delete", "list", "search", "update", "export", "archive", "share"]
THREAD_SESSIONS = 200
ASYNC_SESSIONS = 100
ROUNDS = 4
MAX_DISCOVERED = 3  # small, so discoveries evict earlier ones all the time


def catalog() -> list[Tool]:
    return [
        Tool(f"{ns}_{verb}", f"{verb.capitalize()} {ns} items for the user.",
             {"type": "object", "properties": {"item": {"type": "string"}}}, namespace=ns)
        for ns in NAMESPACES for verb in VERBS
    ]


class World:
    """Shared state of one stress run, and what it observed."""

    def __init__(self) -> None:
        self.index = ToolIndex.build(catalog(), backend="bm25")
        self.manager = SessionManager(self.index, max_discovered=MAX_DISCOVERED)
        self.meta = ToolSearchMetaTool(default_results=3)
        names = [t.name for t in catalog()]
        rng = random.Random(12)
        self.allowed = {f"s{i}": frozenset(rng.sample(names, 12)) for i in range(THREAD_SESSIONS + ASYNC_SESSIONS)}
        self.invoked: list[tuple[str, str]] = []  # (session, tool) of every function that actually ran
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def functions(self, sid: str) -> dict[str, Callable[..., Any]]:
        def make(name: str) -> Callable[..., Any]:
            def fn(**arguments: Any) -> str:
                with self.lock:
                    self.invoked.append((sid, name))
                return f"{name} done for {sid}"

            return fn

        return {t.name: make(t.name) for t in catalog()}  # every function exists: only the session rules stop calls

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def fail(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)


def _queries(sid: str) -> itertools.cycle[str]:
    rng = random.Random(sid)
    return itertools.cycle([f"{rng.choice(VERBS)} {rng.choice(NAMESPACES)}" for _ in range(ROUNDS)])


def _check_round(world: World, session: Session, expected: tuple[str, ...], results: list[ToolResult]) -> None:
    sid, allowed = session.id, world.allowed[session.id]
    visible = {t.name for t in session.visible_tools()}
    if not visible <= allowed:
        world.fail(f"{sid} sees tools outside its allowed set: {sorted(visible - allowed)}")
    for result in results:
        if result.name not in allowed and result.name != world.meta.name and not result.is_error:
            world.fail(f"{sid} called {result.name}, which it is not allowed")
        if result.name in expected and result.is_error:
            world.fail(f"{sid} could not call {result.name}, which it had discovered: {result.content}")
    if session.discovered != expected:
        world.fail(f"{sid} lost discovered tools: expected {expected}, has {session.discovered}")


def _plan(world: World, session: Session, query: str, n: int) -> tuple[list[ToolCall], list[ToolCall], str]:
    search = [ToolCall(f"{session.id}-q{n}", world.meta.name, {"query": query, "max_results": 3})]
    forbidden = sorted({t.name for t in catalog()} - world.allowed[session.id])
    stranger = forbidden[(n * 7 + len(session.id)) % len(forbidden)]
    return search, [ToolCall(f"{session.id}-x{n}", stranger, {"item": "x"})], stranger


def drive_sync(world: World, sid: str) -> None:
    try:
        session = world.manager.create(sid, allowed=world.allowed[sid])
        functions, queries, expected = world.functions(sid), _queries(sid), ()
        for n in range(ROUNDS):
            search, forbidden, _ = _plan(world, session, next(queries), n)
            if session.discovered != expected:
                world.fail(f"{sid} lost discovered tools between rounds")
            results = handle_tool_calls(session, search, functions, metatool=world.meta)
            expected = session.discovered
            calls = [ToolCall(f"{sid}-c{n}-{i}", name, {"item": "x"}) for i, name in enumerate(expected)]
            results += handle_tool_calls(session, [*calls, *forbidden], functions, metatool=world.meta)
            world.count("searches")
            world.count("calls", len(calls))
            world.count("forbidden calls", len(forbidden))
            _check_round(world, session, expected, results)
    except Exception as exc:  # the property: none escapes
        world.fail(f"{sid}: {type(exc).__name__}: {exc}")


async def drive_async(world: World, sid: str) -> None:
    try:
        session = world.manager.create(sid, allowed=world.allowed[sid])
        functions, queries, expected = world.functions(sid), _queries(sid), ()
        for n in range(ROUNDS):
            search, forbidden, _ = _plan(world, session, next(queries), n)
            if session.discovered != expected:
                world.fail(f"{sid} lost discovered tools between rounds")
            results = await ahandle_tool_calls(session, search, functions, metatool=world.meta)
            expected = session.discovered
            calls = [ToolCall(f"{sid}-c{n}-{i}", name, {"item": "x"}) for i, name in enumerate(expected)]
            results += await ahandle_tool_calls(session, [*calls, *forbidden], functions, metatool=world.meta)
            world.count("searches")
            world.count("calls", len(calls))
            world.count("forbidden calls", len(forbidden))
            _check_round(world, session, expected, results)
            await asyncio.sleep(0)
    except Exception as exc:
        world.fail(f"{sid}: {type(exc).__name__}: {exc}")


def update_index(world: World) -> None:
    """Index updates land meanwhile: churn tools come and go, allowed tools are re-described."""
    tools = catalog()
    try:
        for n in itertools.count():
            if world.stop.is_set():
                break
            world.index.upsert([Tool(f"churn_{n}", "Create mail calendar files items, briefly.", namespace="mail")])
            if n:
                world.index.remove([f"churn_{n - 1}"])
            changed = tools[n % len(tools)]
            world.index.upsert([Tool(changed.name, changed.description + f" Revision {n}.", changed.input_schema,
                                     namespace=changed.namespace)])
            world.count("index updates", 3 if n else 2)
    except Exception as exc:
        world.fail(f"index updates: {type(exc).__name__}: {exc}")


def churn_sessions(world: World) -> None:
    """Sessions closed, and evicted by a small manager's limit, while the others work."""
    small = SessionManager(world.index, max_sessions=20)
    try:
        for n in itertools.count():
            if world.stop.is_set():
                break
            tmp = world.manager.create(f"tmp{n}", allowed=world.allowed["s0"])
            tmp.search("create mail", 2)
            world.manager.close(f"tmp{n}")
            small.create(f"e{n}").search("list files", 2)
            if n >= 20:
                try:
                    small.get(f"e{n - 20}")
                    world.fail(f"e{n - 20} should have been evicted by max_sessions=20")
                except UnknownSessionError:
                    world.count("sessions evicted")
            world.count("sessions closed")
    except Exception as exc:
        world.fail(f"session churn: {type(exc).__name__}: {exc}")


def run_stress() -> World:
    world = World()
    background = [threading.Thread(target=update_index, args=(world,)),
                  threading.Thread(target=churn_sessions, args=(world,))]
    for thread in background:
        thread.start()

    async def async_sessions() -> None:
        sids = [f"s{i}" for i in range(THREAD_SESSIONS, THREAD_SESSIONS + ASYNC_SESSIONS)]
        await asyncio.gather(*(drive_async(world, sid) for sid in sids))

    try:
        loop_thread = threading.Thread(target=lambda: asyncio.run(async_sessions()))
        loop_thread.start()
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda i: drive_sync(world, f"s{i}"), range(THREAD_SESSIONS)))
        loop_thread.join()
    finally:
        world.stop.set()
        for thread in background:
            thread.join()
    return world


def test_sessions_under_concurrent_load() -> None:
    world = run_stress()
    assert world.errors == [], "\n".join(world.errors[:20])
    # nothing a session was not allowed ever ran
    leaked = [(sid, name) for sid, name in world.invoked if name not in world.allowed[sid]]
    assert leaked == []
    # every session is still there with what it discovered, within its cap
    for sid in world.allowed:
        session = world.manager.get(sid)
        assert 0 < len(session.discovered) <= MAX_DISCOVERED
        assert set(session.discovered) <= world.allowed[sid]
    sessions = THREAD_SESSIONS + ASYNC_SESSIONS
    assert world.counts["searches"] == sessions * ROUNDS
    assert world.counts["forbidden calls"] == sessions * ROUNDS
    assert len(world.invoked) == world.counts["calls"] > 0  # every allowed call ran, exactly once
    assert world.counts["index updates"] > 0 and world.counts["sessions closed"] > 0
    report = os.environ.get("STRESS_REPORT")
    if report:
        Path(report).write_text(json.dumps({**world.counts, "sessions": sessions, "rounds": ROUNDS,
                                            "functions run": len(world.invoked), "leaked": len(leaked),
                                            "errors": len(world.errors)}, indent=2))
