"""Property-based fuzzing of every outside input: a documented error or a valid result, nothing else.

Each property holds for any input hypothesis makes: the call returns a valid result or raises a
documented error (rooted at ToolSearchError; the meta-tool answers with an instructive text
instead), never another exception, never a hang past its timeout, never a changed input file.
Budget: the "ci" profile (the default) keeps the whole file well under a minute; run
`HYPOTHESIS_PROFILE=deep pytest tests/test_fuzz.py --hypothesis-show-statistics` for more cases
(benchmarks/results/reliability.md records both runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import string
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from toolsearch import (
    Catalog,
    IndexStore,
    InvalidQueryError,
    SessionManager,
    Tool,
    ToolIndex,
    ToolSearchError,
    ToolSearchMetaTool,
    ahandle_tool_calls,
    handle_tool_calls,
    load_tools,
)
from toolsearch._untrusted import UNUSABLE, first_hidden
from toolsearch.mcp.config import load_config
from toolsearch.store import MANIFEST, verify_index
from toolsearch.text import clean_text, tool_text

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("deep", max_examples=1_500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

T = TypeVar("T")
HANG_SECONDS = 60.0  # far beyond any timeout of ours (the regex backend stops a pattern after 1 s)


def bounded(call: Callable[[], T]) -> T:
    """Run `call` in a thread; a call still running after HANG_SECONDS is a hang, reported as such."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(HANG_SECONDS)
    assert not worker.is_alive(), "the call hung"
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


# --- strategies ---------------------------------------------------------------------------------

# Odd Unicode: controls (C0, C1, ESC), zero-width, bidi and tag characters (an unassigned one too),
# lone surrogates (a JSON "\ud800" escape decodes to one; a non-UTF-8 argv byte becomes U+DC80..DCFF)
# and their neighbours, emoji, RTL scripts.
ODD = ("\x00\x07\x1b\x85\x9b\u200b\u200d\u202e\u2066\u2068\ufeff\u00ad\U000e0041\U000e0002"
       "\ud800\udbff\udc80\udcff\udfff\ud7ff\ue000\U0010fffd\u0645\u05d0🙂")
text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(ODD), max_size=40)
names = st.one_of(text, st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,20}", fullmatch=True))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), text)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=20
)
json_types = st.sampled_from(["object", "array", "string", "number", "integer", "boolean", "null", "thing", 3, None])
param_schema = st.recursive(
    st.fixed_dictionaries(
        {}, optional={"type": json_types, "description": text, "enum": st.lists(scalars, max_size=3)}
    ),
    lambda inner: st.fixed_dictionaries(
        {}, optional={"type": json_types, "properties": st.dictionaries(names, inner, max_size=3), "items": inner,
                      "anyOf": st.lists(inner, max_size=2), "description": text}
    ),
    max_leaves=8,
)
schemas = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {}, optional={"type": json_types, "properties": st.dictionaries(names, param_schema | json_values, max_size=4),
                      "required": st.lists(names, max_size=3) | json_values, "title": text}
    ),
)
field = st.one_of(names, json_values)
openai_tools = st.fixed_dictionaries(
    {"type": st.just("function")},
    optional={
        "function": st.fixed_dictionaries({}, optional={"name": field, "description": field, "parameters": schemas})
        | json_values,
        "name": field,
        "parameters": schemas,
    },
)
anthropic_tools = st.fixed_dictionaries({}, optional={"name": field, "description": field, "input_schema": schemas,
                                                      "namespace": field, "tags": field, "metadata": field})
mcp_tools = st.fixed_dictionaries({"inputSchema": schemas}, optional={"name": field, "description": field,
                                                                       "title": field, "annotations": field})
# Well-formed definitions with odd text in every field: they reach the walk over model-visible fields.
hostile_property = st.fixed_dictionaries(
    {"type": st.just("string")},
    optional={"description": text, "title": text, "enum": st.lists(text, max_size=2), "default": text,
              "examples": st.lists(text, max_size=2), "$comment": text, "pattern": text},
)
hostile_tools = st.fixed_dictionaries(
    {"name": names, "inputSchema": st.fixed_dictionaries(
        {"type": st.just("object"), "properties": st.dictionaries(names, hostile_property, max_size=3)})},
    optional={"description": text, "title": text, "annotations": st.fixed_dictionaries({"title": text})},
)
any_tool = st.one_of(openai_tools, anthropic_tools, mcp_tools, hostile_tools, json_values)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


