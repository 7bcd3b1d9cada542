"""Caps per caller on open handshake-era sessions and 2026-era context handles, so one caller cannot fill the gateway.

The SDK's stateful session manager bounds sessions for everyone at once (10,000, then 503 for all);
a caller who opens sessions and never closes them would lock every other caller out until they go
idle. Here each caller (its authenticated identity; without authentication, its client address)
may hold at most N open sessions and M context handles; past that, only that caller is refused,
with what is open and what to do. Without authentication a client address is all that tells callers
apart, so every local client of such a gateway shares one cap on sessions (`--sessions-per-address`,
default: `--sessions-per-caller`), and its 429 says so.

- Sessions named by a store (`--session-store redis://...`, gateway-issued ids) are counted in the
  store (toolsearch.stores.limits), so every worker sees one count that follows the sessions that
  really exist: an expired or deleted session, or one whose worker died, stops counting.
- Per-connection sessions (the memory store: the SDK's manager keeps them in this one process) are
  counted by `ConnectionCaps`, which sees every request of every session: a session counts from the
  response that issues its id until it has ended: deleted, no longer held by the SDK's manager, or
  idle past the SDK's idle timeout with no request in flight (the SDK's own rule for ending it). A
  404 alone ends nothing: the SDK gives it to a session presented with another credential too (the
  same caller's token for another client id), and that session goes on.
- Context handles are counted in the store that keeps them; an idle one ends by the store's TTL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import InvalidArgumentError
from ..stores.limits import CallerLimits, Claim, RedisLimits, limits_for
from .caller import caller_of_scope

if TYPE_CHECKING:
    from .auth import AuthSettings

__all__ = [
    "CallerCaps",
    "ConnectionCaps",
    "StoreCaps",
    "caller_caps",
    "contexts_refused",
    "owner_of",
    "sessions_refused",
    "too_many",
]

T = TypeVar("T")

_TOO_MANY = -32029  # the guards' code for "slow down" (JSON-RPC server-error range)
_SESSION_HEADER = b"mcp-session-id"
_SESSIONS_FLAG = "--sessions-per-caller"
_ADDRESS_FLAG = "--sessions-per-address"
_CONTEXTS_FLAG = "--contexts-per-caller"


def owner_of(scope: Scope) -> str:
    """Whom a request counts against: its authenticated caller, else its client address (loopback included)."""
    caller = caller_of_scope(scope)
    if caller is not None and caller.authenticated:
        return caller.key
    client = scope.get("client")
    return f"addr:{client[0] if client else '?'}"


def _wait(seconds: float | None) -> int | None:
    return None if seconds is None or math.isinf(seconds) else max(1, math.ceil(seconds))


def sessions_refused(claim: Claim, limit: int, owner: str | None = None) -> tuple[str, int]:
    """The refusal of one more session to `owner` (see `owner_of`), and the Retry-After it goes with.

    An owner that is a client address (no authentication) is told that it shares the cap with every
    client at that address, and which setting raises it: 100 of 200 local clients refused with a
    message for one caller read as a fault of the one refused.
    """
    wait = _wait(claim.retry_after)
    later = (
        f"wait {wait} s for an idle one to expire"
        if wait is not None
        else "wait for one to end (or for its idle expiry)"
    )
    close = (
        f"Close a session you no longer use (HTTP DELETE with its mcp-session-id) or {later}, then initialize again."
    )
    if owner is not None and owner.startswith("addr:"):
        address = owner.removeprefix("addr:")
        return (
            f"Too many open sessions from {address}: {claim.open} open, at most {limit} ({_ADDRESS_FLAG}). "
            "This gateway has no authentication, so it tells callers apart only by client address: every client "
            f"at {address} (on loopback, every local client) shares this one cap. {close} Its operator can raise "
            f"{_ADDRESS_FLAG}, or turn on authentication to cap each caller on its own.",
            wait or 60,
        )
    return (
        f"Too many open sessions for this caller: {claim.open} open, at most {limit} ({_SESSIONS_FLAG}). {close}",
        wait or 60,
    )


def contexts_refused(claim: Claim, limit: int) -> str:
    """What a search that could not keep a new context handle says to the model."""
    wait = _wait(claim.retry_after)
    later = f"wait {wait} s for an idle one to expire" if wait is not None else "wait for an idle one to expire"
    return (
        f"No context was kept for this search: you hold {claim.open} context handles, at most {limit} "
        f'({_CONTEXTS_FLAG}). Pass one you hold as "context" to continue it, or {later}; '
        "this search's results above are complete."
    )


async def too_many(send: Send, message: str, retry_after: int) -> None:
    """Answer 429 with Retry-After and a JSON-RPC error (the request body is not read)."""
    from .guard import jsonrpc_error_response

    await jsonrpc_error_response(send, 429, _TOO_MANY, message, [("retry-after", str(retry_after))])


@dataclass(slots=True)
class StoreCaps:
    """A cap of `limit` `kind` sessions per owner, counted by `limits` (in the session store).

    `offload`: the limits make network round trips (Redis), so the async calls run on a worker
    thread, off the event loop.
    """

    limits: CallerLimits
    kind: str
    limit: int
    offload: bool = False
    keep_every: float | None = None
    _kept: dict[str, float] = field(default_factory=dict)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args) if self.offload else fn(*args)

    def claim_now(self, owner: str, session_id: str) -> Claim:
        return self.limits.claim(self.kind, owner, session_id, self.limit)

    async def claim(self, owner: str, session_id: str) -> Claim:
        return await self._run(self.claim_now, owner, session_id)

    async def touch(self, owner: str, session_id: str) -> bool:
        return await self._run(self.limits.touch, self.kind, owner, session_id)

    async def release(self, owner: str, session_id: str) -> None:
        await self._run(self.limits.release, self.kind, owner, session_id)

    def keep(self, owner: str, session_id: str) -> None:
        """A counted session was used: keep its owner's count alive (a store call at most every
        `keep_every` seconds per owner, so that its count outlives the sessions it counts)."""
        if self.keep_every is None:
            return
        now = time.monotonic()
        if now - self._kept.get(owner, -math.inf) < self.keep_every:
            return
        if len(self._kept) > 10_000:
            self._kept.clear()
        self._kept[owner] = now
        self.limits.touch(self.kind, owner, session_id)


@dataclass(slots=True)
class _Open:
    last: float
    in_flight: int = 0


class ConnectionCaps:
    """ASGI middleware in front of the SDK's stateful manager: at most `limit` open sessions per owner.

    Only handshake-era requests are looked at (a 2026-07-28 request opens no session). A POST
    without a session id would open one: refused with 429 when its owner holds `limit` already
    (sessions being opened count too, so concurrent openings cannot overshoot). `live(session_id)`
    says whether the SDK's manager still holds a session; without it a session answered 404 counts
    until its idle timeout, as one the SDK might still serve.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        path: str = "/mcp",
        idle_timeout: float | None = None,
        live: Callable[[str], bool] | None = None,
    ) -> None:
        if limit < 1:
            raise InvalidArgumentError(f"limit must be at least 1, got {limit!r}")
        self.app = app
        self.limit = limit
        self.path = path.rstrip("/")
        self.idle_timeout = idle_timeout
        self.live = live
        self._open: dict[str, dict[str, _Open]] = {}
        self._opening: dict[str, int] = {}

    def held(self, owner: str, now: float | None = None) -> dict[str, _Open]:
        """The owner's live sessions (those the SDK no longer holds, or has ended idle past its timeout, are
        dropped)."""
        now = time.monotonic() if now is None else now
        held = self._open.get(owner, {})
        for sid in [s for s, o in held.items() if not o.in_flight and self._ended(s, o, now)]:
            del held[sid]
        if not held:
            self._open.pop(owner, None)
        return held

    def _ended(self, session_id: str, entry: _Open, now: float) -> bool:
        if self.live is not None and not self.live(session_id):
            return True
        return self.idle_timeout is not None and now - entry.last > self.idle_timeout

    def _claim(self, owner: str) -> Claim:
        now = time.monotonic()
        held = self.held(owner, now)
        count = len(held) + self._opening.get(owner, 0)
        if count < self.limit:
            return Claim(True, count + 1)
        timeout = self.idle_timeout
        idle = [] if timeout is None else [timeout - (now - o.last) for o in held.values() if not o.in_flight]
        soonest = min(idle) if idle else None
        return Claim(False, count, soonest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from .caller import is_modern_scope as _is_modern

        if scope.get("type") != "http" or scope.get("path", "").rstrip("/") != self.path or _is_modern(scope):
            await self.app(scope, receive, send)
            return
        owner = owner_of(scope)
        method = scope.get("method", "GET")
        sid = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == _SESSION_HEADER), None)
        if sid is None:
            if method != "POST":
                await self.app(scope, receive, send)
                return
            await self._opening_request(owner, scope, receive, send)
            return
        entry = self._open.get(owner, {}).get(sid)
        if entry is not None:
            entry.in_flight += 1
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if entry is not None:
                entry.in_flight -= 1
                entry.last = time.monotonic()
            # A 404 is also the SDK's answer to this caller's session presented with another of its credentials
            # (another client id): the session goes on, so it ends here only when the SDK holds it no more.
            gone = status and status[0] == 404 and self.live is not None and not self.live(sid)
            ended = gone or (status and method == "DELETE" and status[0] < 300)
            if ended:
                self._open.get(owner, {}).pop(sid, None)
            elif entry is None and status and status[0] < 400:  # served for this owner: it is theirs, count it
                self._open.setdefault(owner, {})[sid] = _Open(time.monotonic())

    async def _opening_request(self, owner: str, scope: Scope, receive: Receive, send: Send) -> None:
        claim = self._claim(owner)
        if not claim.granted:
            message, retry = sessions_refused(claim, self.limit, owner)
            await too_many(send, message, retry)
            return
        self._opening[owner] = self._opening.get(owner, 0) + 1
        opened: list[_Open] = []
        pending = [True]  # counted as opening until its response starts (or it fails without one)

        def done_opening() -> None:
            if pending:
                pending.clear()
                self._release_opening(owner)

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and pending:
                issued = next((v for k, v in message.get("headers", []) if k.lower() == _SESSION_HEADER), None)
                if issued is not None and message["status"] < 400:
                    entry = _Open(time.monotonic(), in_flight=1)
                    self._open.setdefault(owner, {})[issued.decode("latin-1")] = entry
                    opened.append(entry)
                done_opening()
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            done_opening()
            if opened:
                opened[0].in_flight -= 1
                opened[0].last = time.monotonic()

    def _release_opening(self, owner: str) -> None:
        left = self._opening.get(owner, 0) - 1
        if left > 0:
            self._opening[owner] = left
        else:
            self._opening.pop(owner, None)


