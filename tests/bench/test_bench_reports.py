"""benchmarks/lib: what every report says about how it was made (the load rule, the command) and the data it takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.lib import QUIET_BELOW, cli, machine_info, machine_markdown, resolve_datasets, wait_quiet, write_report

ROOT = Path(__file__).resolve().parents[2]


def _loads(monkeypatch: pytest.MonkeyPatch, *readings: float) -> None:
    """os.getloadavg gives these 1-minute readings in turn (the last one from then on)."""
    values: Iterator[float] = iter(readings)
    last = [readings[0]]

    def getloadavg() -> tuple[float, float, float]:
        last[0] = next(values, last[0])
        return (last[0], 1.0, 1.0)

    monkeypatch.setattr(os, "getloadavg", getloadavg)


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The end reading's wait for a run's own load to fade, off: the readings below are the ones given."""
    monkeypatch.setattr("benchmarks.lib.END_SETTLE_S", 0.0)


def _report(tmp_path: Path) -> tuple[str, dict[str, object]]:
    info = machine_info()
    write_report(tmp_path, "r", {"machine": info}, "# r\n\n" + "\n".join(machine_markdown(info)) + "\n\nbody\n",
                 quiet=True)
    return (tmp_path / "r.md").read_text(), json.loads((tmp_path / "r.json").read_text())


def test_a_report_loud_at_its_end_says_it_is_not_a_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _loads(monkeypatch, 0.3, 2.95)
    written, data = _report(tmp_path)
    header = written.split("body")[0]
    assert ("- **NOT A FIGURE**: load average 2.95 at the end (the rule is under 1.5 at start and end, measured "
            "alone); rerun alone") in header
    assert header.index("NOT A FIGURE") < header.index("- Date: ")
    assert data["machine"]["quiet"] is False  # type: ignore[index]
    # written again (a report rewritten from its own markdown), the line stays once
    write_report(tmp_path, "r", data, written, quiet=True)
    assert (tmp_path / "r.md").read_text().count("NOT A FIGURE") == 1


def test_the_end_reading_waits_for_the_runs_own_load_to_fade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run that used both cores ends at ~2.9; with nothing else running the average drops within a minute
    monkeypatch.setattr("benchmarks.lib.END_SETTLE_S", 120.0)
    _loads(monkeypatch, 0.3, 2.9, 2.1, 1.2)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    written, data = _report(tmp_path)
    assert "NOT A FIGURE" not in written and data["machine"]["quiet"] is True  # type: ignore[index]
    assert "- Load average at the end (1/5/15 min): [1.2, 1.0, 1.0]" in written


def test_after_a_loud_start_the_end_reading_does_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the report is no figure whatever the end reads: waiting up to two minutes would only slow a small run down
    monkeypatch.setattr("benchmarks.lib.END_SETTLE_S", 120.0)
    _loads(monkeypatch, 2.4, 2.9, 2.1, 1.2)
    waits: list[float] = []  # the settle wait's calls (not time.sleep: other threads of the process sleep too)
    monkeypatch.setattr("benchmarks.lib.wait_quiet", lambda seconds, **_: waits.append(seconds))
    written, data = _report(tmp_path)
    assert not waits and "- Load average at the end (1/5/15 min): [2.9, 1.0, 1.0]" in written
    assert "NOT A FIGURE**: load average 2.4 at the start" in written and data["machine"]["quiet"] is False  # type: ignore[index]


def test_a_report_loud_at_its_start_says_so_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _loads(monkeypatch, QUIET_BELOW, 0.2)
    written, data = _report(tmp_path)
    assert "NOT A FIGURE**: load average 1.5 at the start (" in written
    assert data["machine"]["quiet"] is False  # type: ignore[index]


def test_a_quiet_report_says_it_was_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _loads(monkeypatch, 0.3, 1.49)
    written, data = _report(tmp_path)
    assert "NOT A FIGURE" not in written
    assert data["machine"]["quiet"] is True  # type: ignore[index]


def test_a_report_prints_the_command_that_made_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = Path(cli.__file__).resolve().parents[1] / "tune.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--held-out", "my models", "--limit", "3"])
    written, data = _report(tmp_path)
    line = "- Command: `python benchmarks/tune.py --held-out 'my models' --limit 3`"
    assert line in written.split("body")[0]
    assert data["machine"]["command"] == line[len("- Command: `"):-1]  # type: ignore[index]
    # a report that prints its command itself (sessions, tokens, gateway) keeps one line
    info = machine_info()
    own = "\n".join(machine_markdown(info)) + f"\n{line}\n"
    write_report(tmp_path, "s", {"machine": info}, own, quiet=True)
    assert (tmp_path / "s.md").read_text().count("- Command: ") == 1


