"""Stateless gateway workers: real `toolsearch mcp serve` processes over one real redis-server, real MCP clients.

Requests reach the workers through a client-side load balancer: an httpx transport that sends each
request to the worker a test picks (or to the next one in turn). It only routes; every request is
served by a real gateway process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_servers import (
    PY,
    GatewayProcess,
    gateway_argv,
    gateway_env,
    toy,
    toy_over_http,
    wait_until,
    write_config,
)
from plugin_site import DEMO, demo_entry_points, write_distribution
from redis_server import RedisServer

from toolsearch.index_store import IndexStore

pytestmark = pytest.mark.slow


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def port_of(url: str) -> int:
    found = re.search(r":(\d+)/", url)
    assert found, url
    return int(found.group(1))


# --- the load balancer and the client ---------------------------------------------------------------


class Balancer(httpx2.AsyncBaseTransport):
    """Sends each request to `ports[target]`, or to the next port in turn when `target` is None."""

    def __init__(self, ports: list[int], *, keepalive: bool = True) -> None:
        self.ports = ports
        self.target: int | None = 0
        self._turn = 0
        limits = httpx2.Limits() if keepalive else httpx2.Limits(max_keepalive_connections=0)
        self._inner = httpx2.AsyncHTTPTransport(limits=limits)
        self.sent: list[tuple[str, int]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.target is None:
            port = self.ports[self._turn % len(self.ports)]
            self._turn += 1
        else:
            port = self.ports[self.target]
        request.url = request.url.copy_with(port=port)
        self.sent.append((request.method, port))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class Client:
    """One MCP client session through a balancer, counting tools/list_changed notifications."""

    def __init__(self, session: ClientSession, balancer: Balancer) -> None:
        self.session = session
        self.balancer = balancer
        self._changed = anyio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()

    async def wait_changed(self, timeout: float = 15) -> None:
        with anyio.fail_after(timeout):
            await self._changed.wait()
        self._changed = anyio.Event()

    def via(self, worker: int | None) -> Client:
        """Send the following requests to this worker (None: to each worker in turn)."""
        self.balancer.target = worker
        return self

    async def names(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        return await self.session.call_tool(name, arguments or {})

    async def search(self, query: str) -> str:
        found = await self.call("tool_search", {"query": query})
        assert not found.is_error, text(found)
        return text(found)


@asynccontextmanager
async def connect(
    ports: list[int], *, headers: dict[str, str] | None = None, keepalive: bool = True
) -> AsyncIterator[Client]:
    balancer = Balancer(ports, keepalive=keepalive)
    holder: list[Client] = []

    async def handler(message: Any) -> None:
        if holder:
            await holder[0].on_message(message)

    timeout = httpx2.Timeout(30, read=60)
    async with (
        httpx2.AsyncClient(transport=balancer, timeout=timeout, headers=headers) as http,
        streamable_http_client(f"http://127.0.0.1:{ports[0]}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, message_handler=handler) as session,
    ):
        client = Client(session, balancer)
        holder.append(client)
        with anyio.fail_after(60):
            await session.initialize()
        yield client


# --- processes ---------------------------------------------------------------------------------------


@contextmanager
def gateways(config: Path, count: int, *extra: str) -> Iterator[list[GatewayProcess]]:
    """`count` gateway processes started together (each builds or loads the index, then listens)."""
    started = [GatewayProcess(config, *extra) for _ in range(count)]
    try:
        for gateway in started:
            gateway.wait_ready(120)
        yield started
    finally:
        for gateway in started:
            gateway.stop()


def shared_flags(redis: RedisServer, index_dir: Path, *extra: str) -> tuple[str, ...]:
    # bm25: the rankings these tests expect (the gateway's default is hybrid when the vector extra is installed)
    flags = ("--session-store", redis.url, "--index-dir", str(index_dir), "--catalog-poll", "0.2", "--backend", "bm25")
    return (*flags, *extra)


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pair(redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    """Two gateway workers over one Redis and one index folder; their ports."""
    folder = tmp_path_factory.mktemp("pair")
    config = write_config(folder / "servers.json", {"toy": toy()})
    with gateways(config, 2, *shared_flags(redis, folder / "indexes")) as both:
        yield [port_of(g.wait_ready()) for g in both]


# --- any worker answers any request ------------------------------------------------------------------


async def test_search_through_one_worker_then_list_and_call_through_the_other(pair: list[int]) -> None:
    async with connect(pair) as client:
        assert await client.via(0).names() == ["tool_search", "call_tool"]
        assert "toy__echo" in await client.search("echo text back")
        await client.wait_changed()  # request-scoped: it rides the search's own response stream

        assert "toy__echo" in await client.via(1).names()
        echoed = await client.call("toy__echo", {"text": "through B"})
        assert not echoed.is_error and text(echoed) == "through B"

        # every request to the next worker in turn: the session is the same on both
        client.via(None)
        assert "toy__add_numbers" in await client.search("add two integers")
        for _ in range(4):
            names = await client.names()
            assert {"toy__echo", "toy__add_numbers"} <= set(names)
        total = await client.call("toy__add_numbers", {"a": 2, "b": 3})
        assert text(total) == "5"
        assert {port for _, port in client.balancer.sent} == set(pair)


async def test_two_clients_on_different_workers_never_see_each_others_tools(pair: list[int]) -> None:
    async with connect(pair) as alice, connect(pair) as bob:
        await alice.via(0).search("echo text back")
        await bob.via(1).search("add two integers")
        for worker in (0, 1, 0, 1):
            assert "toy__add_numbers" not in await alice.via(worker).names()
            assert "toy__echo" not in await bob.via(worker).names()
        assert "toy__echo" in await alice.names() and "toy__add_numbers" in await bob.names()


async def test_stateless_sessions_expire_by_the_store_ttl_or_end_with_the_client(
    pair: list[int], redis: RedisServer
) -> None:
    client = redis.client()
    async with connect(pair) as alice:
        await alice.search("echo text back")
        keys = client.keys("toolsearch:session:*")
        assert len(keys) == 1
        assert 0 < client.pttl(keys[0]) <= 3600 * 1000  # no connection close to end it: Redis's TTL does
    assert client.keys("toolsearch:session:*") == []  # the client ended its MCP session (HTTP DELETE)


async def test_the_gateway_issues_the_session_id_and_rejects_a_standalone_stream(pair: list[int]) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        url = f"http://127.0.0.1:{pair[0]}/mcp"
        accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        first = await http.post(url, json=body, headers=accept)
        second = await http.post(url, json=body, headers=accept)
        issued = [first.headers.get("mcp-session-id"), second.headers.get("mcp-session-id")]
        assert all(issued) and issued[0] != issued[1] and len(issued[0] or "") >= 32
        stream = await http.get(url, headers={"accept": "text/event-stream", "mcp-session-id": issued[0] or ""})
        assert stream.status_code == 405 and "stateless" in stream.text


# --- failures -----------------------------------------------------------------------------------------


async def test_sigkill_one_worker_mid_session_the_other_carries_on(redis: RedisServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    with gateways(config, 2, *shared_flags(redis, tmp_path / "indexes")) as (a, b):
        ports = [port_of(a.wait_ready()), port_of(b.wait_ready())]
        async with connect(ports) as client:
            await client.via(0).search("echo text back")
            await client.search("add two integers")
            before = await client.names()
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(10)
            assert await client.via(1).names() == before
            assert text(await client.call("toy__add_numbers", {"a": 20, "b": 22})) == "42"
            assert text(await client.call("toy__echo", {"text": "still here"})) == "still here"


async def test_redis_down_or_hung_gives_a_clear_error_and_the_session_comes_back(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis-data", persistent=True)
    redis.folder.mkdir()
    redis.start()
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    try:
        with gateways(config, 2, *shared_flags(redis, tmp_path / "indexes")) as (a, b):
            ports = [port_of(a.wait_ready()), port_of(b.wait_ready())]
            async with connect(ports) as client:
                await client.via(0).search("echo text back")
                assert "toy__echo" in await client.names()

                redis.kill()
                for worker in (0, 1):
                    with anyio.fail_after(20):  # an error, never a hang
                        with pytest.raises(MCPError) as listing:
                            await client.via(worker).names()
                    assert f"127.0.0.1:{redis.port}" in str(listing.value) and "retry" in str(listing.value)
                with anyio.fail_after(20), pytest.raises(MCPError) as searching:
                    await client.call("tool_search", {"query": "add two integers"})
                assert "session store" in str(searching.value)

                redis.start()  # same port and folder: the append-only file brings the sessions back
                assert "toy__echo" in await client.via(1).names()
                assert "toy__add_numbers" in await client.search("add two integers")

                redis.pause()  # a hung Redis: connections open, nothing answers
                try:
                    started = time.monotonic()
                    with anyio.fail_after(20), pytest.raises(MCPError) as hung:
                        await client.via(0).names()
                    assert "Timeout" in str(hung.value), str(hung.value)
                    assert time.monotonic() - started < 20
                finally:
                    redis.resume()
                assert {"toy__echo", "toy__add_numbers"} <= set(await client.via(0).names())
    finally:
        redis.stop()


# --- catalog changes and the shared index -------------------------------------------------------------


async def test_a_catalog_change_seen_by_one_worker_reaches_the_other(redis: RedisServer, tmp_path: Path) -> None:
    index_dir = tmp_path / "indexes"
    with toy_over_http() as upstream:
        config = write_config(tmp_path / "servers.json", {"shared": {"url": upstream}})
        with gateways(config, 2, *shared_flags(redis, index_dir, "--pin", "shared__grow")) as (a, b):
            ports = [port_of(a.wait_ready()), port_of(b.wait_ready())]
            assert len(IndexStore(index_dir).names()) == 1
            built = [g for g in (a, b) if "built and saved" in g.stderr]
            assert len(built) == 1 and "loaded in" in (b if built[0] is a else a).stderr  # one built, one loaded
            async with connect(ports) as grower, connect(ports) as other:
                other.via(1)
                assert "shared__brand_new_widget" not in await other.search("brand_new_widget")
                grown = await grower.via(0).call("shared__grow", {"name": "brand_new_widget"})
                assert not grown.is_error, text(grown)

                async def found_on_b() -> bool:
                    return "shared__brand_new_widget" in await other.search("brand_new_widget")

                deadline = time.monotonic() + 30
                while not await found_on_b():
                    assert time.monotonic() < deadline, "worker B never saw the new tool:\n" + b.stderr
                    await anyio.sleep(0.3)
                called = await other.call("shared__brand_new_widget")
                assert not called.is_error and "did nothing" in text(called)
            assert wait_until(lambda: len(IndexStore(index_dir).names()) == 2, 10)


# --- N workers on one port ----------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


async def test_workers_share_one_port_and_a_killed_worker_is_replaced(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis", password="s3cret-pw").start()
    flags = shared_flags(redis, tmp_path / "indexes", "--workers", "2", "--pin", "toy__pid")
    parent = GatewayProcess(config, *flags)
    try:
        url = parent.wait_ready(180)
        assert "(2 workers)" in parent.stderr
        port = port_of(url)
        workers = [p for p in children(parent.proc.pid) if "toolsearch.mcp" in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(workers) == 2
        # the store URL reaches the workers by environment: a password on a command line is visible to `ps`
        assert not [p for p in workers if "s3cret" in Path(f"/proc/{p}/cmdline").read_text()]
        # one connection per request, so the kernel spreads them: each worker has its own toy upstream
        async with connect([port], keepalive=False) as client:
            await client.search("echo text back")
            upstreams = {text(await client.call("toy__pid")) for _ in range(24)}
            assert len(upstreams) == 2

            os.kill(workers[0], signal.SIGKILL)
            # SIGKILL lands asynchronously: until the process has exited, its listening socket still takes
            # (and then resets) a share of new connections; once it is gone the port is the survivor's alone.
            # "Gone" is reaped (the parent logs it), not a zombie leader: a multi-threaded process's leader
            # shows as a zombie while its other threads, which share the open files, are still exiting.
            assert wait_until(lambda: "exited" in parent.stderr, 30)
            for _ in range(8):  # new connections go to the worker still listening
                assert "toy__echo" in await client.names()
            assert wait_until(
                lambda: len(children(parent.proc.pid)) == 2 and workers[0] not in children(parent.proc.pid), 60
            )
            assert parent.logged("restarting"), parent.stderr  # "exited" was waited for above
    finally:
        code = parent.stop()
        redis.stop()
    assert code in (0, -signal.SIGTERM)
    assert "s3cret" not in parent.stderr
    assert not [
        p for p in workers if Path(f"/proc/{p}").exists() and "toolsearch" in Path(f"/proc/{p}/cmdline").read_text()
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--workers", "2"), "--workers N needs a shared --session-store (redis://host:port/db)"),
        (("--session-store", "postgres://u:pw@db/x"),
         "--session-store is not a store this gateway knows: unknown session store URL 'postgres://***@db/x'; use "
         "memory:// or redis://host:port/db (the known schemes: memory, redis, rediss, unix). A session store from "
         "another package is found once that package is installed"),
    ],
)
def test_workers_need_a_shared_store(tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    done = subprocess.run(
        gateway_argv(config, "--transport", "http", *flags),
        capture_output=True, text=True, env=gateway_env(), timeout=60,
    )
    assert done.returncode == 2  # a usage error: the flags cannot work together
    assert message in done.stderr
    assert "pw@" not in done.stderr  # the password of a refused store URL is not echoed


# --- session and usage stores from plug-ins --------------------------------------------------------------


@pytest.fixture()
def demo_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo plug-in installed for the gateway processes: its dist-info and its package on their PYTHONPATH."""
    site = write_distribution(tmp_path / "site", "toolsearch-demo-backend", demo_entry_points())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(DEMO), os.environ.get("PYTHONPATH", "")]))


