"""Learning replay benchmark: `python benchmarks/learning.py --help` (same as `toolsearch bench learning`)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import learning

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="benchmarks/learning.py", description=learning.__doc__)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    learning.add_arguments(parser)
    sys.exit(learning.main(parser.parse_args()))
