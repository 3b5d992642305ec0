"""Tool calls and reasoning through `gannet serve` with a DeepSeek-V4.1 checkpoint (random
weights, the DeepSeek-V3 tokenizer, no chat template, so DeepSeek's own encoder renders
the prompt). A grammar (the `structured` extension) makes the random model write a DSML
call; the server must return it as OpenAI tool calls, streamed or not, never as content:
- non-streamed: message.tool_calls with id, type, function.name and JSON arguments,
  content null, finish_reason "tool_calls"; the openai client reads it;
- streamed: the first delta of a call has id, type and name, the argument fragments join
  to the non-streamed arguments, and no delta's content holds DSML;
- the next turn (the call replayed with its result) renders the sampled call's bytes
  again, and its prompt hits the prefix cache;
- tool_choice "required" / a named function: the random model's every answer is one call
  whose arguments validate against the tool's schema (50 of 50), since the grammar of the
  tools' schemas constrains decoding;
- reasoning_effort: turns thinking on, refused by name where the version has no such
  setting; tool_choice / tools / parallel_tool_calls checked and refused by name."""
import concurrent.futures
import json
import re

import jsonschema

import pytest

from conftest import ROOT, run
from test_server import Server

CALL = ('\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="city" string="true">{city}'
        '</｜DSML｜ parameter>\n<｜DSML｜ parameter name="days" string="false">{days}</｜DSML｜ parameter>\n'
        '</｜DSML｜ invoke>\n</｜DSML｜ calls>')
GRAMMAR = ('root ::= "\\n\\n<｜DSML｜ calls>\\n<｜DSML｜ invoke name=\\"get_weather\\">\\n<｜DSML｜ parameter name=\\"city\\" '
           'string=\\"true\\">" [A-Z] [a-z] [a-z] "</｜DSML｜ parameter>\\n<｜DSML｜ parameter name=\\"days\\" '
           'string=\\"false\\">" [1-7] "</｜DSML｜ parameter>\\n</｜DSML｜ invoke>\\n</｜DSML｜ calls>"')
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]
MESSAGES = [{"role": "user", "content": "Weather in Oslo?"}]


@pytest.fixture(scope="module")
def v41(tmp_path_factory):
    d = tmp_path_factory.mktemp("v41tools") / "m"
    # The tokenizer's full vocabulary on a narrow model (hidden 64, not the preset's 256):
    # every decode step streams the [129280, hidden] head, which would otherwise be most
    # of these tests' time.
    run(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--config-overrides",
         json.dumps({"vocab_size": 129280, "engram_compressed_vocab_size": 98627, "max_position_embeddings": 2048,
                     "hidden_size": 64}),
         "--out", str(d)])
    src = ROOT / "assets" / "tokenizers" / "deepseek-v3"
    (d / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg.pop("chat_template")  # V4.1 ships none: the server uses DeepSeek's encoder
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def server(v41):
    s = Server(v41, "--max-num-seqs", "8")
    yield s
    s.stop()


def ask(server, **extra):
    body = {"model": server.client.models.list().data[0].id, "messages": MESSAGES, "tools": TOOLS,
            "max_tokens": 250, "temperature": 0, "structured": {"grammar": GRAMMAR}, **extra}
    return server.raw("POST", "/v1/chat/completions", body)


def test_tool_call_comes_back_parsed(server):
    status, r = ask(server)
    assert status == 200, r
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] is None
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    assert re.fullmatch(r"[A-Z][a-z]{2}", args["city"]) and 1 <= args["days"] <= 7
    assert call["function"]["arguments"] == json.dumps(args)  # the official text: Python spacing

    # The official client reads it.
    c = server.client.chat.completions.create(model=r["model"], messages=MESSAGES, tools=TOOLS, max_tokens=250,
                                              temperature=0, extra_body={"structured": {"grammar": GRAMMAR}})
    assert c.choices[0].finish_reason == "tool_calls"
    assert c.choices[0].message.tool_calls[0].function.arguments == call["function"]["arguments"]


def test_streamed_tool_call_deltas(server):
    _, whole = ask(server)
    want = whole["choices"][0]["message"]["tool_calls"]
    stream = server.client.chat.completions.create(model=whole["model"], messages=MESSAGES, tools=TOOLS, max_tokens=250,
                                                   temperature=0, stream=True,
                                                   extra_body={"structured": {"grammar": GRAMMAR}})
    calls, content, finish = {}, "", None
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            assert "｜DSML｜" not in (d.content or "")
            for t in d.tool_calls or []:
                if t.index not in calls:
                    assert t.id and t.type == "function" and t.function.name == "get_weather"
                    calls[t.index] = {"id": t.id, "name": t.function.name, "arguments": ""}
                else:
                    assert t.id is None and t.function.name is None
                calls[t.index]["arguments"] += t.function.arguments or ""
            finish = ch.finish_reason or finish
    assert content == "" and finish == "tool_calls"
    assert [c["arguments"] for c in calls.values()] == [w["function"]["arguments"] for w in want]
    assert [c["name"] for c in calls.values()] == ["get_weather"]


