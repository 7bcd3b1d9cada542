"""Token-savings benchmark: every tool on every request (baseline) vs tool search, per backend and catalog size.

    python benchmarks/tokens.py                              # offline, deterministic policy model
    python benchmarks/tokens.py --provider openai --model gpt-4.1-mini --limit 10 --sizes 50,200

Both arms run the same tasks through the same loop (`toolsearch.loop`) over the same catalog:

- **baseline**: the loop with `tool_search="off"`: each request carries every tool of the task's
  catalog, and no `tool_search` meta-tool or system-prompt suffix;
- **tool search**: the loop with `tool_search="on"`: the model starts with `tool_search` and sees what
  its searches found, for each backend;
- **auto**: the loop with `tool_search="auto"` on one backend (hybrid when it runs): every tool while the
  catalog's definitions total at most `DIRECT_MAX_TOKENS`, tool search above.

In every arm the session's `allowed` subset is the task's catalog.

With `--augment BACKEND`, `baseline+reason` and `<BACKEND>+reason` run the baseline and that backend
with a one-field augmentation (`toolsearch.augment`): a required string `reason` (or `call_reason`
where a tool of the data set has a `reason` parameter) on every exposed tool, which the offline
model fills with a fixed one-sentence reason. The report gives what it adds per request (tool
definitions) and per call (the value, replayed in every later request's history).

With `--learn`, each tool-search backend also runs as `<backend>+learn`: its index is a
`LearningIndex` over a usage log that the run's own earlier tasks feed (the loop's `usage=`
recorder: a search whose shown tool was then called successfully), one log per backend and
catalog size, filled in task order. The report compares each quarter of the tasks with and
without learning: what the log of the tasks before them changed in extra requests and success.

Catalogs: for each task and size N, its needed tools plus N - |needed| distractors drawn from a seeded
per-task permutation of the data set (so smaller catalogs are subsets of larger ones), or the whole data
set ("all"). One index per data set and backend is built once; a task's catalog is a session's `allowed`
subset over it. Offline, the model is `AgentPolicy` (see `policy.py`) and the figures are exact token
counts (`toolsearch.tokens`, o200k_base by default) of each request's system prompt, messages and tool
definitions as rendered for the provider format; live (`--provider`), the same loop drives the real
model and the provider's reported usage is used.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolsearch._errors import named_error
from toolsearch.loop import DIRECT_MAX_TOKENS
from toolsearch.providers.registry import chat_format_names
from toolsearch.tokens import count_wording

if __package__ in (None, ""):  # `python benchmarks/<name>.py`: import from the clone's root, not benchmarks/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.lib import (
    Dataset,
    backend_list,
    cli,
    command_line,
    log,
    machine_info,
    machine_markdown,
    resolve_datasets,
    write_report,
)
from benchmarks.lib.policy import AgentPolicy, QueryStyle

__all__ = [
    "DEFAULT_SIZES",
    "SYSTEM_PROMPT",
    "Task",
    "TaskRun",
    "add_arguments",
    "break_even",
    "catalog_names",
    "main",
    "run",
    "run_task",
]

DEFAULT_SIZES = "5,10,20,50,200,1000,all"
DEFAULT_LIMIT = 200
DEFAULT_LIVE_LIMIT = 10
SYSTEM_PROMPT = (
    "You are an assistant that completes the user's task by calling tools. Call the tools the task needs "
    "with suitable arguments, then answer briefly."
)
BASELINE = "baseline"
AUTO = "auto"
NATIVE = "+native"  # suffix of an arm that runs a backend with tool_search_mode="native"
NATIVE_FORMATS = ("anthropic", "openai_responses")  # formats with a provider-native tool-search form
LEARN = "+learn"  # suffix of an arm whose index learns from the run's earlier tasks (--learn)
LEARN_BUCKETS = 4  # the tasks in order, in quarters, for the learning comparison
AUGMENT = "+reason"  # suffix of an arm whose tools carry a one-field augmentation (--augment)
REASON_FIELDS = ("reason", "call_reason", "tool_call_reason")  # the first no tool of the data set uses
REASON_DESCRIPTION = "Why you are calling this tool, in one sentence."
# What the offline model states on every call: about the length of a reason a real model writes.
REASON_TEXT = "The task asks for exactly what this tool does, so I am calling it with the values the task gives."
TARGET_SAVINGS = 0.90
TARGET_SUCCESS_RATIO = 0.95
TARGET_EXTRA_REQUESTS = 1.5
TARGET_DATASETS = ("bfcl", "seal_tools")
MAX_ITERATIONS = 8
FAILURE_EXAMPLES = 10


# --- tasks and catalogs -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Task:
    """One benchmark task: the user's request and the tools it needs."""

    id: str
    query: str
    needed: tuple[str, ...]
    subset: str = ""


def catalog_names(
    needed: Sequence[str], distractors: Sequence[str], size: int | None, order: Mapping[str, int]
) -> list[str] | None:
    """The task's catalog at `size` (None = the whole data set): needed tools + the first distractors.

    Names come back in data-set order, so a baseline request lists tools as the catalog holds them.
    """
    if size is None:
        return None
    extra = max(0, size - len(needed))
    names = set(needed) | set(distractors[:extra])
    return sorted(names, key=order.__getitem__)


def _distractors(tools: Sequence[Any], task: Task, count: int, seed: str) -> list[str]:
    """A seeded sample of `count` tools the task does not need, in sampled order (prefixes nest)."""
    needed = set(task.needed)
    others = [t.name for t in tools if t.name not in needed]
    return random.Random(seed).sample(others, min(len(others), count))


@functools.cache
def _metatool() -> Any:
    """One meta-tool for every run: it caches its per-backend definitions across sessions."""
    from toolsearch.metatool import ToolSearchMetaTool

    return ToolSearchMetaTool()


def reason_augmentation(tools: Sequence[Any]) -> dict[str, Any]:
    """The benchmark's one-field augmentation: a required string under the first name no tool uses."""
    used = {p for t in tools for p in (t.input_schema.get("properties") or {})}
    name = next((n for n in REASON_FIELDS if n not in used), None)
    if name is None:
        raise ValueError(f"every candidate field name {REASON_FIELDS} is a parameter of some tool of this data set")
    return {"properties": {name: {"type": "string", "description": REASON_DESCRIPTION}}, "required": [name]}


def _stub(name: str) -> Callable[..., Any]:
    def tool(**arguments: Any) -> dict[str, Any]:
        return {"ok": True, "tool": name, "result": "done"}

    return tool


# --- one run ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class TaskRun:
    """What one task cost and achieved in one arm (baseline or a backend) at one catalog size."""

    method: str
    catalog_size: int
    requests: int = 0
    input_tokens: int = 0  # exact counts of the rendered requests (system + messages + tools)
    tool_tokens: int = 0  # the tool-definition part of input_tokens
    provider_input_tokens: int | None = None  # what the provider billed (live runs)
    provider_output_tokens: int | None = None
    searches: int = 0
    calls: int = 0  # calls of tools other than tool_search the model made
    exposed: bool = False  # every needed tool was in some request's tools
    called: bool = False  # every needed tool ran with valid arguments
    outcome: str = ""
    error: str | None = None
    queries: list[str] = field(default_factory=list)
    request_tokens: list[dict[str, Any]] = field(default_factory=list)
    # under prompt caching (toolsearch.cost): input tokens by billing class, and their price in USD
    fresh_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    price_usd: float = 0.0
    uncached_price_usd: float = 0.0

    @property
    def success(self) -> bool:
        return self.exposed and self.called and self.error is None


