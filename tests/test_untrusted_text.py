"""Untrusted text: hidden characters are cleaned from prose and refused in names and values, and
text a model, a file or a terminal sends (lone surrogates, NUL, bytes that are not UTF-8) never crashes
a search, a turn, a loop or the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn
from fakes.e2e import make_model
from mcp_servers import http_gateway, write_config
from mcp_servers.clients import connect, faulty, text

from toolsearch import (
    InvalidQueryError,
    InvalidToolError,
    SessionManager,
    Tool,
    ToolIndex,
    ToolSearchMetaTool,
    ahandle_tool_calls,
    handle_tool_calls,
    load_tools,
)
from toolsearch._untrusted import clean_text, first_hidden
from toolsearch.loop import LoopOutcome, run
from toolsearch.mcp.source import MCPToolSource, mcp_definition, tool_from_mcp

# Each class of hidden character, as an attacker would place it inside a word: "Wea<hidden>ther".
HIDDEN = {
    "tag characters": "\U000e0049\U000e0067\U000e006e",  # invisible "Ign..."
    "unassigned tag": "\U000e0002",
    "bidi override": "\u202e",
    "bidi isolate": "\u2066",
    "bidi mark": "\u200f",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "ANSI escape": "\x1b[2J\x1b]8;;http://evil\x07",
    "C0 control": "\x00",
    "C1 control": "\x85",
    "lone surrogate": "\ud800",
    "variation selectors": "\ufe00\ufe01\U000e0100\U000e01ef",  # bytes smuggled after a visible letter
}
CLASSES = list(HIDDEN)


def _seen(kind: str) -> str:
    """What a reader (and the model) gets for "Wea<hidden>ther": the word, or a visible U+FFFD."""
    return "Wea\ufffdther" if kind == "lone surrogate" else "Weather"


def hidden_strings(value: Any) -> list[str]:
    """Every string (or key) anywhere in a JSON value that still holds a hidden character."""
    if isinstance(value, str):
        return [value] if first_hidden(value) else []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in hidden_strings(k) + hidden_strings(v)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in hidden_strings(item)]
    return []


def upstream(**fields: Any) -> dict[str, Any]:
    """An MCP tool definition as an upstream lists it."""
    return {"name": "get_weather", "description": "Current weather for a city.",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}, **fields}


def with_property(**schema: Any) -> dict[str, Any]:
    return upstream(inputSchema={"type": "object", "properties": {"city": {"type": "string", **schema}}})


# --- prose is repaired, in every model-visible field -----------------------------------------------

def city(shown: dict[str, Any]) -> dict[str, Any]:
    return shown["inputSchema"]["properties"]["city"]  # type: ignore[no-any-return]


# field -> (the upstream definition holding `dirty`, where the cleaned text is in what a client sees)
PROSE: dict[str, tuple[Callable[[str], dict[str, Any]], Callable[[dict[str, Any]], Any]]] = {
    "description": (lambda d: upstream(description=d), lambda s: s["description"]),
    "title": (lambda d: upstream(title=d), lambda s: s["title"]),
    "annotations.title": (lambda d: upstream(annotations={"title": d, "readOnlyHint": True}),
                          lambda s: s["annotations"]["title"]),
    "property description": (lambda d: with_property(description=d), lambda s: city(s)["description"]),
    "schema title": (lambda d: upstream(inputSchema={"type": "object", "title": d}),
                     lambda s: s["inputSchema"]["title"]),
    "$comment": (lambda d: with_property(**{"$comment": d}), lambda s: city(s)["$comment"]),
    "examples": (lambda d: with_property(examples=[d]), lambda s: city(s)["examples"][0]),
    "default": (lambda d: with_property(default=d), lambda s: city(s)["default"]),
    "nested default": (lambda d: with_property(default={"unit": d}), lambda s: city(s)["default"]["unit"]),
    "outputSchema description": (
        lambda d: upstream(outputSchema={"type": "object", "properties": {"t": {"type": "number", "description": d}}}),
        lambda s: s["outputSchema"]["properties"]["t"]["description"]),
    "outputSchema title": (lambda d: upstream(outputSchema={"type": "object", "title": d}),
                           lambda s: s["outputSchema"]["title"]),
}


@pytest.mark.parametrize("kind", CLASSES)
@pytest.mark.parametrize("field", list(PROSE))
def test_hidden_characters_are_removed_from_every_prose_field(field: str, kind: str) -> None:
    build, read = PROSE[field]
    tool = tool_from_mcp(build(f"Wea{HIDDEN[kind]}ther"), "up")  # the gateway's path for an upstream tool
    shown = mcp_definition(tool).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert read(shown) == _seen(kind)
    for rendering in (shown, tool.to_openai(), tool.to_openai(responses=True), tool.to_anthropic(), tool.to_dict()):
        assert hidden_strings(rendering) == [], rendering


@pytest.mark.parametrize("kind", CLASSES)
def test_tags_are_cleaned(kind: str) -> None:
    assert Tool.from_dict({"name": "t", "tags": [f"Wea{HIDDEN[kind]}ther"]}).tags == (_seen(kind),)


# --- names and values the server compares are refused, the tool named ----------------------------

# field -> the definition holding `dirty` where a model's answer, or the server's check, depends on it
EXACT: dict[str, Callable[[str], dict[str, Any]]] = {
    "name": lambda d: upstream(name=f"get_{d}weather"),
    "property name": lambda d: upstream(inputSchema={"type": "object", "properties": {f"ci{d}ty": {"type": "string"}}}),
    "nested property name": lambda d: with_property(type="array", items={"type": "object",
                                                                         "properties": {f"u{d}nit": {}}}),
    "enum value": lambda d: with_property(enum=["Paris", f"Lon{d}don"]),
    "const": lambda d: with_property(const=f"Par{d}is"),
    "required": lambda d: upstream(inputSchema={"type": "object", "properties": {}, "required": [f"ci{d}ty"]}),
    "pattern": lambda d: with_property(pattern=f"^[a-z]{d}+$"),
    "format": lambda d: with_property(format=f"da{d}te"),
    "$defs name": lambda d: upstream(inputSchema={"type": "object", "$defs": {f"Ci{d}ty": {"type": "string"}}}),
    "anyOf enum": lambda d: with_property(anyOf=[{"enum": [f"a{d}"]}, {"type": "null"}]),
    "keyword": lambda d: with_property(**{f"x-ui{d}": True}),
    "unknown keyword value": lambda d: with_property(**{"x-widget": f"text{d}area"}),
    "examples key": lambda d: with_property(examples=[{f"ci{d}ty": "Paris"}]),
    "annotations key": lambda d: upstream(annotations={f"readOnly{d}Hint": True}),
    "outputSchema property name": lambda d: upstream(outputSchema={"type": "object", "properties": {f"t{d}emp": {}}}),
    "outputSchema enum": lambda d: upstream(outputSchema={"type": "object", "properties": {"u": {"enum": [f"C{d}"]}}}),
}


@pytest.mark.parametrize("kind", CLASSES)
@pytest.mark.parametrize("field", list(EXACT))
def test_a_hidden_character_in_a_name_or_value_refuses_the_tool(field: str, kind: str) -> None:
    char = HIDDEN[kind][0]
    with pytest.raises(InvalidToolError) as refused:
        tool_from_mcp(EXACT[field](HIDDEN[kind]), "up")
    message = str(refused.value)
    assert message.startswith("tool '"), message  # names the tool
    assert f"U+{ord(char):04X}" in message and "refused" in message, message
    assert first_hidden(message) is None, "the error message must not carry the character itself"


@pytest.mark.parametrize("text", ["Sunny \u2600\ufe0f", "keycap 1\ufe0f\u20e3", "\u845b\U000e0100 (variant)"])
def test_a_variation_selector_after_the_character_it_varies_is_kept(text: str) -> None:
    assert clean_text(text) == text
    assert first_hidden(text) is None
    assert Tool.from_mcp(with_property(enum=[text])).input_schema["properties"]["city"]["enum"] == [text]


@pytest.mark.parametrize("text", ["\u2600\ufe0f\ufe00\ufe01", "\u2600\u200b\ufe0f\ufe0f", "\ufe0fstart"])
def test_only_one_selector_survives_and_only_after_a_character(text: str) -> None:
    cleaned = clean_text(text)
    assert first_hidden(cleaned) is None and cleaned.count("\ufe0f") + cleaned.count("\ufe00") <= 1, ascii(cleaned)


def test_the_refusal_names_the_field_and_the_character() -> None:
    with pytest.raises(InvalidToolError) as refused:
        Tool.from_mcp(with_property(enum=["Paris", "Lon\u202edon"]))
    assert str(refused.value).startswith(
        "tool 'get_weather': value 'Lon\\u202edon' at input_schema.properties.city.enum[1] holds "
        "U+202E RIGHT-TO-LEFT OVERRIDE (position 3), a bidi control"
    )


def test_a_property_named_like_a_prose_keyword_is_still_a_name() -> None:
    # `default` and `description` are property names here, not annotations: their enums stay exact
    schema = {"type": "object", "properties": {"default": {"enum": ["a\u200b"]}}}
    with pytest.raises(InvalidToolError, match="enum"):
        Tool("t", input_schema=schema)
    described = Tool("t", input_schema={"type": "object", "properties": {"description": {"type": "string"}}})
    assert list(described.input_schema["properties"]) == ["description"]


def test_data_no_model_reads_keeps_its_characters_but_not_a_lone_surrogate() -> None:
    kept = Tool("t", metadata={"source": "a\u200bb", "notes": ["\x1b[1m"]})
    assert kept.metadata == {"source": "a\u200bb", "notes": ["\x1b[1m"]}
    with pytest.raises(InvalidToolError, match=r"metadata\.source.*lone surrogate"):
        Tool("t", metadata={"source": "a\ud800"})


@pytest.mark.parametrize(
    ("converter", "definition"),
    [
        (Tool.from_openai, {"type": "function", "function": {"name": "w", "parameters": "SCHEMA"}}),
        (Tool.from_openai, {"type": "function", "name": "w", "parameters": "SCHEMA"}),
        (Tool.from_anthropic, {"name": "w", "input_schema": "SCHEMA"}),
        (Tool.from_mcp, {"name": "w", "inputSchema": "SCHEMA"}),
        (Tool.from_dict, {"name": "w", "input_schema": "SCHEMA"}),
        ("jsonl", {"name": "w", "input_schema": "SCHEMA"}),
    ],
    ids=["openai-chat", "openai-responses", "anthropic", "mcp", "dataset", "jsonl-file"],
)
def test_every_converter_applies_the_same_rule(converter: Any, definition: dict[str, Any], tmp_path: Path) -> None:
    def convert(schema: dict[str, Any]) -> Tool:
        data = json.loads(json.dumps(definition).replace('"SCHEMA"', json.dumps(schema)))
        if converter == "jsonl":
            path = tmp_path / "tools.jsonl"
            path.write_text(json.dumps(data) + "\n", encoding="utf-8")
            return load_tools(path)[0]
        return converter(data)  # type: ignore[no-any-return]

    dirty = {"description": "Ci\u200bty \ud800", "title": "\x1b[1mC"}
    repaired = convert({"type": "object", "properties": {"c": dirty}})
    assert repaired.input_schema["properties"]["c"] == {"description": "City \ufffd", "title": "C"}
    with pytest.raises(InvalidToolError, match="U\\+2066"):
        convert({"type": "object", "properties": {"c": {"enum": ["\u2066x"]}}})


def _upstream_extras() -> list[dict[str, Any]]:
    """Tools an upstream lists beside its healthy ones: two that cannot be repaired, one that can."""
    return [
        upstream(name="hidden_property", inputSchema={"type": "object", "properties": {"ci\u200bty": {}}}),
        upstream(name="hidden_enum", inputSchema={"type": "object", "properties": {"u": {"enum": ["\u202eC"]}}}),
        upstream(name="poisoned_prose", title="Wea\U000e0049ther", annotations={"title": "\x1b[31mWeather"},
                 outputSchema={"type": "object", "description": "T\u2066emp"}),
    ]


async def test_an_upstream_tool_that_cannot_be_repaired_is_skipped_by_name_not_its_server() -> None:
    config = {"mcpServers": {"up": faulty(FAULTY_EXTRA_TOOLS=json.dumps(_upstream_extras()))}}
    async with MCPToolSource(config) as source:
        ready, tools, skipped = source.ready, source.tools(), source.servers["up"].skipped
    names = {t.name for t in tools}
    assert ready == ["up"] and "up__echo" in names, "the server itself must stay"
    assert "up__poisoned_prose" in names and not {"up__hidden_property", "up__hidden_enum"} & names
    assert len(skipped) == 2
    assert any("hidden_property" in s and "U+200B" in s and "property name" in s for s in skipped), skipped
    assert any("hidden_enum" in s and "U+202E" in s for s in skipped), skipped
    poisoned = next(t for t in tools if t.name == "up__poisoned_prose")
    shown = mcp_definition(poisoned).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert (shown["title"], shown["annotations"]["title"], shown["outputSchema"]["description"]) == (
        "Weather", "Weather", "Temp")


async def test_a_gateway_client_sees_only_clean_definitions(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"up": faulty(FAULTY_EXTRA_TOOLS=json.dumps(_upstream_extras()))})
    with http_gateway(config) as gateway:
        async with connect(gateway.url or "") as client:
            found = await client.search("current weather for a city", namespace="up")
            listed = await client.tools()
    log = gateway.stderr
    for name in ("hidden_property", "hidden_enum"):
        assert f"MCP server 'up': skipped a tool (the others are listed): tool '{name}'" in log
    assert "'up' skipped" not in log  # the server itself stays
    assert "up__poisoned_prose" in text(found) and first_hidden(text(found)) is None
    shown = listed["up__poisoned_prose"].model_dump(by_alias=True, exclude_none=True, mode="json")
    assert (shown["title"], shown["annotations"]["title"], shown["outputSchema"]["description"]) == (
        "Weather", "Weather", "Temp")
    assert all(hidden_strings(t.model_dump(mode="json")) == [] for t in listed.values())


# --- hostile text cannot crash a search, a turn, a loop or the CLI ---------------------------------

BACKENDS = ["regex", "bm25", "vector", "hybrid"]
BAD_QUERIES = {
    "lone surrogate": "send a\ud800 email",
    "low surrogate (a non-UTF-8 byte)": "\udcff email",
    "NUL": "send\x00email",
    "ANSI escape": "email\x1b[2J",
}


def catalog(description: str = "Send an email to a recipient.") -> list[Tool]:
    return [
        Tool("send_email", description, {"type": "object", "properties": {"to": {}}}),
        Tool("get_weather", "Current weather for a city."),
    ]


@pytest.fixture(scope="module", params=BACKENDS)
def index(request: pytest.FixtureRequest) -> ToolIndex:
    return ToolIndex.build(catalog(), backend=request.param)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_definition_with_a_lone_surrogate_is_indexed_repaired(backend: str) -> None:
    repaired = ToolIndex.build(catalog("Send an email to a recipient \ud83d."), backend=backend)
    assert repaired.catalog["send_email"].description == "Send an email to a recipient \ufffd."
    assert repaired.search("send an email", 1).names == ["send_email"]


@pytest.mark.parametrize("query", list(BAD_QUERIES.values()), ids=list(BAD_QUERIES))
def test_a_query_that_is_not_text_is_a_clear_error_on_every_backend(index: ToolIndex, query: str) -> None:
    with pytest.raises(InvalidQueryError, match=r"query holds U\+[0-9A-F]{4}.*send it again"):
        index.search(query, 3)
    session = SessionManager(index).create("s")
    outcome = ToolSearchMetaTool().run(session, {"query": query})
    assert not outcome.ok and outcome.text.startswith("tool_search could not run the query")
    assert not session.discovered


def _chat_call(arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "tool_search", "arguments": arguments}}


@pytest.mark.parametrize(
    "call",
    [
        _chat_call('{"query": "send a\\ud800 email"}'),  # the JSON escape a model can emit
        _chat_call('{"query": "send\\u0000email"}'),
        _chat_call('{"q\\udcff": "x", "query": "email"}'),  # in a key
        {"type": "tool_use", "id": "toolu_1", "name": "tool_search", "input": {"query": "\ud83d email"}},
        {"type": "function_call", "call_id": "c1", "name": "tool_search", "arguments": '{"query": "\\udfff"}'},
    ],
    ids=["chat-escape", "chat-nul", "chat-key", "anthropic-input", "responses"],
)
def test_handle_tool_calls_turns_a_bad_query_into_a_tool_error(index: ToolIndex, call: dict[str, Any]) -> None:
    session = SessionManager(index).create("s")
    for results in (handle_tool_calls(session, [call]), asyncio.run(ahandle_tool_calls(session, [call]))):
        (result,) = results
        assert result.is_error and result.search is not None and result.search.error
        assert "tool_search" in result.content and ("surrogate" in result.content or "U+0000" in result.content)
        json.dumps(result.to_openai_chat(), ensure_ascii=False).encode("utf-8")  # the reply can be sent
    assert not session.discovered


def test_a_tool_output_with_a_lone_surrogate_renders_in_every_format(index: ToolIndex) -> None:
    def send_email(to: str) -> str:
        return "sent \ud800 to " + to  # e.g. a body it decoded from JSON

    session = SessionManager(index).create("s")
    session.discover(["send_email"])
    call = _chat_call('{"to": "a@b.c"}')
    call["function"]["name"] = "send_email"
    for results in (handle_tool_calls(session, [call], [send_email]),
                    asyncio.run(ahandle_tool_calls(session, [call], [send_email]))):
        (result,) = results
        assert not result.is_error and result.content == "sent \ufffd to a@b.c"
        for format in ("openai_chat", "openai_responses", "anthropic", "gemini"):
            json.dumps(result.render(format), ensure_ascii=False).encode("utf-8")  # the reply can be sent


@pytest.fixture(scope="module")
def bm25_index() -> ToolIndex:
    return ToolIndex.build(catalog(), backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


# model turn -> what the tool result the model gets back says
MODEL_TURNS = {
    "query": (Turn(tool_calls=[("tool_search", {"query": "send a\ud800 email"})]), "holds U+D800"),
    "text": (Turn(text="Let me look \udcff.", tool_calls=[("tool_search", {"query": "email"})]), "send_email"),
    "tool name": (Turn(tool_calls=[("send\udc80email", {"to": "x"})]), "is not available"),
    "argument": (Turn(tool_calls=[("tool_search", {"query": "email", "namespace\ud800": 1})]), "lone surrogate"),
}


@pytest.mark.parametrize("turn", list(MODEL_TURNS))
@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses", "anthropic"])
def test_a_model_reply_with_a_lone_surrogate_does_not_crash_the_loop(
    server: FakeLLMServer, bm25_index: ToolIndex, kind: str, turn: str
) -> None:
    reply, says = MODEL_TURNS[turn]
    server.enqueue(reply, "Done.")
    result = run(make_model(kind, server), "mail Bob", session=SessionManager(bm25_index).create("l"))
    assert result.outcome is LoopOutcome.COMPLETED
    assert len(server.requests) == 2  # the second request, history included, was encoded and sent
    (answer,) = server.requests[1].tool_results()
    assert says in answer.text and first_hidden(answer.text) is None, answer.text


def _cli(*argv: str | bytes, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolsearch", *argv], cwd=cwd, capture_output=True, text=True, errors="replace",
        env={**__import__("os").environ, "TOOLSEARCH_HOME": str(cwd / "home")}, timeout=120, check=False,
    )


def test_a_non_utf8_argument_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in catalog()]))
    assert _cli("build", "tools.json", "--name", "t", "--backend", "bm25", cwd=tmp_path).returncode == 0
    done = _cli("query", "t", b"send \xff email", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "argument 3" in done.stderr and "byte 0xFF" in done.stderr and "UTF-8" in done.stderr
    assert "unexpected" not in done.stderr


def test_tool_files_with_a_lone_surrogate_or_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "name.json").write_text('[{"name": "send\\ud800email", "description": "x"}]')
    (tmp_path / "prose.json").write_text('[{"name": "send_email", "description": "Send \\ud83d an email"}]')
    (tmp_path / "bytes.json").write_bytes(b'[{"name": "send_email", "description": "\xff"}]')
    refused = _cli("build", "name.json", cwd=tmp_path)
    assert refused.returncode == 1 and "name.json (item 1): tool 'send\\ud800email'" in refused.stderr
    assert "U+D800" in refused.stderr and "unexpected" not in refused.stderr
    assert _cli("build", "prose.json", "--backend", "bm25", cwd=tmp_path).returncode == 0  # repaired
    undecodable = _cli("build", "bytes.json", cwd=tmp_path)
    assert undecodable.returncode == 1 and "bytes.json: not UTF-8 text (byte 0xFF at offset 40)" in undecodable.stderr


# --- indexes built under older rules ---------------------------------------------------------------

def _as_older_rules(folder: Path) -> None:
    """Make a saved index look built by a toolsearch whose text rules predate RULES_VERSION."""
    from toolsearch.store import MANIFEST, manifest_digest

    path = folder / MANIFEST  # the folder links to its current generation
    data = json.loads(path.read_text())
    data.pop("text_rules")
    data["digest"] = manifest_digest(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("older", [False, True])
def test_an_index_built_under_older_text_rules_is_cleaned_as_it_is_read(
    tmp_path: Path, older: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from toolsearch.store import save_index

    # what an older toolsearch stored: a description its rules let through (restored as stored, unvalidated)
    smuggled = Tool._restore({"name": "send_email", "description": "Send an email.\U000e0100\U000e0101"}, "f" * 64)
    folder = save_index(ToolIndex.build([smuggled, Tool("get_weather", "Current weather.")], backend="bm25"),
                        tmp_path / "idx")
    if older:
        _as_older_rules(folder)
    loaded = ToolIndex.load(folder)
    description = loaded.catalog["send_email"].description
    if older:
        assert description == "Send an email." and "rules for tool text" in caplog.text
    else:  # built under today's rules: trusted as stored (which is why the version is recorded)
        assert description.endswith("\U000e0101")
    assert loaded.search("email", 1).names == ["send_email"]


def test_build_replaces_an_index_built_under_older_text_rules_and_the_warning_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from toolsearch.index_store import IndexStore

    store = IndexStore(tmp_path / "indexes")
    tools = [Tool("send_email", "Send an email."), Tool("get_weather", "Current weather.")]
    store.build(tools, "bm25", name="mail")
    _as_older_rules(store.path("mail"))
    ToolIndex.load(store.path("mail"))
    # Before: the warning named the folder of every index ("indexes"), not this one
    assert f"{store.path('mail')} was built under the rules for tool text of an older toolsearch" in caplog.text
    caplog.clear()
    # Before: reused as it was, so the warning (and the re-check) came back on every load, whatever was built
    _, _, reused = store.build(tools, "bm25", name="mail")
    assert not reused
    ToolIndex.load(store.path("mail"))
    assert "rules for tool text" not in caplog.text
