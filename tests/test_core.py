"""Unit tests of the core: tools and converters, text, catalog, backend registry, index and store."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from toolsearch import (
    BackendError,
    Catalog,
    DuplicateToolError,
    IndexFormatError,
    IndexNotFoundError,
    IndexStore,
    InvalidIndexNameError,
    InvalidQueryError,
    InvalidToolError,
    MissingDependencyError,
    NameMap,
    Ranking,
    StoredIndexError,
    Tool,
    ToolIndex,
    ToolSearchError,
    backend_names,
    default_backend,
    load_tools,
    provider_safe_name,
    register_backend,
)
from toolsearch.backends import BACKENDS, get_backend_spec
from toolsearch.index import MAX_K, MAX_QUERY_CHARS, index_key, validate_k, validate_query
from toolsearch.store import FORMAT_VERSION, MANIFEST, manifest_digest, read_manifest
from toolsearch.text import embedding_text, split_identifier, tool_text

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
    },
    "required": ["city"],
}


def weather(namespace: str | None = "weather") -> Tool:
    return Tool("get_weather", "Current weather for a city.", SCHEMA, namespace=namespace)


# --- Tool ----------------------------------------------------------------------------------------


def test_tool_defaults_and_fingerprint() -> None:
    tool = Tool("ping")
    assert tool.description == "" and tool.input_schema == {"type": "object", "properties": {}}
    assert tool.tags == () and tool.metadata == {} and tool.namespace is None
    assert Tool("ping").fingerprint == tool.fingerprint and hash(Tool("ping")) == hash(tool)
    assert Tool("ping", "other").fingerprint != tool.fingerprint
    assert Tool("ping", None).description == ""  # type: ignore[arg-type]


def test_tool_is_immutable_and_copies_its_schema() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    tool = Tool("t", input_schema=schema)
    schema["properties"]["b"] = {"type": "string"}
    assert "b" not in tool.input_schema["properties"]
    with pytest.raises(AttributeError):
        tool.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "non-empty string"),
        ({"name": "   "}, "non-empty string"),
        ({"name": 5}, "non-empty string"),
        ({"name": "x" * 257}, "limit is 256"),
        ({"name": "t", "description": 3}, "'description' must be a string"),
        ({"name": "t", "description": "x" * 64_001}, "limit is 64000"),
        ({"name": "t", "namespace": ""}, "'namespace'"),
        ({"name": "t", "namespace": 7}, "'namespace'"),
        ({"name": "t", "tags": "a,b"}, "'tags'"),
        ({"name": "t", "tags": ["a", 1]}, "'tags'"),
        ({"name": "t", "input_schema": []}, "must be a JSON object"),
        ({"name": "t", "input_schema": {"type": "array"}}, "'type' must be 'object'"),
        ({"name": "t", "input_schema": {"properties": []}}, "'properties' must be an object"),
        ({"name": "t", "input_schema": {"properties": {"a": "string"}}}, "parameter 'a' schema"),
        ({"name": "t", "input_schema": {"properties": {"a": {"type": "str"}}}}, "unknown JSON type 'str'"),
        ({"name": "t", "input_schema": {"properties": {}, "required": "a"}}, "'required'"),
        ({"name": "t", "input_schema": {"properties": {"a": {"default": {1, 2}}}}}, "not JSON-serialisable"),
        ({"name": "t", "metadata": {"f": object()}}, "'metadata'"),
    ],
)
def test_invalid_tools(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidToolError, match=re.escape(message)):
        Tool(**kwargs)


def test_invalid_tool_errors_are_toolsearch_errors() -> None:
    with pytest.raises(ToolSearchError):
        Tool("")
    with pytest.raises(ValueError):
        Tool("")


def test_schema_type_list_and_missing_type_are_accepted() -> None:
    tool = Tool("t", input_schema={"properties": {"a": {"type": ["string", "null"]}}})
    assert tool.input_schema["type"] == "object"


# --- converters ----------------------------------------------------------------------------------


def test_openai_chat_and_responses_shapes_round_trip() -> None:
    tool = weather()
    chat = tool.to_openai()
    assert chat == {
        "type": "function",
        "function": {"name": "get_weather", "description": tool.description, "parameters": SCHEMA},
    }
    responses = tool.to_openai(responses=True, name="alias")
    assert responses["type"] == "function" and responses["name"] == "alias" and "function" not in responses
    assert Tool.from_openai(chat, namespace="weather") == tool
    assert Tool.from_openai(tool.to_openai(responses=True), namespace="weather") == tool
    assert Tool.from_dict(chat).name == "get_weather"
    assert Tool.from_dict(tool.to_openai(responses=True)).input_schema == SCHEMA


def test_openai_without_parameters_or_description() -> None:
    tool = Tool.from_openai({"type": "function", "function": {"name": "now"}})
    assert tool.description == "" and tool.input_schema == {"type": "object", "properties": {}}


def test_anthropic_shape_round_trip() -> None:
    tool = weather(namespace=None)
    data = tool.to_anthropic()
    assert data == {"name": "get_weather", "description": tool.description, "input_schema": SCHEMA}
    assert Tool.from_anthropic(data) == tool
    assert Tool.from_dict(data) == tool
    assert Tool.from_anthropic(data, namespace="w").namespace == "w"


def test_mcp_dict_shape() -> None:
    data = {
        "name": "get_weather",
        "title": "Weather",
        "description": "Current weather.",
        "inputSchema": SCHEMA,
        "annotations": {"readOnlyHint": True},
    }
    tool = Tool.from_mcp(data, namespace="srv")
    assert tool.input_schema == SCHEMA and tool.namespace == "srv"
    assert tool.metadata == {"title": "Weather", "annotations": {"readOnlyHint": True}}
    assert Tool.from_dict(data).metadata["title"] == "Weather"
    assert tool.to_mcp() == {"name": "get_weather", "description": "Current weather.", "inputSchema": SCHEMA}


def test_mcp_sdk_object() -> None:
    import mcp.types as types
    sdk_tool = types.Tool(name="echo", description="Echo text back.", inputSchema=SCHEMA)
    tool = Tool.from_mcp(sdk_tool, namespace="srv")
    assert (tool.name, tool.description, tool.input_schema, tool.namespace) == (
        "echo",
        "Echo text back.",
        SCHEMA,
        "srv",
    )


def test_dataset_shape_keeps_source_and_extra_keys_as_metadata() -> None:
    tool = Tool.from_dict(
        {"name": "t", "description": "d", "input_schema": SCHEMA, "source": "bfcl/simple", "tags": ["x"], "v": 2}
    )
    assert tool.metadata == {"source": "bfcl/simple", "v": 2} and tool.tags == ("x",)
    assert Tool.from_dict(tool.to_dict()) == tool


@pytest.mark.parametrize("bad", [[], "tool", 3, None])
def test_converters_reject_non_objects(bad: object) -> None:
    for convert in (Tool.from_dict, Tool.from_openai, Tool.from_anthropic, Tool.from_mcp):
        with pytest.raises(InvalidToolError, match="must be a JSON object"):
            convert(bad)  # type: ignore[arg-type]


def test_from_callable_reads_hints_and_docstring() -> None:
    def forecast(
        city: str, days: int = 3, units: Literal["metric", "imperial"] = "metric", note: str | None = None
    ) -> str:
        """Weather forecast for a city.

        Args:
            city: The city name.
            days (int): How many days
                ahead to look.
            units: Unit system.

        Returns:
            A text summary.
        """
        return ""

    tool = Tool.from_callable(forecast, namespace="weather")
    assert tool.name == "forecast" and tool.namespace == "weather"
    assert tool.description == "Weather forecast for a city."
    props = tool.input_schema["properties"]
    assert props["city"] == {"type": "string", "description": "The city name."}
    assert props["days"]["description"] == "How many days ahead to look." and props["days"]["default"] == 3
    assert props["units"]["enum"] == ["metric", "imperial"]
    assert tool.input_schema["required"] == ["city"]
    assert "title" not in tool.input_schema and all("title" not in p for p in props.values())


def test_from_callable_edge_cases() -> None:
    def untyped(a, *args, b=1, **kwargs):  # type: ignore[no-untyped-def]
        return a

    tool = Tool.from_callable(untyped, name="renamed")
    assert tool.name == "renamed" and set(tool.input_schema["properties"]) == {"a", "b"}
    assert tool.description == ""

    class Service:
        def method(self, query: str) -> None:
            """Search."""

    assert list(Tool.from_callable(Service().method).input_schema["properties"]) == ["query"]
    with pytest.raises(InvalidToolError, match="not callable"):
        Tool.from_callable(42)  # type: ignore[arg-type]

    class Opaque:
        pass

    def bad(x: Opaque) -> None: ...

    with pytest.raises(InvalidToolError, match="cannot derive a JSON schema"):
        Tool.from_callable(bad)


# --- load_tools ----------------------------------------------------------------------------------


def test_load_tools_formats(tmp_path: Path) -> None:
    tool = weather()
    jsonl = tmp_path / "tools.jsonl"
    jsonl.write_text(
        json.dumps(tool.to_dict()) + "\n\n" + json.dumps(tool.to_openai() | {"x": 1}).replace("get_", "set_") + "\n"
    )
    assert [t.name for t in load_tools(jsonl)] == ["get_weather", "set_weather"]

    array = tmp_path / "tools.json"
    array.write_text(json.dumps([tool.to_anthropic(), tool.to_mcp() | {"name": "b"}], indent=2))
    assert [t.name for t in load_tools(array, namespace="ns")] == ["get_weather", "b"]
    assert {t.namespace for t in load_tools(array, namespace="ns")} == {"ns"}

    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"tools": [tool.to_dict()]}))
    assert load_tools(wrapped) == [tool]

    single = tmp_path / "one.json"
    single.write_text(json.dumps(tool.to_dict(), indent=2))
    assert load_tools(single) == [tool]

    unsuffixed_jsonl = tmp_path / "tools.txt"
    unsuffixed_jsonl.write_text(json.dumps(tool.to_dict()) + "\n" + json.dumps(tool.to_mcp() | {"name": "c"}) + "\n")
    assert len(load_tools(unsuffixed_jsonl)) == 2


def test_load_tools_errors_name_file_and_line(tmp_path: Path) -> None:
    good = json.dumps(weather().to_dict())
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(good + "\n" + "{oops\n")
    with pytest.raises(InvalidToolError, match=re.escape(f"{jsonl}:2: invalid JSON")):
        load_tools(jsonl)
    jsonl.write_text(good + "\n\n" + json.dumps({"name": "", "description": "x"}) + "\n")
    with pytest.raises(InvalidToolError, match=re.escape(f"{jsonl}:3: tool")):
        load_tools(jsonl)

    array = tmp_path / "bad.json"
    array.write_text(json.dumps([weather().to_dict(), {"name": "t", "input_schema": {"type": "array"}}]))
    with pytest.raises(InvalidToolError, match=re.escape(f"{array} (item 2)")):
        load_tools(array)
    array.write_text('[\n  {"name": "a"},\n  {"name": \n]')
    with pytest.raises(InvalidToolError, match=re.escape(f"{array}:4: invalid JSON")):
        load_tools(array)
    array.write_text('"just a string"')
    with pytest.raises(InvalidToolError, match="expected a list of tools"):
        load_tools(array)
    with pytest.raises(InvalidToolError, match="file not found"):
        load_tools(tmp_path / "missing.json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidToolError, match=r"not UTF-8 text \(byte 0xFF at offset 0\); save it as UTF-8"):
        load_tools(binary)


# --- provider-safe names -------------------------------------------------------------------------


def test_provider_safe_name() -> None:
    assert provider_safe_name("get_weather") == "get_weather"
    assert provider_safe_name("a-b_C9") == "a-b_C9"
    for name in ["math.factorial", "Get Weather & Time", "x" * 100, "...", "天気"]:
        safe = provider_safe_name(name)
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", safe), safe
        assert provider_safe_name(name) == safe  # stable
    assert provider_safe_name("math.factorial").startswith("math_factorial_")
    assert provider_safe_name("a.b") != provider_safe_name("a b")
    assert provider_safe_name("x" * 64) == "x" * 64 and provider_safe_name("x" * 65) != "x" * 65


def test_name_map_is_reversible_and_detects_collisions() -> None:
    names = NameMap(["get_weather", "math.factorial"])
    alias = names.safe("math.factorial")
    assert names.original(alias) == "math.factorial" and names.original("get_weather") == "get_weather"
    assert names.original("unknown") is None
    assert names.safe("new.name") == provider_safe_name("new.name")
    assert names.add("math.factorial") == alias
    with pytest.raises(DuplicateToolError, match="map to the same provider name") as err:
        names.add(alias + "")  # a real tool that is literally named like the alias
        names.add("x")
    assert set(err.value.names) == {"math.factorial", alias}


# --- text ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identifier", "words"),
    [
        ("getUserById", ("get", "user", "by", "id")),
        ("get_user_by_id", ("get", "user", "by", "id")),
        ("GetUserByID", ("get", "user", "by", "id")),
        ("math.factorial", ("math", "factorial")),
        ("HTTPServer", ("http", "server")),
        ("XMLHttpRequest", ("xml", "http", "request")),
        ("utf8Encode", ("utf", "8", "encode")),
        ("kebab-case name", ("kebab", "case", "name")),
        ("données_météo", ("données", "météo")),
        ("天気_forecast", ("天気", "forecast")),
        ("__", ()),
    ],
)
def test_split_identifier(identifier: str, words: tuple[str, ...]) -> None:
    assert split_identifier(identifier) == words


def test_tool_text_fields() -> None:
    tool = Tool(
        "crm.createContact",
        "Create a contact.",
        {
            "type": "object",
            "properties": {
                "emailAddress": {"type": "string", "description": "Primary email"},
                "stage": {"type": "string", "enum": ["lead", "customer"]},
                "address": {"type": "object", "properties": {"zipCode": {"type": "string"}}},
                "phones": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string"}}}},
                "owner": {
                    "anyOf": [{"type": "object", "properties": {"teamId": {"type": "string"}}}, {"type": "null"}]
                },
            },
        },
        namespace="salesCRM",
        tags=("write", "contacts"),
    )
    text = tool_text(tool)
    assert text.name == "crm.createContact" and text.name_words == "crm create contact"
    assert text.namespace == "sales crm" and text.tags == "write contacts"
    lines = text.parameters.splitlines()
    assert "email address Primary email" in lines and "stage lead customer" in lines
    assert "zip code" in lines and "label" in lines and "team id" in lines
    joined = text.joined()
    assert joined.startswith("crm.createContact\ncrm create contact\nsales crm\nCreate a contact.")
    passage = embedding_text(tool)
    for part in ("sales crm", "crm create contact", "Create a contact.", "email address Primary email"):
        assert part in passage
    assert len(embedding_text(tool, max_chars=20)) == 20


def test_tool_text_without_parameters_or_description() -> None:
    text = tool_text(Tool("ping"))
    assert (text.description, text.parameters, text.namespace, text.tags) == ("", "", "", "")
    assert text.joined() == "ping\nping"
    assert embedding_text(Tool("ping")) == "ping"


# --- catalog -------------------------------------------------------------------------------------


def test_catalog_order_lookup_and_namespaces() -> None:
    tools = [weather(), Tool("send_mail", namespace="mail"), Tool("now"), Tool("get_alerts", namespace="weather")]
    catalog = Catalog(tools)
    assert catalog.names == ["get_weather", "send_mail", "now", "get_alerts"] and len(catalog) == 4
    assert "now" in catalog and "later" not in catalog and catalog["now"] == tools[2]
    assert catalog.get("later") is None and list(catalog) == tools
    assert catalog.namespaces == ["weather", "mail"]
    assert catalog.names_in(["weather"]) == {"get_weather", "get_alerts"}
    assert "4 tools" in repr(catalog)


def test_catalog_hash_is_content_addressed_and_order_free() -> None:
    a, b = weather(), Tool("now")
    assert Catalog([a, b]).hash == Catalog([b, a]).hash
    assert Catalog([a, b]).hash != Catalog([a, Tool("now", "changed")]).hash
    assert Catalog([a]).hash != Catalog([a, b]).hash
    assert re.fullmatch(r"[0-9a-f]{64}", Catalog([]).hash)


def test_catalog_duplicates_are_listed() -> None:
    tools = [Tool("a"), Tool("b"), Tool("a", "again"), Tool("b"), Tool("c")]
    with pytest.raises(DuplicateToolError, match=r"2 tool name\(s\) defined more than once: 'a', 'b'") as err:
        Catalog(tools)
    assert err.value.names == ["a", "b"]
    many = [Tool(f"t{i}") for i in range(12)] * 2
    with pytest.raises(DuplicateToolError, match="and 2 more"):
        Catalog(many)


def test_catalog_diff_and_updated() -> None:
    old = Catalog([Tool("keep"), Tool("change", "v1"), Tool("drop")])
    new = Catalog([Tool("keep"), Tool("change", "v2"), Tool("add")])
    delta = old.diff(new)
    assert (delta.added, delta.removed, delta.changed) == (("add",), ("drop",), ("change",))
    assert delta and not old.diff(old)
    updated = old.updated(upsert=[Tool("change", "v2"), Tool("add")], remove=["drop"])
    assert updated.hash == new.hash and old.names == ["keep", "change", "drop"]
    with pytest.raises(DuplicateToolError):
        old.updated(upsert=[Tool("x"), Tool("x", "again")])


# --- backend registry ----------------------------------------------------------------------------


def test_registry() -> None:
    assert backend_names()[:4] == ["regex", "bm25", "vector", "hybrid"]
    assert default_backend() in ("hybrid", "bm25")
    assert get_backend_spec("auto").name == default_backend()
    with pytest.raises(BackendError, match="unknown backend 'lucene'; choose one of: auto, bm25"):
        get_backend_spec("lucene")
    with pytest.raises(BackendError, match="already registered"):
        register_backend(get_backend_spec("bm25"))
    register_backend(get_backend_spec("bm25"), replace=True)  # replacing with itself is allowed
    assert BACKENDS.entry("bm25") is not None, "and leaves it the built-in it was (its entry point)"
    assert issubclass(MissingDependencyError, ImportError)


class ListBackend:
    """A third-party backend that subclasses nothing: substring match over names."""

    name = "list"

    def __init__(self, fail_save: bool = False) -> None:
        self.names: list[str] = []
        self.fail_save = fail_save

    def add(self, tools: Sequence[Tool]) -> None:
        self.names += [t.name for t in tools if t.name not in self.names]

    def remove(self, names: Collection[str]) -> None:
        self.names = [n for n in self.names if n not in names]

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        from toolsearch import Hit

        found = [n for n in self.names if query in n and (allowed is None or n in allowed)]
        return Ranking([Hit(n, 1.0) for n in found[:k]])

    def save(self, folder: Path) -> None:
        (folder / "names.json").write_text(json.dumps(self.names))
        if self.fail_save:
            raise KeyboardInterrupt  # the process is stopped half-way through writing

    def describe(self) -> dict[str, Any]:
        return {}


# --- index ---------------------------------------------------------------------------------------


def test_validate_query_and_k() -> None:
    assert validate_query("  send mail \n") == "send mail"
    assert validate_query("x" * MAX_QUERY_CHARS) == "x" * MAX_QUERY_CHARS
    for bad, message in [
        ("", "empty"),
        ("  ", "empty"),
        ("x" * (MAX_QUERY_CHARS + 1), "limit is"),
        (None, "must be a string, got NoneType"),
        (b"x", "must be a string, got bytes"),
    ]:
        with pytest.raises(InvalidQueryError, match=message):
            validate_query(bad)
    assert validate_k(1) == 1 and validate_k(MAX_K) == MAX_K
    for bad_k in (0, -3, MAX_K + 1, 1.0, "3", True, None):
        with pytest.raises(InvalidQueryError, match="k \\(max results\\)"):
            validate_k(bad_k)


def test_index_with_a_third_party_backend() -> None:
    tools = [weather(), Tool("get_alerts", namespace="weather"), Tool("send_mail", namespace="mail")]
    index = ToolIndex(Catalog(tools), ListBackend())
    index.backend.add(tools)
    assert index.search("get", 5).names == ["get_weather", "get_alerts"]
    assert index.search("get", 1).names == ["get_weather"]
    assert index.search("_", 5, namespaces="mail").names == ["send_mail"]  # a single string is one namespace
    assert index.search("_", 5, namespaces=["weather"], allowed=["get_alerts", "send_mail"]).names == ["get_alerts"]
    result = index.search("_", 5, namespaces=["mail"], allowed=["get_alerts"])
    assert result.names == [] and result.notes == ("no tools are visible under the given filter",)
    with pytest.raises(InvalidQueryError, match="known namespaces: mail, weather"):
        index.search("x", 5, namespaces=["nope"])
    bare = ToolIndex(Catalog([Tool("a")]), ListBackend())
    with pytest.raises(InvalidQueryError, match="this catalog has no namespaces"):
        bare.search("a", 5, namespaces=["x"])


def test_index_updates_and_key() -> None:
    index = ToolIndex.build([weather(), Tool("now")], backend="regex")
    key = index.key
    index.upsert([Tool("later")])
    assert len(index) == 3 and index.key != key
    index.remove(["later", "not-there"])
    assert index.key == key and len(index) == 2
    index.sync([weather(), Tool("now", "changed")])
    assert index.catalog["now"].description == "changed"
    assert "regex" in repr(index) and index.backend_name == "regex"
    with pytest.raises(DuplicateToolError):
        index.upsert([Tool("x"), Tool("x")])
    assert "x" not in index.catalog


# --- store ---------------------------------------------------------------------------------------


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    index = ToolIndex.build([weather(), Tool("now", namespace="time")], backend="regex")
    return index.save(tmp_path / "idx")


def test_manifest_records_what_built_the_index(saved: Path) -> None:
    manifest = read_manifest(saved)
    assert manifest.version == FORMAT_VERSION and manifest.backend == "regex"
    assert manifest.tool_count == 2 and manifest.namespaces == ["weather", "time"]
    assert manifest.options == {"max_pattern_chars": 200, "timeout_seconds": 1.0}
    assert manifest.model is None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest.created_at)
    assert "tools.jsonl" in manifest.files and "backend/regex.json" in manifest.files
    assert ToolIndex.load(saved).key == manifest.key


def _edit_manifest(folder: Path, **changes: Any) -> None:
    path = folder / MANIFEST
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    if "catalog_hash" in data and "backend" in data and "options" in data:  # signed anew, as a forger would
        data["key"] = index_key(data["catalog_hash"], data["backend"], data["options"])
    data["digest"] = manifest_digest(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"version": FORMAT_VERSION + 1}, "built by a newer toolsearch"),
        ({"version": 0}, "old index format 0"),
        ({"version": "1"}, "no format version"),
        ({"format": "something-else"}, "not a toolsearch manifest"),
        ({"catalog_hash": None}, "lacks the field 'catalog_hash'"),
        ({"catalog_hash": "0" * 64}, "do not match the manifest's hash"),
        ({"backend": "bm25"}, "bm25 index unusable"),
    ],
)
def test_manifest_problems_are_named(saved: Path, changes: dict[str, Any], message: str) -> None:
    _edit_manifest(saved, **changes)
    with pytest.raises(IndexFormatError, match=re.escape(message)):
        ToolIndex.load(saved)


def test_corrupt_missing_and_altered_files(saved: Path) -> None:
    (saved / MANIFEST).write_text("{not json")
    with pytest.raises(IndexFormatError, match="is corrupt"):
        ToolIndex.load(saved)
    (saved / MANIFEST).unlink()
    with pytest.raises(IndexFormatError, match=r"no manifest\.json"):
        ToolIndex.load(saved)
    with pytest.raises(IndexNotFoundError, match="no index at"):
        ToolIndex.load(saved.parent / "nothing-here")


def test_missing_truncated_or_corrupt_data_files(saved: Path, tmp_path: Path) -> None:
    tools_file = saved / "tools.jsonl"
    original = tools_file.read_text()
    tools_file.write_text(original[:-5])
    with pytest.raises(IndexFormatError, match=r"tools\.jsonl is truncated or altered"):
        ToolIndex.load(saved)
    tools_file.write_text(original.replace('"name": "now"', '"name": "   "'))  # same size, invalid
    with pytest.raises(IndexFormatError, match="checksum"):
        ToolIndex.load(saved)
    tools_file.write_text(original.replace('"now"', '"wow"'))  # same size, valid, other content
    with pytest.raises(IndexFormatError, match="checksum"):
        ToolIndex.load(saved)
    tools_file.unlink()
    with pytest.raises(IndexFormatError, match=r"tools\.jsonl is missing"):
        ToolIndex.load(saved)


def test_interrupted_save_leaves_the_old_index_intact(tmp_path: Path) -> None:
    tools = [weather(), Tool("now")]
    target = tmp_path / "idx"
    ToolIndex.build(tools, backend="regex").save(target)
    before = read_manifest(target)
    broken = ToolIndex(Catalog([*tools, Tool("later")]), ListBackend(fail_save=True))
    with pytest.raises(KeyboardInterrupt):
        broken.save(target)
    assert read_manifest(target) == before
    assert ToolIndex.load(target).catalog.names == ["get_weather", "now"]
    assert _layout(tmp_path) == ["idx", ".idx.gen"]  # no scratch folder, no lock file left behind


def test_saving_over_an_index_replaces_it(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    ToolIndex.build([Tool("a")], backend="regex").save(target)
    ToolIndex.build([Tool("b")], backend="bm25").save(target)
    loaded = ToolIndex.load(target)
    assert loaded.backend_name == "bm25" and loaded.catalog.names == ["b"]
    assert _layout(tmp_path) == ["idx", ".idx.gen"]  # the old generation is gone


def _layout(folder: Path) -> list[str]:
    """A folder's entries, generation ids left out: the pointer, one generation, the writers' lock."""
    return sorted((n.split("-")[0] for n in os.listdir(folder)), key=lambda n: (n.startswith("."), n))


@pytest.mark.parametrize("name", ["../escape", "a/b", "a\\b", "", ".hidden", "..", "x" * 129, "a..b", "sp ace", 5])
def test_index_names_are_validated(tmp_path: Path, name: object) -> None:
    with pytest.raises(InvalidIndexNameError, match="invalid index name"):
        IndexStore(tmp_path).path(name)  # type: ignore[arg-type]


def test_index_store(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "root")
    assert store.names() == []
    tools = [weather(), Tool("now")]
    name, _, reused = store.build(tools, backend="regex")
    assert not reused and name.startswith("regex-") and store.names() == [name]
    name2, _, reused2 = store.build(Catalog(list(reversed(tools))), backend="regex")
    assert (name2, reused2) == (name, True)
    # other options shape another index
    name3, _, reused3 = store.build(tools, backend="regex", max_pattern_chars=20)
    assert not reused3 and name3 != name
    # a named index is rebuilt when its content changes
    store.build(tools, backend="regex", name="team")
    _, changed, reused4 = store.build([*tools, Tool("later")], backend="regex", name="team")
    assert not reused4 and len(store.open("team")) == 3
    assert store.manifest("team").tool_count == 3
    saved_name = store.save(changed)
    assert saved_name.startswith("regex-") and saved_name in store.names()
    assert store.save(changed, "copy") == "copy"
    (store.root / "not-an-index").mkdir()
    assert "not-an-index" not in store.names()
    store.remove("copy")
    assert "copy" not in store.names()
    with pytest.raises(IndexNotFoundError, match="no index named 'copy'"):
        store.remove("copy")


def test_a_broken_stored_index_is_rebuilt_by_build(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    name, _, _ = store.build([Tool("a")], backend="regex", name="x")
    (store.path(name) / MANIFEST).write_text("{")
    _, _, reused = store.build([Tool("a")], backend="regex", name="x")
    assert not reused and ToolIndex.load(store.path("x")).catalog.names == ["a"]


def test_default_root_honours_toolsearch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSEARCH_HOME", str(tmp_path))
    assert IndexStore().root == tmp_path / "indexes"
    monkeypatch.delenv("TOOLSEARCH_HOME")
    assert IndexStore().root == Path("indexes")


def test_saving_over_a_folder_that_is_not_an_index_is_refused(tmp_path: Path) -> None:
    precious = tmp_path / "important"
    precious.mkdir()
    (precious / "file.txt").write_text("precious")
    index = ToolIndex.build([Tool("a_tool", "does a thing")], backend="bm25")
    with pytest.raises(StoredIndexError, match="not a toolsearch index"):
        index.save(precious)
    assert (precious / "file.txt").read_text() == "precious"
    index.save(tmp_path / "empty-is-fine")
    index.save(tmp_path / "empty-is-fine")  # and an index may be replaced by a newer one


# --- untrusted descriptions are cleaned before they are indexed or shown ---------------------------


@pytest.mark.parametrize(
    ("kind", "dirty", "clean"),
    [
        ("zero-width space", "Send\u200b an\u200c email\u200d now\u2060\ufeff", "Send an email now"),
        ("bidi override", "Pay \u202eeciovni\u202c the \u2066invoice\u2069 \u200fnow\u200e",
         "Pay eciovni the invoice now"),
        ("ANSI escape", "\x1b[31mRed\x1b[0m \x1b]8;;http://evil\x07link\x1b]8;;\x07 \x1b[2J\x1bcok", "Red link ok"),
        ("control character", "bell\x07 back\x08space\x00 nul\x7f del\x85 nel", "bell backspace nul del nel"),
        ("invisible tag characters", "weather\U000e0049\U000e0067\U000e006e\U000e006f\U000e0072\U000e0065", "weather"),
        ("soft hyphen", "in\u00advisible", "invisible"),
        ("line ends", "one\r\ntwo\rthree\tfour", "one\ntwo\nthree\tfour"),
    ],
)
def test_descriptions_are_cleaned_of_invisible_characters(kind: str, dirty: str, clean: str) -> None:
    schema = {"type": "object", "title": dirty,
              "properties": {"to": {"type": "string", "description": dirty,
                                    "items": {"type": "object", "description": dirty}}}}
    tool = Tool("send_email", dirty, schema)
    assert tool.description == clean, kind
    assert tool.input_schema["title"] == clean
    assert tool.input_schema["properties"]["to"]["description"] == clean
    assert tool.input_schema["properties"]["to"]["items"]["description"] == clean
    for shown in (tool.to_openai(), tool.to_anthropic(), tool.to_mcp(), tool_text(tool).joined()):
        text = json.dumps(shown, ensure_ascii=False) if not isinstance(shown, str) else shown
        assert not any(c in text for c in "\u200b\u202e\u2066\x1b\x07\x00\U000e0049\u00ad"), kind
    # what is indexed is what is shown: a search for the visible word finds the tool
    index = ToolIndex.build([tool, Tool("other", "Something unrelated.")], backend="bm25")
    assert index.search(clean.split()[0], 1).names == ["send_email"]


def test_clean_text_keeps_every_visible_script() -> None:
    from toolsearch.text import clean_text

    text = "Envía un correo · 发送邮件 · إرسال بريد · отправить письмо · 📧 emoji\tand\nlines"
    assert clean_text(text) == text


def test_cheap_checks_come_before_the_backend() -> None:
    # A backend that fails if asked anything: argument checks must answer without it (for the
    # vector and hybrid backends, without loading the model).
    from toolsearch import SessionManager, ToolSearchMetaTool

    class Untouchable(ListBackend):
        def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
            raise AssertionError("the backend was asked before the arguments were checked")

    backend = Untouchable()
    backend.add([weather()])
    index = ToolIndex(Catalog([weather()]), backend)
    for query, k in [("x" * (MAX_QUERY_CHARS + 1), 5), ("  ", 5), ("ok", 0), ("ok", MAX_K + 1), ("ok", "5")]:
        with pytest.raises(InvalidQueryError):
            index.search(query, k)  # type: ignore[arg-type]
    session = SessionManager(index).create("s1")
    meta = ToolSearchMetaTool()
    for arguments in [{"query": "x" * (MAX_QUERY_CHARS + 1)}, {"query": ""}, {"query": "ok", "max_results": 0},
                      {"query": "ok", "max_results": "many"}, {"max_results": 3}, "not json", [1, 2]]:
        outcome = meta.run(session, arguments)  # type: ignore[arg-type]
        assert not outcome.ok and "tool_search" in outcome.text
    with pytest.raises(InvalidIndexNameError):
        IndexStore(Path("unused")).build([Tool("bad name is fine")], "list-never-created", name="../x")
