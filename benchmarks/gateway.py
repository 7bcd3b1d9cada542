"""Gateway benchmark: concurrent MCP clients over streamable HTTP against 1, 2 and 4 gateway workers, per session store.

    python benchmarks/gateway.py                          # writes benchmarks/results/gateway.{md,json,png}
    python benchmarks/gateway.py --clients 4 --loops 5 --workers 1,2   # a quick run
    python benchmarks/gateway.py --eras modern            # the 2026-07-28 era only

Each configuration starts N `toolsearch mcp serve --transport http` worker processes in front of one
upstream MCP server per worker (`benchmarks.lib.gateway_upstream`: the bundled 197-tool demo catalog
over stdio, answering at once, so the figures are the gateway's). K clients, each a real `mcp`
`ClientSession` over streamable HTTP, all in this process, loop `tool_search` -> `tools/list` ->
`tools/call` (a tool the search found, with arguments that satisfy its schema), after a warm-up. The
configurations, in one run, each in both protocol eras (`--eras`): **handshake** clients (the
initialize handshake; a session whose `tools/list` grows with what it finds) and **modern** clients
(2026-07-28: `tool_search` with a context handle -> the stable `tools/list` -> `call_tool` of a found
tool with that context). Both eras' clients talk to the same workers (one endpoint serves both):

- **memory** (`mcp serve`'s default: one session per HTTP connection) and **memory-stateless** (the
  in-memory store, sessions named by the `mcp-session-id` header the gateway issues, the transport of
  the Redis workers): a session lives in the worker that created it, so each client is routed to one
  worker (sticky: client i to worker i mod N), as a load balancer with session affinity would;
- **redis** store (`--session-store redis://...`, a throwaway `redis-server` on a free port unless
  `--redis-url` names one): every request goes to the next worker, round-robin per client, through a
  client-side load balancer (an HTTP transport that rewrites each request's port), so with 2 or more
  workers no two consecutive requests of a session reach the same worker: the cross-worker path is
  what is measured.

For each worker count the workers of every configuration run side by side, and the configurations'
clients take turns (`--rounds`, alternating order), so load from elsewhere falls on all of them alike.
Every operation is checked: the search must succeed and name tools, the next `tools/list` must hold
every tool that search found (the session's state followed it to whichever worker answered), and the
call must reach the upstream with the arguments sent. Anything else counts as an error (target 0).
Reported per configuration: loops/s and operations/s over the timed phase, and p50/p99 per operation
as each client measured it; and, per worker and client count, what Redis adds to each operation's p50
over memory-stateless (target: at most 1 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolsearch._errors import named_error
from toolsearch.mcp.options import positive_int

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import (
    cli,
    command_line,
    log,
    machine_info,
    machine_markdown,
    offline_environment,
    percentile,
    write_report,
)

# The MCP tests' helpers hold the served gateway's reader (mcp_gateway.py and security.py start gateways with them too).
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from mcp_servers.served import ServedProcess

__all__ = ["add_arguments", "main", "run", "render_markdown", "plot_report"]

TARGET_REDIS_EXTRA_P50_MS = 1.0  # what Redis may add to an operation's p50 over the in-memory store
OPERATIONS = ("search", "list", "call")
ERAS = ("handshake", "modern")
MODERN_VERSION = "2026-07-28"
STORES = ("memory", "memory-stateless", "redis")  # how sessions are kept; see store_arguments
ROUTING = {"memory": "sticky", "memory-stateless": "sticky", "redis": "round-robin"}
SERVER = "demo"  # the upstream's name in the gateway config: tools are listed as demo__<tool>
SEARCH_TOOL = "tool_search"
RESULTS_PER_SEARCH = 3
_FOUND_LINE = re.compile(r"^- (\S+) \(score", re.MULTILINE)


# --- gateway workers ----------------------------------------------------------------------------------


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[1])


def _child_env() -> dict[str, str]:
    """This process's environment with this toolsearch first on the path, so children run the same code."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": _package_root() + (os.pathsep + path if path else "")}


def write_config(folder: Path) -> Path:
    """The gateway config: one upstream, the bundled demo catalog over stdio."""
    entry = {
        "command": sys.executable,
        "args": ["-m", "benchmarks.lib.gateway_upstream"],
        "env": {"PYTHONPATH": _package_root()},  # stdio upstreams inherit only a safe subset of the environment
    }
    path = folder / "servers.json"
    path.write_text(json.dumps({"mcpServers": {SERVER: entry}}, indent=2), encoding="utf-8")
    return path


class GatewayWorker(ServedProcess):
    """One `toolsearch mcp serve --transport http` process on a free port; stderr kept for error reports."""

    def __init__(self, argv: Sequence[str]) -> None:
        super().__init__(argv, env=_child_env(), stdout=subprocess.DEVNULL)

    def wait_ready(self, timeout: float) -> str:
        url = self.wait_url(timeout)
        if url is None:
            tail = "\n".join(self.lines[-20:])
            raise RuntimeError(f"gateway worker did not start ({' '.join(self.argv)}):\n{tail}")
        return url

    @property
    def pid(self) -> int:
        return self.proc.pid


