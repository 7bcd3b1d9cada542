"""Plain Python tools shared by the framework tests; each test wraps them in its framework's tool type.

`RAN` records which tools really ran, so a test can prove a refused call never executed.
"""

from __future__ import annotations

RAN: list[str] = []


def get_time(timezone: str) -> str:
    """Current time in an IANA timezone."""
    RAN.append("get_time")
    return f"12:00 in {timezone}"


def get_weather(city: str) -> str:
    """Weather forecast for a city: temperature, rain and wind."""
    RAN.append("get_weather")
    return f"sunny in {city}"


def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient."""
    RAN.append("send_email")
    return "sent"


def create_invoice(customer: str, amount: float) -> str:
    """Create an invoice for a customer."""
    RAN.append("create_invoice")
    return "invoice created"


def translate_text(text: str, language: str) -> str:
    """Translate text into another language."""
    RAN.append("translate_text")
    return text
