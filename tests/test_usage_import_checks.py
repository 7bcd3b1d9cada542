"""What `usage import` checks in an export from elsewhere (its tools, its words against its text, its times, its text),
what `usage show` prints of logged text, and the advice a damaged `tune --usage FILE` gets."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.cli import main as cli_main
from toolsearch.learning import LearnedRanker, LearningIndex
from toolsearch.usage import FileUsageStore, UsageError, UsageLog, query_terms, usage_path
from toolsearch.usage_cli import read_usage

TOOLS = [
    Tool("email_send_message", "Send an email message to a recipient with a subject and body."),
    Tool("weather_get_forecast", "Get the weather forecast for a city for the next days."),
    Tool("repo_delete", "Permanently delete a code repository."),
]
OTHER_CATALOG = "0" * 64


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A bm25 index saved in tmp_path/idx, with no usage log yet."""
    folder = tmp_path / "idx"
    ToolIndex.build(TOOLS, backend="bm25").save(folder)
    return folder


def _catalog(folder: Path) -> str:
    return ToolIndex.load(folder).catalog.hash


def _export(path: Path, rows: list[tuple[str, str]], *, catalog: str = OTHER_CATALOG) -> Path:
    """An export (privacy raw) of `rows` (request, tool called), as `usage export` writes one."""
    log = UsageLog(catalog, privacy="raw")
    for text, tool in rows:
        log.add(text, tool, [tool])
    path.write_text(json.dumps(log.to_dict()))
    return path


def _edited(path: Path, change: Any) -> Path:
    data = json.loads(path.read_text())
    for row in data["entries"]:
        change(row)
    path.write_text(json.dumps(data))
    return path


def _stored(folder: Path) -> list[str]:
    log = FileUsageStore(usage_path(folder)).load(_catalog(folder))
    return [] if log is None else [e.called for e in log]


# --- tools the index lacks, another catalog --------------------------------------------------------


