"""Each agent framework's own answer to many tools, next to toolsearch's plug-in for that framework.

    python benchmarks/frameworks.py                       # bfcl, metatool, seal_tools; offline
    python benchmarks/frameworks.py --limit 10 --sizes 50,all

Two parts, on the shared data sets:

- **retrieval**: Pydantic AI's `keywords_search_fn` (its `ToolSearch` fallback off native search) and
  toolsearch's `ToolSearchStrategy` (what `toolsearch.integrations.pydantic_ai.tool_search()` runs),
  each asked the data set's queries over the whole catalog; nDCG@10 and Recall@5 as in `bench retrieval`.
- **tokens**: one task per query (call its first relevant tool, then answer), run through each
  framework's real agent loop and real OpenAI client, at the catalog sizes of `bench tokens` (the
  task's tool plus seeded distractors; a data set tool named `tool_search` or `search_tools` is left
  out, as it would stand in for the search tool). The model is a deterministic policy behind an
  `httpx.MockTransport` that answers in the Chat Completions wire format: it searches with the task's
  text when it has a search tool, calls the task's tool when it sees it (else the first tool it was
  given), then answers; LangChain's selector call is answered with the task's tool alone (the best a
  selector can do). Every request body the framework sent is counted exactly (o200k_base: system,
  messages, tools, and the `response_format` schema that carries the selector's tool list).

  Arms: LangChain `LLMToolSelectorMiddleware` (main model as selector, `max_tools=5`) vs
  `ToolSearchMiddleware`; Pydantic AI deferred tools with its default local search vs
  `tool_search()`; the Agents SDK with every tool (its default) vs `AgentToolSearch`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import (
    Dataset,
    cli,
    log,
    machine_info,
    machine_markdown,
    offline_environment,
    resolve_datasets,
    write_report,
)

__all__ = ["ARMS", "add_arguments", "main", "render_markdown", "run"]

DEFAULT_SIZES = "5,10,20,50,200,1000,all"
DEFAULT_LIMIT = 20
DEFAULT_RETRIEVAL_LIMIT = 500
SELECTOR_MAX_TOOLS = 5
SEARCH_NAMES = ("tool_search", "search_tools")
# (framework, arm) pairs: the framework's own answer first, toolsearch's plug-in second
ARMS = {
    "langchain": ("LLMToolSelectorMiddleware", "ToolSearchMiddleware"),
    "pydantic_ai": ("ToolSearch local fallback", "ToolSearch + toolsearch strategy"),
    "openai_agents": ("all tools (default)", "AgentToolSearch"),
}


# --- the policy model behind an httpx transport ---------------------------------------------------


@dataclass
class _Recorder:
    """Answers Chat Completions requests for one task and counts each request's tokens."""

    query: str
    target: str
    encoding: str
    tokens: list[int] = field(default_factory=list)
    called: list[str] = field(default_factory=list)

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        from toolsearch.providers.scripted import example_arguments
        from toolsearch.tokens import count_json_tokens, request_tokens

        counted = request_tokens(body, self.encoding).total
        if body.get("response_format"):
            counted += count_json_tokens(body["response_format"], self.encoding)
        self.tokens.append(counted)
        tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or () if "function" in t}
        if body.get("response_format"):  # LangChain's selection call
            return _completion(json.dumps({"tools": [self.target]}))
        history = [c["function"]["name"] for m in body.get("messages", []) for c in m.get("tool_calls") or ()]
        if any(name not in SEARCH_NAMES for name in history):
            return _completion("Done.")
        search = next((n for n in SEARCH_NAMES if n in tools), None)
        if search is not None and not history:
            args: dict[str, Any] = {"query": self.query} if search == "tool_search" else {"queries": [self.query]}
            return _completion(None, search, args, f"call_{len(self.tokens)}")
        found = [n for n in tools if n not in SEARCH_NAMES]
        name = self.target if self.target in tools else (found[0] if found else None)
        if name is None:
            return _completion("I found no tool for this.")
        self.called.append(name)
        arguments = example_arguments(tools[name].get("parameters") or {})
        return _completion(None, name, arguments, f"call_{len(self.tokens)}")

    def transport(self) -> Any:
        import httpx

        def handle(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json=self.answer(json.loads(request.content)))

        return httpx.MockTransport(handle)


