"""One error tree: each error defined in toolsearch/_errors.py, exported from the root, keeping its stdlib base."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import toolsearch
from toolsearch import _errors

PACKAGE = Path(toolsearch.__file__).parent


def _tree() -> dict[str, type[BaseException]]:
    return {
        name: value
        for name, value in vars(_errors).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }


def test_every_error_class_in_the_package_is_defined_in_the_tree_module() -> None:
    tree = set(_tree())
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue  # a private signal caught inside its own module is not part of the tree
            bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
            if any(b in tree or b.endswith(("Error", "Exception")) for b in bases):
                elsewhere.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not elsewhere, f"define these in toolsearch/_errors.py and re-import them: {elsewhere}"


def test_every_error_is_rooted_exported_and_drawn() -> None:
    for name, cls in _tree().items():
        assert issubclass(cls, toolsearch.ToolSearchError), name
        assert name in toolsearch.__all__ and getattr(toolsearch, name) is cls, f"{name} is not exported from the root"
        assert name in _errors.__all__, name
        assert f" {name}" in (_errors.__doc__ or ""), f"{name} is missing from the tree in the module docstring"
    # the docstring draws each class under its real parent
    for line in (_errors.__doc__ or "").splitlines():
        words = line.replace("│", " ").replace("├──", " ").replace("└──", " ").split()
        if words and words[0] in _tree() and "(" in line:
            base = line[line.index("(") + 1 : line.index(")")]
            assert issubclass(_tree()[words[0]], getattr(__import__("builtins"), base)), line


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("toolsearch.providers", "ProviderError"),
        ("toolsearch.providers._base", "ProviderError"),
        ("toolsearch.usage", "UsageError"),
        ("toolsearch.cost", "PriceTableError"),
        ("toolsearch.mcp", "MCPConfigError"),
        ("toolsearch.mcp.config", "MCPConfigError"),
        ("toolsearch.mcp", "UpstreamError"),
        ("toolsearch.mcp.source", "UpstreamError"),
        ("toolsearch.cli", "CommandError"),
        ("toolsearch.eval_cli", "EvalError"),
        ("toolsearch.bench.data", "DataSourceError"),
    ],
)
def test_old_import_paths_give_the_one_class(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(toolsearch, name)


@pytest.mark.parametrize(
    ("name", "stdlib"),
    [
        ("InvalidToolError", ValueError),
        ("DuplicateToolError", ValueError),
        ("InvalidQueryError", ValueError),
        ("QueryTimeoutError", ValueError),
        ("AugmentationError", ValueError),
        ("InvalidArgumentError", ValueError),
        ("UnknownFormatError", ValueError),
        ("ArgumentTypeError", TypeError),
        ("MissingDependencyError", ImportError),
        ("IndexNotFoundError", FileNotFoundError),
        ("InvalidIndexNameError", ValueError),
        ("SessionRequiredError", ValueError),
        ("UnknownSessionError", KeyError),
        ("SessionStateError", ValueError),
        ("ToolNotAllowedError", PermissionError),
        ("PriceTableError", ValueError),
        ("DataSourceError", ValueError),
        ("MCPConfigError", ValueError),
        ("AuthConfigError", ValueError),
        ("PolicyError", ValueError),
    ],
)
def test_callers_catching_the_stdlib_error_still_catch_it(name: str, stdlib: type[Exception]) -> None:
    cls = getattr(toolsearch, name)
    error = cls("boom", []) if name == "DuplicateToolError" else cls("boom")
    with pytest.raises(stdlib):
        raise error
    assert str(error) == "boom"
