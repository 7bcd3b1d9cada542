"""`toolsearch build --store` and `toolsearch query --store` against a real Postgres: built once, reused, searched,
and every refusal a clear one-line error without the password."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg_server import PASSWORD, PostgresServer, pg_server  # noqa: F401  (a fixture)

from toolsearch import Tool

pytestmark = pytest.mark.slow

TOOLS = [
    Tool("weather_get_forecast", "Daily weather forecast for a city.", namespace="weather"),
    Tool("email_send_message", "Send an email message to recipients.", namespace="mail"),
    Tool("currency_convert", "Convert an amount of money from one currency to another.", namespace="finance"),
]


def _cli(folder: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolsearch", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=600)


def test_build_once_then_query_the_store(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    url = f"postgresql://postgres@127.0.0.1:{pg_server.port}/postgres"  # the password comes from $PGPASSWORD
    env = {**os.environ, "PGPASSWORD": pg_server.password}
    built = _cli(tmp_path, "build", "tools.json", "--store", url, "--name", "cli", "--json", env=env)
    assert built.returncode == 0, built.stderr
    first = json.loads(built.stdout)
    assert first["reused"] is False and first["tools"] == 3 and first["backend"] == "postgres"
    again = json.loads(_cli(tmp_path, "build", "tools.json", "--store", url, "--name", "cli", "--json",
                            env=env).stdout)
    assert again["reused"] is True and again["version"] == first["version"]  # nothing written the second time
    found = _cli(tmp_path, "query", "cli", "convert dollars to euros", "-k", "1", "--store", url, env=env)
    assert found.returncode == 0, found.stderr
    assert "currency_convert" in found.stdout and "postgres backend" in found.stdout
    assert not (tmp_path / "indexes").exists()  # nothing was written to local files


def test_refusals_are_one_line_and_hide_the_password(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    env = dict(os.environ)
    missing = _cli(tmp_path, "query", "never-built", "email", "--store", pg_server.dsn(), env=env)
    assert missing.returncode == 1 and "no catalog 'never-built'" in missing.stderr
    wrong = pg_server.dsn(password="wrong-" + PASSWORD)
    refused = _cli(tmp_path, "query", "cli", "email", "--store", wrong, env=env)
    assert refused.returncode == 1 and "refused the credentials" in refused.stderr
    not_pg = _cli(tmp_path, "build", "tools.json", "--store", f"redis://:{PASSWORD}@host/0", env=env)
    assert not_pg.returncode == 2 and "is not a Postgres URL" in not_pg.stderr
    both = _cli(tmp_path, "build", "tools.json", "--store", pg_server.dsn(), "--out", "x", env=env)
    assert both.returncode == 2 and "--store and --out" in both.stderr
    for done in (missing, refused, not_pg, both):
        assert PASSWORD not in done.stderr + done.stdout and len(done.stderr.strip().splitlines()) >= 1
    assert refused.stderr.count("refused the credentials") == 1  # said once: not also as a log line


def test_a_store_that_is_down_is_one_error_said_once(tmp_path: Path) -> None:
    from redis_server import free_port

    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_port()}/postgres"  # nothing listens there
    for args in (("build", "tools.json", "--store", url), ("query", "cli", "email", "--store", url)):
        down = _cli(tmp_path, *args, env=dict(os.environ))
        assert down.returncode == 1 and PASSWORD not in down.stderr + down.stdout
        # the outage's log line (for a server's log) is not printed beside the command's own error
        assert down.stderr.count("Postgres down or restarting") == 1, down.stderr
        assert down.stderr.strip().splitlines()[-1].startswith("toolsearch: error: catalog store")
