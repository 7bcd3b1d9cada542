"""Build the benchmark data sets from their public sources: `python benchmarks/data.py fetch NAME`.

    pip download --no-deps -d /tmp/bfcl bfcl-eval==2026.3.23
    python benchmarks/data.py fetch bfcl --source /tmp/bfcl/bfcl_eval-2026.3.23-py3-none-any.whl
    git clone https://github.com/HowieHwong/MetaTool    # then: git -C MetaTool checkout 35e81bb75768...
    python benchmarks/data.py fetch metatool --source MetaTool
    python benchmarks/data.py fetch seal_tools --source Seal-Tools      # a checkout at ce753ecd60ed...

Each source's own files are read (the `bfcl-eval` wheel or installed package; a checkout of the
MetaTool or Seal-Tools repository at the pinned commit), checked against the SHA-256 digests recorded
here, and converted to `tools.jsonl` + `queries.jsonl` in the format the benchmarks read (one JSON
object a line; see `toolsearch.evaluation`). Nothing is downloaded at run time: getting the source is
the user's step, with the ordinary tools (pip, git). Output goes to `--out` (default
`$TOOLSEARCH_DATASETS`, else `./datasets`), one folder per data set.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import cli
from toolsearch._errors import DataSourceError

__all__ = ["DATASETS", "DataSourceError", "Source", "add_arguments", "convert", "fetch", "main"]

Row = dict[str, Any]


class Source:
    """Read-only access to a source's files by relative path: a folder or a zip (wheel) with a prefix."""

    def __init__(self, root: Path, prefix: str = "") -> None:
        self.root = root
        self.prefix = prefix
        self._zip = zipfile.ZipFile(root) if root.is_file() else None

    def read(self, relative: str) -> bytes:
        if self._zip is not None:
            try:
                return self._zip.read(self.prefix + relative)
            except KeyError:
                raise DataSourceError(f"{self.root} has no {self.prefix + relative}") from None
        path = self.root / relative
        try:
            return path.read_bytes()
        except OSError as exc:
            raise DataSourceError(f"cannot read {path}: {exc.strerror or exc}") from None

    def __repr__(self) -> str:
        return f"Source({str(self.root)!r})"


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """Where a data set comes from, the digests of the files it is built from, and its converter."""

    name: str
    origin: str  # what the user fetches, pinned
    how: str  # the commands that get it
    files: Mapping[str, str]  # relative path -> sha256
    locate: Callable[[Path | None], Source]
    convert: Callable[[Source], tuple[list[Row], list[Row]]]


# --- BFCL (the bfcl-eval package on PyPI) -------------------------------------------------------------

