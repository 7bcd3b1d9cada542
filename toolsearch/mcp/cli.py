"""`toolsearch mcp serve`: the command-line face of the gateway (wired in by toolsearch.cli)."""

from __future__ import annotations

import argparse

from .gateway import add_mcp_arguments, serve
from .options import GatewayOptions

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_mcp_arguments(parser)


def main(args: argparse.Namespace) -> int:
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
        quiet=bool(getattr(args, "quiet", False)),
        options=GatewayOptions.from_args(args),
    )
    return 0
