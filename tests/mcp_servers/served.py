"""A server as a child process: its stderr kept line by line, its URL read from its `listening on URL` line.

The gateway (`toolsearch mcp serve --transport http`) logs where it listens; the MCP tests' served gateways
(GatewayProcess) and the gateway benchmark's workers (benchmarks/gateway.py) both start it this way and wait for it.
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

__all__ = ["ServedProcess"]

_LISTENING = re.compile(r"listening on (\S+)")


class ServedProcess:
    """A child process whose stderr a thread collects; `url` is the first address it says it listens on."""

    def __init__(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdout: int | IO[Any] | None = None
    ) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        self.url: str | None = None
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            found = _LISTENING.search(line)
            if found and self.url is None:
                self.url = found.group(1)
                self._ready.set()
        self._ready.set()  # it exited without listening: a waiter learns at once, not at its timeout

    def wait_url(self, timeout: float) -> str | None:
        """The address once the process logs it; None when it exits first or `timeout` s pass."""
        self._ready.wait(timeout)
        return self.url

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> int:
        """Terminate (kill after 15 s) and wait; every line it wrote is in `lines` once this returns."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode
