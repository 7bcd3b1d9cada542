"""Request guards for the HTTP gateway: Origin and Host checks with CORS, per-caller rate limits, read timeouts.

The Origin and Host checks and the rate limit are ASGI middleware that answer before the MCP
transport sees a request, for every method (a DELETE with a foreign Origin is refused like a
POST). The MCP transport specification says servers MUST validate `Origin` on all incoming
connections and answer 403 when it is present and invalid; a request without `Origin` comes from a
non-browser client (browsers always send it on cross-origin and on POST requests) and passes, as the
SDK's own `TransportSecurityMiddleware` lets it. Unlike that middleware, which is on only when the
server binds 127.0.0.1/localhost/::1, these checks run on every address.

A browser page calls the gateway cross-origin only with CORS: its POST (JSON, with `Authorization`
and the MCP headers) is preflighted with an OPTIONS request, which carries no credentials, and it
may read an answer, or a header such as `mcp-session-id`, only when the answer allows its origin.
So for the origins the operator lists (`--allowed-origins`) the guard answers the preflight itself,
before authentication, and adds `Access-Control-Allow-Origin`, `Vary: Origin` and the exposed
headers to every answer, a 401 included (the page must read its `WWW-Authenticate` to sign in), as
the MCP SDK's own CORS wrapping of its HTTP routes does (Starlette's `CORSMiddleware`).

The header-read timeout cannot be ASGI middleware: an application is called only once the request
line and headers are complete, so a client that connects and never finishes its headers is never
seen there. uvicorn 0.54 has no such timeout (its `timeout_keep_alive` timer starts only after a
response), so `header_timeout_protocol` extends uvicorn's h11 protocol: the connection must deliver
complete request headers within a time bound, from its opening and again after each response,
and then each request's whole body within another, or it is closed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import re
from collections.abc import Iterable
from typing import Any

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import InvalidArgumentError, SessionStoreError
from ..stores.limits import CallerLimits, TokenBuckets
from .caller import VERSION_HEADER, caller_of_scope

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "LOOPBACK_HOSTS",
    "OriginGuard",
    "RateLimit",
    "header_timeout_protocol",
    "is_loopback",
    "jsonrpc_error_response",
    "origin_allowed",
    "spend",
]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_BODY_TIMEOUT = 30.0  # seconds a request's body may take to make progress (BODY_PROGRESS_BYTES more)
# The body timer starts again whenever this much more of a body has come: a slow link that keeps sending (2 kB/s
# with the default timeout) is served, a trickle of a byte a second is cut.
BODY_PROGRESS_BYTES = 64 * 1024

# What a page may send and read on the MCP endpoint (the streamable HTTP transport's headers, both eras)
_CORS_METHODS = b"GET, POST, DELETE, OPTIONS"
_CORS_REQUEST_HEADERS = (
    "authorization", "content-type", "accept", "last-event-id",
    VERSION_HEADER, "mcp-session-id", "mcp-method", "mcp-name",
)  # fmt: skip
_CORS_PARAM_PREFIX = "mcp-param-"  # 2026-07-28 `Mcp-Param-<name>` headers: their names depend on the tool
_CORS_EXPOSED = f"mcp-session-id, {VERSION_HEADER}, www-authenticate, retry-after".encode()
_CORS_MAX_AGE = b"600"
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")

# JSON-RPC's implementation-defined server-error range; the HTTP status says what happened too.
_REFUSED = -32001
_RATE_LIMITED = -32029


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    bare = host.strip("[]").lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


async def jsonrpc_error_response(
    send: Send,
    status: int,
    code: int,
    message: str,
    headers: Iterable[tuple[str, str]] = (),
    *,
    request_id: str | int | None = None,
    data: Any = None,
) -> None:
    """Answer with `status` and a JSON-RPC error: without an id when the request body was not read, else with the
    request's `request_id`; `data` is the error's optional `data` member."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def origin_allowed(origin: str, allowed: Iterable[str]) -> bool:
    """Whether `origin` is one of `allowed`: exact (case-insensitive), or `scheme://host:*` for any port."""
    return _listed(origin.rstrip("/"), (pattern.rstrip("/") for pattern in allowed))


def _listed(value: str, patterns: Iterable[str]) -> bool:
    """`value` equals a pattern, or a pattern ending in `:*` with a numeric port in its place (case-insensitive)."""
    value = value.lower()
    for pattern in patterns:
        pattern = pattern.lower()
        if value == pattern:
            return True
        if pattern.endswith(":*"):
            base = pattern[:-2]
            port = value[len(base) + 1 :] if value.startswith(base + ":") else ""
            if port.isdigit():
                return True
    return False


