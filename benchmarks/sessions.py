"""Session benchmark entry point: `python benchmarks/sessions.py --help` (session creation and concurrent search)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import sessions

if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="benchmarks/sessions.py",
        description=sessions.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    sessions.add_arguments(parser)
    sys.exit(sessions.main(parser.parse_args()))
