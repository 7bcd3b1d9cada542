"""Plug-ins by entry point: built-ins declared like plug-ins, lazy loads, clear errors, a real installed plug-in."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from plugin_site import DEMO, demo_entry_points, write_distribution
from redis_server import RedisServer

from toolsearch import BackendError, IndexStore, SessionStoreError, Tool, ToolIndex, handle_tool_calls
from toolsearch.backends import (
    BACKENDS,
    BackendSpec,
    backend_names,
    find_backend_spec,
    get_backend_spec,
    register_backend,
)
from toolsearch.backends._builtin import BM25
from toolsearch.embeddings import EMBEDDERS, embedder_for, resolve_embedder
from toolsearch.metatool import ToolSearchMetaTool, query_help
from toolsearch.plugins import GROUPS, PluginError, PluginRegistry, PluginWarning, rescan
from toolsearch.providers import ScriptedModel, parse_tool_call
from toolsearch.providers.registry import (
    FORMATS,
    UnknownFormatError,
    chat_format_names,
    format_names,
    get_format,
    render_tools,
)
from toolsearch.session import SessionManager
from toolsearch.stores import (
    SESSION_STORES,
    USAGE_STORES,
    InMemorySessionStore,
    store_from_url,
    store_spec,
    usage_store_from_url,
)
from toolsearch.stores.usage_redis import RedisUsageStore
from toolsearch.usage import InMemoryUsageStore, UsageError, UsageLog

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES: dict[str, PluginRegistry[Any]] = {
    "toolsearch.backends": BACKENDS,
    "toolsearch.embedders": EMBEDDERS,
    "toolsearch.session_stores": SESSION_STORES,
    "toolsearch.usage_stores": USAGE_STORES,
    "toolsearch.wire_formats": FORMATS,
}
TOOLS = [
    Tool("get_weather", "Weather forecast for a city"),
    Tool("send_email", "Send an email message to a recipient"),
    Tool("create_issue", "Open an issue in a repository"),
]


# --- the built-ins are entry points too --------------------------------------------------------------


def test_each_group_has_one_registry_and_pyproject_declares_its_builtins() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert set(REGISTRIES) == set(GROUPS)
    for group, registry in REGISTRIES.items():
        assert registry.group == group
        assert declared[group] == registry.builtins, group  # same names, same targets, same order


@pytest.mark.parametrize("group", GROUPS)
def test_every_builtin_loads_as_an_entry_point(group: str) -> None:
    registry = REGISTRIES[group]
    for name, value in registry.builtins.items():
        # what importlib.metadata itself loads from the declaration is what the registry returns
        assert importlib.metadata.EntryPoint(name, value, group).load() is registry.get(name)
        assert registry.entry(name) is not None and name in registry


def test_lookups_import_only_what_they_name() -> None:
    probe = (
        "import sys, toolsearch, toolsearch.backends, toolsearch.stores, toolsearch.providers.registry\n"
        "before = 'importlib.metadata' in sys.modules\n"
        "from toolsearch.backends import get_backend_spec\n"
        "spec = get_backend_spec('bm25')\n"
        "print(before, 'toolsearch.backends.bm25' in sys.modules, 'tantivy' in sys.modules, spec.name)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    # importing reads no metadata; a lookup loads its spec, not the backend's module or its library
    assert proc.stdout.split() == ["False", "False", "False", "bm25"]


def test_query_help_lives_on_the_backend_spec() -> None:
    for name in ("regex", "bm25", "vector", "hybrid"):
        spec = get_backend_spec(name) if name in ("regex", "bm25") else BACKENDS.get(name)
        assert spec.query_syntax and spec.search_hint
        assert query_help(name) == (spec.query_syntax, spec.search_hint)
    syntax, hint = query_help("no-such-backend")
    assert syntax.startswith("A few keywords") and hint.startswith("use a few plain keywords")


# --- plug-ins installed on sys.path (a distribution's dist-info, read by importlib.metadata) ------------


Install = Callable[..., Path]


@pytest.fixture()
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Install a distribution the way pip lays it out: `<name>-<version>.dist-info` beside its modules."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    modules: list[str] = []

    def make(distribution: str, entry_points: dict[str, dict[str, str]], **sources: str) -> Path:
        write_distribution(site, distribution, entry_points, **sources)
        modules.extend(sources)
        rescan()
        return site

    yield make
    for module in modules:
        sys.modules.pop(module, None)
    rescan()


@pytest.fixture()
def demo(install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo plug-in's module and its own declared entry points, installed."""
    monkeypatch.syspath_prepend(str(DEMO))
    install("toolsearch-demo-backend", demo_entry_points())
    yield
    sys.modules.pop("toolsearch_demo_backend", None)