def refused(config: Path, *flags: str) -> str:
    done = subprocess.run(
        gateway_argv(config, "--transport", "http", *flags), capture_output=True, text=True, env=gateway_env(),
        timeout=60,
    )
    assert done.returncode == 2, done.stderr  # a usage error, as `toolsearch mcp serve` answers one
    return done.stderr


async def test_the_gateway_serves_a_plugin_store_and_refuses_one_not_shared_for_workers(
    tmp_path: Path, demo_plugin: None
) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    # an unknown scheme lists every scheme the registry knows, the plug-in's included
    assert "(the known schemes: memory, redis, rediss, unix, demo, demoredis)" in refused(
        config, "--session-store", "postgres://u:pw@db/x"
    )
    # demo:// is a bare factory: a store of one process, which N workers cannot share
    assert (
        "--workers N needs a shared --session-store (redis://host:port/db): the demo:// store does not declare "
        "itself shared between processes" in refused(config, "--workers", "2", "--session-store", "demo://x")
    )
    gateway = GatewayProcess(config, "--session-store", "demo://x", "--backend", "bm25")
    try:
        port = port_of(gateway.wait_ready(120))
        async with connect([port]) as client:
            assert "toy__echo" in await client.search("echo text back")
            assert "plug-in" in text(await client.call("toy__echo", {"text": "plug-in"}))
    finally:
        gateway.stop()
    assert "stateless, demo://x sessions" in gateway.stderr, gateway.stderr


