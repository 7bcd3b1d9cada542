"""What some providers and OpenAI-compatible servers send or demand, through the real `openai` client.

- Chat Completions streams whose parallel calls all come under `index: 0`, each whole with its own id and name
  (Ollama, some gateways, older vLLM), are as many calls, as the same reply unstreamed is; and one call stays one
  call however a server varies its fragments' ids (Poolside, older mlx-openai-server) or repeats its name (MiniMax
  through NVIDIA NIM, vLLM's GLM parser, vLLM's empty last fragment). Telling them apart reads each fragment once.
- The Responses API with `store=False` keeps nothing: a reasoning item goes back only with its
  `encrypted_content`, which a request asks for with `include=["reasoning.encrypted_content"]`, and the API
  refuses that `include` for a model that does not reason. The server below answers as the API does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from test_reply_faults import Body, RawServer, chat, serve, session_with

from toolsearch import run
from toolsearch.providers import OpenAIChatModel, OpenAIResponsesModel
from toolsearch.providers.openai import ChatStreamAssembler
from toolsearch.tools import NameMap

__all__ = ["serve"]  # the fixture, shared with test_reply_faults

FUNCTIONS = {"get_weather": lambda city: f"sunny in {city}", "get_time": lambda tz: "12:00",
             "save_rows": lambda rows: "saved"}
TOOLS = [("get_weather", "Weather for a city."), ("get_time", "Time in a zone."), ("save_rows", "Save rows.")]


def chunk(delta: Body, finish: str | None = None) -> Body:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call_fragment(call_id: str | None, name: str | None, arguments: str, index: int = 0) -> Body:
    fn: Body = {"arguments": arguments}
    if name is not None:
        fn["name"] = name
    fragment: Body = {"index": index, "function": fn}
    if call_id is not None:
        fragment.update(id=call_id, type="function")
    return chunk({"tool_calls": [fragment]})


def streamed_calls(
    serve: Callable[..., RawServer], *chunks: Body, functions: dict[str, Callable[..., Any]] = FUNCTIONS
) -> list[tuple[str, str, str, str]]:
    server = serve((200, [*chunks, chunk({}, "tool_calls")]), (200, [chunk({"content": "ok"}, "stop")]))
    result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "Weather and time in Porto?",
                 session=session_with(*TOOLS), functions=functions, tool_search="off", stream=True)
    return [(r.call.id, r.call.name, r.status.value, r.content) for r in result.tool_results]


def test_parallel_calls_streamed_whole_under_one_index_are_each_a_call(serve: Callable[..., RawServer]) -> None:
    assert streamed_calls(
        serve,
        call_fragment("call_a", "get_weather", '{"city":"Porto"}'),
        call_fragment("call_b", "get_time", '{"tz":"Europe/Lisbon"}'),
    ) == [("call_a", "get_weather", "ok", "sunny in Porto"), ("call_b", "get_time", "ok", "12:00")]


def test_parallel_calls_without_ids_under_one_index_are_each_a_call(serve: Callable[..., RawServer]) -> None:
    results = streamed_calls(
        serve,
        call_fragment(None, "get_weather", '{"city":"Porto"}'),
        call_fragment(None, "get_time", '{"tz":"Europe/Lisbon"}'),
    )
    assert [(name, status) for _, name, status, _ in results] == [("get_weather", "ok"), ("get_time", "ok")]
    assert len({call_id for call_id, *_ in results}) == 2  # each its own id, as the loop made them


def test_a_call_whose_id_and_name_come_again_with_its_arguments_stays_one_call(
    serve: Callable[..., RawServer],
) -> None:
    assert streamed_calls(
        serve,
        call_fragment("call_a", "get_weather", ""),
        call_fragment("call_a", "get_weather", '{"city":'),  # a server that repeats them in every fragment
        call_fragment(None, "get_weather", '"Porto"}'),
        call_fragment("call_b", "get_time", '{"tz":"UTC"}', index=1),
    ) == [("call_a", "get_weather", "ok", "sunny in Porto"), ("call_b", "get_time", "ok", "12:00")]


ONE_CALL_SHAPES = {
    # Poolside: the id it sends with the name, then another id on every arguments fragment (poolsideai/pool#9)
    "new-id-on-arguments": [call_fragment("call_A", "get_weather", ""), call_fragment("call_B", None, '{"city":'),
                            call_fragment("call_B", None, ' "Porto"}')],
    # mlx-openai-server before its PR #216: a fresh id on every delta
    "fresh-id-every-delta": [call_fragment("call_A", "get_weather", ""), call_fragment("call_2", None, '{"city":'),
                             call_fragment("call_3", None, ' "Porto"}')],
    # MiniMax through NVIDIA NIM: the name on every fragment; vLLM: a last fragment with empty arguments
    "name-on-every-fragment": [call_fragment("call_A", "get_weather", ""),
                               call_fragment(None, "get_weather", '{"city": "Porto"}'),
                               call_fragment(None, "get_weather", "")],
    "name-on-every-piece": [call_fragment("call_A", "get_weather", ""), call_fragment(None, "get_weather", '{"city":'),
                            call_fragment(None, "get_weather", ' "Porto"}'), call_fragment(None, "get_weather", " ")],
}


@pytest.mark.parametrize("shape", ONE_CALL_SHAPES)
def test_one_streamed_call_stays_one_call_however_its_fragments_vary(
    serve: Callable[..., RawServer], shape: str
) -> None:
    ran: list[str] = []
    functions = {**FUNCTIONS, "get_weather": lambda city="Lisbon": ran.append(city) or f"sunny in {city}"}
    assert streamed_calls(serve, *ONE_CALL_SHAPES[shape], functions=functions) == [
        ("call_A", "get_weather", "ok", "sunny in Porto")
    ]
    assert ran == ["Porto"]  # once, with what the model asked: never split off with its defaults, nor run twice


def test_a_quote_escaped_across_two_fragments_keeps_the_call_whole(serve: Callable[..., RawServer]) -> None:
    """A fragment that ends inside a string on a backslash, the next starting with the quote it escapes: the string
    is still open, so the `}` after that quote is text, and a fragment that repeats the name continues the call."""
    saved: list[str] = []
    functions = {**FUNCTIONS, "save_rows": lambda rows: saved.append(rows) or "saved"}
    results = streamed_calls(serve, call_fragment("call_A", "save_rows", '{"rows": "a\\'),
                             call_fragment(None, "save_rows", '"} '), call_fragment(None, "save_rows", 'b"}'),
                             functions=functions)
    assert results == [("call_A", "save_rows", "ok", "saved")] and saved == ['a"} b']


@pytest.mark.parametrize(
    "fragments",
    [
        [call_fragment("call_a", "get_weather", '{"city":"Porto"}'),
         call_fragment("call_b", "get_weather", '{"city":"Lisbon"}')],
        [call_fragment(None, "get_weather", '{"city":"Porto"}'),
         call_fragment(None, "get_weather", '{"city":"Lisbon"}')],
    ],
    ids=["own-ids", "no-ids"],
)
def test_two_calls_of_one_tool_under_one_index_are_two_calls(
    serve: Callable[..., RawServer], fragments: list[Body]
) -> None:
    results = streamed_calls(serve, *fragments)
    assert [(name, status, content) for _, name, status, content in results] == [
        ("get_weather", "ok", "sunny in Porto"), ("get_weather", "ok", "sunny in Lisbon")
    ]


def test_a_long_call_whose_name_comes_with_every_fragment_is_read_once(
    serve: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed call of 2,000 fragments, each repeating the name (MiniMax through NIM) and ending in `}`: telling
    whether a fragment starts another call must not read all the arguments so far again for every fragment (the
    whole loop waits while it does). Every JSON read of the arguments is counted, in characters, and so is every
    character read out of the fragments themselves, as the assembler gets them (`CountedText`); a call whose name
    comes once is never scanned at all."""
    pieces = ['{"rows":[{"n":0}', *(f',{{"n":{n}}}' for n in range(1, 2_000)), "]}"]
    arguments = "".join(pieces)
    read: list[int] = []
    loads = json.loads

    def counted(text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, str) and text.startswith('{"rows"'):
            read.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    saved: list[int] = []
    functions = {**FUNCTIONS, "save_rows": lambda rows: saved.append(len(rows)) or "saved"}
    results = streamed_calls(serve, call_fragment("call_A", "save_rows", ""),
                             *(call_fragment(None, "save_rows", piece) for piece in pieces), functions=functions)
    assert results == [("call_A", "save_rows", "ok", "saved")] and saved == [2_000]
    assert 0 < sum(read) <= 4 * len(arguments)  # a few whole reads, never one per fragment

    def scanned(name_each_time: bool) -> int:
        """How many characters were read one by one out of the arguments fragments of the one call a stream sends
        (fed to the assembler as the client hands them on), a character read twice counted twice."""
        reads = [0]

        class CountedText(str):
            """An arguments fragment that counts each character read out of it by index, as the assembler's scan
            reads them (inside a JSON string it skips to the string's end with a regex, which is not counted)."""

            def __getitem__(self, key: Any) -> str:
                reads[0] += 1
                return str.__getitem__(self, key)

        assembler = ChatStreamAssembler(NameMap(["save_rows"]))
        assembler.feed(call_fragment("call_A", "save_rows", ""))
        for piece in pieces:
            assembler.feed(call_fragment(None, "save_rows" if name_each_time else None, CountedText(piece)))
        assembler.feed(chunk({}, "tool_calls"))
        [call] = assembler.finish().message.tool_calls
        assert len(call.arguments["rows"]) == 2_000
        return reads[0]

    named_each_time = scanned(name_each_time=True)
    assert 0 < named_each_time <= len(arguments)  # each character once at most: never the text so far again
    assert scanned(name_each_time=False) == 0  # OpenAI's own streams: nothing to tell apart, nothing scanned


