"""Chat-model adapters: OpenAI (Chat Completions, Responses), Anthropic Messages, Gemini, and a scripted model.

None of these modules imports an SDK: pass your own `openai` / `anthropic` / `google.genai` client object.
"""

from __future__ import annotations

from .._errors import ProviderError as ProviderError  # defined in the error tree; importable here as before
from ._base import (
    ChatModel,
    ChatRequest,
    EventHandler,
    Message,
    ModelTurn,
    StreamEvent,
    StreamingChatModel,
    ToolCall,
    ToolSearchMode,
    Usage,
    parse_arguments,
    tool_result_text,
    turn_events,
)
from ._wire import StopKind  # ModelTurn.stop_kind's values
from .anthropic import AnthropicModel, AnthropicStreamAssembler, anthropic_payload
from .gemini import GeminiModel, GeminiStreamAssembler, gemini_payload
from .openai import (
    ChatStreamAssembler,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ResponsesStreamAssembler,
    chat_payload,
    responses_payload,
)
from .registry import (
    WireFormat,
    chat_format_names,
    format_names,
    get_format,
    parse_tool_call,
    register_format,
    render_result,
    render_tools,
)
from .scripted import ScriptedModel, call, example_arguments, reply, search, search_and_call

__all__ = [
    # neutral records and protocol
    "ChatModel",
    "ChatRequest",
    "Message",
    "ToolCall",
    "ModelTurn",
    "StopKind",
    "Usage",
    "ToolSearchMode",
    "parse_arguments",
    "tool_result_text",
    # streaming
    "StreamingChatModel",
    "StreamEvent",
    "EventHandler",
    "turn_events",
    "ChatStreamAssembler",
    "ResponsesStreamAssembler",
    "AnthropicStreamAssembler",
    "GeminiStreamAssembler",
    # providers
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "AnthropicModel",
    "GeminiModel",
    "chat_payload",
    "responses_payload",
    "anthropic_payload",
    "gemini_payload",
    # wire formats
    "WireFormat",
    "register_format",
    "get_format",
    "format_names",
    "chat_format_names",
    "render_tools",
    "render_result",
    "parse_tool_call",
    # scripted
    "ScriptedModel",
    "call",
    "search",
    "reply",
    "search_and_call",
    "example_arguments",
]