def test_a_plugin_backend_is_found_by_name_and_loaded_lazily(demo: None, tmp_path: Path) -> None:
    assert "words" in backend_names() and backend_names()[:4] == ["regex", "bm25", "vector", "hybrid"]
    assert "toolsearch_demo_backend" not in sys.modules  # listed, not imported
    index = ToolIndex.build(TOOLS, "words")
    assert "toolsearch_demo_backend" in sys.modules
    assert index.search("weather city", 2).names == ["get_weather"]
    reopened = ToolIndex.load(index.save(tmp_path / "idx"))
    assert reopened.backend_name == "words" and reopened.search("send email", 1).names == ["send_email"]
    # its own query help reaches the model
    session = SessionManager(index).create("s")
    description = ToolSearchMetaTool().definition(session).input_schema["properties"]["query"]["description"]
    assert description == "Plain words from the tool's name or description, e.g. `weather city`."
    assert "use plain words that appear in the tool's name" in ToolSearchMetaTool().run(session, {"query": "zzz"}).text


def test_a_plugin_embedder_is_found_by_name_and_reopens_its_index(
    demo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    assert "demo-hash" in EMBEDDERS.names()
    assert embedder_for("demo-hash").model_id == "demo-hash"
    assert type(resolve_embedder("demo-hash")).__name__ == "HashEmbedder"
    index = ToolIndex.build(TOOLS, "vector", model="demo-hash")
    folder = index.save(tmp_path / "vec")
    assert ToolIndex.load(folder).search("weather forecast city", 1).names == ["get_weather"]  # by the stored name


def test_a_plugin_session_store_is_found_by_url_scheme(demo: None) -> None:
    store = store_from_url("demo://anything", ttl_seconds=30, max_sessions=3)
    assert isinstance(store, InMemorySessionStore)
    manager = SessionManager(ToolIndex.build(TOOLS, "regex"), store=store)
    manager.create("s").discover(["send_email"])
    assert "send_email" in manager.get("s").discovered
    known = r"use memory:// or redis://host:port/db \(the known schemes: memory, redis, rediss, unix, demo, demoredis\)"
    with pytest.raises(SessionStoreError, match=known):
        store_from_url("postgres://db/x")


def test_a_store_spec_says_whether_processes_share_the_store(demo: None) -> None:
    assert [store_spec(url).shared for url in ("memory", "memory://", "redis://h/0", "rediss://h/0", "unix:///s")] == [
        False, False, True, True, True,
    ]
    assert store_spec("redis://h/0").pool_option == "max_connections" and store_spec("memory").pool_option is None
    assert store_spec("demoredis://h/0").shared  # the plug-in's SessionStoreSpec says so
    bare = store_spec("demo://x")  # a bare factory: taken as a store of one process
    assert not bare.shared and bare.pool_option is None
    assert isinstance(bare("demo://x", ttl_seconds=5), InMemorySessionStore)


@pytest.mark.slow
def test_a_plugin_usage_store_is_found_by_url_scheme(demo: None, redis_server: RedisServer) -> None:
    url = "demoredis://" + redis_server.url.split("://", 1)[1]
    store = usage_store_from_url(url)
    assert isinstance(store, RedisUsageStore) and store.prefix == "demo:"
    log = UsageLog("c" * 64)
    log.add("weather in paris", "get_weather", ["get_weather"])
    store.save(log)
    assert redis_server.client().exists(f"demo:usage:{'c' * 64}:entries")
    # a scheme with a session store and no usage store keeps its log like memory does: the file, else memory
    assert isinstance(usage_store_from_url("demo://x"), InMemoryUsageStore)
    with pytest.raises(UsageError, match=r"the known schemes: memory, redis, rediss, unix, demoredis\)"):
        usage_store_from_url("postgres://user:pw-1@db/x")


def test_a_plugin_wire_format_is_found_by_name(demo: None) -> None:
    assert format_names()[-1] == "demo_upper"
    assert get_format("demo_upper").label.startswith("upper-case JSON")
    assert render_tools("demo_upper", TOOLS[:1]) == [{"NAME": "get_weather", "DESCRIPTION": TOOLS[0].description}]
    call = parse_tool_call({"ID": "c1", "CALL": "get_weather", "ARGS": {"city": "Paris"}})
    assert (call.id, call.name, dict(call.arguments)) == ("c1", "get_weather", {"city": "Paris"})


# --- clear errors ------------------------------------------------------------------------------------------


def test_unknown_names_list_the_known_ones_and_say_how_to_install_one() -> None:
    cases: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: get_backend_spec("elastic"), BackendError, "unknown backend 'elastic'; choose one of: auto, bm25"),
        (lambda: embedder_for("word2vec"), BackendError, "unknown embedder 'word2vec'; choose one of: numpy, "),
        (lambda: get_format("cohere"), UnknownFormatError, "unknown tool format 'cohere'; use one of: openai_chat"),
        (lambda: store_from_url("file:///x"), SessionStoreError, "unknown session store URL 'file:///x'"),
    ]
    for call, error, start in cases:
        with pytest.raises(error) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(start) and "pip install <package>" in message, message
        assert "entry-point group 'toolsearch." in message and "docs/plugins.md" in message
        assert "\n" not in message
    assert issubclass(UnknownFormatError, ValueError)


