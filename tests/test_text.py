"""The one searchable-text builder (toolsearch.text): identifier splitting, fields, cleaning."""

from __future__ import annotations

import pytest

from toolsearch import (
    Tool,
)
from toolsearch.text import embedding_text, split_identifier, tool_text


@pytest.mark.parametrize(
    ("identifier", "words"),
    [
        ("getUserById", ("get", "user", "by", "id")),
        ("get_user_by_id", ("get", "user", "by", "id")),
        ("GetUserByID", ("get", "user", "by", "id")),
        ("math.factorial", ("math", "factorial")),
        ("HTTPServer", ("http", "server")),
        ("XMLHttpRequest", ("xml", "http", "request")),
        ("utf8Encode", ("utf", "8", "encode")),
        ("kebab-case name", ("kebab", "case", "name")),
        ("données_météo", ("données", "météo")),
        ("天気_forecast", ("天気", "forecast")),
        ("__", ()),
    ],
)
def test_split_identifier(identifier: str, words: tuple[str, ...]) -> None:
    assert split_identifier(identifier) == words

def test_tool_text_fields() -> None:
    tool = Tool(
        "crm.createContact",
        "Create a contact.",
        {
            "type": "object",
            "properties": {
                "emailAddress": {"type": "string", "description": "Primary email"},
                "stage": {"type": "string", "enum": ["lead", "customer"]},
                "address": {"type": "object", "properties": {"zipCode": {"type": "string"}}},
                "phones": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string"}}}},
                "owner": {
                    "anyOf": [{"type": "object", "properties": {"teamId": {"type": "string"}}}, {"type": "null"}]
                },
            },
        },
        namespace="salesCRM",
        tags=("write", "contacts"),
    )
    text = tool_text(tool)
    assert text.name == "crm.createContact" and text.name_words == "crm create contact"
    assert text.namespace == "sales crm" and text.tags == "write contacts"
    lines = text.parameters.splitlines()
    assert "email address Primary email" in lines and "stage lead customer" in lines
    assert "zip code" in lines and "label" in lines and "team id" in lines
    joined = text.joined()
    assert joined.startswith("crm.createContact\ncrm create contact\nsales crm\nCreate a contact.")
    passage = embedding_text(tool)
    for part in ("sales crm", "crm create contact", "Create a contact.", "email address Primary email"):
        assert part in passage
    assert len(embedding_text(tool, max_chars=20)) == 20

def test_tool_text_without_parameters_or_description() -> None:
    text = tool_text(Tool("ping"))
    assert (text.description, text.parameters, text.namespace, text.tags) == ("", "", "", "")
    assert text.joined() == "ping\nping"
    assert embedding_text(Tool("ping")) == "ping"

def test_clean_text_keeps_every_visible_script() -> None:
    from toolsearch.text import clean_text

    text = "Envía un correo · 发送邮件 · إرسال بريد · отправить письмо · 📧 emoji\tand\nlines"
    assert clean_text(text) == text