file_contents = st.one_of(
    st.lists(any_tool, max_size=5).map(json.dumps),
    st.fixed_dictionaries({"tools": st.lists(any_tool, max_size=4) | json_values}).map(json.dumps),
    st.lists(any_tool, max_size=5).map(lambda items: "\n".join(json.dumps(i) for i in items)),
    json_values.map(json.dumps),
    text,
    st.integers(1, 200_000).map(_deep),  # deep enough to exhaust a recursive parser
    st.integers(1, 50_000).map(lambda n: json.dumps([{"name": f"t{i}", "description": "x" * 50} for i in range(n)])),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
)
bom = st.sampled_from(["", "\ufeff"])
suffixes = st.sampled_from([".json", ".jsonl", ".txt", ""])


# --- tool-file loaders --------------------------------------------------------------------------


@settings(max_examples=max(settings().max_examples // 2, 10))  # the big-file cases cost a second each
@given(content=file_contents, prefix=bom, suffix=suffixes)
# found by the deep profile: a non-object 'metadata' raised ValueError from dict()
@example(content='[{"name": "", "metadata": "0"}]', prefix="", suffix=".json")
@example(content='[{"name": "a", "tags": "abc"}]', prefix="", suffix=".json")
@example(content=_deep(5_000), prefix="\ufeff", suffix=".json")
@example(content='[{"name": "a", "description": "\\ud800"}, {"name": "b\\udcff"}]', prefix="", suffix=".json")
def test_fuzz_load_tools(content: str, prefix: str, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"tools{suffix}"
        path.write_bytes((prefix + content).encode("utf-8", "surrogatepass"))
        before = path.read_bytes()
        try:
            tools = bounded(lambda: load_tools(path))
        except ToolSearchError:
            tools = None
        assert path.read_bytes() == before, "the loader changed its input file"
    if tools is None:
        return
    for tool in tools:
        _check_valid_tool(tool)
    with contextlib.suppress(ToolSearchError):  # duplicates are a documented error
        Catalog(tools)


def _check_valid_tool(tool: Tool) -> None:
    assert isinstance(tool, Tool) and tool.name.strip()
    assert tool.description == clean_text(tool.description)
    assert tool.input_schema.get("type") == "object"
    again = Tool.from_dict(json.loads(json.dumps(tool.to_dict())))
    assert again.fingerprint == tool.fingerprint, "a tool does not survive its own JSON round trip"
    shown = [tool.to_openai(), tool.to_openai(responses=True), tool.to_anthropic(), tool.to_mcp(),
             {k: v for k, v in tool.metadata.items() if k in ("title", "annotations", "outputSchema")}]
    for shape in shown:
        assert _hidden_strings(shape) == [], "a hidden character reached what a model sees"
        json.dumps(shape, ensure_ascii=False).encode("utf-8")
    json.dumps(tool.to_dict(), ensure_ascii=False).encode("utf-8")  # what the index store writes
    tool_text(tool).joined().encode("utf-8")


def _hidden_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if first_hidden(value) else []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _hidden_strings(k) + _hidden_strings(v)]
    if isinstance(value, list):
        return [s for item in value for s in _hidden_strings(item)]
    return []


@given(definition=any_tool, namespace=st.none() | names)
@example(definition={"input_schema": {}, "name": "", "tags": "", "metadata": "0"}, namespace=None)
@example(definition={"name": "a", "tags": 5, "description": 0, "input_schema": []}, namespace=None)
@example(definition={"name": "a\ud800"}, namespace=None)
@example(definition={"name": "a", "description": "\ud800", "title": "\U000e0002", "inputSchema": {
    "type": "object", "properties": {"p": {"enum": ["\u202e"]}}}}, namespace="n\x1b[0m")
def test_fuzz_tool_converters(definition: Any, namespace: str | None) -> None:
    for convert in (Tool.from_dict, Tool.from_openai, Tool.from_anthropic, Tool.from_mcp):
        try:
            tool = convert(definition, namespace=namespace)
        except ToolSearchError:
            continue
        _check_valid_tool(tool)


# --- the meta-tool, as a model might call it ----------------------------------------------------

CATALOG = [
    Tool("send_email", "Send an email.", {"type": "object", "properties": {"to": {"type": "string"}}},
         namespace="mail"),
    Tool("read_inbox", "List received emails.", namespace="mail"),
    Tool("get_weather", "Weather for a city.", namespace="weather"),
    Tool("delete_account", "Delete a user account forever.", namespace="admin"),
]
ALLOWED = {"send_email", "read_inbox", "get_weather"}


BACKENDS = ["bm25", "regex", "vector", "hybrid"]  # each with its real engine: tantivy, regex, the model, faiss


@pytest.fixture(scope="module", params=BACKENDS)
def meta_session(request: pytest.FixtureRequest) -> Any:
    index = ToolIndex.build(CATALOG, backend=request.param)
    return SessionManager(index, max_discovered=2), index


model_arguments = st.one_of(
    st.none(),
    text,
    json_values,
    json_values.map(json.dumps),
    st.fixed_dictionaries(
        {}, optional={"query": field | st.sampled_from(["email", "x" * 1001, "  ", "mail.*", "+to:x", "(weather",
                                                         "a\ud800", "\udcff mail", "e\x00mail", "mail\x1b[2J"]),
                      "max_results": st.one_of(st.integers(-5, 20), text, st.floats(), st.booleans(), st.none()),
                      "namespace": st.one_of(st.sampled_from(["mail", "admin", "nope", ""]), field)},
    ),
)


@given(arguments=model_arguments, as_text=st.booleans())
@example(arguments={"query": "a\ud800"}, as_text=False)
@example(arguments={"query": "a\ud800"}, as_text=True)
@example(arguments="[" * 100_000, as_text=False)
def test_fuzz_metatool_arguments(meta_session: Any, arguments: Any, as_text: bool) -> None:
    manager, _ = meta_session
    session = manager.get_or_create("fuzz", allowed=ALLOWED)
    meta = ToolSearchMetaTool()
    if as_text and isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    outcome = bounded(lambda: meta.run(session, arguments))
    assert isinstance(outcome.text, str) and outcome.text
    if not outcome.ok:
        assert outcome.text.startswith("tool_search"), outcome.text
    assert set(session.discovered) <= ALLOWED, "a session discovered a tool outside its allowed set"
    assert len(session.discovered) <= 2
    assert "delete_account" not in outcome.text


# --- tool calls as a provider delivers them, through the executor ---------------------------------

provider_calls = st.one_of(
    model_arguments.map(lambda a: {"id": "c1", "type": "function",
                                   "function": {"name": "tool_search", "arguments": a if isinstance(a, str)
                                                else json.dumps(a)}}),
    model_arguments.map(lambda a: {"type": "tool_use", "id": "t1", "name": "tool_search", "input": a}),
    model_arguments.map(lambda a: {"type": "function_call", "call_id": "c1", "name": "tool_search",
                                   "arguments": a if isinstance(a, str) else json.dumps(a)}),
    st.fixed_dictionaries({"id": st.just("c2"), "type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": names, "arguments": text})}),
)


