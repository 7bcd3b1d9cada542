"""Frameworks benchmark entry point: `python benchmarks/frameworks.py --help` (LangChain, Pydantic AI and
Agents SDK built-in tool selection vs toolsearch's plug-ins: retrieval quality and input tokens per task)."""

from __future__ import annotations

import argparse
import sys

from toolsearch.bench import frameworks

if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="benchmarks/frameworks.py",
        description=frameworks.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    frameworks.add_arguments(parser)
    sys.exit(frameworks.main(parser.parse_args()))