# --- Responses with store=False ------------------------------------------------------------------


def responses_body(output: list[Body], model: str) -> Body:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": model, "status": "completed",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 3}}}


def stateless_api(model_reasons: bool, turns: list[list[Body]], seen: list[Body]) -> Callable[[str, Body], Any]:
    """The Responses API for `store=False`: each request is checked as the API checks it, then answered with the
    next of `turns` (a reasoning model's output starts with its reasoning item, encrypted when asked)."""

    def answer(path: str, body: Body) -> tuple[int, Any]:
        seen.append(body)
        include = body.get("include") or []
        if "reasoning.encrypted_content" in include and not model_reasons:
            return 400, {"error": {"message": "Encrypted content is not supported with this model.",
                                   "type": "invalid_request_error", "param": "include", "code": None}}
        bare = [i for i in body["input"] if i.get("type") == "reasoning" and not i.get("encrypted_content")]
        if body.get("store") is False and bare:
            return 400, {"error": {"message": f"Item with id '{bare[0]['id']}' not found. Items are not persisted "
                                   "when `store` is set to false. Try again with `store` set to true, or remove this "
                                   "item from your input.", "type": "invalid_request_error", "param": "input",
                                   "code": None}}
        n = len(seen)
        output = list(turns[n - 1])
        if model_reasons:
            reasoning: Body = {"type": "reasoning", "id": f"rs_{n}", "summary": []}
            if "reasoning.encrypted_content" in include:
                reasoning["encrypted_content"] = f"gAAAA-sealed-{n}"
            output.insert(0, reasoning)
        return 200, responses_body(output, body["model"])

    return answer