def _completion(
    text: str | None, tool: str | None = None, arguments: Mapping[str, Any] | None = None, call_id: str = ""
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool is not None:
        call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}
        message["tool_calls"] = [call]
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


# --- one task per framework arm ---------------------------------------------------------------------


def _langchain(recorder: _Recorder, tools: Sequence[Any], own: bool) -> None:
    import httpx
    from langchain.agents import create_agent
    from langchain.agents.middleware import LLMToolSelectorMiddleware
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    from toolsearch.integrations.langchain import ToolSearchMiddleware

    lc_tools = [
        StructuredTool.from_function(
            func=lambda **_: "ok", name=t.name, description=t.description or t.name, args_schema=dict(t.input_schema)
        )
        for t in tools
    ]
    model = ChatOpenAI(
        model="bench", api_key="bench", max_retries=0, use_responses_api=False,  # type: ignore[arg-type]
        http_client=httpx.Client(transport=recorder.transport()),
    )
    if own:
        selector = LLMToolSelectorMiddleware(max_tools=SELECTOR_MAX_TOOLS)
        agent = create_agent(model, tools=lc_tools, middleware=[selector])
    else:
        agent = create_agent(model, middleware=[ToolSearchMiddleware(lc_tools)])
    agent.invoke({"messages": [{"role": "user", "content": recorder.query}]})


def _pydantic_ai(recorder: _Recorder, tools: Sequence[Any], own: bool) -> None:
    import httpx
    import openai
    from pydantic_ai import Agent
    from pydantic_ai import Tool as PTool
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from toolsearch.integrations.pydantic_ai import tool_search

    client = openai.AsyncOpenAI(
        api_key="bench", max_retries=0, http_client=httpx.AsyncClient(transport=recorder.transport())  # type: ignore[arg-type]
    )
    model = OpenAIChatModel("bench", provider=OpenAIProvider(openai_client=client))
    deferred = [
        PTool.from_schema(lambda **_: "ok", name=t.name, description=t.description, json_schema=dict(t.input_schema))
        for t in tools
    ]
    for tool in deferred:
        tool.defer_loading = True
    agent = Agent(model, tools=deferred, capabilities=[] if own else [tool_search()])
    agent.run_sync(recorder.query)


def _openai_agents(recorder: _Recorder, tools: Sequence[Any], own: bool) -> None:
    import httpx
    import openai
    from agents import Agent, FunctionTool, OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled

    from toolsearch.integrations.openai_agents import AgentToolSearch

    set_tracing_disabled(True)

    async def invoke(ctx: Any, arguments: str) -> str:
        return "ok"

    fn_tools = [
        FunctionTool(
            name=t.name,
            description=t.description,
            params_json_schema=dict(t.input_schema),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )
        for t in tools
    ]
    client = openai.AsyncOpenAI(
        api_key="bench", max_retries=0, http_client=httpx.AsyncClient(transport=recorder.transport())  # type: ignore[arg-type]
    )
    model = OpenAIChatCompletionsModel(model="bench", openai_client=client)
    if own:
        agent = Agent(name="bench", model=model, tools=list(fn_tools))
        Runner.run_sync(agent, recorder.query, run_config=RunConfig(tracing_disabled=True))
    else:
        search = AgentToolSearch(fn_tools)
        agent = Agent(name="bench", model=model, tools=list(search.tools))
        config = search.run_config(tracing_disabled=True)
        Runner.run_sync(agent, recorder.query, context=search.session("bench"), run_config=config)