def run_task(
    task: Task,
    method: str,
    *,
    sessions: Any,
    model: Any,
    functions: Mapping[str, Callable[..., Any]],
    allowed: Sequence[str] | None,
    catalog_size: int,
    session_id: str,
    max_iterations: int = MAX_ITERATIONS,
    encoding: str = "o200k_base",
    keep_requests: bool = False,
    direct_max_tokens: int = DIRECT_MAX_TOKENS,
    usage: Any = None,
    augment: Mapping[str, Any] | None = None,
) -> TaskRun:
    """Run one task through the loop: as the baseline (`method="baseline"`, every tool on every
    request), with `tool_search="auto"` (`method="auto"`), or with tool search (a backend's name;
    `<backend>+native` for the provider's native form, `tool_search_mode="native"`). `usage`, a
    `UsageRecorder`, is fed the run's searches and calls; `augment`, a JSON schema, is the loop's
    `augment=` (an arm named `<arm>+reason`)."""
    from toolsearch.loop import LoopConfig, ResultStatus
    from toolsearch.loop import run as run_loop
    from toolsearch.providers._base import ProviderError

    plain = method.removesuffix(AUGMENT)
    baseline = plain == BASELINE
    session = sessions.create(session_id, allowed=allowed)
    config = LoopConfig(
        max_iterations=max_iterations,
        tool_timeout=None,
        parallel_tool_calls=False,  # stubs return at once; threads would only add noise
        tool_search="off" if baseline else ("auto" if plain == AUTO else "on"),
        direct_max_tokens=direct_max_tokens,
        encoding=encoding,
        tool_search_mode="native" if plain.endswith(NATIVE) else "schema",
    )
    stats = TaskRun(method, catalog_size)
    try:
        result = run_loop(
            model,
            task.query,
            session=session,
            functions=functions,
            system=SYSTEM_PROMPT,
            metatool=_metatool(),
            config=config,
            usage=usage,
            augment=augment,
        )
    except ProviderError as exc:
        stats.error = named_error(exc)[:300]
        return stats
    finally:
        sessions.close(session_id)
        if usage is not None:
            usage.forget(session_id)
    seen: set[str] = set()
    billed_in: list[int] = []
    billed_out: list[int] = []
    for record in result.requests:
        seen.update(record.tool_names)
        if record.tokens is not None:
            stats.input_tokens += record.tokens.total
            stats.tool_tokens += record.tokens.tools
        if record.usage is not None:
            if record.usage.input_tokens is not None:
                billed_in.append(record.usage.input_tokens)
            if record.usage.output_tokens is not None:
                billed_out.append(record.usage.output_tokens)
        if keep_requests:
            tokens = record.tokens
            stats.request_tokens.append(
                {
                    "cache": record.cache.to_dict() if record.cache else None,
                    "iteration": record.iteration,
                    "tools_sent": len(record.tool_names),
                    "system_tokens": tokens.system if tokens else None,
                    "message_tokens": tokens.messages if tokens else None,
                    "tool_tokens": tokens.tools if tokens else None,
                    "input_tokens": tokens.total if tokens else None,
                    "usage": record.usage.to_dict() if record.usage else None,
                }
            )
    stats.requests = len(result.requests)
    cache = result.cache
    if cache is None:  # a zero would read as a free task: a benchmark that cannot price must not report
        raise RuntimeError(f"task {task.id!r} ({method}) was not priced: {result.unpriced}")
    stats.fresh_tokens, stats.cache_write_tokens, stats.cache_read_tokens = (
        cache.fresh,
        cache.cache_write,
        cache.cache_read,
    )
    stats.price_usd, stats.uncached_price_usd = cache.price_usd, cache.uncached_price_usd
    stats.provider_input_tokens = sum(billed_in) if billed_in else None
    stats.provider_output_tokens = sum(billed_out) if billed_out else None
    stats.searches = len(result.searches)
    stats.calls = sum(1 for r in result.tool_results if r.search is None)
    stats.queries = [s.query or "" for s in result.searches]
    ran = {r.call.name for r in result.tool_results if r.status is ResultStatus.OK}
    stats.exposed = all(n in seen for n in task.needed)
    stats.called = all(n in ran for n in task.needed)
    stats.outcome = result.outcome.value
    return stats


# --- the benchmark ---------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _aggregate(runs: Sequence[TaskRun], live: bool) -> dict[str, Any]:
    done = [r for r in runs if r.error is None]
    out: dict[str, Any] = {
        "tasks": len(runs),
        "errors": len(runs) - len(done),
        "catalog_size": round(_mean([r.catalog_size for r in runs]), 1),
        "input_tokens": round(_mean([r.input_tokens for r in done]), 1),
        "tool_tokens": round(_mean([r.tool_tokens for r in done]), 1),
        "requests": round(_mean([r.requests for r in done]), 3),
        "searches": round(_mean([r.searches for r in done]), 3),
        "calls": round(_mean([r.calls for r in done]), 3),
        "fresh_tokens": round(_mean([r.fresh_tokens for r in done]), 1),
        "cache_write_tokens": round(_mean([r.cache_write_tokens for r in done]), 1),
        "cache_read_tokens": round(_mean([r.cache_read_tokens for r in done]), 1),
        "price_usd": _mean([r.price_usd for r in done]),
        "uncached_price_usd": _mean([r.uncached_price_usd for r in done]),
        "exposed": round(_mean([float(r.exposed) for r in runs]), 4),
        "success": round(_mean([float(r.success) for r in runs]), 4),
    }
    if live:
        billed = [r.provider_input_tokens for r in done if r.provider_input_tokens is not None]
        billed_out = [r.provider_output_tokens for r in done if r.provider_output_tokens is not None]
        out["provider_input_tokens"] = round(_mean(billed), 1) if billed else None
        out["provider_output_tokens"] = round(_mean(billed_out), 1) if billed_out else None
    return out


def _compare(method: dict[str, Any], base: dict[str, Any], live: bool) -> None:
    """Add savings, extra requests and the success ratio against the baseline (in place)."""
    key = "provider_input_tokens" if live and method.get("provider_input_tokens") is not None else "input_tokens"
    b, m = base.get(key), method.get(key)
    method["savings"] = round(1 - m / b, 4) if b and m is not None and not math.isnan(b) else None
    # the price with caching against the baseline with caching on, and against the baseline without caching
    method["cost_savings"] = _ratio_savings(method.get("price_usd"), base.get("price_usd"))
    method["cost_savings_vs_uncached"] = _ratio_savings(method.get("price_usd"), base.get("uncached_price_usd"))
    method["uncached_cost_savings"] = _ratio_savings(method.get("uncached_price_usd"), base.get("uncached_price_usd"))
    method["extra_requests"] = round(method["requests"] - base["requests"], 3)
    method["success_ratio"] = round(method["success"] / base["success"], 4) if base["success"] else None


def _ratio_savings(value: float | None, base: float | None) -> float | None:
    if value is None or not base or math.isnan(base) or math.isnan(value):
        return None
    return round(1 - value / base, 4)


def break_even(points: Sequence[tuple[float, float | None]], tokens: Sequence[float] | None = None) -> dict[str, Any]:
    """Where savings cross zero, by linear interpolation in log(catalog size).

    `points` are (mean catalog size, savings) in increasing size; `tokens`, when given, the catalog's
    tool-definition tokens at each size, interpolated the same way. Returns the size (and tokens) below
    which tool search costs more than it saves, or says the crossing lies outside the sizes measured.
    """
    weights = list(tokens) if tokens is not None else [math.nan] * len(points)
    pts = [(s, v, t) for (s, v), t in zip(points, weights, strict=True) if v is not None and s > 0]
    if not pts:
        return {"size": None, "note": "no data"}
    if all(v >= 0 for _, v, _ in pts):  # `auto` sends small catalogs whole: it saves nothing there, and loses nothing
        return {"size": None, "note": f"never costs more than sending every tool (sizes {pts[0][0]:g} and up)"}
    last_loss = max(i for i, (_, v, _) in enumerate(pts) if v < 0)
    if last_loss == len(pts) - 1:
        return {"size": None, "note": f"tool search costs more at every size measured (up to {pts[-1][0]:g})"}
    (s0, v0, t0), (s1, v1, t1) = pts[last_loss], pts[last_loss + 1]
    share = (0 - v0) / (v1 - v0)  # of the way from s0 to s1, in log size
    out: dict[str, Any] = {
        "size": round(math.exp(math.log(s0) + share * (math.log(s1) - math.log(s0))), 1),
        "note": f"between {s0:g} and {s1:g}",
    }
    if t0 > 0 and t1 > 0:  # NaN compares false: no tokens given
        out["definition_tokens"] = round(math.exp(math.log(t0) + share * (math.log(t1) - math.log(t0))))
    return out


