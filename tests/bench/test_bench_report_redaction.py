"""A benchmark report (committed under benchmarks/results) records how it was run without the credentials its command
line held: `benchmarks/postgres.py --dsn postgresql://user:password@host/db`, in the markdown and the JSON alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.lib import command_line, machine_info, machine_markdown

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "PWSECRET444"


def test_the_postgres_benchmark_report_keeps_its_dsn_password_out(tmp_path: Path) -> None:
    # Before: `- Command: ... --dsn postgresql://bench:PWSECRET444@127.0.0.1:1/db ...` in the markdown, and the same in
    # the JSON's machine.argv, machine.command and command. No section runs: nothing connects, the header is written.
    dsn = f"postgresql://bench:{PASSWORD}@127.0.0.1:1/db"
    tiny = tmp_path / "tiny"  # a data set of its own: the shared ones are never needed by a test
    tiny.mkdir()
    (tiny / "tools.jsonl").write_text(json.dumps({"name": "send_email", "description": "Send an email."}) + "\n")
    query = {"id": "tiny-0", "query": "email ana", "relevant": ["send_email"]}
    (tiny / "queries.jsonl").write_text(json.dumps(query) + "\n")
    argv = [sys.executable, "benchmarks/postgres.py", "--sections", "none", "--dataset", str(tiny), "--dsn", dsn,
            "--out", str(tmp_path), "--name", "pg"]
    env = {**os.environ, "TOOLSEARCH_BENCH_END_SETTLE_S": "0", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    markdown, raw = (tmp_path / "pg.md").read_text(), (tmp_path / "pg.json").read_text()
    assert PASSWORD not in markdown and PASSWORD not in raw
    shown = (f"python benchmarks/postgres.py --sections none --dataset {tiny} --dsn 'postgresql://***@127.0.0.1:1/db' "
             f"--out {tmp_path} --name pg")
    assert f"- Command: `{shown}`" in markdown
    report = json.loads(raw)
    assert report["command"] == report["machine"]["command"] == shown
    assert report["machine"]["argv"][5:7] == ["--dsn", "postgresql://***@127.0.0.1:1/db"]


@pytest.mark.parametrize(("args", "shown"), [
    (["--dsn", "host=db user=bench password=s3cret"], "--dsn 'host=db user=bench password=***'"),
    (["--api-key", "sk-live-1234", "--token=t-1"], "--api-key '***' '--token=***'"),
    (["--held-out", "my models", "--limit", "3"], "--held-out 'my models' --limit 3"),  # nothing hidden: as before
])
def test_every_reports_command_line_hides_credentials(
    args: list[str], shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "tune.py"), *args])
    assert command_line() == f"python benchmarks/tune.py {shown}"
    info = machine_info()
    assert info["command"] == command_line()
    assert f"- Command: `python benchmarks/tune.py {shown}`" in machine_markdown(info)
    assert not [arg for arg in info["argv"] if any(secret in arg for secret in ("s3cret", "sk-live-1234", "=t-1"))]