async def test_workers_share_sessions_and_usage_through_a_plugin_store(tmp_path: Path, demo_plugin: None) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis", password="s3cret-pw").start()
    url = "demoredis://" + redis.url.split("://", 1)[1]
    parent = GatewayProcess(config, "--session-store", url, "--workers", "2", "--backend", "bm25",
                            "--index-dir", str(tmp_path / "indexes"))
    try:
        port = port_of(parent.wait_ready(180))
        keys = redis.client()
        async with connect([port], keepalive=False) as client:  # one connection per request: both workers serve
            assert "toy__echo" in await client.search("echo text back")
            for _ in range(6):
                assert "shared" in text(await client.call("toy__echo", {"text": "shared"}))
            # the plug-in's stores hold the session and the usage log, under the plug-in's own prefix
            assert keys.keys("demo:session:*")
        assert wait_until(lambda: keys.keys("demo:usage:*:entries"), 30)
        assert not keys.keys("toolsearch:*")
    finally:
        parent.stop()
        redis.stop()
    assert f"stateless, demoredis://***@127.0.0.1:{redis.port}/0 sessions" in parent.stderr, parent.stderr
    assert "s3cret" not in parent.stderr
    # the plug-in shares sessions but has no catalog board: the log says so rather than nothing
    assert "is shared but toolsearch has no catalog board for its scheme" in parent.stderr