def test_a_plugin_that_fails_to_import_names_its_entry_point_and_distribution(install: Install) -> None:
    install(
        "acme-search",
        {"toolsearch.backends": {"acme": "acme_backend:SPEC"}},
        acme_backend="import acme_native_library_that_is_missing\n",
    )
    assert "acme" in backend_names()  # listing imports nothing, so it cannot fail
    with pytest.raises(PluginError) as caught:
        get_backend_spec("acme")
    message = str(caught.value)
    assert "backend plug-in 'acme' failed to load (ModuleNotFoundError: " in message
    assert "entry point acme = 'acme_backend:SPEC' in group 'toolsearch.backends' of acme-search 1.0" in message
    assert isinstance(caught.value.__cause__, ImportError)
    with pytest.raises(PluginError):  # not cached: the same clear error each time
        get_backend_spec("acme")


def test_a_plugin_that_exits_on_import_is_a_plugin_error_not_the_end_of_the_process(install: Install) -> None:
    install(
        "acme-search",
        {"toolsearch.backends": {"acme": "acme_cli:SPEC", "odd": "acme_odd:SPEC", "stop": "acme_stop:SPEC",
                                  "quiet": "acme_quiet:SPEC"}},
        acme_cli="import sys\nsys.exit(3)\n",  # a command-line module named by mistake
        acme_odd="class Odd(BaseException):\n    pass\nraise Odd('not an Exception')\n",
        acme_stop="raise KeyboardInterrupt\n",
        acme_quiet="import sys\nsys.exit()\n",
    )
    with pytest.raises(PluginError) as caught:
        get_backend_spec("acme")
    message = str(caught.value)
    assert "backend plug-in 'acme' failed to load (SystemExit: 3)" in message
    assert "entry point acme = 'acme_cli:SPEC' in group 'toolsearch.backends' of acme-search 1.0" in message
    assert isinstance(caught.value.__cause__, SystemExit)
    with pytest.raises(PluginError, match=r"'odd' failed to load \(Odd: not an Exception\); entry point odd"):
        get_backend_spec("odd")
    with pytest.raises(PluginError, match=r"'quiet' failed to load \(SystemExit\); entry point quiet"):
        get_backend_spec("quiet")
    with pytest.raises(KeyboardInterrupt):  # the user's Ctrl-C still stops the program
        get_backend_spec("stop")
    assert get_backend_spec("bm25").name == "bm25"  # the registry still works


