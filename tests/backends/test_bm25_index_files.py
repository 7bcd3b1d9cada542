"""bm25's files on disk: their modes, a read-only install, a full temporary folder and a path that is not UTF-8."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from capabilities import CAP_DAC_OVERRIDE, drop_capabilities

from toolsearch import IndexStore, Tool, ToolIndex
from toolsearch.store import _file_records, index_key, manifest_digest

PYTHON = sys.executable
TOOLS = [Tool("send_email", "Send an email message to a recipient."), Tool("get_weather", "Weather for a city.")]
# Enough text that tantivy's segment files pass a few kilobytes (the RLIMIT_FSIZE below).
MANY = [Tool(f"tool_{i}", f"does thing {i} with widgets, gadgets and sprockets") for i in range(3000)]


def _walk(folder: Path) -> list[Path]:
    return [folder, *sorted(folder.rglob("*"))]


def _modes_outside_the_umask(folder: Path, umask: int) -> list[str]:
    """Every file and folder under `folder` whose mode is not what a plain write under `umask` gives."""
    wrong = []
    for path in _walk(folder):
        want = (0o777 if path.is_dir() else 0o666) & ~umask
        if stat.S_IMODE(path.stat().st_mode) != want:
            wrong.append(f"{path.relative_to(folder)} {stat.S_IMODE(path.stat().st_mode):o}")
    return wrong


def _build_under(umask: int, build: Callable[[], object]) -> None:
    old = os.umask(umask)
    try:
        build()
    finally:
        os.umask(old)


# --- modes --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o002], ids=["umask022", "umask002"])
def test_a_saved_index_has_the_modes_of_any_file_written(tmp_path: Path, umask: int) -> None:
    # Before: backend/tantivy was 0700 (the mode of bm25's private mkdtemp folder, copied with it), so a service user
    # could not read an index built as root in an image: "backend/tantivy/.managed.json: Permission denied".
    _build_under(umask, lambda: IndexStore(tmp_path).build(TOOLS, "bm25", "built"))
    assert _modes_outside_the_umask((tmp_path / "built").resolve(), umask) == []
    # A loaded index that is changed and saved again copies its files from a private scratch too.
    index = IndexStore(tmp_path).open("built")
    index.upsert([Tool("get_time", "The current time in a city.")])
    _build_under(umask, lambda: IndexStore(tmp_path).save(index, "again"))
    assert _modes_outside_the_umask((tmp_path / "again").resolve(), umask) == []
    assert IndexStore(tmp_path).open("again").search("time in a city", 1).names == ["get_time"]


@pytest.mark.slow
def test_a_saved_hybrid_index_has_the_modes_of_any_file_written(tmp_path: Path) -> None:
    _build_under(0o022, lambda: IndexStore(tmp_path).build(TOOLS, "hybrid", "built"))
    assert _modes_outside_the_umask((tmp_path / "built").resolve(), 0o022) == []


# --- an index installed read-only ---------------------------------------------------------------------------


def _as_a_reader(script: str, *args: str, tmpdir: Path, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` in a process for which modes hold (any user; root without its override), with its own TMPDIR,
    and optionally a limit on the size of any file it writes (a write past it fails as on a full disk)."""
    tmpdir.mkdir(exist_ok=True)

    def before() -> None:
        if os.geteuid() == 0:  # without it, root writes to a 0555 folder; it reads what the test lets everyone read
            drop_capabilities(CAP_DAC_OVERRIDE)
        if limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG) instead of killing the process
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return subprocess.run([PYTHON, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "TMPDIR": str(tmpdir)}, preexec_fn=before)


def _read_only(folder: Path) -> None:
    """`chmod -R a+rX,a-w`: what a package, a Nix store or an image with read-only files gives."""
    for path in _walk(folder):
        mode = stat.S_IMODE(path.stat().st_mode) | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
        if path.is_dir():
            mode |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable_again(folder: Path) -> None:
    for path in _walk(folder):
        path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)


