"""`toolsearch mcp serve`: the command-line face of the gateway (wired in by toolsearch.cli)."""

from __future__ import annotations

import argparse

from .gateway import add_mcp_arguments, serve
from .workers import add_worker_arguments, check_worker_arguments, run_workers, settings_from_args

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_mcp_arguments(parser)
    add_worker_arguments(parser)


def main(args: argparse.Namespace) -> int:
    check_worker_arguments(args)
    if args.workers > 1:
        parser = argparse.ArgumentParser()
        add_arguments(parser)  # the workers get every option this command has
        return run_workers(parser, args)
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
        workers=settings_from_args(args),
    )
    return 0