class OriginGuard:
    """Refuse a request whose `Origin` is present and not allowed (403), or whose `Host` is not allowed (421).

    `allowed_hosts=None` leaves `Host` unchecked: a gateway bound to every interface without a
    configured public URL cannot know the names clients reach it by. `Origin` is checked always.
    `cors_origins` (patterns as `allowed_origins`, and allowed too) get CORS: their preflights are
    answered here, and their answers name them in `Access-Control-Allow-Origin`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_origins: Iterable[str],
        allowed_hosts: Iterable[str] | None,
        cors_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.cors_origins = tuple(cors_origins)
        self.allowed_origins = (*allowed_origins, *self.cors_origins)
        self.allowed_hosts = None if allowed_hosts is None else tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if self.allowed_hosts is not None and not _listed(host, self.allowed_hosts):
            await jsonrpc_error_response(
                send,
                421,
                _REFUSED,
                f"Host {host!r} is not one this gateway serves; reach it by its configured address "
                "(the operator can add names with --allowed-hosts)",
            )
            return
        origins = headers.getlist("origin")
        if origins and (len(origins) > 1 or not origin_allowed(origins[0], self.allowed_origins)):
            await jsonrpc_error_response(
                send,
                403,
                _REFUSED,
                f"Origin {origins[0]!r} is not allowed; a browser page may call this gateway only from an "
                "origin the operator lists with --allowed-origins",
            )
            return
        if not origins or not origin_allowed(origins[0], self.cors_origins):
            await self.app(scope, receive, send)
            return
        origin = origins[0].encode("latin-1")
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(origin, headers, send)  # it carries no token: answered before authentication
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"vary"]
                vary = [v for k, v in message.get("headers", []) if k.lower() == b"vary"]
                message = {**message, "headers": [*kept, *_cors_headers(origin, vary)]}
            await send(message)

        await self.app(scope, receive, with_cors)


def _cors_headers(origin: bytes, vary: list[bytes] = []) -> list[tuple[bytes, bytes]]:  # noqa: B006 (never mutated)
    """What every answer to an allowed cross-origin page carries (it depends on Origin: `Vary`, for caches)."""
    return [
        (b"access-control-allow-origin", origin),
        (b"access-control-expose-headers", _CORS_EXPOSED),
        (b"vary", b", ".join([*vary, b"Origin"])),
    ]


async def _preflight(origin: bytes, headers: Headers, send: Send) -> None:
    """204 for a CORS preflight: the methods and request headers of the MCP transport (and the requested
    `Mcp-Param-*` names) may be sent from `origin`; the browser itself refuses anything else."""
    requested = [h.strip().lower() for h in headers.get("access-control-request-headers", "").split(",")]
    params = [h for h in requested if h.startswith(_CORS_PARAM_PREFIX) and _HEADER_NAME.fullmatch(h)]
    allowed = ", ".join(dict.fromkeys([*_CORS_REQUEST_HEADERS, *params])).encode("latin-1")
    answer = [
        *_cors_headers(origin),
        (b"access-control-allow-methods", _CORS_METHODS),
        (b"access-control-allow-headers", allowed),
        (b"access-control-max-age", _CORS_MAX_AGE),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": answer})
    await send({"type": "http.response.body", "body": b""})


class RateLimit:
    """A token bucket per caller: `per_minute` requests a minute on average, bursts of up to `burst`.

    The caller is the one authentication recorded in the scope; a request without one (no
    authentication configured) is counted per client address, except from loopback: that is the
    local user, whose clients all share one address (benchmarks, several agents), and who could
    bypass the gateway anyway. With `shared` limits (a Redis session store) the buckets are in
    Redis, one per caller for every worker; a Redis that does not answer gets 503, never a pass.
    Otherwise they live in this worker process, at most `max_callers` of them: the least recently
    seen is forgotten first, which can only favour that caller.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        per_minute: float,
        burst: int,
        max_callers: int = 10_000,
        shared: CallerLimits | None = None,
    ) -> None:
        if per_minute <= 0 or burst < 1:
            raise InvalidArgumentError(
                "per_minute must be > 0 and burst >= 1"
                f", got per_minute={per_minute!r}, burst={burst!r}"
            )
        self.app = app
        self.per_minute = per_minute
        self.burst = burst
        self.buckets = TokenBuckets(max_callers)
        self.shared = shared

    def _key(self, scope: Scope) -> str | None:
        caller = caller_of_scope(scope)
        if caller is not None and caller.authenticated:
            return caller.key
        client = scope.get("client")
        if client and is_loopback(str(client[0])):
            return None
        return f"addr:{client[0] if client else '?'}"

    def take(self, key: str, now: float | None = None) -> float:
        """Spend one request of `key`'s bucket in this process: 0 when allowed, else the seconds to wait."""
        return self.buckets.take(key, self.per_minute, self.burst, now)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = self._key(scope)
        wait = 0.0 if key is None else await spend(self.shared, self.buckets, key, self.per_minute, self.burst, send)
        if wait is None:
            return
        if wait > 0:
            retry = max(1, math.ceil(wait))
            await jsonrpc_error_response(
                send,
                429,
                _RATE_LIMITED,
                f"Rate limit exceeded: at most {self.per_minute:g} requests a minute (bursts of {self.burst}) "
                f"per caller; wait {retry} s (Retry-After) and send the request again",
                [("retry-after", str(retry))],
            )
            return
        await self.app(scope, receive, send)