def test_a_plugin_of_the_wrong_shape_names_its_entry_point(install: Install) -> None:
    install(
        "acme-search",
        {
            "toolsearch.backends": {"acme": "acme_shapes:create", "renamed": "acme_shapes:SPEC"},
            "toolsearch.wire_formats": {"acme": "acme_shapes:create"},
            "toolsearch.embedders": {"acme": "acme_shapes:NOT_CALLABLE", "odd": "acme_shapes:create"},
            "toolsearch.session_stores": {"acme": "acme_shapes:create"},
        },
        acme_shapes=(
            "from toolsearch.backends import BackendSpec\n"
            "def create(*args, **options):\n    return object()\n"
            "SPEC = BackendSpec('other', create, create)\n"
            "NOT_CALLABLE = 42\n"
        ),
    )
    where = "in group 'toolsearch.backends' of acme-search 1.0"
    with pytest.raises(PluginError, match=rf"'acme' has the wrong shape: expected a toolsearch.backends.BackendSpec, "
                       rf"got function; entry point acme = 'acme_shapes:create' {where}"):
        get_backend_spec("acme")
    with pytest.raises(PluginError, match="it is named 'other'; the entry point's name and its BackendSpec's"):
        get_backend_spec("renamed")
    with pytest.raises(PluginError, match=r"expected a toolsearch\.providers\.WireFormat, got function"):
        get_format("acme")
    with pytest.raises(PluginError, match="callable that takes no arguments and returns an embedder, got int"):
        embedder_for("acme")
    with pytest.raises(PluginError, match=r"the embedder 'odd' \(entry point odd = 'acme_shapes:create' .* object"):
        embedder_for("odd")
    with pytest.raises(PluginError, match=r"'acme' \(entry point acme = .*\) returned object, not a SessionStore"):
        store_from_url("acme://x")


def test_a_plugin_reusing_a_builtin_name_is_ignored_with_a_warning(install: Install) -> None:
    install(
        "acme-search",
        {"toolsearch.backends": {"bm25": "acme_clash:SPEC"}, "toolsearch.session_stores": {"memory": "acme_clash:x"}},
        acme_clash="raise RuntimeError('never imported')\n",
    )
    install("other-search", {"toolsearch.backends": {"bm25": "other_clash:SPEC"}})
    with pytest.warns(PluginWarning) as caught:
        spec = get_backend_spec("bm25")  # the first lookup scans the plug-ins, so even a built-in name warns
    assert spec is BM25
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and all("already taken by toolsearch (built in)" in m for m in messages)
    assert any("entry point bm25 = 'acme_clash:SPEC' in group 'toolsearch.backends' of acme-search 1.0" in m
               for m in messages)
    assert "acme_clash" not in sys.modules
    with pytest.warns(PluginWarning, match="ignored the session store plug-in"):
        assert isinstance(store_from_url("memory://"), InMemorySessionStore)


def test_two_plugins_with_one_name_keep_the_first(install: Install) -> None:
    install("first-plugin", {"toolsearch.wire_formats": {"twin": "twin_one:F"}})
    install("second-plugin", {"toolsearch.wire_formats": {"twin": "twin_two:F"}})
    with pytest.warns(PluginWarning, match="already taken by (first|second)-plugin 1.0"):
        assert "twin" in format_names()


def test_code_registration_wins_and_unregisters(install: Install) -> None:
    words = BackendSpec("bm25", lambda **o: None, lambda f, t, **o: None)  # type: ignore[arg-type, return-value]
    with pytest.raises(BackendError, match="already registered; pass replace=True"):
        BACKENDS.register("bm25", words)
    BACKENDS.register("bm25", words, replace=True)
    try:
        assert get_backend_spec("bm25") is words
    finally:
        assert BACKENDS.unregister("bm25")
    assert get_backend_spec("bm25") is not words


# --- one faulty plug-in does not break what does not name it ---------------------------------------------

OPENAI_SEARCH_CALL = {
    "id": "c1", "type": "function", "function": {"name": "tool_search", "arguments": '{"query": "email"}'},
}


@pytest.fixture()
def broken_format(install: Install) -> Path:
    """A wire-format plug-in whose module fails to import (its distribution is installed, a dependency is not)."""
    return install(
        "acme-broken",
        {"toolsearch.wire_formats": {"acme_fmt": "acme_broken:FMT"}},
        acme_broken="import acme_wire_library_that_is_missing\n",
    )


