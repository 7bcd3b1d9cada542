"""Speed and scale benchmark entry point: `python benchmarks/scale.py --help` (same as `toolsearch bench scale`)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import scale

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="benchmarks/scale.py", description=scale.__doc__)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    scale.add_arguments(parser)
    sys.exit(scale.main(parser.parse_args()))