async def spend(
    shared: CallerLimits | None,
    local: TokenBuckets,
    key: str,
    per_minute: float,
    burst: int,
    send: Send,
    *,
    cost: int = 1,
    what: str = "rate limits",
) -> float | None:
    """Spend `cost` of `key`'s bucket (0: only look), shared (off the event loop) or `local`: the wait, or
    None when the shared store failed and the request was answered with 503 (a limit that cannot be
    checked is not lifted)."""
    if shared is None:
        return local.take(key, per_minute, burst, cost=cost)
    try:
        return await anyio.to_thread.run_sync(shared.take, key, per_minute, burst, cost)
    except SessionStoreError as exc:
        await jsonrpc_error_response(
            send,
            503,
            _REFUSED,
            f"the gateway cannot check its {what}: {exc}; nothing was served, retry once the store answers",
            [("retry-after", "5")],
        )
        return None


def header_timeout_protocol(seconds: float, body_seconds: float = DEFAULT_BODY_TIMEOUT) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection that does not complete its request headers in `seconds`,
    or a request's body in `body_seconds` once its headers are in.

    Pass it as `uvicorn.Config(http=...)`. The header timer runs from the connection's opening and
    again from the end of each response, and stops when a request's headers are complete. The body
    timer runs from then until the body is complete (or the response is, which arms the header timer
    again), and starts again each time another BODY_PROGRESS_BYTES of it have come: a caller trickling a
    byte a second cannot hold connections open for good, and a slow link that keeps sending is not cut.
    """
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidArgumentError(f"the header timeout must be a number of seconds > 0, got {seconds!r}")
    if not (math.isfinite(body_seconds) and body_seconds > 0):
        raise InvalidArgumentError(f"the body timeout must be a number of seconds > 0, got {body_seconds!r}")
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        header_timeout = seconds
        body_timeout = body_seconds

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None
            self._body_timer: asyncio.TimerHandle | None = None
            self._body_cycle: object = None  # the request whose body the body timer waits for
            self._received = 0  # bytes read from the connection
            self._received_at_timer = 0  # ... when the body timer was last armed

        def _arm_header_timer(self) -> None:
            self._cancel_header_timer()
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _cancel_body_timer(self) -> None:
            self._body_cycle = None
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _header_timed_out(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.logger.info("closing a connection that sent no complete request headers in %g s", seconds)
                self.transport.close()

        def _body_timed_out(self) -> None:
            self._body_timer = None
            if self._body_cycle is self.cycle and self.cycle.more_body and not self.transport.is_closing():
                self.logger.info(
                    "closing a connection whose request body sent less than %d bytes in %g s",
                    BODY_PROGRESS_BYTES, body_seconds,
                )
                self.transport.close()  # the application's next receive() gets http.disconnect

        def _arm_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
            self._received_at_timer = self._received
            self._body_timer = self.loop.call_later(self.body_timeout, self._body_timed_out)

        def _watch_body(self) -> None:
            cycle = self.cycle
            if cycle is None or not cycle.more_body or cycle.response_complete or self.transport.is_closing():
                self._cancel_body_timer()  # no body, all of it in, or answered without it
            elif self._body_cycle is not cycle:
                self._cancel_body_timer()
                self._body_cycle = cycle
                self._arm_body_timer()
            elif self._received - self._received_at_timer >= BODY_PROGRESS_BYTES:
                self._arm_body_timer()  # the body keeps coming: another window

        def data_received(self, data: bytes) -> None:
            self._received += len(data)
            super().data_received(data)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            self._cancel_body_timer()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's headers were parsed: a new cycle started
                self._cancel_header_timer()
            self._watch_body()

        def on_response_complete(self) -> None:
            self._cancel_body_timer()
            # armed first: the base class may go on to parse a pipelined request, which stops it
            if not self.transport.is_closing():
                self._arm_header_timer()
            super().on_response_complete()

    return HeaderTimeoutProtocol
