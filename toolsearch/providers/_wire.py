"""Reading provider wire objects: SDK models and plain dicts alike, by one pair of helpers."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ProviderError

if TYPE_CHECKING:  # _base reads SDK objects through this module: no import back at run time
    from ._base import ToolCall

__all__ = [
    "STOP_ERRORS",
    "STOP_KINDS",
    "StopKind",
    "anthropic_call_id",
    "check_stop",
    "dump",
    "get",
    "stop_kind",
    "token_count",
    "unique_call_ids",
]

# Why a turn ended without a complete answer, whatever the provider: the output was cut at a token limit
# ("truncated"), the model declined or the provider's safety filter withheld it ("refused"), or the model
# wrote a tool call the API could not read ("malformed_call"; the loop tells the model and lets it retry).
StopKind = Literal["truncated", "refused", "malformed_call"]

# Every built-in provider's stop reasons that are not a normal end, by kind. The providers' own words do not
# overlap, so one table serves them all (and any provider that reuses their words); a reason not here
# (stop, end_turn, tool_calls, tool_use, STOP, completed, ...) ends a turn normally.
STOP_KINDS: Mapping[str, StopKind] = {
    # OpenAI Chat Completions finish_reason
    "length": "truncated",
    "content_filter": "refused",
    # OpenAI Responses status, and its incomplete_details.reason
    "incomplete": "truncated",
    "max_output_tokens": "truncated",
    # Anthropic stop_reason
    "max_tokens": "truncated",
    "model_context_window_exceeded": "truncated",
    "refusal": "refused",
    # Gemini finish_reason
    "MAX_TOKENS": "truncated",
    "SAFETY": "refused",
    "RECITATION": "refused",
    "BLOCKLIST": "refused",
    "PROHIBITED_CONTENT": "refused",
    "SPII": "refused",
    "IMAGE_SAFETY": "refused",
    "IMAGE_PROHIBITED_CONTENT": "refused",
    "IMAGE_RECITATION": "refused",
    "LANGUAGE": "refused",  # a language the model does not serve
    "MALFORMED_FUNCTION_CALL": "malformed_call",
    "UNEXPECTED_TOOL_CALL": "malformed_call",  # a call of a tool the request did not declare
    "TOO_MANY_TOOL_CALLS": "malformed_call",  # more calls in a row than the API takes
    "MALFORMED_RESPONSE": "malformed_call",  # a reply the API could not parse: the loop says so and asks again
    "CONTINUATION": "truncated",  # the per-request token limit cut a reply that was not finished
    "ESCALATION": "refused",  # withheld by an escalation rule
    "MODEL_ARMOR": "refused",  # withheld by Model Armor (Vertex AI)
    "NO_IMAGE": "refused",  # the reply the request asked for was not given
    # "stopped for a reason not otherwise specified": the reply is not a complete answer, and the API names no
    # token limit, so TRUNCATED would send the user to raise one for nothing. REFUSED is the honest kind: the
    # provider ended the reply early and withheld the rest; the run ends with any text, and a call the reply
    # held does not run (its arguments may be cut).
    "OTHER": "refused",
    "IMAGE_OTHER": "refused",
    # FINISH_REASON_UNSPECIFIED (the enum's default when the API sent none) ends a turn normally, as no reason does.
}

# Stop reasons that say the request failed rather than how a reply ended: there is no answer to keep and nothing the
# model could do about it (a note and another turn would fail alike), so the adapter raises a ProviderError
# (`check_stop`) saying what to do; the loop attaches the run so far to it, as to any provider failure.
STOP_ERRORS: Mapping[str, str] = {
    # OpenAI Responses status (a failed response's `error` object says why: `check_stop` quotes it)
    "failed": "the response failed; a server_error or rate_limit_exceeded may pass when the request is sent again "
    "later, any other code needs the request changed",
    "cancelled": "the response was cancelled before it finished; send the request again",
    "queued": "the response is not finished yet (a background response); the loop needs the finished response: "
    "do not pass background=True to the model",
    "in_progress": "the response is not finished yet (a background response); the loop needs the finished "
    "response: do not pass background=True to the model",
    # Gemini finish_reason
    "MISSING_THOUGHT_SIGNATURE": "the request's history holds a Gemini function call without the thought signature "
    "the model sent with it; resume from messages saved with LoopResult.to_dict() or Message.to_dict(), which keep "
    "the signatures, instead of rebuilt ones",
    "PUP_LIMITED_DISABLED": "the account is limited or disabled for Prohibited Use Policy violations; no request of "
    "this account will be answered until the account is reviewed",
}


def stop_kind(reason: Any, detail: Any = None) -> StopKind | None:
    """The neutral kind of a provider's stop reason (None: a normal end, or a reason not known).

    `detail` is a finer reason that decides when it is known (a Responses turn's
    `incomplete_details.reason`: `content_filter` makes an `incomplete` turn "refused").
    """
    for value in (detail, reason):
        if isinstance(value, str) and value in STOP_KINDS:
            return STOP_KINDS[value]
    return None


def check_stop(reason: Any, provider: str, error: Any = None) -> None:
    """ProviderError when a provider's stop reason (or a Responses status) is one of `STOP_ERRORS`.

    `error` is the reply's own error object, if any (a failed Responses turn's `{"code", "message"}`):
    its code and message are quoted, so the caller sees why without reading the raw reply.
    """
    if not isinstance(reason, str) or reason not in STOP_ERRORS:
        return
    said = [str(part) for part in (get(error, "code"), get(error, "message")) if part] if error is not None else []
    why = f" ({': '.join(said)})" if said else ""
    raise ProviderError(f"the {provider} answer ended with {reason!r}{why}: {STOP_ERRORS[reason]}")


def get(obj: Any, key: str, default: Any = None) -> Any:
    """`obj[key]` for a mapping, `obj.key` for an SDK object (`default` when absent)."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def dump(obj: Any) -> Any:
    """An SDK (pydantic) object as its JSON-able dict without unset fields; anything else as it is."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True, mode="json")
    return obj


def token_count(value: Any, field: str, provider: str) -> int | None:
    """A usage figure from a provider's answer: a non-negative int, None when absent; ProviderError otherwise.

    SDKs build response objects without checking them, so a proxy that sends `"12"` or `-1` would
    otherwise fail later, as a bare TypeError, or make a wrong bill.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProviderError(
            f"the {provider} answer's usage field {field!r} is {type(value).__name__} {value!r:.40}, not a "
            "non-negative integer token count: the provider's (or a proxy's) answer is malformed; check what "
            "the endpoint behind the client returns"
        )
    return value


