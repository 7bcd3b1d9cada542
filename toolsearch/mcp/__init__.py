"""MCP: index tools from MCP servers, and serve a tool-search gateway in front of them.

Needs the `mcp` extra (`pip install 'toolsearch[mcp]'`); nothing here is imported by `import toolsearch`.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import MCPConfig, ServerConfig, load_config, parse_config
from .config import MCPConfigError as MCPConfigError  # defined in the error tree; importable here as before

__all__ = [
    # config
    "MCPConfig",
    "ServerConfig",
    "load_config",
    "parse_config",
    # tool source
    "MCPToolSource",
    "UpstreamServer",
    "CollectedTools",
    "collect_tools",
    "namespaced_name",
    "SEPARATOR",
    # gateway
    "Gateway",
    "GatewaySettings",
    "GatewayOptions",
    "WorkerSettings",
    "serve",
    "aserve",
    "add_mcp_arguments",
]

_LAZY = {
    "MCPToolSource": "source",
    "UpstreamServer": "source",
    "UpstreamError": "source",
    "CollectedTools": "source",
    "collect_tools": "source",
    "namespaced_name": "source",
    "SEPARATOR": "source",
    "Gateway": "gateway",
    "GatewaySettings": "settings",
    "WorkerSettings": "settings",
    "GatewayOptions": "options",
    "serve": "startup",
    "aserve": "startup",
    "add_mcp_arguments": "options",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolsearch.mcp' has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f".{module}", __name__), name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "mcp_types"):
            from .._errors import missing_dependency

            raise missing_dependency("mcp", "mcp") from None
        raise
