"""A tiny benchmark data set (tools.jsonl, queries.jsonl) of everyday tools and requests about them, for the
benchmark harness's tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

TOOLS = [
    ("weather_forecast", "Get the weather forecast for a city."),
    ("send_email", "Send an email message to a recipient."),
    ("book_hotel", "Book a hotel room in a city for given dates."),
    ("convert_currency", "Convert an amount between two currencies."),
    ("translate_text", "Translate text into another language."),
    ("create_invoice", "Create an invoice for a customer."),
]
REQUESTS = {
    "weather_forecast": ["will it rain in {c} tomorrow", "is it going to be sunny in {c}"],
    "send_email": ["write to my boss in {c}", "mail the team in {c} about the delay"],
    "book_hotel": ["a room in {c} for two nights", "somewhere to sleep in {c} next week"],
    "convert_currency": ["how many euros is 100 dollars in {c}", "exchange rate yen for my trip to {c}"],
    "translate_text": ["say hello in the language of {c}", "what does this sign in {c} mean"],
    "create_invoice": ["bill the client from {c}", "charge the customer in {c} for the work"],
}


def write_tiny(folder: Path, *, tools: int = len(TOOLS), cities: Sequence[str] = ("lisbon", "oslo", "lima")) -> Path:
    """`folder` (made here) holding the first `tools` tools and each one's requests in every city, ids q0, q1, ..."""
    folder.mkdir()
    chosen = TOOLS[:tools]
    rows = [{"name": n, "description": d, "input_schema": {"type": "object", "properties": {}}} for n, d in chosen]
    (folder / "tools.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    queries = [(text.format(c=city), name) for name, _ in chosen for text in REQUESTS[name] for city in cities]
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "query": text, "relevant": [tool]}) + "\n"
                for i, (text, tool) in enumerate(queries)),
        encoding="utf-8",
    )
    return folder