_RUNNERS: dict[str, Callable[[_Recorder, Sequence[Any], bool], None]] = {
    "langchain": _langchain,
    "pydantic_ai": _pydantic_ai,
    "openai_agents": _openai_agents,
}


# --- the benchmark ---------------------------------------------------------------------------------


def _safe_tools(ds: Dataset) -> tuple[list[Any], dict[str, str]]:
    """The data set's tools under provider-safe names (every framework sends names as they are)."""
    from toolsearch.tools import Tool, load_tools, provider_safe_name

    # a data set tool named like a framework's search tool (bfcl has a `tool_search`) would stand in for it
    tools = [t for t in load_tools(ds.tools_path) if provider_safe_name(t.name) not in SEARCH_NAMES]
    renamed = {t.name: provider_safe_name(t.name) for t in tools}
    safe = [Tool(renamed[t.name], t.description, t.input_schema) for t in tools]
    return safe, renamed


def _retrieval(ds: Dataset, tools: Sequence[Any], renamed: Mapping[str, str], limit: int | None, seed: int) -> Any:
    from benchmarks.lib.peers import PydanticAIKeywordsPeer
    from toolsearch.evaluation import LabeledQuery, load_queries, score_rankings
    from toolsearch.index import MAX_QUERY_CHARS
    from toolsearch.integrations.pydantic_ai import ToolSearchStrategy

    queries = [q for q in load_queries(ds.queries_path, seed=seed) if q.query.strip()][:limit]
    # A request over toolsearch's limit is cut to it, as in benchmarks/retrieval.py, for both systems alike: the
    # strategy refuses a longer one (its model is told to shorten it), which would score as no answer.
    labelled = [LabeledQuery(q.id, q.query.strip()[:MAX_QUERY_CHARS], tuple(renamed.get(n, n) for n in q.relevant),
                             q.subset) for q in queries]
    truncated = sum(len(q.query.strip()) > MAX_QUERY_CHARS for q in queries)
    peer = PydanticAIKeywordsPeer()
    peer.build(tools)
    strategy = ToolSearchStrategy("bm25", max_results=10)
    definitions = peer._tools
    strategy.index_for(definitions)  # build outside the timed loop, as the capability's cache would
    out: dict[str, Any] = {}
    systems: list[tuple[str, Callable[[str], list[str]]]] = [
        ("pydantic-ai keywords_search_fn", lambda q: peer.search(q, 10)),
        ("toolsearch bm25 (ToolSearchStrategy)", lambda q: strategy.search([q], definitions)),
    ]
    for name, search in systems:
        started = time.perf_counter()
        rankings = [search(q.query) for q in labelled]
        elapsed = (time.perf_counter() - started) * 1000 / max(1, len(labelled))
        metrics = score_rankings(rankings, labelled)
        out[name] = {"nDCG@10": round(metrics["nDCG@10"], 4), "R@5": round(metrics["R@5"], 4),
                     "ms_per_query": round(elapsed, 3)}
    return {"queries": len(labelled), "truncated": truncated, "systems": out}


def _tasks(ds: Dataset, names: set[str], renamed: Mapping[str, str], limit: int, seed: int) -> list[Any]:
    from toolsearch.evaluation import load_queries

    rows = load_queries(ds.queries_path, seed=seed)
    tasks = [(q.id, q.query, renamed[q.relevant[0]]) for q in rows if q.relevant and q.relevant[0] in renamed]
    return [t for t in tasks if t[1].strip() and t[2] in names][:limit]