def unique_call_ids(calls: Iterable[ToolCall], prefix: str) -> list[ToolCall]:
    """The calls of one turn with an id each, all different, before any of them runs.

    A call that came without an id gets a fresh local one (`{prefix}local_` + 24 hex digits); a call
    whose id an earlier call of the turn already has is renamed `{id}_2` (`_3`, ...). The new ids are
    the calls' ids from then on: the history sends them in the assistant message and in the results
    that answer it, so the next request is consistent and each result answers exactly one call.
    """
    taken: set[str] = set()
    given = list(calls)
    out: list[ToolCall] = []
    for call in given:
        taken.add(call.id)
    seen: set[str] = set()
    for call in given:
        new = call.id
        if not new:
            new = f"{prefix}local_{uuid.uuid4().hex[:24]}"
        elif new in seen:
            n = 2
            while f"{call.id}_{n}" in taken:
                n += 1
            new = f"{call.id}_{n}"
        seen.add(new)
        taken.add(new)
        out.append(call if new == call.id else replace(call, id=new))
    return out


_ANTHROPIC_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def anthropic_call_id(call_id: str) -> str:
    """A call id as Anthropic accepts it (`^[a-zA-Z0-9_-]+$`): unchanged when it does, else every other
    character replaced by `_` and a short digest of the original added, so distinct ids stay distinct
    and the tool_use and the tool_result that answers it map to the same id. ("" is the caller's.)"""
    if _ANTHROPIC_ID.match(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', call_id)}_{digest}"
