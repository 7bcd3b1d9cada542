// Drives the toolsearch gateway with the official TypeScript MCP client, as a real user would.
//
//   node tests/interop/client.mjs --modules .cache/node/node_modules --sdk v1|v2 \
//        (--url http://127.0.0.1:PORT/mcp | --stdio '{"command": ..., "args": [...], "env": {...}}')
//
// v1 is `@modelcontextprotocol/sdk` 1.x; v2 is `@modelcontextprotocol/client` in the handshake era
// (`versionNegotiation: legacy`); v2modern is the same client pinned to 2026-07-28 only. The
// handshake scenario - connect, list, search, receive tools/list_changed and the client's own
// auto-refreshed list, call the found tool, a second client that must not see the first one's
// tools, a bad argument - and the modern one (below) print what they observed as one JSON object on
// stdout. The Python test (tests/mcp/test_mcp_interop_ts.py) makes the assertions; this script fails
// (exit 1) only when a step cannot run at all.
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
if (!opts.modules || (!opts.url && !opts.stdio) || !["v1", "v2", "v2modern"].includes(opts.sdk)) {
  console.error("usage: client.mjs --modules DIR --sdk v1|v2|v2modern (--url URL | --stdio JSON)");
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
  if (opts.sdk === "v2") options.versionNegotiation = { mode: "legacy" };
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

if (opts.sdk === "v2modern") {
  console.log(JSON.stringify(await modern()));
  process.exit(0);
}

// The 2026-07-28 era: a stable list, found definitions in tool_search's result, calls through
// call_tool, and a subscriptions/listen stream that hears when the stable list changes (the test's
// config pins kept__echo of a server whose `mutate` tool changes it).
async function modern() {
  const out = {};
  const changed = waiter();
  const client = new sdk.Client(
    { name: "modern", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  client.setNotificationHandler("notifications/tools/list_changed", () => changed.done(true));
  await client.connect(transport());
  try {
    out.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? null;
    out.capabilities = client.getServerCapabilities();
    out.instructions = client.getInstructions?.() ?? null;
    const first = await client.listTools();
    out.toolsAtStart = first.tools.map((t) => t.name);
    out.listAtStart = JSON.stringify(first.tools);
    const found = await client.callTool({
      name: "tool_search",
      arguments: { query: "convert time between timezones", max_results: 1 },
    });
    out.search = { isError: Boolean(found.isError), text: text(found), structured: found.structuredContent ?? null };
    const context = found.structuredContent?.context;
    const tool = found.structuredContent?.tools?.[0]?.name;
    const converted = await client.callTool({
      name: "call_tool",
      arguments: {
        name: tool,
        context,
        arguments: { source_timezone: "UTC", time: "12:00", target_timezone: "Asia/Tokyo" },
      },
    });
    out.call = { isError: Boolean(converted.isError), text: text(converted) };
    const bad = await client.callTool({
      name: "call_tool",
      arguments: { name: tool, context, arguments: { source_timezone: "UTC" } },
    });
    out.badArguments = { isError: Boolean(bad.isError), text: text(bad) };
    out.listAfterSearch = JSON.stringify((await client.listTools()).tools);

    const second = new sdk.Client(
      { name: "second", version: "1.0.0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } } },
    );
    await second.connect(transport());
    try {
      out.secondClientTools = (await second.listTools()).tools.map((t) => t.name);
      const reused = await second.callTool({ name: "tool_search", arguments: { query: "time", context } });
      out.secondClientWithFirstContext = { isError: Boolean(reused.isError), text: text(reused) };
    } finally {
      await second.close();
    }

    const subscription = await client.listen({ toolsListChanged: true });
    const mutated = await client.callTool({
      name: "call_tool",
      arguments: { name: "kept__mutate", arguments: { tool: "echo", description: "Echo, changed." } },
    });
    out.mutate = { isError: Boolean(mutated.isError), text: text(mutated) };
    out.heardChange = (await changed.promise) === true;
    const after = await client.listTools();
    out.pinnedAfterChange = after.tools.find((t) => t.name === "kept__echo")?.description ?? null;
    await subscription.close();
  } finally {
    await client.close();
  }
  return out;
}

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
