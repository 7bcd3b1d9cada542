"""What one MCP Inspector CLI call pays for a stdio gateway: start, initialize, tools/list (and a search), exit.

`python benchmarks/gateway_start.py [--runs 5] [--backend auto] [--out benchmarks/results]`: writes a
config of the two upstream servers docs/mcp.md sets up (the time and git servers from PyPI, run by this
interpreter), then, `--runs` times, starts `toolsearch mcp serve --config servers.json --quiet` as a
client would, sends `initialize`, `tools/list` and a `tool_search` call over its stdin, closes stdin and
waits for it to exit. The first call finds nothing remembered and waits for the servers; the later
ones answer from the catalog the last start listed (toolsearch.mcp.remembered, kept in the temporary
folder, not in ~/.cache). For each step: the first call's wall time from the spawn, the later calls'
median and fastest, and the CPU seconds of the whole process tree (gateway and upstream servers),
which a busy machine inflates far less than wall time.
Writes `<out>/gateway_start.md` and `.json` (benchmarks.lib.write_report). Measure alone: nothing else running,
the load average at the start and end printed in the report, which says NOT A FIGURE when either was high.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # `python benchmarks/gateway_start.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(ROOT)

from benchmarks.lib import cli, machine_info, machine_markdown, write_report  # noqa: E402 - after the path above

STEPS = ("initialize", "tools/list", "tool_search", "exit")


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _line(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[str], request_id: int) -> dict[str, Any]:
    """The response to `request_id` (notifications the gateway sends meanwhile are skipped)."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        message = json.loads(raw)
        if message.get("id") == request_id:
            return dict(message)
    raise RuntimeError(f"the gateway exited before answering request {request_id}")


def one_call(config: Path, backend: str, cache: Path) -> dict[str, float]:
    """Seconds from the spawn to each step's answer, and the CPU seconds of the process tree."""
    argv = [sys.executable, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--quiet"]
    argv += ["--backend", backend]
    cpu = _children_cpu()
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLSEARCH_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=config.parent, env=env)
    times: dict[str, float] = {}
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        _line(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        _answer(proc, 1)
        times["initialize"] = time.perf_counter() - started
        _line(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _line(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        listed = _answer(proc, 2)
        assert "tool_search" in json.dumps(listed), listed
        times["tools/list"] = time.perf_counter() - started
        query = {"name": "tool_search", "arguments": {"query": "current time in a timezone"}}
        _line(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": query})
        found = _answer(proc, 3)
        assert "time__" in json.dumps(found), found
        times["tool_search"] = time.perf_counter() - started
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(120)
        times["exit"] = time.perf_counter() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    times["cpu"] = _children_cpu() - cpu
    return times


def run(runs: int, backend: str) -> dict[str, Any]:
    machine = machine_info()  # the load average and speed probe at the start (write_report adds the end's)
    with tempfile.TemporaryDirectory() as folder:
        python = sys.executable
        servers = {
            "time": {"command": python, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
            "git": {"command": python, "args": ["-m", "mcp_server_git"]},
        }
        config = Path(folder) / "servers.json"
        config.write_text(json.dumps({"mcpServers": servers}))
        calls = [one_call(config, backend, Path(folder) / "cache") for _ in range(max(runs, 2))]
    later = calls[1:]  # the first call finds nothing remembered
    summary = {
        step: {
            "first": calls[0][step],
            "median": statistics.median(c[step] for c in later),
            "min": min(c[step] for c in later),
        }
        for step in (*STEPS, "cpu")
    }
    return {
        "machine": machine,
        "backend": backend,
        "runs": runs,
        "calls": calls,
        "summary": summary,
    }


def render(report: dict[str, Any]) -> str:
    rows = [
        f"| {step} | {report['summary'][step]['first']:.2f} | {report['summary'][step]['median']:.2f} "
        f"| {report['summary'][step]['min']:.2f} |"
        for step in STEPS
    ]
    return "\n".join([
        "# Gateway start-up: one MCP Inspector CLI call",
        "",
        f"A stdio `toolsearch mcp serve --quiet` (backend {report['backend']}) in front of the time and git servers "
        "(docs/mcp.md), spawned as a client spawns it; seconds from the spawn to each answer, over "
        f"{report['runs']} runs: the first finds no catalog remembered from a last start and waits for the "
        "servers; the later ones answer from the one the last start listed while the servers start.",
        "",
        *machine_markdown(report["machine"]),
        "",
        "| step | first call s | later calls: median s | fastest s |",
        "|---|---:|---:|---:|",
        *rows,
        "",
        f"CPU of the process tree (gateway and both upstream servers): {report['summary']['cpu']['first']:.2f} s "
        f"the first call, median {report['summary']['cpu']['median']:.2f} s a later one.",
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    cli.wait_quiet_option(parser)
    args = parser.parse_args()
    cli.wait_if_asked(parser, args)
    print(write(Path(args.out), run(args.runs, args.backend)))
    return 0


def write(out: Path, report: dict[str, Any]) -> str:
    """Write `<out>/gateway_start.md` and `.json` the way every report is written (the load average at the end
    beside the start's, NOT A FIGURE when either is high); the markdown written."""
    write_report(out, "gateway_start", report, render(report))
    return (out / "gateway_start.md").read_text(encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