BFCL_VERSION = "2026.3.23"
BFCL_QUERIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
BFCL_DISTRACTORS = ("irrelevance", "live_irrelevance", "live_relevance")
_BFCL_DIGESTS = {
    "BFCL_v4_irrelevance.json": "2b6ed4c2e992cdcf5f1678a701851f944bef7550ee026ed1ddb89efed5be01a6",
    "BFCL_v4_live_irrelevance.json": "6559fda2beaceb609a2cd2e504c65b4a56cb448e1ef88fddfd199e163d163349",
    "BFCL_v4_live_multiple.json": "fd8ccfad4d911420d0e3341dbe2fff77d1d341da934248b9bb2bda24ab3a10c8",
    "BFCL_v4_live_parallel.json": "6c26e9fdc3350cf596e6d1ea9c179cbff834761bccf562f4141ed29a839ca421",
    "BFCL_v4_live_parallel_multiple.json": "21d4b9319c1faac431e22757b367ea28917fe467364c3a4b17f16ec06d4f6e79",
    "BFCL_v4_live_relevance.json": "e03f9e241657a137cba48a89ee12f47bf3fcb7e4f6274263e9c699a0c974203a",
    "BFCL_v4_live_simple.json": "1af2ac87dca47556db7b7e37e51e28b459a38b594e3c7b3c792b4903598ca0c4",
    "BFCL_v4_multiple.json": "aef168155ebd74b7ac2401198b201343bc7d16d7a3d7e0d4e6d8ee82c6969b2a",
    "BFCL_v4_parallel.json": "19f51a82eff42e5d62541aa500115a056eb78f437c2ba1f10415fd7c8e5dda84",
    "BFCL_v4_parallel_multiple.json": "8863ea8433239f55c5f016154cf0830853c89f693c6ea270396a2fa121960579",
    "BFCL_v4_simple_python.json": "82dd63ba502eb2520c6b5d1d9a5c4b590e03ff261565175561f6228a367d1991",
    "possible_answer/BFCL_v4_live_multiple.json": "97e90d59c5bd76c55a2920ce93e5566e9046307d3f558578f085f9d3a56c3084",
    "possible_answer/BFCL_v4_live_parallel.json": "8a9f189ff0e832ebbbbdade1fd95a7dbcc67406e9177df3f0aad76f59ab00350",
    "possible_answer/BFCL_v4_live_parallel_multiple.json": (
        "f5b5f360556c5feb51db46fb9f56ee4b304f4b45b161599bbb14161c98a2873f"
    ),
    "possible_answer/BFCL_v4_live_simple.json": "fec9cfa9744a936f9126981e85a2023da1e63e273eafebc81923a1162fad70ce",
    "possible_answer/BFCL_v4_multiple.json": "244e00ce9395df948bcafc7bee64e8f9c87ef70887587d83cae45b13699f3047",
    "possible_answer/BFCL_v4_parallel.json": "8a6aa19c1adddc6a5a2f7e40f9dbf30cc7e95815e7b830c90589ab318229e0f0",
    "possible_answer/BFCL_v4_parallel_multiple.json": (
        "5ebf24f458c1f16300c05505d83d6f0a1b68b79be273a033febd0d4f840507e3"
    ),
    "possible_answer/BFCL_v4_simple_python.json": "90cd5bc653690ee8e459b5b3f3fc9458606f7f3fcbf795bb51b7dc581f8c86dc",
}
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def _locate_bfcl(path: Path | None) -> Source:
    """The wheel, a folder holding `bfcl_eval/data`, the data folder itself, or the installed package."""
    if path is None:
        spec = find_spec("bfcl_eval")  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise DataSourceError(
                f"bfcl: no --source given and the bfcl-eval package is not installed; run "
                f"`pip download --no-deps -d /tmp/bfcl bfcl-eval=={BFCL_VERSION}` and pass the wheel as --source, "
                f"or `pip install bfcl-eval=={BFCL_VERSION}`"
            )
        return Source(Path(next(iter(spec.submodule_search_locations))) / "data")
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise DataSourceError(f"bfcl: {path} is not a wheel (zip) file; pass the bfcl_eval-*.whl from pip download")
        return Source(path, "bfcl_eval/data/")
    for candidate in (path / "bfcl_eval" / "data", path / "data", path):
        if (candidate / "BFCL_v4_simple_python.json").is_file():
            return Source(candidate)
    raise DataSourceError(f"bfcl: {path} holds no BFCL_v4_simple_python.json (nor under bfcl_eval/data or data)")


def _json_lines(data: bytes, where: str) -> list[Row]:
    rows = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise DataSourceError(f"{where}, line {number}: not JSON ({exc})") from None
    return rows


