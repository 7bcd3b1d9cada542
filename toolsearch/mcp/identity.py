"""Session identity for stateless gateway workers: issue, read and key the id each request carries."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MCP_SESSION_HEADER", "SessionIdentity", "session_key"]

MCP_SESSION_HEADER = "mcp-session-id"


def session_key(header: str, value: str) -> str:
    """The store id of the session a header value names.

    A digest, not the value: a header may carry a credential (a user token set by a proxy), and
    store keys and logs must never hold one; the digest is as unique as the value it stands for.
    """
    digest = hashlib.sha256(f"{header.lower()}\0{value}".encode()).hexdigest()
    return f"h-{digest[:40]}"


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> tuple[dict[str, Any], bytes]:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    return {"type": "http.response.start", "status": status, "headers": raw}, body


class SessionIdentity:
    """ASGI middleware in front of the stateless MCP app: every request names its session.

    With the MCP session header (the default), the gateway itself issues an unguessable
    `mcp-session-id` on the first POST that carries none (the client's `initialize`) and the
    client sends it back on every later request, to whichever worker. With a header the
    deployment names (e.g. a user id its proxy sets), that header is the identity and a request
    without it is refused. A stateless worker keeps no stream open, so GET (the standalone
    notification stream) answers 405; DELETE with the MCP session header ends the session.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        header: str = MCP_SESSION_HEADER,
        path: str = "/mcp",
        on_delete: Callable[[str], Awaitable[None]],
    ) -> None:
        self.app = app
        self.path = path
        self.header = header.lower()
        self._raw = self.header.encode("latin-1")
        self._on_delete = on_delete

    @property
    def issues_ids(self) -> bool:
        return self.header == MCP_SESSION_HEADER

    def value(self, headers: Mapping[str, str] | None) -> str | None:
        """The identity header's value in a request's headers, or None."""
        if headers is None:
            return None
        value = headers.get(self.header)
        return value.strip() or None if isinstance(value, str) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("path", "").rstrip("/") != self.path.rstrip("/"):
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        present = next((v.decode("latin-1").strip() for k, v in scope.get("headers", []) if k == self._raw), "")
        if method == "GET":
            await _respond(
                send,
                405,
                "this gateway runs stateless workers: it opens no standalone stream (GET); "
                "notifications ride each request's response",
                {"allow": "POST, DELETE"},
            )
            return
        if method == "DELETE":
            if not (self.issues_ids and present):
                await _respond(
                    send,
                    405,
                    f"sessions keyed by the {self.header} header end by the store's idle expiry",
                    {"allow": "POST"},
                )
                return
            try:
                await self._on_delete(session_key(self.header, present))
            except Exception as exc:  # the store is down: the session ends by its idle expiry instead
                await _respond(send, 503, f"could not end the session: {exc}")
                return
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if method != "POST" or present:
            await self.app(scope, receive, send)
            return
        if not self.issues_ids:
            await _respond(
                send,
                400,
                f"this gateway identifies sessions by the {self.header!r} header, which the "
                "request lacks; send it on every request (or have the proxy in front set it)",
            )
            return
        issued = secrets.token_urlsafe(32)
        scope = {**scope, "headers": [*scope.get("headers", []), (self._raw, issued.encode("latin-1"))]}

        async def send_with_id(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (self._raw, issued.encode("latin-1"))]}
            await send(message)

        await self.app(scope, receive, send_with_id)


async def _respond(send: Send, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
    start, body = _error(status, message, headers)
    await send(start)
    await send({"type": "http.response.body", "body": body})