def test_next_turn_replays_the_call_and_hits_the_cache(server, v41, tmp_path):
    _, first = ask(server)
    call = first["choices"][0]["message"]["tool_calls"][0]
    args = json.loads(call["function"]["arguments"])
    turn2 = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": call["id"], "content": "-3C, snow"}]
    status, second = server.raw("POST", "/v1/chat/completions",
                                {"model": first["model"], "messages": turn2, "tools": TOOLS, "max_tokens": 4})
    assert status == 200, second
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    # The replayed turn is the sampled text byte for byte (chat mode: no reasoning).
    src = tmp_path / "r.jsonl"
    msgs = [{"role": "system", "content": "", "tools": TOOLS}] + turn2
    src.write_text(json.dumps({"messages": msgs, "kwargs": {}}) + "\n")
    out = json.loads(run(["chat-format", "--model", str(v41), "render", "--input", str(src)]).stdout)
    sampled = CALL.format(city=args["city"], days=args["days"])
    assert "<｜Assistant｜></think>" + sampled + "<｜end▁of▁sentence｜><｜User｜><tool_result>-3C, snow</tool_result>" in out["rendered"]
    assert second["usage"]["prompt_tokens"] == len(out["token_ids"])


def test_reasoning_effort(server):
    model = server.client.models.list().data[0].id
    base = {"model": model, "messages": MESSAGES, "max_tokens": 3}
    _, plain = server.raw("POST", "/v1/chat/completions", base)
    status, r = server.raw("POST", "/v1/chat/completions", {**base, "reasoning_effort": "max"})
    assert status == 200, r
    # Thinking on: the answer opens in reasoning, and the prompt has the effort line.
    assert "reasoning_content" in r["choices"][0]["message"]
    assert r["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]
    for bad in ("medium", "xhigh", 0, 101):
        status, e = server.raw("POST", "/v1/chat/completions", {**base, "reasoning_effort": bad})
        assert status == 400 and e["error"]["param"] == "reasoning_effort", (bad, e)
    status, e = server.raw("POST", "/v1/chat/completions",
                           {**base, "reasoning_effort": 30, "chat_template_kwargs": {"thinking": False}})
    assert status == 400 and e["error"]["param"] == "reasoning_effort"


@pytest.mark.parametrize("extra,param", [
    ({"tool_choice": "required"}, "tool_choice"),  # with the request's own grammar
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "color": 1}}]}, "tools"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"functions": [{"name": "f"}]}, "functions"),
])
def test_bad_tool_fields_are_refused_by_name(server, extra, param):
    status, e = ask(server, **extra)
    assert status == 400 and e["error"]["param"] == param, e


def test_tool_choice_none_and_no_tools_read_no_calls(server):
    # Without tools (or with tool_choice "none") DSML in the output is just text; "none"
    # keeps the tools in the prompt (as vLLM does), so an agent's turns share a prefix.
    _, with_tools = ask(server)
    for extra in ({"tools": None}, {"tool_choice": "none"}):
        status, r = ask(server, **extra)
        assert status == 200, r
        msg = r["choices"][0]["message"]
        assert "tool_calls" not in msg and "｜DSML｜ calls>" in msg["content"]
        assert r["choices"][0]["finish_reason"] == "stop"
        same_prompt = r["usage"]["prompt_tokens"] == with_tools["usage"]["prompt_tokens"]
        assert same_prompt == ("tool_choice" in extra)