def test_a_broken_format_plugin_leaves_the_builtin_formats_working(broken_format: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a built-in reads the call: the plug-in is not even tried
        call = parse_tool_call({"id": "1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}})
        assert (call.id, call.name, dict(call.arguments)) == ("1", "get_weather", {"city": "Paris"})
        session = SessionManager(ToolIndex.build(TOOLS, "bm25")).create("s")
        [result] = handle_tool_calls(session, [OPENAI_SEARCH_CALL], {})
        assert "send_email" in result.content
    with pytest.warns(PluginWarning, match=r"left out of the chat formats: the tool format plug-in 'acme_fmt' "
                      r"failed to load "
                      r"\(ModuleNotFoundError: .*"
                      r"entry point acme_fmt = 'acme_broken:FMT' in group 'toolsearch.wire_formats' of acme-broken"):
        assert chat_format_names() == ["openai_chat", "openai_responses", "anthropic", "gemini"]
    with pytest.warns(PluginWarning, match="acme_fmt"):
        assert ScriptedModel(["hi"]).format == "openai_chat"
    with pytest.raises(PluginError, match="tool format plug-in 'acme_fmt' failed to load"):
        get_format("acme_fmt")  # asked for by name: its error, as before
    demo_help = subprocess.run(
        [sys.executable, "-m", "toolsearch", "demo", "--help"], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(broken_format), str(ROOT)])},
    )
    assert demo_help.returncode == 0 and "acme_fmt" in demo_help.stderr, demo_help.stderr
    assert "openai_chat" in demo_help.stdout


def test_plugin_formats_are_tried_one_by_one_after_the_builtins(broken_format: Path, demo: None) -> None:
    assert parse_tool_call({"name": "get_weather", "arguments": {}}).name == "get_weather"
    assert "toolsearch_demo_backend" not in sys.modules  # a built-in read it: no plug-in was imported
    # a later plug-in still reads its own shape; the broken one before it is skipped with a warning
    with pytest.warns(PluginWarning, match="tool format plug-in 'acme_fmt'"):
        call = parse_tool_call({"ID": "c1", "CALL": "get_weather", "ARGS": {"city": "Paris"}})
    assert (call.id, call.name) == ("c1", "get_weather")
    # a call no format reads may have been the broken plug-in's: the error says it could not be tried
    with pytest.warns(PluginWarning), pytest.raises(PluginError, match=r"no tool format reads a call with keys "
                                                    r"\['ARGZ'\].*plug-in 'acme_fmt' failed to load"):
        parse_tool_call({"ARGZ": 1})


SHAPES = """
from toolsearch import Hit, Ranking
from toolsearch.backends import BackendSpec


class Listing:
    name = "listy"

    def __init__(self):
        self.names = []

    def add(self, tools):
        self.names += [tool.name for tool in tools]

    def remove(self, names):
        pass

    def search(self, query, k, allowed=None):
        return [Hit(name, 1.0) for name in self.names][:k]  # a list, not a Ranking

    def save(self, folder):
        pass

    def describe(self):
        return {}


class Ranked(Listing):
    name = "unloadable"

    def search(self, query, k, allowed=None):
        return Ranking([Hit(name, 1.0) for name in self.names][:k])


class Forgetful:  # no describe
    name = "forgetful"

    def add(self, tools):
        pass

    def remove(self, names):
        pass

    def search(self, query, k, allowed=None):
        return Ranking([])

    def save(self, folder):
        pass


LISTY = BackendSpec("listy", create=lambda **o: Listing(), load=lambda f, t, **o: Listing())
NONEBK = BackendSpec("nonebk", create=lambda **o: None, load=lambda f, t, **o: None)
UNLOADABLE = BackendSpec("unloadable", create=lambda **o: Ranked(), load=lambda f, t, **o: None)
FORGETFUL = BackendSpec("forgetful", create=lambda **o: Forgetful(), load=lambda f, t, **o: Forgetful())
"""


