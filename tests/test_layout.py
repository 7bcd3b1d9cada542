"""The tests mirror the package: one folder per subpackage, top-level modules' tests in tests/ itself."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
HELPERS = {"fakes", "mcp_servers", "interop", "skip_policy", "plugins", "data", "__pycache__"}  # data: fixtures' files
# e2e: whole tasks across the package, not one subpackage's tests; bench: the benchmarks' code (benchmarks/, which
# the package does not ship)
EXTRA = {"e2e", "bench"}
# subpackages whose tests live in one file rather than a folder of their own
ELSEWHERE = {"training": "test_training.py", "pg": "backends/test_postgres.py"}


def test_every_test_folder_is_a_subpackage_or_a_named_tier() -> None:
    subpackages = {p.parent.name for p in (ROOT / "toolsearch").glob("*/__init__.py")}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in HELPERS and not p.name.startswith(".")}
    assert folders - subpackages - EXTRA == set(), "a test folder must mirror a subpackage of toolsearch"
    tested = {f for f in folders if any((TESTS / f).glob("test_*.py"))}
    untested = subpackages - tested - set(ELSEWHERE)
    assert not untested, f"subpackages without a test folder: {untested} (or name where their tests live)"
    assert all((TESTS / where).is_file() for where in ELSEWHERE.values())


def test_test_file_names_are_unique_across_folders() -> None:
    # pytest imports test modules by file name (rootdir-relative, no __init__.py): two alike would collide.
    names = [p.name for p in TESTS.rglob("test_*.py") if not set(p.relative_to(TESTS).parts) & HELPERS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_mcp_tests_follow_one_naming_scheme() -> None:
    # tests/mcp: test_gateway_<topic>.py drives a real gateway process; test_<module>.py tests one module of
    # toolsearch/mcp in-process. No second prefix (the folder already says mcp).
    modules = {p.stem for p in (ROOT / "toolsearch" / "mcp").glob("*.py")}
    odd = [
        p.name
        for p in (TESTS / "mcp").glob("test_*.py")
        if not p.stem.startswith("test_gateway_") and p.stem.removeprefix("test_") not in modules
    ]
    assert not odd, f"tests/mcp files named neither test_gateway_<topic> nor test_<module of toolsearch/mcp>: {odd}"


# --- the MCP gateway: one rules core, two thin protocol eras -----------------------------------------

MCP = ROOT / "toolsearch" / "mcp"
ERAS = ("handshake.py", "modern.py")
ADAPTERS = (*ERAS, "gateway.py")
# What deciding a request takes: the policy, the executor's rules, rug-pull pins, the usage log, the
# augmentation, and the settings that change an answer. Only the rules core (mcp/rules.py) touches them.
RULE_PARTS = {
    "executor", "pins", "usage", "policy", "augment", "require_discovery", "min_relative_score", "allowed_for",
    "split_augmented", "consume", "held", "blocked", "withheld", "searched", "called", "discover", "is_allowed",
    "is_visible", "touch", "caller_of_request", "caller_of_scope", "request_scope", "owner_of",
}  # fmt: skip


def _tree(name: str) -> ast.Module:
    return ast.parse((MCP / name).read_text(encoding="utf-8"), filename=name)


def _names(tree: ast.AST) -> set[str]:
    """Every attribute and bare name a module uses (x.y gives "y", f(...) gives "f")."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.rsplit(".", 1)[-1])
    return found


def test_no_protocol_era_holds_the_gateway() -> None:
    for era in ERAS:
        tree = _tree(era)
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m and m.rsplit(".", 1)[-1] == "gateway"}, f"{era} imports the gateway"
        assert "Gateway" not in _names(tree), f"{era} names the Gateway"


def test_the_eras_share_one_admit_one_search_and_one_caller_resolution() -> None:
    for adapter in ADAPTERS:
        used = _names(_tree(adapter)) & RULE_PARTS
        assert not used, f"{adapter} decides for itself with {sorted(used)}: that belongs in mcp/rules.py"
        runs_search = [
            n
            for n in ast.walk(_tree(adapter))
            if isinstance(n, ast.Attribute) and n.attr == "run" and _names(n.value) & {"metatool"}
        ]
        assert not runs_search, f"{adapter} runs the search itself: mcp/rules.py does"
    core = next(n for n in _tree("rules.py").body if isinstance(n, ast.ClassDef) and n.name == "GatewayRules")
    methods = {n.name for n in core.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert {"resolve", "search", "shown", "admit", "call"} <= methods
    # the caller is resolved once per request, at the edge (the gateway's handlers), and handed to the eras
    for era in ERAS:
        assert "resolve" not in _names(_tree(era)), f"{era} resolves the caller itself"


def test_one_rule_says_whether_a_request_is_2026() -> None:
    for path in sorted(MCP.glob("*.py")):
        if path.name == "source.py":  # the gateway as a client of its upstreams: which era it speaks to them
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.name == "caller.py":
            assert "HANDSHAKE_PROTOCOL_VERSIONS" in _names(tree)
            continue
        assert "HANDSHAKE_PROTOCOL_VERSIONS" not in _names(tree), f"{path.name} decides the era itself"
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str | bytes)}
        assert not {"mcp-protocol-version", b"mcp-protocol-version"} & literals, f"{path.name} reads the header itself"
        compares = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Compare) and "protocol_version" in _names(n) and any(
                isinstance(op, ast.In | ast.NotIn) for op in n.ops
            )
        ]  # fmt: skip
        assert not compares, f"{path.name} compares a protocol version itself: use caller.is_modern"


def test_each_gateway_constant_has_one_home() -> None:
    homes: dict[str, list[str]] = {}
    for path in sorted((ROOT / "toolsearch").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign
            ) else []  # fmt: skip
            value = getattr(node, "value", None)
            for target in targets if isinstance(value, ast.Constant) else []:  # constants, not TypeVars
                if isinstance(target, ast.Name) and target.id.lstrip("_").isupper():
                    homes.setdefault(target.id, []).append(str(path.relative_to(ROOT)))
    assert homes["CALL_TOOL"] == ["toolsearch/mcp/metatools.py"]
    in_mcp = {n: [p for p in ps if p.startswith("toolsearch/mcp/")] for n, ps in homes.items()}
    twice = {n: ps for n, ps in in_mcp.items() if len(ps) > 1}
    assert not twice, f"constants defined in two gateway modules: {twice}"


# --- no import circles -----------------------------------------------------------------------------------


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The modules of `modules` that `module` imports anywhere (functions too), except under `if TYPE_CHECKING:`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(nodes: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in _names(node.test):
                yield from walk(node.orelse)
            else:
                yield from walk(ast.iter_child_nodes(node))

    for node in walk([ast.parse(path.read_text(encoding="utf-8"))]):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in modules)
            continue
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:  # `from a import b`: the module a.b when there is one, else a
            target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
            if target in modules and target != module:
                yield target


def _circles(package: str) -> list[list[str]]:
    """Every import circle among the package's modules (a strongly connected set of two or more, Tarjan's)."""
    modules = _modules(package)
    graph = {m: set(_imports(m, p, modules)) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            circle = []
            while not circle or circle[-1] != module:
                circle.append(stack.pop())
            if len(circle) > 1:
                circles.append(sorted(circle))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


@pytest.mark.parametrize("package", ["toolsearch", "benchmarks"])
def test_no_import_circle(package: str) -> None:
    # Imports inside functions count (they still tie two modules together); only type-only ones do not.
    assert _circles(package) == [], f"import circles in {package}/: break each by giving what both use one home"
