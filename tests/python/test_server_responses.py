"""OpenAI's Responses API (POST /v1/responses, stateless) through `gannet serve` with a
DeepSeek-V4.1 checkpoint (random weights, DeepSeek's own encoder), driven by the official
`openai` client's responses.create / responses.stream:
- a conversation gives the same tokens and text as /v1/chat/completions (greedy), with
  status incomplete / max_output_tokens and usage in the Responses shape;
- a grammar makes the random model write a DSML call: it comes back as a function_call
  item, streamed as function_call_arguments deltas that join to the same arguments;
- a tool loop (function_call and function_call_output items) renders what the chat shape
  renders and hits the prefix cache; text.format json_schema constrains the output;
  reasoning.effort opens a reasoning item;
- what a stateless server cannot do (previous_response_id, store: true) and anything
  unread is refused by name."""
import json

import jsonschema
import pytest

from test_server import Server
from test_server_tools import GRAMMAR, TOOLS as CHAT_TOOLS, v41  # noqa: F401 (fixture)

TOOLS = [{"type": "function", **t["function"]} for t in CHAT_TOOLS]
MESSAGES = [{"role": "user", "content": "Weather in Oslo?"}]


@pytest.fixture(scope="module")
def server(v41):  # noqa: F811
    s = Server(v41, "--max-num-seqs", "4")
    s.name = s.client.models.list().data[0].id
    yield s
    s.stop()


def chat(server, messages, **extra):
    status, r = server.raw("POST", "/v1/chat/completions",
                           {"model": server.name, "messages": messages, "temperature": 0, **extra})
    assert status == 200, r
    return r


def test_text_matches_chat_completions(server):
    r = server.client.responses.create(model=server.name, input="Weather in Oslo?", max_output_tokens=12, temperature=0)
    ref = chat(server, MESSAGES, max_tokens=12)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == ref["choices"][0]["message"]["content"]
    assert [o.type for o in r.output] == ["message"]
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.input_tokens == ref["usage"]["prompt_tokens"] and r.usage.output_tokens == 12
    assert r.usage.total_tokens == r.usage.input_tokens + 12
    # Items instead of a string, and instructions as the system message.
    items = server.client.responses.create(model=server.name, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Weather in Oslo?"}]}], max_output_tokens=12, temperature=0)
    assert items.output_text == r.output_text
    sys = server.client.responses.create(model=server.name, instructions="Be brief.", input="Weather in Oslo?",
                                         max_output_tokens=3, temperature=0)
    ref_sys = chat(server, [{"role": "system", "content": "Be brief."}] + MESSAGES, max_tokens=3)
    assert sys.usage.input_tokens == ref_sys["usage"]["prompt_tokens"]
    assert sys.output_text == ref_sys["choices"][0]["message"]["content"]


def ask_tool(server, **extra):
    return dict(model=server.name, input="Weather in Oslo?", tools=TOOLS, max_output_tokens=250, temperature=0,
                extra_body={"structured": {"grammar": GRAMMAR}}, **extra)


def test_function_call_item(server):
    r = server.client.responses.create(**ask_tool(server))
    assert r.status == "completed"
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    ref = chat(server, MESSAGES, tools=CHAT_TOOLS, max_tokens=250, structured={"grammar": GRAMMAR})
    assert call.arguments == ref["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert [o.type for o in r.output] == ["function_call"]  # no DSML as text


def test_streamed_function_call(server):
    whole = server.client.responses.create(**ask_tool(server))
    events = list(server.client.responses.create(**ask_tool(server), stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == whole.output[0].arguments
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [d.item.type for d in done] == ["function_call"] and done[0].item.arguments == deltas
    final = events[-1].response

    def same(o):  # an item without its response-specific ids
        return {k: v for k, v in o.model_dump().items() if k not in ("id", "call_id")}
    assert [same(o) for o in final.output] == [same(o) for o in whole.output]
    with server.client.responses.stream(**ask_tool(server)) as s:
        got = s.get_final_response()
    assert got.output[0].arguments == whole.output[0].arguments and got.usage.output_tokens == whole.usage.output_tokens


def test_tool_loop_renders_as_chat_and_hits_the_cache(server):
    first = server.client.responses.create(**ask_tool(server))
    call = first.output[0]
    items = [{"role": "user", "content": "Weather in Oslo?"},
             {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
             {"type": "function_call_output", "call_id": call.call_id, "output": "-3C, snow"}]
    r = server.client.responses.create(model=server.name, input=items, tools=TOOLS, max_output_tokens=4, temperature=0)
    assert r.usage.input_tokens_details.cached_tokens > 0
    ref = chat(server, MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "-3C, snow"}], tools=CHAT_TOOLS, max_tokens=4)
    assert r.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert r.output_text == (ref["choices"][0]["message"]["content"] or "")


def test_json_schema_format(server):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"enum": [1, 2, 3]}},
              "required": ["city", "days"], "additionalProperties": False}
    r = server.client.responses.create(model=server.name, input="Weather in Oslo?", max_output_tokens=400,
                                       text={"format": {"type": "json_schema", "name": "w", "schema": schema,
                                                        "strict": True}}, extra_body={"seed": 5})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)


def test_reasoning_effort(server):
    r = server.client.responses.create(model=server.name, input="Weather in Oslo?", max_output_tokens=5,
                                       temperature=0, reasoning={"effort": "high"})
    ref = chat(server, MESSAGES, max_tokens=5, reasoning_effort="high")
    assert r.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert r.output[0].type == "reasoning"
    assert r.output[0].content[0].text == ref["choices"][0]["message"]["reasoning_content"]
    assert r.output[0].content[0].text  # the random model never closes its reasoning in 5 tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 5


@pytest.mark.parametrize("extra,param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"colour": 1}, "colour"),
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"reasoning": {"effort": "high", "summary": "auto"}}, "reasoning"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"text": {"format": {"type": "xml"}}}, "text"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_refusals_name_the_field(server, extra, param):
    status, r = server.raw("POST", "/v1/responses", {"model": server.name, "input": "Hi", **extra})
    assert status == 400, r
    assert r["error"]["param"] == param, r
