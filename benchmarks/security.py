"""Attack a protected MCP endpoint as an intruder would and count what got in (must be 0): the Security section.

Starts the test suite's protected server (tests/fakes/protected_mcp.py: a real MCP server behind
`toolsearch.mcp.auth.protect`, under uvicorn with the header-read timeout) on 127.0.0.2 and
0.0.0.0, and a real `toolsearch mcp serve` with a tool policy, with a local issuer
(tests/fakes/oauth_issuer.py), and sends the attacks of
tests/fakes/attacks.py: forged, expired, misdirected and under-scoped tokens; foreign Origin and
Host for every method; a session used with another caller's token; a session or context handle used with
a narrower token of the same subject, and what a caller may not use told to it (tests/mcp/test_gateway_rights.py);
an upstream colliding with --augment (tests/mcp/test_gateway_augment_schema.py); a request flood; half-open
connections; and floods that per-caller caps bound (tests/mcp/test_gateway_auth_limits.py): sessions and
context handles never closed, bad tokens from one address, one caller's rate across two workers
sharing one Redis; hostile answer lines from a stdio upstream, JWT dates that are not numbers and an index
manifest edited and given a new digest (tests/mcp/test_gateway_upstream_faults.py, tests/mcp/test_gateway_jwt_dates.py,
tests/test_integrity.py). Counts only, no timings. Writes benchmarks/results/security.json and the
"## Security" section of benchmarks/results/reliability.md (the rest of that file is kept).

    python benchmarks/security.py [--slow-connections 200]
    python benchmarks/security.py --smoke --out /tmp/security

`--smoke` sends a few attacks of every kind (every row, with smaller floods and caps: 6 attempts against a cap
of 2, one hidden augment field, 3 hijacks, 5 half-open connections) to check that the bench works; it needs
`--out`, since its counts are not the figures benchmarks/results keeps (tests/bench/test_bench_security.py runs it).
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Scale:
    """How many attacks of each kind a run sends: the full run's, or `--smoke`'s few."""

    attempts: int  # sessions, context handles and bad tokens one caller floods with
    cap: int  # the per-caller caps and the refused-token budget those floods meet
    hijacks: int  # other callers' tokens tried on one session
    nested: int  # augmented fields hidden in allOf / $ref / oneOf (at most 3)
    flood_burst: int  # the rate burst the single-server flood meets
    slow_connections: int
    flood: int


FULL = Scale(attempts=20, cap=5, hijacks=10, nested=3, flood_burst=10, slow_connections=200, flood=50)
SMOKE = Scale(attempts=6, cap=2, hijacks=3, nested=1, flood_burst=3, slow_connections=5, flood=6)


def gateway_rows(
    row: Any, folder: Path, tokens: Path, static: str, unscoped: str, policy_rules: list[dict[str, Any]] | None = None
) -> None:
    """The same token and Origin attacks against a real `toolsearch mcp serve`, and calls outside the policy.

    `policy_rules` replaces the bench's tool policy (`ci`, the static token's subject, gets `toy` only); one giving
    `ci` more lets its calls of the `time` tools in, which is how the bench's test checks that they are counted."""
    import anyio
    import httpx2
    from fakes.attacks import origin_attacks, send, token_attacks
    from fakes.oauth_issuer import LocalIssuer
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp_servers import http_gateway, time_server, toy, write_config

    config = write_config(folder / "servers.json", {"toy": toy(), "time": time_server()})
    policy = folder / "policy.json"
    rules = [{"when": {"subjects": ["ci"], "issuer": "static"}, "servers": ["toy"]}]
    policy.write_text(json.dumps({"rules": rules if policy_rules is None else policy_rules}))
    flags = ["--auth-tokens", str(tokens), "--auth-scope", "tools", "--tool-policy", str(policy)]
    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--host", "127.0.0.2", "--auth-issuer", issuer.url, *flags, "--rate-limit", "0",
        "--auth-failures", "0",
    ) as gateway:
        url = gateway.url or ""
        attacks = token_attacks(issuer, url, static, unscoped) + origin_attacks(issuer.mint("x", audience=url), url)
        wrong = [a for a in attacks if not a.answered(send(url, a).status_code)]
        row("the token and Origin/Host attacks above, against `toolsearch mcp serve` (2 upstream servers)",
            len(attacks), len(attacks) - len(wrong), len(wrong), "401 / 403 / 421, as above")

        async def outside_policy() -> tuple[int, int]:
            headers = {"authorization": f"Bearer {static}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                names = ["time__get_current_time", "time__convert_time"]
                tried = ran = 0
                for name in names:
                    for arguments in ({"timezone": "UTC"}, {}):
                        tried += 1
                        result = await s.call_tool("call_tool", {"name": name, "arguments": arguments})
                        ran += not result.is_error
                        tried += 1
                        direct = await s.call_tool(name, arguments)
                        ran += not direct.is_error
                found = await s.call_tool("tool_search", {"query": "current time timezone convert", "max_results": 10})
                tried += 1
                ran += "time__" in "".join(getattr(c, "text", "") for c in found.content)
                return tried, ran

        tried, ran = anyio.run(outside_policy)
        row("a caller's searches and calls of tools its policy does not give it", tried, tried - ran, ran,
            "tool error; not found by search")
        date_claim_rows(row, url, issuer)  # this gateway trusts the issuer: one process fewer to start


def rights_rows(row: Any, folder: Path) -> None:
    """Rights decided on every request, and nothing told about what a caller may not use
    (tests/mcp/test_gateway_rights.py): a real `toolsearch mcp serve` with two upstream servers, `safe` and
    `bank`, a policy giving `tools:admin` both and `tools` only `safe`, and --require-discovery. The caller holds
    an admin token and a narrower one with the same subject; each era's session or handle, made with the admin
    token, is used with the narrower one."""
    import anyio
    import httpx2
    from fakes.oauth_issuer import LocalIssuer
    from mcp import Client, ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp_servers import http_gateway, toy, write_config

    config = write_config(folder / "rights-servers.json", {"safe": toy(), "bank": toy()})
    policy = folder / "rights-policy.json"
    rules = [
        {"when": {"scopes": ["tools:admin"]}, "servers": ["*"]},
        {"when": {"scopes": ["tools"]}, "servers": ["safe"]},
    ]
    policy.write_text(json.dumps({"rules": rules}))
    bank = ["bank__echo", "bank__add_numbers", "bank__pid"]
    arguments = {"bank__echo": {"text": "x"}, "bank__add_numbers": {"a": 1, "b": 2}, "bank__pid": {}}

    def texts(result: Any) -> str:
        return "".join(getattr(c, "text", "") for c in result.content)

    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--host", "127.0.0.2", "--auth-issuer", issuer.url, "--auth-scope", "tools",
        "--tool-policy", str(policy), "--require-discovery", "--rate-limit", "0", "--auth-failures", "0",
    ) as gateway:  # fmt: skip
        url = gateway.url or ""
        admin = issuer.mint("alice", scopes=["tools", "tools:admin"], audience=url)
        narrow = issuer.mint("alice", scopes=["tools"], audience=url)

        async def modern() -> tuple[int, int]:
            tried = got_in = 0
            async with httpx2.AsyncClient(headers={"authorization": f"Bearer {admin}"}, timeout=30) as http, \
                    Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
                query = {"query": "echo add numbers process id", "max_results": 10}
                found = await client.call_tool("tool_search", query)
                handle = (found.structured_content or {})["context"]
                http.headers["authorization"] = f"Bearer {narrow}"
                for name in bank:
                    tried += 1
                    call = {"name": name, "arguments": arguments[name], "context": handle}
                    got_in += not (await client.call_tool("call_tool", call)).is_error
                tried += 2
                got_in += "bank__" in texts(await client.call_tool("tool_search", {**query, "context": handle}))
                got_in += any(t.name.startswith("bank__") for t in (await client.list_tools()).tools)
            return tried, got_in

        async def handshake() -> tuple[int, int]:
            tried = got_in = 0
            async with httpx2.AsyncClient(headers={"authorization": f"Bearer {admin}"}, timeout=30) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                await s.call_tool("tool_search", {"query": "echo add numbers process id", "max_results": 10})
                http.headers["authorization"] = f"Bearer {narrow}"
                for name in bank:
                    tried += 2
                    got_in += not (await s.call_tool(name, arguments[name])).is_error
                    proxied = await s.call_tool("call_tool", {"name": name, "arguments": arguments[name]})
                    got_in += not proxied.is_error
                tried += 1
                got_in += any(t.name.startswith("bank__") for t in (await s.list_tools()).tools)
            return tried, got_in

        tried, got_in = anyio.run(modern)
        row("a 2026-07-28 context handle made with an admin token, used with a narrower token of the same subject: "
            "calls, searches and lists reaching the tools only the admin token gives", tried, tried - got_in, got_in,
            "not available; not found; not listed")
        tried, got_in = anyio.run(handshake)
        row("a handshake-era session opened with an admin token, used with a narrower token of the same subject: "
            "direct and call_tool calls, and lists, reaching the tools only the admin token gives", tried,
            tried - got_in, got_in, "not available; not listed")

        async def told() -> tuple[int, int]:
            tried = named = 0
            async with httpx2.AsyncClient(headers={"authorization": f"Bearer {narrow}"}, timeout=30) as http:
                async with streamable_http_client(url, http_client=http) as (read, write), \
                        ClientSession(read, write) as s:
                    initialized = await s.initialize()
                    tried += 1
                    named += "bank" in (initialized.instructions or "")
                    answers = []
                    for name in ("bank__echo", "bank__no_such_tool"):
                        result = await s.call_tool("call_tool", {"name": name, "arguments": {"text": "x"}})
                        answers.append(texts(result).replace(name, "<tool>"))
                    tried += 1
                    named += answers[0] != answers[1]
                async with Client(streamable_http_client(url, http_client=http)) as client:  # probes server/discover
                    tried += 1
                    named += "bank" in (client.instructions or "")
                    answers = []
                    for name in ("bank__echo", "bank__no_such_tool"):
                        result = await client.call_tool("call_tool", {"name": name, "arguments": {"text": "x"}})
                        answers.append(texts(result).replace(name, "<tool>"))
                    tried += 1
                    named += answers[0] != answers[1]
            return tried, named

        tried, named = anyio.run(told)
        row("what a caller may not use, told to it: its instructions naming a server it may not use, or a forbidden "
            "tool answered otherwise than a missing one (--require-discovery), both eras", tried, tried - named,
            named, "only its own servers named; one answer for both")


