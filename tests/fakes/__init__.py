"""Test doubles that speak real wire formats: a scripted OpenAI/Anthropic/Gemini-compatible HTTP server."""

from __future__ import annotations

from .llm_server import (
    ANTHROPIC_MESSAGES,
    GEMINI,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    ErrorTurn,
    FakeLLMServer,
    Policy,
    Request,
    ToolCall,
    ToolResult,
    Turn,
)
from .provider_rules import Violation

__all__ = [
    "ANTHROPIC_MESSAGES",
    "GEMINI",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "ErrorTurn",
    "FakeLLMServer",
    "Policy",
    "Request",
    "ToolCall",
    "ToolResult",
    "Turn",
    "Violation",
]
