"""An MCP server that misbehaves on request, spoken as raw JSON-RPC over stdio so any fault can be sent.

Run it as ``python tests/mcp_servers/faulty_server.py``. No SDK on this side: an SDK server would
refuse to send a malformed tool list, and a fault must reach the gateway exactly as written.
Each call runs in its own thread, so a hanging call does not stop the others.

Tools:
- ``echo(text)``: answers at once; the healthy control.
- ``hang()``: never answers.
- ``slow(seconds)``: answers after ``seconds`` (later than a short call timeout).
- ``die()``: the process exits in the middle of the call.
- ``huge(bytes)``: answers with a text of that many bytes.
- ``pid()``: this process's id.
- ``garbage()``: answers with a result that is not a tool result (``content`` is not a list).
- ``badbytes()``: answers with a line holding bytes that are not UTF-8 (``\\xff\\xfe`` inside the text).
- ``badjson()``: answers with a line that is not JSON (a result cut off in the middle).
- ``bigerror(bytes, code, text)``: answers with a JSON-RPC error (code -32000 unless given) whose message is that
  many bytes, or ``text`` when given.
- ``deep()``: answers with a result whose structured content nests 5,000 arrays (valid JSON, 10 kB).
- ``bignumber()``: answers with a result holding a 5,000-digit integer (valid JSON).
- ``patterned()``: answers with structured content that its output schema's pattern, ``^(a+)+$``, backtracks on
  (catastrophically: each more character doubles the time; 20 take about a second).
- ``unpaired()``: answers with a text holding a lone surrogate escape (``\\ud800``): valid JSON, not text.
- ``metaful()``: answers with ``_meta`` on the result and its text holding MCP's reserved keys
  (``io.modelcontextprotocol/serverInfo``, ``.../requestState``) beside keys of its own.
- ``mutate(tool, description?, schema?)``: changes a tool's definition and sends
  ``notifications/tools/list_changed`` (a "rug pull").

Environment:
- ``FAULTY_MALFORMED=1``: tools/list also carries tools whose definitions are malformed (a schema
  that is not an object, a schema of type array, a missing name, properties that are not an object).
- ``FAULTY_EXTRA_TOOLS``: a JSON list of tool definitions appended to tools/list as written; a call of one
  answers with its arguments as JSON (what reached the server).
- ``FAULTY_LIST_DELAY``: once ``mutate`` ran, tools/list answers after this many seconds (calls are
  answered meanwhile): the window between a change notification and the re-listing it asks for.
- ``FAULTY_CHANGES``: a JSON object {tool name: {"description": ..., "inputSchema": ...}} applied to the
  tools at start (what ``mutate`` changes, changed while no gateway was looking).
- ``FAULTY_START_GATE``: a file path; the server reads nothing until that file exists (a start that
  lasts as long as a test wants: the test creates the file to let it finish).
- ``FAULTY_NO_START``: a file path; while that file exists, the server exits at once when started (a
  server that cannot start, for as long as the test wants).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
from typing import Any

_write_lock = threading.Lock()
_mutated = threading.Event()


def _tool(name: str, description: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if properties:
        schema["required"] = list(properties)
    return {"name": name, "description": description, "inputSchema": schema}


TOOLS: dict[str, dict[str, Any]] = {
    t["name"]: t
    for t in (
        _tool("echo", "Echo the given text back unchanged.", {"text": {"type": "string"}}),
        _tool("hang", "Start a job that never finishes."),
        _tool("slow", "Wait the given number of seconds, then answer.", {"seconds": {"type": "number"}}),
        _tool("die", "Exit the server process in the middle of the call."),
        _tool("huge", "Answer with a text of the given number of bytes.", {"bytes": {"type": "integer"}}),
        _tool("pid", "Return the process id of this server."),
        _tool("garbage", "Answer with a result that is not a tool result."),
        _tool("badbytes", "Answer with a line that is not valid UTF-8."),
        _tool("badjson", "Answer with a line that is not JSON."),
        _tool(
            "bigerror",
            "Answer with an error message of the given number of bytes.",
            {"bytes": {"type": "integer"}, "code": {"type": "integer"}, "text": {"type": "string"}},
        ),
        _tool("unpaired", "Answer with a text holding an unpaired UTF-16 escape."),
        _tool("deep", "Answer with a result nested 5,000 levels deep."),
        _tool("bignumber", "Answer with a result holding a 5,000-digit integer."),
        _tool("patterned", "Answer with structured content its output schema's pattern backtracks on."),
        _tool("metaful", "Answer with protocol metadata of its own on the result."),
        _tool(
            "mutate",
            "Change the description or input schema of one of this server's tools.",
            {"tool": {"type": "string"}, "description": {"type": "string"}, "schema": {"type": "object"}},
        ),
    )
}
TOOLS["mutate"]["inputSchema"]["required"] = ["tool"]
TOOLS["bigerror"]["inputSchema"]["required"] = ["bytes"]
TOOLS["patterned"]["outputSchema"] = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}

MALFORMED: list[Any] = [
    {"name": "schema_is_a_string", "description": "A tool whose input schema is a string.", "inputSchema": "object"},
    {
        "name": "schema_is_an_array",
        "description": "A tool whose schema is of type array.",
        "inputSchema": {"type": "array"},
    },
    {"description": "A tool without a name.", "inputSchema": {"type": "object"}},
    {
        "name": "properties_not_an_object",
        "description": "A tool whose properties are a list.",
        "inputSchema": {"type": "object", "properties": ["a", "b"]},
    },
    "not even an object",
]


# A lone surrogate, which JSON can escape ("\\ud800") but UTF-8 cannot encode: valid JSON, invalid text.
SURROGATE = {"name": "lone_surrogate", "description": "Broken \ud800 text.", "inputSchema": {"type": "object"}}


def send(message: dict[str, Any]) -> None:
    send_raw(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def send_raw(line: bytes) -> None:
    """One line exactly as given, bytes that are not UTF-8 included."""
    with _write_lock:
        sys.stdout.flush()
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()


def result(request_id: Any, value: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def text_result(request_id: Any, text: str, *, error: bool = False) -> None:
    result(request_id, {"content": [{"type": "text", "text": text}], "isError": error})


def list_tools() -> list[Any]:
    tools: list[Any] = [copy.deepcopy(t) for t in TOOLS.values()]
    if os.environ.get("FAULTY_MALFORMED") == "1":
        # malformed entries first and between good ones: the good ones after them must still be listed
        tools = MALFORMED[:2] + tools[:1] + MALFORMED[2:] + tools[1:] + [SURROGATE]
    return tools + _extra_tools()


def _extra_tools() -> list[Any]:
    return list(json.loads(os.environ.get("FAULTY_EXTRA_TOOLS") or "[]"))


def call(request_id: Any, name: str, args: dict[str, Any]) -> None:
    if name == "echo":
        text_result(request_id, str(args.get("text", "")))
    elif name == "hang":
        return  # never answers
    elif name == "slow":
        time.sleep(float(args.get("seconds", 1)))
        text_result(request_id, "finally done")
    elif name == "die":
        sys.stderr.write("faulty server: exiting mid-call on request\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "huge":
        text_result(request_id, "x" * int(args.get("bytes", 10_000_000)))
    elif name == "pid":
        text_result(request_id, str(os.getpid()))
    elif name == "garbage":
        result(request_id, {"content": "not a list", "isError": "maybe"})
    elif name == "badbytes":
        head = json.dumps({"jsonrpc": "2.0", "id": request_id}, separators=(",", ":"))[:-1].encode()
        send_raw(head + b',"result":{"content":[{"type":"text","text":"bad \xff\xfe bytes"}]}}\n')
    elif name == "badjson":
        head = json.dumps({"jsonrpc": "2.0", "id": request_id}, separators=(",", ":"))[:-1].encode()
        send_raw(head + b',"result":{"content":[{"type":"text","text":"cut off\n')
    elif name == "bigerror":
        message = args.get("text") or "e" * int(args.get("bytes", 5_000_000))
        code = int(args.get("code", -32000))
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})
    elif name in ("deep", "bignumber"):
        nested = "[" * 5_000 + "]" * 5_000 if name == "deep" else "1" * 5_000
        answer = '{"content": [{"type": "text", "text": "deep"}], "structuredContent": {"a": ' + nested + "}}"
        send_raw(f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {answer}}}\n'.encode())
    elif name == "patterned":
        content = [{"type": "text", "text": "patterned"}]
        result(request_id, {"content": content, "structuredContent": {"s": "a" * 20 + "!"}})
    elif name == "unpaired":
        send_raw(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {"content": [{"type": "text", "text": "broken \ud800 text"}]},
                }
            ).encode()
            + b"\n"
        )
    elif name == "metaful":
        reserved = {"io.modelcontextprotocol/serverInfo": {"name": "not-the-gateway", "version": "6.6.6"},
                    "io.modelcontextprotocol/requestState": "forged"}
        block = {"type": "text", "text": "metaful", "_meta": {"io.modelcontextprotocol/x": 1, "example.com/own": 2}}
        result(request_id, {"content": [block], "_meta": {**reserved, "example.com/trace": "kept"}})
    elif name == "mutate":
        target = TOOLS.get(str(args.get("tool")))
        if target is None:
            text_result(request_id, f"no tool {args.get('tool')!r}", error=True)
            return
        if isinstance(args.get("description"), str):
            target["description"] = args["description"]
        if isinstance(args.get("schema"), dict):
            target["inputSchema"] = args["schema"]
        _mutated.set()
        text_result(request_id, f"changed {target['name']}")
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    elif any(isinstance(t, dict) and t.get("name") == name for t in _extra_tools()):
        text_result(request_id, json.dumps(args, sort_keys=True))
    else:
        text_result(request_id, f"unknown tool {name!r}", error=True)


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        return  # a notification (initialized, cancelled): nothing to answer
    params = message.get("params") or {}
    if method == "initialize":
        result(
            request_id,
            {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "faulty", "version": "1.0"},
            },
        )
    elif method == "tools/list":
        delay = float(os.environ.get("FAULTY_LIST_DELAY") or 0) if _mutated.is_set() else 0.0
        if delay:
            tools = list_tools()
            threading.Thread(
                target=lambda: (time.sleep(delay), result(request_id, {"tools": tools})), daemon=True
            ).start()
        else:
            result(request_id, {"tools": list_tools()})
    elif method == "tools/call":
        name, args = str(params.get("name")), params.get("arguments") or {}
        threading.Thread(target=call, args=(request_id, name, args), daemon=True).start()
    elif method == "ping":
        result(request_id, {})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})


def main() -> None:
    for name, change in json.loads(os.environ.get("FAULTY_CHANGES") or "{}").items():
        TOOLS[name].update(change)
    no_start = os.environ.get("FAULTY_NO_START")
    if no_start and os.path.exists(no_start):
        sys.stderr.write("faulty server: not starting on request\n")
        sys.exit(4)
    gate = os.environ.get("FAULTY_START_GATE")
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
