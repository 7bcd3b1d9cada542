"""The one translation from toolsearch's errors to what an MCP client is sent: a tool error or a protocol error."""

from __future__ import annotations

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from .._errors import CatalogStoreError, SessionStoreError, ToolSearchError, joined_sentences
from ..pg._connect import OUTAGE_HOLD_SECONDS
from .source import error_result

__all__ = ["CATALOG_UNAVAILABLE", "GATEWAY", "RETRY_AFTER_SECONDS", "mcp_error", "tool_error", "protocol_error"]

GATEWAY = "toolsearch gateway"

# JSON-RPC's implementation-defined server-error range, beside the rate limit's -32029 (toolsearch.mcp.guard): the
# catalog store failed, nothing was served. Over HTTP the answer is 503 with Retry-After (toolsearch.mcp.outage);
# on stdio the error itself says when to retry (`data.retryAfter`, seconds).
CATALOG_UNAVAILABLE = -32030
RETRY_AFTER_SECONDS = OUTAGE_HOLD_SECONDS  # how long a store failure stands without news (toolsearch.pg._connect)


def mcp_error(exc: BaseException, what: str = GATEWAY) -> types.ErrorData:
    """The JSON-RPC code and message for `exc`, raised while serving `what` (a tool name or the gateway).

    The message is ours, which already says what to do; a store failure adds that nothing changed, so a
    client may retry. A catalog store that failed (CatalogStoreError with `outage`) is CATALOG_UNAVAILABLE with when
    to retry: never an answer from a catalog the gateway could not read; one that refused a statement is an internal
    error, whose message says that retrying will not help. Bad input (the tree's ValueError / TypeError kinds)
    is the caller's to fix: invalid params; everything else is the server's: internal error.
    """
    if isinstance(exc, CatalogStoreError) and exc.outage:
        message = joined_sentences(f"{what}: {exc}", f"Nothing was served; retry in {RETRY_AFTER_SECONDS} s.")
        return types.ErrorData(code=CATALOG_UNAVAILABLE, message=message, data={"retryAfter": RETRY_AFTER_SECONDS})
    if isinstance(exc, SessionStoreError):
        message = joined_sentences(
            f"{what}: {exc}", "This request changed nothing; retry once the session store answers."
        )
        return types.ErrorData(code=INTERNAL_ERROR, message=message)
    caller_fixes = isinstance(exc, ToolSearchError) and isinstance(exc, (ValueError, TypeError))
    return types.ErrorData(code=INVALID_PARAMS if caller_fixes else INTERNAL_ERROR, message=f"{what}: {exc}")


def tool_error(exc: BaseException, what: str = GATEWAY) -> types.CallToolResult:
    """`exc` as a tool result the model reads (`isError`): the form for anything a tools/call hit."""
    return error_result(mcp_error(exc, what).message)


def protocol_error(exc: BaseException, what: str = GATEWAY) -> MCPError:
    """`exc` as a JSON-RPC error to raise from a handler: the form for a request that could not be served."""
    error = mcp_error(exc, what)
    return MCPError.from_error_data(error)
