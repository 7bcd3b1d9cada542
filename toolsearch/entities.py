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

__all__ = ["ENTITY", "split_entities"]

ENTITY = re.compile(
    r"""[\w.+-]+@[\w-]+(?:\.[\w-]+)+"""  # e-mail address
    r"""|\b(?:https?|ftp)://\S+|\bwww\.\S+"""  # URL
    r"""|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"""  # UUID
    r"""|(?<![\w])(?=(?:[\w-]*\d){3})(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]*(?![\w])"""  # an id: letters and 3+ digits
    r"""|(?<![\w.])[-+#$€£]?\d[\d,.:/-]*%?(?![\w])""",  # a number, date, time, amount or phone number
)


def split_entities(text: str) -> tuple[str, str]:
    """(the text with its values taken out, the values themselves, space-joined)."""
    found = [m.group(0) for m in ENTITY.finditer(text)]
    if not found:
        return text, ""
    return ENTITY.sub(" ", text), " ".join(found)
