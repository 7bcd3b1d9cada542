"""The requests an attacker would send a protected gateway, shared by the security tests and benchmarks/security.py.

Each `Attack` is one HTTP request to the MCP endpoint with forged or missing credentials, a foreign
`Origin` or `Host`, and the status it must get; the body is a real `initialize` request that a
legitimate caller would have answered with 200. `send` returns the status actually received.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2
import jwt

from .oauth_issuer import LocalIssuer

__all__ = ["INITIALIZE", "Attack", "all_statuses", "origin_attacks", "send", "slow_headers", "token_attacks"]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "attacker", "version": "1"}},
}
MCP_HEADERS = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")]


@dataclass(frozen=True)
class Attack:
    kind: str
    name: str
    headers: tuple[tuple[str, str], ...]
    expected: int | tuple[int, ...]  # the refusal, or each refusal that may answer it (see `answered`)
    method: str = "POST"

    def answered(self, status: int) -> bool:
        """Whether `status` is the refusal this attack should get."""
        return status in (self.expected if isinstance(self.expected, tuple) else (self.expected,))

    def shown(self, status: int) -> int | tuple[int, ...]:
        """`expected` when `status` is one of its refusals, else `status`: dicts of these compare whole runs."""
        return self.expected if self.answered(status) else status


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def token_attacks(issuer: LocalIssuer, audience: str, static_token: str, static_unscoped: str) -> list[Attack]:
    """Forged, stolen-for-elsewhere, expired or under-scoped credentials: 401, or 403 for missing scopes."""
    good = issuer.mint("mallory", audience=audience)
    header, _payload, signature = good.split(".")
    claims = jwt.decode(good, options={"verify_signature": False})
    now = int(time.time())
    no_exp = {k: v for k, v in claims.items() if k != "exp"}
    no_sub = {k: v for k, v in claims.items() if k != "sub"}
    unsigned = _b64({"alg": "none", "typ": "JWT", "kid": issuer.kid}) + "." + _b64(claims) + "."
    confused = _hs256_with(issuer, claims)
    token = [
        ("no Authorization header", (), 401),
        ("bearer scheme without a token", (("authorization", "Bearer"),), 401),
        ("Basic scheme", (("authorization", "Basic " + base64.b64encode(b"admin:admin").decode()),), 401),
        ("two Authorization headers", (*_bearer(good), *_bearer(good)), 401),
        ("garbage token", _bearer("not-a-token"), 401),
        ("unknown static token", _bearer("x" * 43), 401),
        (
            "static token, last character changed",
            _bearer(static_token[:-1] + ("A" if static_token[-1] != "A" else "B")),
            401,
        ),
        ("expired JWT", _bearer(issuer.mint("mallory", audience=audience, expires_in=-3600)), 401),
        ("JWT for another resource", _bearer(issuer.mint("mallory", audience="https://other.example/mcp")), 401),
        (
            "JWT audience list without this resource",
            _bearer(issuer.mint("mallory", audience=["https://a.example", "https://b.example"])),
            401,
        ),
        (
            "JWT from another issuer",
            _bearer(issuer.mint("mallory", audience=audience, issuer="https://evil.example")),
            401,
        ),
        (
            "JWT signed by an unpublished key under the issuer's key id",
            _bearer(issuer.mint("mallory", audience=audience, key=issuer.rogue_key)),
            401,
        ),
        (
            # A key id no cached key set holds: 401 once the issuer's keys were re-read for it, 503 with Retry-After
            # while a re-read is not due yet (at most one per 30 s), since it may be a new key the issuer rotated to.
            "JWT signed by an unpublished key, unknown key id",
            _bearer(issuer.mint("mallory", audience=audience, key=issuer.rogue_key, kid="rogue")),
            (401, 503),
        ),
        ("alg none", _bearer(unsigned), 401),
        ("HS256 keyed with the issuer's public key", _bearer(confused), 401),
        ("payload swapped, signature kept", _bearer(f"{header}.{_b64({**claims, 'sub': 'admin'})}.{signature}"), 401),
        ("JWT without exp", _bearer(issuer.mint_claims(no_exp)), 401),
        ("JWT without sub", _bearer(issuer.mint_claims(no_sub)), 401),
        ("JWT not valid for another hour", _bearer(issuer.mint("mallory", audience=audience, nbf=now + 3600)), 401),
        ("token in the query string", (), 401),
        ("JWT without the required scope", _bearer(issuer.mint("mallory", audience=audience, scopes=["read"])), 403),
        ("JWT with no scope at all", _bearer(issuer.mint("mallory", audience=audience, scopes=[])), 403),
        ("static token without the required scope", _bearer(static_unscoped), 403),
    ]
    return [Attack("token", name, headers, expected) for name, headers, expected in token]


def _hs256_with(issuer: LocalIssuer, claims: dict[str, object]) -> str:
    """An HMAC token keyed with the public key's PEM: the classic algorithm-confusion forgery."""
    import hashlib
    import hmac

    head = _b64({"alg": "HS256", "typ": "JWT", "kid": issuer.kid})
    body = _b64(claims)
    mac = hmac.new(issuer.public_pem(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def origin_attacks(token: str, url: str) -> list[Attack]:
    """A valid token sent from a foreign browser origin or to a foreign Host name: 403 / 421, every method."""
    parts = urlsplit(url)
    near = f"http://{parts.hostname}:{(parts.port or 80) + 1}"
    cases: list[tuple[str, tuple[tuple[str, str], ...], int, str]] = []
    for method in ("POST", "GET", "DELETE"):
        cases.append((f"foreign Origin, {method}", (("origin", "http://evil.example"),), 403, method))
    cases += [
        ("Origin null (sandboxed page)", (("origin", "null"),), 403, "POST"),
        ("same host, another port", (("origin", near),), 403, "POST"),
        (
            "two Origin headers, the first allowed",
            (("origin", f"{parts.scheme}://{parts.netloc}"), ("origin", "http://evil.example")),
            403,
            "POST",
        ),
        ("foreign Host (DNS rebinding)", (("host", "evil.example"),), 421, "POST"),
        ("foreign Host with the right port", (("host", f"evil.example:{parts.port}"),), 421, "DELETE"),
    ]
    return [
        Attack("origin", name, (*_bearer(token), *headers), expected, method)
        for name, headers, expected, method in cases
    ]


def send(url: str, attack: Attack, *, session_id: str | None = None) -> httpx2.Response:
    """Send one attack; the token-in-query case puts a valid-looking token where tokens must never go."""
    headers = [*MCP_HEADERS, *attack.headers]
    if session_id:
        headers.append(("mcp-session-id", session_id))
    target = url + "?access_token=x" if attack.name == "token in the query string" else url
    body = json.dumps(INITIALIZE).encode() if attack.method == "POST" else None
    with httpx2.Client(timeout=10) as client:
        return client.request(attack.method, target, headers=headers, content=body)


def slow_headers(url: str, connections: int, *, wait: float) -> tuple[int, int]:
    """Open `connections` sockets that send half a request and stall; after `wait` s, (closed, still open)."""
    parts = urlsplit(url)
    sockets: list[socket.socket] = []
    for i in range(connections):
        sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=5)
        if i % 2:  # half send a partial request, half nothing at all
            sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nX-Slow: ".encode())
        sockets.append(sock)
    time.sleep(wait)
    closed = 0
    for sock in sockets:
        sock.settimeout(0.5)
        try:
            closed += sock.recv(1024) == b""
        except (TimeoutError, OSError):
            pass
        finally:
            sock.close()
    return closed, connections - closed


def all_statuses(url: str, attacks: Sequence[Attack]) -> list[tuple[Attack, int]]:
    return [(attack, send(url, attack).status_code) for attack in attacks]