def store_arguments(store: str, redis_url: str | None, session_header: str | None) -> list[str]:
    """The `mcp serve` options of a store configuration.

    memory: the default, one session per HTTP connection (the SDK's stateful streamable HTTP);
    memory-stateless: the in-memory store with sessions named by a request header (the gateway issues
    `mcp-session-id`), the transport the Redis workers use, so it is the like-for-like baseline for Redis;
    redis: sessions in Redis, named by the same header, shared by every worker.
    """
    if store == "memory":
        return []
    header = ["--session-header", session_header or "mcp-session-id"]
    if store == "memory-stateless":
        return header
    if redis_url is None:
        raise ValueError("the redis store needs a Redis URL")
    return ["--session-store", redis_url, *header]


def worker_argv(config: Path, store_options: Sequence[str], options: Sequence[str]) -> list[str]:
    argv = [sys.executable, "-m", "toolsearch", "mcp", "serve", "--config", str(config)]
    return [*argv, "--transport", "http", "--host", "127.0.0.1", "--port", "0", *options, *store_options]


@contextlib.contextmanager
def gateway_workers(
    count: int, config: Path, stores: dict[str, list[str]], options: Sequence[str], timeout: float = 120
) -> Iterator[dict[str, list[GatewayWorker]]]:
    """`count` workers per store configuration (name -> its `mcp serve` options), all started together;
    yields each configuration's workers once they listen (`url`) and stops every worker on the way out."""
    workers: dict[str, list[GatewayWorker]] = {}
    try:
        for store, store_options in stores.items():
            workers[store] = [GatewayWorker(worker_argv(config, store_options, options)) for _ in range(count)]
        for group in workers.values():
            for w in group:
                w.wait_ready(timeout)
        yield workers
    finally:
        for group in workers.values():
            for w in group:
                w.stop()


# --- clients ------------------------------------------------------------------------------------------


def search_queries(seed: int) -> list[str]:
    """One query per demo tool: the first clause of its description, as a person would ask for it."""
    from toolsearch.demo import demo_tools

    queries = []
    for tool in demo_tools():
        first = re.split(r"[.;:(]", tool.description, maxsplit=1)[0]
        queries.append(" ".join(first.split()[:8]).lower())
    random.Random(seed).shuffle(queries)
    return queries