OPEN = """
    import json, sys
    from pathlib import Path
    from toolsearch import IndexStore, ToolSearchError
    root = Path(sys.argv[1])
    try:
        (root / "probe").write_text("x")
        out = {"writable": True}
    except OSError:
        out = {"writable": False}
    for name in sys.argv[2:]:
        try:
            out[name] = IndexStore(root).open(name).search("send an email", 1).names
        except ToolSearchError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
"""


def _open_read_only(root: Path, *names: str, tmpdir: Path, limit: int | None = None) -> dict[str, object]:
    _read_only(root)
    try:
        done = _as_a_reader(OPEN, str(root), *names, tmpdir=tmpdir, limit=limit)
    finally:
        _writable_again(root)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    assert result.pop("writable") is False  # the modes held for the reader
    return result


def test_an_index_installed_read_only_opens(tmp_path: Path) -> None:
    # Before: "/tmp/toolsearch-.../readonly-.../backend: the tantivy files cannot be opened (Failed to acquire
    # Lockfile: ... PermissionDenied ...); rebuild the index": the private copy kept the read-only modes.
    root = tmp_path / "root"
    for backend in ("bm25", "regex"):
        IndexStore(root).build(TOOLS, backend, backend)
    result = _open_read_only(root, "bm25", "regex", tmpdir=tmp_path / "tmp")
    assert result == {"bm25": ["send_email"], "regex": ["send_email"]}
    # the private copies went with the process
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("toolsearch-")]


@pytest.mark.slow
def test_a_hybrid_index_installed_read_only_opens(tmp_path: Path) -> None:
    root = tmp_path / "root"
    IndexStore(root).build(TOOLS, "hybrid", "hybrid")
    assert _open_read_only(root, "hybrid", tmpdir=tmp_path / "tmp") == {"hybrid": ["send_email"]}


def test_an_error_from_the_private_copy_names_the_index_not_the_copy(tmp_path: Path) -> None:
    # A consistent forgery (the manifest signed again over an edited bm25.json) makes bm25 refuse the private copy.
    root = tmp_path / "root"
    IndexStore(root).build(TOOLS, "bm25", "bm25")
    generation = (root / "bm25").resolve()
    (generation / "backend" / "bm25.json").write_text(json.dumps({"layout": 99}) + "\n")
    manifest = json.loads((generation / "manifest.json").read_text())
    manifest["files"] = _file_records(generation)
    manifest["key"] = index_key(manifest["catalog_hash"], manifest["backend"], manifest["options"])
    manifest.pop("digest")
    manifest["digest"] = manifest_digest(manifest)
    (generation / "manifest.json").write_text(json.dumps(manifest))
    said = str(_open_read_only(root, "bm25", tmpdir=tmp_path / "tmp")["bm25"])
    # Before: "/tmp/.../toolsearch-.../readonly-.../backend: bm25 index unusable: ..."
    assert said.startswith(f"IndexFormatError: {root / 'bm25' / 'backend'}: bm25 index unusable"), said
    assert "readonly-" not in said and str(tmp_path / "tmp") not in said


def test_a_read_only_index_whose_private_copy_has_no_room_says_so(tmp_path: Path) -> None:
    root = tmp_path / "root"
    IndexStore(root).build(MANY, "bm25", "many")
    said = str(_open_read_only(root, "many", tmpdir=tmp_path / "tmp", limit=4096)["many"])
    assert said.startswith("StoredIndexError: ") and "its backend folder is read-only" in said, said
    assert "has no room (File too large)" in said and "set TMPDIR" in said and "rebuild" not in said


LOAD_TANTIVY = """
    import sys
    from pathlib import Path
    from toolsearch import Tool, ToolSearchError
    from toolsearch.backends import bm25
    try:
        bm25.load(Path(sys.argv[1]), [Tool("send_email"), Tool("get_weather")])
    except ToolSearchError as exc:
        print(f"{type(exc).__name__}: {exc}")
"""


