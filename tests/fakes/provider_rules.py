"""The request rules the real OpenAI and Anthropic APIs enforce, checked by the fake server before it answers.

Each rule raises `Violation` with the provider's own wording (where the real message is known)
and the `param` the API names; the server answers it with HTTP 400 and that provider's error
body, so the real SDK raises `openai.BadRequestError` / `anthropic.BadRequestError`. The rules
and their sources are listed in docs/testing.md; a rule here without a row there is a bug.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TOOL_NAME", "Violation", "check_anthropic", "check_chat", "check_gemini", "check_responses"]

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_PATTERN = "^[a-zA-Z0-9_-]{1,64}$"


class Violation(Exception):
    """A request the real provider refuses: `rule` names the row of the table in docs/testing.md."""

    def __init__(self, rule: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message
        self.param = param


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _check_name(rule: str, name: Any, where: str, pattern_text: str | None = None) -> None:
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise Violation(
            rule,
            pattern_text
            or f"Invalid '{where}': string does not match pattern. Expected a string that matches the pattern "
            f"'{_PATTERN}'.",
            where,
        )


def _check_object_schema(rule: str, schema: Any, name: str, where: str) -> None:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind != "object":
        got = f'type: "{kind}"' if isinstance(schema, dict) else type(schema).__name__
        raise Violation(
            rule,
            f"Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"', got '{got}'.",
            where,
        )


def _check_unique(rule: str, names: Iterable[str], message: str, where: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise Violation(rule, message.format(name=name), where)
        seen.add(name)


# --- OpenAI Chat Completions -------------------------------------------------------------------


def check_chat(body: Mapping[str, Any]) -> None:
    for key in ("model", "messages"):
        if key not in body:
            raise Violation("required-fields", f"Missing required parameter: '{key}'.", key)
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise Violation("required-fields", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
    tools = _dicts(body.get("tools"))
    names: list[str] = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else {}
        _check_name("tool-name", fn.get("name"), f"tools[{i}].function.name")
        if "parameters" in fn:
            _check_object_schema("schema-object", fn["parameters"], fn["name"], f"tools[{i}].function.parameters")
        names.append(fn["name"])
    _check_unique("tool-names-unique", names, "Duplicate tool name '{name}' in 'tools'.", "tools")
    _check_chat_tool_choice(body.get("tool_choice"), names, "tools" in body)
    _check_chat_messages(messages)


def _check_chat_tool_choice(choice: Any, names: list[str], has_tools: bool) -> None:
    if choice is None:
        return
    if not has_tools:
        raise Violation(
            "tool-choice",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            "tool_choice",
        )
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if name not in names:
            raise Violation("tool-choice", f"Tool choice '{name}' not found in 'tools' parameter.", "tool_choice")


def _check_chat_messages(messages: list[Any]) -> None:
    pending: dict[str, int] = {}  # call id -> index of the assistant message that made it
    open_turn: int | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Violation(
                "required-fields", f"Invalid type for 'messages[{i}]': expected an object.", f"messages[{i}]"
            )
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_turn is None or call_id not in pending:
                raise Violation(
                    "result-answers-call",
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    "'tool_calls'.",
                    f"messages.[{i}].role",
                )
            del pending[call_id]
            continue
        if pending:
            raise Violation(
                "call-answered",
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                f"messages.[{open_turn}].role",
            )
        open_turn = None
        if role == "assistant" and not message.get("tool_calls") and message.get("content") is None:
            raise Violation(
                "required-fields",
                f"Invalid value for 'messages[{i}].content': an assistant message requires 'content' unless "
                "'tool_calls' is specified.",
                f"messages[{i}].content",
            )
        if role == "assistant" and message.get("tool_calls"):
            for j, call in enumerate(_dicts(message.get("tool_calls"))):
                fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                _check_name("tool-name", fn.get("name"), f"messages[{i}].tool_calls[{j}].function.name")
                pending[str(call.get("id"))] = i
            open_turn = i
    if pending:
        raise _unanswered_chat_calls(pending, open_turn)


def _unanswered_chat_calls(pending: dict[str, int], open_turn: int | None) -> Violation:
    return Violation(
        "call-answered",
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
        f"messages.[{open_turn}].role",
    )


# --- OpenAI Responses --------------------------------------------------------------------------


def _responses_functions(tools: list[dict[str, Any]]) -> Iterable[tuple[dict[str, Any], str]]:
    for i, tool in enumerate(tools):
        if tool.get("type") == "namespace":
            for j, inner in enumerate(_dicts(tool.get("tools"))):
                yield inner, f"tools[{i}].tools[{j}]"
        elif tool.get("type") == "function":
            yield tool, f"tools[{i}]"


def _check_responses_function(tool: dict[str, Any], where: str) -> str:
    _check_name("tool-name", tool.get("name"), f"{where}.name")
    if "parameters" in tool and tool["parameters"] is not None:
        _check_object_schema("schema-object", tool["parameters"], tool["name"], f"{where}.parameters")
    return str(tool["name"])


def check_responses(body: Mapping[str, Any]) -> None:
    if "model" not in body:
        raise Violation("required-fields", "Missing required parameter: 'model'.", "model")
    tools = _dicts(body.get("tools"))
    names = [_check_responses_function(tool, where) for tool, where in _responses_functions(tools)]
    _check_unique("tool-names-unique", names, "Duplicate tool name '{name}' in 'tools'.", "tools")
    search_tools = [t for t in tools if t.get("type") == "tool_search"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name") not in names:
        raise Violation(
            "tool-choice", f"Tool choice '{choice.get('name')}' not found in 'tools' parameter.", "tool_choice"
        )
    items = body.get("input")
    if isinstance(items, list) and "previous_response_id" not in body:
        _check_responses_items(_dicts(items), search_tools)


def _check_responses_items(items: list[dict[str, Any]], search_tools: list[dict[str, Any]]) -> None:
    calls: dict[str, str] = {}  # call_id -> "function_call" | "tool_search_call", in order
    answered: set[str] = set()
    for item in items:
        kind = item.get("type")
        call_id = str(item.get("call_id"))
        if kind == "function_call":
            _check_name("tool-name", item.get("name"), "input[].name")
            calls[call_id] = kind
        elif kind == "tool_search_call":
            if item.get("execution") == "client" and not any(t.get("execution") == "client" for t in search_tools):
                raise Violation(
                    "tool-search-declared",
                    "A client tool_search_call requires a 'tool_search' tool with execution 'client' in 'tools'.",
                    "tools",
                )
            calls[call_id] = kind
        elif kind in ("function_call_output", "tool_search_output"):
            wanted = "function_call" if kind == "function_call_output" else "tool_search_call"
            if calls.get(call_id) != wanted:
                what = "tool call" if kind == "function_call_output" else "tool search call"
                raise Violation(
                    "result-answers-call",
                    f"No {what} found for {kind.replace('_', ' ')} with call_id {call_id}.",
                    "input",
                )
            if call_id in answered:
                raise Violation("result-answers-call", f"Duplicate {kind} for call_id {call_id}.", "input")
            answered.add(call_id)
            if kind == "tool_search_output":
                for j, tool in enumerate(_dicts(item.get("tools"))):
                    if tool.get("type") == "function":
                        _check_responses_function(tool, f"input[].tools[{j}]")
    missing = [cid for cid in calls if cid not in answered]
    if missing:
        kind = calls[missing[0]]
        what = "tool output" if kind == "function_call" else "tool search output"
        raise Violation("call-answered", f"No {what} found for {kind.replace('_', ' ')} {missing[0]}.", "input")


# --- Anthropic Messages ------------------------------------------------------------------------


def check_anthropic(body: Mapping[str, Any], *, count_tokens: bool = False) -> None:
    required = ("model", "messages") if count_tokens else ("model", "max_tokens", "messages")
    for key in required:
        if key not in body:
            raise Violation("required-fields", f"{key}: Field required", key)
    tools = _dicts(body.get("tools"))
    names: list[str] = []
    deferred: set[str] = set()
    for i, tool in enumerate(tools):
        if "type" in tool and tool.get("type") not in (None, "custom"):
            names.append(str(tool.get("name")))  # a server tool (e.g. tool_search_tool_regex_...)
            continue
        _check_name(
            "tool-name",
            tool.get("name"),
            f"tools.{i}.custom.name",
            f"tools.{i}.custom.name: String should match pattern '{_PATTERN}'",
        )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Violation(
                "schema-object", f"tools.{i}.custom.input_schema.type: Input should be 'object'", f"tools.{i}"
            )
        names.append(tool["name"])
        if tool.get("defer_loading"):
            deferred.add(tool["name"])
            if "cache_control" in tool:
                raise Violation(
                    "cache-control-deferred",
                    f"Tool '{tool['name']}' cannot have both defer_loading=true and cache_control set. Tools with "
                    "defer_loading cannot use prompt caching.",
                    f"tools.{i}",
                )
    _check_unique("tool-names-unique", names, "tools: Tool names must be unique.", "tools")
    _check_cache_breakpoints(body)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool" and choice.get("name") not in names:
        raise Violation("tool-choice", f"tool_choice: Tool '{choice.get('name')}' not found in 'tools'", "tool_choice")
    _check_anthropic_messages(body["messages"], names, deferred, "tools" in body)


MAX_CACHE_BREAKPOINTS = 4


def _count_markers(value: Any) -> int:
    """cache_control markers on a tool, a system block, a content block or a block nested in a tool_result."""
    if isinstance(value, list):
        return sum(_count_markers(v) for v in value)
    if not isinstance(value, dict):
        return 0
    return int("cache_control" in value) + _count_markers(value.get("content"))


def _check_cache_breakpoints(body: Mapping[str, Any]) -> None:
    system = body.get("system")
    messages = body.get("messages")
    found = (
        _count_markers(body.get("tools"))
        + (_count_markers(system) if isinstance(system, list) else 0)
        + sum(_count_markers(m.get("content")) for m in _dicts(messages))
        + int(body.get("cache_control") is not None)  # top-level (automatic) caching places one more
    )
    if found > MAX_CACHE_BREAKPOINTS:
        raise Violation(
            "cache-breakpoints",
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.",
        )


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return _dicts(content)


def _check_anthropic_messages(messages: Any, names: list[str], deferred: set[str], has_tools: bool) -> None:
    if not isinstance(messages, list):
        raise Violation("required-fields", "messages: Input should be a valid list", "messages")
    last = len(messages) - 1
    previous_uses: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise Violation("alternation", f"messages.{i}.role: Input should be 'user' or 'assistant'", f"messages.{i}")
        role = message["role"]
        blocks = _blocks(message.get("content"))
        if not blocks and not (role == "assistant" and i == last):
            raise Violation(
                "non-empty",
                f"messages.{i}: all messages must have non-empty content except for the optional final assistant "
                "message",
                f"messages.{i}",
            )
        for block in blocks:
            if block.get("type") == "text" and not (block.get("text") or "").strip():
                if isinstance(message.get("content"), str) and role == "assistant" and i == last:
                    continue
                raise Violation("non-empty", "messages: text content blocks must be non-empty", f"messages.{i}")
            if block.get("type") in ("tool_use", "tool_result") and not has_tools:
                raise Violation(
                    "tools-defined",
                    "Requests which include `tool_use` or `tool_result` blocks must define tools.",
                    "tools",
                )
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if role == "user":
            _check_results(i, blocks, results, previous_uses, names, deferred)
        elif previous_uses:
            raise Violation(
                "call-answered",
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(previous_uses)}. Each `tool_use` block must have a corresponding `tool_result` block in "
                "the next message.",
                f"messages.{i}",
            )
        if role == "assistant":
            if i > 0 and messages[i - 1].get("role") == "assistant":
                raise Violation(
                    "alternation", f"messages.{i}: two assistant turns in a row; roles must alternate", f"messages.{i}"
                )
            if results:
                raise Violation("result-answers-call", f"messages.{i}: tool_result blocks belong in a user turn")
            previous_uses = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            for b in blocks:
                if b.get("type") == "tool_use":
                    _check_name("tool-name", b.get("name"), f"messages.{i}.content.tool_use.name")
        else:
            previous_uses = []
    if previous_uses:
        raise Violation(
            "call-answered",
            f"messages.{last}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(previous_uses)}. Each `tool_use` block must have a corresponding `tool_result` block in the "
            "next message.",
            f"messages.{last}",
        )


def _check_results(
    i: int,
    blocks: list[dict[str, Any]],
    results: list[dict[str, Any]],
    uses: list[str],
    names: list[str],
    deferred: set[str],
) -> None:
    leading = 0
    for block in blocks:
        if block.get("type") != "tool_result":
            break
        leading += 1
    if uses and leading < len(uses):
        raise Violation(
            "results-first",
            f"messages.{i}: Did not find {len(uses)} tool_result block(s) at the beginning of this message. Messages "
            "following tool_use blocks must begin with a matching number of tool_result blocks.",
            f"messages.{i}",
        )
    seen: set[str] = set()
    for j, block in enumerate(results):
        use_id = str(block.get("tool_use_id"))
        if use_id not in uses:
            raise Violation(
                "result-answers-call",
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. Each "
                "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
                f"messages.{i}",
            )
        if use_id in seen:
            raise Violation(
                "result-answers-call",
                f"messages.{i}: each tool_use must have a single result. Found multiple `tool_result` blocks with id: "
                f"{use_id}",
                f"messages.{i}",
            )
        seen.add(use_id)
        for ref in _dicts(block.get("content")):
            if ref.get("type") != "tool_reference":
                continue
            name = ref.get("tool_name")
            if name not in names:
                raise Violation(
                    "tool-reference", f"Tool reference '{name}' not found in available tools", f"messages.{i}"
                )
            if name not in deferred:
                raise Violation(
                    "tool-reference",
                    f"Tool reference '{name}' must point to a tool defined with defer_loading: true",
                    f"messages.{i}",
                )


# --- Gemini generateContent ----------------------------------------------------------------------

# the API enforces 64 characters (its error says so) where the SDK's docstring says 128
GEMINI_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")


def _parts(content: Mapping[str, Any]) -> list[dict[str, Any]]:
    return _dicts(content.get("parts"))


def check_gemini(body: Mapping[str, Any]) -> None:
    """The REST body of `models/{model}:generateContent` (camelCase, as the google-genai SDK sends it)."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise Violation("required-fields", "* GenerateContentRequest.contents: contents is not specified.", "contents")
    names: list[str] = []
    for i, tool in enumerate(_dicts(body.get("tools"))):
        for j, decl in enumerate(_dicts(tool.get("functionDeclarations"))):
            where = f"tools[{i}].function_declarations[{j}]"
            name = decl.get("name")
            if not isinstance(name, str) or not GEMINI_FUNCTION_NAME.fullmatch(name):
                raise Violation(
                    "tool-name",
                    f"The GenerateContentRequest proto is invalid:\n  * {where}.name: [FIELD_INVALID] Invalid function "
                    "name. Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain underscores "
                    "(_), dots (.), colons (:), or dashes (-), with a maximum length of 64.",
                    f"{where}.name",
                )
            # proto JSON takes a field's original name too, and the SDK sends this one so
            json_schema = "parametersJsonSchema" if "parametersJsonSchema" in decl else "parameters_json_schema"
            if "parameters" in decl and json_schema in decl:
                raise Violation(
                    "schema-object", f"* GenerateContentRequest.{where}: parameters and parameters_json_schema are "
                    "mutually exclusive", where,
                )
            schema = decl.get(json_schema, decl.get("parameters"))
            if schema is not None and (not isinstance(schema, dict) or str(schema.get("type")).lower() != "object"):
                raise Violation(
                    "schema-object",
                    f"* GenerateContentRequest.{where}.parameters: the schema must describe an object",
                    f"{where}.parameters",
                )
            names.append(name)
    _check_unique("tool-names-unique", names, "Duplicate function declaration found: {name}", "tools")
    _check_gemini_contents(_dicts(contents))


