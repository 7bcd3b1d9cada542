"""`python benchmarks/data.py fetch`: the data sets rebuilt from their public sources.

BFCL is rebuilt from the real bfcl-eval package (installed with `pip install --no-deps bfcl-eval==2026.3.23`,
see .ci/setup.d) and must equal, byte for byte, the copy the benchmarks' reports were measured on (its SHA-256
digests are written below, so no test reads that copy). MetaTool and Seal-Tools come from checkouts
of their repositories, which cannot be fetched here: their converters run on small fixtures written below
in the repositories' layout (made-up rows, not the real data).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.data import DATASETS, DataSourceError, Source, convert, fetch, verify
from toolsearch.evaluation import load_queries
from toolsearch.tools import load_tools

# sha256 of the bfcl tools.jsonl and queries.jsonl every bfcl figure in benchmarks/results was measured on
# (1,098,685 and 603,065 bytes), recorded here so that no copy of them is needed
SHARED_BFCL = {
    "tools.jsonl": "80cc27c3c49a3543fb00ab69205a86158d2952ae74d88f842ffa5264b5fd5705",
    "queries.jsonl": "4a1129bb867cd80ccb26da71e1b2966d7230163e1c016981a037881d62720391",
}


def test_bfcl_from_the_bfcl_eval_package_equals_the_measured_copy(tmp_path: Path) -> None:
    folder = fetch("bfcl", out=tmp_path)  # the installed bfcl-eval package, digests checked
    for name, digest in SHARED_BFCL.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    record = json.loads((folder / "SOURCE.json").read_text(encoding="utf-8"))
    assert (record["tools"], record["queries"], record["verified"]) == (1703, 2351, True)


def test_the_command_builds_a_data_set_the_benchmarks_read(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "data.py"  # run as the docs run it, from a clone
    proc = subprocess.run([sys.executable, str(script), "fetch", "bfcl", "--out", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "1,703 tools and 2,351 queries" in proc.stdout
    tools = load_tools(tmp_path / "bfcl" / "tools.jsonl")
    queries = load_queries(tmp_path / "bfcl" / "queries.jsonl")
    names = {t.name for t in tools}
    assert len(tools) == 1703 and all(n in names for q in queries for n in q.relevant)


def _copy_bfcl(tmp_path: Path) -> Path:
    """The installed package's data files the conversion reads, copied so one can be altered."""
    spec = DATASETS["bfcl"]
    source = spec.locate(None)
    folder = tmp_path / "bfcl_data"
    for relative in spec.files:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read(relative))
    return folder


def test_a_source_of_another_version_is_refused_by_name(tmp_path: Path) -> None:
    folder = _copy_bfcl(tmp_path)
    changed = folder / "BFCL_v4_multiple.json"
    changed.write_bytes(changed.read_bytes() + b"\n")
    with pytest.raises(DataSourceError, match=r"BFCL_v4_multiple\.json .* expected .*bfcl-eval==2026\.3\.23"):
        fetch("bfcl", folder, tmp_path / "out")
    assert not (tmp_path / "out" / "bfcl").exists()  # nothing half-written
    assert (fetch("bfcl", folder, tmp_path / "out", check=False) / "tools.jsonl").is_file()


@pytest.mark.parametrize(
    ("name", "source", "message"),
    [
        ("metatool", None, "pass --source PATH, a checkout of https://github.com/HowieHwong/MetaTool"),
        ("seal_tools", "missing", "has no Seal-Tools_Dataset/tool.jsonl"),
        ("bfcl", "not-a-wheel.whl", "not a wheel"),
        ("nope", None, "unknown data set 'nope'"),
    ],
)
def test_bad_sources_say_what_to_do(tmp_path: Path, name: str, source: str | None, message: str) -> None:
    path = None
    if source is not None:
        path = tmp_path / source
        if source.endswith(".whl"):
            path.write_text("x", encoding="utf-8")
        else:
            path.mkdir()
    with pytest.raises(DataSourceError, match=message):
        fetch(name, path, tmp_path / "out")