def time_call(n: int) -> Body:
    return {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "get_time",
            "arguments": '{"tz":"UTC"}', "status": "completed"}


ANSWER = {"type": "message", "id": "m1", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "It is noon.", "annotations": []}]}


def stateless_run(serve: Callable[..., RawServer], model: str, reasons: bool, **options: Any) -> list[Body]:
    seen: list[Body] = []
    api = stateless_api(reasons, [[time_call(1)], [time_call(2)], [ANSWER]], seen)
    server = serve(api, api, api)
    result = run(OpenAIResponsesModel(server.openai(), model, store=False, **options), "What time is it?",
                 session=session_with(*TOOLS), functions=FUNCTIONS, tool_search="off")
    assert result.output == "It is noon." and [r.status.value for r in result.tool_results] == ["ok", "ok"]
    return seen


def replayed(body: Body) -> list[Body]:
    return [i for i in body["input"] if i.get("type") == "reasoning"]


def test_a_reasoning_model_without_store_replays_its_reasoning_encrypted(serve: Callable[..., RawServer]) -> None:
    first, second, third = stateless_run(serve, "gpt-5-mini", True)
    # the first answer shows the model reasons: its bare reasoning item is left out, and from then on asked for
    assert "include" not in first and replayed(second) == []
    assert second["include"] == third["include"] == ["reasoning.encrypted_content"]
    assert replayed(third) == [
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA-sealed-2"}
    ]


def test_reasoning_settings_ask_for_the_encrypted_reasoning_from_the_first_request(
    serve: Callable[..., RawServer],
) -> None:
    first, second, _ = stateless_run(serve, "gpt-5-mini", True, reasoning={"effort": "low"},
                                     include=["message.output_text.logprobs"])
    assert first["include"] == ["message.output_text.logprobs", "reasoning.encrypted_content"]
    assert [i["encrypted_content"] for i in replayed(second)] == ["gAAAA-sealed-1"]


def test_a_model_that_does_not_reason_is_not_asked_for_encrypted_reasoning(serve: Callable[..., RawServer]) -> None:
    assert all("include" not in body for body in stateless_run(serve, "gpt-4.1", False))


def test_with_store_the_reasoning_is_replayed_by_reference(serve: Callable[..., RawServer]) -> None:
    seen: list[Body] = []
    api = stateless_api(True, [[time_call(1)], [ANSWER]], seen)
    server = serve(api, api)
    run(OpenAIResponsesModel(server.openai(), "gpt-5-mini"), "What time is it?", session=session_with(*TOOLS),
        functions=FUNCTIONS, tool_search="off")
    assert "include" not in seen[1] and replayed(seen[1]) == [{"type": "reasoning", "id": "rs_1", "summary": []}]


def test_an_unstreamed_reply_with_two_calls_runs_both(serve: Callable[..., RawServer]) -> None:
    """The reference the streamed cases above must agree with."""
    server = serve(chat(None, [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Porto"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": '{"tz":"Europe/Lisbon"}'}},
    ], "tool_calls"), chat("ok"))
    result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "Weather and time in Porto?",
                 session=session_with(*TOOLS), functions=FUNCTIONS, tool_search="off")
    assert [(r.call.id, r.status.value) for r in result.tool_results] == [("call_a", "ok"), ("call_b", "ok")]
