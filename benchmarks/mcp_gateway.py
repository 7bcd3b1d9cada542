"""MCP gateway benchmark: tokens of the tools list a client sees, and latency the gateway adds per call.

    python benchmarks/mcp_gateway.py                # writes benchmarks/results/mcp_gateway.{json,md}
    python benchmarks/mcp_gateway.py --calls 50     # a quicker run

Three arms for the same searches: (a) every upstream tool listed, (b) the handshake era's
progressive list (found tools join `tools/list`), (c) the 2026-07-28 form (a stable list; found
definitions arrive in `tool_search` results, calls go through `call_tool`). Per request of a
conversation that runs the searches in turn: input tokens (the tools list plus the tool results so
far) and the cached prefix a prompt cache can reuse (the previous request's input, when the tools
list, which comes first, is unchanged).

Servers: the ones the tests use — mcp-server-time and mcp-server-git (PyPI), our toy server
(tests/mcp_servers/toy_server.py) and @modelcontextprotocol/server-everything (npm) when
.ci/setup.d installed it. Tokens are exact o200k_base counts of compact JSON, in two views:
the MCP `tools/list` result as the client receives it, and the model-facing definitions a client
turns it into (name, description, input schema in the Chat Completions function shape). Latency
is wall time of sequential `tools/call` round trips measured in the client, after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from importlib.metadata import version
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from mcp_servers import (  # noqa: E402
    GatewayProcess,
    everything_command,
    gateway_argv,
    gateway_env,
    git_server,
    make_git_repo,
    time_server,
    toy,
)

from benchmarks.lib import cli, machine_info, machine_markdown, write_report  # noqa: E402
from toolsearch import Tool  # noqa: E402
from toolsearch.tokens import count_json_tokens, count_tokens, tool_tokens  # noqa: E402

ENCODING = "o200k_base"
SEARCHES = {  # one realistic search per server: what a client holds after finding what it needs
    "time": "current time in a timezone",
    "git": "show the working tree status of a git repository",
    "toy": "echo text back",
    "everything": "sum of two numbers",
}


def servers() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {"time": time_server(), "git": git_server(), "toy": toy()}
    command = everything_command()
    if command:
        found["everything"] = {"command": command, "args": ["stdio"]}
    return found


def wire(tools: list[types.Tool]) -> list[dict[str, Any]]:
    return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]


def model_tokens(tools: list[types.Tool]) -> int:
    return sum(tool_tokens(Tool.from_mcp(t), ENCODING) for t in tools)


@asynccontextmanager
async def stdio_session(
    command: str, args: list[str], env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=command, args=args, env=env)
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        yield session


async def list_all(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


# --- tokens ------------------------------------------------------------------------------------------


async def measure_tokens(config: dict[str, dict[str, Any]], config_path: Path) -> dict[str, Any]:
    direct: dict[str, Any] = {}
    for name, entry in config.items():
        async with stdio_session(entry["command"], entry.get("args", []), entry.get("env")) as session:
            tools = await list_all(session)
        direct[name] = {
            "tools": len(tools),
            "wire_tokens": count_json_tokens(wire(tools), ENCODING),
            "model_tokens": model_tokens(tools),
        }
    total = {key: sum(d[key] for d in direct.values()) for key in ("tools", "wire_tokens", "model_tokens")}

    argv = gateway_argv(config_path, "--quiet")
    async with stdio_session(argv[0], argv[1:], gateway_env()) as session:
        init = session.initialize_result
        instructions = (init.instructions or "") if init else ""
        start = await list_all(session)
        stages = [
            {
                "after": "connect",
                "tools": len(start),
                "wire_tokens": count_json_tokens(wire(start), ENCODING),
                "model_tokens": model_tokens(start),
            }
        ]
        results: list[dict[str, Any]] = []
        for server, query in SEARCHES.items():
            if server not in config:
                continue
            found = await session.call_tool("tool_search", {"query": query, "max_results": 3})
            text = "\n".join(c.text for c in found.content if isinstance(c, types.TextContent))
            results.append({"query": query, "result_tokens": count_tokens(text, ENCODING)})
            listed = await list_all(session)
            stages.append(
                {
                    "after": f"search {query!r}",
                    "tools": len(listed),
                    "wire_tokens": count_json_tokens(wire(listed), ENCODING),
                    "model_tokens": model_tokens(listed),
                }
            )
    modern = await measure_modern(config, config_path)
    arms = conversation_arms(total["model_tokens"], stages, results, modern)
    return {
        "direct": direct,
        "direct_total": total,
        "gateway": stages,
        "gateway_instructions_tokens": count_tokens(instructions, ENCODING),
        "search_results": results,
        "modern": modern,
        "arms": arms,
    }


@asynccontextmanager
async def modern_stdio(argv: list[str]) -> AsyncIterator[Client]:
    """The gateway over stdio with a client that speaks only 2026-07-28."""
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
    async with Client(params, mode="2026-07-28") as client:
        yield client


async def measure_modern(config: dict[str, dict[str, Any]], config_path: Path) -> dict[str, Any]:
    """The 2026-07-28 form: the stable list (checked unchanged after every search) and each search result."""
    async with modern_stdio(gateway_argv(config_path, "--quiet")) as client:
        first = (await client.list_tools(cache_mode="bypass")).tools
        listing = wire(first)
        results: list[dict[str, Any]] = []
        context: str | None = None
        stable = True
        for server, query in SEARCHES.items():
            if server not in config:
                continue
            arguments: dict[str, Any] = {"query": query, "max_results": 3}
            if context is not None:
                arguments["context"] = context
            found = await client.call_tool("tool_search", arguments)
            context = (found.structured_content or {}).get("context", context)
            text = "\n".join(c.text for c in found.content if isinstance(c, types.TextContent))
            results.append({"query": query, "result_tokens": count_tokens(text, ENCODING)})
            stable = stable and wire((await client.list_tools(cache_mode="bypass")).tools) == listing
    return {
        "tools": len(first),
        "wire_tokens": count_json_tokens(listing, ENCODING),
        "model_tokens": model_tokens(first),
        "list_unchanged_after_searches": stable,
        "search_results": results,
    }


def conversation_arms(
    all_tools: int, stages: list[dict[str, Any]], handshake: list[dict[str, Any]], modern: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Per arm, per request (one before the searches, one after each): input tokens and cached prefix.

    A request's input is its tools list plus every tool result so far (the searches' results; the
    calls are the same in every arm and left out). A prompt cache reuses the previous request's
    input as a prefix only while the tools list, which comes first, is unchanged.
    """
    lists = {
        "all tools listed": [all_tools] * len(stages),
        "handshake: progressive list": [s["model_tokens"] for s in stages],
        "2026-07-28: search/call": [modern["model_tokens"]] * len(stages),
    }
    results = {
        "all tools listed": [0] * (len(stages) - 1),  # nothing to search for: every tool is listed
        "handshake: progressive list": [r["result_tokens"] for r in handshake],
        "2026-07-28: search/call": [r["result_tokens"] for r in modern["search_results"]],
    }
    arms: dict[str, list[dict[str, Any]]] = {}
    for arm, listed in lists.items():
        rows: list[dict[str, Any]] = []
        conversation = 0
        for i, tools in enumerate(listed):
            if i:
                conversation += results[arm][i - 1]
            previous = rows[-1] if rows else None
            cached = previous["input_tokens"] if previous is not None and previous["tools_tokens"] == tools else 0
            rows.append({"request": i + 1, "tools_tokens": tools, "input_tokens": tools + conversation,
                         "cached_prefix_tokens": cached})  # fmt: skip
        arms[arm] = rows
    return arms