def test_an_export_calling_tools_the_index_lacks_is_refused_naming_them(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _export(tmp_path / "other.json", [("wipe the gitlab", "gitlab_wipe_everything"),
                                              ("weather in lisbon", "weather_get_forecast")])
    # Before: "imported 2 new usage entries", and `usage show` listed gitlab_wipe_everything as this index's top tool
    assert cli_main(["usage", "import", str(folder), str(other)]) == 1
    err = capsys.readouterr().err
    assert f"{other}: 1 of its 2 entries call tools idx does not have: 'gitlab_wipe_everything'" in err, err
    assert "exported from another catalog (000000000000, this index's is " in err
    assert "Nothing was imported" in err and "--allow-unknown-tools" in err
    assert _stored(folder) == []


def test_allow_unknown_tools_takes_them_with_a_note(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _export(tmp_path / "other.json", [("wipe the gitlab", "gitlab_wipe_everything"),
                                              ("weather in lisbon", "weather_get_forecast")])
    assert cli_main(["usage", "import", str(folder), str(other), "--allow-unknown-tools"]) == 0
    err = capsys.readouterr().err
    assert f"note: {other} was exported from another catalog (000000000000; this index's is " in err
    assert "1 of them calling tools it does not have" in err
    assert _stored(folder) == ["gitlab_wipe_everything", "weather_get_forecast"]


def test_an_export_of_another_catalog_with_known_tools_is_taken_with_a_note(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _export(tmp_path / "other.json", [("weather in lisbon", "weather_get_forecast")])
    assert cli_main(["usage", "import", str(folder), str(other)]) == 0
    captured = capsys.readouterr()
    assert "was exported from another catalog" in captured.err and "imported 1 new usage entries" in captured.out
    # an export of this index's own catalog says nothing of the kind
    own = _export(tmp_path / "own.json", [("email bob", "email_send_message")], catalog=_catalog(folder))
    assert cli_main(["usage", "import", str(folder), str(own)]) == 0
    assert "another catalog" not in capsys.readouterr().err
    assert _stored(folder) == ["weather_get_forecast", "email_send_message"]


def test_allow_unknown_tools_goes_with_import_only(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["usage", "show", str(folder), "--allow-unknown-tools"]) == 2
    assert "--allow-unknown-tools goes with `usage import INDEX FILE`" in capsys.readouterr().err



def test_a_backup_of_this_catalog_naming_a_retired_tool_is_restored_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The documented round trip: the log was carried over a rebuild that retired repo_delete (UsageLog.merge, as the
    # gateway does and docs/learning.md "Limits" says), then exported, cleared and imported.
    folder = tmp_path / "idx"
    ToolIndex.build(TOOLS, backend="bm25").save(folder)
    store = FileUsageStore(usage_path(folder))
    before = UsageLog(_catalog(folder), privacy="raw")
    before.add("delete the old test repository", "repo_delete", ["repo_delete"])
    before.add("email my manager", "email_send_message", ["email_send_message"])
    ToolIndex.build([t for t in TOOLS if t.name != "repo_delete"], backend="bm25").save(folder)
    carried = UsageLog(_catalog(folder), privacy="raw")
    carried.merge(before)
    store.save(carried)
    backup = tmp_path / "backup.json"
    assert cli_main(["usage", "export", str(folder), str(backup)]) == 0
    assert cli_main(["usage", "clear", str(folder)]) == 0
    capsys.readouterr()
    # Before: exit 1, "it names them although exported for this catalog. ... Import an export of this index", with
    # the log already cleared
    assert cli_main(["usage", "import", str(folder), str(backup)]) == 0
    err = capsys.readouterr().err
    assert f"note: {backup}: 1 of its 2 entries call tools idx no longer has: 'repo_delete'" in err, err
    assert "vote for nothing in learned ranking until such a tool returns" in err
    assert "another catalog" not in err
    assert _stored(folder) == ["repo_delete", "email_send_message"]


def test_an_export_that_records_no_catalog_and_calls_unknown_tools_is_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nameless = _export(tmp_path / "nameless.json", [("wipe the gitlab", "gitlab_wipe_everything")], catalog="")
    assert cli_main(["usage", "import", str(folder), str(nameless)]) == 1
    err = capsys.readouterr().err
    assert "it does not say which catalog it was exported for" in err and "--allow-unknown-tools" in err
    assert _stored(folder) == []

# --- words against text -----------------------------------------------------------------------------


def test_an_imported_raw_entry_votes_by_its_text_not_by_the_words_it_lists(folder: Path, tmp_path: Path) -> None:
    export = _export(tmp_path / "export.json", [("weather in lisbon tomorrow", "weather_get_forecast")] * 3,
                     catalog=_catalog(folder))
    _edited(export, lambda row: row.update(terms=["send", "an", "email", "to", "my", "manager"]))
    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    index = ToolIndex.load(folder)
    stored = FileUsageStore(usage_path(folder)).load(index.catalog.hash)
    assert stored is not None and len(stored) == 3
    assert {e.terms for e in stored} == {query_terms("weather in lisbon tomorrow")}
    learned = LearningIndex(index, LearnedRanker(stored, refresh_seconds=0))
    query = "send an email to my manager"
    # Before: ['weather_get_forecast', 'email_send_message'], by votes `usage show` could not show
    assert learned.search(query, 3).names == index.search(query, 3).names
    assert learned.search("weather in lisbon tomorrow", 3).names[0] == "weather_get_forecast"


# --- times ---------------------------------------------------------------------------------------------


def test_an_entry_dated_past_tomorrow_is_refused_naming_it(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(tmp_path / "skewed.json", [("weather in lisbon", "weather_get_forecast"),
                                                ("email bob", "email_send_message")], catalog=_catalog(folder))
    ten_years = 10 * 365 * 86400
    _edited(export, lambda row: row.update(at=row["at"] + (ten_years if row["called"] == "email_send_message" else 0)))
    # Before: taken; in a full log such entries stay the newest, and every new entry was dropped on save
    assert cli_main(["usage", "import", str(folder), str(export)]) == 1
    err = capsys.readouterr().err
    assert f"{export}, entry 1: its time (at) is 20" in err and "more than a day past this machine's clock" in err
    assert f"Fix {export} or export it again" in err
    assert _stored(folder) == []


def test_an_entry_a_little_ahead_of_this_clock_is_taken(folder: Path, tmp_path: Path) -> None:
    export = _export(tmp_path / "ahead.json", [("weather in lisbon", "weather_get_forecast")],
                     catalog=_catalog(folder))
    _edited(export, lambda row: row.update(at=time.time() + 3600))  # another machine's clock, an hour ahead
    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    assert _stored(folder) == ["weather_get_forecast"]


# --- terminal escapes ----------------------------------------------------------------------------------


def test_imported_request_text_with_an_escape_is_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(tmp_path / "esc.json", [("send an email \x1b[2J\x1b[31mPWNED\x1b[0m", "email_send_message")],
                     catalog=_catalog(folder))
    assert cli_main(["usage", "import", str(folder), str(export)]) == 1
    err = capsys.readouterr().err
    assert f"{export}, entry 0: its request text holds U+001B (position 14), an ANSI escape character" in err
    assert "\x1b" not in err and _stored(folder) == []


def test_usage_show_writes_logged_text_out_instead_of_sending_escapes_to_the_terminal(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = UsageLog(_catalog(folder), privacy="raw")
    log.add("send an email \x1b[2J\x1b[31mPWNED\x1b[0m", "email_send_message", ["email_send_message"], by="aa")
    log.add("weather in lisbon", "weather\x1b[31m_tool", ["weather\x1b[31m_tool"])  # a library caller's tool name
    FileUsageStore(usage_path(folder)).save(log)
    assert cli_main(["usage", "show", str(folder)]) == 0
    out = capsys.readouterr().out
    # Before: the escapes reached the terminal as they were (clear the screen, recolour what follows)
    assert "\x1b" not in out
    assert "'send an email \\x1b[2J\\x1b[31mPWNED\\x1b[0m'" in out
    assert "-> 'weather\\x1b[31m_tool'" in out
    assert "  weather in lisbon " in out  # plain text is shown as it was


# --- tune --usage FILE advice --------------------------------------------------------------------------


def test_a_damaged_usage_file_read_for_tuning_is_the_one_to_fix_not_the_indexs_log(
    folder: Path, tmp_path: Path
) -> None:
    catalog = _catalog(folder)
    own = FileUsageStore(usage_path(folder))
    log = UsageLog(catalog, privacy="raw")
    log.add("weather in lisbon", "weather_get_forecast", ["weather_get_forecast"])
    own.save(log)
    gateway = tmp_path / "gateway.usage.json"
    gateway.write_text(usage_path(folder).read_text().replace("weather in lisbon", "weather in paris"))
    with pytest.raises(UsageError) as caught:
        read_usage(str(gateway), catalog)
    said = str(caught.value)
    # Before: "...; delete it or run `toolsearch usage clear`", which deleted the index's intact log instead
    assert said.startswith(f"{gateway} does not match its checksum (edited or corrupt); fix {gateway} or remove it")
    assert "delete it or run" not in said and f"deletes only the usage log beside the index, not {gateway}" in said
    # the index's own file, read as its own, still gets the advice that fits it
    usage_path(folder).write_text(gateway.read_text())
    with pytest.raises(UsageError, match=r"delete it or run `toolsearch usage clear`, or restore it from an export"):
        own.load(catalog)
