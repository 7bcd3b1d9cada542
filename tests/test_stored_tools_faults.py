"""A stored index's files changed under a loaded index, or not belonging together, and an odd folder in the root."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toolsearch import IndexFormatError, IndexStore, Tool
from toolsearch.cli import EXIT_OK, main
from toolsearch.store import _file_records, manifest_digest
from toolsearch.stored_tools import TABLE_FILE

_OVERWRITE_IN_PLACE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from toolsearch import IndexFormatError, IndexStore, Tool

    store = IndexStore(sys.argv[1])
    store.build([Tool(f"tool_{i}", f"does thing number {i} " + "word " * 30) for i in range(300)], "bm25", "big")
    index = store.open("big")
    assert index.search("thing number 5", 1).names == ["tool_5"]
    tools_file = (Path(sys.argv[1]) / "big").resolve() / "tools.jsonl"
    with tools_file.open("r+b") as fh:  # what cp or rsync --inplace over the folder does: same file, shorter
        fh.truncate(100)
    try:
        index.catalog["tool_250"]  # not parsed yet: read from the file as it is now
    except IndexFormatError as exc:
        print("refused:", exc)
    """
)


def test_a_tools_file_overwritten_in_place_is_a_clear_error_not_sigbus(tmp_path: Path) -> None:
    # Before: the file was memory-mapped, and reading past its new end killed the process with SIGBUS (rc -7)
    done = subprocess.run([sys.executable, "-c", _OVERWRITE_IN_PLACE, str(tmp_path / "root")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    message = done.stdout.strip()
    assert message.startswith("refused: ") and "tools.jsonl changed on disk after the index was loaded" in message
    assert "it now holds 100 bytes" in message and "Open the index again" in message and "rebuild it" in message


def test_a_name_table_that_disagrees_with_the_tools_is_an_error(tmp_path: Path) -> None:
    # Before: catalog["get_weather"] gave delete_repo's definition, and a search hit carried the other tool
    store = IndexStore(tmp_path)
    tools = [Tool("get_weather", "Get the weather"), Tool("delete_repo", "Delete a git repository")]
    store.build(tools, backend="bm25", name="i")
    folder = (tmp_path / "i").resolve()
    table = json.loads((folder / TABLE_FILE).read_text())
    table["names"].reverse()  # a hand edit or a writer's bug, its checksum redone as the library writes it
    (folder / TABLE_FILE).write_text(json.dumps(table))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] = _file_records(folder)
    manifest["digest"] = manifest_digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    index = store.open("i")
    expected = (r"tools\.jsonl:1: row 1 holds tool 'get_weather', but the index's name table \(tools\.table\.json\) "
                r"says 'delete_repo'; .* rebuild the index")
    with pytest.raises(IndexFormatError, match=expected):
        index.catalog["delete_repo"]
    with pytest.raises(IndexFormatError, match="holds tool 'delete_repo', but the index's name table"):
        index.search("weather", 1)


def test_list_shows_every_index_beside_a_folder_whose_name_no_command_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: `toolsearch list` failed with "invalid index name 'my index'" and listed nothing
    IndexStore(tmp_path / "src").build([Tool("get_weather", "Get the weather")], backend="bm25", name="a")
    root = tmp_path / "root"
    root.mkdir()
    for name in ("good", "my index"):  # copied in by hand: `cp -rL src/a "root/my index"`
        shutil.copytree(tmp_path / "src" / "a", root / name, symlinks=False)
    assert main(["--root", str(root), "list", "--json"]) == EXIT_OK
    listed = {e["name"]: e for e in json.loads(capsys.readouterr().out)["indexes"]}
    assert listed["good"]["health"] == "ok" and listed["good"]["tool_count"] == 1
    odd = listed["my index"]
    assert odd["path"] == str(root / "my index") and odd["health"] == f"damaged: {odd['error']}"
    assert "the folder 'my index' holds an index, but no command can open it by that name" in odd["error"]
    assert odd["error"].endswith("rename the folder")
    assert main(["--root", str(root), "list"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "good" in out and "my index: damaged: the folder 'my index' holds an index" in out
