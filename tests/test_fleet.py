"""A fleet on one Postgres: four worker processes open one catalog at once, it is indexed once, and a change one
process makes reaches every worker without a rebuild (LISTEN/NOTIFY, or the version poll); gateway workers
(`toolsearch mcp serve --store ... --workers 2`) share one catalog beside one Redis."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from pg_server import PostgresServer, pg_server  # noqa: F401  (a fixture)

from toolsearch import Tool
from toolsearch.pg import PostgresIndex

pytestmark = pytest.mark.slow

WORKERS = 4
WORKER = r"""
import json, sys, time
from toolsearch import Tool
from toolsearch.pg import PostgresIndex

tools = [Tool.from_dict(t) for t in json.load(open(sys.argv[1]))]
index = PostgresIndex.open(None, "fleet", tools, poll=0.2)  # the DSN comes from $TOOLSEARCH_STORE
print("ready", index.version, index.catalog.hash, flush=True)
def found():
    name = "fleet_zeppelin_book"
    return name in index.catalog and index.search("book a zeppelin", 1).names == [name]
while not found():
    time.sleep(0.05)
print("seen", index.version, flush=True)
index.close()
"""

TOOLS = [
    Tool("weather_get_forecast", "Daily weather forecast for a city.", namespace="weather"),
    Tool("email_send_message", "Send an email message to recipients.", namespace="mail"),
    Tool("currency_convert", "Convert an amount of money from one currency to another.", namespace="finance"),
    Tool("calendar_create_event", "Create a meeting on the calendar.", namespace="calendar"),
]


def _lines(process: subprocess.Popen[str], out: queue.Queue[tuple[int, str]], number: int) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        out.put((number, line.strip()))


def _expect(out: queue.Queue[tuple[int, str]], word: str, processes: list[subprocess.Popen[str]]) -> dict[int, str]:
    got: dict[int, str] = {}
    while len(got) < len(processes):
        try:
            number, line = out.get(timeout=180)
        except queue.Empty:
            errors = [p.stderr.read() if p.poll() is not None and p.stderr else "" for p in processes]
            pytest.fail(f"workers did not all say {word!r}: {got}; {errors}")
        if line.startswith(word + " "):
            got[number] = line
    return got


def test_four_workers_index_once_and_all_see_a_change(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([t.to_dict() for t in TOOLS]))
    env = {**os.environ, "TOOLSEARCH_STORE": pg_server.dsn()}
    processes = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(tools_file)], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(WORKERS)
    ]
    out: queue.Queue[tuple[int, str]] = queue.Queue()
    for number, process in enumerate(processes):
        threading.Thread(target=_lines, args=(process, out, number), daemon=True).start()
    try:
        ready = _expect(out, "ready", processes)
        # every worker holds version 1, the one build: the other three found it done under the advisory lock
        assert {line.split()[1] for line in ready.values()} == {"1"}
        assert len({line.split()[2] for line in ready.values()}) == 1
        with psycopg.connect(pg_server.dsn()) as conn:
            catalog_id = conn.execute("SELECT id FROM toolsearch_catalogs WHERE name = 'fleet'").fetchone()[0]
            changes = conn.execute("SELECT count(*) FROM toolsearch_changes WHERE catalog_id = %s",
                                   (catalog_id,)).fetchone()[0]
        assert changes == 1

        editor = PostgresIndex.open(pg_server.dsn(), "fleet", poll=None)
        editor.upsert([Tool("fleet_zeppelin_book", "Book a ride on a zeppelin airship.", namespace="travel")])
        seen = _expect(out, "seen", processes)
        assert {line.split()[1] for line in seen.values()} == {str(editor.version)}
        for process in processes:
            assert process.wait(60) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)


# --- the gateway: `toolsearch mcp serve --store` --------------------------------------------------------


async def _search(url: str, query: str) -> str:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    no_keepalive = httpx2.Limits(max_keepalive_connections=0)  # a new connection, maybe another worker, each time
    async with httpx2.AsyncClient(limits=no_keepalive) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        found = await session.call_tool("tool_search", {"query": query})
        return "\n".join(getattr(part, "text", "") for part in found.content)


async def test_gateway_workers_share_one_postgres_catalog(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    from mcp_servers import GatewayProcess, time_server, write_config
    from redis_server import RedisServer

    config = write_config(tmp_path / "servers.json", {"time": time_server()})
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis").start()
    try:
        flags = ("--store", pg_server.dsn(), "--catalog", "gateway", "--session-store", redis.url, "--workers", "2")
        gateway = GatewayProcess(config, *flags)
        try:
            url = gateway.wait_ready(300)  # two workers load the model; one indexes, the other waits for it
            for _ in range(4):  # new connections: both workers answer from the one catalog
                assert "time__get_current_time" in await _search(url, "current time in a timezone")
            assert pg_server.password not in gateway.stderr  # the DSN's password is in no log line
        finally:
            gateway.stop()
        with psycopg.connect(pg_server.dsn()) as conn:
            catalog_id, tools = conn.execute(
                "SELECT id, doc_count FROM toolsearch_catalogs WHERE name = 'gateway'").fetchone()
            changes = conn.execute("SELECT count(*) FROM toolsearch_changes WHERE catalog_id = %s",
                                   (catalog_id,)).fetchone()[0]
        assert tools >= 2 and changes == 1  # two workers, one index build
    finally:
        redis.stop()


async def test_gateway_workers_started_while_redis_is_down_serve_once_it_answers(tmp_path: Path) -> None:
    # Before: each worker exited at start (`usage store ... failed to list the usage logs: ConnectionError`), so
    # `--workers 2` did not start at all, and a worker restarted during an outage exited at once.
    from mcp_servers import GatewayProcess, time_server, write_config
    from redis_server import RedisServer

    config = write_config(tmp_path / "servers.json", {"time": time_server()})
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")  # not started: its port refuses connections
    gateway = GatewayProcess(config, "--backend", "bm25", "--session-store", redis.url, "--workers", "2")
    try:
        url = gateway.wait_ready(300)  # bounded: a gateway whose workers exit ends the wait at once
        assert "usage store" in gateway.stderr and "recording in memory" in gateway.stderr
        redis.start()
        assert "time__get_current_time" in await _search(url, "current time in a timezone")
    finally:
        gateway.stop()
        redis.stop()


def test_a_redis_password_with_a_url_delimiter_stops_the_gateway_without_showing_it(tmp_path: Path) -> None:
    # Before: `unexpected ValueError: Port could not be cast to integer value as 'Xy7' ... please report it`
    from mcp_servers import gateway_argv, gateway_env, time_server, write_config
    from redis_server import free_port

    config = write_config(tmp_path / "servers.json", {"time": time_server()})
    env = {**gateway_env(), "TOOLSEARCH_SESSION_STORE": f"redis://:Xy7#kQ2pLm@127.0.0.1:{free_port()}/0"}
    done = subprocess.run(gateway_argv(config, "--transport", "http", "--port", "0", "--backend", "bm25"),
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Xy7" not in done.stderr and "kQ2pLm" not in done.stderr, done.stderr
    assert "percent-encode" in done.stderr and "unexpected" not in done.stderr, done.stderr
