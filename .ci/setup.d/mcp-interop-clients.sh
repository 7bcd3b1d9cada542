#!/usr/bin/env bash
# MCP clients we did not write, for the interop tests (tests/mcp/test_mcp_interop_ts.py) and the
# docs examples (docs/mcp.md): the official TypeScript SDK client, v1 (@modelcontextprotocol/sdk)
# and v2 (@modelcontextprotocol/client), and the MCP Inspector's CLI, into .cache/node.
# Those tests never skip, so a failed install fails CI here, with the reason, not later.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Node from PyPI where .ci/setup.d/00-node.sh put it (on a machine without Node >= 20 of its own)
if [ -d .cache/node-runtime/bin ]; then PATH="$PWD/.cache/node-runtime/bin:$PATH"; fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed for the MCP interop tests (Node >= 20)" >&2
  exit 1
fi
# Pinned: the tests assert on these clients' behaviour. inspector-cli 0.15 is the newest that runs on Node 20.
npm install --no-audit --no-fund --loglevel=error --prefix .cache/node \
  @modelcontextprotocol/sdk@1.32.2 \
  @modelcontextprotocol/client@2.4.0 \
  @modelcontextprotocol/inspector-cli@0.15.0
node -e 'for (const m of ["@modelcontextprotocol/sdk/client/index.js", "@modelcontextprotocol/client"]) require.resolve(m, {paths: [".cache/node/node_modules"]})'
test -x .cache/node/node_modules/.bin/mcp-inspector-cli
