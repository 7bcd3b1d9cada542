"""Helpers for the MCP tests: configs for real servers, a temp git repo, the gateway as a process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .served import ServedProcess

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOY = HERE / "toy_server.py"
PY = sys.executable


def toy(**env: str) -> dict[str, Any]:
    """A config entry for our toy server (see toy_server.py for the TOY_* switches)."""
    entry: dict[str, Any] = {"command": PY, "args": [str(TOY)]}
    if env:
        entry["env"] = env
    return entry


def time_server() -> dict[str, Any]:
    return {"command": PY, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def git_server() -> dict[str, Any]:
    return {"command": PY, "args": ["-m", "mcp_server_git"]}


def everything_command() -> str | None:
    """The npm reference server, when .ci/setup.d installed it (or it is on PATH) and node runs."""
    if shutil.which("node") is None:
        return None
    local = ROOT / ".cache" / "node" / "node_modules" / ".bin" / "mcp-server-everything"
    if local.exists():
        return str(local)
    return shutil.which("mcp-server-everything")


def make_git_repo(path: Path) -> Path:
    """A repository with one commit and one untracked file."""
    path.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "README.md"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "first"], check=True, env=env)
    (path / "notes.txt").write_text("untracked\n")
    return path


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}, indent=2))
    return path


def write_tokens(path: Path, tokens: dict[str, str], scopes: tuple[str, ...] = ("tools",)) -> Path:
    """A static token file (`--auth-tokens`) giving each subject of `tokens` ({subject: token}) `scopes`, mode 0600."""
    entries = [{"subject": who, "scopes": list(scopes), "token": token} for who, token in tokens.items()]
    path.write_text(json.dumps({"tokens": entries}))
    path.chmod(0o600)
    return path


def gateway_argv(config: Path, *extra: str) -> list[str]:
    return [PY, "-m", "toolsearch.mcp", "--config", str(config), *extra]


def gateway_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


class GatewayProcess(ServedProcess):
    """The gateway over streamable HTTP as a child process; stderr is collected for assertions."""

    def __init__(self, config: Path, *extra: str, argv: list[str] | None = None) -> None:
        super().__init__(argv or gateway_argv(config, "--transport", "http", "--port", "0", *extra), env=gateway_env())

    def wait_ready(self, timeout: float = 90) -> str:
        # Room for a loaded machine: a gateway that loads the embedding model and starts its upstream servers
        # took over 30 s beside other test runs; one that fails to start still ends the wait at once.
        url = self.wait_url(timeout)
        if url is None:
            raise RuntimeError("gateway did not start:\n" + self.stderr)
        return url

    def logged(self, text: str, timeout: float = 10.0) -> bool:
        """Whether `text` reaches stderr within `timeout` s: a line logged while serving a call can reach this
        process's reader after the call's answer does."""
        return wait_until(lambda: text in self.stderr, timeout)


@contextmanager
def http_gateway(config: Path, *extra: str, argv: list[str] | None = None) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(config, *extra, argv=argv)
    try:
        gateway.wait_ready()
        yield gateway
    finally:
        gateway.stop()


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@contextmanager
def http_server_process(
    argv: list[str], env: dict[str, str], what: str, *, kill: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A server script run as its own process that prints "listening on URL" on stderr: the process and its URL
    (stopped at the end, with SIGKILL where `kill`)."""
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
    url: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            found = re.search(r"listening on (\S+)", line)
            if found:
                url.append(found.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        ready.wait(60)
        assert url, f"the {what} did not start"
        yield proc, url[0]
    finally:
        proc.kill() if kill else proc.terminate()
        proc.wait(10)


@contextmanager
def toy_over_http(**env: str) -> Iterator[str]:
    """The toy server over streamable HTTP as its own process (TOY_* switches in `env`); its URL."""
    with http_server_process([PY, str(TOY)], {"TOY_HTTP_PORT": "0", **env}, "toy HTTP server") as (_, url):
        yield url
