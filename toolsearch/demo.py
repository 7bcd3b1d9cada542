"""`toolsearch demo`: one agent task over the bundled catalog, tool search against all tools.

The demo indexes the bundled catalog (reused from a cache folder on later runs), then runs one
multi-step task twice with the same scripted agent and the same local tool implementations:

- **tool search**: the real loop (`toolsearch.loop.run`): the model starts with `tool_search`
  only, searches for what it needs, and each request carries only the tools found so far;
- **all tools**: a plain tool-calling loop that sends every tool of the catalog on every request.

Every request payload is rendered in a provider's exact wire format and counted with o200k_base
(OpenAI's tokenizer: exact for the OpenAI formats; Anthropic and Gemini count with their own, so for
them the figures compare the two runs rather than predict a bill), so the savings are measured, not
estimated. The agent is scripted (no API
key, no network): it searches with its own words for each capability, calls the tools it was
shown with arguments built from earlier results, and answers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._cache_dir import cache_subfolder
from ._errors import CommandError, UnknownFormatError
from ._output import write_output
from .providers.registry import chat_format_names, get_format
from .tokens import count_wording
from .tools import Tool, load_tools

if TYPE_CHECKING:
    from .cli import Console
    from .index import ToolIndex
    from .loop import LoopResult
    from .providers._base import ChatRequest, ToolCall

__all__ = ["DEMO_CATALOG", "TASK", "demo_tools", "demo_functions", "demo_policy", "run_demo", "render_text"]

DEMO_CATALOG = Path(__file__).resolve().parent / "data" / "demo_catalog.jsonl"
ATTENDEES = ("ana@example.com", "bob@example.com")
TASK = (
    "Check the weather in Lisbon for Friday, find a free 30-minute slot with ana@example.com and "
    "bob@example.com, book it, and email them the invite."
)
SYSTEM = "You are a helpful assistant that schedules meetings and handles email for the user."
SEARCH_TOOL = "tool_search"
RESULTS_PER_SEARCH = 3
FORMATS = tuple(chat_format_names())
FORMAT_LABELS = {name: get_format(name).label for name in FORMATS}


def demo_tools() -> list[Tool]:
    """The bundled catalog: realistic tool definitions across several domains."""
    return load_tools(DEMO_CATALOG)


# --- the local tool implementations: small, deterministic, plausible ------------------------------


def _today() -> dt.date:
    return dt.date.today()


def next_friday(today: dt.date | None = None) -> dt.date:
    """The coming Friday (a week ahead when today is Friday)."""
    today = today or _today()
    return today + dt.timedelta(days=(4 - today.weekday()) % 7 or 7)


def _seeded(*parts: str) -> int:
    return int(hashlib.sha256("|".join(parts).encode()).hexdigest()[:8], 16)


_CONDITIONS = ("Sunny", "Mostly sunny", "Partly cloudy", "Light showers", "Overcast")
_PEOPLE = {
    "ana@example.com": ("Ana Ferreira", "Head of Partnerships", "Atlântico Labs", "+351 21 555 0142"),
    "bob@example.com": ("Bob Okafor", "Engineering Manager", "Northwind Traders", "+44 20 7946 0321"),
}


def weather_get_forecast(location: str, days: int = 3, units: str = "metric") -> dict[str, Any]:
    start = _today()
    out = []
    for i in range(days):
        day = start + dt.timedelta(days=i)
        seed = _seeded(location.lower(), day.isoformat())
        high = 19 + seed % 8
        if units == "imperial":
            high = round(high * 9 / 5 + 32)
        out.append({
            "date": day.isoformat(),
            "high": high,
            "low": high - 6 - seed % 3,
            "precipitation_probability": (seed >> 4) % 5 * 10,
            "wind_kph": 8 + (seed >> 8) % 15,
            "conditions": _CONDITIONS[(seed >> 12) % len(_CONDITIONS)],
        })
    return {"location": f"{location.title()}, Portugal" if "lisbon" in location.lower() else location,
            "units": units, "days": out}


def calendar_find_free_slots(
    attendees: list[str], date: str, duration_minutes: int, time_zone: str = "UTC", respect_working_hours: bool = True
) -> dict[str, Any]:
    day = dt.date.fromisoformat(date)
    offset = "+01:00" if time_zone == "Europe/Lisbon" and 3 < day.month < 11 else "+00:00"
    slots = []
    for hour, minute in ((10, 0), (11, 30), (15, 0)):
        start = dt.datetime(day.year, day.month, day.day, hour, minute)
        end = start + dt.timedelta(minutes=duration_minutes)
        slots.append({"start": start.isoformat() + offset, "end": end.isoformat() + offset})
    return {"date": date, "time_zone": time_zone, "attendees": attendees, "slots": slots}


def calendar_create_event(
    title: str,
    start: str,
    end: str,
    attendees: list[str],
    location: str | None = None,
    description: str | None = None,
    add_video_conference: bool = False,
) -> dict[str, Any]:
    event_id = "evt_" + hashlib.sha256(f"{title}{start}".encode()).hexdigest()[:10]
    event: dict[str, Any] = {
        "event_id": event_id,
        "title": title,
        "start": start,
        "end": end,
        "attendees": [{"email": a, "response_status": "needsAction"} for a in attendees],
        "html_link": f"https://calendar.example.com/event/{event_id}",
    }
    if add_video_conference:
        event["join_url"] = f"https://meet.example.com/{event_id[4:]}"
    return event


def crm_lookup_contact(query: str, limit: int = 5) -> dict[str, Any]:
    matches = []
    for email, (name, title, company, phone) in _PEOPLE.items():
        if query.lower() in (email, name.lower()) or query.lower() in name.lower():
            matches.append({"contact_id": "ct_" + hashlib.sha256(email.encode()).hexdigest()[:8], "name": name,
                            "email": email, "title": title, "company": company, "phone": phone,
                            "owner": "you", "last_activity": (_today() - dt.timedelta(days=9)).isoformat()})
    return {"query": query, "matches": matches[:limit]}


def email_send_message(
    to: list[str], subject: str, body: str, cc: list[str] | None = None, bcc: list[str] | None = None,
    body_format: str = "text", attachment_ids: list[str] | None = None,
) -> dict[str, Any]:
    digest = hashlib.sha256(f"{to}{subject}".encode()).hexdigest()
    return {"message_id": f"msg_{digest[:12]}", "thread_id": f"thr_{digest[12:22]}", "to": to, "status": "sent"}


def demo_functions() -> dict[str, Callable[..., Any]]:
    """Implementations of the tools the demo task needs (the other tools are only searchable)."""
    return {
        fn.__name__: fn
        for fn in (weather_get_forecast, calendar_find_free_slots, calendar_create_event, crm_lookup_contact,
                   email_send_message)
    }


# --- the scripted agent --------------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """A capability the agent needs: the tool it will call and the words it searches with."""

    tool: str
    queries: tuple[str, ...]  # first try, then a rephrasing when the first search did not find it


PLAN: tuple[tuple[Need, ...], ...] = (
    (
        Need("weather_get_forecast", ("weather forecast for a city", "daily temperature and rain forecast")),
        Need("calendar_find_free_slots", ("find a free meeting slot for several people", "calendar availability")),
    ),
    (
        Need("crm_lookup_contact", ("look up a contact by email address", "crm contact search")),
        Need("calendar_create_event", ("create a calendar event and invite attendees", "schedule a meeting")),
    ),
    (Need("email_send_message", ("send an email", "compose and send email message")),),
)


class _Memory:
    """What the agent knows from the conversation so far (read from the request, never stored)."""

    def __init__(self, request: ChatRequest) -> None:
        self.visible = {t.name for t in request.tools}
        self.queries: set[str] = set()
        self.called: set[str] = set()
        self.results: dict[str, list[Any]] = {}
        for message in request.messages:
            if message.role == "assistant":
                for call in message.tool_calls:
                    if call.name == SEARCH_TOOL:
                        self.queries.add(str(call.arguments.get("query", "")))
                    else:
                        self.called.add(call.name)
            elif message.role == "tool" and message.name and message.name != SEARCH_TOOL and not message.is_error:
                try:
                    self.results.setdefault(message.name, []).append(json.loads(message.content))
                except ValueError:
                    self.results.setdefault(message.name, []).append(message.content)

    def first(self, tool: str) -> Any:
        found = self.results.get(tool)
        return found[0] if found else None


def _arguments(tool: str, memory: _Memory) -> list[dict[str, Any]]:
    """The calls the agent makes to `tool`, with arguments taken from the task and earlier results."""
    friday = next_friday()
    if tool == "weather_get_forecast":
        return [{"location": "Lisbon", "days": min((friday - _today()).days + 1, 14), "units": "metric"}]
    if tool == "calendar_find_free_slots":
        return [{"attendees": list(ATTENDEES), "date": friday.isoformat(), "duration_minutes": 30,
                 "time_zone": "Europe/Lisbon"}]
    if tool == "crm_lookup_contact":
        return [{"query": email, "limit": 1} for email in ATTENDEES]
    forecast = _friday_forecast(memory)
    weather = f"{forecast['conditions'].lower()}, {forecast['high']}°C" if forecast else "no forecast"
    if tool == "calendar_create_event":
        slots = (memory.first("calendar_find_free_slots") or {}).get("slots") or [{}]
        return [{"title": "Lisbon catch-up", "start": slots[0].get("start", ""), "end": slots[0].get("end", ""),
                 "attendees": list(ATTENDEES), "location": "Lisbon office, room Tejo",
                 "description": f"30 minutes to catch up. Friday in Lisbon: {weather}.", "add_video_conference": True}]
    if tool == "email_send_message":
        event = memory.first("calendar_create_event") or {}
        contacts = [m for r in memory.results.get("crm_lookup_contact", []) for m in r.get("matches", [])]
        names = [m["name"].split()[0] for m in contacts]
        hello = " and ".join(names) or "all"
        body = (
            f"Hi {hello},\n\nI booked 30 minutes for us on Friday at {event.get('start', '?')[11:16]} "
            f"(Lisbon time): {event.get('html_link', '')}\nVideo link: {event.get('join_url', 'none')}\n"
            f"The forecast for Lisbon on Friday: {weather}.\n\nSee you then!"
        )
        return [{"to": list(ATTENDEES), "subject": f"Invite: Lisbon catch-up on Friday {friday.isoformat()}",
                 "body": body}]
    return [{}]


def _friday_forecast(memory: _Memory) -> dict[str, Any] | None:
    days = (memory.first("weather_get_forecast") or {}).get("days") or []
    friday = next_friday().isoformat()
    return next((d for d in days if d.get("date") == friday), days[-1] if days else None)


def _answer(memory: _Memory) -> str:
    event = memory.first("calendar_create_event") or {}
    forecast = _friday_forecast(memory)
    weather = f"{forecast['conditions'].lower()}, up to {forecast['high']}°C" if forecast else "unknown"
    return (
        f"Done. Friday in Lisbon looks {weather}. I booked \"{event.get('title', 'the meeting')}\" on "
        f"{event.get('start', '?')[:16].replace('T', ' at ')} with {' and '.join(ATTENDEES)} "
        f"({event.get('html_link', 'no link')}) and emailed them the invite."
    )


def demo_policy(request: ChatRequest) -> Sequence[ToolCall] | str:
    """The scripted agent: for each step of the plan, search for what it lacks, then call it."""
    from .providers.scripted import call, search

    memory = _Memory(request)
    for step in PLAN:
        pending = [need for need in step if need.tool not in memory.called]
        if not pending:
            continue
        missing = [need for need in pending if need.tool not in memory.visible]
        if missing:
            searches = []
            for need in missing:
                query = next((q for q in need.queries if q not in memory.queries), None)
                if query is None:
                    return f"I could not find a tool to do this step ({need.tool}); nothing was booked."
                searches.append(search(query, RESULTS_PER_SEARCH))
            return searches
        return [call(need.tool, args) for need in pending for args in _arguments(need.tool, memory)]
    return _answer(memory)


# --- the two runs ----------------------------------------------------------------------------------


MODEL_NOTE = (
    "The model is a scripted stand-in, not an LLM: a fixed policy plays the agent (it searches for each "
    "capability in its own words and calls what it finds); no LLM is called. The tool search, the loop, the "
    "tool calls and the token counts are real."
)


def _quiet(text: str) -> None:
    return None


def open_index(
    backend: str, cache_dir: Path, *, rebuild: bool = False, progress: Callable[[str], None] = _quiet
) -> tuple[ToolIndex, dict[str, Any]]:
    """The demo index, built once per catalog and backend under `cache_dir` and reused after.

    `progress` receives one line per stage (the CLI prints them on stderr).
    """
    import time

    from .backends import get_backend_spec
    from .index_store import IndexStore

    store = IndexStore(cache_dir)
    started = time.perf_counter()
    tools = demo_tools()
    namespaces = len({t.namespace for t in tools if t.namespace})
    progress(f"read the bundled catalog: {len(tools)} tools in {namespaces} namespaces")
    resolved = get_backend_spec(backend).name
    dense = resolved in ("vector", "hybrid")  # these embed every tool on a cold cache (~20 s on 2 cores)
    progress(
        f"indexing them with the {resolved} backend in {cache_dir}"
        + (" (embedding every tool the first time takes a while; later runs reuse the index) ..." if dense else " ...")
    )
    if rebuild:
        from .catalog import Catalog
        from .index import ToolIndex as _ToolIndex

        index = _ToolIndex.build(Catalog(tools), backend)
        name, reused = store.save(index), False
    else:
        name, index, reused = store.build(tools, backend)
    # One figure for the index, measured once: what stderr says now is what the report says at the end.
    seconds = round(time.perf_counter() - started, 2)
    progress(f"index {'reused' if reused else 'built'} in {seconds:.2f}s")
    if dense:
        progress("loading the embedding model ...")
    # Load a lazily loaded embedding model now, so the searches below are timed without it.
    loading = time.perf_counter()
    warm = getattr(index.backend, "warm", None)
    if callable(warm):
        warm()
    else:
        index.search("warm up", 1)
    return index, {
        "backend": index.backend_name,
        "tools": len(index),
        "namespaces": index.catalog.namespaces,
        "path": str(store.path(name)),
        "reused": reused,
        "seconds": seconds,
        "model_seconds": round(time.perf_counter() - loading, 2) if dense else None,
    }


def _baseline(model: Any, index: ToolIndex, functions: Mapping[str, Callable[..., Any]]) -> dict[str, Any]:
    """A plain tool-calling loop: every tool of the catalog on every request, no search."""
    from .loop import LoopConfig, ToolExecutor
    from .providers._base import ChatRequest, Message
    from .session import SessionManager
    from .tokens import request_tokens

    everything = tuple(index.catalog)
    session = SessionManager(index).create("demo-all-tools", pinned=[t.name for t in everything])
    executor = ToolExecutor(functions, config=LoopConfig())
    messages = [Message.user(TASK)]
    requests = []
    answer = ""
    for iteration in range(1, 11):
        request = ChatRequest(messages=tuple(messages), system=SYSTEM, pinned=everything)
        tokens = request_tokens(model.payload(request))
        turn = model.complete(request)
        messages.append(turn.message)
        requests.append({"request": iteration, "tools_sent": len(everything), "tokens": tokens.to_dict()})
        if not turn.message.tool_calls:
            answer = turn.message.content
            break
        for result in executor.execute(session, turn.message.tool_calls, iteration=iteration):
            messages.append(result.to_message())
    return {"requests": requests, "answer": answer, **_totals(requests)}


def _totals(requests: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {
        "request_count": len(requests),
        "tool_tokens": sum(r["tokens"]["tools"] for r in requests),
        "input_tokens": sum(r["tokens"]["total"] for r in requests),
    }


def _short(value: Any, width: int = 150) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _tool_search_report(result: LoopResult) -> dict[str, Any]:
    searches = {s.call_id: s for s in result.searches}
    first_found: dict[str, int] = {}  # tool -> number of the search that first returned it
    search_numbers: dict[str, int] = {}
    for number, found_by in enumerate(result.searches, 1):
        search_numbers[found_by.call_id] = number
        for name in found_by.names:
            first_found.setdefault(name, number)
    outcomes = {r.call.id: r for r in result.tool_results}
    assistant = [m for m in result.messages if m.role == "assistant"]
    requests = []
    for record, message in zip(result.requests, assistant, strict=False):
        calls = []
        for call in message.tool_calls:
            done = outcomes.get(call.id)
            entry: dict[str, Any] = {"tool": call.name, "arguments": dict(call.arguments)}
            if done is not None:
                entry["status"] = done.status.value
            found = searches.get(call.id)
            if found is not None:
                entry["search"] = {
                    "number": search_numbers[call.id],
                    "query": found.query,
                    "found": found.names,
                    "scores": [round(h.score, 4) for h in found.hits],
                    "latency_ms": round(found.latency_ms, 3),
                }
            elif done is not None:
                entry["result"] = done.content
            calls.append(entry)
        tokens = record.tokens.to_dict() if record.tokens else {"system": 0, "messages": 0, "tools": 0, "total": 0}
        requests.append({
            "request": record.iteration,
            "tools_sent": list(record.tool_names),
            "tokens": tokens,
            "calls": calls,
            "answer": message.content if not message.tool_calls else None,
        })
    called = {r.call.name for r in result.tool_results if r.status.value == "ok"}
    discovered = [
        {"tool": name, "search": number, "query": result.searches[number - 1].query, "called": name in called}
        for name, number in first_found.items()
    ]
    return {
        "requests": requests,
        "discovered": discovered,
        "answer": result.output,
        "outcome": result.outcome.value,
        **_totals(requests),
    }


def run_demo(
    backend: str = "auto",
    *,
    cache_dir: Path | None = None,
    rebuild: bool = False,
    format: str = "openai_chat",
    progress: Callable[[str], None] = _quiet,
) -> dict[str, Any]:
    """Build or reuse the demo index, run the task both ways and return the whole report (JSON-able)."""
    from .loop import run
    from .providers.scripted import ScriptedModel
    from .session import SessionManager

    if format not in FORMATS:
        raise UnknownFormatError(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
    index, index_info = open_index(backend, cache_dir or cache_subfolder("demo"), rebuild=rebuild, progress=progress)
    functions = demo_functions()
    sessions = SessionManager(index)
    model = ScriptedModel(policy=demo_policy, format=format)
    progress("running the task with tool search (scripted model) ...")
    result = run(model, TASK, session=sessions.create("demo"), functions=functions, system=SYSTEM)
    searched = _tool_search_report(result)
    progress(f"running it again with all {len(index)} tools on every request ...")
    baseline = _baseline(ScriptedModel(policy=demo_policy, format=format), index, functions)
    needed = [need.tool for step in PLAN for need in step]

    def saved(key: str) -> float:
        return round(100 * (1 - searched[key] / baseline[key]), 1) if baseline[key] else 0.0

    return {
        "task": TASK,
        "model": MODEL_NOTE,
        "needed_tools": needed,
        "index": index_info,
        "format": format,
        "encoding": "o200k_base",
        "tool_search": searched,
        "all_tools": baseline,
        "savings": {
            "tool_tokens_percent": saved("tool_tokens"),
            "input_tokens_percent": saved("input_tokens"),
            "input_tokens_saved": baseline["input_tokens"] - searched["input_tokens"],
            "extra_requests": searched["request_count"] - baseline["request_count"],
        },
        "same_answer": searched["answer"] == baseline["answer"],
    }


# --- output ----------------------------------------------------------------------------------------


def _wrap(text: str, indent: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=max(width - len(indent), 40), initial_indent=indent, subsequent_indent=indent)


def _sent(names: Sequence[str], before: Sequence[str]) -> str:
    found = [n for n in names if n != SEARCH_TOOL]
    if not found:
        return "tool_search only"
    new = [n for n in found if n not in before]
    if not new:
        return f"the same {len(names)} as the request before"
    if len(new) == len(found):
        return f"tool_search + {len(found)} found: " + ", ".join(found)
    return f"tool_search + {len(found)} found ({len(new)} new: " + ", ".join(new) + ")"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def render_text(report: Mapping[str, Any], width: int | None = None) -> str:
    """The report as the demo prints it."""
    width = width or min(shutil.get_terminal_size((100, 24)).columns, 110)
    index = report["index"]
    searched, everything, savings = report["tool_search"], report["all_tools"], report["savings"]
    lines = [
        f"toolsearch demo: one agent task over {index['tools']} tools in {len(index['namespaces'])} namespaces",
        "",
        *_wrap(f"Task: {report['task']}", "", width),
        *_wrap(MODEL_NOTE, "", width),
        (
            f"Index: {index['backend']} backend, {'reused' if index['reused'] else 'built'} in "
            f"{index['seconds']:.2f}s"
            + (f" (then {index['model_seconds']:.2f}s loading the embedding model)" if index.get("model_seconds")
               else "")
            + f" at {index['path']}"
        ),
        "",
        "With tool search - what the model saw on each request",
        f"(the all-tools baseline sends {index['tools']} definitions, "
        f"{everything['requests'][0]['tokens']['tools']:,} tokens, on every request):",
    ]
    before: Sequence[str] = ()
    for request in searched["requests"]:
        tokens = request["tokens"]
        lines.append("")
        lines.append(
            f"Request {request['request']}: {_count(len(request['tools_sent']), 'tool definition')}, "
            f"{tokens['tools']:,} tokens of tools, {tokens['total']:,} tokens in all"
        )
        lines.extend(_wrap(f"tools sent: {_sent(request['tools_sent'], before)}", "  ", width))
        before = request["tools_sent"]
        for call in request["calls"]:
            if "search" in call:
                found = call["search"]
                lines.append(f"  -> tool_search #{found['number']} \"{found['query']}\" ({found['latency_ms']:.1f} ms)")
                lines.extend(_wrap("found: " + (", ".join(found["found"]) or "nothing"), "       ", width))
            else:
                lines.append(f"  -> {call['tool']}({_short(call['arguments'], max(width - 20, 40))})")
                status = "" if call.get("status") == "ok" else f"[{call.get('status')}] "
                lines.append(f"     <- {status}{_short(call.get('result', ''), max(width - 10, 40))}")
        if request["answer"] is not None:
            lines.extend(_wrap(f"answer: {request['answer']}", "  ", width))
    lines += ["", "Which search discovered the tools the task needed:"]
    found_by = {d["tool"]: d for d in searched["discovered"]}
    for tool in report["needed_tools"]:
        entry = found_by.get(tool)
        where = f"search #{entry['search']} \"{entry['query']}\"" if entry else "not found"
        called = "called" if entry and entry["called"] else "not called"
        lines.append(f"  {tool:<26} {where}, {called}")
    extra = [d["tool"] for d in searched["discovered"] if d["tool"] not in report["needed_tools"]]
    if extra:
        lines.extend(_wrap(f"also found and shown to the model, not needed: {', '.join(extra)}", "  ", width))
    label = FORMAT_LABELS.get(report["format"], report["format"])
    rows = [
        ("model requests", f"{searched['request_count']}", f"{everything['request_count']}", ""),
        ("tool-definition tokens", f"{searched['tool_tokens']:,}", f"{everything['tool_tokens']:,}",
         f"{savings['tool_tokens_percent']:.1f}%"),
        ("input tokens, all requests", f"{searched['input_tokens']:,}", f"{everything['input_tokens']:,}",
         f"{savings['input_tokens_percent']:.1f}%"),
    ]
    head = ("", "tool search", f"all {index['tools']} tools", "saved")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines += [
        "",
        *_wrap(f"Tokens: {_token_wording(report)} of each request as sent in the {label} format", "", width),
        "  " + "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths, strict=True))),
    ]
    for row in rows:
        lines.append(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
            .rstrip()
            .join(("  ", ""))
        )
    lines += [
        "",
        *_wrap(
            f"Tool search sent {savings['input_tokens_saved']:,} fewer input tokens "
            f"({savings['input_tokens_percent']:.1f}% less) for {savings['extra_requests']} extra model requests; "
            + ("both runs reached the same answer." if report["same_answer"] else "the answers differ (see --json)."),
            "",
            width,
        ),
    ]
    return "\n".join(lines)


def _token_wording(report: Mapping[str, Any]) -> str:
    """What the counts are: exact where the encoding is the format's provider's own, a common yardstick elsewhere."""
    return count_wording(str(report["format"]), str(report["encoding"]), compared="the two runs")


def save_catalog(path: Path, console: Console, *, force: bool = False) -> int:
    """`demo --save-catalog FILE`: the bundled catalog as a tool file of one's own, in toolsearch's JSON shape.

    An existing FILE is replaced only with `force`, or when it holds that catalog already (nothing is lost): it may
    be the user's own tools.json, which the docs' examples name too.
    """
    tools = demo_tools()
    rows = [t.to_dict() for t in tools]
    text = json.dumps(rows, indent=1, ensure_ascii=False) + "\n"
    streamed = write_output(path, text, what="--save-catalog", force=force, replaceable=lambda kept: _holds(kept, rows))
    namespaces = len({t.namespace for t in tools})
    said = f"wrote the demo's {len(tools)} tools in {namespaces} namespaces to {path}"
    (console.note if streamed else console.print)(said)  # not into the stream the catalog went to
    return 0


def _holds(path: Path, rows: list[dict[str, Any]]) -> bool:
    """Whether the tool file at `path` holds these rows already (a save of the catalog, in any layout)."""
    try:
        return bool(json.loads(path.read_text(encoding="utf-8-sig")) == rows)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False


def main(args: argparse.Namespace, console: Console) -> int:
    """The `toolsearch demo` command."""
    from .backends import get_backend_spec

    if args.save_catalog:
        return save_catalog(Path(args.save_catalog), console, force=args.force)
    cache_dir = Path(args.cache_dir) if args.cache_dir else cache_subfolder("demo")
    if cache_dir.exists() and not cache_dir.is_dir():  # else the first write there fails with a bare "File exists"
        where = "--cache-dir " if args.cache_dir else "the demo's cache folder "
        raise CommandError(f"{where}{cache_dir} is a file, not a folder; give the folder the demo keeps its index in "
                           "(it is created when missing)")
    get_backend_spec(args.backend)  # unknown names and missing extras fail here, before any work
    console.note("toolsearch demo: " + MODEL_NOTE)
    report = run_demo(
        args.backend, cache_dir=cache_dir, rebuild=args.rebuild, format=args.format, progress=console.note
    )
    if args.json:
        console.json(report)
    else:
        console.print(render_text(report))
    return 0
