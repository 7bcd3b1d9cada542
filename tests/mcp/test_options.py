"""`toolsearch mcp serve` refuses flags it would accept and ignore, before any upstream server starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsearch import UsageError
from toolsearch.cli import EXIT_USAGE, EXIT_USER_ERROR, main
from toolsearch.mcp import WorkerSettings
from toolsearch.usage import FileUsageStore


def serve(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    config = tmp_path / "servers.json"
    # a server that cannot start: every case below must be refused before the gateway tries it
    config.write_text(json.dumps({"mcpServers": {"absent": {"command": str(tmp_path / "no-such-server")}}}))
    code = main(["mcp", "serve", "--config", str(config), "--backend", "bm25", *flags])
    err = capsys.readouterr().err
    assert "absent" not in err, err
    return code, err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--port", "9000"], "--port applies to the HTTP transport only: add --transport http"),
        (["--host", "0.0.0.0", "--rate-limit", "5"], "--host, --rate-limit apply to the HTTP transport only"),
        (["--path", "/x", "--trust-proxy-header"], "--path, --trust-proxy-header apply to the HTTP transport"),
        (["--sessions-per-caller", "3", "--header-timeout", "2"], "--header-timeout, --sessions-per-caller apply"),
    ],
)
def test_http_flags_on_stdio_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    code, err = serve(tmp_path, capsys, *flags)
    assert code == EXIT_USAGE and named in err, err  # the command line itself is wrong (docs/cli.md)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--no-usage-log", "--usage-log", "u.json"], "--no-usage-log and --usage-log FILE contradict each other"),
        (["--no-usage-log", "--usage-privacy", "raw"], "--no-usage-log keeps none: give one of them"),
    ],
)
def test_contradicting_usage_flags_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    code, err = serve(tmp_path, capsys, *flags)
    assert code == EXIT_USAGE and said in err, err


def test_a_usage_log_that_is_a_folder_is_refused_without_advice_to_delete_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "logs"
    (folder / "kept").mkdir(parents=True)
    code, err = serve(tmp_path, capsys, "--usage-log", str(folder))
    said = f"--usage-log {folder} is a folder: name a JSON file, e.g. --usage-log {folder}/usage.json"
    assert code == EXIT_USER_ERROR and said in err, err  # the file system, not the command line, is at fault
    assert "delete" not in err
    with pytest.raises(UsageError, match="is a folder, not a usage log: name a JSON file") as raised:
        FileUsageStore(folder).logs()  # the library's own reader says the same, not "delete it"
    assert "delete" not in str(raised.value)
    assert (folder / "kept").is_dir()


@pytest.mark.parametrize("header", ["", " x-user", "x user", "x-user\r\nx-evil: 1"])
def test_a_session_header_that_no_request_can_carry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str
) -> None:
    code, err = serve(tmp_path, capsys, "--transport", "http", "--port", "0", "--session-header", header,
                      "--trust-proxy-header")
    assert code == EXIT_USAGE and f"--session-header {header!r} is not an HTTP header name" in err, err
    with pytest.raises(ValueError, match="is not an HTTP header name"):
        WorkerSettings(session_header=header, trust_proxy_header=True)


def test_the_flags_that_fit_the_transport_still_pass(tmp_path: Path) -> None:
    from toolsearch.cli import build_parser
    from toolsearch.mcp.cli import settings_from_args

    argv = ["mcp", "serve", "--config", "servers.json", "--transport", "http", "--port", "0", "--rate-limit", "5",
            "--session-header", "X-User", "--trust-proxy-header", "--usage-log", str(tmp_path / "usage.json")]
    settings = settings_from_args(build_parser(argv).parse_args(argv))
    assert settings.workers.identity_header == "X-User" and settings.auth.rate_limit == 5
    argv = ["mcp", "serve", "--config", "servers.json", "--port", "8000", "--usage-privacy", "hashed"]
    assert settings_from_args(build_parser(argv).parse_args(argv)).transport == "stdio"  # defaults restated pass


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # values out of range and an unknown name: usage errors, as `build --backend nope` is (docs/cli.md)
        (["--backend", "nope"], "unknown backend 'nope'"),
        (["--session-ttl", "-5"], "--session-ttl must be a positive number of seconds, got -5.0"),
        (["--session-ttl", "nan"], "--session-ttl must be a positive number of seconds, got nan"),
        (["--transport", "http", "--rate-limit", "nan"], "--rate-limit must be >= 0 (0 turns it off)"),
        (["--workers", "0"], "--workers must be at least 1, got 0"),
        # Before: a catalog name without a store was dropped, and the gateway served its own index.
        (["--catalog", "tools"], "--catalog 'tools' names a catalog in a Postgres store, and no store is given"),
        (["--workers", "2"], "--workers N serves HTTP: add --transport http"),
        (["--session-store", "nope://x"], "--session-store is not a store this gateway knows"),
        (["--transport", "http", "--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without authentication"),
        (["--transport", "http", "--no-auth", "--auth-tokens", "t.json", "--auth-scope", "s"], "--no-auth contradicts"),
    ],
)
def test_values_and_combinations_that_cannot_work_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    code, err = serve(tmp_path, capsys, *flags)
    lines = err.strip().splitlines()
    assert code == EXIT_USAGE and len(lines) == 1 and said in lines[0], err
    assert "(see 'toolsearch mcp serve --help')" in lines[0]


def test_a_file_that_cannot_be_used_is_not_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the flags are sound and the file is missing: the input is wrong, exit 1 (docs/cli.md)
    code, err = serve(tmp_path, capsys, "--transport", "http", "--auth-tokens", str(tmp_path / "missing.json"),
                      "--auth-scope", "tools")
    assert code == EXIT_USER_ERROR and "--auth-tokens" in err and "cannot read it" in err, err
    code, err = serve(tmp_path, capsys, "--tool-policy", str(tmp_path / "missing.json"))
    assert code == EXIT_USER_ERROR and "cannot read it" in err, err


def test_python_m_toolsearch_mcp_is_the_same_command_with_the_same_exit_codes(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"absent": {"command": str(tmp_path / "no-such-server")}}}))
    done = subprocess.run([sys.executable, "-m", "toolsearch.mcp", "--config", str(config), "--port", "9"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr  # a usage error, as `toolsearch mcp serve` answers it (it said 1)
    assert "--port applies to the HTTP transport only" in done.stderr and "absent" not in done.stderr