def _bfcl_types(value: Any) -> Any:
    """BFCL's Python type names as JSON schema types (dict->object, float->number, tuple->array, any->none)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "type" and isinstance(item, str):
                if item != "any":
                    out[key] = _BFCL_TYPES.get(item, item)
            else:
                out[key] = _bfcl_types(item)
        return out
    if isinstance(value, list):
        return [_bfcl_types(v) for v in value]
    return value


def _convert_bfcl(source: Source) -> tuple[list[Row], list[Row]]:
    """Pool every question's function list; one tool per name, its most frequent definition (first seen
    on ties; definitions from the query categories win over the distractor-only ones)."""
    counts: dict[str, Counter[str]] = {}
    query_counts: dict[str, Counter[str]] = {}
    definitions: dict[str, dict[str, Any]] = {}
    first_category: dict[str, str] = {}
    queries: list[Row] = []
    for category in (*BFCL_QUERIES, *BFCL_DISTRACTORS):
        name = f"BFCL_v4_{category}.json"
        entries = _json_lines(source.read(name), name)
        for entry in entries:
            for function in entry.get("function") or ():
                key = json.dumps(function, sort_keys=True)
                tool = function["name"]
                definitions.setdefault(key, function)
                first_category.setdefault(tool, category)
                counts.setdefault(tool, Counter())[key] += 1
                if category in BFCL_QUERIES:
                    query_counts.setdefault(tool, Counter())[key] += 1
        if category not in BFCL_QUERIES:
            continue
        answers_name = f"possible_answer/{name}"
        answers = {a["id"]: a for a in _json_lines(source.read(answers_name), answers_name)}
        for entry in entries:
            turn = entry["question"][0]
            relevant = list(dict.fromkeys(n for call in answers[entry["id"]]["ground_truth"] for n in call))
            queries.append(
                {
                    "id": f"bfcl-{entry['id']}",
                    "query": "\n".join(m["content"] for m in turn if m.get("role") == "user").strip(),
                    "relevant": relevant,
                    "subset": category,
                }
            )
    tools: list[Row] = []
    for tool, counter in counts.items():
        chosen = query_counts.get(tool) or counter
        best = max(chosen.items(), key=lambda kv: kv[1])[0]  # max keeps the first seen on ties
        function = definitions[best]
        parameters = _bfcl_types(function.get("parameters") or {})
        schema: dict[str, Any] = {"type": "object", "properties": parameters.get("properties", {})}
        schema.update({k: v for k, v in parameters.items() if k not in ("type", "properties")})
        category = first_category[tool]
        tools.append(
            {
                "name": tool,
                "description": (function.get("description") or "").strip(),
                "input_schema": schema,
                "source": f"bfcl/{category}" + ("" if category in BFCL_QUERIES else " (distractor)"),
            }
        )
    return tools, queries


# --- MetaTool (a checkout of github.com/HowieHwong/MetaTool) ----------------------------------------

METATOOL_COMMIT = "35e81bb7576826e980c80fed8f8c0a2b4a1e6fbb"
_METATOOL_DIGESTS = {
    "dataset/plugin_des.json": "c446ade5acfb8e16c477124250665021e63b11bf6cb232db04fc9ba6bed0389a",
    "dataset/data/all_clean_data.csv": "cf2eb0474396677530931def51012da4e88f9f34f655332f04177b2054101baf",
    "dataset/data/multi_tool_query_golden.json": "ef37d10a8cb5b41435d6ea3ae29819afdb8d6db0852268830e5ee77259507f51",
}
_MOJIBAKE = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")


def _checkout(name: str, path: Path | None, marker: str, url: str, commit: str) -> Source:
    if path is None:
        raise DataSourceError(
            f"{name}: pass --source PATH, a checkout of {url} at commit {commit} "
            f"(git clone {url} && git -C <folder> checkout {commit})"
        )
    if not (path / marker).is_file():
        raise DataSourceError(f"{name}: {path} is not a checkout of {url}: it has no {marker}")
    return Source(path)


def _locate_metatool(path: Path | None) -> Source:
    return _checkout(
        "metatool", path, "dataset/plugin_des.json", "https://github.com/HowieHwong/MetaTool", METATOOL_COMMIT
    )


def _repair(text: str) -> str:
    """Undo UTF-8 read as GBK ("caf茅" -> "café") where the round trip is clean; else keep the text."""
    if not _MOJIBAKE.search(text):
        return text
    try:
        fixed = text.encode("gbk").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text
    return fixed


def _clean_query(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    return _repair(text)


def _plugins(data: Any) -> list[tuple[str, str]]:
    if isinstance(data, Mapping):
        return [(str(k), str(v)) for k, v in data.items()]
    if isinstance(data, list):
        out = []
        for item in data:
            if not isinstance(item, Mapping):
                raise DataSourceError("metatool: plugin_des.json entries must be objects with a name and description")
            name = item.get("name") or item.get("name_for_model") or item.get("tool")
            desc = item.get("description") or item.get("description_for_model") or ""
            out.append((str(name), str(desc)))
        return out
    raise DataSourceError("metatool: plugin_des.json must hold an object (name -> description) or a list")


def _merge_queries(rows: Iterable[tuple[str, list[str], str, str]]) -> list[Row]:
    """One query per distinct text, with the union of the tools of its rows (first row's id and subset)."""
    merged: dict[str, Row] = {}
    for query_id, tools, subset, text in rows:
        if not text:
            continue
        row = merged.setdefault(text, {"id": query_id, "query": text, "relevant": [], "subset": subset})
        row["relevant"] = list(dict.fromkeys([*row["relevant"], *tools]))
    return list(merged.values())


def _convert_metatool(source: Source) -> tuple[list[Row], list[Row]]:
    plugins = _plugins(json.loads(source.read("dataset/plugin_des.json").decode("utf-8")))
    tools = [
        {
            "name": name,
            "description": description.strip(),
            "input_schema": {"type": "object", "properties": {}, "required": []},
            "source": "metatool/plugin",
        }
        for name, description in plugins
    ]
    reader = csv.DictReader(io.StringIO(source.read("dataset/data/all_clean_data.csv").decode("utf-8")))
    if reader.fieldnames is None or not {"Query", "Tool"} <= set(reader.fieldnames):
        raise DataSourceError("metatool: all_clean_data.csv must have the columns Query and Tool")
    rows = [
        (f"metatool-single-{i}", [row["Tool"].strip()], "single_tool", _clean_query(row["Query"] or ""))
        for i, row in enumerate(reader)
    ]
    multi = json.loads(source.read("dataset/data/multi_tool_query_golden.json").decode("utf-8"))
    rows += [
        (f"metatool-multi-{i}", [str(t) for t in item["tool"]], "multi_tool", _clean_query(item["query"]))
        for i, item in enumerate(multi)
    ]
    names = {t["name"] for t in tools}
    queries = [q for q in _merge_queries(rows) if q["relevant"] and all(n in names for n in q["relevant"])]
    return tools, queries


# --- Seal-Tools (a checkout of github.com/fairyshine/Seal-Tools) -------------------------------------

SEAL_COMMIT = "ce753ecd60ed08dd376984035de531ab8421f1c6"
_SEAL_DIGESTS = {
    "Seal-Tools_Dataset/tool.jsonl": "35e34aaec1f0793c2b5a5dff734cb925837988f59ed0fe4f410d67f3d8375f5c",
    "Seal-Tools_Dataset/dev.jsonl": "53da12c9fab27e47eba4767ae3625b53bb6474215c38e5033b1fe11e84efacf6",
    "Seal-Tools_Dataset/test_in_domain.jsonl": "330020288948e711846417c2fca9a5980ef0f1adc01ad74dc38cc9ff7142811f",
}
_SEAL_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}
SEAL_SPLITS = ("dev", "test_in_domain")  # test_out_domain is held back for evaluation