def _routing_transport(ports: Sequence[int], start: int, round_robin: bool, served: list[int]) -> Any:
    """An httpx2 transport that picks each request's worker: a client-side load balancer.

    Round-robin sends each request to the next worker's port; sticky sends all of a client's requests to
    worker `start mod N`. `served[i]` counts the HTTP requests sent to worker i.
    """
    import httpx2

    class Balancer(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()
            self.turn = itertools.count(start)

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            i = (next(self.turn) if round_robin else start) % len(ports)
            served[i] += 1
            request.url = request.url.copy_with(port=ports[i])
            request.headers["host"] = f"{request.url.host}:{ports[i]}"
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Balancer()


@dataclass
class ClientRecord:
    """What one client measured: per-operation latencies (ms), loop latencies, and its errors."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    loops: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=lambda: {op: 0 for op in (*OPERATIONS, "connect")})
    messages: list[str] = field(default_factory=list)

    def fail(self, op: str, message: str) -> None:
        self.errors[op] += 1
        if len(self.messages) < 5:
            self.messages.append(f"{op}: {message[:300]}")


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def failure_cause(exc: BaseException) -> str:
    """What really failed: the exceptions inside an ExceptionGroup (a failed HTTP request of the SDK's
    transport ends its task group, so the client sees a group, not the request's error)."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(exc)
    causes = [named_error(e) for e in leaves]
    if not isinstance(exc, BaseExceptionGroup):
        return causes[0]
    return f"{'; '.join(causes) or type(exc).__name__} (in an ExceptionGroup from the client's task group)"


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (all its threads), from /proc; None where there is no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS


def redis_cpu_seconds(url: str) -> float | None:
    """The Redis server's own CPU time (INFO cpu: used_cpu_user + used_cpu_sys)."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        info = client.info("cpu")
    except redis.RedisError:
        return None
    finally:
        client.close()
    return float(info.get("used_cpu_user", 0.0)) + float(info.get("used_cpu_sys", 0.0))


CpuProbe = Callable[[], dict[str, float | None]]


class Phases:
    """The timed phase in turns: each group of clients (one per store) runs its share of the loops while the
    others wait, the groups alternating round by round, so machine noise falls on every store alike."""

    def __init__(
        self, groups: Sequence[str], clients: int, rounds: int, cpu: dict[str, CpuProbe] | None = None
    ) -> None:
        import anyio

        self.groups, self.clients, self.rounds = list(groups), clients, rounds
        self.all_ready = anyio.Event()
        self._arrived = 0
        self.start = {(g, r): anyio.Event() for g in groups for r in range(rounds)}
        self.done = {(g, r): anyio.Event() for g in groups for r in range(rounds)}
        self._finished = dict.fromkeys(self.done, 0)
        self.elapsed = dict.fromkeys(groups, 0.0)
        self.cpu_probes = cpu or {}
        self.cpu: dict[str, dict[str, float | None]] = {g: {} for g in groups}
        self.completed = False

    def arrived(self) -> None:
        self._arrived += 1
        if self._arrived == self.clients * len(self.groups):
            self.all_ready.set()

    def finished(self, group: str, round_: int) -> None:
        self._finished[group, round_] += 1
        if self._finished[group, round_] == self.clients:
            self.done[group, round_].set()

    async def conduct(self) -> None:
        await self.all_ready.wait()
        for r in range(self.rounds):
            for group in self.groups if r % 2 == 0 else self.groups[::-1]:
                probe = self.cpu_probes.get(group)
                before = probe() if probe else {}
                t0 = time.perf_counter()
                self.start[group, r].set()
                await self.done[group, r].wait()
                self.elapsed[group] += time.perf_counter() - t0
                # CPU the group's processes spent during its turn (the other groups' clients were idle)
                after = probe() if probe else {}
                for key, value in after.items():
                    start, total = before.get(key), self.cpu[group].get(key, 0.0)
                    ok = value is not None and start is not None and total is not None
                    self.cpu[group][key] = total + value - start if ok else None  # type: ignore[operator]
        self.completed = True


def _share(loops: int, rounds: int, r: int) -> int:
    return loops // rounds + (1 if r < loops % rounds else 0)


async def run_client(
    index: int,
    group: str,
    urls: Sequence[str],
    routing: str,
    queries: Sequence[str],
    warmup: int,
    loops: int,
    phases: Phases,
    record: ClientRecord,
    session_header: str | None,
    served: list[int],
    era: str = "handshake",
) -> None:
    """One MCP client: connect, `warmup` untimed loops, then its share of `loops` timed loops in each of its turns.

    A modern client searches with its context handle, checks that the stable list did not change, and calls
    the found tool through `call_tool`."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from benchmarks.lib.gateway_upstream import reply_text
    from toolsearch.providers.scripted import example_arguments

    headers = {session_header: f"bench-{group}-{index}-{uuid.uuid4().hex[:8]}"} if session_header else None
    timeout = httpx2.Timeout(60.0, read=300.0)
    ports = [int(httpx2.URL(u).port or 80) for u in urls]
    transport = _routing_transport(ports, index, routing == "round-robin", served)
    client = httpx2.AsyncClient(transport=transport, timeout=timeout, headers=headers)
    url = urls[index % len(urls)]
    turn = itertools.count(index * 7)  # every group asks the same queries in the same order
    progress = {"arrived": False, "rounds": 0}
    # the 2026-07-28 era: the context handle, the last tools/list, and every schema the context's searches gave
    modern: dict[str, Any] = {"context": None, "listing": None, "schemas": {}}
    # the operation awaiting the gateway: a transport failure cancels it (no exception of its own reaches
    # one_loop) and surfaces from the client's task group, so it is counted against this operation
    in_flight: dict[str, str | None] = {"op": None}

    async def one_loop(timed: bool) -> None:
        await search_list_call(timed)
        in_flight["op"] = None  # not reached when a transport failure cancelled the loop

    async def search_list_call(timed: bool) -> None:
        query = queries[next(turn) % len(queries)]
        t0 = time.perf_counter()
        arguments: dict[str, Any] = {"query": query, "max_results": RESULTS_PER_SEARCH}
        if era == "modern" and modern["context"] is not None:
            arguments["context"] = modern["context"]
        try:
            in_flight["op"] = "search"
            found = await session.call_tool(SEARCH_TOOL, arguments)
        except Exception as exc:
            record.fail("search", named_error(exc))
            return
        t1 = time.perf_counter()
        if era == "modern":
            structured = found.structured_content or {}
            entries = structured.get("tools") or []
            schemas = modern["schemas"]
            schemas.update({e["name"]: e["inputSchema"] for e in entries})
            # a tool the context found earlier is not sent again (`alreadyFound`): it is still the search's answer
            earlier = [n for n in structured.get("alreadyFound") or [] if n in schemas]
            names = [e["name"] for e in entries] + earlier
            modern["context"] = structured.get("context", modern["context"])
        else:
            names = _FOUND_LINE.findall(_text(found))
        if found.is_error or not names:
            record.fail("search", f"query {query!r}: {_text(found)}")
            return
        try:
            in_flight["op"] = "list"
            listed = await session.list_tools()
        except Exception as exc:
            record.fail("list", named_error(exc))
            return
        t2 = time.perf_counter()
        if era == "modern":
            listing = listed.model_dump_json()
            if modern["listing"] is not None and listing != modern["listing"]:
                record.fail("list", "the 2026-07-28 tools/list changed between requests")
                return
            modern["listing"] = listing
        else:
            schemas = {tool.name: tool.input_schema for tool in listed.tools}
            missing = [n for n in names if n not in schemas]
            if missing:
                record.fail("list", f"tools/list lacks {missing} that the search just found")
                return
        target = names[0]
        arguments = example_arguments(schemas[target])
        try:
            in_flight["op"] = "call"
            if era == "modern":
                proxied = {"name": target, "arguments": arguments, "context": modern["context"]}
                result = await session.call_tool("call_tool", proxied)
            else:
                result = await session.call_tool(target, arguments)
        except Exception as exc:
            record.fail("call", named_error(exc))
            return
        t3 = time.perf_counter()
        expected = reply_text(target.split("__", 1)[-1], arguments)
        if result.is_error or _text(result) != expected:
            record.fail("call", f"{target}: {_text(result)}")
            return
        if timed:
            for op, (a, b) in zip(OPERATIONS, ((t0, t1), (t1, t2), (t2, t3)), strict=True):
                record.latencies[op].append((b - a) * 1000)
            record.loops.append((t3 - t0) * 1000)

    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(client)
            if era == "modern":
                from mcp import Client

                transport = streamable_http_client(url, http_client=client)
                modern_client = await stack.enter_async_context(Client(transport, mode=MODERN_VERSION))
                session = modern_client.session
            else:
                read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
            for _ in range(warmup):
                await one_loop(False)
            progress["arrived"] = True
            phases.arrived()
            for r in range(phases.rounds):
                await phases.start[group, r].wait()
                for _ in range(_share(loops, phases.rounds, r)):
                    await one_loop(True)
                progress["rounds"] += 1
                phases.finished(group, r)
    except Exception as exc:  # a client that could not connect, or whose connection broke
        op = in_flight["op"]
        record.fail(op or "connect", failure_cause(exc) + (f", during {op}" if op else ""))
    finally:  # a client that stopped early must not hold up the turns of the others
        if not progress["arrived"]:
            phases.arrived()
        for r in range(int(progress["rounds"]), phases.rounds):
            phases.finished(group, r)


async def drive_clients(
    groups: dict[str, tuple[list[str], str, str]],
    clients: int,
    queries: Sequence[str],
    warmup: int,
    loops: int,
    rounds: int,
    session_header: str | None,
    cpu: dict[str, CpuProbe] | None = None,
) -> dict[str, tuple[list[ClientRecord], float, list[int], dict[str, float | None]]]:
    """`clients` clients per group (name -> worker URLs, routing and era), connected together, timed in turns.

    Returns per group its clients' records, the wall time of its turns, the HTTP requests each worker got, and
    the CPU seconds its `cpu` probe measured over its turns.
    """
    import anyio

    phases = Phases(list(groups), clients, max(1, min(rounds, loops)), cpu)
    records = {g: [ClientRecord() for _ in range(clients)] for g in groups}
    served = {g: [0] * len(urls) for g, (urls, _, _) in groups.items()}
    async with anyio.create_task_group() as tg:
        tg.start_soon(phases.conduct)
        for group, (urls, routing, era) in groups.items():
            for i in range(clients):
                tg.start_soon(
                    run_client, i, group, urls, routing, queries, warmup, loops, phases, records[group][i],
                    session_header, served[group], era,
                )  # fmt: skip
    if not phases.completed:  # cancelled (Ctrl-C): the event loop swallows the interrupt, so raise it again
        raise KeyboardInterrupt
    return {g: (records[g], phases.elapsed[g], served[g], phases.cpu[g]) for g in groups}


# --- one configuration ------------------------------------------------------------------------------


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50), 3) if samples else None,
        "p99_ms": round(percentile(samples, 99), 3) if samples else None,
        "mean_ms": round(statistics.fmean(samples), 3) if samples else None,
    }


