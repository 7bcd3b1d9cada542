"""Reliability figures: fuzz cases per target, stress operations, injected faults, and the cost of the checks.

    python benchmarks/reliability.py [--tools 10000] [--fuzz-profile deep] [--out benchmarks/results]

Writes reliability.json and reliability.md. It runs tests/test_fuzz.py (hypothesis, with statistics)
and tests/test_stress.py in subprocesses and reads what they ran; it injects faults into stored
indexes itself; and it times `verify_index` (every file's size and BLAKE2b digest) against the
whole `load_index` at --tools tools.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"


def _median_ms(call: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def check_cost(size: int, backends: list[str], runs: int) -> list[dict[str, Any]]:
    """Time the checks alone and the whole load, at `size` tools, for each backend."""
    from toolsearch.bench.scale import build_catalog
    from toolsearch.index import ToolIndex
    from toolsearch.store import _digest, load_index, read_manifest, verify_index

    datasets = [SimpleNamespace(name=p.name, tools_path=p / "tools.jsonl") for p in sorted(DATASETS.iterdir())
                if (p / "tools.jsonl").is_file()]
    tools, _ = build_catalog(datasets, size)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for backend in backends:
            print(f"building a {backend} index of {size} tools ...", file=sys.stderr, flush=True)
            folder = ToolIndex.build(tools, backend=backend).save(Path(scratch) / backend)
            manifest = read_manifest(folder)
            total = sum(r["bytes"] for r in manifest.files.values())
            verify_ms = _median_ms(lambda f=folder: verify_index(f), runs)
            load_ms = _median_ms(lambda f=folder: load_index(f), runs)
            hash_only = _median_ms(lambda f=folder, m=manifest: [_digest(f / rel) for rel in m.files], runs)
            rows.append({
                "backend": backend, "tools": size, "files": len(manifest.files), "bytes": total,
                "verify_ms": verify_ms, "hash_ms": hash_only, "load_ms": load_ms,
                "share_of_load": round(verify_ms / load_ms, 3) if load_ms else None,
                "mb_per_s": round(total / 1e6 / (hash_only / 1000), 1) if hash_only else None,
            })
    return rows


FAULTS = {
    "same-size overwrite (middle)": lambda p: _overwrite(p),
    "truncated by one byte": lambda p: p.write_bytes(p.read_bytes()[:-1]),
    "one byte appended": lambda p: p.write_bytes(p.read_bytes() + b"\0"),
    "deleted": lambda p: p.unlink(),
    "emptied": lambda p: p.write_bytes(b""),
}


def _overwrite(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes((b + 1) % 256 for b in data[middle:middle + 64])
    path.write_bytes(bytes(data))


def inject_faults(backends: list[str]) -> dict[str, Any]:
    """Damage every file of a stored index in every way; count what load and build notice."""
    from toolsearch import IndexFormatError, IndexStore, load_tools
    from toolsearch.store import read_manifest

    tools = load_tools(ROOT / "toolsearch" / "data" / "demo_catalog.jsonl")
    injected = detected = named = rebuilt = 0
    silent: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        store = IndexStore(Path(scratch))
        for backend in backends:
            store.build(tools, backend, backend)
            pristine = Path(scratch) / f".{backend}-pristine"
            shutil.copytree(store.path(backend), pristine)
            for rel in read_manifest(pristine).files:
                for fault, apply in FAULTS.items():
                    shutil.rmtree(store.path(backend))
                    shutil.copytree(pristine, store.path(backend))
                    target = store.path(backend) / rel
                    if fault != "deleted" and not target.stat().st_size and fault != "one byte appended":
                        continue  # an empty file cannot be overwritten or truncated
                    apply(target)
                    injected += 1
                    try:
                        store.open(backend)
                        silent.append(f"{backend}: {rel} {fault}")
                    except IndexFormatError as exc:
                        detected += 1
                        named += rel in str(exc)
                    _, _, reused = store.build(tools, backend, backend)
                    rebuilt += not reused
    return {"backends": backends, "faults": list(FAULTS), "injected": injected, "detected": detected,
            "named_the_file": named, "rebuilt_by_build": rebuilt, "silent": silent}


def run_fuzz(profile: str) -> dict[str, Any]:
    env = {**os.environ, "HYPOTHESIS_PROFILE": profile, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz.py",
         "--hypothesis-show-statistics"], cwd=ROOT, env=env, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    targets: dict[str, dict[str, Any]] = {}
    current = None
    for line in proc.stdout.splitlines():
        match = re.match(r"tests/test_fuzz\.py::(\w+)(\[[^\]]*\])?:", line.strip())
        if match:
            current = match.group(1) + (match.group(2) or "")
            targets[current] = {"passing": 0, "failing": 0, "invalid": 0}
            continue
        # hypothesis writes "60 passing, 0 failing, and 4 invalid test cases" (older: "... examples")
        match = re.search(r"(\d+) passing(?: examples?)?, (\d+) failing(?: examples?)?,(?: and)? (\d+) invalid", line)
        if match and current:
            passing, failing, invalid = map(int, match.groups())
            targets[current]["passing"] += passing
            targets[current]["failing"] += failing
            targets[current]["invalid"] += invalid
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    return {"profile": profile, "seconds": round(seconds, 1), "exit_code": proc.returncode, "summary": summary,
            "targets": targets, "cases": sum(t["passing"] + t["failing"] for t in targets.values())}


def run_stress() -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        report = Path(fh.name)
    env = {**os.environ, "STRESS_REPORT": str(report), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_stress.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    counts = json.loads(report.read_text()) if report.stat().st_size else {}
    report.unlink()
    return {"exit_code": proc.returncode, "seconds": round(time.perf_counter() - start, 1), **counts}


def render(report: dict[str, Any]) -> str:
    fuzz, stress, faults = report["fuzz"], report["stress"], report["faults"]
    lines = [
        "# Reliability",
        "",
        f"Generated by `python benchmarks/reliability.py` on {report['machine']} ({report['date']}). Other work was "
        "loading the 2-core machine during the run, so the times are upper bounds; the counts are exact.",
        "",
        "## Fuzzing (hypothesis, tests/test_fuzz.py)",
        "",
        f"Profile `{fuzz['profile']}`: {fuzz['cases']:,} cases in {fuzz['seconds']} s; pytest: `{fuzz['summary']}`. "
        f"The `ci` profile that every test run uses runs {report['fuzz_ci']['cases']:,} cases in "
        f"{report['fuzz_ci']['seconds']} s.",
        "",
        "| target | cases (deep) | failing | cases (ci) |",
        "|---|---:|---:|---:|",
    ]
    for name, row in fuzz["targets"].items():
        ci = report["fuzz_ci"]["targets"].get(name, {})
        lines.append(f"| `{name}` | {row['passing'] + row['failing']:,} | {row['failing']} | "
                     f"{ci.get('passing', 0) + ci.get('failing', 0):,} |")
    lines += ["", "What the fuzzing found (the failing inputs are kept as `@example`s or tests):", ""]
    lines += [f"- {finding}" for finding in report["findings"]]
    lines += [
        "",
        "## Concurrency stress (tests/test_stress.py)",
        "",
        f"{stress.get('sessions', 0)} sessions ({stress.get('rounds', 0)} rounds each) from 16 threads and one asyncio "
        f"loop at once, with index updates and session churn landing meanwhile, in {stress['seconds']} s:",
        "",
        "| operation | count |",
        "|---|---:|",
    ]
    for key in ("searches", "calls", "forbidden calls", "functions run", "index updates", "sessions closed",
                "sessions evicted"):
        lines.append(f"| {key} | {stress.get(key, 0):,} |")
    lines += [
        "",
        f"Leaked (a function run for a session not allowed it): **{stress.get('leaked', 'n/a')}**. Errors, lost "
        f"discovered tools or tools seen outside a session's allowed set: **{stress.get('errors', 'n/a')}**.",
        "",
        "## Injected faults in stored indexes",
        "",
        f"Every file of a {', '.join(faults['backends'])} index of the demo catalog, damaged in each of these ways: "
        f"{', '.join(faults['faults'])}.",
        "",
        "| injected | detected on load | error named the file | rebuilt by `build` | silent |",
        "|---:|---:|---:|---:|---:|",
        f"| {faults['injected']} | {faults['detected']} | {faults['named_the_file']} | {faults['rebuilt_by_build']} | "
        f"{len(faults['silent'])} |",
        "",
        "Before this change, a same-size overwrite of any backend file loaded silently (only `tools.jsonl` had a "
        "checksum; the vector backend then answered with scores like 4.26e37).",
        "",
        f"## Cost of the checks at {report['cost'][0]['tools']:,} tools",
        "",
        "`verify_index` reads every file and compares its size and BLAKE2b digest with the manifest; `load_index` "
        "is the whole load (checks, reading the tools, opening the backend; the embedding model is loaded lazily "
        "and is not part of it). Medians of several runs.",
        "",
        "| backend | files | bytes | checks (ms) | hashing alone (ms) | whole load (ms) | checks / load | MB/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["cost"]:
        lines.append(f"| {row['backend']} | {row['files']} | {row['bytes']:,} | {row['verify_ms']} | "
                     f"{row['hash_ms']} | {row['load_ms']} | {row['share_of_load']:.0%} | {row['mb_per_s']} |")
    lines += [
        "",
        "Why a digest on every load rather than a verified-once marker (size + mtime + inode): a marker trusts the "
        "file system's metadata, which a copy, a restore or `touch` can keep while the bytes change; the digest "
        "cannot be fooled, and the table shows what it costs against the load it protects.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=10_000, help="catalog size for the cost of the checks")
    parser.add_argument("--backends", default="bm25,hybrid", help="backends whose load cost is measured")
    parser.add_argument("--fuzz-profile", default="deep")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--finding", action="append", default=[], help="a line for the findings list (repeatable)")
    parser.add_argument("--only-fuzz", action="store_true",
                        help="rerun the fuzzing only, keeping the other sections of an existing reliability.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                              f"{platform.python_version()}", "date": time.strftime("%Y-%m-%d")}
    out = Path(args.out)
    if args.only_fuzz:
        report = {**json.loads((out / "reliability.json").read_text()), **report}
    print("fuzzing (ci profile) ...", file=sys.stderr, flush=True)
    report["fuzz_ci"] = run_fuzz("ci")
    print(f"fuzzing ({args.fuzz_profile} profile) ...", file=sys.stderr, flush=True)
    report["fuzz"] = run_fuzz(args.fuzz_profile)
    if not args.only_fuzz:
        print("stress ...", file=sys.stderr, flush=True)
        report["stress"] = run_stress()
        print("injecting faults ...", file=sys.stderr, flush=True)
        report["faults"] = inject_faults(["bm25", "regex", "hybrid"])
        report["cost"] = check_cost(args.tools, args.backends.split(","), args.runs)
    report["findings"] = args.finding or report.get("findings", [])
    out.mkdir(parents=True, exist_ok=True)
    (out / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "reliability.md").write_text(render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