@settings(max_examples=max(settings().max_examples // 2, 10))  # two executors per example
@given(calls=st.lists(provider_calls, min_size=1, max_size=3))
@example(calls=[{"id": "c1", "type": "function", "function": {"name": "tool_search",
                                                              "arguments": '{"query": "a\\ud800"}'}}])
@example(calls=[{"type": "tool_use", "id": "t1", "name": "tool_search", "input": {"query": "\udcff mail"}}])
def test_fuzz_handle_tool_calls(meta_session: Any, calls: list[dict[str, Any]]) -> None:
    manager, _ = meta_session
    session = manager.get_or_create("fuzz-calls", allowed=ALLOWED)
    for results in (bounded(lambda: handle_tool_calls(session, calls)),
                    bounded(lambda: asyncio.run(ahandle_tool_calls(session, calls)))):
        assert len(results) == len(calls)
        for result in results:  # each call answered, in a form the next request can encode
            assert isinstance(result.content, str) and result.content
            json.dumps(result.to_openai_chat(), ensure_ascii=False).encode("utf-8")
            json.dumps(result.to_anthropic(), ensure_ascii=False).encode("utf-8")
    assert set(session.discovered) <= ALLOWED


# --- queries: Lucene on bm25, patterns on regex, any text on every backend ------------------------

LUCENE = [" ", "+", "-", '"', "(", ")", ":", "*", "~", "^", "?", "\\", "/", "[", "]", "{", "}", "!", "&&", "||",
          "AND", "OR", "NOT", "TO", "name:", "description:", "namespace:", "nope:", "email", "weather", "2", "0.5"]
REGEX = ["(", ")", "[", "]", "{", "}", "*", "+", "?", "|", "^", "$", ".", "\\", "\\d", "\\b", "(?i)", "(?P<n>",
         "(a+)+", "(?=", "(?<=", "\\1", "{1000}", "{2,}", "[^", "-", "email", "a", "\x00", "\u202e", "é", "🙂"]
k_values = st.integers(-3, 1_200) | st.sampled_from([1, 5, 10])


@pytest.fixture(scope="module")
def indexes() -> dict[str, ToolIndex]:
    return {name: ToolIndex.build(CATALOG, backend=name) for name in ("bm25", "regex")}


@given(parts=st.lists(st.sampled_from(LUCENE) | text, max_size=12), k=k_values)
def test_fuzz_lucene_queries(indexes: dict[str, ToolIndex], parts: list[str], k: int) -> None:
    _search(indexes["bm25"], " ".join(parts), k)


@given(parts=st.lists(st.sampled_from(REGEX) | text, max_size=12), k=k_values)
def test_fuzz_regex_queries(indexes: dict[str, ToolIndex], parts: list[str], k: int) -> None:
    _search(indexes["regex"], "".join(parts), k)


@given(query=text | st.lists(st.sampled_from(ODD) | text, max_size=6).map("".join))
@example(query="send a\ud800 email")
@example(query="\udcff")
def test_fuzz_any_text_on_every_backend(meta_session: Any, query: str) -> None:
    _, index = meta_session
    _search(index, query, 3)
    if first_hidden(query.strip(), UNUSABLE):  # (strip removes some controls: \x1c-\x1f, \x85)
        with pytest.raises(InvalidQueryError):  # refused whole, before any engine sees it
            index.search(query, 3)


def _search(index: ToolIndex, query: str, k: int) -> None:
    try:
        result = bounded(lambda: index.search(query, k, allowed=ALLOWED))
    except ToolSearchError:
        return
    assert set(result.names) <= ALLOWED and len(result.hits) <= k
    assert all(t.name == h.name for t, h in zip(result.tools, result.hits, strict=True))


# --- index names, paths and stored files ----------------------------------------------------------

name_like = st.one_of(text, st.from_regex(r"[A-Za-z0-9./\\_-]{0,140}", fullmatch=True),
                      st.sampled_from(["..", ".", "a/../..", "/etc", "~", "a" * 129, "a" * 128, "con", "nul\x00"]))


@given(name=name_like | json_values)
def test_fuzz_index_names(name: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "indexes"
        store = IndexStore(root)
        try:
            path = store.path(name)
        except ToolSearchError:
            return
        assert path.parent == root and path.resolve().parent == root.resolve(), f"{name!r} escapes the root"
        with contextlib.suppress(ToolSearchError):
            store.open(name)
        assert not root.exists(), "opening an index created files"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ToolIndex.build(CATALOG, backend="regex").save(tmp_path_factory.mktemp("stored") / "idx")


manifest_edits = st.dictionaries(
    st.sampled_from(["format", "version", "backend", "options", "catalog_hash", "key", "tool_count", "namespaces",
                     "created_at", "files", "extra"]),
    json_values,
    max_size=3,
)


@given(edits=manifest_edits, raw=st.none() | text)
def test_fuzz_manifests(stored: Path, edits: dict[str, Any], raw: str | None) -> None:
    original = (stored / MANIFEST).read_text()
    data = json.loads(original)
    data.update(edits)
    try:
        (stored / MANIFEST).write_text(raw if raw is not None else json.dumps(data), encoding="utf-8",
                                       errors="surrogatepass")
        files = {p: p.read_bytes() for p in stored.rglob("*") if p.is_file() and p.name != MANIFEST}
        try:
            index = bounded(lambda: ToolIndex.load(stored))
        except ToolSearchError:
            pass
        else:
            assert index.catalog.names == [t.name for t in CATALOG]
        assert {p: p.read_bytes() for p in stored.rglob("*") if p.is_file() and p.name != MANIFEST} == files
    finally:
        (stored / MANIFEST).write_text(original)
    verify_index(stored)


# --- session ids ----------------------------------------------------------------------------------


@given(session_id=st.one_of(text, json_values, st.sampled_from(["", " ", "\x00", "a" * 10_000, "../x"])),
       allowed=st.none() | st.lists(st.sampled_from([t.name for t in CATALOG]) | text, max_size=3))
def test_fuzz_session_ids(indexes: dict[str, ToolIndex], session_id: Any, allowed: list[str] | None) -> None:
    manager = SessionManager(indexes["bm25"])
    try:
        session = manager.create(session_id, allowed=allowed)
    except ToolSearchError:
        assert session_id not in manager.ids()
        return
    assert manager.get(session_id).id == session_id == session.id
    if allowed is not None:
        assert {t.name for t in session.visible_tools()} <= set(allowed)
    manager.close(session_id)


# --- MCP server configs (toolsearch.mcp.config) ---------------------------------------------------

server = st.fixed_dictionaries(
    {}, optional={"command": field, "args": st.lists(text, max_size=3) | json_values, "env": json_values,
                  "url": field | st.just("http://localhost:1/mcp"), "headers": json_values, "cwd": field,
                  "disabled": json_values, "type": field, "timeout": json_values}
)
configs = st.one_of(
    st.fixed_dictionaries({"mcpServers": st.dictionaries(names, server | json_values, max_size=3) | json_values}),
    st.fixed_dictionaries({"servers": st.dictionaries(names, server, max_size=3)}),
    json_values,
).map(json.dumps) | text | st.integers(1, 900).map(_deep)
env_values = st.dictionaries(st.sampled_from(["HOME", "TOKEN", "X"]), text, max_size=2)


@given(content=configs, environ=env_values)
def test_fuzz_mcp_configs(content: str, environ: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "servers.json"
        path.write_bytes(content.encode("utf-8", "surrogatepass"))
        before = path.read_bytes()
        try:
            loaded = bounded(lambda: load_config(path, environ=environ))
        except ToolSearchError:
            loaded = None
        assert path.read_bytes() == before
        assert sorted(os.listdir(folder)) == ["servers.json"]
    if loaded is not None:
        assert loaded.servers


def test_a_deeply_nested_mcp_config_is_a_config_error(tmp_path: Path) -> None:
    # found by test_fuzz_mcp_configs: json's RecursionError used to escape load_config
    path = tmp_path / "servers.json"
    path.write_text(_deep(100_000))
    with pytest.raises(ToolSearchError, match="nested too deeply"):
        load_config(path)


def test_an_mcp_config_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"mcpServers": {"a": {"command": "true"}}}).encode())
    assert [s.name for s in load_config(path).servers] == ["a"]


def test_the_fuzz_strategies_reach_their_targets() -> None:
    # A fuzz suite that only ever produces rejected input tests nothing: each shape must load.
    ok = [Tool.from_dict(d) for d in (
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {}}}},
        {"name": "b", "input_schema": {"type": "object"}},
        {"name": "c", "inputSchema": {"type": "object"}},
    )]
    assert [t.name for t in ok] == ["a", "b", "c"]
    assert string.ascii_letters  # the name strategy draws from it
