"""A usage source that reads as a URL but names no usage store (`valkey://`, `redis+sentinel://`, the one-slash slip
`redis:/`) is refused as a URL, naming the known schemes, its password hidden everywhere: the message, the
`--debug` traceback, `usage import` too. Before, it was read as a file path and the OS error quoted it whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.cli import EXIT_USER_ERROR, main
from toolsearch.usage import UsageError
from toolsearch.usage_cli import read_export, read_usage

PASSWORD = "PWSECRET444"
TOOLS = [Tool("weather_get", "Get the weather for a city"), Tool("email_send", "Send an email")]


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return ToolIndex.build(TOOLS, backend="bm25").save(tmp_path / "idx")


@pytest.mark.parametrize(("source", "shown"), [
    (f"valkey://:{PASSWORD}@127.0.0.1:6379/0",
     "the usage source valkey://***@127.0.0.1:6379/0 names no usage store toolsearch knows (the known schemes: "
     "memory, redis, rediss, unix): give a URL of one of those, or the path of a usage file or export"),
    (f"redis+sentinel://:{PASSWORD}@127.0.0.1:26379/mymaster",
     "the usage source redis+sentinel://***@127.0.0.1:26379/mymaster names no usage store toolsearch knows"),
    (f"redis:/:{PASSWORD}@127.0.0.1:6379/0",
     "the usage source redis:/... has one '/' after 'redis:' where a URL has two: write redis://***@127.0.0.1:6379/0"),
    (f"Valkey:/alice:{PASSWORD}@cache", "the usage source Valkey://***@cache names no usage store"),
])
def test_tune_refuses_a_url_of_an_unknown_store_with_its_password_hidden(
    index: Path, source: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError) as refused:
        read_usage(source, "catalog")
    assert shown in str(refused.value) and PASSWORD not in str(refused.value)
    assert main(["tune", str(index), "--usage", source]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert shown in err and PASSWORD not in err, err
    assert main(["tune", str(index), "--usage", source, "--debug"]) == EXIT_USER_ERROR  # the traceback too
    err = capsys.readouterr().err
    assert "Traceback" in err and shown in err and PASSWORD not in err, err


def test_usage_import_refuses_a_url_with_its_password_hidden(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=r"^valkey://\*\*\*@127.0.0.1:6379/0 is a URL, not a usage export: give the "
                       r"path of a file that `toolsearch usage export` wrote, or '-' for standard input$"):
        read_export(f"valkey://:{PASSWORD}@127.0.0.1:6379/0")
    assert main(["usage", "import", str(index), f"redis:/:{PASSWORD}@127.0.0.1:6379/0", "--debug"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "redis://***@127.0.0.1:6379/0 is a URL, not a usage export" in err and PASSWORD not in err, err


@pytest.mark.parametrize("name", ["C:/usage.json", "usage:v2.json", "./redis:/x.json", "-"])
def test_a_path_that_only_holds_a_colon_is_still_read_as_a_file(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a Windows drive, a colon in a file name or standard input is no URL: the file's own error, as before
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "empty", "w+") as empty:
        monkeypatch.setattr("sys.stdin", empty)
        with pytest.raises(UsageError, match=r"is not a readable usage export \(.*(No such file|Expecting value)"):
            read_usage(name, "catalog")
