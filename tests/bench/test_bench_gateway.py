"""`python benchmarks/gateway.py`: a small real run (worker processes, MCP clients), the report, its error checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from redis_server import require_redis

from benchmarks import gateway as bench

CLIENTS, LOOPS, WARMUP = (1, 3), 2, 1
STORES = ("memory", "memory-stateless", "redis")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gateway.py"


def _bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), *args]  # as the docs run it, from a clone
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_small_run_writes_a_complete_report(tmp_path: Path) -> None:
    require_redis()  # the bench starts its own redis-server from this binary
    out = tmp_path / "results"
    proc = _bench(
        "--workers", "1,2", "--clients", ",".join(map(str, CLIENTS)), "--loops", str(LOOPS),
        "--warmup", str(WARMUP), "--rounds", "2", "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "errors: 0 (target 0) met" in proc.stdout
    report = json.loads((out / "gateway.json").read_text())
    assert report["benchmark"] == "gateway"
    assert report["redis"]["given"] is False
    expected = {
        (w, store, era, bench.ROUTING[store], k)
        for w in (1, 2)
        for store in STORES
        for era in bench.ERAS
        for k in CLIENTS
    }
    got = [(c["workers"], c["store"], c["era"], c["routing"], c["clients"]) for c in report["configurations"]]
    assert sorted(got) == sorted(expected)
    for config in report["configurations"]:
        assert config["error_total"] == 0, config["error_samples"]
        assert config["loops"] == config["clients"] * LOOPS  # every timed loop completed, none dropped
        for op in bench.OPERATIONS:
            row = config["operations"][op]
            assert row["n"] == config["clients"] * LOOPS
            assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert config["ops_per_s"] > 0
        served = config["requests_per_worker"]
        assert len(served) == config["workers"]
        if config["routing"] == "round-robin" or config["clients"] > 1:  # every worker took part
            assert all(n > 0 for n in served), served
    # CPU per operation: the gateway processes of every configuration, and redis-server for the Redis one
    cpu = {(c["workers"], c["store"], c["clients"], c["era"]): c["cpu"] for c in report["configurations"]}
    assert all(v["gateway_ms_per_op"] is not None for v in cpu.values())
    assert sum(v["gateway_ms_per_op"] for v in cpu.values()) > 0
    assert all((v.get("redis_ms_per_op") is not None) == (key[1] == "redis") for key, v in cpu.items())
    # what Redis adds is reported against the like-for-like baseline, per worker and client count
    extra = report["redis_extra_p50_ms"]
    assert {(r["workers"], r["clients"], r["era"]) for r in extra.values()} == {
        (w, k, era) for w in (1, 2) for k in CLIENTS for era in bench.ERAS
    }
    assert {r["baseline"] for r in extra.values()} == {"memory-stateless"}
    assert set(report["targets"]["redis_extra_p50_ms_max_by_clients"]) == {str(k) for k in CLIENTS}
    assert report["targets"]["errors"] == 0 and report["targets"]["errors_met"]
    markdown = (out / "gateway.md").read_text()
    assert "| clients | workers | store | era | routing |" in markdown
    assert "## What Redis adds" in markdown
    assert "- Command: `python benchmarks/gateway.py --workers 1,2 --clients 1,3" in markdown
    assert (out / "gateway.png").stat().st_size > 0


@pytest.mark.parametrize("era", bench.ERAS)
def test_failed_operations_are_counted_as_errors(tmp_path: Path, era: str) -> None:
    # A query that matches no tool: every search must be reported as failed, and no loop as timed.
    config = bench.write_config(tmp_path)
    with bench.gateway_workers(1, config, {"memory": []}, ["--quiet", "--backend", "bm25"]) as started:
        groups = {"memory": ([w.url or "" for w in started["memory"]], "sticky", era)}
        measured = anyio.run(bench.drive_clients, groups, 2, ["zzqx vvkq"], WARMUP, LOOPS, 2, None)
    records, _, _, _ = measured["memory"]
    summary = bench.summarise(records, 1.0)
    assert summary["errors"]["search"] == 2 * (WARMUP + LOOPS)
    assert summary["loops"] == 0
    assert "zzqx vvkq" in summary["error_samples"][0]


@pytest.mark.parametrize("era", bench.ERAS)
def test_a_transport_failure_is_reported_by_its_cause_and_operation(era: str) -> None:
    """A request the SDK's HTTP transport cannot send ends the client's task group: the report names the
    request's own error (not "ExceptionGroup") and the operation it hit."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on: every request is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    groups = {"dead": ([f"http://127.0.0.1:{port}/mcp"], "sticky", era)}
    measured = anyio.run(bench.drive_clients, groups, 1, ["anything"], WARMUP, LOOPS, 1, None)
    summary = bench.summarise(measured["dead"][0], 1.0)
    assert summary["error_total"] == 1
    # a 2026-era client sends nothing to connect (its version is pinned): its first search is what fails
    op = "search" if era == "modern" else "connect"
    assert summary["errors"][op] == 1, summary["errors"]
    sample = summary["error_samples"][0]
    assert sample.startswith(f"{op}: ConnectError: ") and "in an ExceptionGroup from the client's task group" in sample
    if era == "modern":
        assert sample.endswith(", during search")


def test_failure_cause_unwraps_nested_groups() -> None:
    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [OSError("reset by peer")]), KeyError("x")])
    assert bench.failure_cause(nested) == (
        "OSError: reset by peer; KeyError: 'x' (in an ExceptionGroup from the client's task group)"
    )
    assert bench.failure_cause(ValueError("plain")) == "ValueError: plain"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "worker counts of at least 1"),
        (["--workers", "two"], "worker counts as integers"),
        (["--stores", "memcached"], "stores are memory, memory-stateless, redis"),
        (["--eras", "2024"], "eras are handshake, modern"),
        (["--clients", "0"], "client counts of at least 1"),
        (["--loops", "0"], "must be at least 1"),
    ],
)
def test_bad_arguments_say_what_to_give(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _bench(*args, "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "gateway.json").exists()
