"""Every stored byte checked: damaged, old or foreign-filled index folders are named, never used silently."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from toolsearch import IndexFormatError, IndexStore, StoredIndexError, Tool, ToolIndex
from toolsearch.cli import EXIT_OK, EXIT_USER_ERROR, main
from toolsearch.store import FORMAT_VERSION, MANIFEST, manifest_digest, read_manifest, verify_index

TOOLS = [
    Tool("send_email", "Send an email message to one or more recipients.",
         {"type": "object", "properties": {"to": {"type": "string"}}}),
    Tool("get_weather", "Current weather and forecast for a city.",
         {"type": "object", "properties": {"city": {"type": "string"}}}),
    Tool("create_invoice", "Create a customer invoice with line items."),
]


def _overwrite_middle(path: Path) -> None:
    """Other bytes of the same size in the middle of a file: a size check cannot see it."""
    data = bytearray(path.read_bytes())
    assert data, path
    start = len(data) // 2
    end = min(len(data), start + 64)
    data[start:end] = bytes((b + 1) % 256 for b in data[start:end])
    path.write_bytes(bytes(data))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(params=["bm25", "regex", "vector"])
def saved(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return ToolIndex.build(TOOLS, backend=request.param).save(tmp_path / "idx")


def test_the_manifest_lists_every_file_with_a_digest(saved: Path) -> None:
    manifest = read_manifest(saved)
    on_disk = {p.relative_to(saved).as_posix() for p in saved.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest.files) == on_disk and any(rel.startswith("backend/") for rel in on_disk)
    for rel, record in manifest.files.items():
        assert record["bytes"] == (saved / rel).stat().st_size
        assert len(record["xxh3_128"]) == 32 and "blake2b" not in record


def test_a_same_size_overwrite_of_any_file_is_named(saved: Path) -> None:
    # Before digests, only tools.jsonl was checksummed: a damaged vectors.faiss loaded and
    # answered with scores like 4.26e37.
    for rel in read_manifest(saved).files:
        before = (saved / rel).read_bytes()
        _overwrite_middle(saved / rel)
        with pytest.raises(IndexFormatError, match=rf"file {rel} does not match the manifest's checksum"):
            ToolIndex.load(saved)
        (saved / rel).write_bytes(before)
    assert ToolIndex.load(saved).search("email", 1).names == ["send_email"]


def test_a_missing_or_truncated_backend_file_is_named(saved: Path) -> None:
    rel = next(r for r in read_manifest(saved).files if r.startswith("backend/"))
    path = saved / rel
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.raises(IndexFormatError, match=rf"file {rel} is truncated or altered"):
        ToolIndex.load(saved)
    path.unlink()
    with pytest.raises(IndexFormatError, match=rf"file {rel} is missing"):
        ToolIndex.load(saved)


@pytest.mark.parametrize("files", [{"../outside": {"bytes": 1, "blake2b": "0"}}, {"tools.jsonl": 12}, []])
def test_a_malformed_file_list_is_refused(tmp_path: Path, files: object) -> None:
    folder = ToolIndex.build(TOOLS, backend="regex").save(tmp_path / "idx")
    data = json.loads((folder / MANIFEST).read_text())
    data["files"] = files
    (folder / MANIFEST).write_text(json.dumps(data | {"digest": manifest_digest(data)}))
    with pytest.raises(IndexFormatError, match="list of files is malformed"):
        ToolIndex.load(folder)


def _as_format_3(folder: Path) -> None:
    """Rewrite a manifest the way toolsearch wrote format 3: every file's BLAKE2b digest, the manifest's own."""
    data = json.loads((folder / MANIFEST).read_text())
    data["version"] = 3
    for rel, record in data["files"].items():
        digest = hashlib.blake2b((folder / rel).read_bytes(), digest_size=32).hexdigest()
        data["files"][rel] = {"bytes": record["bytes"], "blake2b": digest}
    (folder / MANIFEST).write_text(json.dumps(data | {"digest": manifest_digest(data)}))


def test_a_format_3_index_still_loads_and_its_damage_is_still_named(tmp_path: Path) -> None:
    folder = ToolIndex.build(TOOLS, backend="bm25").save(tmp_path / "idx")
    _as_format_3(folder)
    assert read_manifest(folder).version == 3 and verify_index(folder).version == 3
    assert ToolIndex.load(folder).search("email", 1).names == ["send_email"]
    rel = next(r for r in read_manifest(folder).files if r.startswith("backend/"))
    _overwrite_middle(folder / rel)
    with pytest.raises(IndexFormatError, match=rf"file {rel} does not match the manifest's checksum"):
        ToolIndex.load(folder)
    data = json.loads((folder / MANIFEST).read_text())
    data["files"] = {r: {"bytes": v["bytes"], "xxh3_128": "0" * 32} for r, v in data["files"].items()}
    (folder / MANIFEST).write_text(json.dumps(data | {"digest": manifest_digest(data)}))
    with pytest.raises(IndexFormatError, match="list of files is malformed"):  # format 3 records BLAKE2b
        ToolIndex.load(folder)


def _as_format_1(folder: Path) -> None:
    """Rewrite a manifest the way toolsearch wrote format 1: sizes only, one checksum for tools.jsonl."""
    data = json.loads((folder / MANIFEST).read_text())
    data["version"] = 1
    data["tools_sha256"] = "0" * 64
    data["files"] = {rel: record["bytes"] for rel, record in data["files"].items()}
    (folder / MANIFEST).write_text(json.dumps(data))


def _redigested(folder: Path, **fields: object) -> None:
    """Edit the manifest's fields and give it a matching digest, as anyone who can write the file can."""
    path = folder / MANIFEST
    data = json.loads(path.read_text())
    data.update(fields)
    data["digest"] = manifest_digest(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("backend", ["bm25", "regex"])
@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"namespaces": []}, "its manifest lists the namespaces (none), its stored tools have 'mail', 'weather'"),
        ({"namespaces": ["weather", "mail"]}, "its manifest lists the namespaces 'weather', 'mail'"),
        ({"tool_count": 2}, "3 stored tools, the manifest says 2"),
    ],
    ids=["namespaces-emptied", "namespaces-reordered", "tool-count"],
)
def test_a_manifest_field_that_disagrees_with_the_stored_files_is_named(
    tmp_path: Path, backend: str, fields: dict[str, object], said: str
) -> None:
    spaces = ("mail", "weather", None)
    tools = [Tool(t.name, t.description, t.input_schema, namespace=ns) for t, ns in zip(TOOLS, spaces, strict=True)]
    folder = ToolIndex.build(tools, backend=backend).save(tmp_path / "idx")
    assert read_manifest(folder).namespaces == ["mail", "weather"]
    _redigested(folder, **fields)
    for check in (ToolIndex.load, verify_index):  # a load, and the health `toolsearch list` and `info` report
        with pytest.raises(IndexFormatError, match="rebuild") as raised:
            check(folder)
        assert said in str(raised.value)


