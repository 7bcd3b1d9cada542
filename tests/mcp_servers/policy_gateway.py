"""The real gateway with a tiny in-test caller policy, for per-caller tests.

    python tests/mcp_servers/policy_gateway.py CONFIG [--session-store URL]

An ASGI wrapper stands in for the authentication layer: it records the caller named by the
`x-test-caller` header in the request's scope (what an authenticated deployment's middleware
does with a verified token). The policy lets `alice` use the `toy` server and `bob` the `time`
server; anyone else gets nothing. The URL is printed to stderr as the gateway always does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from toolsearch.catalog import Catalog
from toolsearch.mcp.caller import CALLER_SCOPE_KEY, Caller
from toolsearch.mcp.settings import GatewaySettings, WorkerSettings
from toolsearch.mcp.startup import aserve, configure_logging

SERVERS = {"alice": "toy", "bob": "time"}


class ServerPolicy:
    def allowed(self, caller: Caller, catalog: Catalog) -> frozenset[str] | None:
        server = SERVERS.get(caller.subject)
        return frozenset(catalog.names_in([server])) if server in catalog.namespaces else frozenset()


class HeaderCaller:
    """Sets the scope's caller from `x-test-caller` (a stand-in for verified credentials)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            name = next((v.decode() for k, v in scope.get("headers", []) if k == b"x-test-caller"), None)
            if name:
                scope = {**scope, CALLER_SCOPE_KEY: Caller.authenticated_as("test", name)}
        await self.app(scope, receive, send)


def main() -> None:
    config = Path(sys.argv[1])
    store = sys.argv[sys.argv.index("--session-store") + 1] if "--session-store" in sys.argv else "memory"
    configure_logging(False)
    settings = GatewaySettings(
        transport="http", port=0, backend="bm25", policy=ServerPolicy(), workers=WorkerSettings(session_store=store)
    )

    def announce(url: str) -> None:
        print(f"toolsearch gateway listening on {url}", file=sys.stderr, flush=True)

    anyio.run(lambda: aserve(config, settings, announce=announce, middleware=[HeaderCaller]))


if __name__ == "__main__":
    main()