def _catalog_tokens(base: Mapping[str, Any]) -> float:
    """Tool-definition tokens of the catalog: the baseline sends all of it on each of its requests."""
    return float(base["tool_tokens"] / base["requests"]) if base.get("requests") else math.nan


def _load_tasks(ds: Dataset, limit: int | None, seed: int, names: set[str]) -> list[Task]:
    from toolsearch.evaluation import load_queries

    rows = load_queries(ds.queries_path, seed=seed)
    tasks = [Task(q.id, q.query, tuple(dict.fromkeys(q.relevant)), q.subset) for q in rows]
    tasks = [t for t in tasks if t.needed and all(n in names for n in t.needed) and t.query.strip()]
    return tasks[:limit] if limit else tasks


def _backend_of(method: str, auto_backend: str | None) -> str:
    """The search backend behind an arm's name (`auto` -> its backend, `<backend>+native` / `+learn` -> the backend)."""
    method = method.removesuffix(AUGMENT)
    if method == AUTO and auto_backend:
        return auto_backend
    return method.removesuffix(NATIVE).removesuffix(LEARN)


def _style(method: str) -> QueryStyle:
    """How the policy writes queries for a backend: patterns for regex, words for the others."""
    return "regex" if method == "regex" else "text"


def _model_factory(provider: str | None, model_name: str | None, fmt: str, base_url: str | None) -> Any:
    """(task, style, fill) -> ChatModel: the offline policy model per task (`fill`: argument values it
    gives every call whose tool has them, the augmented reason), or one live provider model."""
    from toolsearch.providers.scripted import ScriptedModel

    if provider is None:

        def offline(task: Task, style: QueryStyle, fill: Mapping[str, Any] | None = None) -> Any:
            policy = AgentPolicy(task.query, task.needed, style=style, fill=fill)
            return ScriptedModel(policy=policy, format=fmt)

        return offline
    if not model_name:
        raise SystemExit("--provider needs --model NAME")
    live = _live_model(provider, model_name, base_url)
    return lambda task, style, fill=None: live


def _live_model(provider: str, model_name: str, base_url: str | None) -> Any:
    if provider == "openai":
        if not (os.environ.get("OPENAI_API_KEY")):
            raise SystemExit("--provider openai needs OPENAI_API_KEY in the environment")
        try:
            import openai
        except ImportError:
            raise SystemExit("the openai package is not installed: pip install 'toolsearch[providers]'") from None
        from toolsearch.providers.openai import OpenAIChatModel

        client = openai.OpenAI(base_url=base_url) if base_url else openai.OpenAI()
        return OpenAIChatModel(client, model_name)
    if provider == "anthropic":
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise SystemExit("--provider anthropic needs ANTHROPIC_API_KEY in the environment")
        try:
            import anthropic
        except ImportError:
            raise SystemExit("the anthropic package is not installed: pip install 'toolsearch[providers]'") from None
        from toolsearch.providers.anthropic import AnthropicModel

        aclient = anthropic.Anthropic(base_url=base_url) if base_url else anthropic.Anthropic()
        return AnthropicModel(aclient, model_name)
    raise SystemExit(f"unknown provider {provider!r}; choose openai or anthropic")


