"""Who a gateway request is served for: the caller, as authentication established it, and its policy hook."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..catalog import Catalog

__all__ = ["ANONYMOUS", "CALLER_SCOPE_KEY", "LOCAL", "Caller", "CallerPolicy", "caller_of_scope"]

CALLER_SCOPE_KEY = "toolsearch.caller"
"""The ASGI scope key under which the HTTP authentication layer leaves the request's `Caller`.

The scope travels with the request into both protocol eras (the handshake era's session task sees
it through `ctx.request.scope`), where a context variable set in middleware would not.
"""


@dataclass(frozen=True, slots=True)
class Caller:
    """The principal a request is served for.

    `key` names the principal stably without holding a credential: session store keys, context
    handles and usage-log entries are bound to it, so one caller can never name another's state.
    `subject` is what logs show; `scopes` and `claims` are what a policy decides on.
    """

    key: str
    subject: str
    scopes: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict)
    authenticated: bool = False

    @classmethod
    def authenticated_as(
        cls,
        kind: str,
        subject: str,
        *,
        scopes: frozenset[str] | set[str] | tuple[str, ...] = frozenset(),
        claims: Mapping[str, Any] | None = None,
    ) -> Caller:
        """A caller proven by a credential of `kind` (e.g. the token issuer, or "static")."""
        digest = hashlib.sha256(f"{kind}\0{subject}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return cls(
            key=f"c-{digest}", subject=subject, scopes=frozenset(scopes), claims=dict(claims or {}), authenticated=True
        )


LOCAL = Caller(key="local", subject="local")
"""stdio: the user who started the gateway process."""

ANONYMOUS = Caller(key="anonymous", subject="anonymous")
"""HTTP without authentication (loopback, or an explicit --no-auth)."""


def caller_of_scope(scope: Mapping[str, Any] | None) -> Caller | None:
    """The caller the authentication layer recorded in an ASGI scope, or None."""
    if scope is None:
        return None
    caller = scope.get(CALLER_SCOPE_KEY)
    return caller if isinstance(caller, Caller) else None


class CallerPolicy(Protocol):
    """Which tools a caller may list, search and call (the spec lets tool lists vary by authorization)."""

    def allowed(self, caller: Caller, catalog: Catalog) -> frozenset[str] | None:
        """The tool names `caller` may use in `catalog`; None means every tool."""
        ...