def summarise(records: Sequence[ClientRecord], elapsed: float) -> dict[str, Any]:
    loops = sum(len(r.loops) for r in records)
    errors = {op: sum(r.errors[op] for r in records) for op in records[0].errors} if records else {}
    return {
        "elapsed_s": round(elapsed, 3),
        "loops": loops,
        "loops_per_s": round(loops / elapsed, 2) if elapsed > 0 else None,
        "ops_per_s": round(len(OPERATIONS) * loops / elapsed, 2) if elapsed > 0 else None,
        "operations": {op: _stats([x for r in records for x in r.latencies[op]]) for op in OPERATIONS},
        "loop": _stats([x for r in records for x in r.loops]),
        "errors": errors,
        "error_total": sum(errors.values()),
        "error_samples": [m for r in records for m in r.messages][:10],
    }


def _cpu_probe(workers: Sequence[GatewayWorker], redis_url: str | None) -> CpuProbe:
    pids = [w.pid for w in workers]

    def probe() -> dict[str, float | None]:
        times = [process_cpu_seconds(pid) for pid in pids]
        out: dict[str, float | None] = {"gateway": None if None in times else sum(t or 0.0 for t in times)}
        if redis_url is not None:
            out["redis"] = redis_cpu_seconds(redis_url)
        return out

    return probe


def _cpu_per_operation(cpu: dict[str, float | None], operations: int) -> dict[str, float | None]:
    """CPU seconds over the turns -> ms per operation, per process kind, and their total."""
    out: dict[str, float | None] = {}
    for key, seconds in cpu.items():
        out[f"{key}_ms_per_op"] = round(seconds * 1000 / operations, 3) if seconds is not None and operations else None
    parts = list(out.values())
    out["total_ms_per_op"] = None if not parts or None in parts else round(sum(p or 0.0 for p in parts), 3)
    return out