def test_an_old_format_index_says_to_rebuild_and_build_does(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    store.build(TOOLS, "regex", "old")
    _as_format_1(tmp_path / "old")
    with pytest.raises(IndexFormatError, match=r"old index format 1.*rebuild"):
        store.open("old")
    _, _, reused = store.build(TOOLS, "regex", "old")
    assert not reused and read_manifest(tmp_path / "old").version == FORMAT_VERSION


def test_store_build_never_reuses_a_damaged_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = IndexStore(tmp_path)
    store.build(TOOLS, "bm25", "kw")
    assert store.build(TOOLS, "bm25", "kw")[2] is True
    damaged = next(r for r in read_manifest(tmp_path / "kw").files if r.startswith("backend/"))
    _overwrite_middle(tmp_path / "kw" / damaged)
    with caplog.at_level("WARNING", logger="toolsearch"):
        _, index, reused = store.build(TOOLS, "bm25", "kw")
    assert not reused and damaged in caplog.text and "rebuilding" in caplog.text
    verify_index(tmp_path / "kw")
    assert index.search("weather", 1).names == ["get_weather"]
    assert store.build(TOOLS, "bm25", "kw", rebuild=True)[2] is False


def test_saving_never_deletes_files_it_did_not_write(tmp_path: Path) -> None:
    target = ToolIndex.build(TOOLS, backend="regex").save(tmp_path / "idx")
    (target / "notes.txt").write_text("mine")
    (target / "mine").mkdir()
    (target / "mine" / "extra.bin").write_bytes(b"mine too")
    before = _snapshot(target)
    with pytest.raises(StoredIndexError, match=r"did not write \(mine/extra\.bin, notes\.txt\)"):
        ToolIndex.build(TOOLS[:1], backend="bm25").save(target)
    assert _snapshot(target) == before
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".idx.")) == ["idx"]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".idx.tmp-")]


# --- the command line ---------------------------------------------------------------------------


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLSEARCH_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TOOLS))
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_names_the_damaged_file_and_rebuilds_it(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "tools.jsonl", "--backend", "bm25", "--name", "X")[0] == EXIT_OK
    folder = home / "home" / "indexes" / "X"
    damaged = next(r for r in read_manifest(folder).files if r.startswith("backend/"))
    _overwrite_middle(folder / damaged)

    code, _, err = run(capsys, "query", "X", "send an email")
    assert code == EXIT_USER_ERROR and damaged in err and "--rebuild" in err

    code, out, _ = run(capsys, "list", "--json")
    (entry,) = json.loads(out)["indexes"]
    assert code == EXIT_OK and entry["health"].startswith("damaged:") and damaged in entry["health"]
    code, out, _ = run(capsys, "list")
    assert code == EXIT_OK and "health" in out and "damaged" in out
    code, out, _ = run(capsys, "info", "X")
    assert code == EXIT_OK and "damaged" in out

    code, out, err = run(capsys, "build", "tools.jsonl", "--backend", "bm25", "--name", "X")
    assert code == EXIT_OK and out.startswith("built index 'X'") and damaged in err
    code, out, _ = run(capsys, "info", "X", "--json")
    assert json.loads(out)["health"] == "ok"
    code, out, _ = run(capsys, "build", "tools.jsonl", "--backend", "bm25", "--name", "X")
    assert out.startswith("reused index 'X'")
    code, out, _ = run(capsys, "build", "tools.jsonl", "--backend", "bm25", "--name", "X", "--rebuild")
    assert code == EXIT_OK and out.startswith("built index 'X'")


def test_out_over_an_index_folder_keeps_the_users_files(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "tools.jsonl", "--backend", "bm25", "--out", "outidx")[0] == EXIT_OK
    (home / "outidx" / "README.txt").write_text("the user's own notes")
    before = _snapshot(home / "outidx")
    code, _, err = run(capsys, "build", "tools.jsonl", "--backend", "regex", "--out", "outidx")
    assert code == EXIT_USER_ERROR and "README.txt" in err and "did not write" in err
    assert _snapshot(home / "outidx") == before