def run(
    datasets: Sequence[Dataset],
    sizes: Sequence[int | None],
    *,
    limit: int = DEFAULT_LIMIT,
    retrieval_limit: int | None = DEFAULT_RETRIEVAL_LIMIT,
    seed: int = 0,
    frameworks: Sequence[str] = tuple(ARMS),
    encoding: str = "o200k_base",
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run both parts and return the JSON-able report (see `render_markdown`)."""
    import random

    say = log or (lambda message: None)
    logging.getLogger("openai.agents").setLevel(logging.CRITICAL)
    report: dict[str, Any] = {
        "benchmark": "frameworks",
        "machine": machine_info(),
        "settings": {"limit": limit, "retrieval_limit": retrieval_limit, "seed": seed, "encoding": encoding,
                     "sizes": ["all" if s is None else s for s in sizes], "frameworks": list(frameworks),
                     "selector_max_tools": SELECTOR_MAX_TOOLS, "arms": {f: list(ARMS[f]) for f in frameworks}},
        "datasets": {},
    }
    for ds in datasets:
        tools, renamed = _safe_tools(ds)
        by_name = {t.name: t for t in tools}
        say(f"[{ds.name}] {len(tools)} tools: retrieval")
        retrieval = _retrieval(ds, tools, renamed, retrieval_limit, seed)
        entry: dict[str, Any] = {"tools": len(tools), "retrieval": retrieval}
        tasks = _tasks(ds, set(by_name), renamed, limit, seed)
        ds_sizes = [s for s in sizes if s is None or s < len(tools)]
        if None not in ds_sizes:
            ds_sizes.append(None)
        rows: list[dict[str, Any]] = []
        for size in ds_sizes:
            row: dict[str, Any] = {"size": "all" if size is None else size, "frameworks": {}}
            for framework in frameworks:
                arms: dict[str, Any] = {}
                for own, arm in ((True, ARMS[framework][0]), (False, ARMS[framework][1])):
                    totals, requests, successes = [], [], 0
                    for task_id, query, target in tasks:
                        others = [t.name for t in tools if t.name != target]
                        pick = random.Random(f"{seed}:{ds.name}:{task_id}").sample(others, len(others))
                        names = {target, *(pick[: size - 1] if size is not None else pick)}
                        catalog = [t for t in tools if t.name in names]
                        recorder = _Recorder(query, target, encoding)
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            _RUNNERS[framework](recorder, catalog, own)
                        totals.append(sum(recorder.tokens))
                        requests.append(len(recorder.tokens))
                        successes += target in recorder.called
                    n = max(1, len(tasks))
                    arms[arm] = {"input_tokens": round(sum(totals) / n, 1), "requests": round(sum(requests) / n, 2),
                                 "success": round(successes / n, 3)}
                own_tokens = arms[ARMS[framework][0]]["input_tokens"]
                ours = arms[ARMS[framework][1]]["input_tokens"]
                arms["ratio"] = round(own_tokens / ours, 2) if ours else None
                row["frameworks"][framework] = arms
            row["catalog_size"] = len(tools) if size is None else min(size, len(tools))
            rows.append(row)
            say(f"[{ds.name}] size {row['size']}: " + ", ".join(
                f"{f} {row['frameworks'][f]['ratio']}x" for f in frameworks))
        entry["tasks"] = len(tasks)
        entry["tokens"] = rows
        report["datasets"][ds.name] = entry
    return report


# --- report ----------------------------------------------------------------------------------------


def render_markdown(report: Mapping[str, Any]) -> str:
    s = report["settings"]
    lines = [
        "# Agent frameworks: each one's own answer to many tools vs toolsearch's plug-in",
        "",
        "Generated by `python benchmarks/frameworks.py` (see `benchmarks/frameworks.py` for the method).",
        "",
        "## Retrieval: Pydantic AI's keyword search vs toolsearch as its ToolSearch strategy",
        "",
        f"Whole catalog, up to {s['retrieval_limit']} queries per data set (seeded shuffle, seed {s['seed']}).",
        "",
        "| data set | tools | queries | system | nDCG@10 | R@5 | ms/query |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, ds in report["datasets"].items():
        r = ds["retrieval"]
        for system, m in r["systems"].items():
            lines.append(f"| {name} | {ds['tools']:,} | {r['queries']} | {system} | {m['nDCG@10']:.3f} | "
                         f"{m['R@5']:.3f} | {m['ms_per_query']:.2f} |")
    lines += [
        "",
        "## Input tokens per task, through each framework's real agent loop",
        "",
        f"Exact {s['encoding']} tokens of every request body each framework sent (system, messages, tools, and "
        "the structured-output schema of LangChain's selector call), summed per task and averaged over "
        f"{s['limit']} tasks per data set; `success` = the task's tool was called. LangChain's "
        f"`LLMToolSelectorMiddleware` runs with `max_tools={s['selector_max_tools']}` and its selector always picks "
        "the task's tool. Ratio = the framework's own answer / toolsearch's plug-in.",
        "",
    ]
    frameworks = s["frameworks"]
    for name, ds in report["datasets"].items():
        lines += [f"### {name} ({ds['tools']:,} tools, {ds['tasks']} tasks)", ""]
        header = "| catalog size |"
        rule = "|---|"
        for f in frameworks:
            own, ours = s["arms"][f]
            header += f" {f}: {own} | {f}: {ours} | ratio |"
            rule += "---|---|---|"
        lines += [header, rule]
        for row in ds["tokens"]:
            cells = f"| {row['catalog_size']:,} |"
            for f in frameworks:
                own, ours = s["arms"][f]
                a, b = row["frameworks"][f][own], row["frameworks"][f][ours]
                cells += (f" {a['input_tokens']:,.0f} ({a['requests']:.1f} req, {a['success']:.0%}) |"
                          f" {b['input_tokens']:,.0f} ({b['requests']:.1f} req, {b['success']:.0%}) |"
                          f" {row['frameworks'][f]['ratio']}x |")
            lines.append(cells)
        lines.append("")
    lines += machine_markdown(report["machine"])
    for part in report.get("runs", ()):  # data sets run one at a time and merged: when and how loaded
        m = part["machine"]
        lines.append(f"- {part['dataset']}: `toolsearch {' '.join((m.get('argv') or [''])[1:])}` at {m['date']}, "
                     f"load average {m['load_average_at_start']}")
    return "\n".join(lines) + "\n"


# --- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli.datasets(parser)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"tasks per data set for the token part (default {DEFAULT_LIMIT})")
    parser.add_argument("--retrieval-limit", type=int, default=DEFAULT_RETRIEVAL_LIMIT, metavar="N",
                        help=f"queries per data set, retrieval part (default {DEFAULT_RETRIEVAL_LIMIT}; 0 = all)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"catalog sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--frameworks", default=",".join(ARMS),
                        help=f"comma-separated frameworks (default {','.join(ARMS)})")
    cli.seed(parser, "the shuffle")
    cli.outputs(parser, "frameworks", plots=False)


def main(args: argparse.Namespace) -> int:

    quiet = bool(getattr(args, "quiet", False))
    offline_environment()
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = [f for f in frameworks if f not in ARMS]
    if unknown:
        raise SystemExit(f"--frameworks: unknown {unknown[0]!r}; choose from {', '.join(ARMS)}")
    if args.limit < 1:
        raise SystemExit("--limit must be at least 1")
    report = run(
        resolve_datasets(args.dataset),
        cli.sizes(args.sizes),
        limit=args.limit,
        retrieval_limit=args.retrieval_limit or None,
        seed=args.seed,
        frameworks=frameworks,
        log=None if quiet else log,
    )
    out = Path(args.out)
    write_report(out, args.name, report, render_markdown(report), quiet=quiet)
    for name, ds in report["datasets"].items():
        last = ds["tokens"][-1]
        ratios = ", ".join(f"{f} {last['frameworks'][f]['ratio']}x" for f in frameworks)
        print(f"{name}: at {last['catalog_size']:,} tools the frameworks' own answers cost {ratios} our tokens")
    return 0



if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