# --- fixtures in the layout of the MetaTool and Seal-Tools repositories -------------------------------------


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _digests(root: Path, relatives: list[str]) -> dict[str, str]:
    return {r: hashlib.sha256((root / r).read_bytes()).hexdigest() for r in relatives}


@pytest.fixture
def metatool_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "MetaTool"
    plugins = {
        "WeatherTool": " Weather forecasts for any city. ",
        "NewsTool": "Latest headlines.",
        "FinanceTool": "Stocks.",
    }
    _write(root, "dataset/plugin_des.json", json.dumps(plugins))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(
        [
            ["Query", "Tool"],
            ["Will it rain tomorrow?", "WeatherTool"],
            ['"What are today\'s headlines?"', "NewsTool"],
            ["Will it rain tomorrow?", "NewsTool"],  # the same text again: merged, tools united
            [" Any news about the " + "café".encode().decode("gbk") + "?", "NewsTool"],  # UTF-8 read as GBK
            ["Stock price of Apple?", "UnknownTool"],  # a tool the catalog lacks: left out
        ]
    )
    _write(root, "dataset/data/all_clean_data.csv", out.getvalue())
    multi = [{"query": '"News about Tesla and its stock?"', "tool": ["FinanceTool", "NewsTool"]}]
    _write(root, "dataset/data/multi_tool_query_golden.json", json.dumps(multi))
    return root


def test_metatool_converter_on_a_fixture_in_the_repository_layout(metatool_checkout: Path, tmp_path: Path) -> None:
    spec = DATASETS["metatool"]
    with pytest.raises(DataSourceError, match=r"plugin_des\.json .* expected .*35e81bb75768"):
        fetch("metatool", metatool_checkout, tmp_path / "out")  # not the pinned files
    source = Source(metatool_checkout)
    verify(spec, source, _digests(metatool_checkout, list(spec.files)))
    tools, queries = convert("metatool", source)
    assert [t["name"] for t in tools] == ["WeatherTool", "NewsTool", "FinanceTool"]
    assert tools[0] == {
        "name": "WeatherTool",
        "description": "Weather forecasts for any city.",
        "input_schema": {"type": "object", "properties": {}, "required": []},
        "source": "metatool/plugin",
    }
    assert queries == [
        {
            "id": "metatool-single-0",
            "query": "Will it rain tomorrow?",
            "relevant": ["WeatherTool", "NewsTool"],
            "subset": "single_tool",
        },
        {
            "id": "metatool-single-1",
            "query": "What are today's headlines?",
            "relevant": ["NewsTool"],
            "subset": "single_tool",
        },
        {
            "id": "metatool-single-3",
            "query": "Any news about the café?",
            "relevant": ["NewsTool"],
            "subset": "single_tool",
        },
        {
            "id": "metatool-multi-0",
            "query": "News about Tesla and its stock?",
            "relevant": ["FinanceTool", "NewsTool"],
            "subset": "multi_tool",
        },
    ]


@pytest.fixture
def seal_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "Seal-Tools"
    apis = [
        {
            "api_name": "getWeather",
            "api_description": "Retrieve the weather",
            "field": "Meteorology/Forecasting",
            "parameters": {
                "city": {"type": "str", "description": "The city"},
                "days": {"type": "int", "description": "How many days", "example": "3"},
                "metric": {"type": "bool", "description": "Metric units"},
                "lat": {"type": "float", "description": "Latitude"},
            },
            "required": ["city"],
            "responses": {"forecast": {"type": "str", "description": "The forecast"}},
        },
        {
            "api_name": "sendMail",
            "api_description": "Send an email",
            "field": "Office/Mail",
            "parameters": {"to": {"type": "str", "description": "Recipient"}},
            "required": ["to"],
        },
    ]
    _write(root, "Seal-Tools_Dataset/tool.jsonl", "".join(json.dumps(a) + "\n" for a in apis))
    dev = [
        {"id": "dev-easy-0", "query": "Weather in Paris?", "calling": [{"api": "getWeather", "parameters": {}}]},
        {
            "id": "dev-difficult-0",
            "query": "Weather, then mail it.",
            "calling": [
                {"api": "getWeather", "parameters": {}},
                {"api": "sendMail", "parameters": {}},
                {"api": "getWeather", "parameters": {}},
            ],
        },
    ]
    _write(root, "Seal-Tools_Dataset/dev.jsonl", "".join(json.dumps(d) + "\n" for d in dev))
    test = [{"id": "test_in_domain-easy-0", "query": "Mail Bob.", "calling": [{"api": "sendMail"}]}]
    _write(root, "Seal-Tools_Dataset/test_in_domain.jsonl", "".join(json.dumps(d) + "\n" for d in test))
    return root


