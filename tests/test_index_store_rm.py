"""`IndexStore.remove` and `toolsearch rm` refuse, as `build --rebuild` does, an index holding the user's own files."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from toolsearch import IndexStore, StoredIndexError, Tool
from toolsearch.cli import EXIT_OK, EXIT_USER_ERROR, main
from toolsearch.usage import usage_path

TOOLS = [Tool("finance_get_invoice", "Get an invoice by its number."), Tool("weather_now", "Current weather.")]


def _refusals(store: IndexStore, name: str) -> None:
    """`build --rebuild` and `rm` of `name` both refuse, with one message naming the user's file."""
    acts: list[tuple[str, Callable[[], object]]] = [
        ("replacing", lambda: store.build(TOOLS, backend="regex", name=name, rebuild=True)),
        ("removing", lambda: store.remove(name)),
    ]
    for doing, act in acts:
        with pytest.raises(StoredIndexError, match=rf"{name} holds files toolsearch did not write \(my-notes.txt\); "
                           rf"{doing} the index would delete them"):
            act()


def test_rm_refuses_a_copied_index_folder_that_holds_the_users_file(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    store.build(TOOLS, backend="regex", name="t")
    # copied in as docs/cli.md says to copy an index (`cp -rL`: what the link points at), then a note added to it
    shutil.copytree(tmp_path / "t", tmp_path / "mytools")
    (tmp_path / "mytools" / "my-notes.txt").write_text("the user's own notes")
    usage_path(tmp_path / "mytools").write_text("{}")
    _refusals(store, "mytools")  # before: rm deleted the note without a word (the build refused)
    assert (tmp_path / "mytools" / "my-notes.txt").read_text() == "the user's own notes"
    assert usage_path(tmp_path / "mytools").exists()  # nothing of the index went either
    assert len(store.open("mytools")) == 2
    (tmp_path / "mytools" / "my-notes.txt").rename(tmp_path / "kept.txt")  # as the message says: moved out, then rm
    assert store.remove("mytools") == usage_path(tmp_path / "mytools")
    assert not (tmp_path / "mytools").exists() and (tmp_path / "kept.txt").exists()


def test_rm_refuses_an_index_whose_generation_got_the_users_file_through_its_link(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    store.build(TOOLS, backend="regex", name="linked")
    (tmp_path / "linked" / "my-notes.txt").write_text("the user's own notes")  # lands in the generation behind it
    _refusals(store, "linked")  # before: rm retired the generation, and the note with it
    assert (tmp_path / "linked" / "my-notes.txt").read_text() == "the user's own notes"
    assert store.names() == ["linked"] and len(store.open("linked")) == 2


def test_rm_of_a_link_to_an_index_elsewhere_still_only_unlinks_it(tmp_path: Path) -> None:
    elsewhere = IndexStore(tmp_path / "elsewhere")
    elsewhere.build(TOOLS, backend="regex", name="shared")
    (tmp_path / "elsewhere" / "shared" / "my-notes.txt").write_text("the user's own notes")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "mine").symlink_to(tmp_path / "elsewhere" / "shared")
    IndexStore(tmp_path / "root").remove("mine")  # nothing is deleted but the link: nothing to refuse
    assert not (tmp_path / "root" / "mine").is_symlink()
    assert (tmp_path / "elsewhere" / "shared" / "my-notes.txt").exists() and elsewhere.names() == ["shared"]


def test_the_cli_says_which_files_are_the_users_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = IndexStore(tmp_path)
    store.build(TOOLS, backend="regex", name="linked")
    (tmp_path / "linked" / "my-notes.txt").write_text("the user's own notes")
    code = main(["rm", "linked", "--root", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == EXIT_USER_ERROR and out == "", err
    assert err.strip().splitlines() == [
        f"toolsearch: error: {tmp_path / 'linked'} holds files toolsearch did not write (my-notes.txt); removing the "
        "index would delete them. Move them out (or delete them yourself), then remove 'linked' again"
    ]
    (tmp_path / "linked" / "my-notes.txt").unlink()
    assert main(["rm", "linked", "--root", str(tmp_path)]) == EXIT_OK
    assert store.names() == []