def test_a_backend_plugin_that_makes_the_wrong_thing_names_its_entry_point(install: Install, tmp_path: Path) -> None:
    names = ("listy", "nonebk", "unloadable", "forgetful")
    install("acme-shapes", {"toolsearch.backends": {n: f"acme_shapes:{n.upper()}" for n in names}}, acme_shapes=SHAPES)
    where = "in group 'toolsearch.backends' of acme-shapes 1.0"
    with pytest.raises(PluginError, match=rf"the backend 'nonebk' \(entry point nonebk = 'acme_shapes:NONEBK' "
                       rf"{where}\) "
                       r"returned NoneType, not a toolsearch.backends.Backend \(name, add, remove, search, save, "
                       r"describe\)"):
        ToolIndex.build(TOOLS, "nonebk")
    with pytest.raises(PluginError, match=r"the backend 'nonebk' \(entry point nonebk = .*\) returned NoneType"):
        IndexStore(tmp_path / "indexes").build(TOOLS, "nonebk")  # a stored build asks the spec too
    with pytest.raises(PluginError, match=r"'forgetful' .* returned Forgetful, not a toolsearch.backends.Backend .*; "
                       r"it has no describe"):
        ToolIndex.build(TOOLS, "forgetful")
    listy = ToolIndex.build(TOOLS, "listy")  # it has every method: only its search's answer shows what is wrong
    with pytest.raises(PluginError, match=rf"the backend 'listy' \(entry point listy = 'acme_shapes:LISTY' {where}\) "
                       r"returned list, not a toolsearch.Ranking"):
        listy.search("weather", 2)
    folder = ToolIndex.build(TOOLS, "unloadable").save(tmp_path / "idx")  # create is right, load is not
    with pytest.raises(PluginError, match=r"the backend 'unloadable' \(entry point unloadable = .*\) returned None"):
        ToolIndex.load(folder)


@pytest.mark.parametrize("looked_up_first", [False, True])
def test_registering_in_code_over_a_plugin_wins_whatever_was_looked_up_before(
    demo: None, looked_up_first: bool
) -> None:
    plugin = find_backend_spec("words") if looked_up_first else None
    mine = BackendSpec("words", create=BM25.create, load=BM25.load)
    with pytest.warns(PluginWarning, match=r"the backend 'words' registered in code shadows the plug-in entry point "
                      r"words = 'toolsearch_demo_backend:WORDS' in group 'toolsearch.backends' of "
                      r"toolsearch-demo-backend 1.0"):
        register_backend(mine)
    try:
        assert find_backend_spec("words") is mine
        with pytest.raises(BackendError, match="'words' is already registered in code; pass replace=True"):
            register_backend(BackendSpec("words", create=BM25.create, load=BM25.load))
    finally:
        assert BACKENDS.unregister("words")
    again = find_backend_spec("words")  # the plug-in shows again
    assert again is not mine and again is not None and again.summary == (plugin or again).summary
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own object, registered again, shadows nothing
        register_backend(again)
    assert BACKENDS.entry("words") is not None  # still the entry point's