def _check_gemini_contents(contents: list[dict[str, Any]]) -> None:
    previous: str | None = None  # "user", "model-call", "model", "response": what the last turn was
    open_calls = 0
    for i, content in enumerate(contents):
        role = content.get("role", "user")
        parts = _parts(content)
        if role not in ("user", "model"):
            raise Violation("alternation", "Please use a valid role: user, model.", f"contents[{i}].role")
        if not parts:
            raise Violation("non-empty", f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be "
                            "empty.\n", f"contents[{i}].parts")
        calls = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), dict)]
        responses = [p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)]
        if open_calls and len(responses) != open_calls:
            raise Violation(
                "call-answered",
                "Please ensure that the number of function response parts is equal to the number of function call "
                "parts of the function call turn.",
                f"contents[{i}]",
            )
        if responses and (role != "user" or not open_calls):
            raise Violation(
                "result-answers-call",
                "Please ensure that function response turn comes immediately after a function call turn.",
                f"contents[{i}]",
            )
        if calls and previous not in ("user", "response"):
            raise Violation(
                "alternation",
                "Please ensure that function call turn comes immediately after a user turn or after a function "
                "response turn.",
                f"contents[{i}]",
            )
        open_calls = len(calls) if role == "model" else 0
        previous = ("model-call" if calls else "model") if role == "model" else ("response" if responses else "user")