def test_deepseek_v3_template_calls_and_refusals(tiny_models, tmp_path):
    """The tiny checkpoints carry DeepSeek V3's template: its <｜tool▁calls▁begin｜> calls
    come back as tool_calls, a named function constrains the answer to its call;
    reasoning_effort is refused by name, and a template with no tool syntax gannet reads
    refuses tools."""
    v3_call = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
               '{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
    grammar = 'root ::= "' + v3_call.replace('"', '\\"').replace("\n", "\\n") + '"'
    s = Server(tiny_models["llama"])
    try:
        model = s.client.models.list().data[0].id
        # The grammar admits one text (172 bytes); the random model may spell it in byte
        # tokens, so max_tokens leaves room for that, and a seed makes the run repeatable.
        status, r = s.raw("POST", "/v1/chat/completions", {"model": model, "messages": MESSAGES, "tools": TOOLS,
                                                            "max_tokens": 200, "seed": 3,
                                                            "structured": {"grammar": grammar}})
        assert status == 200, r
        msg = r["choices"][0]["message"]
        assert msg["content"] is None and r["choices"][0]["finish_reason"] == "tool_calls"
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] == \
               [("get_weather", {"city": "Oslo"})]
        status, e = s.raw("POST", "/v1/chat/completions", {"model": model, "messages": MESSAGES, "reasoning_effort": "high"})
        assert status == 400 and e["error"]["param"] == "reasoning_effort", e
        # A named function: V3's block with that call, its arguments under the schema.
        status, r = s.raw("POST", "/v1/chat/completions", {
            "model": model, "messages": MESSAGES, "tools": CONSTRAINED, "max_tokens": 150, "temperature": 1.0,
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
        assert status == 200, r
        (call,) = r["choices"][0]["message"]["tool_calls"]
        assert call["function"]["name"] == "get_time"
        jsonschema.validate(json.loads(call["function"]["arguments"]), TIME)
    finally:
        s.stop()
    template = tmp_path / "plain.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    s = Server(tiny_models["llama"], "--chat-template", str(template))
    try:
        model = s.client.models.list().data[0].id
        status, e = s.raw("POST", "/v1/chat/completions", {"model": model, "messages": MESSAGES, "tools": TOOLS})
        assert status == 400 and e["error"]["param"] == "tools", e
    finally:
        s.stop()


WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Oslo", "Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "metric": {"type": "boolean"}, "when": {"type": "string", "enum": ["today", "tomorrow"]},
    "area": {"type": "object", "properties": {"lat": {"type": "integer", "minimum": -90, "maximum": 90}}, "required": ["lat"]}},
    "required": ["city", "days"]}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}
CONSTRAINED = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
               {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]


