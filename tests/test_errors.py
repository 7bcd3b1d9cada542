"""One error tree: each error defined in toolsearch/_errors.py, exported from the root, keeping its stdlib base."""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
from collections.abc import Callable
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
        # a warning (PluginWarning) is a UserWarning, so `warnings.filterwarnings` treats it as one
        assert issubclass(cls, toolsearch.ToolSearchError) or issubclass(cls, UserWarning), name
        assert name in toolsearch.__all__ and getattr(toolsearch, name) is cls, f"{name} is not exported from the root"
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
        ("benchmarks.data", "DataSourceError"),  # the benchmarks raise it; the class is the library's
    ],
)
def test_old_import_paths_give_the_one_class(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(toolsearch, name)


@pytest.mark.parametrize(
    ("name", "stdlib"),
    [
        ("InvalidToolError", ValueError),
        ("DuplicateToolError", ValueError),
        ("UnknownToolError", KeyError),
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


# --- the one translation to MCP -----------------------------------------------------------------


def test_errors_reach_mcp_clients_through_one_translation() -> None:
    import mcp_types as types

    from toolsearch.mcp.errors import CATALOG_UNAVAILABLE, mcp_error, protocol_error, tool_error

    store = mcp_error(toolsearch.SessionStoreError("redis://localhost:6379 did not answer"))
    assert store.code == types.INTERNAL_ERROR
    assert store.message.startswith("toolsearch gateway: redis://localhost:6379 did not answer.")
    assert "retry once the session store answers" in store.message
    bad = mcp_error(toolsearch.InvalidQueryError("the query is empty; give a few words"), "tool_search failed")
    assert (bad.code, bad.message) == (types.INVALID_PARAMS, "tool_search failed: the query is empty; give a few words")
    assert mcp_error(toolsearch.BackendError("faiss failed")).code == types.INTERNAL_ERROR
    down = mcp_error(toolsearch.CatalogStoreError("catalog store postgresql://db failed to search"))
    assert down.code == CATALOG_UNAVAILABLE and "retry in" in down.message and down.data == {"retryAfter": 5}
    refused = toolsearch.CatalogStoreError("catalog store postgresql://db failed to search: Postgres refused ...")
    refused.outage = False  # a statement Postgres refused, a malformed DSN: retrying cannot help
    answer = mcp_error(refused)
    assert answer.code == types.INTERNAL_ERROR and "retry" not in answer.message and answer.data is None
    result = tool_error(toolsearch.ToolNotAllowedError("not allowed"))
    assert result.is_error and result.content[0].text == "toolsearch gateway: not allowed"
    raised = protocol_error(toolsearch.SessionRequiredError("no session id"))
    assert raised.error.code == types.INVALID_PARAMS and raised.error.message == "toolsearch gateway: no session id"


def test_no_other_mcp_module_words_our_errors_for_clients() -> None:
    # every `except <our error>` in mcp/ that answers a client goes through toolsearch/mcp/errors.py
    for path in sorted((PACKAGE / "mcp").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name != "errors.py":
            assert "toolsearch gateway: {exc}" not in text, path
            assert "message=str(exc)" not in text and "error_result(str(exc))" not in text, path


# --- the public API refuses bad input with tree errors ------------------------------------------

# (the root name a case exercises, the call, a word the message must contain: the input it names)
Case = tuple[str, Callable[[], object], str]


def _bad_calls(tmp: Path) -> dict[str, Case]:
    from toolsearch import (
        Augmentation,
        Catalog,
        E5Embedder,
        ExecutorConfig,
        IndexStore,
        InMemorySessionStore,
        LoopConfig,
        NameMap,
        NumpyEmbedder,
        RedisSessionStore,
        SentenceTransformerEmbedder,
        SessionManager,
        SessionState,
        Tool,
        ToolExecutor,
        ToolIndex,
        ToolSearchLoop,
        ToolSearchMetaTool,
        ToolsEmbedder,
        ahandle_tool_calls,
        arun,
        handle_tool_calls,
        load_tools,
        provider_safe_name,
        register_backend,
        run,
        store_from_url,
        system_prompt_suffix,
        tools_for_request,
    )
    from toolsearch.providers import ScriptedModel, reply

    (tmp / "junk.json").write_text("{not json", encoding="utf-8")
    (tmp / "empty.json").write_text("", encoding="utf-8")
    (tmp / "nameless.json").write_text(json.dumps([{"name": 5}]), encoding="utf-8")
    tools = [Tool("send_email", "Send an email"), Tool("get_weather", "Weather forecast for a city")]
    index = ToolIndex.build(tools, "regex")
    sessions = SessionManager(index)
    session = sessions.create("s1")

    def model() -> ScriptedModel:
        return ScriptedModel(turns=[reply(text="done")])

    return {
        # tools and catalogs: wrong types, empty values, unreadable files
        "Tool(name=123)": ("Tool", lambda: Tool(123), "name"),
        "Tool(name='')": ("Tool", lambda: Tool(""), "name"),
        "Tool(description=5)": ("Tool", lambda: Tool("x", 5), "description"),
        "Tool(input_schema='nope')": ("Tool", lambda: Tool("x", "d", "nope"), "schema"),
        "Tool(tags=5)": ("Tool", lambda: Tool("x", "d", tags=5), "tags"),
        "Tool.from_openai('nope')": ("Tool", lambda: Tool.from_openai("nope"), "OpenAI"),
        "Tool.from_anthropic({})": ("Tool", lambda: Tool.from_anthropic({}), "name"),
        "Tool.from_mcp(42)": ("Tool", lambda: Tool.from_mcp(42), "MCP"),
        "Tool.from_dict({})": ("Tool", lambda: Tool.from_dict({}), "shape"),
        "Tool.from_callable(42)": ("Tool", lambda: Tool.from_callable(42), "callable"),
        "load_tools(missing)": ("load_tools", lambda: load_tools(tmp / "missing.json"), "not found"),
        "load_tools(junk)": ("load_tools", lambda: load_tools(tmp / "junk.json"), "invalid JSON"),
        "load_tools(empty)": ("load_tools", lambda: load_tools(tmp / "empty.json"), "empty.json"),
        "load_tools(nameless)": ("load_tools", lambda: load_tools(tmp / "nameless.json"), "name"),
        "load_tools(42)": ("load_tools", lambda: load_tools(42), "path"),
        "provider_safe_name(42)": ("provider_safe_name", lambda: provider_safe_name(42), "name"),
        "NameMap([1, 2])": ("NameMap", lambda: NameMap([1, 2]), "name"),
        "Catalog([1])": ("Catalog", lambda: Catalog([1]), "Tool"),
        "Catalog('abc')": ("Catalog", lambda: Catalog("abc"), "Tool"),
        "Catalog(duplicates)": ("Catalog", lambda: Catalog([Tool("a"), Tool("a", "other")]), "unique"),
        "catalog['nope']": ("Catalog", lambda: index.catalog["nope"], "nope"),
        # embedders: wrong types, unknown runtimes and models, folders that hold no model
        "NumpyEmbedder(5)": ("NumpyEmbedder", lambda: NumpyEmbedder(5), "model"),
        "NumpyEmbedder(runtime='bogus')": ("NumpyEmbedder", lambda: NumpyEmbedder(runtime="bogus"), "runtime"),
        "ToolsEmbedder(missing)": ("ToolsEmbedder", lambda: ToolsEmbedder(query_model=tmp / "nothing"), "nothing"),
        "E5Embedder(threads=0)": ("E5Embedder", lambda: E5Embedder(threads=0), "threads"),
        "SentenceTransformerEmbedder('minlm')": (
            "SentenceTransformerEmbedder", lambda: SentenceTransformerEmbedder("minlm"), "did you mean minilm"),
        # indexes and search: unknown names, wrong types, empty queries
        "ToolIndex.build(backend='nope')": ("ToolIndex", lambda: ToolIndex.build(tools, "nope"), "backend"),
        "ToolIndex.build(42)": ("ToolIndex", lambda: ToolIndex.build(42, "regex"), "Tool"),
        "ToolIndex.build(bogus=1)": ("ToolIndex", lambda: ToolIndex.build(tools, "regex", bogus=1), "bogus"),
        "ToolIndex.load(missing)": ("ToolIndex", lambda: ToolIndex.load(tmp / "nothing"), "toolsearch build"),
        "ToolIndex.load(42)": ("ToolIndex", lambda: ToolIndex.load(42), "folder"),
        "index.search('')": ("ToolIndex", lambda: index.search(""), "query"),
        "index.search(42)": ("ToolIndex", lambda: index.search(42), "query"),
        "index.search(k=0)": ("ToolIndex", lambda: index.search("email", 0), "k"),
        "index.search(k='3')": ("ToolIndex", lambda: index.search("email", "3"), "k"),
        "IndexStore(42)": ("IndexStore", lambda: IndexStore(42), "root"),
        "IndexStore.open('../escape')": ("IndexStore", lambda: IndexStore(tmp).open("../escape"), "name"),
        "IndexStore.open(missing)": ("IndexStore", lambda: IndexStore(tmp).open("missing"), "toolsearch build"),
        # sessions and their stores
        "SessionManager(42)": ("SessionManager", lambda: SessionManager(42), "ToolIndex"),
        "SessionManager(max_discovered=0)": ("SessionManager", lambda: SessionManager(index, max_discovered=0),
                                             "max_discovered"),
        "sessions.get('nope')": ("SessionManager", lambda: sessions.get("nope"), "nope"),
        "sessions.create('')": ("SessionManager", lambda: sessions.create(""), "session id"),
        "sessions.create(allowed=5)": ("SessionManager", lambda: sessions.create("s2", allowed=5),
                                       "allowed"),
        "sessions.create(allowed=unknown)": ("SessionManager", lambda: sessions.create("s3", allowed=["nope"]),
                                             "allowed"),
        "session.tool('nope')": ("Session", lambda: session.tool("nope"), "nope"),
        "session.pin(['nope'])": ("Session", lambda: session.pin(["nope"]), "nope"),
        "session.search('')": ("Session", lambda: session.search(""), "query"),
        "InMemorySessionStore(ttl_seconds=0)": ("InMemorySessionStore", lambda: InMemorySessionStore(ttl_seconds=0),
                                                "ttl_seconds"),
        "RedisSessionStore('http://x')": ("RedisSessionStore", lambda: RedisSessionStore("http://x"), "redis://"),
        "RedisSessionStore(max_connections=0)": ("RedisSessionStore", lambda: RedisSessionStore(max_connections=0),
                                                 "max_connections"),
        "SessionState.from_dict('x')": ("SessionState", lambda: SessionState.from_dict("x"), "JSON object"),
        "SessionState.from_dict({})": ("SessionState", lambda: SessionState.from_dict({}), "id"),
        "store_from_url('postgres://x')": ("store_from_url", lambda: store_from_url("postgres://x"), "redis://"),
        "store_from_url('')": ("store_from_url", lambda: store_from_url(""), "memory://"),
        # the meta-tool, the loop and the bring-your-own-loop helpers
        "ToolSearchMetaTool(default_results=0)": ("ToolSearchMetaTool", lambda: ToolSearchMetaTool(default_results=0),
                                                  "default_results"),
        "ToolSearchMetaTool(name='')": ("ToolSearchMetaTool", lambda: ToolSearchMetaTool(name=""), "name"),
        "ToolSearchMetaTool(max_results='10')": ("ToolSearchMetaTool",
                                                 lambda: ToolSearchMetaTool(max_results="10"),
                                                 "max_results"),
        "system_prompt_suffix(42)": ("system_prompt_suffix", lambda: system_prompt_suffix(42), "session"),
        "LoopConfig(max_iterations=0)": ("LoopConfig", lambda: LoopConfig(max_iterations=0), "max_iterations"),
        "LoopConfig(tool_search='maybe')": ("LoopConfig", lambda: LoopConfig(tool_search="maybe"),
                                            "tool_search"),
        "LoopConfig(undiscovered='run')": ("LoopConfig", lambda: LoopConfig(undiscovered="run"),
                                           "undiscovered"),
        "LoopConfig(max_iterations='3')": ("LoopConfig", lambda: LoopConfig(max_iterations="3"), "integer"),
        "LoopConfig(stream=1)": ("LoopConfig", lambda: LoopConfig(stream=1), "stream"),
        "ExecutorConfig(tool_timeout=-1)": ("ExecutorConfig", lambda: ExecutorConfig(tool_timeout=-1), "tool_timeout"),
        "ExecutorConfig(max_result_bytes='x')": ("ExecutorConfig", lambda: ExecutorConfig(max_result_bytes="x"),
                                                 "max_result_bytes"),
        "ToolSearchLoop(sessions=42)": ("ToolSearchLoop", lambda: ToolSearchLoop(model(), 42), "SessionManager"),
        "ToolSearchLoop(bogus=1)": ("ToolSearchLoop", lambda: ToolSearchLoop(model(), sessions, bogus=1), "bogus"),
        "run(session=42)": ("run", lambda: run(model(), "hi", session=42), "Session"),
        "run(prompt=42)": ("run", lambda: run(model(), 42, session=session), "prompt"),
        "run(bogus=1)": ("run", lambda: run(model(), "hi", session=session, bogus=1), "bogus"),
        "arun(session=42)": ("arun", lambda: asyncio.run(arun(model(), "hi", session=42)), "Session"),
        "register_backend(42)": ("register_backend", lambda: register_backend(42), "BackendSpec"),
        "store_from_url(42)": ("store_from_url", lambda: store_from_url(42), "memory://"),
        "ToolSearchLoop(max_iterations=0)": ("ToolSearchLoop",
                                             lambda: ToolSearchLoop(model(), sessions, max_iterations=0),
                                             "max_iterations"),
        "run(tool_search='maybe')": ("run", lambda: run(model(), "hi", session=session, tool_search="maybe"),
                                     "tool_search"),
        "arun(tool_search='maybe')": ("arun",
                                      lambda: asyncio.run(arun(model(), "hi", session=session, tool_search="maybe")),
                                      "tool_search"),
        "ToolExecutor([42])": ("ToolExecutor", lambda: ToolExecutor([42]), "callable"),
        "ToolExecutor(42)": ("ToolExecutor", lambda: ToolExecutor(42), "functions"),
        "tools_for_request(format='nope')": ("tools_for_request", lambda: tools_for_request(session, "nope"),
                                             "format"),
        "tools_for_request(42)": ("tools_for_request", lambda: tools_for_request(42), "session"),
        "handle_tool_calls([42])": ("handle_tool_calls", lambda: handle_tool_calls(session, [42]), "tool call"),
        "handle_tool_calls([{}])": ("handle_tool_calls", lambda: handle_tool_calls(session, [{}]), "name"),
        "handle_tool_calls(calls=42)": ("handle_tool_calls", lambda: handle_tool_calls(session, 42), "calls"),
        "ahandle_tool_calls([42])": ("ahandle_tool_calls", lambda: asyncio.run(ahandle_tool_calls(session, [42])),
                                     "tool call"),
        "Augmentation.of(42)": ("Augmentation", lambda: Augmentation.of(42), "augment"),
        "Augmentation.of({})": ("Augmentation", lambda: Augmentation.of({}), "properties"),
        "Augmentation.from_file(missing)": ("Augmentation", lambda: Augmentation.from_file(tmp / "missing.json"),
                                            "not found"),
    }


# Root names that take no input a caller could get wrong, and why.
TAKES_NO_INPUT = {
    "backend_names": "no arguments",
    "default_backend": "no arguments",
    "SessionStore": "a Protocol, never called",
    "LoopOutcome": "an enum of outcomes",
    "Hit": "a result record toolsearch builds",
    "Ranking": "a result record a backend builds",
    "SearchResult": "a result record toolsearch builds",
    "CatalogDelta": "a result record Catalog.diff builds",
    "LoopResult": "a result record the loop builds",
    "StreamEvent": "an event record the providers build",
    "BackendSpec": "a record; register_backend reads it",
}
# Public calls whose bad input still escapes as a bare error: kept visible here until they check it.
NOT_YET_CHECKED: dict[str, str] = {}


def test_public_calls_refuse_bad_input_with_tree_errors(tmp_path: Path) -> None:
    bare = []
    for label, (_, call, mention) in _bad_calls(tmp_path).items():
        try:
            call()
        except toolsearch.ToolSearchError as exc:
            message = str(exc)
            if mention.lower() not in message.lower() or len(message) < 20:
                bare.append(f"{label}: {type(exc).__name__} says {message!r}, which does not name {mention!r}")
        except Exception as exc:
            bare.append(f"{label}: bare {type(exc).__module__}.{type(exc).__name__}: {exc}")
        else:
            bare.append(f"{label}: accepted")
    assert not bare, "\n".join(bare)


def test_the_bad_input_walk_covers_every_public_callable(tmp_path: Path) -> None:
    covered = {name for name, _, _ in _bad_calls(tmp_path).values()}
    errors = set(_tree())
    walked = set(toolsearch.__all__) - errors - set(TAKES_NO_INPUT) - set(NOT_YET_CHECKED)
    assert walked - covered == set(), "add bad-input cases for these public callables"
    assert not covered - set(toolsearch.__all__), "cases name something that is not public"
