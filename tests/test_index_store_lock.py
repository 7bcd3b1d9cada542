"""A local writer of an index name that waits for another says whom for, and gives up on one stopped or hung."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from toolsearch import IndexStore, StoredIndexError, Tool
from toolsearch._errors import InvalidArgumentError
from toolsearch.cli import EXIT_OK, main

TOOLS = [Tool("finance_get_invoice", "Get an invoice by its number."), Tool("weather_now", "Current weather.")]

# A writer of the name, as every build, save and rm takes its turn (toolsearch.store._writer_lock); "stop" stops it
# while it holds the lock, as Ctrl-Z stops a build mid-save, else it works on for that many seconds.
WRITER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from toolsearch.store import _writer_lock
    with _writer_lock(Path(sys.argv[1])):
        print("holding", flush=True)
        if sys.argv[2] == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        else:
            time.sleep(float(sys.argv[2]))
""")
# A writer of a toolsearch from before the beat: it locks the file and writes nothing in it.
OLDER_WRITER = textwrap.dedent("""
    import fcntl, sys, time
    from pathlib import Path
    path = Path(sys.argv[1]).parent / f".{Path(sys.argv[1]).name}.lock"
    with path.open("ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("holding", flush=True)
        time.sleep(float(sys.argv[2]))
        path.unlink()
""")


@contextmanager
def writer(target: Path, how: str, script: str = WRITER) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the writer lock of `target` from the moment this yields."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(target), how], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_a_stopped_writer_is_named_and_given_up_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = IndexStore(tmp_path, lock_wait=3)
    store.build(TOOLS, backend="regex", name="x")
    with writer(tmp_path / "x", "stop") as stopped, caplog.at_level(logging.WARNING, logger="toolsearch"):
        # before: both waited without a word, and for ever
        for act in (lambda: store.remove("x"), lambda: store.build(TOOLS, backend="bm25", name="x")):
            with pytest.raises(StoredIndexError, match=rf"another writer of the index 'x' in .* \(pid {stopped.pid}\) "
                               r"holds its lock \(.x.lock\) and has shown no sign of life for 3 s: it is stopped"):
                act()
        said = [r.getMessage() for r in caplog.records]
        assert f"index 'x' in {tmp_path}: waiting for another writer of it (pid {stopped.pid}) to finish" in said[0]
        assert "gives up if it shows no sign of life for 3 s (lock_wait)" in said[0]
    # it changed nothing; with the stopped writer gone (the kernel drops its lock), rm goes through
    assert store.manifest("x").backend == "regex"
    assert store.remove("x") is None and store.names() == []


def test_a_busy_writer_is_waited_for_past_the_bound(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = IndexStore(tmp_path, lock_wait=3)
    store.build(TOOLS, backend="regex", name="x")
    # holding the lock for longer than lock_wait, beating all along (a build of many tools holds it for minutes)
    with writer(tmp_path / "x", "5") as busy, caplog.at_level(logging.WARNING, logger="toolsearch"):
        assert busy.poll() is None
        name, _, reused = store.build(TOOLS, backend="bm25", name="x")
    assert (name, reused) == ("x", False) and store.manifest("x").backend == "bm25"
    assert f"(pid {busy.pid})" in caplog.records[0].getMessage()


def test_a_writer_of_an_older_toolsearch_is_waited_for_however_long_it_takes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = IndexStore(tmp_path, lock_wait=3)
    store.build(TOOLS, backend="regex", name="x")
    # it does not beat: its silence says nothing, so it is not given up on
    with writer(tmp_path / "x", "5", OLDER_WRITER), caplog.at_level(logging.WARNING, logger="toolsearch"):
        assert store.remove("x") is None
    assert store.names() == []
    said = caplog.records[0].getMessage()
    assert "(a process that does not say which)" in said and "waits for however long it takes" in said


def test_rm_says_on_stderr_whom_it_waits_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    IndexStore(tmp_path).build(TOOLS, backend="regex", name="x")
    with writer(tmp_path / "x", "2.5") as busy:
        code = main(["rm", "x", "--root", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    assert f"waiting for another writer of it (pid {busy.pid}) to finish" in err and "removed index 'x'" in out


def test_the_lock_file_names_its_holder_and_is_gone_after(tmp_path: Path) -> None:
    with writer(tmp_path / "x", "stop") as stopped:
        lock = tmp_path / ".x.lock"
        assert lock.read_text().split()[0] == str(stopped.pid)
        with lock.open("ab") as handle, pytest.raises(BlockingIOError):
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.kill(stopped.pid, signal.SIGCONT)
        stopped.wait(timeout=60)
    assert not lock.exists()


@pytest.mark.parametrize("lock_wait", [0, -1, float("nan"), float("inf"), True, "60"])
def test_a_lock_wait_that_is_not_a_positive_number_of_seconds_is_refused(tmp_path: Path, lock_wait: object) -> None:
    with pytest.raises(InvalidArgumentError, match="IndexStore: lock_wait must be a positive number of seconds"):
        IndexStore(tmp_path, lock_wait=lock_wait)  # type: ignore[arg-type]


def test_rm_and_build_take_lock_wait_for_a_local_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    IndexStore(tmp_path).build(TOOLS, backend="regex", name="x")
    tools = tmp_path / "tools.json"
    tools.write_text('[{"name": "weather_now", "description": "Current weather."}]')
    # before: "--lock-wait applies to a catalog in Postgres" (exit 2), and the local wait was 60 s whatever was asked
    with writer(tmp_path / "x", "stop") as stopped:
        for argv in (["rm", "x"], ["build", str(tools), "--name", "x", "--rebuild", "--backend", "regex"]):
            code = main([*argv, "--root", str(tmp_path), "--lock-wait", "3"])
            err = capsys.readouterr().err
            assert code == 1, err
            assert f"(pid {stopped.pid})" in err and "no sign of life for 3 s" in err
    assert IndexStore(tmp_path).manifest("x").backend == "regex"
    assert main(["rm", "x", "--root", str(tmp_path), "--lock-wait", "0"]) == 2
    assert "--lock-wait must be a positive number of seconds" in capsys.readouterr().err


# A writer that signs its lock with a host name holding a space, then stops (Ctrl-Z) while holding it.
SPACED_HOST_WRITER = textwrap.dedent("""
    import fcntl, os, signal, sys
    from pathlib import Path
    path = Path(sys.argv[1]).parent / f".{Path(sys.argv[1]).name}.lock"
    with path.open("ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.truncate(0)
        handle.write(f"{os.getpid()} build box\\n".encode())
        handle.flush()
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
""")


def test_a_holder_on_a_host_whose_name_holds_a_space_is_given_up_on(tmp_path: Path) -> None:
    store = IndexStore(tmp_path, lock_wait=3)
    store.build(TOOLS, backend="regex", name="x")
    # before: a line of three words read as an older toolsearch's, which does not beat: waited for without end
    with (writer(tmp_path / "x", "stop", SPACED_HOST_WRITER) as stopped,
          pytest.raises(StoredIndexError, match=rf"\(pid {stopped.pid} on host build box\) holds its lock")):
        store.remove("x")


def test_a_host_name_that_is_not_utf8_signs_the_lock_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    # Linux lets a host name be any bytes; Python reads a Latin-1 `café-box` with a surrogate escape
    monkeypatch.setattr(socket, "gethostname", lambda: "caf\udce9-box")
    store = IndexStore(tmp_path)
    store.build(TOOLS, backend="regex", name="x")  # before: UnicodeEncodeError, from every local write
    assert store.remove("x") is None and store.names() == []
