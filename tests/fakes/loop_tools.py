"""Plain tools the loop tests run, and a session manager over them; `SENT` records who was e-mailed, so a test can
prove a side effect did (or did not) happen."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolsearch import Tool, ToolIndex
from toolsearch.session import SessionManager

SENT: list[str] = []


def weather_forecast(city: str, days: int = 3) -> dict[str, Any]:
    """Weather forecast for a city, day by day."""
    return {"city": city, "days": days, "sky": "sunny"}


def send_email(to: str, subject: str, body: str) -> str:
    """Send an email message to a recipient."""
    SENT.append(to)
    return f"sent to {to}"


def create_issue(repo: str, title: str) -> dict[str, Any]:
    """Create a new GitHub issue in a repository."""
    return {"number": 7, "repo": repo}


def sessions_over(functions: Mapping[str, Callable[..., Any]]) -> SessionManager:
    """A fresh bm25 index of `functions`' tools, `SENT` emptied."""
    SENT.clear()
    return SessionManager(ToolIndex.build([Tool.from_callable(f) for f in functions.values()], backend="bm25"))
