"""`python -m toolsearch.mcp --config servers.json`: `toolsearch mcp serve`, for environments without the script."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    # The one command line: the same flags, checks, messages and exit codes (2: a usage error) as the script's.
    from ..cli import main as toolsearch

    return toolsearch(["mcp", "serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