def test_seal_tools_converter_on_a_fixture_in_the_repository_layout(seal_checkout: Path, tmp_path: Path) -> None:
    spec = DATASETS["seal_tools"]
    with pytest.raises(DataSourceError, match=r"tool\.jsonl .* expected"):
        fetch("seal_tools", seal_checkout, tmp_path / "out")
    source = Source(seal_checkout)
    verify(spec, source, _digests(seal_checkout, list(spec.files)))
    tools, queries = convert("seal_tools", source)
    assert tools[0] == {
        "name": "getWeather",
        "description": "Retrieve the weather",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "days": {"type": "integer", "description": "How many days"},
                "metric": {"type": "boolean", "description": "Metric units"},
                "lat": {"type": "number", "description": "Latitude"},
            },
            "required": ["city"],
        },
        "source": "Meteorology/Forecasting",
    }
    assert [(q["id"], q["relevant"], q["subset"]) for q in queries] == [
        ("seal-dev-easy-0", ["getWeather"], "dev/easy"),
        ("seal-dev-difficult-0", ["getWeather", "sendMail"], "dev/difficult"),
        ("seal-test_in_domain-easy-0", ["sendMail"], "test_in_domain/easy"),
    ]
    folder = fetch("seal_tools", seal_checkout, tmp_path / "out", check=False)
    assert len(load_tools(folder / "tools.jsonl")) == 2


def test_a_report_prints_the_load_average_at_its_end_beside_the_one_at_its_start(tmp_path: Path) -> None:
    from benchmarks.lib import machine_info, machine_markdown, write_report

    info = machine_info()
    markdown = "# r\n\n" + "\n".join(machine_markdown(info)) + "\n\nbody\n"
    report = {"machine": info}
    write_report(tmp_path, "r", report, markdown, quiet=True)
    written = (tmp_path / "r.md").read_text()
    lines = written.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("- Load average at start"))
    assert lines[start + 1].startswith("- Load average at the end (1/5/15 min): [")
    assert json.loads((tmp_path / "r.json").read_text())["machine"]["load_average_at_end"]
    # a report that wrote its own end figure keeps it, once
    write_report(tmp_path, "r", report, written, quiet=True)
    assert (tmp_path / "r.md").read_text().count("Load average at the end") == 1


def test_a_report_prints_the_speed_probe_at_its_start_and_end(tmp_path: Path) -> None:
    """The load average cannot see a shared host's other tenants; the probe's time can, on both sides of a run."""
    from benchmarks.lib import machine_info, machine_markdown, speed_probe, write_report

    assert 0 < speed_probe() < 60_000
    info = machine_info()
    assert info["speed_probe_ms_at_start"] > 0
    markdown = "# r\n\n" + "\n".join(machine_markdown(info)) + "\n\nbody\n"
    report = {"machine": info}
    write_report(tmp_path, "r", report, markdown, quiet=True)
    lines = (tmp_path / "r.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("- Speed probe") and "at start" in line)
    assert lines[start].endswith(f"at start: {info['speed_probe_ms_at_start']} ms")
    end = lines[start + 1]
    assert end.startswith("- Speed probe (a fixed pure-Python workload") and " at the end: " in end
    assert json.loads((tmp_path / "r.json").read_text())["machine"]["speed_probe_ms_at_end"] > 0
    write_report(tmp_path, "r", report, (tmp_path / "r.md").read_text(), quiet=True)
    assert (tmp_path / "r.md").read_text().count("at the end: ") == 1
