"""Where `toolsearch demo` keeps its index without --cache-dir: `demo/` in the caches' folder (`_cache_dir`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsearch.cli import main

# TOOLSEARCH_CACHE_DIR as given (None: unset) -> the demo's folder under the test's home folder
CASES = {
    "set": ("{home}/caches", "caches/demo"),
    "set with a ~": ("~/caches", "caches/demo"),
    "unset": (None, ".cache/toolsearch/demo"),
    "empty": ("", ".cache/toolsearch/demo"),  # as unset
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_demo_keeps_its_index_in_the_caches_folder(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env, expected = CASES[case]
    monkeypatch.setenv("HOME", str(tmp_path))
    if env is None:
        monkeypatch.delenv("TOOLSEARCH_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", env.format(home=tmp_path))
    # a file where the folder would be: the demo names the folder it would use, and stops before building anything
    folder = tmp_path / expected
    folder.parent.mkdir(parents=True)
    folder.write_text("a file, not a folder")
    code = main(["demo", "--backend", "bm25"])
    err = capsys.readouterr().err
    assert code != 0 and f"the demo's cache folder {folder} is a file, not a folder" in err, err
