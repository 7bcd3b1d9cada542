"""Chat-model adapters: OpenAI (Chat Completions, Responses), Anthropic Messages, and a scripted model.

None of these modules imports an SDK: pass your own `openai` / `anthropic` client object.
"""

from __future__ import annotations

from ._base import (
    ChatModel,
    ChatRequest,
    Message,
    ModelTurn,
    ProviderError,
    ToolCall,
    ToolSearchMode,
    Usage,
    parse_arguments,
    tool_result_text,
)
from .anthropic import AnthropicModel, anthropic_payload
from .openai import OpenAIChatModel, OpenAIResponsesModel, chat_payload, responses_payload
from .scripted import ScriptedModel, call, example_arguments, reply, search, search_and_call

__all__ = [
    # neutral records and protocol
    "ChatModel",
    "ChatRequest",
    "Message",
    "ToolCall",
    "ModelTurn",
    "Usage",
    "ToolSearchMode",
    "ProviderError",
    "parse_arguments",
    "tool_result_text",
    # providers
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "AnthropicModel",
    "chat_payload",
    "responses_payload",
    "anthropic_payload",
    # scripted
    "ScriptedModel",
    "call",
    "search",
    "reply",
    "search_and_call",
    "example_arguments",
]