@dataclass(frozen=True, slots=True)
class CallerCaps:
    """What a gateway bounds per caller, as its settings and stores make it.

    - `shared`: the limits every worker shares (a Redis store), for the request rate and the
      refused-token budget; None: those stay in each process.
    - `sessions`: the cap on store-named (gateway-issued) sessions; `per_connection`: the cap on the
      SDK's per-connection sessions (0: none); `contexts`: the cap on context handles.
    """

    shared: CallerLimits | None = None
    sessions: StoreCaps | None = None
    contexts: StoreCaps | None = None
    per_connection: int = 0


def caller_caps(settings: AuthSettings, sessions_store: object, context_store: object) -> CallerCaps:
    """The caps of `settings` over the gateway's session store and context store."""
    limits = limits_for(sessions_store)
    shared = isinstance(limits, RedisLimits)
    context_limits = limits if context_store is sessions_store else limits_for(context_store)
    # With authentication every caller has an identity; without, every caller is a client address.
    sessions = settings.sessions_per_caller if settings.enabled else settings.address_sessions
    contexts = settings.contexts_per_caller
    return CallerCaps(
        shared=limits if shared else None,
        sessions=StoreCaps(limits, "sessions", sessions, offload=shared) if sessions else None,
        # called off the event loop; an idle handle ends by the store's TTL, so its owner's count is kept alive
        contexts=StoreCaps(context_limits, "contexts", contexts, keep_every=_quarter(context_store))
        if contexts
        else None,
        per_connection=sessions,
    )


def _quarter(store: object) -> float | None:
    ttl = getattr(store, "ttl_seconds", None)
    return None if ttl is None else ttl / 4
