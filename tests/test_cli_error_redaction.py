"""A credential in a command-line value (a URL given as `--model` or as a tool file) never reaches an error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsearch.cli import EXIT_USAGE, EXIT_USER_ERROR, main


@pytest.mark.parametrize(("argv", "exit_code", "shown"), [
    # the argument checks' usage errors (exit 2): before, the whole URL, password included
    (["--model", "https://bob:s3cret@models.example.com/enc"], EXIT_USAGE,
     "--model https://***@models.example.com/enc: unknown model 'https://***@models.example.com/enc'"),
    (["--model", "postgresql://bob:s3cret@db.example.com/catalog"], EXIT_USAGE,  # an easy slip for --store
     "--model postgresql://***@db.example.com/catalog: unknown model"),
    # an error of the command itself (exit 1): a URL given where a tool file goes
    (["https://bob:s3cret@tools.example.com/tools.json"], EXIT_USER_ERROR,
     "https://***@tools.example.com/tools.json: file not found"),
    # an argument that is not UTF-8, refused before anything is parsed
    (["https://bob:s3cret@tools.example.com/\udcfftools.json"], EXIT_USAGE,
     "('https://***@tools.example.com/\\udcfftools.json') holds the byte 0xFF"),
])
def test_an_error_never_shows_a_password_given_on_the_command_line(
    argv: list[str], exit_code: int, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text(json.dumps([{"name": "t", "description": "x"}]))
    sources = [] if argv[0] != "--model" else ["t.json"]
    code = main(["build", *sources, "--backend", "hybrid", "--root", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert code == exit_code, err
    assert "s3cret" not in err and "bob" not in err
    assert shown in err, err
