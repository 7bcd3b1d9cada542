#!/usr/bin/env bash
# The npm reference MCP server for the gateway tests (tests/test_mcp_gateway.py), into .cache/node.
# Without Node or the registry the tests that need it skip with the reason; this never fails CI.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the server-everything tests will skip"
  exit 0
fi
npm install --no-audit --no-fund --loglevel=error --prefix .cache/node @modelcontextprotocol/server-everything \
  || echo "npm install failed: the server-everything tests will skip"
exit 0