def run_worker_count(
    workers: int,
    stores: dict[str, list[str]],
    config: Path,
    options: Sequence[str],
    clients: Sequence[int],
    queries: Sequence[str],
    warmup: int,
    loops: int,
    rounds: int,
    session_header: str | None,
    redis_url: str | None = None,
    eras: Sequence[str] = ERAS,
) -> list[dict[str, Any]]:
    """`workers` workers per store (name -> session store URL), all started at once; each client count runs
    against every store, in each era, in alternating turns, with new sessions."""
    import anyio

    routing = {store: ROUTING[store] for store in stores}
    rows: list[dict[str, Any]] = []
    with gateway_workers(workers, config, stores, options) as started:
        groups = {
            f"{store}/{era}": ([w.url or "" for w in started[store]], routing[store], era)
            for store in stores
            for era in eras
        }
        probes = {
            f"{store}/{era}": _cpu_probe(started[store], redis_url if store == "redis" else None)
            for store in stores
            for era in eras
        }
        for count in clients:
            measured = anyio.run(drive_clients, groups, count, queries, warmup, loops, rounds, session_header, probes)
            for group, (records, elapsed, served, cpu) in measured.items():
                store, era = group.split("/")
                base: dict[str, Any] = {
                    "workers": workers, "store": store, "era": era, "routing": routing[store], "clients": count,
                }  # fmt: skip
                row = base | summarise(records, elapsed) | {"requests_per_worker": served}
                rows.append(row | {"cpu": _cpu_per_operation(cpu, row["loops"] * len(OPERATIONS))})
    return rows


# --- the benchmark ----------------------------------------------------------------------------------


def _flush(url: str) -> None:
    """Empty the run's own throwaway Redis between configurations, so each starts alike."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()


def _label(workers: int, clients: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}, {clients} client{'s' if clients > 1 else ''}"


def redis_extra(configs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per worker and client count: redis p50 minus the in-memory baseline's p50, per operation (ms).

    The baseline is memory-stateless when it was run (same transport, same session identity: only the
    store and the routing differ), else memory.
    """
    by_key = {(c["workers"], c["clients"], c.get("era", "handshake"), c["store"]): c for c in configs}
    out: dict[str, dict[str, Any]] = {}
    for (workers, clients, era, store), row in sorted(by_key.items()):
        base_name = next((b for b in ("memory-stateless", "memory") if (workers, clients, era, b) in by_key), None)
        if store != "redis" or base_name is None:
            continue
        base = by_key[workers, clients, era, base_name]
        extra: dict[str, Any] = {"workers": workers, "clients": clients, "era": era, "baseline": base_name}
        for op in OPERATIONS:
            a, b = row["operations"][op]["p50_ms"], base["operations"][op]["p50_ms"]
            if a is not None and b is not None:
                extra[op] = round(a - b, 3)
        cpu, base_cpu = row.get("cpu", {}).get("total_ms_per_op"), base.get("cpu", {}).get("total_ms_per_op")
        extra["cpu_ms_per_op"] = None if cpu is None or base_cpu is None else round(cpu - base_cpu, 3)
        out[f"{_label(workers, clients)}, {era}"] = extra
    return out


