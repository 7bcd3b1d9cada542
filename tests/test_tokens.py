"""Exact token counts: text, tool definitions and whole provider payloads, offline."""

from __future__ import annotations

import json

import pytest

from toolsearch import Tool, ToolSearchError
from toolsearch.tokens import (
    compact_json,
    count_json_tokens,
    count_request_tokens,
    count_tokens,
    request_tokens,
    tool_tokens,
)

WEATHER = Tool(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def test_known_token_ids_lengths() -> None:
    # "hello world" is two tokens in both encodings; the counts are exact, not estimates.
    assert count_tokens("hello world") == 2
    assert count_tokens("hello world", "cl100k_base") == 2
    assert count_tokens("") == 0


def test_encodings_differ_on_non_english_text() -> None:
    text = "Übersetze diesen Satz ins Japanische: 東京は日本の首都です。"
    assert count_tokens(text, "o200k_base") != count_tokens(text, "cl100k_base")


def test_special_token_text_is_ordinary_text() -> None:
    assert count_tokens("<|endoftext|>") > 1


def test_unknown_encoding_says_which_exist() -> None:
    with pytest.raises(ToolSearchError, match="o200k_base"):
        count_tokens("x", "p50k_edit")


def test_tool_tokens_is_compact_json_of_the_openai_shape() -> None:
    assert tool_tokens(WEATHER) == count_tokens(compact_json(WEATHER.to_openai()))
    assert compact_json({"a": [1, "é"]}) == '{"a":[1,"é"]}'


def test_chat_completions_payload_counts_system_messages_and_tools() -> None:
    payload = {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
        ],
        "tools": [WEATHER.to_openai()],
    }
    parts = request_tokens(payload)
    assert parts.system == count_tokens("Be brief.")
    assert parts.messages == count_json_tokens({"role": "user", "content": "Weather in Paris?"})
    assert parts.tools == count_json_tokens(WEATHER.to_openai())
    assert count_request_tokens(payload) == parts.system + parts.messages + parts.tools == parts.total


def test_responses_payload_with_instructions_and_string_input() -> None:
    payload = {"model": "m", "instructions": "Be brief.", "input": "Hi", "tools": [WEATHER.to_openai(responses=True)]}
    parts = request_tokens(payload)
    assert parts.system == count_tokens("Be brief.")
    assert parts.messages == count_json_tokens({"role": "user", "content": "Hi"})
    assert parts.tools == count_json_tokens(WEATHER.to_openai(responses=True))


def test_anthropic_payload_with_block_system_and_model_keys_ignored() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    payload = {
        "model": "claude",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": messages,
        "tools": [WEATHER.to_anthropic()],
    }
    parts = request_tokens(payload, "cl100k_base")
    assert parts.encoding == "cl100k_base"
    assert parts.system == count_tokens("Be brief.", "cl100k_base")
    assert parts.messages == count_tokens(json.dumps(messages[0], separators=(",", ":")), "cl100k_base")
    assert parts.to_dict()["total"] == parts.total


def test_no_tools_counts_zero_tool_tokens() -> None:
    assert request_tokens({"messages": [{"role": "user", "content": "x"}]}).tools == 0


def test_a_text_of_a_million_characters_or_more_is_counted_not_refused() -> None:
    # Before: the tokenizer's "Input too long to encode safely" (1,000,000 characters or more) or its
    # 200,000-token limit ended the run that counted a huge tool result or a pasted document.
    line = "The quick brown fox jumps over the lazy dog.\n"
    assert count_tokens(line * 30_000) == 300 * count_tokens(line * 100)  # cut where the tokenizer splits: exact
    words = "word  " * 300_000
    assert count_tokens(words) == 300 * count_tokens("word  " * 1_000)
    no_space = count_tokens("x" * 1_000_000)  # one word: cut at the piece limit, within a token a piece
    assert abs(no_space - 25 * count_tokens("x" * 40_000)) <= 25
    dense = "漢字" * 300_000  # 600,000 characters, far more than 200,000 tokens
    assert abs(count_tokens(dense) - 15 * count_tokens("漢字" * 20_000)) <= 15
    parts = request_tokens({"messages": [{"role": "user", "content": "y" * 1_000_000}], "system": "s" * 1_000_000})
    assert parts.messages > 0 and parts.system > 0
