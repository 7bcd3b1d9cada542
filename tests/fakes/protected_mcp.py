"""A small MCP server over streamable HTTP behind `toolsearch.mcp.auth.protect`, for the security tests.

    python -m tests.fakes.protected_mcp --host 127.0.0.2 --port 0 --auth-issuer URL --auth-scope tools

It takes the gateway's authentication flags (`add_auth_arguments`), refuses an unsafe exposure
as the gateway does (`check_exposure`), serves under uvicorn with the header-read timeout, and
prints `listening on URL` once bound. Its tools: `echo(text)` and `whoami()`, which returns the
caller the authentication layer recorded (subject, key, scopes) as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

from toolsearch._errors import AuthConfigError
from toolsearch.mcp.auth import AuthSettings, add_auth_arguments, check_exposure, default_resource_url, protect
from toolsearch.mcp.caller import caller_of_scope


def build_server() -> MCPServer:
    server = MCPServer("protected")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def whoami(ctx: Context) -> str:
        """The caller this request is served for."""
        request = ctx.request_context.request
        caller = caller_of_scope(getattr(request, "scope", None))
        if caller is None:
            return json.dumps(None)
        return json.dumps({"subject": caller.subject, "key": caller.key, "scopes": sorted(caller.scopes)})

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="protected_mcp")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", default="/mcp")
    add_auth_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = AuthSettings.from_args(args)
        check_exposure(args.host, settings)
    except AuthConfigError as exc:
        parser.exit(2, f"protected_mcp: error: {exc}\n")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)  # connections made before uvicorn starts wait in the backlog instead of being refused
    port = sock.getsockname()[1]
    resource = settings.resource_url or default_resource_url(args.host, port, args.path)
    app = build_server().streamable_http_app(streamable_http_path=args.path, host="0.0.0.0")
    config = uvicorn.Config(
        protect(app, settings, path=args.path, resource_url=resource),
        log_level="warning",
        lifespan="on",
        **settings.server_options(),  # the gateway's own timeouts and proxy rule
    )
    print(f"listening on {default_resource_url(args.host, port, args.path)}", flush=True)
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])


@dataclass
class Served:
    """A running protected server process: its URL and what it wrote to stderr so far."""

    url: str
    process: subprocess.Popen[str]
    _stderr: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def logged(self, text: str, timeout: float = 10.0) -> bool:
        """Whether `text` reaches stderr within `timeout` s: stderr is read by its own thread, so a line the
        server wrote before it answered (or before it printed its URL) can arrive here after the answer."""
        from mcp_servers import wait_until  # the tests' one wait (this module also runs as the server)

        return wait_until(lambda: text in self.stderr, timeout)


def run_protected(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run the server expecting it to refuse to start (it exits with its error on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "tests.fakes.protected_mcp", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ},
    )


@contextlib.contextmanager
def serve_protected(*args: str, timeout: float = 30.0) -> Iterator[Served]:
    """Start the server with `args` (the gateway's flags) and yield it once it listens; stop it after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.protected_mcp", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert process.stdout is not None and process.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    first = ""
    try:
        # the one stdout line; a process that exits first has written why on stderr
        first = process.stdout.readline()
        if not first.startswith("listening on ") or time.monotonic() > deadline:
            process.wait(timeout=5)
            reader.join(timeout=5)
            raise RuntimeError(f"protected_mcp did not start: {first!r} {''.join(lines)}")
        yield Served(first.removeprefix("listening on ").strip(), process, lines)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