def run(
    *,
    workers: Sequence[int] = (1, 2, 4),
    stores: Sequence[str] = STORES,
    clients: Sequence[int] = (1, 16),
    loops: int = 30,
    warmup: int = 2,
    rounds: int = 10,
    seed: int = 0,
    redis_url: str | None = None,
    session_header: str | None = None,
    max_discovered: int | None = 12,
    eras: Sequence[str] = ERAS,
    backend: str = "bm25",
    log: Any = None,
) -> dict[str, Any]:
    """Every (workers, store) configuration in turn, each client count on the same workers; returns the report."""
    from benchmarks.lib.redis_server import local_redis, redis_version

    say = log or (lambda message: None)
    queries = search_queries(seed)
    options = ["--quiet", "--backend", backend]
    if max_discovered is not None:
        options += ["--max-discovered", str(max_discovered)]
    report: dict[str, Any] = {
        "benchmark": "gateway",
        "machine": machine_info(),
        "settings": {
            "workers": list(workers),
            "stores": list(stores),
            "eras": list(eras),
            "backend": backend,
            "clients": list(clients),
            "loops_per_client": loops,
            "warmup_loops_per_client": warmup,
            "rounds": rounds,
            "results_per_search": RESULTS_PER_SEARCH,
            "max_discovered": max_discovered,
            "session_header": session_header,
            "queries": len(queries),
            "seed": seed,
            "upstream": "`benchmarks.lib.gateway_upstream`: the demo catalog, 197 tools, over stdio",
        },
        "configurations": [],
    }
    with tempfile.TemporaryDirectory(prefix="toolsearch-bench-gateway-") as folder, contextlib.ExitStack() as stack:
        config = write_config(Path(folder))
        # one index folder for every worker of the run, as a deployment shares it: the first worker builds, the
        # others load (the catalog is the same in every configuration, so later configurations all load)
        options += ["--index-dir", str(Path(folder) / "indexes")]
        url: str | None = None
        if "redis" in stores:
            url = redis_url if redis_url is not None else stack.enter_context(local_redis())
            if url is None:
                raise SystemExit(
                    "bench gateway: the redis store needs a Redis: install redis-server (Debian: apt-get install "
                    "redis-server) or pass --redis-url; or run --stores memory"
                )
            report["redis"] = {"version": redis_version(url), "given": redis_url is not None}
        for count in workers:
            if "redis" in stores and redis_url is None and url is not None:
                _flush(url)
            say(f"[{count} worker(s) per store] {'/'.join(map(str, clients))} clients x {loops} loops ...")
            rows = run_worker_count(
                count,
                {store: store_arguments(store, url, session_header) for store in stores},
                config,
                options,
                clients,
                queries,
                warmup,
                loops,
                rounds,
                session_header,
                url,
                eras,
            )
            for row in rows:
                ops = row["operations"]
                say(
                    f"  {row['clients']:3d} clients {row['store']:6s} {row['era']:9s} "
                    f"{row['ops_per_s'] or 0:8.1f} ops/s  "
                    + "  ".join(f"{op} p50 {_ms(ops[op]['p50_ms'])} ms" for op in OPERATIONS)
                    + f"  errors {row['error_total']}"
                )
            report["configurations"].extend(rows)
    report["redis_extra_p50_ms"] = redis_extra(report["configurations"])
    report["targets"] = targets(report)
    return report


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The largest p50 Redis adds, overall and per client count, and the error count, against their targets."""
    extra = report["redis_extra_p50_ms"].values()
    by_clients: dict[str, float] = {}
    for row in extra:
        worst = max((row[op] for op in OPERATIONS if op in row), default=None)
        if worst is not None:
            key = str(row["clients"])
            by_clients[key] = max(by_clients.get(key, worst), worst)
    overall = max(by_clients.values(), default=None)
    errors = sum(c["error_total"] for c in report["configurations"])
    cpu = [
        row["cpu_ms_per_op"] for row in report["redis_extra_p50_ms"].values() if row.get("cpu_ms_per_op") is not None
    ]
    return {
        "redis_extra_cpu_ms_per_op_max": max(cpu, default=None),
        "redis_extra_p50_ms_max": overall,
        "redis_extra_p50_ms_max_by_clients": by_clients,
        "redis_extra_met": None if overall is None else overall <= TARGET_REDIS_EXTRA_P50_MS,
        "errors": errors,
        "errors_met": errors == 0,
    }


# --- report -----------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _cpu_cell(cpu: dict[str, Any]) -> str:
    gateway, redis = cpu.get("gateway_ms_per_op"), cpu.get("redis_ms_per_op")
    if gateway is None:
        return "n/a"
    return f"{gateway:.2f}" + (f" + {redis:.2f}" if redis is not None else "")


def render_markdown(report: dict[str, Any], command: str = "", plot: Path | None = None) -> str:
    s = report["settings"]
    counts = " and ".join(str(k) for k in s["clients"])
    lines = [
        "# MCP gateway under concurrent clients: workers and session stores",
        "",
        f"{counts} concurrent MCP clients per store configuration (the `mcp` SDK's `ClientSession` over "
        f"streamable HTTP, all in the benchmark's process), each looping `tool_search` "
        f"({s['results_per_search']} results) -> `tools/list` -> `tools/call` of a found tool: "
        f"{s['warmup_loops_per_client']} untimed loops, then {s['loops_per_client']} timed loops per client. "
        "Gateway workers are separate `toolsearch mcp serve --transport http` processes, each with its own "
        f"upstream ({s['upstream']}, answering at once)"
        + (f", at most {s['max_discovered']} found tools per session" if s["max_discovered"] else "")
        + ". For each worker count, the workers of every store configuration run side by side and their clients "
        f"take turns ({s['rounds']} turns each, alternating order), so load from elsewhere on the machine falls on "
        "every configuration alike; each client count starts new sessions on the same workers.",
        "",
        "- **memory**: `mcp serve`'s default: the in-memory store, one session per HTTP connection (the SDK's "
        "stateful streamable HTTP); each client sticky to one worker (client i -> worker i mod N).",
        "- **memory-stateless**: the in-memory store with sessions named by the `mcp-session-id` header the "
        "gateway issues (`--session-header mcp-session-id`), the transport Redis workers use; sticky. The "
        "like-for-like baseline for Redis.",
        "- **redis**: `--session-store redis://...`, every request of a client sent to the next worker "
        "(round-robin, a client-side load balancer), so with 2+ workers consecutive requests of one session "
        "always change worker.",
        "",
    ]
    if command:
        lines.append(f"- Command: `{command}`")
    lines += machine_markdown(report["machine"])
    redis = report.get("redis")
    if redis:
        where = "given by `--redis-url`" if redis["given"] else "a throwaway `redis-server` started for the run"
        lines.append(f"- Redis {redis['version']} on loopback TCP ({where})")
    lines += [
        "",
        "## Throughput and latency per operation",
        "",
        "Latency is wall time in the client per request, in ms; with many clients it includes queueing in the "
        "workers and in the client process. Throughput counts timed loops (3 operations each) over the timed phase.",
        "",
        "| clients | workers | store | era | routing | loops/s | ops/s | search p50 / p99 | list p50 / p99 "
        "| call p50 / p99 | loop p50 | CPU ms / op (gateway + redis) | errors | HTTP requests per worker |",
        "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    order = lambda c: (c["clients"], c["workers"], STORES.index(c["store"]), ERAS.index(c.get("era", "handshake")))  # noqa: E731
    for c in sorted(report["configurations"], key=order):
        ops = c["operations"]
        cells = " | ".join(f"{_ms(ops[op]['p50_ms'])} / {_ms(ops[op]['p99_ms'])}" for op in OPERATIONS)
        lines.append(
            f"| {c['clients']} | {c['workers']} | {c['store']} | {c.get('era', 'handshake')} | {c['routing']} | "
            f"{c['loops_per_s'] or 0:,.1f} | "
            f"{c['ops_per_s'] or 0:,.1f} | {cells} | {_ms(c['loop']['p50_ms'])} | {_cpu_cell(c.get('cpu', {}))} | "
            f"{c['error_total']} | "
            f"{' / '.join(str(n) for n in c.get('requests_per_worker', []))} |"
        )
    extra = report["redis_extra_p50_ms"]
    t = report["targets"]
    if extra:
        lines += [
            "",
            f"## What Redis adds (target: at most {TARGET_REDIS_EXTRA_P50_MS:g} ms p50 per session operation)",
            "",
            "Redis p50 minus the in-memory baseline's p50 (memory-stateless when it ran) at the same worker and "
            "client count, in ms (negative: Redis was faster in this run; on a busy machine latency depends on how "
            "the scheduler treats each process as much as on its work: see CPU per operation). At 1 worker both "
            "route alike; with more, "
            "the Redis rows also pay for changing worker on every request. One client measures the added latency "
            "itself; many clients add queueing, which Redis lengthens by its own CPU time.",
            "",
            "| clients | workers | era | " + " | ".join(f"{op} p50" for op in OPERATIONS) + " | CPU per operation |",
            "|---:|---:|---|" + "---:|" * (len(OPERATIONS) + 1),
        ]
        for row in sorted(extra.values(), key=lambda r: (r["clients"], r["workers"], r.get("era", ""))):
            cells = " | ".join(f"{row[op]:+.2f}" if op in row else "n/a" for op in OPERATIONS)
            cpu = row.get("cpu_ms_per_op")
            lines.append(
                f"| {row['clients']} | {row['workers']} | {row.get('era', 'handshake')} | {cells} | "
                f"{'n/a' if cpu is None else f'{cpu:+.2f}'} |"
            )
        per = "; ".join(
            f"{k} client{'s' if k != '1' else ''}: {v:+.2f} ms"
            for k, v in t["redis_extra_p50_ms_max_by_clients"].items()
        )
        verdict = "met" if t["redis_extra_met"] else "**not met**"
        lines += [
            "",
            f"Largest p50 added by Redis over all operations and worker counts: {per}; target {verdict}.",
        ]
        if t.get("redis_extra_cpu_ms_per_op_max") is not None:
            lines += [
                "",
                "CPU per operation is the user + system time of the configuration's gateway processes (and, for "
                "Redis, of `redis-server`, from `INFO cpu`) during its clients' turns, divided by the operations "
                "they completed; it does not depend on how busy the machine is, where the latencies above do. "
                f"Redis adds at most {t['redis_extra_cpu_ms_per_op_max']:+.2f} ms of CPU per operation.",
            ]
    lines += [
        "",
        "## Errors (target: 0)",
        "",
        f"{t['errors']} error(s) in all configurations. An error is a failed request, a search that found nothing "
        "(neither new tools nor ones the context found earlier), "
        "a `tools/list` missing a tool the session's search had just found, or a call whose answer was not the "
        "upstream's answer to the arguments sent.",
    ]
    samples = [m for c in report["configurations"] for m in c["error_samples"]]
    if samples:
        lines += ["", "First errors:", ""] + [f"- `{m}`" for m in samples[:10]]
    if plot is not None:
        lines += ["", f"![throughput and p50 per operation]({plot.name})"]
    lines += [
        "",
        "## Notes",
        "",
        f"- The clients share one process and the machine's {report['machine']['cores']} cores with the workers, "
        "their upstreams and Redis; more workers than cores adds processes to schedule, not parallel speed, so "
        "the throughput column shows what workers cost here, not how they scale on a bigger machine.",
        "- The timed phase starts after every client's warm-up; a worker's start (index built or loaded, "
        "upstream started) is not timed.",
    ]
    return "\n".join(lines) + "\n"


def _group(c: dict[str, Any]) -> str:
    return f"{c['store']}/{c.get('era', 'handshake')}"


def plot_report(report: dict[str, Any], path: Path) -> None:
    """Throughput vs workers at the most clients, and p50 per operation vs workers at each client count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = report["configurations"]
    stores = [f"{s}/{e}" for s in STORES for e in ERAS if any(_group(c) == f"{s}/{e}" for c in configs)]
    counts = sorted({c["clients"] for c in configs})
    fig, axes = plt.subplots(1, 1 + len(counts), figsize=(5.2 * (1 + len(counts)), 4.4), squeeze=False)
    left, rest = axes[0][0], list(axes[0][1:])
    most = counts[-1]
    for i, store in enumerate(stores):
        rows = sorted((c for c in configs if _group(c) == store and c["clients"] == most), key=lambda c: c["workers"])
        left.plot([c["workers"] for c in rows], [c["ops_per_s"] or 0 for c in rows], marker="o", color=f"C{i}",
                  label=store)  # fmt: skip
        for ax, count in zip(rest, counts, strict=True):
            rows = sorted(
                (c for c in configs if _group(c) == store and c["clients"] == count), key=lambda c: c["workers"]
            )
            for style, op in zip(("-", "--", ":"), OPERATIONS, strict=True):
                ys = [c["operations"][op]["p50_ms"] for c in rows]
                ax.plot([c["workers"] for c in rows], ys, style, marker="o", color=f"C{i}", label=f"{store}: {op}")
    workers = sorted({c["workers"] for c in configs})
    for ax in (left, *rest):
        ax.set_xticks(workers)
        ax.set_xlabel("gateway workers")
        ax.grid(True, alpha=0.25)
        ax.set_ylim(bottom=0)
    left.set_ylabel("operations per second (higher is better)")
    left.set_title(f"Throughput, {most} client{'s' if most > 1 else ''}")
    left.legend(fontsize=8, frameon=False)
    for ax, count in zip(rest, counts, strict=True):
        ax.set_ylabel("p50 latency, ms (lower is better)")
        ax.set_title(f"p50 per operation, {count} client{'s' if count > 1 else ''}")
        ax.legend(fontsize=7, frameon=False, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --- command line -------------------------------------------------------------------------------------


def _counts(what: str, example: str) -> Any:
    def parse(spec: str) -> list[int]:
        try:
            values = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{spec!r}: give {what} as integers, e.g. {example}") from None
        if not values or any(v < 1 for v in values):
            raise argparse.ArgumentTypeError(f"{spec!r}: give one or more {what} of at least 1, e.g. {example}")
        return values

    return parse


def _choices(what: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of `allowed` values."""

    def parse(spec: str) -> list[str]:
        values = [x.strip() for x in spec.split(",") if x.strip()]
        if not values or any(v not in allowed for v in values):
            raise argparse.ArgumentTypeError(f"{spec!r}: {what} are {', '.join(allowed)} (comma-separated)")
        return values

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=_counts("worker counts", "1,2,4"),
        default=[1, 2, 4],
        metavar="LIST",
        help="worker counts (default 1,2,4)",
    )
    parser.add_argument(
        "--stores",
        type=_choices("stores", STORES),
        default=list(STORES),
        metavar="LIST",
        help="store configurations: memory (per connection), memory-stateless, redis (default: all three)",
    )
    parser.add_argument(
        "--eras",
        type=_choices("eras", ERAS),
        default=list(ERAS),
        metavar="LIST",
        help="protocol eras of the clients: handshake (progressive list), modern (2026-07-28) (default: both)",
    )
    parser.add_argument(
        "--backend", default="bm25", help="the workers' search backend (default bm25, as earlier reports ran)"
    )
    parser.add_argument(
        "--clients",
        type=_counts("client counts", "1,16"),
        default=[1, 16],
        metavar="LIST",
        help="concurrent MCP clients, one run per count on the same workers (default 1,16)",
    )
    parser.add_argument(
        "--loops", type=positive_int, default=30, help="timed search-list-call loops per client (default 30)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed loops per client first (default 2)")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=10,
        help="turns per store: the stores' clients take turns, each running its share of the loops (default 10)",
    )
    parser.add_argument(
        "--max-discovered",
        type=int,
        default=12,
        metavar="N",
        help="the workers' --max-discovered, bounding each session's tool list (default 12; 0: unbounded)",
    )
    parser.add_argument(
        "--session-header",
        metavar="NAME",
        help="key sessions by this request header (the workers' --session-header; each client sends its own "
        "value) instead of the MCP session id",
    )
    parser.add_argument(
        "--redis-url", metavar="URL", help="Redis for the redis store (default: start a local redis-server for the run)"
    )
    cli.seed(parser, "the query order")
    cli.outputs(parser, "gateway")


def main(args: argparse.Namespace) -> int:
    quiet = bool(getattr(args, "quiet", False))
    offline_environment()
    report = run(
        workers=args.workers,
        stores=args.stores,
        clients=args.clients,
        loops=args.loops,
        warmup=max(0, args.warmup),
        rounds=args.rounds,
        seed=args.seed,
        redis_url=args.redis_url,
        session_header=args.session_header,
        max_discovered=args.max_discovered or None,
        eras=args.eras,
        backend=args.backend,
        log=None if quiet else log,
    )
    out = Path(args.out)
    plot = None if args.no_plot else out / f"{args.name}.png"
    if plot is not None:
        plot_report(report, plot)
    markdown = render_markdown(report, command_line(), plot)
    write_report(out, args.name, report, markdown, extra=[plot] if plot else [], quiet=quiet)
    t = report["targets"]
    for c in report["configurations"]:
        ops = c["operations"]
        print(
            f"{c['clients']:3d} clients, {c['workers']} worker(s), {c['store']:6s} {c.get('era', 'handshake'):9s}: "
            f"{c['ops_per_s'] or 0:8.1f} ops/s  "
            + "  ".join(f"{op} p50 {_ms(ops[op]['p50_ms'])} p99 {_ms(ops[op]['p99_ms'])} ms" for op in OPERATIONS)
            + f"  errors {c['error_total']}"
        )
    for count, worst in t["redis_extra_p50_ms_max_by_clients"].items():
        verdict = "met" if worst <= TARGET_REDIS_EXTRA_P50_MS else "NOT met"
        print(
            f"{count} client(s): redis adds at most {worst:+.2f} ms p50 per operation; "
            f"target <= {TARGET_REDIS_EXTRA_P50_MS:g} ms {verdict}"
        )
    print(f"errors: {t['errors']} (target 0) {'met' if t['errors_met'] else 'NOT met'}")
    return 0 if t["errors_met"] else 1


if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