def augment_rows(row: Any, folder: Path, nested_cases: int = 3) -> None:
    """A hostile upstream that adds a parameter named like the gateway's augmented field
    (tests/mcp/test_gateway_augment_schema.py): what it may not do is blank searches or lists, or turn calls
    into protocol errors; a `reason` hidden in `allOf` / `$ref` / `oneOf` must stop the start."""
    import anyio
    from mcp import Client
    from mcp.shared.exceptions import MCPError
    from mcp_servers import gateway_argv, gateway_env, http_gateway, write_config
    from mcp_servers.clients import connect, faulty

    augment = folder / "augment.json"
    reason = {"type": "string"}
    augment.write_text(json.dumps({"type": "object", "properties": {"reason": reason}, "required": ["reason"]}))
    nested = [
        {"type": "object", "allOf": [{"properties": {"reason": reason}}]},
        {"type": "object", "$ref": "#/$defs/R", "$defs": {"R": {"type": "object", "properties": {"reason": reason}}}},
        {"type": "object", "oneOf": [{"properties": {"a": reason}}, {"properties": {"reason": reason}}]},
    ][:nested_cases]
    started = 0
    for i, schema in enumerate(nested):
        tool = {"name": "refund", "description": "Refund a payment.", "inputSchema": schema}
        config = write_config(folder / f"augment-{i}.json", {"pay": faulty(FAULTY_EXTRA_TOOLS=json.dumps([tool]))})
        done = subprocess.run(gateway_argv(config, "--augment", str(augment), "--backend", "bm25"), env=gateway_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        started += done.returncode == 0
    row("a tool whose own parameter is named like an augmented field, hidden in allOf / $ref / oneOf: gateways "
        "that start anyway", len(nested), len(nested) - started, started, "refused at start, naming the tool")

    config = write_config(folder / "augment-up.json", {"up": faulty()})
    colliding = {"type": "object", "properties": {"text": {"type": "string"}, "reason": reason}}
    why = "the bench asks"
    with http_gateway(config, "--augment", str(augment), "--backend", "bm25") as gateway:
        url = gateway.url or ""

        async def collide() -> tuple[int, int]:
            tried = broken = 0
            async with connect(url) as old, Client(url) as modern:
                await old.search("echo the given text back unchanged", max_results=3)
                change = {"tool": "echo", "schema": colliding, "reason": why}
                await modern.call_tool("call_tool", {"name": "up__mutate", "arguments": change})
                if not gateway.logged("cannot be offered with --augment", timeout=60):
                    raise RuntimeError("the gateway did not see the upstream change")
                tried += 1
                searched = await modern.call_tool("tool_search", {"query": "echo the given text back unchanged"})
                broken += bool(searched.is_error)
                for attempt in (old.names(), old.call("up__echo", {"text": "x", "reason": why}),
                                old.search("echo the given text back unchanged")):
                    tried += 1
                    try:
                        result = await attempt
                    except MCPError:
                        broken += 1
                    else:
                        broken += bool(getattr(result, "is_error", False)) and "Traceback" in str(result)
            return tried, broken

        tried, broken = anyio.run(collide)
    row("an upstream that later adds a parameter named like the augmented field: 2026 searches failed whole, "
        "handshake-era lists and calls answered with a protocol error", tried, tried - broken, broken,
        "left out with a note; its calls a tool error")


def limit_rows(row: Any, folder: Path, cap: int = 5, attempts: int = 20) -> None:
    """Floods bounded by per-caller caps and limits: sessions and context handles (memory store, and two workers
    on one Redis, requests alternating between them), refused tokens per address, the request rate across workers.

    The workers' rate burst is 3 requests for each of the `attempts` searches (each opens a client), so the
    context-handle flood stays under it; the rate flood then sends `attempts` requests past it, fewer than the burst,
    so that per worker all would pass."""
    import anyio
    import httpx2
    from fakes.attacks import INITIALIZE, MCP_HEADERS
    from fakes.protected_mcp import serve_protected
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_servers import GatewayProcess, http_gateway, toy, write_config
    from redis_server import RedisServer

    names = ("alice", "bob", "carol", "dave")
    tokens = {name: secrets.token_urlsafe(32) for name in names}
    path = folder / "limit-tokens.json"
    entries = [{"subject": n, "scopes": ["tools"], "token": t} for n, t in tokens.items()]
    path.write_text(json.dumps({"tokens": entries}))
    config = write_config(folder / "limit-servers.json", {"toy": toy()})
    auth = ["--host", "127.0.0.2", "--auth-tokens", str(path), "--auth-scope", "tools", "--backend", "bm25"]

    def post(url: str, name: str | None, extra: list[tuple[str, str]] = [], source: str | None = None) -> int:  # noqa: B006
        headers = [*MCP_HEADERS, *extra] + ([("authorization", f"Bearer {tokens[name]}")] if name else [])
        transport = httpx2.HTTPTransport(local_address=source) if source else None
        with httpx2.Client(transport=transport, timeout=30) as http:
            return http.post(url, headers=headers, content=json.dumps(INITIALIZE)).status_code

    def session_flood(urls: list[str], where: str) -> None:
        statuses = Counter(post(urls[i % len(urls)], "alice") for i in range(attempts))
        row(f"{attempts} sessions opened by one caller, never closed (cap {cap}; {where}): those past the cap",
            attempts - cap, statuses[429], max(0, statuses[200] - cap), "429 with Retry-After, how many are open")
        other = post(urls[0], "bob")
        row(f"that flood locking another caller out ({where})", 1, int(other == 200), int(other != 200),
            "the other caller's initialize answered 200")

    with http_gateway(config, *auth, "--rate-limit", "0", "--sessions-per-caller", str(cap)) as gateway:
        session_flood([gateway.url or ""], "memory store")

    (folder / "redis").mkdir()
    redis = RedisServer(folder / "redis").start()
    burst = 3 * attempts
    flags = [*auth, "--session-store", redis.url, "--index-dir", str(folder / "limit-indexes"),
             "--sessions-per-caller", str(cap), "--contexts-per-caller", str(cap),
             "--rate-limit", "1", "--rate-burst", str(burst), "--auth-failures", str(cap)]
    workers = [GatewayProcess(config, *flags) for _ in range(2)]
    try:
        urls = [w.wait_ready(120) for w in workers]
        session_flood(urls, "2 workers, one Redis")

        async def searches() -> list[Any]:
            results = []
            for i in range(attempts):
                headers = {"authorization": f"Bearer {tokens['carol']}"}
                async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                        Client(streamable_http_client(urls[i % 2], http_client=http), mode="2026-07-28") as client:
                    results.append(await client.call_tool("tool_search", {"query": "echo text back"}))
            return results

        found = anyio.run(searches)
        kept = sum(bool((r.structured_content or {}).get("context")) for r in found)
        refused = sum("No context was kept" in "".join(getattr(c, "text", "") for c in r.content) for r in found)
        row(f"{attempts} context handles minted by one caller (cap {cap}; 2 workers): those past the cap",
            attempts - cap, refused, max(0, kept - cap), "search answered, no handle kept, and why")

        unknown = [("mcp-session-id", "made-up")]  # opens no session: 404 once past the rate limit
        sent = burst + attempts
        statuses = Counter(post(urls[i % 2], "dave", unknown) for i in range(sent))
        row(f"{sent} requests from one caller across 2 workers (burst {burst}, 1/min): those past the shared burst",
            attempts, statuses[429], max(0, attempts - statuses[429]),
            f"429 with Retry-After (per worker, all {sent} would pass)")

        bad = [("authorization", "Bearer " + secrets.token_urlsafe(32))]
        checked = Counter(post(urls[i % 2], None, bad, source="127.0.0.5") for i in range(attempts))
        row(f"{attempts} bad tokens from one address across 2 workers (budget {cap}): those past the budget",
            attempts - cap, checked[429], max(0, checked[401] - cap), "429 before the token is checked")
    finally:
        for worker in workers:
            worker.stop()
        redis.stop()

    with serve_protected(*auth[:6], "--rate-limit", "0", "--auth-failures", str(cap)) as served:
        bad = [("authorization", "Bearer " + secrets.token_urlsafe(32))]
        checked = Counter(post(served.url, None, bad, source="127.0.0.6") for _ in range(attempts))
        row(f"{attempts} bad tokens from one address (budget {cap}): those past the budget", attempts - cap,
            checked[429], max(0, checked[401] - cap), "429 with Retry-After, token not checked")
        others = [post(served.url, None, bad, source="127.0.0.7"), post(served.url, "alice", source="127.0.0.7")]
        answered = (others[0] == 401) + (others[1] == 200)
        row("that flood refusing another address's requests", 2, answered, 2 - answered,
            "its bad token 401, its valid token 200")


def upstream_rows(row: Any, folder: Path) -> None:
    """Hostile answer lines from a stdio upstream (tests/mcp/test_gateway_upstream_faults.py): each may fail only
    the call it answers, with a tool error naming the server and soon (not by waiting out the call timeout), and the
    same server process must answer the next call; a lone surrogate is repaired with one log line, no traceback."""
    import anyio
    from mcp_servers import http_gateway, toy, write_config
    from mcp_servers.clients import connect, faulty, text

    config = write_config(folder / "upstream-servers.json", {"faulty": faulty(callTimeout=5), "toy": toy()})
    faults: list[tuple[str, dict[str, Any], str | None]] = [  # (tool, arguments, what its error must say)
        ("badbytes", {}, "with a line that is not valid UTF-8"),
        ("badjson", {}, "with a line that is not JSON"),
        ("bigerror", {"bytes": 5_000_000, "code": -32000}, "rejected the call to 'bigerror'"),  # the SDK's "closed"
        ("bigerror", {"bytes": 10, "code": -32001}, "rejected the call to 'bigerror'"),  # the SDK's "timed out"
        ("unpaired", {}, None),  # a lone surrogate escape: repaired, an answer
    ]
    with http_gateway(config, "--backend", "bm25") as gateway:

        async def attack() -> int:
            held = 0
            async with connect(gateway.url or "") as client:

                async def call(tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
                    result = await client.call("call_tool", {"name": f"faulty__{tool}", "arguments": arguments})
                    return bool(result.is_error), text(result)

                _, pid = await call("pid", {})
                for tool, arguments, said in faults:
                    failed, message = await call(tool, arguments)
                    if said is None:
                        answered = not failed and "\ufffd" in message
                    else:
                        answered = failed and said in message and len(message) < 5_000
                        answered = answered and not any(w in message for w in ("did not answer", "stopped"))
                    held += answered and await call("pid", {}) == (False, pid)  # the same process serves on
            return held

        held = anyio.run(attack)
        held -= "Traceback" in gateway.stderr or not gateway.logged("a message held a lone surrogate escape")
    row("hostile answer lines from a stdio upstream (not UTF-8, not JSON, a 5 MB error under the SDK's "
        "closed-connection code, an error under its timeout code, a lone surrogate): answers that wedged the server, "
        "waited out the call timeout, read as a crash or logged a traceback", len(faults), max(0, held),
        len(faults) - max(0, held), "a tool error naming the server at once; the same process answers next")


def date_claim_rows(row: Any, url: str, issuer: Any) -> None:
    """JWTs whose date claims are not numbers (tests/mcp/test_gateway_jwt_dates.py): PyJWT reads them with int(), so
    "9999999999" passed as an expiry; a real `toolsearch mcp serve` at `url`, trusting `issuer` (a LocalIssuer),
    must refuse each with 401."""
    import httpx2
    from fakes.attacks import INITIALIZE, MCP_HEADERS

    now = int(time.time())
    dates: list[dict[str, Any]] = [
        {"exp": str(now + 3600)}, {"exp": "9999999999"}, {"exp": True}, {"nbf": "0"}, {"iat": str(now)},
        {"exp": [now + 3600]},
    ]
    statuses = []
    for forged in dates:
        claims = {"iss": issuer.url, "sub": "mallory", "aud": url, "iat": now, "exp": now + 600, "scope": "tools"}
        token = issuer.mint_claims({**claims, **forged})
        headers = [*MCP_HEADERS, ("authorization", f"Bearer {token}")]
        statuses.append(httpx2.post(url, headers=headers, content=json.dumps(INITIALIZE), timeout=30).status_code)
    row("JWTs whose date claims are not numbers (exp, nbf or iat as a string, true or a list; RFC 7519 NumericDate)",
        len(dates), statuses.count(401), sum(s < 400 for s in statuses), "401 naming the claim")


def manifest_rows(row: Any, folder: Path) -> None:
    """An index manifest edited and given a new digest, as anyone who can write the file can
    (tests/test_integrity.py): the fields that decide answers are checked against the stored files."""
    from toolsearch import IndexFormatError, Tool, ToolIndex
    from toolsearch.store import MANIFEST, manifest_digest, verify_index

    tools = [Tool("send_email", "Send an email.", namespace="mail"), Tool("get_weather", "Weather.", namespace="sky")]
    edits: list[dict[str, Any]] = [{"namespaces": []}, {"namespaces": ["sky", "mail"]}, {"tool_count": 1}]
    tried = passed = 0
    for i, fields in enumerate(edits):
        saved = ToolIndex.build(tools, backend="bm25").save(folder / f"manifest-{i}")
        data = json.loads((saved / MANIFEST).read_text())
        data.update(fields)
        data["digest"] = manifest_digest(data)
        (saved / MANIFEST).write_text(json.dumps(data))
        for check in (ToolIndex.load, verify_index):  # a load, and the health `toolsearch list` reports
            tried += 1
            try:
                check(saved)
                passed += 1
            except IndexFormatError:
                pass
    row("an index manifest edited and given a new digest (namespaces emptied or reordered, tool count changed): "
        "loads and health checks that passed", tried, tried - passed, passed, "refused, naming the field")


def run(slow_connections: int, flood: int, scale: Scale = FULL) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    import httpx2
    from fakes.attacks import INITIALIZE, MCP_HEADERS, origin_attacks, send, slow_headers, token_attacks
    from fakes.oauth_issuer import LocalIssuer
    from fakes.protected_mcp import run_protected, serve_protected

    from benchmarks.lib import command_line

    rows: list[dict[str, Any]] = []

    def row(what: str, tried: int, refused: int, got_in: int, answer: str) -> None:
        rows.append({"attack": what, "tried": tried, "refused": refused, "got_in": got_in, "answer": answer})

    def post(url: str, headers: list[tuple[str, str]]) -> httpx2.Response:
        return httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=10)

    with tempfile.TemporaryDirectory() as folder:
        static = secrets.token_urlsafe(32)
        unscoped = secrets.token_urlsafe(32)
        tokens = Path(folder) / "tokens.json"
        tokens.write_text(
            json.dumps(
                {
                    "tokens": [
                        {"subject": "ci", "scopes": ["tools"], "token": static},
                        {"subject": "reader", "scopes": ["read"], "token": unscoped},
                    ]
                }
            )
        )
        flags = ["--auth-scope", "tools", "--auth-tokens", str(tokens)]
        with LocalIssuer() as issuer, serve_protected(
            "--host", "127.0.0.2", "--auth-issuer", issuer.url, *flags, "--rate-limit", "0", "--auth-failures", "0"
        ) as served:
            url = served.url
            attacks = token_attacks(issuer, url, static, unscoped)
            statuses = Counter()
            got_in = 0
            for attack in attacks:
                status = send(url, attack).status_code
                statuses[status] += 1
                got_in += status < 400 or not attack.answered(status)
            refused = sum(n for s, n in statuses.items() if s in (401, 403, 503))
            row("forged, expired, misdirected or under-scoped bearer tokens", len(attacks), refused, got_in,
                ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())))

            alice = issuer.mint("alice", audience=url)
            session = post(url, [("authorization", f"Bearer {alice}")]).headers["mcp-session-id"]
            hijacks = 0
            hijacked = 0
            ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            for i in range(scale.hijacks):
                other = issuer.mint(f"mallory{i}", audience=url)
                headers = [*MCP_HEADERS, ("authorization", f"Bearer {other}"), ("mcp-session-id", session)]
                hijacks += 1
                hijacked += httpx2.post(url, headers=headers, content=ping, timeout=10).status_code < 400
            row("a session id used with another caller's valid token", hijacks, hijacks - hijacked, hijacked, "404")

            origin = origin_attacks(alice, url)
            wrong = [a for a in origin if not a.answered(send(url, a, session_id=session).status_code)]
            row("foreign Origin / Host with a valid token (POST, GET, DELETE), 127.0.0.2", len(origin),
                len(origin) - len(wrong), len(wrong), "403 (Origin), 421 (Host)")

        timeout = 2.0
        with serve_protected(
            "--host", "0.0.0.0", "--no-auth", "--rate-limit", "0", "--header-timeout", str(timeout)
        ) as served:
            port = served.url.rsplit(":", 1)[1]
            url = f"http://127.0.0.1:{port}"
            origin = origin_attacks("unused", url)[:6]  # the Origin cases: Host is unchecked without --resource-url
            wrong = [a for a in origin if not a.answered(send(url, a).status_code)]
            row("foreign Origin on a gateway bound to 0.0.0.0", len(origin), len(origin) - len(wrong), len(wrong),
                "403")
            # the same server, one process fewer to start: its header timeout holds on every interface
            closed, still_open = slow_headers(url, slow_connections, wait=timeout + 2.5)
            alive = post(url, []).status_code == 200
            row(f"half-open connections (header timeout {timeout:g} s; closed after {timeout + 2.5:g} s)",
                slow_connections, closed, still_open, f"closed; server still answering: {alive}")

        gateway_rows(row, Path(folder), tokens, static, unscoped)
        rights_rows(row, Path(folder))
        augment_rows(row, Path(folder), scale.nested)
        limit_rows(row, Path(folder), scale.cap, scale.attempts)
        upstream_rows(row, Path(folder))
        manifest_rows(row, Path(folder))

        servers = Path(folder) / "servers.json"
        refusals = [
            run_protected("--host", "0.0.0.0", "--port", "0").returncode != 0,
            subprocess.run(
                [sys.executable, "-m", "toolsearch", "mcp", "serve", "--config", str(servers), "--transport", "http",
                 "--host", "0.0.0.0", "--port", "0"], capture_output=True, timeout=120,
            ).returncode != 0,
        ]
        row("start on 0.0.0.0 without authentication (test server, `toolsearch mcp serve`)", len(refusals),
            sum(refusals), len(refusals) - sum(refusals), "refused with the flags to give")

        burst = scale.flood_burst
        # 1 a minute: no bucket refills while the flood runs, so exactly `burst` requests may pass
        with serve_protected("--host", "127.0.0.2", *flags, "--rate-limit", "1", "--rate-burst", str(burst)) as served:
            headers = [("authorization", f"Bearer {static}")]
            flood_statuses = Counter(post(served.url, headers).status_code for _ in range(flood))
            row(f"a flood of {flood} requests from one caller (burst {burst}, 1/min): those past the burst",
                flood - burst, flood_statuses[429], max(0, flood_statuses[200] - burst), "429 with Retry-After")

    return {"date": time.strftime("%Y-%m-%d"), "rows": rows, "command": command_line(__file__)}


