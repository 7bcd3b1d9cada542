"""An index's private files in the temporary folder survive a real cleaner (systemd-tmpfiles), forks and removal."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tuned_model import tuned_model  # noqa: F401  (a fixture)

# Every kind of private folder an index keeps in the temporary folder, then a cleaner that removes everything
# unlocked there whatever its age ("0"), then a change and a save of each index.
CLEANED = textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path
    from toolsearch import Tool, ToolIndex
    from toolsearch.embeddings import ToolsEmbedder
    work, tmp, cleaner, tuned = (Path(a) for a in sys.argv[1:5])
    tools = [Tool("send_email", "Send an email message to a recipient."), Tool("get_weather", "Weather for a city.")]
    indexes = {"bm25 built": ToolIndex.build(tools, backend="bm25"),
               "hybrid built": ToolIndex.build(tools, backend="hybrid")}
    for backend in ("bm25", "hybrid"):
        ToolIndex.build(tools, backend=backend).save(work / backend)
        indexes[backend + " loaded"] = loaded = ToolIndex.load(work / backend)
        loaded.upsert([Tool("book_flight", "Book a flight to a city.")])  # now from a private copy
    ToolIndex.build(tools, backend="hybrid", embedder=ToolsEmbedder(query_model=tuned)).save(work / "carried")
    indexes["carried encoder"] = ToolIndex.load(work / "carried")  # its encoder runs from a private copy
    before = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))
    run = subprocess.run(["systemd-tmpfiles", "--clean", str(cleaner)], capture_output=True, text=True)
    out = {"cleaner": [run.returncode, run.stderr], "kept": before == sorted(str(p.relative_to(tmp))
                                                                            for p in tmp.rglob("*"))}
    for label, index in indexes.items():
        try:
            index.upsert([Tool("pay_bill", "Pay a utility bill.")])
            index.save(work / "again" / label.replace(" ", "-"))
            out[label] = ToolIndex.load(work / "again" / label.replace(" ", "-")).search("pay my bill", 1).names
        except Exception as exc:
            out[label] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
""")


def _cleaner() -> str:
    tool = shutil.which("systemd-tmpfiles")
    assert tool is not None, "systemd-tmpfiles is missing: .ci/setup.d/systemd-tmpfiles.sh installs it"
    return tool


def _ours(tmp: Path) -> list[Path]:
    # (onnxruntime's telemetry may leave a `.ses` file in the temporary folder: not toolsearch's)
    return [p for p in tmp.iterdir() if p.name.startswith("toolsearch-")]


def _run(script: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_an_index_can_still_change_and_save_after_a_cleaner_of_the_temporary_folder_ran(
    tmp_path: Path, tuned_model: Path,  # noqa: F811
) -> None:
    # Before: a cleaner removed every private folder, and each index failed at its next change ("Failed to open
    # file for write ... No such file or directory" from tantivy; a carried encoder at its save).
    _cleaner()
    tmp, work = tmp_path / "tmp", tmp_path / "work"
    tmp.mkdir()
    work.mkdir()
    cleaner = tmp_path / "clean.conf"
    cleaner.write_text(f"e {tmp} - - - 0\n")  # age 0: whatever is not locked goes
    proc = _run(CLEANED, tmp, str(work), str(tmp), str(cleaner), str(tuned_model))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out.pop("cleaner") == [0, ""]
    assert out.pop("kept") is True  # the cleaner removed nothing: every private folder is under the locked one
    kinds = ["bm25 built", "hybrid built", "bm25 loaded", "hybrid loaded", "carried encoder"]
    assert out == {kind: ["pay_bill"] for kind in kinds}
    assert _ours(tmp) == []  # and the process removed its own folder when it ended

    # The cleaner does remove what no process holds: the configuration above is not a no-op.
    (tmp / "left-over").mkdir()
    (tmp / "left-over" / "file").write_text("x")
    subprocess.run([_cleaner(), "--clean", str(cleaner)], check=True)
    assert not (tmp / "left-over" / "file").exists()


FORKED = textwrap.dedent("""
    import os, sys
    from toolsearch import Tool, ToolIndex
    tools = [Tool("send_email", "Send an email message to a recipient."), Tool("get_weather", "Weather for a city.")]
    index = ToolIndex.build(tools, backend="bm25")
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a normal exit: the child runs the exit handlers it inherited
    os.waitpid(child, 0)
    index.upsert([Tool("pay_bill", "Pay a utility bill.")])
    print(index.search("pay my bill", 1).names)
""")


def test_a_forked_child_that_exits_leaves_its_parents_private_folders(tmp_path: Path) -> None:
    # Before: the child's exit handlers removed the parent's bm25 folder, and the parent's next change failed.
    proc = _run(FORKED, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "['pay_bill']"
    assert _ours(tmp_path) == []


REMOVED = textwrap.dedent("""
    import json, shutil, sys
    from pathlib import Path
    from toolsearch import BackendError, Tool, ToolIndex
    work, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    tools = [Tool("send_email", "Send an email message to a recipient."), Tool("get_weather", "Weather for a city.")]
    ToolIndex.build(tools, backend="hybrid").save(work / "idx")
    loaded = ToolIndex.load(work / "idx")
    loaded.upsert([Tool("book_flight", "Book a flight to a city.")])
    (folder,) = tmp.glob("toolsearch-*")  # the process's folder, in this test's own temporary folder
    shutil.rmtree(folder)  # with every private folder in it, as a cleaner that ignores the lock would
    out = {"search": loaded.search("send an email", 1).names}  # searches still answer from memory
    for step in ("upsert", "save"):
        try:
            if step == "upsert":
                loaded.upsert([Tool("pay_bill", "Pay a utility bill.")])
            else:
                loaded.save(work / "elsewhere")
            out[step] = "no error"
        except BackendError as exc:
            out[step] = str(exc)
    out["elsewhere"] = (work / "elsewhere").exists()
    fresh = ToolIndex.build(tools, backend="bm25")  # a later index gets a new folder of the process
    fresh.upsert([Tool("pay_bill", "Pay a utility bill.")])
    out["fresh"] = fresh.search("pay my bill", 1).names
    out["folders"] = len(list(tmp.glob("toolsearch-*")))
    print(json.dumps(out))
""")


def test_a_private_folder_removed_anyway_is_named_in_a_clear_error(tmp_path: Path) -> None:
    # A cleaner that ignores the lock (or a person): the index says what happened instead of a bare tantivy error.
    tmp, work = tmp_path / "tmp", tmp_path / "work"
    tmp.mkdir()
    work.mkdir()
    proc = _run(REMOVED, tmp, str(work), str(tmp))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out.pop("search") == ["send_email"]
    for step in ("upsert", "save"):
        assert re.search(r"private index folder .* was removed while in use.*set TMPDIR", out.pop(step)), step
    assert out == {"elsewhere": False, "fresh": ["pay_bill"], "folders": 1}
