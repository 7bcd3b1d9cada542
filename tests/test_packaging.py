"""Packaging: a light `import toolsearch`, the console script, the shipped data and type marker."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["torch", "sentence_transformers", "transformers", "faiss", "tantivy", "openai", "anthropic", "mcp",
         "bm25s", "fastmcp", "matplotlib", "tqdm", "langchain", "langchain_core", "langgraph", "pydantic_ai", "agents",
         "onnxruntime", "onnx",
         # toolsearch.tracing never imports it: a provider can only exist if the application did
         "opentelemetry"]


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import toolsearch",
        "from toolsearch import ToolIndex, IndexStore, Tool, load_tools, Catalog",
        # the CLI starts fast: parsing and --help import no backend, model or SDK
        "import toolsearch.cli; toolsearch.cli.build_parser(['build'])",
        # the integrations package itself imports no framework (each module imports its own)
        "import toolsearch.integrations",
        # the hooks' module, and the loop that calls them
        "import toolsearch.tracing, toolsearch.loop",
    ],
)
def test_import_is_light(code: str) -> None:
    loaded = _modules_after(code)
    assert not loaded & set(HEAVY), f"`{code}` imported {sorted(loaded & set(HEAVY))}"


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import contextlib, io, toolsearch.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()): toolsearch.cli.main(['--help'])"
    )
    assert not _modules_after(code) & set(HEAVY)


def test_public_api_is_exported() -> None:
    import toolsearch

    missing = [name for name in toolsearch.__all__ if not hasattr(toolsearch, name)]
    assert not missing
    assert toolsearch.__version__ == importlib.metadata.version("toolsearch")


def test_console_script_is_declared_and_installed() -> None:
    scripts = importlib.metadata.entry_points(group="console_scripts", name="toolsearch")
    assert [ep.value for ep in scripts] == ["toolsearch.cli:main"]
    script = Path(sys.executable).parent / "toolsearch"
    assert script.exists(), f"{script} missing: install the package (pip install -e .)"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("toolsearch ")


def test_python_dash_m_runs_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "toolsearch", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: toolsearch" in proc.stdout


def test_shipped_files() -> None:
    package = importlib.resources.files("toolsearch")
    assert package.joinpath("py.typed").is_file()
    catalog = package.joinpath("data", "demo_catalog.jsonl")
    lines = [json.loads(line) for line in catalog.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) >= 150
    assert len({line.get("namespace") for line in lines}) >= 5


def test_pyproject_extras_and_core_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    frameworks = {"langchain", "pydantic-ai", "openai-agents"}
    assert {"vector", "providers", "mcp", "bench", "dev", "all", *frameworks} <= set(extras)
    core = {re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    # the core install stays light: no torch, model or provider SDK
    assert not core & {"torch", "sentence-transformers", "faiss-cpu", "openai", "anthropic", "mcp"}, core
    # torch is never pinned by the package: the user's environment chooses the build
    assert not any(dep.startswith("torch") for group in extras.values() for dep in group)
    assert project["scripts"]["toolsearch"] == "toolsearch.cli:main"


def test_the_default_backend_needs_no_torch() -> None:
    # A torch-free install (`pip install 'toolsearch[vector]'` + `toolsearch model install`) must get the hybrid
    # default and a working vector search; sys.modules[name] = None makes both imports fail as if not installed.
    probe = (
        "import sys\n"
        "sys.modules['torch'] = sys.modules['sentence_transformers'] = None\n"
        "from toolsearch import Tool, ToolIndex, default_backend\n"
        "tools = [Tool('send_email', 'Send an email message'), Tool('get_weather', 'Weather forecast for a city')]\n"
        "index = ToolIndex.build(tools)\n"
        "print(default_backend(), index.backend_name, index.search('will it rain tomorrow', 1).names[0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["hybrid", "hybrid", "get_weather"]