def _locate_seal(path: Path | None) -> Source:
    return _checkout(
        "seal_tools", path, "Seal-Tools_Dataset/tool.jsonl", "https://github.com/fairyshine/Seal-Tools", SEAL_COMMIT
    )


def _convert_seal(source: Source) -> tuple[list[Row], list[Row]]:
    tools: list[Row] = []
    for api in _json_lines(source.read("Seal-Tools_Dataset/tool.jsonl"), "tool.jsonl"):
        properties = {
            name: {
                "type": _SEAL_TYPES.get(str(p.get("type")), str(p.get("type"))),
                "description": p.get("description", ""),
            }
            for name, p in (api.get("parameters") or {}).items()
        }
        tools.append(
            {
                "name": api["api_name"],
                "description": api.get("api_description", ""),
                "input_schema": {
                    "type": "object",
                    "properties": properties,
                    "required": list(api.get("required") or []),
                },
                "source": api.get("field", ""),
            }
        )
    queries: list[Row] = []
    for split in SEAL_SPLITS:
        for item in _json_lines(source.read(f"Seal-Tools_Dataset/{split}.jsonl"), f"{split}.jsonl"):
            level = "difficult" if "-difficult-" in item["id"] else "easy"
            queries.append(
                {
                    "id": f"seal-{item['id']}",
                    "query": item["query"],
                    "relevant": list(dict.fromkeys(call["api"] for call in item.get("calling") or ())),
                    "subset": f"{split}/{level}",
                }
            )
    return tools, queries


# --- fetch ------------------------------------------------------------------------------------------------

DATASETS: dict[str, DatasetSpec] = {
    "bfcl": DatasetSpec(
        "bfcl",
        f"PyPI bfcl-eval {BFCL_VERSION} (bfcl_eval/data)",
        f"pip download --no-deps -d /tmp/bfcl bfcl-eval=={BFCL_VERSION}  (or pip install bfcl-eval=={BFCL_VERSION})",
        _BFCL_DIGESTS,
        _locate_bfcl,
        _convert_bfcl,
    ),
    "metatool": DatasetSpec(
        "metatool",
        f"github.com/HowieHwong/MetaTool at {METATOOL_COMMIT}",
        f"git clone https://github.com/HowieHwong/MetaTool && git -C MetaTool checkout {METATOOL_COMMIT}",
        _METATOOL_DIGESTS,
        _locate_metatool,
        _convert_metatool,
    ),
    "seal_tools": DatasetSpec(
        "seal_tools",
        f"github.com/fairyshine/Seal-Tools at {SEAL_COMMIT}",
        f"git clone https://github.com/fairyshine/Seal-Tools && git -C Seal-Tools checkout {SEAL_COMMIT}",
        _SEAL_DIGESTS,
        _locate_seal,
        _convert_seal,
    ),
}


