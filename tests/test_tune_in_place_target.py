"""`toolsearch tune INDEX` (in place) checks before anything is read or trained that it may replace INDEX."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from capabilities import CAP_DAC_OVERRIDE, as_any_user

from toolsearch import Tool, ToolIndex
from toolsearch.cli import EXIT_USER_ERROR, main
from toolsearch.usage import usage_path

TOOLS = [
    Tool("send_email", "Send an email message to one or more recipients."),
    Tool("get_weather", "Current weather and forecast for a city."),
    Tool("create_invoice", "Create a customer invoice with line items."),
    Tool("track_shipment", "Track a parcel by its tracking number."),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ToolIndex.build(TOOLS, backend="hybrid").save(tmp_path_factory.mktemp("built") / "idx")


def test_an_index_folder_holding_the_users_file_is_refused_before_the_log_is_read(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = tmp_path / "copied" / "idx"
    shutil.copytree(built, copied)  # as `cp -rL` copies an index
    (copied / "README.txt").write_text("notes the user keeps beside the index files\n")
    # A usage log that cannot even be read: before, it (and with a good log, the whole training) came first, and
    # the refusal came from the save at the end.
    usage_path(copied).write_text("{not json")
    code = main(["tune", str(copied), "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR, err
    assert f"{copied} holds files toolsearch did not write (README.txt); replacing the index would delete them" in err
    assert "--out DIR saves it elsewhere" in err and "usage log" not in err
    assert (copied / "README.txt").exists()


def test_an_index_in_a_folder_this_user_may_not_write_is_refused_before_the_log_is_read(
    built: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shutil.copytree(built, shared / "idx")
    usage_path(shared / "idx").write_text("{not json")
    shared.chmod(0o555)  # an index shared read-only with this user (the audit's case: another user's folder)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "toolsearch", "tune", str(shared / "idx"), "--epochs", "1"], capture_output=True,
            text=True, timeout=300, stdin=subprocess.DEVNULL,
            preexec_fn=as_any_user(CAP_DAC_OVERRIDE),  # with it, root writes into a 0555 folder
        )
    finally:
        shared.chmod(0o755)
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    assert f"cannot write an index in {shared}:" in proc.stderr and "Permission denied" in proc.stderr, proc.stderr
    assert "--out DIR saves it elsewhere" in proc.stderr and "usage log" not in proc.stderr
    assert "training" not in proc.stderr and sorted(p.name for p in shared.iterdir()) == ["idx", "idx.usage.json"]