def test_a_tantivy_folder_the_user_cannot_lock_is_named_with_what_to_do(tmp_path: Path) -> None:
    # Before: "...: the tantivy files cannot be opened (Failed to acquire Lockfile: ...); rebuild the index", and a
    # rebuild writes the same folder again.
    IndexStore(tmp_path / "root").build(TOOLS, "bm25", "bm25")
    folder = (tmp_path / "root" / "bm25").resolve() / "backend"
    _read_only(folder / "tantivy")
    try:
        done = _as_a_reader(LOAD_TANTIVY, str(folder), tmpdir=tmp_path / "tmp")
    finally:
        _writable_again(folder / "tantivy")
    said = done.stdout.strip()
    assert said.startswith(f"StoredIndexError: {folder}: tantivy takes a lock file in {folder / 'tantivy'}"), said
    assert "make that folder writable" in said and "rebuild" not in said


# --- a full temporary folder --------------------------------------------------------------------------------


BUILD_WITH_NO_ROOM = """
    import resource, sys
    from toolsearch import BackendError, Tool
    from toolsearch.backends import bm25
    backend = bm25.create()
    backend.add([Tool("first", "the first tool")])
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    try:
        backend.add([Tool(f"tool_{i}", f"does thing {i} with widgets, gadgets and sprockets") for i in range(3000)])
    except BackendError as exc:
        print(f"BackendError: {exc}")
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    backend.add([Tool("zebra", "a zebra")])  # room again: the next change is kept
    print(len(backend), backend.search("zebra", 1).hits[0].name)
"""


def test_a_full_temporary_folder_is_a_backend_error_and_the_next_change_is_kept(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes a write past 4 kB fail (EFBIG) in this process only, as on a full disk, for any user.
    # Before: a bare ValueError: "Internal error: 'File too large (os error 27)'" where the commit met the failure,
    # "An index writer was killed ... (io::Error most likely)" where the writer's thread did (which of the two
    # depends on the thread's timing); after the first, the writer dropped every later change without a word.
    (tmp_path / "tmp").mkdir()
    done = subprocess.run([PYTHON, "-c", textwrap.dedent(BUILD_WITH_NO_ROOM)], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
                          preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr[-3000:]
    said, after = done.stdout.strip().splitlines()
    assert said.startswith(f"BackendError: bm25 backend: tantivy writes the index in the temporary folder "
                           f"{tmp_path / 'tmp'} (in {tmp_path / 'tmp'}/toolsearch-"), said
    assert "Free space there, or set TMPDIR to a folder with room, and try again" in said
    assert after == "2 zebra"


def test_the_command_line_says_the_temporary_folder_is_full(tmp_path: Path) -> None:
    # Before: "toolsearch: error: unexpected ValueError: An IO error occurred ... please report it".
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tools.json").write_text(json.dumps([tool.to_dict() for tool in MANY]))

    def no_room() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))

    done = subprocess.run(
        [PYTHON, "-m", "toolsearch", "build", str(tmp_path / "tools.json"), "--backend", "bm25", "--root",
         str(tmp_path / "root"), "--name", "x", "-q"],
        capture_output=True, text=True, timeout=240, preexec_fn=no_room,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"toolsearch: error: bm25 backend: tantivy writes the index in the temporary "
                                  f"folder {tmp_path / 'tmp'}"), done.stderr
    assert "set TMPDIR" in done.stderr and "unexpected" not in done.stderr


# --- a path that is not UTF-8 -------------------------------------------------------------------------------


def test_an_index_under_a_path_that_is_not_utf8_opens_and_saves(tmp_path: Path) -> None:
    # Before: built and listed as ok, then "...home-\udcff/...: the tantivy files cannot be opened ('utf-8' codec
    # can't encode character '\udcff' ...); rebuild the index", and a rebuild gave the same index again.
    root = tmp_path / os.fsdecode(b"home-\xff") / "indexes"  # e.g. a Latin-1 user name on a UTF-8 system
    IndexStore(root).build(TOOLS, "bm25", "x")
    index = IndexStore(root).open("x")
    assert index.search("send an email", 1).names == ["send_email"]
    index.upsert([Tool("get_time", "The current time in a city.")])  # changed: copied to a private scratch
    index.save(root / "y")
    assert ToolIndex.load(root / "y").search("time in a city", 1).names == ["get_time"]
    assert IndexStore(root).open("x").search("time in a city", 1).names != ["get_time"]  # x itself is unchanged