def _spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise DataSourceError(f"unknown data set {name!r}; choose one of: {', '.join(DATASETS)}") from None


def verify(spec: DatasetSpec, source: Source, digests: Mapping[str, str] | None = None) -> None:
    """Check every file the conversion reads against its recorded SHA-256 digest."""
    for relative, expected in (digests if digests is not None else spec.files).items():
        actual = hashlib.sha256(source.read(relative)).hexdigest()
        if actual != expected:
            raise DataSourceError(
                f"{spec.name}: {relative} in {source.root} has sha256 {actual}, expected {expected}: "
                f"the source is not {spec.origin}; get it with: {spec.how}"
            )


def convert(name: str, source: Source) -> tuple[list[Row], list[Row]]:
    """tools and queries rows of data set `name` from its (already verified) source files."""
    tools, queries = _spec(name).convert(source)
    names = {t["name"] for t in tools}
    if len(names) != len(tools):
        raise DataSourceError(f"{name}: the source holds duplicate tool names; is it the pinned version?")
    missing = sorted({n for q in queries for n in q["relevant"] if n not in names})
    if missing:
        raise DataSourceError(f"{name}: queries name tools the catalog lacks: {', '.join(missing[:5])}")
    return tools, queries


def _write_jsonl(path: Path, rows: Iterable[Row]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def default_out() -> Path:
    env = os.environ.get("TOOLSEARCH_DATASETS")
    return Path(env) if env else Path("datasets")


def fetch(name: str, source: str | Path | None = None, out: str | Path | None = None, *, check: bool = True) -> Path:
    """Build data set `name` into `<out>/<name>/` (tools.jsonl, queries.jsonl, SOURCE.json); return the folder.

    `check=False` skips the digest check (for a source of another version; say so when you report figures).
    """
    spec = _spec(name)
    src = spec.locate(Path(source).expanduser() if source is not None else None)
    if check:
        verify(spec, src)
    tools, queries = convert(name, src)
    target = Path(out if out is not None else default_out()) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))  # same file system: rename is atomic
    try:
        _write_jsonl(staging / "tools.jsonl", tools)
        _write_jsonl(staging / "queries.jsonl", queries)
        record = {
            "dataset": name,
            "origin": spec.origin,
            "source": str(src.root),
            "verified": check,
            "sha256": dict(spec.files),
            "tools": len(tools),
            "queries": len(queries),
        }
        (staging / "SOURCE.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


# --- command line -------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="data_action", metavar="ACTION")
    actions.required = True
    get = actions.add_parser(
        "fetch",
        help="build a data set from its public source",
        description="Build a data set (tools.jsonl + queries.jsonl) from its public source, after checking the "
        "source files against recorded digests.",
    )
    get.add_argument("name", choices=list(DATASETS), help="data set")
    get.add_argument(
        "--source",
        metavar="PATH",
        help="bfcl: the bfcl-eval wheel or its data folder (default: the installed bfcl-eval package); "
        "metatool / seal_tools: a checkout of the repository at the pinned commit",
    )
    get.add_argument(
        "--out", metavar="DIR", help="where the data set folder goes (default: $TOOLSEARCH_DATASETS, else ./datasets)"
    )
    get.add_argument("--no-verify", action="store_true", help="skip the digest check (another version of the source)")
    actions.add_parser("list", help="the data sets and how to get their sources", description="List the data sets.")


def main(args: argparse.Namespace) -> int:
    if args.data_action == "list":
        for spec in DATASETS.values():
            print(f"{spec.name}: {spec.origin}\n    get it: {spec.how}")
        return 0
    target = fetch(args.name, args.source, args.out, check=not args.no_verify)
    rows = sum(1 for _ in (target / "queries.jsonl").open(encoding="utf-8"))
    tools = sum(1 for _ in (target / "tools.jsonl").open(encoding="utf-8"))
    print(f"{args.name}: {tools:,} tools and {rows:,} queries in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
