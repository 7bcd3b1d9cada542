"""Retrieval benchmark entry point: `python benchmarks/retrieval.py --help` (same as `toolsearch bench retrieval`)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import retrieval

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="benchmarks/retrieval.py", description=retrieval.__doc__)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    retrieval.add_arguments(parser)
    sys.exit(retrieval.main(parser.parse_args()))
