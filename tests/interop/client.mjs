// Drives the toolsearch gateway with the official TypeScript MCP client, as a real user would.
//
//   node tests/interop/client.mjs --modules .cache/node/node_modules --sdk v1|v2 \
//        (--url http://127.0.0.1:PORT/mcp | --stdio '{"command": ..., "args": [...], "env": {...}}')
//
// v1 is `@modelcontextprotocol/sdk` 1.x; v2 is `@modelcontextprotocol/client` with automatic
// protocol-version negotiation. The script runs one scenario - connect, list, search, receive
// tools/list_changed and the client's own auto-refreshed list, call the found tool, a second client
// that must not see the first one's tools, a bad argument - and prints what it observed as one JSON
// object on stdout. The Python test (tests/test_mcp_interop_ts.py) makes the assertions; this
// script fails (exit 1) only when a step cannot run at all.
import { createRequire } from "node:module";
import { resolve } from "node:path";
import { parseArgs } from "node:util";

const { values: opts } = parseArgs({
  options: {
    modules: { type: "string" },
    sdk: { type: "string", default: "v1" },
    url: { type: "string" },
    stdio: { type: "string" },
  },
});
if (!opts.modules || (!opts.url && !opts.stdio) || !["v1", "v2"].includes(opts.sdk)) {
  console.error("usage: client.mjs --modules DIR --sdk v1|v2 (--url URL | --stdio JSON)");
  process.exit(2);
}

// The packages live in .cache/node (installed by .ci/setup.d), not beside this script.
const require = createRequire(`${resolve(opts.modules)}/`);
const sdk =
  opts.sdk === "v1"
    ? {
        Client: require("@modelcontextprotocol/sdk/client/index.js").Client,
        Stdio: require("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport,
        Http: require("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport,
      }
    : {
        Client: require("@modelcontextprotocol/client").Client,
        Stdio: require("@modelcontextprotocol/client/stdio").StdioClientTransport,
        Http: require("@modelcontextprotocol/client").StreamableHTTPClientTransport,
      };

function transport() {
  if (opts.url) return new sdk.Http(new URL(opts.url));
  return new sdk.Stdio({ ...JSON.parse(opts.stdio), stderr: "inherit" });
}

function waiter(timeoutMs = 60000) {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  const timer = setTimeout(() => resolve({ timedOut: true }), timeoutMs);
  timer.unref(); // a wait nobody needs any more must not keep the process alive
  return { promise, done: (value) => (clearTimeout(timer), resolve(value)) };
}

// A client that keeps its tool list fresh the way the SDK offers: `listChanged` with autoRefresh.
async function connect(name) {
  const state = { notifications: 0, refreshed: [], next: waiter() };
  const options = {
    listChanged: {
      tools: {
        autoRefresh: true,
        debounceMs: 0,
        onChanged: (error, tools) => {
          state.notifications += 1;
          const names = error ? { error: String(error) } : tools.map((t) => t.name);
          state.refreshed.push(names);
          state.next.done(names);
          state.next = waiter();
        },
      },
    },
  };
  if (opts.sdk === "v2") options.versionNegotiation = { mode: "auto" };
  const client = new sdk.Client({ name, version: "1.0.0" }, options);
  await client.connect(transport());
  return { client, state };
}

const text = (result) =>
  (result.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");
const names = async (client) => (await client.listTools()).tools.map((t) => t.name);

const report = {};
const { client: alice, state } = await connect("alice");
try {
  report.protocolVersion = alice.getNegotiatedProtocolVersion?.() ?? null;
  report.capabilities = alice.getServerCapabilities();
  report.instructions = alice.getInstructions?.() ?? null;
  report.toolsAtStart = await names(alice);

  state.next = waiter(); // from now: the connect may have taken a while (v2 over stdio spawns a probe process)
  const changed = state.next.promise;
  const found = await alice.callTool({
    name: "tool_search",
    arguments: { query: "convert time between timezones", max_results: 1 },
  });
  report.search = { isError: Boolean(found.isError), text: text(found) };
  report.refreshedList = await changed; // the list the SDK fetched by itself after list_changed
  report.toolsAfterSearch = await names(alice);

  const converted = await alice.callTool({
    name: "time__convert_time",
    arguments: { source_timezone: "UTC", time: "12:00", target_timezone: "Asia/Tokyo" },
  });
  report.call = {
    isError: Boolean(converted.isError),
    text: text(converted),
    structured: converted.structuredContent ?? null,
  };

  const badArgs = await alice.callTool({ name: "tool_search", arguments: { query: "time", max_results: "3" } });
  report.badArguments = { isError: Boolean(badArgs.isError), text: text(badArgs) };

  const { client: bob, state: bobState } = await connect("bob");
  try {
    report.secondClientTools = await names(bob);
    report.firstClientTools = await names(alice);
    report.secondClientNotifications = bobState.notifications;
  } finally {
    await bob.close();
  }
  report.notifications = state.notifications;
} finally {
  await alice.close();
}
console.log(JSON.stringify(report));