def test_required_calls_validate_against_the_schema(server):
    model = server.client.models.list().data[0].id

    def one(seed, choice="required"):
        status, r = server.raw("POST", "/v1/chat/completions", {
            "model": model, "messages": MESSAGES, "tools": CONSTRAINED, "tool_choice": choice,
            "parallel_tool_calls": False, "max_tokens": 400, "seed": seed, "temperature": 1.0})
        assert status == 200, r
        choice0 = r["choices"][0]
        calls = choice0["message"].get("tool_calls") or []
        assert choice0["finish_reason"] == "tool_calls" and len(calls) == 1 and choice0["message"]["content"] is None, r
        fn = calls[0]["function"]
        jsonschema.validate(json.loads(fn["arguments"]), WEATHER if fn["name"] == "get_weather" else TIME)
        return fn["name"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        names = list(pool.map(one, range(50)))
    assert len(names) == 50 and set(names) <= {"get_weather", "get_time"}
    named = {"type": "function", "function": {"name": "get_time"}}
    assert {one(seed, named) for seed in range(4)} == {"get_time"}


def test_llm_chat_reads_tool_calls_back(v41):
    """LLM.chat with tools: each output's message carries the parsed call, as the server's."""
    import os
    import sys
    sys.path.insert(0, os.environ.get("GANNET_PYTHONPATH", str(ROOT / "build" / "python")))
    import gannet
    llm = gannet.LLM(model=str(v41), quiet=True)
    sp = gannet.SamplingParams(max_tokens=250, temperature=0,
                               structured_outputs=gannet.StructuredOutputsParams(grammar=GRAMMAR))
    (r,) = llm.chat(MESSAGES, sp, tools=TOOLS)
    msg = r.outputs[0].message
    assert msg["content"] is None and msg["role"] == "assistant"
    (call,) = msg["tool_calls"]
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "get_weather" and r.outputs[0].text == CALL.format(**args)
    # Without tools the same text is only content; with thinking the answer opens in reasoning.
    (plain,) = llm.chat(MESSAGES, gannet.SamplingParams(max_tokens=3, temperature=0))
    assert "tool_calls" not in plain.outputs[0].message and "reasoning_content" not in plain.outputs[0].message
    (think,) = llm.chat(MESSAGES, gannet.SamplingParams(max_tokens=3, temperature=0),
                        chat_template_kwargs={"thinking": True})
    assert think.outputs[0].message["reasoning_content"] == think.outputs[0].text


def test_qwen_template_tool_calls_through_the_server(tiny_models, tmp_path):
    """A Qwen 3 template (given with --chat-template): its <tool_call> JSON blocks come back
    as tool_calls, streamed or not, and a leading <think> block as reasoning."""
    template = tmp_path / "qwen3.jinja"
    template.write_text(json.loads((ROOT / "tests" / "golden" / "chat_templates" / "qwen3.json").read_text())["chat_template"])
    grammar = ('root ::= "<think>\\nok\\n</think>\\n\\nSure.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
               '\\"arguments\\": {\\"city\\": \\"" [A-Z] [a-z] [a-z] "\\"}}\\n</tool_call>"')
    s = Server(tiny_models["qwen3"], "--chat-template", str(template))
    try:
        model = s.client.models.list().data[0].id
        body = {"model": model, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 120, "temperature": 0,
                "structured": {"grammar": grammar}}
        status, r = s.raw("POST", "/v1/chat/completions", body)
        assert status == 200, r
        msg = r["choices"][0]["message"]
        assert r["choices"][0]["finish_reason"] == "tool_calls"
        assert msg["content"] == "Sure." and msg["reasoning_content"] == "ok"
        (call,) = msg["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert re.fullmatch(r"[A-Z][a-z]{2}", json.loads(call["function"]["arguments"])["city"])
        stream = s.client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=120,
                                                  temperature=0, stream=True, extra_body={"structured": {"grammar": grammar}})
        content, args = "", ""
        for chunk in stream:
            for ch in chunk.choices:
                content += ch.delta.content or ""
                assert "<tool_call>" not in (ch.delta.content or "")
                for t in ch.delta.tool_calls or []:
                    args += t.function.arguments or ""
        assert content == "Sure." and args == call["function"]["arguments"]
        # tool_choice "required": the answer is <tool_call> blocks under the tools' schemas.
        for seed in range(3):
            status, r = s.raw("POST", "/v1/chat/completions", {**body, "structured": None, "tool_choice": "required",
                                                                "tools": CONSTRAINED, "temperature": 1.0, "seed": seed,
                                                                "max_tokens": 150, "parallel_tool_calls": False})
            assert status == 200, r
            (call,) = r["choices"][0]["message"]["tool_calls"]
            fn = call["function"]
            jsonschema.validate(json.loads(fn["arguments"]), WEATHER if fn["name"] == "get_weather" else TIME)
    finally:
        s.stop()


def test_structured_output_with_thinking_holds_after_the_reasoning(server):
    """response_format with thinking on constrains the answer only: the reasoning is free."""
    model = server.client.models.list().data[0].id
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = {"model": model, "messages": MESSAGES, "max_tokens": 12, "temperature": 0, "seed": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    _, chat = server.raw("POST", "/v1/chat/completions", body)
    # Thinking off: the whole answer is the document.
    assert chat["choices"][0]["message"]["content"].startswith('{"a":')
    status, r = server.raw("POST", "/v1/chat/completions", {**body, "chat_template_kwargs": {"thinking": True}})
    assert status == 200, r
    msg = r["choices"][0]["message"]
    assert msg["content"] is None and msg["reasoning_content"] and not msg["reasoning_content"].startswith("{")


def test_four_turn_tool_loop_hits_the_cache(server, v41, tmp_path):
    """An agent loop: three constrained calls, each answered by a tool result, then a turn
    under "auto". From turn 2 on the prompt is served from the prefix cache, and each replayed
    turn renders to the bytes the model sampled (its tokens' bytes, from logprobs)."""
    model = server.client.models.list().data[0].id
    messages = list(MESSAGES)
    sampled = []
    figures = []
    for turn in range(4):
        body = {"model": model, "messages": messages, "tools": CONSTRAINED, "max_tokens": 300 if turn < 3 else 8, "seed": turn,
                "temperature": 1.0, "logprobs": True, "parallel_tool_calls": False,
                "tool_choice": "required" if turn < 3 else "auto"}
        status, r = server.raw("POST", "/v1/chat/completions", body)
        assert status == 200, r
        usage = r["usage"]
        figures.append((usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]))
        if turn > 0:
            assert usage["prompt_tokens_details"]["cached_tokens"] > 0, figures
            # The turn before, as rendered now, is the text the model sampled then.
            src = tmp_path / f"t{turn}.jsonl"
            src.write_text(json.dumps({"messages": [{"role": "system", "content": "", "tools": CONSTRAINED}] + messages,
                                       "kwargs": {}}) + "\n")
            rendered = json.loads(run(["chat-format", "--model", str(v41), "render", "--input", str(src)]).stdout)
            assert "<｜Assistant｜></think>" + sampled[-1] + "<｜User｜>" in rendered["rendered"]
            assert usage["prompt_tokens"] == len(rendered["token_ids"])
        if turn == 3:
            break
        choice = r["choices"][0]
        text = b"".join(bytes(t["bytes"]) for t in choice["logprobs"]["content"]).decode()
        assert text.endswith("<｜end▁of▁sentence｜>")  # the sampled EOS token ends the turn
        sampled.append(text)
        (call,) = choice["message"]["tool_calls"]
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": f"result {turn}"}]
    print("prompt / cached tokens per turn:", figures)
