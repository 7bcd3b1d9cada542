"""The gateway while its catalog store fails: HTTP 503 with Retry-After, never a list from a catalog it could not read.

The handlers raise one JSON-RPC error for it (`CATALOG_UNAVAILABLE`, toolsearch.mcp.errors): before serving a
request that needs the catalog while the store is known to be failing (`catalog_outage`), and when the store fails
while a request is served (a search that could not read it). On stdio that error is the answer; its
`data.retryAfter` says when to retry. Over HTTP the MCP SDK would send it with status 200, inside an SSE stream
for a handshake-era request; `CatalogOutage`, ASGI middleware around the SDK's app, answers such a request with
503, a Retry-After header and the same JSON-RPC error as the body (the gateway's other 503s are written by the
same `jsonrpc_error_response`), so load balancers, proxies and clients see the outage for what it is.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import CatalogStoreError
from .errors import CATALOG_UNAVAILABLE, RETRY_AFTER_SECONDS
from .guard import jsonrpc_error_response

__all__ = ["CatalogOutage", "catalog_outage"]

_CODE = str(CATALOG_UNAVAILABLE).encode()


def catalog_outage(index: object) -> CatalogStoreError | None:
    """The failure of `index`'s catalog store while it stands (an index kept in a store says, by `outage()`), else
    None: an index in local files has no store to fail."""
    outage = getattr(index, "outage", None)
    return outage() if callable(outage) else None  # type: ignore[no-any-return]


def _catalog_error(start: Message, body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response in the first body chunk of an SDK answer when it is CATALOG_UNAVAILABLE's error."""
    if _CODE not in body:  # nearly every answer: no parsing
        return None
    content_type = next((v for k, v in start.get("headers", []) if k.lower() == b"content-type"), b"")
    if content_type.startswith(b"text/event-stream"):  # one SSE event: its `data:` lines are the message
        lines = body.decode("utf-8", "replace").splitlines()
        text = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
    else:
        text = body.decode("utf-8", "replace")
    try:
        message = json.loads(text)
    except ValueError:
        return None
    error = message.get("error") if isinstance(message, dict) else None
    if isinstance(error, dict) and error.get("code") == CATALOG_UNAVAILABLE:
        return dict(message)
    return None


class CatalogOutage:
    """Turns the SDK's answer to a request refused for a failing catalog store into 503 with Retry-After.

    Only POSTs to the MCP path are looked at. Their response start is held until the first body chunk, which
    either is the catalog error (the request's whole answer: nothing ran before it, so nothing was streamed) and
    is replaced, or is anything else and goes out unchanged, the response with it.
    """

    def __init__(self, app: ASGIApp, *, path: str = "/mcp") -> None:
        self.app = app
        self.path = path.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path", "").rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        state = {"passing": False, "replaced": False}

        async def answer(message: Message) -> None:
            if state["passing"]:
                await send(message)
                return
            if state["replaced"]:  # the rest of the SDK's answer (an SSE stream's end) is dropped
                return
            if message["type"] == "http.response.start":
                held.append(message)
                return
            if message["type"] == "http.response.body" and held:
                refused = _catalog_error(held[0], message.get("body", b""))
                if refused is not None:
                    state["replaced"] = True
                    error = refused["error"]
                    await jsonrpc_error_response(
                        send, 503, CATALOG_UNAVAILABLE, str(error.get("message", "")),
                        [("retry-after", str(RETRY_AFTER_SECONDS))],
                        request_id=refused.get("id"), data=error.get("data"),
                    )  # fmt: skip
                    return
            state["passing"] = True
            for start in held:
                await send(start)
            await send(message)

        await self.app(scope, receive, answer)