def run(
    datasets: Sequence[Dataset],
    backends: Sequence[str],
    sizes: Sequence[int | None],
    *,
    limit: int | None = DEFAULT_LIMIT,
    seed: int = 0,
    fmt: str = "openai_chat",
    encoding: str = "o200k_base",
    provider: str | None = None,
    model_name: str | None = None,
    base_url: str | None = None,
    trace_size: int = 1000,
    auto_backend: str | None = None,
    direct_max_tokens: int = DIRECT_MAX_TOKENS,
    native_backend: str | None = None,
    learn: bool = False,
    augment_backend: str | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return the JSON-able report (see `render_markdown` for its shape).

    `auto_backend` adds the `auto` arm (`tool_search="auto"`) on that backend, which must be one of `backends`;
    `native_backend` adds `<backend>+native`, the provider's native form (`fmt` anthropic or openai_responses);
    `learn` adds `<backend>+learn` for each backend, whose index learns from the run's earlier tasks;
    `augment_backend` adds `baseline+reason` and `<backend>+reason`, both with a one-field augmentation.
    """
    from toolsearch.cost import load_prices
    from toolsearch.index import ToolIndex
    from toolsearch.session import SessionManager
    from toolsearch.tools import load_tools

    say = log or (lambda message: None)
    live = provider is not None
    make_model = _model_factory(provider, model_name, fmt, base_url)
    if auto_backend is not None and auto_backend not in backends:
        raise ValueError(f"auto_backend {auto_backend!r} is not one of the backends run: {', '.join(backends)}")
    if native_backend is not None and (native_backend not in backends or fmt not in NATIVE_FORMATS):
        raise ValueError(f"native_backend needs one of the backends run and a format among {NATIVE_FORMATS}")
    if augment_backend is not None and augment_backend not in backends:
        raise ValueError(f"augment_backend {augment_backend!r} is not one of the backends run: {', '.join(backends)}")
    arms = [
        *backends,
        *([AUTO] if auto_backend else []),
        *([native_backend + NATIVE] if native_backend else []),
        *([b + LEARN for b in backends] if learn else []),
        *([BASELINE + AUGMENT, augment_backend + AUGMENT] if augment_backend else []),
    ]
    prices = load_prices()
    price_fmt = "anthropic" if provider == "anthropic" else ("openai_chat" if live else fmt)
    price = prices.model_for(price_fmt, model_name)
    rules = prices.rules_for(price_fmt, model_name)
    report: dict[str, Any] = {
        "benchmark": "tokens",
        "machine": machine_info(),
        "settings": {
            "mode": f"live {provider} {model_name}" if live else "offline policy model",
            "format": "anthropic" if provider == "anthropic" else ("openai_chat" if live else fmt),
            "encoding": encoding,
            "limit": limit,
            "seed": seed,
            "sizes": ["all" if s is None else s for s in sizes],
            "backends": list(backends),
            "methods": arms,
            "auto_backend": auto_backend,
            "direct_max_tokens": direct_max_tokens,
            "native_backend": native_backend,
            "learn": learn,
            "augment_backend": augment_backend,
            "reason_text": REASON_TEXT if augment_backend else None,
            "reason_tokens": _value_tokens(REASON_TEXT, encoding) if augment_backend else None,
            "prices": {
                "model": price.model,
                "input": price.input,
                "cache_write": price.cache_write,
                "cache_read": price.cache_read,
                "source": price.source,
                "retrieved": prices.retrieved,
                "rules": {
                    "provider": rules.provider,
                    "min_cacheable_tokens": rules.min_cacheable_tokens,
                    "increment_tokens": rules.increment_tokens,
                    "lifetime_seconds": rules.lifetime_seconds,
                    "breakpoints": list(rules.breakpoints) if rules.breakpoints is not None else None,
                    "lookback_blocks": rules.lookback_blocks,
                    "deferred_tools_in_prefix": rules.deferred_tools_in_prefix,
                    "tool_use_system_prompt_tokens": dict(rules.tool_use_prompt_tokens) or None,
                },
            },
            "system_prompt": SYSTEM_PROMPT,
            "max_iterations": MAX_ITERATIONS,
        },
        "datasets": {},
    }
    started = time.perf_counter()
    # the request-by-request example: a multi-tool seal_tools task when that set is run, else the first big set
    trace_from = "seal_tools" if any(d.name == "seal_tools" for d in datasets) else None
    report["trace"] = None
    for ds in datasets:
        tools = load_tools(ds.tools_path)
        order = {t.name: i for i, t in enumerate(tools)}
        tasks = _load_tasks(ds, limit, seed, set(order))
        functions = {t.name: _stub(t.name) for t in tools}
        ds_sizes = [s for s in sizes if s is None or s < len(tools)]
        if None not in ds_sizes:
            ds_sizes.append(None)
        say(
            f"[{ds.name}] {len(tools)} tools, {len(tasks)} tasks, sizes {['all' if s is None else s for s in ds_sizes]}"
        )
        managers: dict[Any, Any] = {}  # by arm name; +learn arms by (size, arm)
        build_s: dict[str, float] = {}
        for backend in backends:
            t0 = time.perf_counter()
            index = ToolIndex.build(tools, backend=backend)
            build_s[backend] = round(time.perf_counter() - t0, 2)
            managers[backend] = SessionManager(index, max_sessions=100)
            say(f"[{ds.name}] built {backend} index in {build_s[backend]:.1f}s")
        base_sessions = managers[backends[0]]
        if auto_backend:
            managers[AUTO] = managers[auto_backend]
        if native_backend:
            managers[native_backend + NATIVE] = managers[native_backend]
        reason = reason_augmentation(tools) if augment_backend else None
        if augment_backend:
            managers[BASELINE + AUGMENT] = base_sessions
            managers[augment_backend + AUGMENT] = managers[augment_backend]
        recorders: dict[tuple[int | None, str], Any] = {}
        if learn:
            managers, recorders = _learning_arms(managers, backends, ds_sizes)
        log_before: dict[tuple[int | None, str], list[int]] = {key: [] for key in recorders}  # per task, in order
        methods = [BASELINE, *arms]
        runs: dict[tuple[int | None, str], list[TaskRun]] = {(s, m): [] for s in ds_sizes for m in methods}
        failures: dict[str, list[dict[str, Any]]] = {b: [] for b in arms}
        biggest = max((s for s in ds_sizes if s is not None), default=0)
        t_ds = time.perf_counter()
        for number, task in enumerate(tasks, 1):
            distractors = _distractors(tools, task, biggest, f"{seed}:{ds.name}:{task.id}")
            for size in ds_sizes:
                allowed = catalog_names(task.needed, distractors, size, order)
                catalog_size = len(tools) if allowed is None else len(allowed)
                for method in methods:
                    sessions = base_sessions if method == BASELINE else managers[method]
                    if method.endswith(LEARN):
                        sessions = managers[(size, method)]
                        log_before[(size, method)].append(len(recorders[(size, method)].log))
                    augment = reason if method.endswith(AUGMENT) else None
                    fill = {field: REASON_TEXT for field in augment["properties"]} if augment else None
                    stats = run_task(
                        task,
                        method,
                        sessions=sessions,
                        model=make_model(task, _style(_backend_of(method, auto_backend)), fill),
                        functions=functions,
                        allowed=allowed,
                        catalog_size=catalog_size,
                        session_id=f"{ds.name}:{task.id}:{size}:{method}",
                        encoding=encoding,
                        direct_max_tokens=direct_max_tokens,
                        usage=recorders.get((size, method)),
                        augment=augment,
                    )
                    runs[(size, method)].append(stats)
                    missed = size is None and method != BASELINE and not stats.success
                    if missed and len(failures[method]) < FAILURE_EXAMPLES:
                        failures[method].append(
                            {
                                "task": task.id,
                                "query": task.query[:300],
                                "needed": list(task.needed),
                                "queries": stats.queries,
                                "error": stats.error,
                            }
                        )
            if number % 25 == 0 or number == len(tasks):
                say(f"[{ds.name}] {number}/{len(tasks)} tasks ({time.perf_counter() - t_ds:.0f}s)")
        by_size: list[dict[str, Any]] = []
        for size in ds_sizes:
            row: dict[str, Any] = {"size": "all" if size is None else size, "methods": {}}
            base = _aggregate(runs[(size, BASELINE)], live)
            row["methods"][BASELINE] = base
            for backend in arms:
                agg = _aggregate(runs[(size, backend)], live)
                _compare(agg, base, live)
                row["methods"][backend] = agg
            for backend in arms:
                if backend.endswith(AUGMENT):
                    row["methods"][backend]["augment_cost"] = augment_cost(
                        row["methods"][backend], row["methods"][backend.removesuffix(AUGMENT)]
                    )
            row["catalog_size"] = base["catalog_size"]
            by_size.append(row)
        if report.get("trace") is None and len(tools) >= trace_size and trace_from in (None, ds.name):
            report["trace"] = _trace(
                ds.name, tools, tasks, order, managers, backends, trace_size, seed, make_model, functions, encoding
            )
        report["datasets"][ds.name] = {
            "path": str(ds.folder),
            "tools": len(tools),
            "tasks": len(tasks),
            "multi_tool_tasks": sum(len(t.needed) > 1 for t in tasks),
            "build_s": build_s,
            "by_size": by_size,
            "break_even": {
                b: break_even(
                    [(r["catalog_size"], r["methods"][b]["savings"]) for r in by_size],
                    [_catalog_tokens(r["methods"][BASELINE]) for r in by_size],
                )
                for b in arms
            },
            "break_even_cached": {
                b: break_even(
                    [(r["catalog_size"], r["methods"][b]["cost_savings"]) for r in by_size],
                    [_catalog_tokens(r["methods"][BASELINE]) for r in by_size],
                )
                for b in arms
            },
            "failures_at_full_catalog": failures,
            "elapsed_s": round(time.perf_counter() - t_ds, 1),
            "augment_field": next(iter(reason["properties"])) if reason else None,
        }
        if learn:
            report["datasets"][ds.name]["learning"] = _learning_effect(
                runs, ds_sizes, backends, recorders, log_before, live
            )
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["targets"] = _targets(report)
    return report


def _value_tokens(text: str, encoding: str) -> int:
    """Tokens of one augmented value as a call's arguments carry it (a JSON string)."""
    import json

    from toolsearch.tokens import count_tokens

    return count_tokens(json.dumps(text, ensure_ascii=False), encoding)


def augment_cost(augmented: Mapping[str, Any], plain: Mapping[str, Any]) -> dict[str, Any]:
    """What an augmentation added to an arm, per task means against the same arm without it: tool-definition
    tokens per request, and the other input tokens (the values replayed in later requests) per call."""
    requests, calls = augmented.get("requests") or 0, augmented.get("calls") or 0
    tools = augmented["tool_tokens"] - plain["tool_tokens"]
    rest = (augmented["input_tokens"] - augmented["tool_tokens"]) - (plain["input_tokens"] - plain["tool_tokens"])
    added = augmented["input_tokens"] - plain["input_tokens"]
    return {
        "input_tokens": round(added, 1),
        "input_share": round(added / plain["input_tokens"], 4) if plain["input_tokens"] else None,
        "definition_tokens_per_request": round(tools / requests, 1) if requests else None,
        "message_tokens_per_call": round(rest / calls, 1) if calls else None,
        "price_share": (
            round(augmented["price_usd"] / plain["price_usd"] - 1, 4) if plain.get("price_usd") else None
        ),
    }


def _learning_arms(
    managers: Mapping[str, Any], backends: Sequence[str], sizes: Sequence[int | None]
) -> tuple[dict[Any, Any], dict[tuple[int | None, str], Any]]:
    """A session manager over a LearningIndex and a usage recorder per backend and catalog size.

    The logs start empty and each is fed only by its own arm's earlier tasks at that size. The
    ranker recompiles on every change (`refresh_seconds=0`), so a run is deterministic.
    """
    from toolsearch.learning import LearnedRanker, LearningIndex
    from toolsearch.session import SessionManager
    from toolsearch.usage import UsageLog, UsageRecorder

    out: dict[Any, Any] = dict(managers)
    recorders: dict[tuple[int | None, str], Any] = {}
    for backend in backends:
        index = managers[backend].index
        for size in sizes:
            log = UsageLog(index.catalog.hash)
            out[(size, backend + LEARN)] = SessionManager(
                LearningIndex(index, LearnedRanker(log, refresh_seconds=0)), max_sessions=100
            )
            recorders[(size, backend + LEARN)] = UsageRecorder(log)
        out[backend + LEARN] = out[(sizes[-1], backend + LEARN)]  # the trace and lookups by arm name
    return out, recorders


def _learning_effect(
    runs: Mapping[tuple[int | None, str], Sequence[TaskRun]],
    sizes: Sequence[int | None],
    backends: Sequence[str],
    recorders: Mapping[tuple[int | None, str], Any],
    log_before: Mapping[tuple[int | None, str], Sequence[int]],
    live: bool,
) -> list[dict[str, Any]]:
    """Per size and backend, the tasks in order by quarter: without vs with learning, against the baseline."""
    out = []
    for size in sizes:
        base_runs = runs[(size, BASELINE)]
        n = len(base_runs)
        bounds = [round(i * n / LEARN_BUCKETS) for i in range(LEARN_BUCKETS + 1)]
        for backend in backends:
            plain_runs, learned_runs = runs[(size, backend)], runs[(size, backend + LEARN)]
            quarters = []
            for lo, hi in itertools.pairwise(bounds):
                if hi <= lo:
                    continue
                base = _aggregate(base_runs[lo:hi], live)
                plain, learned = _aggregate(plain_runs[lo:hi], live), _aggregate(learned_runs[lo:hi], live)
                _compare(plain, base, live)
                _compare(learned, base, live)
                before = log_before.get((size, backend + LEARN)) or [0] * n
                quarters.append(
                    {"tasks": f"{lo + 1}-{hi}", "log_before": before[lo], "without": plain, "with": learned}
                )
            recorder = recorders.get((size, backend + LEARN))
            out.append(
                {
                    "size": "all" if size is None else size,
                    "catalog_size": _aggregate(base_runs, live)["catalog_size"],
                    "backend": backend,
                    "quarters": quarters,
                    "log_entries": len(recorder.log) if recorder is not None else 0,
                }
            )
    return out


def _trace(
    dataset: str,
    tools: Sequence[Any],
    tasks: Sequence[Task],
    order: Mapping[str, int],
    managers: Mapping[str, Any],
    backends: Sequence[str],
    size: int,
    seed: int,
    make_model: Any,
    functions: Mapping[str, Callable[..., Any]],
    encoding: str,
) -> dict[str, Any] | None:
    """Per-request token figures of one multi-step task (the first needing 3+ tools) over `size` tools."""
    task = next((t for t in tasks if len(t.needed) >= 3), None) or next((t for t in tasks if len(t.needed) >= 2), None)
    if task is None:
        return None
    distractors = _distractors(tools, task, size, f"{seed}:{dataset}:{task.id}:trace")
    allowed = catalog_names(task.needed, distractors, size, order)
    out: dict[str, Any] = {
        "dataset": dataset,
        "task": task.id,
        "query": task.query,
        "needed": list(task.needed),
        "catalog_size": len(allowed or ()),
        "methods": {},
    }
    for method in [BASELINE, *backends]:
        stats = run_task(
            task,
            method,
            sessions=managers[backends[0] if method == BASELINE else method],
            model=make_model(task, _style(method)),
            functions=functions,
            allowed=allowed,
            catalog_size=len(allowed or ()),
            session_id=f"trace:{method}",
            encoding=encoding,
            keep_requests=True,
        )
        out["methods"][method] = {
            "requests": stats.request_tokens,
            "input_tokens": stats.input_tokens,
            "tool_tokens": stats.tool_tokens,
            "queries": stats.queries,
            "success": stats.success,
        }
    return out


def _targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets at full catalogs of bfcl and seal_tools, per backend."""
    out: dict[str, Any] = {
        "savings_min": TARGET_SAVINGS,
        "success_ratio_min": TARGET_SUCCESS_RATIO,
        "extra_requests_max": TARGET_EXTRA_REQUESTS,
        "results": {},
    }
    for name in TARGET_DATASETS:
        ds = report["datasets"].get(name)
        if not ds:
            continue
        full = next(r for r in ds["by_size"] if r["size"] == "all")
        for backend, m in full["methods"].items():
            if backend == BASELINE or backend.endswith(AUGMENT):  # an augmented arm measures a cost, not a target
                continue
            checks = {
                "savings": m["savings"] is not None and m["savings"] >= TARGET_SAVINGS,
                "success_ratio": m["success_ratio"] is not None and m["success_ratio"] >= TARGET_SUCCESS_RATIO,
                "extra_requests": m["extra_requests"] <= TARGET_EXTRA_REQUESTS,
            }
            out["results"].setdefault(backend, {})[name] = {
                "savings": m["savings"],
                "success_ratio": m["success_ratio"],
                "extra_requests": m["extra_requests"],
                "met": all(checks.values()),
                "checks": checks,
            }
    for per_ds in out["results"].values():
        per_ds["all_met"] = all(v["met"] for v in per_ds.values() if isinstance(v, dict))
    return out


# --- reports -----------------------------------------------------------------------------------------


def _arms(settings: Mapping[str, Any]) -> list[str]:
    """The compared arms: each backend, then `auto` when it ran (older reports list backends only)."""
    return list(settings.get("methods") or settings["backends"])


def _search_arms(settings: Mapping[str, Any]) -> list[str]:
    """The arms that search (`baseline+reason` sends every tool: it has no break-even)."""
    return [a for a in _arms(settings) if not a.startswith(BASELINE)]


def _augment_markdown(report: dict[str, Any]) -> list[str]:
    """What the one-field augmentation costs, per request and per call (reports run with --augment)."""
    s = report["settings"]
    if not s.get("augment_backend"):
        return []
    lines = [
        "",
        "## What a one-field augmentation costs",
        "",
        "`baseline+reason` and `" + s["augment_backend"] + "+reason` run with `augment=` a required string field "
        "on every exposed tool (not on `tool_search`), against the same arms without it. The offline model fills "
        f"it with a fixed reason, `{s['reason_text']}` ({s['reason_tokens']} tokens as a JSON string, written by "
        "the model on every call: output tokens, not counted below). Definition tokens per request: the "
        "augmented arm's tool-definition tokens minus the plain arm's, per request; message tokens per call: "
        "the rest of the input difference (each call's reason replayed in every later request), per call.",
        "",
        "| data set | field | catalog | arm | input tokens / task added | added vs the arm without | "
        "definition tokens / request | message tokens / call | price with caching vs the arm without |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, ds in report["datasets"].items():
        for row in ds["by_size"]:
            label = f"all ({row['catalog_size']:,.0f})" if row["size"] == "all" else f"{row['catalog_size']:,.0f}"
            for arm, m in row["methods"].items():
                c = m.get("augment_cost")
                if not c:
                    continue
                lines.append(
                    f"| {name} | `{ds.get('augment_field')}` | {label} | {arm} | {_num(c['input_tokens'])} | "
                    f"{_pct(c['input_share'])} | {_num(c['definition_tokens_per_request'])} | "
                    f"{_num(c['message_tokens_per_call'])} | {_pct(c['price_share'])} |"
                )
    return lines


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.0f}"


def render_markdown(report: dict[str, Any], plots: Sequence[Path] = (), command: str = "") -> str:
    """The human-readable report."""
    s = report["settings"]
    live = s["mode"] != "offline policy model"
    counted = count_wording(s["format"], s["encoding"], noun="input tokens", compared="the arms")
    token_word = "provider-reported input tokens" if live else counted
    lines = [
        "# Token savings: every tool on every request vs tool search",
        "",
        f"Mean {token_word} per task (all requests of the task summed: system prompt, messages, tool "
        f"definitions, rendered as `{s['format']}` requests), for a plain tool-calling loop that sends every "
        "tool on every request (**baseline**) and for the tool-search loop with each backend, over the same "
        "tasks, catalogs and model.",
        "",
        f"- Model: {s['mode']}; {s['limit'] or 'all'} tasks per data set (seed {s['seed']}); catalog sizes "
        f"{', '.join(str(x) for x in s['sizes'])} (needed tools + seeded distractors; `all` = the whole data set)",
        f"- Run time: {report['elapsed_s']:.0f} s",
    ]
    if command:
        lines.append(f"- Command: `{command}`")
    lines += machine_markdown(report["machine"])
    lines += _learning_markdown(report)
    lines += _augment_markdown(report)
    lines += _cost_markdown(report)
    lines += ["", "## At the full catalogs", ""]
    lines.append(
        "| data set | tools | method | input tokens / task | tool-definition tokens / task | savings | "
        "requests / task | extra requests | success | success vs baseline |"
    )
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, ds in report["datasets"].items():
        full = next(r for r in ds["by_size"] if r["size"] == "all")
        for method, m in full["methods"].items():
            lines.append(
                f"| {name} | {ds['tools']:,} | {method} | "
                f"{_num(m.get('provider_input_tokens') or m['input_tokens'])} | "
                f"{_num(m['tool_tokens'])} | {_pct(m.get('savings'))} | {m['requests']:.2f} | "
                f"{'' if method == BASELINE else format(m['extra_requests'], '+.2f')} | {_pct(m['success'])} | "
                f"{'' if method == BASELINE else _pct(m.get('success_ratio'))} |"
            )
    t = report["targets"]
    if t["results"]:
        lines += [
            "",
            f"### Targets (bfcl and seal_tools, full catalogs): ≥ {t['savings_min'] * 100:.0f}% fewer input tokens, "
            f"success ≥ {t['success_ratio_min'] * 100:.0f}% of the baseline's, ≤ {t['extra_requests_max']} extra "
            "requests per task",
            "",
            "| backend | data set | savings | success vs baseline | extra requests | met |",
            "|---|---|---:|---:|---:|---|",
        ]
        for backend, per_ds in t["results"].items():
            for name, v in per_ds.items():
                if not isinstance(v, dict):
                    continue
                missed = [k for k, ok in v["checks"].items() if not ok]
                verdict = "yes" if v["met"] else "no (" + ", ".join(missed) + ")"
                lines.append(
                    f"| {backend} | {name} | {_pct(v['savings'])} | {_pct(v['success_ratio'])} | "
                    f"{v['extra_requests']:+.2f} | {verdict} |"
                )
    lines += [
        "",
        "## Break-even catalog size",
        "",
        "Below this many tools, tool search costs more input tokens per task than sending every tool "
        "(interpolated in log size between the two measured sizes where savings change sign; the catalog's "
        "tool-definition tokens at that size are interpolated the same way). `auto` sends "
        "catalogs whose definitions fit its token limit whole, so it loses only between that limit and the "
        "break-even.",
        "",
        "| data set | " + " | ".join(_search_arms(s)) + " |",
        "|---|" + "---|" * len(_search_arms(s)),
    ]
    for name, ds in report["datasets"].items():
        cells = []
        for b in _search_arms(s):
            be = ds["break_even"][b]
            if be["size"] is None:
                cells.append(be["note"])
                continue
            weight = f"~{be['definition_tokens']:,} definition tokens; " if be.get("definition_tokens") else ""
            cells.append(f"~{be['size']:.0f} tools ({weight}{be['note']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for path in plots:
        lines += ["", f"![{path.stem}]({path.name})"]
    for name, ds in report["datasets"].items():
        lines += [
            "",
            f"## {name}: {ds['tools']:,} tools, {ds['tasks']} tasks ({ds['multi_tool_tasks']} need several tools)",
            "",
            "Mean input tokens per task (savings vs baseline; extra requests; success).",
            "",
            "| catalog | baseline | " + " | ".join(_arms(s)) + " |",
            "|---:|---:|" + "---:|" * len(_arms(s)),
        ]
        for r in ds["by_size"]:
            base = r["methods"][BASELINE]
            cells = [
                f"{_num(base.get('provider_input_tokens') or base['input_tokens'])} "
                f"({base['requests']:.2f} req; {_pct(base['success'])})"
            ]
            for b in _arms(s):
                m = r["methods"][b]
                cells.append(
                    f"{_num(m.get('provider_input_tokens') or m['input_tokens'])} ({_pct(m['savings'])}; "
                    f"{m['extra_requests']:+.2f} req; {_pct(m['success'])})"
                )
            label = f"all ({r['catalog_size']:,.0f})" if r["size"] == "all" else f"{r['catalog_size']:,.0f}"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        misses = {b: f for b, f in ds["failures_at_full_catalog"].items() if f}
        if misses:
            lines += ["", "Tasks tool search missed at the full catalog (first few per backend):", ""]
            for b, items in misses.items():
                for item in items[:3]:
                    lines.append(
                        f"- {b}: `{item['task']}` needs {', '.join(item['needed'])}; searched "
                        + "; ".join(f"`{q[:80]}`" for q in item["queries"])
                    )
    tr = report.get("trace")
    if tr:
        lines += [
            "",
            f"## One multi-step task, request by request ({tr['dataset']}, catalog of {tr['catalog_size']:,} tools)",
            "",
            f"Task `{tr['task']}` needs {', '.join(f'`{n}`' for n in tr['needed'])}: {tr['query'][:300]}",
            "",
            "| method | request | tools sent | tool-definition tokens | input tokens |",
            "|---|---:|---:|---:|---:|",
        ]
        for method, m in tr["methods"].items():
            for req in m["requests"]:
                lines.append(
                    f"| {method} | {req['iteration']} | {req['tools_sent']} | {_num(req['tool_tokens'])} | "
                    f"{_num(req['input_tokens'])} |"
                )
            lines.append(f"| {method} | **total** | | **{_num(m['tool_tokens'])}** | **{_num(m['input_tokens'])}** |")
    lines += ["", "## Method", ""]
    lines += [
        "- Every arm uses `toolsearch.loop.run` with the same system prompt, stub tool implementations (a small "
        "JSON result) and argument validation. The baseline runs it with `tool_search=\"off\"`: its requests "
        "carry exactly the catalog, with no `tool_search` meta-tool and no system-prompt suffix. The tool-search "
        "arms run it with `tool_search=\"on\"`."
        + (
            f" The `auto` arm runs {s['auto_backend']} with `tool_search=\"auto\"`: the whole catalog while its "
            f"definitions total at most {s['direct_max_tokens']:,} tokens, tool search above."
            if s.get("auto_backend")
            else ""
        ),
        "- Offline, the model is a deterministic policy (`benchmarks/lib/policy.py`): it searches with the task "
        "text, part by part for a multi-part task (regex backend: an alternation of the content words); while a "
        "needed tool is missing, with each part's capability words (no quoted strings, names or numbers), then "
        "the task's keywords, then the first queries again, each with 10 results (`tool_search` leaves tools the "
        "session already has out of its results, so a repeat pages on). It calls a needed tool only when the "
        "request carries it, with arguments built from the tool's schema, then answers. Queries come from the task "
        "text, never from the labels. With every tool in view the policy calls the needed tools at once.",
        "- Success: every needed tool appeared in a request's tools and ran with schema-valid arguments. Offline, "
        "the baseline succeeds by construction (the policy is told the tools and sees them all), so the success "
        "ratio measures what retrieval misses and gives tool search no credit for sparing the model a long list "
        "of similar tools. Only the labelled tool counts: an equivalent tool under another name (common in bfcl, "
        "which pools many function lists) is a miss, as is a query the policy cannot translate (bfcl has non-English "
        "requests). A run that misses makes no call and so sends slightly fewer tokens; savings include those runs.",
        f"- Token counts are {counted} over the serialisation described in `toolsearch/tokens.py` (system text; "
        "each message and each tool definition as compact JSON). Providers add template tokens per message and "
        f"tool{_tool_prompt_note(s)}, so billed figures differ; `--provider` shows them.",
        "- One index per data set and backend; a task's catalog is a session's allowed subset over it.",
    ]
    return "\n".join(lines) + "\n"


def _tool_prompt_note(s: Mapping[str, Any]) -> str:
    """The provider's tool-use system prompt, which raw counts leave out and the cost table prices (Anthropic)."""
    tokens = ((s.get("prices") or {}).get("rules") or {}).get("tool_use_system_prompt_tokens")
    if not tokens:
        return ""
    return (
        f", and a tool-use system prompt of {tokens.get('auto', max(tokens.values())):,} tokens to every request "
        "with tools, which these raw counts leave out and the cost table includes"
    )


def _tool_prompt_cost(rules: Mapping[str, Any]) -> str:
    tokens = rules.get("tool_use_system_prompt_tokens")
    if not tokens:
        return ""
    return f"; each request with tools also pays the tool-use system prompt ({tokens.get('auto', 0):,} tokens)"


def _learning_markdown(report: dict[str, Any]) -> list[str]:
    """The effect of learning from earlier tasks, quarter by quarter (reports run with --learn)."""
    if not report["settings"].get("learn"):
        return []
    lines = [
        "",
        "## Learning from earlier tasks",
        "",
        "Each `<backend>+learn` arm searches a `LearningIndex` over a usage log that starts empty and is fed by "
        "the same arm's earlier tasks, in task order (the loop's `usage=` recorder: a `tool_search` whose shown "
        "tool the policy then called successfully). The plain backend runs the same tasks with no log. Tasks "
        "in order, by quarter; extra requests against the all-tools loop on the same tasks.",
        "",
        "| data set | catalog | backend | tasks | log entries before | extra requests without → with | "
        "success without → with | input tokens / task without → with |",
        "|---|---:|---|---|---:|---|---|---|",
    ]
    for name, ds in report["datasets"].items():
        for row in ds.get("learning") or ():
            label = f"all ({row['catalog_size']:,.0f})" if row["size"] == "all" else f"{row['catalog_size']:,.0f}"
            for q in row["quarters"]:
                w, l_ = q["without"], q["with"]
                lines.append(
                    f"| {name} | {label} | {row['backend']} | {q['tasks']} | {q.get('log_before', '')} | "
                    f"{w['extra_requests']:+.2f} → {l_['extra_requests']:+.2f} | "
                    f"{_pct(w['success'])} → {_pct(l_['success'])} | "
                    f"{_num(w['input_tokens'])} → {_num(l_['input_tokens'])} |"
                )
            lines.append(f"| {name} | {label} | {row['backend']} | log at the end | {row['log_entries']:,} | | | |")
    return lines


def _usd(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"${value:,.2f}"


def _cost_markdown(report: dict[str, Any]) -> list[str]:
    """Prices with prompt caching per arm and size, break-even, and where caching narrows the savings."""
    s = report["settings"]
    p = s.get("prices")
    if not p:
        return []  # a report from before the cost model
    r = p["rules"]
    if r["breakpoints"] is None:
        how = (
            f"automatic prefix caching from {r['min_cacheable_tokens']:,} tokens in {r['increment_tokens']}-token "
            "steps; cache writes " + ("free" if p["cache_write"] is None else f"${p['cache_write']:g}/MTok")
        )
    else:
        how = (
            f"cache breakpoints at the end of {', '.join(r['breakpoints'])}, a {r['lookback_blocks']}-block lookback, "
            f"minimum {r['min_cacheable_tokens']:,} tokens; writes ${p['cache_write']:g}/MTok"
            + ("; tools sent with `defer_loading` stay out of the prompt" if not r["deferred_tools_in_prefix"] else "")
        )
    lines = [
        "",
        "## Cost with prompt caching",
        "",
        f"Input price per 1,000 tasks at **{p['model']}** prices (input ${p['input']:g}/MTok, cache read "
        f"${p['cache_read']:g}/MTok; {how}; lifetime {r['lifetime_seconds']:.0f} s; figures from "
        f"`toolsearch/data/prices.json`, retrieved {p['retrieved']}"
        + ("" if str(s["format"]).startswith("openai") else f"; token counts are {s['encoding']} estimates")
        + _tool_prompt_cost(r)
        + "). Each task is one conversation: a request "
        "reads from cache the longest prefix (tools, system, messages, in that order) an earlier request of the "
        "same task left there (`toolsearch/cost.py`). Tokens here are counted per rendered block the same way as "
        "the raw counts below, except that deferred tools are left out and a `tool_reference` costs the definition "
        "it expands to.",
        "",
        "| data set | method | fresh / task | cache write / task | cache read / task | $ / 1k tasks cached | "
        "$ / 1k tasks uncached | saved vs all tools, cached | saved vs all tools, uncached | raw token savings |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, ds in report["datasets"].items():
        full = next(row for row in ds["by_size"] if row["size"] == "all")
        for method, m in full["methods"].items():
            base = method == BASELINE
            lines.append(
                f"| {name} | {method} | {_num(m['fresh_tokens'])} | {_num(m['cache_write_tokens'])} | "
                f"{_num(m['cache_read_tokens'])} | {_usd(m['price_usd'] * 1000)} | "
                f"{_usd(m['uncached_price_usd'] * 1000)} | {'' if base else _pct(m.get('cost_savings'))} | "
                f"{'' if base else _pct(m.get('cost_savings_vs_uncached'))} | "
                f"{'' if base else _pct(m.get('savings'))} |"
            )
    arms = _arms(s)
    lines += [
        "",
        "Saved against the all-tools loop, both with caching on (raw token savings in brackets), by catalog size:",
        "",
        "| data set | catalog | " + " | ".join(arms) + " |",
        "|---|---:|" + "---:|" * len(arms),
    ]
    for name, ds in report["datasets"].items():
        for row in ds["by_size"]:
            label = f"all ({row['catalog_size']:,.0f})" if row["size"] == "all" else f"{row['catalog_size']:,.0f}"
            cells = [f"{_pct(row['methods'][a].get('cost_savings'))} ({_pct(row['methods'][a].get('savings'))})"
                     for a in arms]
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    searching = _search_arms(s)
    lines += [
        "",
        "Break-even catalog size with caching (below it, tool search costs more than sending every tool):",
        "",
        "| data set | " + " | ".join(searching) + " |",
        "|---|" + "---|" * len(searching),
    ]
    for name, ds in report["datasets"].items():
        cells = []
        for a in searching:
            be = (ds.get("break_even_cached") or {}).get(a) or {"size": None, "note": "n/a"}
            if be["size"] is None:
                cells.append(be["note"])
            else:
                weight = f"~{be['definition_tokens']:,} definition tokens; " if be.get("definition_tokens") else ""
                cells.append(f"~{be['size']:.0f} tools ({weight}{be['note']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Where tool search saves less than the raw counts suggest:", ""]
    lines += _narrowed(report) or ["- nowhere in this run: savings with caching are within 5 points of raw savings"]
    return lines


def _narrowed(report: dict[str, Any]) -> list[str]:
    """Plain sentences for the sizes where caching takes 5+ points off tool search's savings."""
    out = []
    for name, ds in report["datasets"].items():
        for row in ds["by_size"]:
            base = row["methods"][BASELINE]
            for arm, m in row["methods"].items():
                raw, cached = m.get("savings"), m.get("cost_savings")
                if arm == BASELINE or raw is None or cached is None or raw - cached < 0.05:
                    continue
                share = base["cache_read_tokens"] / max(1.0, base["fresh_tokens"] + base["cache_write_tokens"]
                                                        + base["cache_read_tokens"])
                out.append(
                    f"- {name}, {row['catalog_size']:,.0f} tools, {arm}: {_pct(cached)} cheaper with caching vs "
                    f"{_pct(raw)} fewer raw tokens (the all-tools loop reads {_pct(share)} of its input from cache)"
                )
    return out


def plot(report: dict[str, Any], out: Path, stem: str = "tokens") -> list[Path]:
    """<stem>_vs_size.png and <stem>_savings.png; empty when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = list(report["datasets"])
    backends = _arms(report["settings"])
    paths = []
    for kind in ("tokens", "savings"):
        fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
        for ax, name in zip(axes[0], names, strict=True):
            rows = report["datasets"][name]["by_size"]
            sizes = [r["catalog_size"] for r in rows]
            for method in ([BASELINE] if kind == "tokens" else []) + list(backends):
                if kind == "tokens":
                    ys = [
                        r["methods"][method].get("provider_input_tokens") or r["methods"][method]["input_tokens"]
                        for r in rows
                    ]
                else:
                    ys = [(r["methods"][method]["savings"] or 0) * 100 for r in rows]
                style = {"color": "black", "linewidth": 2} if method == BASELINE else {}
                ax.plot(sizes, ys, marker="o", label=method, **style)
            ax.set_xscale("log")
            ax.set_xlabel("catalog size (tools)")
            if kind == "tokens":
                ax.set_yscale("log")
                ax.set_ylabel("input tokens per task")
            else:
                ax.axhline(0, color="grey", linewidth=1)
                ax.axhline(TARGET_SAVINGS * 100, color="grey", linestyle="--", linewidth=1)
                ax.set_ylabel("savings vs baseline (%)")
                ax.set_ylim(bottom=max(-100, ax.get_ylim()[0]))
            ax.set_title(f"{name} ({report['datasets'][name]['tasks']} tasks)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / (f"{stem}_vs_size.png" if kind == "tokens" else f"{stem}_savings.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def render_summary(report: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    out = []
    for name, ds in report["datasets"].items():
        full = next(r for r in ds["by_size"] if r["size"] == "all")
        base = full["methods"][BASELINE]
        parts = [f"{name} ({ds['tools']} tools): baseline {_num(base['input_tokens'])} tok/task"]
        for b in _arms(report["settings"]):
            m = full["methods"][b]
            parts.append(
                f"{b} {_num(m['input_tokens'])} ({_pct(m['savings'])} saved, {m['extra_requests']:+.2f} req, "
                f"success {_pct(m['success'])} vs {_pct(base['success'])})"
            )
        out.append("; ".join(parts))
    return "\n".join(out)


# --- command line ------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli.datasets(parser)
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help=f"tasks per data set after a seeded shuffle (default {DEFAULT_LIMIT}; "
        f"{DEFAULT_LIVE_LIMIT} with --provider; 0 = all)",
    )
    cli.seed(parser, "the task sample and the distractors")
    parser.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        metavar="LIST",
        help=f"catalog sizes, 'all' = the whole data set (default {DEFAULT_SIZES})",
    )
    cli.backends(parser, help="comma-separated backends for the tool-search arm (default: every installed one)")
    parser.add_argument(
        "--auto-backend",
        default=None,
        metavar="NAME",
        help="backend of the `auto` arm (tool_search='auto': every tool while their definitions total at most "
        "--direct-max-tokens tokens); default hybrid when it runs, 'none' to leave the arm out",
    )
    parser.add_argument(
        "--direct-max-tokens",
        type=int,
        default=DIRECT_MAX_TOKENS,
        metavar="N",
        help=f"the `auto` arm's limit on the catalog's definition tokens (default {DIRECT_MAX_TOKENS:,})",
    )
    parser.add_argument(
        "--native-backend",
        default=None,
        metavar="NAME",
        help="backend of the `<backend>+native` arm, the provider's native tool-search form "
        "(tool_search_mode='native'; --format anthropic or openai_responses only); default hybrid there, "
        "'none' to leave it out",
    )
    parser.add_argument(
        "--learn",
        action="store_true",
        help="also run each backend as `<backend>+learn`, searching a LearningIndex whose usage log the run's "
        "earlier tasks feed (in task order; one log per backend and catalog size), and report the effect by quarter",
    )
    parser.add_argument(
        "--augment",
        dest="augment_backend",
        default=None,
        metavar="NAME",
        help="also run `baseline+reason` and `<NAME>+reason`: the baseline and that backend with a one-field "
        "augmentation (a required string `reason` on every exposed tool), and report what it adds per request "
        "and per call",
    )
    parser.add_argument(
        "--format",
        default="openai_chat",
        choices=chat_format_names(),
        help="wire format the offline requests are rendered and counted in (default openai_chat)",
    )
    parser.add_argument(
        "--encoding",
        default="o200k_base",
        choices=["o200k_base", "cl100k_base"],
        help="tokenizer for the exact counts (default o200k_base)",
    )
    parser.add_argument(
        "--provider",
        choices=["openai", "anthropic"],
        help="run against a real model (needs OPENAI_API_KEY / ANTHROPIC_API_KEY) and report its usage",
    )
    parser.add_argument("--model", dest="model_name", metavar="NAME", help="the provider's model name")
    parser.add_argument("--base-url", metavar="URL", help="provider API base URL (a proxy or compatible server)")
    parser.add_argument(
        "--trace-size",
        type=int,
        default=1000,
        metavar="N",
        help="catalog size of the request-by-request example (default 1000)",
    )
    cli.outputs(parser, "tokens")
    cli.cache_dir(parser)


def _backends(spec: str) -> list[str]:
    names = backend_list(spec)
    if not names:
        raise SystemExit("--backends: give at least one backend")
    return names


def _auto_backend(spec: str | None, backends: Sequence[str]) -> str | None:
    if spec is None:
        return "hybrid" if "hybrid" in backends else None
    if spec.strip().lower() == "none":
        return None
    if spec not in backends:
        raise SystemExit(f"--auto-backend: {spec!r} is not among --backends ({', '.join(backends)})")
    return spec


def _native_backend(spec: str | None, backends: Sequence[str], fmt: str, provider: str | None) -> str | None:
    if provider is not None or (spec is not None and spec.strip().lower() == "none"):
        return None
    if spec is None:
        return "hybrid" if "hybrid" in backends and fmt in NATIVE_FORMATS else None
    if fmt not in NATIVE_FORMATS:
        raise SystemExit(f"--native-backend: --format {fmt} has no native tool-search form; use anthropic or "
                         "openai_responses")
    if spec not in backends:
        raise SystemExit(f"--native-backend: {spec!r} is not among --backends ({', '.join(backends)})")
    return spec


def _augment_backend(spec: str | None, backends: Sequence[str]) -> str | None:
    if spec is None or spec.strip().lower() == "none":
        return None
    if spec not in backends:
        raise SystemExit(f"--augment: {spec!r} is not among --backends ({', '.join(backends)})")
    return spec


def main(args: argparse.Namespace) -> int:
    quiet = cli.start(args)
    limit = args.limit if args.limit is not None else (DEFAULT_LIVE_LIMIT if args.provider else DEFAULT_LIMIT)
    backends = _backends(args.backends)
    report = run(
        resolve_datasets(args.dataset),
        backends,
        cli.sizes(args.sizes),
        limit=limit or None,
        seed=args.seed,
        fmt=args.format,
        encoding=args.encoding,
        provider=args.provider,
        model_name=args.model_name,
        base_url=args.base_url,
        trace_size=args.trace_size,
        auto_backend=_auto_backend(args.auto_backend, backends),
        direct_max_tokens=args.direct_max_tokens,
        native_backend=_native_backend(args.native_backend, backends, args.format, args.provider),
        learn=bool(getattr(args, "learn", False)),
        augment_backend=_augment_backend(getattr(args, "augment_backend", None), backends),
        log=None if quiet else log,
    )
    out = Path(args.out)
    plots = [] if args.no_plot else plot(report, out, args.name)
    write_report(out, args.name, report, render_markdown(report, plots, command_line()), quiet=quiet)
    print(render_summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(__file__, __doc__, add_arguments, main))
