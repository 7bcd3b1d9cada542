"""Token-savings benchmark entry point: `python benchmarks/tokens.py --help` (same as `toolsearch bench tokens`)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import tokens

if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="benchmarks/tokens.py", description=tokens.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    tokens.add_arguments(parser)
    sys.exit(tokens.main(parser.parse_args()))
