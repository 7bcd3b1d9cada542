"""`python -m toolsearch.mcp --config servers.json`: the gateway without the full CLI."""

from __future__ import annotations

import argparse
import sys

from .._errors import ToolSearchError
from .gateway import add_mcp_arguments, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolsearch.mcp", description="Serve the tool-search MCP gateway.")
    add_mcp_arguments(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    args = parser.parse_args(argv)
    try:
        serve(
            args.config,
            transport=args.transport,
            host=args.host,
            port=args.port,
            path=args.path,
            backend=args.backend,
            pinned=args.pin,
            max_discovered=args.max_discovered,
            call_tool=not args.no_call_tool,
            quiet=args.quiet,
        )
    except ToolSearchError as exc:
        print(f"toolsearch: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
