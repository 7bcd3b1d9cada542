"""A stdio gateway starts without loading what only a search needs, and its searches run on numpy.

A client (the MCP Inspector's CLI, for one) starts a stdio gateway for each call, so what the gateway
loads at start is paid per call: it used to build onnxruntime's int8 query graph before answering
`initialize` (about 1 s of CPU, more than the rest of its start-up work but the imports). Here a
real `toolsearch mcp serve` over stdio, on the hybrid backend, is asked as a client would; which
native libraries it has loaded is read from /proc/<pid>/maps (no timing is asserted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import gateway_env, toy, write_config

pytestmark = pytest.mark.slow


class Stdio:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.next_id = 0

    def ask(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            request["params"] = params
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            answer = json.loads(line)
            if answer.get("id") == self.next_id:
                return dict(answer)
        raise AssertionError("the gateway exited: " + (self.proc.stderr.read() if self.proc.stderr else ""))

    def tell(self, method: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def loaded(self, library: str) -> bool:
        return library in Path(f"/proc/{self.proc.pid}/maps").read_text()


@contextmanager
def stdio_gateway(folder: Path, env: dict[str, str]) -> Iterator[Stdio]:
    config = write_config(folder / "servers.json", {"toy": toy()})
    argv = [sys.executable, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--quiet"]
    argv += ["--backend", "hybrid"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        gateway = Stdio(proc)
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        assert "result" in gateway.ask("initialize", hello)
        gateway.tell("notifications/initialized")
        yield gateway
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def search(gateway: Stdio) -> str:
    found = gateway.ask("tools/call", {"name": "tool_search", "arguments": {"query": "echo text back"}})
    return json.dumps(found["result"])


def test_a_stdio_gateway_answers_without_onnxruntime_and_searches_on_numpy(tmp_path: Path) -> None:
    env = {k: v for k, v in gateway_env().items() if k != "TOOLSEARCH_EMBED_RUNTIME"}
    with stdio_gateway(tmp_path, env) as gateway:
        listed = gateway.ask("tools/list")
        assert "tool_search" in json.dumps(listed)
        assert not gateway.loaded("onnxruntime")  # before: its query graph was built before initialize answered
        assert "toy__echo" in search(gateway)
        assert not gateway.loaded("onnxruntime")  # a search or a few: numpy answers at once


def test_the_query_runtime_a_user_sets_is_kept(tmp_path: Path) -> None:
    env = {**gateway_env(), "TOOLSEARCH_EMBED_RUNTIME": "int8"}
    with stdio_gateway(tmp_path, env) as gateway:
        assert not gateway.loaded("onnxruntime")
        assert "toy__echo" in search(gateway)
        assert gateway.loaded("onnxruntime")
    assert os.environ.get("TOOLSEARCH_EMBED_RUNTIME") != "numpy"  # nothing set in this process either