# --- latency -------------------------------------------------------------------------------------------


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, round(p / 100 * (len(ms) - 1)))]

    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(pct(90), 3),
        "p99_ms": round(pct(99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


async def interleaved(
    calls_by_variant: dict[str, Callable[[], Awaitable[types.CallToolResult]]], calls: int, warmup: int
) -> dict[str, list[float]]:
    """Time every variant in rotating order, so machine noise falls on all of them alike."""
    names = list(calls_by_variant)
    for name in names:
        for _ in range(warmup):
            result = await calls_by_variant[name]()
            assert not result.is_error, result
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(calls):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            result = await calls_by_variant[name]()
            samples[name].append(time.perf_counter() - start)
            assert not result.is_error, result
    return samples


@asynccontextmanager
async def toy_over_http() -> AsyncIterator[str]:
    """Our toy server on streamable HTTP: the transport-matched baseline for the HTTP gateway."""
    entry = toy()
    proc = subprocess.Popen(
        [entry["command"], *entry["args"]],
        env={**os.environ, "TOY_HTTP_PORT": "0"},
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        proc.terminate()
        proc.wait(10)


async def measure_latency(config_path: Path, repo: Path, calls: int, warmup: int) -> list[dict[str, Any]]:
    cases = [
        ("toy", "echo", {"text": "ping"}, toy()),
        ("time", "get_current_time", {"timezone": "UTC"}, time_server()),
        ("git", "git_status", {"repo_path": str(repo)}, git_server()),
    ]
    rows: list[dict[str, Any]] = []
    argv = gateway_argv(config_path, "--quiet")
    http = GatewayProcess(config_path, "--quiet")
    try:
        url = http.wait_ready()
        for server, tool, args, entry in cases:
            name = f"{server}__{tool}"
            async with AsyncExitStack() as stack:
                direct = await stack.enter_async_context(
                    stdio_session(entry["command"], entry["args"], entry.get("env"))
                )
                gw_stdio = await stack.enter_async_context(stdio_session(argv[0], argv[1:], gateway_env()))
                gw_http = await stack.enter_async_context(http_session(url))
                modern_stdio_client = await stack.enter_async_context(modern_stdio(argv))
                modern_http_client = await stack.enter_async_context(Client(url, mode="2026-07-28"))
                proxied = {"name": name, "arguments": args}
                variants: dict[str, Callable[[], Awaitable[types.CallToolResult]]] = {
                    "direct_stdio": partial(direct.call_tool, tool, args),
                    "gateway_stdio": partial(gw_stdio.call_tool, name, args),
                    "gateway_http": partial(gw_http.call_tool, name, args),
                    "modern_stdio": partial(modern_stdio_client.session.call_tool, "call_tool", proxied),
                    "modern_http": partial(modern_http_client.session.call_tool, "call_tool", proxied),
                }
                if server == "toy":
                    toy_url = await stack.enter_async_context(toy_over_http())
                    direct_http = await stack.enter_async_context(http_session(toy_url))
                    variants["direct_http"] = partial(direct_http.call_tool, tool, args)
                samples = await interleaved(variants, calls, warmup)
            row: dict[str, Any] = {"tool": name, **{k: summary(v) for k, v in samples.items()}}
            row["added_p50_ms_stdio"] = round(row["gateway_stdio"]["p50_ms"] - row["direct_stdio"]["p50_ms"], 3)
            if "direct_http" in row:
                row["added_p50_ms_http"] = round(row["gateway_http"]["p50_ms"] - row["direct_http"]["p50_ms"], 3)
            rows.append(row)
    finally:
        http.stop()
    return rows


# --- report ----------------------------------------------------------------------------------------------


def _p50(row: dict[str, Any], variant: str) -> str:
    return f"{row[variant]['p50_ms']:.2f}" if variant in row else "n/a"


def markdown(data: dict[str, Any]) -> str:
    tokens = data["tokens"]
    direct, total = tokens["direct"], tokens["direct_total"]
    stages = tokens["gateway"]
    first = stages[0]
    lines = [
        "# MCP gateway: tokens of the tools list, and latency per call",
        "",
        f"mcp {data['mcp']}. Reproduce with `python benchmarks/mcp_gateway.py`.",
        "",
        *machine_markdown(data["machine"]),
        "",
        "## Tokens of the tools list a client sees",
        "",
        f"Exact {ENCODING} counts of compact JSON. *Wire*: the MCP `tools/list` result as the client receives "
        "it (with output schemas and annotations). *Model*: the definitions the client sends the model on every "
        "request (name, description, input schema; Chat Completions function shape).",
        "",
        "| without the gateway: server | tools | wire tokens | model tokens |",
        "|---|---:|---:|---:|",
    ]
    for name, row in direct.items():
        lines.append(f"| {name} | {row['tools']} | {row['wire_tokens']:,} | {row['model_tokens']:,} |")
    lines.append(
        f"| **all servers** | **{total['tools']}** | **{total['wire_tokens']:,}** | **{total['model_tokens']:,}** |"
    )
    lines += [
        "",
        "| with the gateway: after | tools listed | wire tokens | model tokens | vs all servers (model) |",
        "|---|---:|---:|---:|---:|",
    ]
    for stage in stages:
        share = stage["model_tokens"] / total["model_tokens"] if total["model_tokens"] else 0
        lines.append(
            f"| {stage['after']} | {stage['tools']} | {stage['wire_tokens']:,} | {stage['model_tokens']:,} | "
            f"{share:.0%} |"
        )
    saved = 1 - first["model_tokens"] / total["model_tokens"] if total["model_tokens"] else 0
    results = tokens["search_results"]
    mean_result = statistics.fmean(r["result_tokens"] for r in results) if results else 0
    lines += [
        "",
        f"At connect the client holds `tool_search` and `call_tool` only: {first['model_tokens']:,} model tokens "
        f"instead of {total['model_tokens']:,} ({saved:.0%} fewer). Each search (3 results) then adds the found "
        f"tools' definitions; a `tool_search` result costs {mean_result:.0f} tokens on average, and the "
        f"gateway's `instructions` (a client may add them to the system prompt) "
        f"{tokens['gateway_instructions_tokens']} tokens.",
        "",
        "## Input tokens per request, and the cached prefix",
        "",
        "A conversation that runs the searches above in turn, one request before them and one after each. "
        "*Tools*: the model tokens of the tools list the request carries; *input*: the tools plus the tool "
        "results so far (search results; the calls are the same in every arm and left out); *cached*: the "
        "prefix a prompt cache reuses (the previous request's input, when the tools list, which comes first, "
        "is unchanged)."
        + (
            " The 2026-07-28 list was byte-identical after every search."
            if tokens.get("modern", {}).get("list_unchanged_after_searches")
            else ""
        ),
        "",
        "| arm | request | tools | input | cached prefix |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm, rows in tokens.get("arms", {}).items():
        for row in rows:
            lines.append(
                f"| {arm} | {row['request']} | {row['tools_tokens']:,} | {row['input_tokens']:,} | "
                f"{row['cached_prefix_tokens']:,} |"
            )
    lines += ["", "| arm | input tokens, all requests | cached prefix | requests with a changed tools list |",
              "|---|---:|---:|---:|"]  # fmt: skip
    for arm, rows in tokens.get("arms", {}).items():
        total_in = sum(r["input_tokens"] for r in rows)
        cached = sum(r["cached_prefix_tokens"] for r in rows)
        changed = sum(1 for a, b in pairwise(rows) if a["tools_tokens"] != b["tools_tokens"])
        lines.append(f"| {arm} | {total_in:,} | {cached:,} ({cached / total_in if total_in else 0:.0%}) | {changed} |")
    lines += [
        "",
        "## Latency the gateway adds per call",
        "",
        f"p50 of {data['calls']} sequential `tools/call` round trips per cell, after {data['warmup']} warm-up "
        "calls, timed in the client, in milliseconds; the variants of a row take turns call by call, so "
        "machine noise falls on all of them alike. *Direct stdio*: the client runs the upstream itself. "
        "*Gateway stdio*: client → gateway (stdio) → upstream (stdio). *Direct HTTP*: our toy server on "
        "streamable HTTP (127.0.0.1), the baseline for *gateway HTTP*: client → gateway (streamable HTTP) → "
        "upstream (stdio). The real servers speak stdio only, so their HTTP baseline is n/a. *2026*: a client "
        "pinned to 2026-07-28 calling the tool through `call_tool`, over stdio and HTTP.",
        "",
        "| tool | direct stdio | gateway stdio | added (stdio) | direct HTTP | gateway HTTP | added (HTTP) "
        "| 2026 stdio (call_tool) | 2026 HTTP (call_tool) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["latency"]:
        direct_http = f"{row['direct_http']['p50_ms']:.2f}" if "direct_http" in row else "n/a"
        added_http = f"{row['added_p50_ms_http']:+.2f}" if "added_p50_ms_http" in row else "n/a"
        lines.append(
            f"| {row['tool']} | {row['direct_stdio']['p50_ms']:.2f} | {row['gateway_stdio']['p50_ms']:.2f} | "
            f"{row['added_p50_ms_stdio']:+.2f} | {direct_http} | {row['gateway_http']['p50_ms']:.2f} | "
            f"{added_http} | {_p50(row, 'modern_stdio')} | {_p50(row, 'modern_http')} |"
        )
    lines += [
        "",
        "p90 / p99 and means are in `mcp_gateway.json`. The added time is one more JSON-RPC hop (parse, route, "
        "re-serialise) plus the gateway's argument check against the tool's input schema.",
        "",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = servers()
    machine = machine_info()  # the load average and speed probe at the start (write_report adds the end's)
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "servers.json"
        config_path.write_text(json.dumps({"mcpServers": config}))
        repo = make_git_repo(Path(tmp) / "repo")
        tokens = await measure_tokens(config, config_path)
        latency = await measure_latency(config_path, repo, args.calls, args.warmup)
    return {
        "machine": machine,
        "mcp": version("mcp"),
        "encoding": ENCODING,
        "servers": list(config),
        "calls": args.calls,
        "warmup": args.warmup,
        "tokens": tokens,
        "latency": latency,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per cell (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first (default 20)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="report folder")
    cli.wait_quiet_option(parser)
    args = parser.parse_args(argv)
    cli.wait_if_asked(parser, args)
    print(write(args.out, anyio.run(run, args)))
    return 0


def write(out: Path, data: dict[str, Any]) -> str:
    """Write `<out>/mcp_gateway.md` and `.json` the way every report is written (the load average at the end
    beside the start's, NOT A FIGURE when either is high); the markdown written."""
    write_report(out, "mcp_gateway", data, markdown(data))
    return (out / "mcp_gateway.md").read_text(encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