def render(report: dict[str, Any]) -> str:
    rows = report["rows"]
    lines = [
        "## Security",
        "",
        f"Generated by `{report['command']}` on {report['date']} (counts, not timings). Each attack is a real "
        "HTTP request or connection, to a real MCP server behind `toolsearch.mcp.auth.protect` "
        "(tests/fakes/protected_mcp.py) or to a real `toolsearch mcp serve` process with two upstream servers, "
        "with tokens from a local issuer made for the run; the cases are tests/fakes/attacks.py, the ones "
        "tests/mcp/test_gateway_oauth.py, tests/mcp/test_gateway_guard.py, tests/mcp/test_gateway_auth.py and "
        "tests/mcp/test_gateway_auth_limits.py send.",
        "",
        "| attack | tried | refused | got in | answer |",
        "|---|---:|---:|---:|---|",
        *(f"| {r['attack']} | {r['tried']:,} | {r['refused']:,} | {r['got_in']:,} | {r['answer']} |" for r in rows),
        "",
        f"Total: {sum(r['tried'] for r in rows):,} attacks, {sum(r['got_in'] for r in rows)} got in.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Put `section` in place of the file's "## Security" section (or at its end), keeping the rest."""
    text = path.read_text() if path.exists() else "# Reliability\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "## Security"), None)
    if start is None:
        path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    kept = lines[:start] + section.rstrip("\n").splitlines() + (["", *lines[end:]] if end < len(lines) else [])
    path.write_text("\n".join(kept) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow-connections", type=int, help="half-open connections opened at once (200)")
    parser.add_argument("--flood", type=int, help="requests one caller sends in a row (50)")
    parser.add_argument("--smoke", action="store_true", help="a few attacks of every kind, to check the bench works")
    parser.add_argument("--out", help="where the report goes (benchmarks/results; --smoke needs one of its own)")
    args = parser.parse_args()
    if args.smoke and args.out is None:
        # a smoke run's counts are not the published ones: it must not replace them
        parser.error("--smoke needs --out DIR: benchmarks/results keeps the full run's report")
    scale = SMOKE if args.smoke else FULL
    slow = scale.slow_connections if args.slow_connections is None else args.slow_connections
    report = run(slow, scale.flood if args.flood is None else args.flood, scale)
    out = Path(args.out or ROOT / "benchmarks" / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "security.json").write_text(json.dumps(report, indent=2) + "\n")
    write_section(out / "reliability.md", render(report))
    print(render(report))
    return 1 if any(r["got_in"] for r in report["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
