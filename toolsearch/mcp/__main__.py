"""`python -m toolsearch.mcp --config servers.json`: the gateway without the full CLI."""

from __future__ import annotations

import argparse
import sys

from .._errors import ToolSearchError
from . import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolsearch.mcp", description="Serve the tool-search MCP gateway.")
    cli.add_arguments(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    try:
        return cli.main(parser.parse_args(argv))
    except ToolSearchError as exc:
        print(f"toolsearch: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
