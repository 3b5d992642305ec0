"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through
`gannet serve` with a DeepSeek-V4.1 checkpoint (random weights, DeepSeek's own encoder),
driven by the official `anthropic` client:
- a conversation gives the same tokens and text as /v1/chat/completions for the same
  conversation (greedy), with usage in Anthropic's terms and stop_reason max_tokens /
  end_turn / stop_sequence;
- a grammar makes the random model write a DSML call: it comes back as a tool_use block
  (stop_reason tool_use) with the arguments as input, streamed as input_json_delta
  fragments that join to the same input; the stream's event order is Anthropic's;
- a tool loop (tool_use replayed, tool_result given) renders what the OpenAI shape
  renders and hits the prefix cache (cache_read_input_tokens);
- system blocks, thinking, count_tokens and the refusals (Anthropic's error shape, by
  field), x-api-key."""
import json

import anthropic
import pytest

from test_server import Server, KEY
from test_server_tools import GRAMMAR, TOOLS as OPENAI_TOOLS, v41  # noqa: F401 (fixture)

TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
          "input_schema": t["function"]["parameters"]} for t in OPENAI_TOOLS]
MESSAGES = [{"role": "user", "content": "Weather in Oslo?"}]
# This client version takes no sampling fields as arguments; the server still reads them.
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(v41):  # noqa: F811
    s = Server(v41, "--max-num-seqs", "4")
    s.anthropic = anthropic.Anthropic(base_url=s.url, api_key=KEY, max_retries=0, timeout=120)
    s.name = s.client.models.list().data[0].id
    yield s
    s.stop()


def openai_chat(server, messages, **extra):
    status, r = server.raw("POST", "/v1/chat/completions",
                           {"model": server.name, "messages": messages, "temperature": 0, **extra})
    assert status == 200, r
    return r


def test_text_matches_chat_completions(server):
    m = server.anthropic.messages.create(model=server.name, max_tokens=12, messages=MESSAGES, extra_body=GREEDY)
    ref = openai_chat(server, MESSAGES, max_tokens=12)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == ref["choices"][0]["message"]["content"]
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    u = m.usage
    assert u.output_tokens == 12 == ref["usage"]["completion_tokens"]
    assert u.input_tokens + u.cache_read_input_tokens == ref["usage"]["prompt_tokens"]

    # A system prompt as a string or as text blocks renders the same.
    a = server.anthropic.messages.count_tokens(model=server.name, system="Be brief.", messages=MESSAGES)
    b = server.anthropic.messages.count_tokens(model=server.name, system=[{"type": "text", "text": "Be brief."}],
                                               messages=MESSAGES)
    c = openai_chat(server, [{"role": "system", "content": "Be brief."}] + MESSAGES, max_tokens=1)
    assert a.input_tokens == b.input_tokens == c["usage"]["prompt_tokens"]
    plain = server.anthropic.messages.count_tokens(model=server.name, messages=MESSAGES)
    assert plain.input_tokens == ref["usage"]["prompt_tokens"] < a.input_tokens


def test_stop_sequences(server):
    whole = server.anthropic.messages.create(model=server.name, max_tokens=12, messages=MESSAGES, extra_body=GREEDY)
    text = whole.content[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    assert stop.strip()
    m = server.anthropic.messages.create(model=server.name, max_tokens=12, messages=MESSAGES,
                                         stop_sequences=[stop], extra_body=GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    got = m.content[0].text if m.content else ""
    assert text.startswith(got) and stop not in got


def ask_tool(server, **extra):
    return dict(model=server.name, max_tokens=250, messages=MESSAGES, tools=TOOLS,
                extra_body={"temperature": 0, "structured": {"grammar": GRAMMAR}}, **extra)


def test_tool_use_block(server):
    m = server.anthropic.messages.create(**ask_tool(server))
    assert m.stop_reason == "tool_use"
    (block,) = [b for b in m.content if b.type == "tool_use"]
    assert block.name == "get_weather" and block.id.startswith("toolu_")
    ref = openai_chat(server, MESSAGES, tools=OPENAI_TOOLS, max_tokens=250, structured={"grammar": GRAMMAR})
    call = ref["choices"][0]["message"]["tool_calls"][0]
    assert block.input == json.loads(call["function"]["arguments"])
    assert [b.type for b in m.content] == ["tool_use"]  # no DSML as text


def test_streamed_tool_use_and_event_order(server):
    whole = server.anthropic.messages.create(**ask_tool(server))
    events = list(server.anthropic.messages.create(**ask_tool(server), stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert events[-2].delta.stop_reason == "tool_use"
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["tool_use"]
    assert starts[0].content_block.name == "get_weather"
    fragments = [e.delta.partial_json for e in events if e.type == "content_block_delta"]
    assert all(e.delta.type == "input_json_delta" for e in events if e.type == "content_block_delta")
    assert json.loads("".join(fragments)) == whole.content[0].input
    assert kinds.count("content_block_stop") == 1
    # The client's own accumulator gives the non-streamed message.
    with server.anthropic.messages.stream(**ask_tool(server)) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].input == whole.content[0].input
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_tool_loop_renders_as_openai_and_hits_the_cache(server):
    first = server.anthropic.messages.create(**ask_tool(server))
    use = first.content[0]
    turn2 = MESSAGES + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "-3C, snow"}]}]
    m = server.anthropic.messages.create(model=server.name, max_tokens=4, messages=turn2, tools=TOOLS,
                                         extra_body=GREEDY)
    assert m.usage.cache_read_input_tokens > 0
    openai_turn2 = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": json.dumps(use.input)}}]},
        {"role": "tool", "tool_call_id": use.id, "content": "-3C, snow"}]
    ref = openai_chat(server, openai_turn2, tools=OPENAI_TOOLS, max_tokens=4)
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == ref["usage"]["prompt_tokens"]
    assert (m.content[0].text if m.content else "") == (ref["choices"][0]["message"]["content"] or "")
    # is_error reaches the model as an "Error: " prefix; a text block after the results too.
    err = server.anthropic.messages.count_tokens(model=server.name, tools=TOOLS, messages=turn2[:2] + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "-3C, snow",
                                     "is_error": True}]}])
    ok = server.anthropic.messages.count_tokens(model=server.name, tools=TOOLS, messages=turn2)
    assert err.input_tokens > ok.input_tokens


def test_thinking(server):
    on = server.anthropic.messages.count_tokens(model=server.name, messages=MESSAGES,
                                                thinking={"type": "enabled", "budget_tokens": 1024})
    ref = openai_chat(server, MESSAGES, max_tokens=1, chat_template_kwargs={"thinking": True})
    assert on.input_tokens == ref["usage"]["prompt_tokens"]
    # The answer opens with a thinking block (the prompt opened it); stopped early here.
    with server.anthropic.messages.stream(model=server.name, max_tokens=1100, messages=MESSAGES,
                                          thinking={"type": "enabled", "budget_tokens": 1024}) as s:
        for e in s:
            if e.type == "content_block_start":
                assert e.index == 0 and e.content_block.type == "thinking"
                break
        else:
            pytest.fail("no content block")


@pytest.mark.parametrize("body,field", [
    ({"messages": MESSAGES}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 4, "n": 2}, "'n'"),
    ({"messages": [{"role": "system", "content": "x"}], "max_tokens": 4}, "role"),
    ({"messages": MESSAGES, "max_tokens": 4, "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"messages": MESSAGES, "max_tokens": 4, "tools": [{"name": "x", "input_schema": {}, "color": 1}]}, "color"),
    ({"messages": MESSAGES, "max_tokens": 4, "tools": [{"type": "web_search_20250305", "name": "w"}]}, "server tools"),
    ({"messages": MESSAGES, "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 10}}, "budget_tokens"),
    ({"messages": MESSAGES, "max_tokens": 1024, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "less than"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}],
      "max_tokens": 4}, "base64"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}], "max_tokens": 4}, "document"),
    ({"messages": MESSAGES, "max_tokens": 4, "metadata": {"user_id": "u", "x": 1}}, "metadata"),
])
def test_refusals_name_the_field(server, body, field):
    status, r = server.raw("POST", "/v1/messages", {"model": server.name, **body})
    assert status == 400, r
    assert r["type"] == "error" and r["error"]["type"] == "invalid_request_error"
    assert field in r["error"]["message"], r


def test_keys_and_models(server):
    bad = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=server.name, max_tokens=2, messages=MESSAGES)
    with pytest.raises(anthropic.NotFoundError):
        server.anthropic.messages.create(model="no-such-model", max_tokens=2, messages=MESSAGES)
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        server.anthropic.messages.create(model=server.name, max_tokens=2000, messages=MESSAGES,
                                         thinking={"type": "enabled", "budget_tokens": 10})
    status, r = server.raw("POST", "/v1/messages", data=b"{nope")
    assert status == 400 and r["type"] == "error" and "malformed JSON" in r["error"]["message"]