def test_the_start_up_log_shows_no_credential_of_any_configured_url(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis", password="s3cret-pw").start()
    config = write_config(tmp_path / "servers.json", {
        "toy": toy(),
        # a bridge whose command line holds a URL with a password and a token; it exits before the handshake
        "bridge": {"command": PY, "args": ["-c", "raise SystemExit(3)",
                                           "https://alice:hunter2-pw@mcp.example.test/mcp?token=tok-123"]},
        "remote": {"url": "http://alice:hunter2-pw@127.0.0.1:1/mcp?api_key=key-456", "startupTimeout": 5},
    })
    gateway = GatewayProcess(config, "--session-store", redis.url, "--backend", "bm25")
    try:
        gateway.wait_ready(120)
        assert wait_until(lambda: "gateway ready" in gateway.stderr, 30)
    finally:
        gateway.stop()
        redis.stop()
    log = gateway.stderr
    assert f"stateless, redis://***@127.0.0.1:{redis.port}/0" in log
    assert "https://***@mcp.example.test/mcp?token=***` by hand" in log, log
    assert "cannot reach http://***@127.0.0.1:1/mcp?api_key=***" in log, log
    for secret in ("s3cret", "hunter2", "alice", "tok-123", "key-456"):
        assert secret not in log, log
    assert "no catalog board" not in log  # Redis shares catalog changes through its own board


# --- a deployment's own session header -----------------------------------------------------------------


async def test_a_session_named_by_a_proxy_header_follows_the_user_across_workers_and_connections(
    redis: RedisServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    flags = shared_flags(redis, tmp_path / "indexes", "--session-header", "X-User-Id", "--trust-proxy-header")
    with gateways(config, 2, *flags) as (a, b):
        ports = [port_of(a.wait_ready()), port_of(b.wait_ready())]
        async with connect(ports, headers={"x-user-id": "alice"}) as alice:
            await alice.via(0).search("echo text back")
        async with (
            connect(ports, headers={"x-user-id": "alice"}) as again,
            connect(ports, headers={"x-user-id": "bob"}) as bob,
        ):
            assert "toy__echo" in await again.via(1).names()  # a new connection, the other worker
            assert "toy__echo" not in await bob.via(1).names()
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(
                f"http://127.0.0.1:{ports[1]}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"accept": "application/json, text/event-stream"},
            )
        assert refused.status_code == 400 and "'x-user-id' header" in refused.text
        # the header's value never becomes a key: a proxy may put a credential there
        keys = [k.decode() for k in redis.client().keys("*")]
        assert keys and not [k for k in keys if "alice" in k or "bob" in k]


def test_a_worker_gets_every_option_of_its_parent_but_the_port_and_the_store_url() -> None:
    import argparse

    from toolsearch.mcp.cli import add_arguments
    from toolsearch.mcp.workers import child_argv

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--config", "s.json", "--transport", "http", "--port", "0", "--pin", "a__*", "--pin", "b"]
    argv += ["--no-call-tool", "--max-discovered", "7", "--session-store", "redis://:pw@h:1/0", "--workers", "3"]
    argv += ["--session-header", "X-User", "--trust-proxy-header", "--index-dir", "idx", "--catalog-poll", "0.5"]
    parent = parser.parse_args(argv)
    child = child_argv(parser, parent, 4321)
    assert child[1:3] == ["-m", "toolsearch.mcp"] and "pw" not in " ".join(child)
    worker = parser.parse_args(child[3:])
    differs = {k for k in vars(parent) if getattr(parent, k) != getattr(worker, k)}
    assert differs == {"port", "workers", "reuse_port", "session_store"}
    assert (worker.port, worker.workers, worker.reuse_port) == (4321, 1, True)


def test_a_proxy_header_is_refused_unless_the_proxy_is_trusted(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    done = subprocess.run(
        gateway_argv(config, "--transport", "http", "--session-header", "X-User-Id"),
        capture_output=True, text=True, env=gateway_env(), timeout=60,
    )
    assert done.returncode == 2 and "--trust-proxy-header" in done.stderr and "strip" in done.stderr
    assert "Traceback" not in done.stderr


# --- session ids the gateway never issued -------------------------------------------------------------

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def test_a_made_up_or_foreign_session_id_is_unknown(redis: RedisServer, tmp_path: Path) -> None:
    from mcp_servers import HERE, http_gateway

    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    argv = [PY, str(HERE / "policy_gateway.py"), str(config), "--session-store", redis.url]
    with http_gateway(config, argv=argv) as gateway:
        url = gateway.url or ""
        alice = {**ACCEPT, "x-test-caller": "alice", "mcp-protocol-version": "2025-06-18"}
        bob = {**ACCEPT, "x-test-caller": "bob", "mcp-protocol-version": "2025-06-18"}
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(url, json=INITIALIZE, headers=alice)
            issued = opened.headers.get("mcp-session-id") or ""
            assert opened.status_code == 200 and len(issued) >= 32
            mine = await http.post(url, json=LIST, headers={**alice, "mcp-session-id": issued})
            assert mine.status_code == 200 and "tool_search" in mine.text
            for headers in ({**alice, "mcp-session-id": "1"}, {**bob, "mcp-session-id": issued}):
                refused = await http.post(url, json=LIST, headers=headers)
                assert refused.status_code == 404 and "did not issue" in refused.text
                deleted = await http.delete(url, headers=headers)
                assert deleted.status_code == 404
            assert (await http.post(url, json=LIST, headers={**alice, "mcp-session-id": issued})).status_code == 200
            assert (await http.delete(url, headers={**alice, "mcp-session-id": issued})).status_code == 204
            gone = await http.post(url, json=LIST, headers={**alice, "mcp-session-id": issued})
            assert gone.status_code == 404  # ended: the client starts a new session


# --- the 2026-07-28 era over several workers -------------------------------------------------------------


@asynccontextmanager
async def modern(ports: list[int]) -> AsyncIterator[tuple[Any, Balancer]]:
    from mcp import Client as SDKClient

    balancer = Balancer(ports)
    timeout = httpx2.Timeout(30, read=60)
    async with (
        httpx2.AsyncClient(transport=balancer, timeout=timeout) as http,
        SDKClient(streamable_http_client(f"http://127.0.0.1:{ports[0]}/mcp", http_client=http), mode="2026-07-28")
        as client,
    ):
        yield client, balancer


async def test_a_context_handle_found_through_one_worker_is_used_through_the_other(pair: list[int]) -> None:
    async with modern(pair) as (client, balancer):
        balancer.target = 0
        first = await client.list_tools(cache_mode="bypass")
        found = await client.call_tool("tool_search", {"query": "add two integers", "max_results": 1})
        context = (found.structured_content or {})["context"]
        assert found.structured_content["tools"][0]["name"] == "toy__add_numbers"
        balancer.target = 1
        query = {"query": "add two integers", "max_results": 1, "context": context}
        again = await client.call_tool("tool_search", query)
        assert "toy__add_numbers" in (again.structured_content or {}).get("alreadyFound", [])
        added = await client.call_tool(
            "call_tool", {"name": "toy__add_numbers", "arguments": {"a": 40, "b": 2}, "context": context}
        )
        assert not added.is_error and text(added) == "42"
        second = await client.list_tools(cache_mode="bypass")
        assert second.model_dump_json() == first.model_dump_json()  # both workers list the same bytes
        assert {port for _, port in balancer.sent} == set(pair)
