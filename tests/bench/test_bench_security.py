"""`python benchmarks/security.py --smoke`: every kind of attack sent, the report complete, none got in."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import security as bench

pytestmark = pytest.mark.slow  # it starts gateway, upstream, issuer and Redis processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "security.py"
RESULTS = ROOT / "benchmarks" / "results"
# One row per kind of attack, in any order: words each row's text holds and no other's does
KINDS = (
    "forged, expired, misdirected or under-scoped bearer tokens",
    "a session id used with another caller's valid token",
    "foreign Origin / Host with a valid token",
    "foreign Origin on a gateway bound to 0.0.0.0",
    "half-open connections",
    "against `toolsearch mcp serve`",
    "tools its policy does not give it",
    "JWTs whose date claims are not numbers",
    "a 2026-07-28 context handle made with an admin token",
    "a handshake-era session opened with an admin token",
    "what a caller may not use, told to it",
    "hidden in allOf / $ref / oneOf",
    "an upstream that later adds a parameter",
    "sessions opened by one caller, never closed (cap 2; memory store)",
    "that flood locking another caller out (memory store)",
    "sessions opened by one caller, never closed (cap 2; 2 workers, one Redis)",
    "that flood locking another caller out (2 workers, one Redis)",
    "context handles minted by one caller",
    "requests from one caller across 2 workers",
    "bad tokens from one address across 2 workers",
    "bad tokens from one address (budget 2)",
    "that flood refusing another address's requests",
    "hostile answer lines from a stdio upstream",
    "an index manifest edited and given a new digest",
    "start on 0.0.0.0 without authentication",
    "a flood of 6 requests from one caller",
)


def problems(rows: list[dict[str, Any]]) -> list[str]:
    """What is wrong with a report's rows: an attack that got in, or one not accounted as refused."""
    return [
        f"{r['attack']}: tried {r['tried']}, refused {r['refused']}, got in {r['got_in']}"
        for r in rows
        if r["got_in"] or r["tried"] < 1 or r["refused"] != r["tried"]
    ]


def test_smoke_run_sends_every_kind_of_attack_and_none_gets_in(tmp_path: Path) -> None:
    committed = {path: path.read_bytes() for path in (RESULTS / "security.json", RESULTS / "reliability.md")}
    out = tmp_path / "results"
    argv = [sys.executable, str(SCRIPT), "--smoke", "--out", str(out)]  # as the docs run it, from a clone
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "security.json").read_text())
    rows = report["rows"]
    found = {kind: [r["attack"] for r in rows if kind in r["attack"]] for kind in KINDS}
    assert [kind for kind, matched in found.items() if len(matched) != 1] == []  # each kind sent, in one row
    assert len(rows) == len(KINDS), [r["attack"] for r in rows]
    assert not problems(rows)
    [half_open] = found["half-open connections"]
    assert next(r for r in rows if r["attack"] == half_open)["answer"].endswith("still answering: True")
    assert report["command"] == f"python benchmarks/security.py --smoke --out {out}"
    total = sum(r["tried"] for r in rows)
    section = (out / "reliability.md").read_text()
    assert section.startswith("# Reliability\n\n## Security\n")
    assert f"Total: {total:,} attacks, 0 got in." in section and f"Total: {total:,} attacks, 0 got in." in proc.stdout
    # the committed report is the full run's: a smoke run never touches it
    assert {path: path.read_bytes() for path in committed} == committed


def test_smoke_run_needs_an_out_dir_of_its_own(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--smoke needs --out DIR" in proc.stderr


def test_a_policy_that_gives_too_much_is_counted_as_getting_in(tmp_path: Path) -> None:
    """The count can go above 0: the gateway rows, with a policy giving the static caller every server, count its
    calls of the `time` tools as attacks that got in, and the check above names that row."""
    rows: list[dict[str, Any]] = []

    def row(what: str, tried: int, refused: int, got_in: int, answer: str) -> None:
        rows.append({"attack": what, "tried": tried, "refused": refused, "got_in": got_in, "answer": answer})

    static, unscoped = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    tokens = tmp_path / "tokens.json"
    entries = [
        {"subject": "ci", "scopes": ["tools"], "token": static},
        {"subject": "reader", "scopes": ["read"], "token": unscoped},
    ]
    tokens.write_text(json.dumps({"tokens": entries}))
    permissive = [{"when": {"subjects": ["ci"], "issuer": "static"}, "servers": ["*"]}]
    bench.gateway_rows(row, tmp_path, tokens, static, unscoped, policy_rules=permissive)
    [wrong] = problems(rows)
    assert "tools its policy does not give it" in wrong
    [policy] = [r for r in rows if r["got_in"]]
    rendered = bench.render({"date": "today", "command": "test", "rows": rows})
    assert f"attacks, {policy['got_in']} got in." in rendered
