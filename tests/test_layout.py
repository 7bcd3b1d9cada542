"""The tests mirror the package: one folder per subpackage, top-level modules' tests in tests/ itself."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
HELPERS = {"fakes", "mcp_servers", "interop", "skip_policy", "plugins", "__pycache__"}
EXTRA = {"e2e"}  # whole tasks across the package, not one subpackage's tests


def test_every_test_folder_is_a_subpackage_or_a_named_tier() -> None:
    subpackages = {p.parent.name for p in (ROOT / "toolsearch").glob("*/__init__.py")}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in HELPERS and not p.name.startswith(".")}
    assert folders - subpackages - EXTRA == set(), "a test folder must mirror a subpackage of toolsearch"
    tested = {f for f in folders if any((TESTS / f).glob("test_*.py"))}
    assert subpackages - {"data"} <= tested, f"subpackages without a test folder: {subpackages - {'data'} - tested}"


def test_test_file_names_are_unique_across_folders() -> None:
    # pytest imports test modules by file name (rootdir-relative, no __init__.py): two alike would collide.
    names = [p.name for p in TESTS.rglob("test_*.py") if not set(p.relative_to(TESTS).parts) & HELPERS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


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
