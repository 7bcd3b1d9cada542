#!/usr/bin/env bash
# The BFCL data set is rebuilt from the bfcl-eval package (tests/bench/test_bench_data.py). Its data files
# are all that is used; its pinned dependencies (numpy 1.x, an old faiss) would clash with ours.
set -euo pipefail
"${VENV:-.venv}/bin/pip" install --no-deps bfcl-eval==2026.3.23