def test_wait_quiet_waits_for_the_load_to_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    _loads(monkeypatch, 3.0, 2.0, 1.2)
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    said: list[str] = []
    assert wait_quiet(60, poll=5, say=said.append) == 1.2
    assert len(slept) == 2 and "waiting up to 60 s" in said[0]


def test_wait_quiet_gives_up_after_its_time_and_never_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    _loads(monkeypatch, 3.0)
    clock = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr("time.sleep", sleep)
    said: list[str] = []
    assert wait_quiet(12, poll=5, say=said.append) == 3.0
    assert clock[0] == 12 and "starting anyway" in said[-1]


def test_every_benchmark_takes_wait_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[float] = []
    monkeypatch.setattr(cli, "wait_quiet", lambda seconds, say=None: waited.append(seconds))
    seen: list[float] = []
    code = cli.run("x.py", None, lambda parser: None, lambda args: seen.append(args.wait_quiet) or 0,
                   ["--wait-quiet", "30", "-q"])
    assert code == 0 and waited == [30.0] and seen == [30.0]
    cli.run("x.py", None, lambda parser: None, lambda args: 0, [])
    assert waited == [30.0]  # opt-in: no flag, no wait


def test_a_data_set_with_a_query_that_names_no_tool_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "tools.jsonl").write_text(json.dumps({"name": "a", "description": "a tool"}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"id": "1", "query": "use a", "relevant": ["a"]}) + "\n"
                                          + json.dumps({"id": "2", "query": "nothing", "relevant": []}) + "\n")
    with pytest.raises(SystemExit, match=r"data set set: .*queries.jsonl:2: 'relevant' lists no tool"):
        resolve_datasets([str(folder)])


# The reports written by scripts with a command line of their own go through write_report too: a run taken beside
# other work says so. Each is written from its committed figures, with the machine as a run of today reads it.
RESULTS = Path(cli.__file__).resolve().parents[1] / "results"


def _committed(name: str, *old_keys: str) -> dict[str, object]:
    """The committed report's figures, less the load and machine fields it kept itself, with today's machine."""
    report = json.loads((RESULTS / f"{name}.json").read_text())
    return {**{k: v for k, v in report.items() if k not in old_keys}, "machine": machine_info()}


def _assert_loud_at_the_end(markdown: str, written: Path) -> None:
    header = markdown.split("\n## ")[0].split("\n| ")[0]
    assert "- **NOT A FIGURE**: load average 2.9 at the end (the rule is under 1.5" in header
    assert header.index("NOT A FIGURE") < header.index("- Date: ")
    assert "- Load average at start (1/5/15 min): [0.3, 1.0, 1.0]" in header
    assert "- Load average at the end (1/5/15 min): [2.9, 1.0, 1.0]" in header
    machine = json.loads(written.read_text())["machine"]
    assert machine["quiet"] is False and machine["load_average_at_end"] == [2.9, 1.0, 1.0]


def test_the_reliability_report_says_when_it_is_not_a_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import reliability

    _loads(monkeypatch, 0.3, 2.9)
    report = _committed("reliability")
    assert reliability._write(tmp_path, report) == 0
    _assert_loud_at_the_end((tmp_path / "reliability.md").read_text(), tmp_path / "reliability.json")


def test_the_gateway_start_report_says_when_it_is_not_a_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import gateway_start

    _loads(monkeypatch, 0.3, 2.9)
    report = _committed("gateway_start", "date", "command", "load_start", "load_end")
    markdown = gateway_start.write(tmp_path, report)
    _assert_loud_at_the_end(markdown, tmp_path / "gateway_start.json")
    assert "| tool_search |" in markdown


def test_the_mcp_gateway_report_says_when_it_is_not_a_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import mcp_gateway

    _loads(monkeypatch, 0.3, 2.9)
    report = _committed("mcp_gateway", "date", "python", "load_average_1m_start", "load_average_1m")
    markdown = mcp_gateway.write(tmp_path, report)
    _assert_loud_at_the_end(markdown, tmp_path / "mcp_gateway.json")
    assert "## Latency the gateway adds per call" in markdown


@pytest.mark.parametrize(("given", "waits"), [(None, 120.0), ("0", 0.0), ("7.5", 7.5)])
def test_the_end_wait_is_set_by_the_environment(given: str | None, waits: float) -> None:
    # the suite sets 0 (tests/conftest.py): a report a test writes is no figure, and the wait only adds minutes
    env = {k: v for k, v in os.environ.items() if k != "TOOLSEARCH_BENCH_END_SETTLE_S"}
    if given is not None:
        env["TOOLSEARCH_BENCH_END_SETTLE_S"] = given
    read = subprocess.run([sys.executable, "-c", "import benchmarks.lib as b; print(b.END_SETTLE_S)"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    assert float(read.stdout) == waits
