"""`--store` on the commands around a catalog in Postgres: a damaged catalog is rebuilt with `build --rebuild`, removed
with `rm --store`, `--backend` is refused beside `--store`, and a command that takes no `--store` refuses it without
showing the DSN's password."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from pg_server import PASSWORD, PostgresServer, pg_server  # noqa: F401  (a fixture)

from toolsearch import Tool

TOOLS = [
    Tool("weather_get_forecast", "Daily weather forecast for a city.", namespace="weather"),
    Tool("email_send_message", "Send an email message to recipients.", namespace="mail"),
]


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolsearch", *args], cwd=folder, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_build_rebuild_writes_a_catalog_anew_and_rm_removes_it(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    # Before: `build --rebuild` answered "reused index" (exit 0), so a catalog whose tables were damaged stayed
    # broken (PostgresIndex.open(..., rebuild=True), which it runs now, mends one: test_postgres_writers.py);
    # `--backend bm25` was ignored; `rm` took no --store.
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    dsn = pg_server.dsn()
    built = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "mended", "--json")
    assert built.returncode == 0, built.stderr
    rebuilt = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "mended", "--rebuild", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    again = json.loads(rebuilt.stdout)
    assert again["reused"] is False and again["version"] == json.loads(built.stdout)["version"] + 1
    other = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "mended", "--backend", "bm25")
    assert other.returncode == 2 and "--backend bm25 does not apply with --store" in other.stderr
    removed = _cli(tmp_path, "rm", "mended", "--store", dsn)
    assert removed.returncode == 0 and "removed catalog 'mended'" in removed.stdout, removed.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM toolsearch_catalogs WHERE name = 'mended'").fetchone()[0] == 0
    gone = _cli(tmp_path, "rm", "mended", "--store", dsn)
    assert gone.returncode == 1 and "no catalog 'mended'" in gone.stderr
    for done in (built, rebuilt, other, removed, gone):
        assert PASSWORD not in done.stdout + done.stderr


@pytest.mark.parametrize("command", [["info", "prod"], ["list"], ["eval", "prod", "--queries", "q.jsonl"]])
def test_a_command_without_store_refuses_it_without_the_password(command: list[str], tmp_path: Path) -> None:
    # Before: "toolsearch: error: unrecognized arguments: --store postgresql://alice:s3cretPW42@db.internal:5432/tools"
    secret = "s3cretPW42"
    run = _cli(tmp_path, *command, "--store", f"postgresql://alice:{secret}@db.internal:5432/tools")
    assert run.returncode == 2 and secret not in run.stderr, run.stderr
    assert "--store postgresql://***@db.internal:5432/tools" in run.stderr
    assert f"`toolsearch {command[0]}` reads no catalog in Postgres: --store goes with build, query, rm" in run.stderr
