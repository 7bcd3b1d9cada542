"""A local OAuth issuer for tests: signing keys made at start, its metadata and JWK set served on loopback.

    with LocalIssuer() as issuer:
        token = issuer.mint("alice", scopes=["tools"], audience="http://127.0.0.2:8000/mcp")

The server is a real HTTP server in a thread (RFC 8414 metadata at
`/.well-known/oauth-authorization-server`, the JWK set at `/jwks.json`); `jwks_requests` counts how
often the key set was read. `mint` signs with the published key unless told otherwise, so tests can
build every kind of bad token: expired, another audience or issuer, missing scopes, an unpublished
key, `alg: none`, or an HMAC token keyed with the public key.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["LocalIssuer"]


class LocalIssuer:
    """An issuer at `url` with one published EC P-256 key (`kid`) and one unpublished key (`rogue_key`)."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.rogue_key = ec.generate_private_key(ec.SECP256R1())
        self.kid = uuid.uuid4().hex[:12]
        self.jwks_requests = 0
        self.metadata_requests = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/oauth-authorization-server":
                    issuer.metadata_requests += 1
                    body = {
                        "issuer": issuer.url,
                        "jwks_uri": f"{issuer.url}/jwks.json",
                        "token_endpoint": f"{issuer.url}/token",
                    }
                elif self.path == "/jwks.json":
                    issuer.jwks_requests += 1
                    body = issuer.jwks()
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "ES256"}]}

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def mint(
        self,
        subject: str,
        *,
        scopes: Iterable[str] = ("tools",),
        audience: str | list[str],
        issuer: str | None = None,
        expires_in: float = 600,
        key: Any = None,
        kid: str | None = None,
        algorithm: str = "ES256",
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {
            "iss": self.url if issuer is None else issuer,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "exp": now + int(expires_in),
            "scope": " ".join(scopes),
            **claims,
        }
        signing = self.key if key is None else key
        return jwt.encode(payload, signing, algorithm=algorithm, headers={"kid": kid or self.kid})

    def mint_claims(self, claims: dict[str, Any]) -> str:
        """Sign exactly `claims` with the published key (to leave out a claim `mint` always sets)."""
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": self.kid})

    def __enter__(self) -> LocalIssuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