def test_a_plugin_registering_itself_on_import_shadows_nothing(install: Install) -> None:
    install(
        "acme-self",
        {"toolsearch.backends": {"selfreg": "acme_self:SPEC"}},
        acme_self=(
            "from toolsearch.backends import BackendSpec, register_backend\n"
            "from toolsearch.backends._builtin import BM25\n"
            "SPEC = BackendSpec('selfreg', create=BM25.create, load=BM25.load)\n"
            "register_backend(SPEC)\n"
        ),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = get_backend_spec("selfreg")
    assert spec is sys.modules["acme_self"].SPEC


# --- names toolsearch takes before the registry; embedders that would make an unusable index ---------------------

ACME_EMBEDDERS = """
import numpy as np
import zlib

EMBEDDED = []


def rows(texts, width):
    return np.array([[((zlib.crc32(t.encode()) >> i) & 1) + 0.1 for i in range(width)] for t in texts],
                    dtype=np.float32)


class Embedder:
    dimension = 8

    def __init__(self, model_id):
        self.model_id = model_id

    def embed(self, texts):
        EMBEDDED.extend(texts)
        return rows(texts, 8)


class NoDimension:
    model_id = "acme-nodim"

    def embed(self, texts):
        return rows(texts, 4)


class Lists(Embedder):
    def embed(self, texts):
        return rows(texts, 8).tolist()


class Narrow(Embedder):  # says 8, gives 4
    def embed(self, texts):
        return rows(texts, 4)


class NaNs(Embedder):  # a broken model: NaN for some texts
    def embed(self, texts):
        out = rows(texts, 8)
        out[[i for i, t in enumerate(texts) if "email" in t]] = np.nan
        return out


from toolsearch.backends import BackendSpec

AUTO = BackendSpec("auto", create=lambda **o: None, load=lambda f, t, **o: None)
def minilm(): return Embedder("minilm")
def e5(): return Embedder("multilingual-e5-small")
def versioned(): return Embedder("acme-embed-v2")
def lists(): return Lists("acme-lists")
def narrow(): return Narrow("acme-narrow")
def nans(): return NaNs("acme-nans")
"""


def test_plugin_names_toolsearch_takes_before_the_registry_are_ignored_with_a_warning(install: Install) -> None:
    install(
        "acme-models",
        {"toolsearch.embedders": {"minilm": "acme_embedders:minilm", "multilingual-e5-small": "acme_embedders:e5"},
         "toolsearch.backends": {"auto": "acme_embedders:AUTO"}},
        acme_embedders=ACME_EMBEDDERS,
    )
    with pytest.warns(PluginWarning) as caught:
        names = EMBEDDERS.names()
    assert "minilm" not in names and "multilingual-e5-small" not in names
    assert sorted(str(w.message).split(":")[0] for w in caught) == [
        "ignored the embedder plug-in entry point minilm = 'acme_embedders",
        "ignored the embedder plug-in entry point multilingual-e5-small = 'acme_embedders",
    ]
    assert any("'minilm' is already taken by toolsearch (built in) (a name of the stock model "
               "sentence-transformers/all-MiniLM-L6-v2); rename the plug-in's entry point" in str(w.message)
               for w in caught)
    assert type(resolve_embedder("minilm")).__name__ == "NumpyEmbedder"  # what the name always meant
    with pytest.warns(PluginWarning, match=r"'auto' is already taken by toolsearch \(built in\) \(the name that picks"):
        assert "auto" not in backend_names()
    with pytest.raises(BackendError, match="cannot register the backend 'auto': the name is taken by toolsearch"):
        register_backend(BackendSpec("auto", create=lambda **o: None, load=lambda f, t, **o: None))
    with pytest.raises(BackendError, match="cannot register the embedder 'stock': the name is taken by toolsearch"):
        EMBEDDERS.register("stock", lambda: None)
    assert "stock" not in EMBEDDERS.names()


def _acme_embedders(install: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **names: str) -> Any:
    monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", str(tmp_path / "cache"))  # nothing embedded reaches a shared cache
    install("acme-embed", {"toolsearch.embedders": {n: f"acme_embedders:{v}" for n, v in names.items()}},
            acme_embedders=ACME_EMBEDDERS)
    return importlib.import_module("acme_embedders")


def test_a_plugin_embedder_whose_model_id_is_not_its_name_is_refused_before_it_embeds(
    install: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module = _acme_embedders(install, monkeypatch, tmp_path, **{"acme-embed": "versioned"})
    # its index would record 'acme-embed-v2', a name no embedder has: it would never open again
    with pytest.raises(PluginError, match=r"the embedder 'acme-embed' \(entry point acme-embed = "
                       r"'acme_embedders:versioned' in group 'toolsearch.embedders' of acme-embed 1.0\) makes an "
                       r"embedder whose model_id is 'acme-embed-v2'.*give the embedder the model_id 'acme-embed'"):
        ToolIndex.build(TOOLS, "vector", model="acme-embed")
    assert module.EMBEDDED == []


def test_an_embedder_without_a_dimension_is_named_as_a_plugin_of_the_wrong_shape(
    install: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _acme_embedders(install, monkeypatch, tmp_path, **{"acme-nodim": "NoDimension"})
    with pytest.raises(PluginError, match=r"the embedder 'acme-nodim' \(entry point acme-nodim = "
                       r"'acme_embedders:NoDimension' .* of acme-embed 1.0\) returned NoDimension, not an embedder: "
                       r"it lacks a `dimension`"):
        ToolIndex.build(TOOLS, "vector", model="acme-nodim")


def test_an_embedder_returning_lists_of_numbers_is_read_as_a_matrix(
    install: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _acme_embedders(install, monkeypatch, tmp_path, **{"acme-lists": "lists"})
    index = ToolIndex.build(TOOLS, "vector", model="acme-lists")
    assert index.search(TOOLS[0].description, 1).names == ["get_weather"]


@pytest.mark.parametrize(
    ("name", "target", "problem"),
    [
        ("acme-narrow", "narrow", r"returned shape \(3, 4\) for 3 texts; expected \(3, 8\)"),
        ("acme-nans", "nans", "returned NaN or infinite values for 1 of 3 texts, which no search would ever find"),
    ],
)
def test_an_embedder_returning_unusable_rows_names_its_entry_point(
    install: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, target: str, problem: str
) -> None:
    _acme_embedders(install, monkeypatch, tmp_path, **{name: target})
    with pytest.raises(PluginError, match=rf"the embedder plug-in '{name}' {problem}; entry point {name} = "
                       rf"'acme_embedders:{target}' in group 'toolsearch.embedders' of acme-embed 1.0"):
        ToolIndex.build(TOOLS, "vector", model=name)


def test_an_embedder_returning_nan_for_a_query_is_refused_not_silently_empty(
    install: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _acme_embedders(install, monkeypatch, tmp_path, **{"acme-nans": "nans"})
    index = ToolIndex.build(TOOLS[:1], "vector", model="acme-nans")  # no tool text mentions email
    assert index.search("weather", 1).names == ["get_weather"]
    with pytest.raises(PluginError, match="the embedder plug-in 'acme-nans' returned NaN or infinite values for 1 of"):
        index.search("send an email", 1)


# --- a real plug-in package, pip-installed into a venv, used by the CLI ---------------------------------------


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv that sees this environment's packages and checkout (a .pth file), with the demo plug-in pip-installed.

    No network: --no-index, and --no-build-isolation builds with this environment's setuptools.
    """
    base = tmp_path_factory.mktemp("plugin-venv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip())
    outer = dict.fromkeys([str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "outer-environment.pth").write_text("\n".join(outer) + "\n")
    source = base / "src"
    shutil.copytree(DEMO, source)  # the build writes egg-info and build/ beside the sources: not into the checkout
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(source)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def _cli(python: Path | str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "toolsearch", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "TOOLSEARCH_CACHE_DIR": str(cwd / "cache")})


def test_an_installed_plugin_backend_builds_and_queries_through_the_cli(plugin_venv: Path, tmp_path: Path) -> None:
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    root = tmp_path / "indexes"
    built = _cli(plugin_venv, "build", "tools.json", "--backend", "words", "--root", str(root), "--name", "demo",
                 "--json", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["backend"] == "words"
    assert (root / "demo" / "backend" / "words.json").is_file()  # the plug-in's own saved state
    # a fresh process opens the index by the backend name stored in its manifest
    found = _cli(plugin_venv, "query", str(root / "demo"), "weather city", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert [hit["name"] for hit in json.loads(found.stdout)["hits"]] == ["get_weather"]
    info = _cli(plugin_venv, "info", str(root / "demo"), cwd=tmp_path)
    assert info.returncode == 0 and "Plain words from the tool's name or description" in info.stdout, info.stderr
    # without the plug-in, the same index fails with a message that says what is missing
    missing = _cli(sys.executable, "query", str(root / "demo"), "weather", cwd=tmp_path)
    assert missing.returncode != 0
    assert "unknown backend 'words'" in missing.stderr and "toolsearch.backends" in missing.stderr, missing.stderr


def test_an_installed_plugin_brings_every_kind(plugin_venv: Path, tmp_path: Path) -> None:
    probe = (
        "from toolsearch.embeddings import embedder_for\n"
        "from toolsearch.stores import store_from_url\n"
        "from toolsearch.providers.registry import get_format\n"
        "from toolsearch.plugins import PluginWarning\n"
        "import warnings; warnings.simplefilter('error', PluginWarning)\n"
        "print(embedder_for('demo-hash').model_id, type(store_from_url('demo://x')).__name__,\n"
        "      get_format('demo_upper').name)\n"
    )
    proc = subprocess.run([str(plugin_venv), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["demo-hash", "InMemorySessionStore", "demo_upper"]
