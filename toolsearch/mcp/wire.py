"""Client messages the MCP SDK drops or answers with a validation dump, answered with the error JSON-RPC gives.

The SDK's stdio transport hands a line it cannot read (not JSON, a batch, a lone surrogate escape such as
`\\ud800`) to its dispatcher as an exception, which logs it at debug level and answers nothing, and it reads
`{"id": 1.5, "method": ...}` as a notification: either way the client waits for ever. Its streamable-HTTP
transport answers a batch or a malformed message of the handshake era with 400, code -32602 and the whole
pydantic error (a kilobyte of it). The gateway reads each client message before the SDK does (`rejection`, one rule
for both transports) and answers one it refuses itself, as JSON-RPC 2.0 says: -32700 (parse error) for text its
parser cannot read, -32600 (invalid request) for JSON that is not one JSON-RPC message, each with `id: null` unless
the message is a request whose id could be read. A response (a `result` or `error`, no `method`) is never answered
over a stream: its id names one of the server's own requests, not the client's (the two are separate spaces), and
JSON-RPC answers no response; it is logged and dropped, as the SDK drops it. A batch is refused with -32600 on every
protocol version: MCP removed batches in 2025-06-18 (a Streamable HTTP POST body "MUST be a single JSON-RPC request,
notification, or response"), and a 2025-03-26 session, whose revision had them, is told in the message that batches
are not supported and to send each request on its own.

`CheckedLines` applies the rule to the stdio lines, `answered` to the exceptions a stream pair's transport sends,
and `WireCheck` (ASGI middleware) to the HTTP POST bodies.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import IO, Any, NamedTuple

import anyio
import mcp_types as types
import pydantic_core
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .guard import jsonrpc_error_response

__all__ = ["CheckedLines", "WireCheck", "answered", "claimed_stdin", "rejection"]

logger = logging.getLogger("toolsearch.mcp")

BATCH_REFUSED = (
    "Invalid Request: JSON-RPC batches are not supported (MCP removed them in 2025-06-18); "
    "send each request as a message of its own"
)
_NOT_AN_OBJECT = "Invalid Request: a message must be one JSON object (a JSON-RPC 2.0 request, notification or response)"
_BAD_ID = 'Invalid Request: "id" must be a string or an integer'
_NO_KIND = (
    'Invalid Request: a message needs a "method" (a request or notification), or a "result" or "error" (a response)'
)
# The members of the SDK's message union that each kind of message is read as: the one whose complaint is quoted.
_MEMBERS = {"request": "JSONRPCRequest", "notification": "JSONRPCNotification", "response": "JSONRPCResponse",
            "error response": "JSONRPCError"}
_SURROGATE = (
    "Parse error: the message holds a lone surrogate escape (such as \\ud800): valid JSON, but not Unicode text; "
    "send text as valid Unicode"
)
_QUOTED = 200  # characters of a parser's or validator's complaint quoted back: enough to say where, never a dump


class _Refusal(NamedTuple):
    error: types.JSONRPCError
    response: bool  # the message refused is a response: over a stream it is dropped, never answered


def rejection(raw: str | bytes) -> types.JSONRPCError | None:
    """The error that refuses one client message, or None for a message the SDK reads (and answers itself).

    A response the SDK cannot read is refused with `id: null` (an HTTP POST still needs its answer, and its id is
    one of the server's own requests); over a stream it is not answered at all (`CheckedLines`, `answered`)."""
    refused = _refusal(raw)
    return None if refused is None else refused.error


def _refusal(raw: str | bytes) -> _Refusal | None:
    try:
        value = pydantic_core.from_json(raw)  # the SDK's own JSON reader: what it cannot read, it drops
    except ValueError as exc:
        return _unread(raw, exc)
    if isinstance(value, list):
        return _Refusal(_error(None, INVALID_REQUEST, BATCH_REFUSED), response=False)
    if not isinstance(value, dict):
        return _Refusal(_error(None, INVALID_REQUEST, _NOT_AN_OBJECT), response=False)
    return _judged(value)


def _judged(value: dict[str, Any]) -> _Refusal | None:
    """`_refusal` of a message read as a JSON object."""
    kind = _kind(value)
    response = kind in ("response", "error response")
    request_id = value.get("id")
    if request_id is not None and _request_id(request_id) is None:  # the SDK would take it for a notification
        return _Refusal(_error(None, INVALID_REQUEST, _BAD_ID), response)
    try:
        types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as exc:
        if kind is None:
            return _Refusal(_error(None, INVALID_REQUEST, _NO_KIND), response=False)
        errors = exc.errors(include_url=False, include_input=False)
        # the complaint of the member this kind of message is read as: a response's is never "method: Field required"
        first = next((e for e in errors if e["loc"][:1] == (_MEMBERS[kind],)), errors[0])
        where = ".".join(str(part) for part in first["loc"][1:]) or "message"
        why = f"{where}: {first['msg']}"[:_QUOTED]
        message = f"Invalid Request: not a valid JSON-RPC 2.0 {kind} ({why})"
        # only a request's own id may be answered: the client waits on it (a notification has none)
        return _Refusal(_error(_request_id(request_id) if kind == "request" else None, INVALID_REQUEST, message),
                        response)
    return None


def _kind(value: dict[str, Any]) -> str | None:
    """What a JSON-RPC message read as `value` means to be, by its keys: None when it has none of them."""
    if "method" in value:
        return "request" if "id" in value else "notification"
    if "result" in value:
        return "response"
    if "error" in value:
        return "error response"
    return None


def _unread(raw: str | bytes, exc: ValueError) -> _Refusal:
    """The SDK's reader refused `raw`: a parse error, with the message's id when the standard library reads it and it
    is a request's (valid JSON the SDK cannot take, a lone surrogate escape above all: the client can then match the
    answer)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return _Refusal(_error(None, PARSE_ERROR, f"Parse error: the message is not JSON ({str(exc)[:_QUOTED]})"),
                        response=False)
    kind = _kind(value) if isinstance(value, dict) else None
    response = kind in ("response", "error response")
    request_id = _request_id(value.get("id")) if kind == "request" else None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _Refusal(_error(request_id, PARSE_ERROR, _SURROGATE), response)
    except (ValueError, RecursionError):  # NaN and the like never get here: the SDK's reader takes them
        pass
    return _Refusal(_error(request_id, PARSE_ERROR, f"Parse error: {str(exc)[:_QUOTED]}"), response)


def _request_id(value: Any) -> str | int | None:
    """`value` as a JSON-RPC id MCP allows (a string or an integer; an integral float is read as one, as the SDK
    does), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # an id holding a lone surrogate could not be written back
        except UnicodeEncodeError:
            return None
        return value
    return None


def _error(request_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def _from_exception(exc: Exception) -> _Refusal:
    """The refusal of a message a transport could not read and sent on as an exception (the SDK's pydantic error):
    `_refusal` of its text or object where the error carries it, else a plain invalid request."""
    errors = exc.errors(include_url=False) if isinstance(exc, ValidationError) else []
    for error in errors:
        given = error.get("input")
        if error["type"] == "json_invalid" and isinstance(given, (str, bytes)):
            return _refusal(given) or _Refusal(_error(None, PARSE_ERROR, "Parse error: the message is not JSON"), False)
        if error["type"] == "model_type" and len(error["loc"]) <= 1:  # the whole message is no object
            try:
                found = _refusal(json.dumps(given))
            except (TypeError, ValueError):
                found = None
            if found is not None:
                return found
        if error["type"] == "missing" and len(error["loc"]) <= 2 and isinstance(given, dict):  # the message itself
            judged = _judged(given)
            if judged is not None:
                return judged
    return _Refusal(_error(None, INVALID_REQUEST, "Invalid Request: the message is not a JSON-RPC 2.0 message"), False)


def _dropped(refused: _Refusal) -> None:
    logger.debug("a client's response that cannot be read was dropped (JSON-RPC answers no response): %s",
                 refused.error.error.message)


async def _send_answer(write_stream: Any, error: types.JSONRPCError) -> bool:
    """Write `error` to the client; False once the stream is closed (the client left)."""
    try:
        await write_stream.send(SessionMessage(error))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return False
    return True


class CheckedLines:
    """A stdio client's lines, less those `rejection` refuses: each is answered on the stream `answer_on` names, but
    a response, which is dropped (logged at debug level).

    Given to the SDK's `stdio_server` as its stdin (it only iterates the lines). Blank lines are skipped: they carry
    no message. A refused line read before `answer_on` is called waits for it.
    """

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self._lines = lines
        self._write: Any = None
        self._ready = anyio.Event()

    def answer_on(self, write_stream: Any) -> None:
        self._write = write_stream
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            if not line.strip():
                continue
            refused = _refusal(line)
            if refused is None:
                yield line
                continue
            if refused.response:
                _dropped(refused)
                continue
            await self._ready.wait()
            if not await _send_answer(self._write, refused.error):
                return


class _UnownedText(io.TextIOWrapper):
    """UTF-8 text over a binary stream this wrapper does not own: closed (or collected), it lets go of the stream
    instead of closing it (closing sys.stdin's buffer would break the process's stdin for good)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


@contextlib.contextmanager
def claimed_stdin() -> Iterator[IO[str]]:
    """This process's stdin as UTF-8 text (a byte that is not UTF-8 read as U+FFFD, as the SDK reads it), through a
    private copy of fd 0 while fd 0 itself points at the null device, as the SDK's `stdio_server` does with a stdin it
    opens (handed one, it does not): a child process or a stray read gets end of file, never a client's message.
    Where fd 0 cannot be copied, stdin is read in place."""
    stdin = sys.stdin.buffer
    try:
        if stdin.fileno() != 0:
            raise OSError("stdin is not fd 0")
        private = os.dup(0)
    except (OSError, ValueError, AttributeError):
        yield _UnownedText(stdin, encoding="utf-8", errors="replace")
        return
    diverted = False
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
            diverted = True
        finally:
            os.close(null)
    try:
        # closefd=False, and never closed: a worker thread may still be blocked reading it after the transport ends
        yield _UnownedText(os.fdopen(private, "rb", closefd=False), encoding="utf-8", errors="replace")
    finally:
        if diverted:
            with contextlib.suppress(OSError):
                os.dup2(private, 0)


class _Answering:
    """A transport's read stream, less the exceptions it sends for messages it could not read: each is answered on
    the write stream (the SDK's dispatcher would only log it). Everything else is the stream's own, its sender
    contexts (`last_context`) included."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            refused = _from_exception(item)
            if refused.response:
                _dropped(refused)
            else:
                await _send_answer(self._write, refused.error)

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def answered(read_stream: Any, write_stream: Any) -> Any:
    """`read_stream` with every exception its transport sends (a message it could not read) answered on
    `write_stream` with the error `rejection` gives, instead of being dropped; a response is still dropped."""
    return _Answering(read_stream, write_stream)


class WireCheck:
    """ASGI middleware in front of the SDK's streamable-HTTP app: a POST to the MCP path whose body `rejection`
    refuses is answered 400 with that error, `id: null` (the HTTP answer is the POST's own, and the spec's error for
    a body the server cannot accept carries none), instead of the SDK's validation dump.

    The body is read whole before the SDK sees it (it reads it whole too) and handed on unchanged; one larger than
    the SDK takes (`max_body`) goes on unread, for the SDK to refuse (413).
    """

    def __init__(self, app: ASGIApp, *, path: str = "/mcp", max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self.app = app
        self.path = path.rstrip("/")
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path", "").rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        size, whole = 0, False
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":  # the client left: the SDK sees it as it would have
                break
            size += len(message.get("body", b""))
            if size > self.max_body:
                break
            if not message.get("more_body", False):
                whole = True
                break
        if whole:
            error = rejection(b"".join(m.get("body", b"") for m in read))
            if error is not None:
                await jsonrpc_error_response(send, 400, error.error.code, error.error.message)
                return

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)
