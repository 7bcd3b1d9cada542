"""Gateway benchmark entry point: `python benchmarks/gateway.py --help` (concurrent MCP clients, workers, stores)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import gateway

if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="benchmarks/gateway.py",
        description=gateway.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    gateway.add_arguments(parser)
    sys.exit(gateway.main(parser.parse_args()))
