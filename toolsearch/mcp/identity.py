"""Session identity for stateless gateway workers: issue, check and key the id each handshake-era request carries."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .caller import ANONYMOUS, caller_of_scope, is_modern_scope
from .caps import StoreCaps, owner_of, sessions_refused, too_many

__all__ = ["MCP_SESSION_HEADER", "SessionIdentity", "session_key"]

logger = logging.getLogger("toolsearch.mcp")

MCP_SESSION_HEADER = "mcp-session-id"


def session_key(header: str, value: str, caller_key: str = "") -> str:
    """The store id of the session a header value names, for one caller.

    A digest, not the value: a header may carry a credential (a user token set by a proxy), and
    store keys and logs must never hold one; the digest is as unique as the value it stands for.
    The caller's key is part of it, so an id presented by another caller names another session.
    """
    digest = hashlib.sha256(f"{header.lower()}\0{value}\0{caller_key}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"h-{digest[:40]}"


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> tuple[dict[str, Any], bytes]:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    return {"type": "http.response.start", "status": status, "headers": raw}, body


class SessionIdentity:
    """ASGI middleware in front of the stateless MCP app: every handshake-era request names its session.

    With the MCP session header (the default), the gateway itself issues an unguessable
    `mcp-session-id` on the first POST that carries none (the client's `initialize`), registers
    it in the store at once (`register`), and refuses with 404 any id it never issued, or one
    issued to another caller (`known` says; the spec's answer, so the client initializes again).
    With a header the deployment names (e.g. a user id its proxy sets, honoured only with
    --trust-proxy-header), that header is the identity and a request without it is refused. A
    stateless worker keeps no stream open, so GET (the standalone notification stream) answers
    405; DELETE with the MCP session header ends the session, after the same checks. With `caps`,
    each owner (toolsearch.mcp.caps.owner_of) holds at most `caps.limit` issued sessions, counted in
    the store: one more `initialize` gets 429 saying how many are open and what to do.
    2026-07-28 requests pass straight through: they carry no session.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        header: str = MCP_SESSION_HEADER,
        path: str = "/mcp",
        on_delete: Callable[[str], Awaitable[None]],
        known: Callable[[str], Awaitable[bool]] | None = None,
        register: Callable[[str], Awaitable[None]] | None = None,
        caps: StoreCaps | None = None,
    ) -> None:
        self.app = app
        self.path = path
        self.header = header.lower()
        self._raw = self.header.encode("latin-1")
        self._on_delete = on_delete
        self._known = known
        self._register = register
        self._caps = caps  # at most caps.limit issued sessions open per owner, counted in the store

    @property
    def issues_ids(self) -> bool:
        return self.header == MCP_SESSION_HEADER

    def value(self, headers: Mapping[str, str] | None) -> str | None:
        """The identity header's value in a request's headers, or None."""
        if headers is None:
            return None
        value = headers.get(self.header)
        return value.strip() or None if isinstance(value, str) else None

    async def _unknown(self, key: str, send: Send, owner: str) -> bool:
        """True (and a 404 sent) when the presented gateway-issued id is not one this caller holds."""
        if not self.issues_ids or (self._known is None and self._caps is None):
            return False
        try:
            if self._caps is not None:  # one store call checks the session and keeps it counted for its owner
                known = await self._caps.touch(owner, key)
            else:
                assert self._known is not None
                known = await self._known(key)
        except Exception as exc:  # the store is down: say so rather than claim the session is gone
            await _respond(send, 503, f"cannot check the session: {exc}; retry once the session store answers")
            return True
        if not known:
            await _respond(
                send,
                404,
                "unknown session: this gateway did not issue this mcp-session-id to you, or it expired; "
                "start a new session (send initialize without one)",
            )
            return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("path", "").rstrip("/") != self.path.rstrip("/"):
            await self.app(scope, receive, send)
            return
        if is_modern_scope(scope):  # a 2026-07-28 request carries no session: the SDK's modern entry serves it
            await self.app(scope, receive, send)
            return
        caller = caller_of_scope(scope) or ANONYMOUS
        owner = owner_of(scope)
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
            key = session_key(self.header, present, caller.key)
            if await self._unknown(key, send, owner):
                return
            try:
                await self._on_delete(key)
                if self._caps is not None:
                    await self._caps.release(owner, key)
            except Exception as exc:  # the store is down: the session ends by its idle expiry instead
                await _respond(send, 503, f"could not end the session: {exc}")
                return
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if method != "POST":
            await self.app(scope, receive, send)
            return
        if present:
            if await self._unknown(session_key(self.header, present, caller.key), send, owner):
                return
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
        key = session_key(self.header, issued, caller.key)
        try:
            if self._caps is not None:
                claim = await self._caps.claim(owner, key)
                if not claim.granted:
                    message, retry = sessions_refused(claim, self._caps.limit, owner)
                    await too_many(send, message, retry)
                    return
            if self._register is not None:
                await self._register(key)
        except Exception as exc:
            logger.warning("could not register a new session: %s", exc)
            if self._caps is not None:
                with contextlib.suppress(Exception):  # unclaimed anyway once its grace passes without a key
                    await self._caps.release(owner, key)
            await _respond(send, 503, f"could not start a session: {exc}; retry once the session store answers")
            return
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
