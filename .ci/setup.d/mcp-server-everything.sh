#!/usr/bin/env bash
# The npm reference MCP server for the gateway tests (tests/mcp/test_mcp_gateway.py), into .cache/node, at the
# version the suite last passed with (as .ci/constraints.txt holds the Python packages).
# The tests need it and do not skip without it: when Node or the install is missing, CI fails here,
# at the cause, instead of later at the test.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Node from PyPI where .ci/setup.d/00-node.sh put it (on a machine without Node >= 20 of its own)
if [ -d .cache/node-runtime/bin ]; then PATH="$PWD/.cache/node-runtime/bin:$PATH"; fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: install Node.js (the MCP gateway tests run @modelcontextprotocol/server-everything)" >&2
  exit 1
fi
if ! npm install --no-audit --no-fund --loglevel=error --prefix .cache/node @modelcontextprotocol/server-everything@2026.8.31; then
  echo "npm install of @modelcontextprotocol/server-everything failed: the MCP gateway tests need it" >&2
  exit 1
fi
