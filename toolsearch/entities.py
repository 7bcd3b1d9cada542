"""Values in a request (e-mail addresses, URLs, numbers, ids): found so that they never outweigh its words.

"Email ana@example.com that the report is ready" is about e-mail; its address is a value for a
parameter, and its pieces ("ana", "example", "com") say nothing about which tool to use, yet a
rare piece can match a tool's text (`ana` in analytics) and outweigh the request's own words.
Lexical backends weigh the words of a value lightly (toolsearch.backends.bm25); a value is
found by its shape, not by a word list, so the rule holds for any catalog. Words that read as
capabilities although they hold digits (`mp3`, `ec2`, `base64`, `sha256`) are kept as words: an id
needs three digits or more, mixed with letters.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["ENTITY", "SEND", "lexical_parts", "send_request", "split_entities"]

ENTITY = re.compile(
    r"""(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+"""  # e-mail address (tried where a token starts only)
    r"""|\b(?:https?|ftp)://\S+|\bwww\.\S+"""  # URL
    r"""|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"""  # UUID
    r"""|(?<![\w])(?=(?:[\w-]*\d){3})(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]*(?![\w])"""  # an id: letters and 3+ digits
    r"""|(?<![\w.])[-+#$€£]?\d[\d,.:/-]*%?(?![\w])""",  # a number, date, time, amount or phone number
)


# Every value above holds a digit, an `@`, a scheme or `www.`, or a UUID's first group: a request with none of them
# (most) is not searched for values at all (the search costs ~40 µs on a 200-character request; these tests ~2 µs).
_DIGIT_OR_AT = re.compile(r"[\d@]")
_UUID_HEAD = re.compile(r"[0-9a-fA-F]{8}-")


def _may_hold_values(text: str) -> bool:
    if _DIGIT_OR_AT.search(text) or "://" in text or "www." in text.lower():
        return True
    return "-" in text and _UUID_HEAD.search(text) is not None


def _values_out(text: str, fill: bool = False) -> tuple[str, list[str]]:
    """The text with its values replaced (by a space, or with `fill` by as many x's: offsets kept), and the values."""
    if not _may_hold_values(text):
        return text, []
    found: list[str] = []

    def out(match: re.Match[str]) -> str:
        found.append(match.group(0))
        return "x" * len(match.group(0)) if fill else " "

    replaced = ENTITY.sub(out, text)
    return (replaced if found else text), found


# What a message says, after a verb of sending one ("Email Ana that the report is ready", "tell the
# team saying we ship today"): the body is a value for the tool's text parameter, like an address.
MESSAGE_BODY = re.compile(
    r"\b(?:e-?mail|mail|message|text|sms|tell|notify|inform|remind|ping|post|reply|announce|say|write|dm)\b"
    r"[^.?!;]*?\b(?:that|saying)\s+(?P<body>[^.?!;]+)",
    re.IGNORECASE,
)


# A request that opens with the medium of a message and says what it should say ("Email Ana that the report is
# ready", "text Bob saying I'm late") asks for one to be sent: tools name that action `send` (send_email,
# sms_send_text), and its body, a value for the tool's text parameter, says nothing about which tool (a dense
# model reads "the report is ready" as a draft or a report). Only a request that opens so: "tell me ... that"
# and "write a post that" are not sending requests.
SEND = "send"
_MEDIUM = r"^\W*(?:please\s+)?(?:e-?mail|mail|message|text|sms|dm|ping)\b"
_OPENS_WITH_MEDIUM = re.compile(_MEDIUM, re.IGNORECASE)
SEND_REQUEST = re.compile(
    _MEDIUM + r"(?P<to>[^.?!;]*?\b(?:that|saying))\s+[^.?!;]+",
    re.IGNORECASE,
)


def send_request(text: str) -> str | None:
    """For a request to send a message whose body it gives, the request without the body, else None."""
    if not _OPENS_WITH_MEDIUM.match(text):  # most requests: nothing more to read
        return None
    match = SEND_REQUEST.match(_values_out(text, fill=True)[0])  # an address's dots end nothing
    if match is None or re.search(r"\bsend", text, re.IGNORECASE):
        return None
    return text[: match.end("to")] + text[match.end():]


def lexical_parts(text: str) -> tuple[str, str]:
    """A request as lexical ranking reads it (the bm25 and postgres backends): (its words, with `send` added when
    it asks to send a message whose body it gives; its values, which weigh lightly)."""
    prose, values = split_entities(text)
    if send_request(text) is not None:  # "Email Ana that ...": the action it asks for, in the words tools use
        prose = f"{prose} {SEND}"
    return prose, values


@lru_cache(maxsize=1024)  # a search reads its request here twice (its words for bm25, a name's words)
def split_entities(text: str) -> tuple[str, str]:
    """(the text with its values taken out, the values themselves, space-joined)."""
    prose, found = _values_out(text)
    lowered = prose.lower()  # a body follows `that` or `saying`: without either, no need to look for one
    bodies = [m.group("body") for m in MESSAGE_BODY.finditer(prose)] if "that" in lowered or "saying" in lowered else []
    if bodies:
        prose = MESSAGE_BODY.sub(lambda m: m.group(0)[: m.start("body") - m.start()], prose)
    if not found and not bodies:
        return text, ""
    return prose, " ".join([*found, *bodies])
