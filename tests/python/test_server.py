"""`gannet serve` checked with the official `openai` client (and raw HTTP where a client
cannot send what is tested):
- completions equal `gannet generate` for the same request, streaming adds up to the same
  text, seeds reproduce under concurrent load, stop strings, token-id and batched prompts,
  tokenize/detokenize;
- chat completions equal `gannet generate` on the prompt that jinja2 renders from the
  checkpoint's (DeepSeek V3) chat template the way transformers does, greedy and seeded;
  streamed chat (role first, deltas adding up, finish_reason last, usage before [DONE]),
  n=2 seeded and reproducible, text content parts joined by newlines, the default
  max_tokens filling the context;
- logprobs: completions' tokens / token_logprobs / top_logprobs / text_offset equal to
  `gannet generate`'s values and the same when streamed; chat's content entries with
  bytes and top_logprobs;
- OpenAI-shaped errors naming the field (completions and chat), the API key, oversize
  bodies, the server serving on afterwards;
- prefix caching: a repeated prompt reports cached_tokens in usage and hits in /metrics, same output;
- /metrics: TTFT and inter-token latency histograms (cumulative, +Inf = count), KV blocks,
  waiting requests, preemptions;
- a vanished streaming client's request (completions and chat) is aborted and its KV
  blocks freed."""
import json
import pathlib
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import jinja2.ext
import jinja2.sandbox
import openai
import pytest

from conftest import ROOT, gannet_bin, run

KEY = "test-key"


class Server:
    def __init__(self, model, *extra):
        self.proc = subprocess.Popen(
            [gannet_bin(), "serve", "--model", str(model), "--port", "0", "--threads", "1", "--api-key", KEY, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = ""
        deadline = time.time() + 60
        while "listening on" not in line:
            line = self.proc.stdout.readline()
            if not line and (self.proc.poll() is not None or time.time() > deadline):
                raise AssertionError("server did not start: " + self.proc.stderr.read())
        self.url = line.strip().split("listening on ")[1]
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, timeout=120)

    def raw(self, method, path, body=None, key=KEY, data=None):
        """(status, parsed JSON or text) of a raw HTTP request."""
        if data is None and body is not None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Authorization", "Bearer " + key)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def model(tiny_models):
    return tiny_models["llama"]


@pytest.fixture(scope="module")
def server(model):
    s = Server(model, "--max-model-len", "256", "--max-body-bytes", "8192")
    yield s
    s.stop()


def generate(model, prompt, **params):
    """`gannet generate` on one prompts-file line (prompt text, or token ids when a list):
    the reference for the server's output."""
    line = json.dumps({"prompt_token_ids" if isinstance(prompt, list) else "prompt": prompt, **params})
    p = run(["generate", "--model", str(model), "--prompts", "/dev/stdin", "--json", "--threads", "1",
             "--max-model-len", "256"], input=line + "\n")
    return json.loads(p.stdout.splitlines()[0])


def test_models_and_health(server):
    models = server.client.models.list()
    assert [m.id for m in models.data] == ["llama-tiny"]
    assert server.raw("GET", "/health", key=None) == (200, {"status": "ok"})


def test_completion_equals_generate(server, model):
    for params in ({"max_tokens": 12, "temperature": 0}, {"max_tokens": 10, "temperature": 0.8, "top_p": 0.9, "seed": 7}):
        r = server.client.completions.create(model="llama-tiny", prompt="The quick brown fox", **params)
        ref = generate(model, "The quick brown fox", **params)
        assert r.choices[0].text == ref["text"]
        assert r.choices[0].finish_reason == ref["finish_reason"]
        assert r.usage.completion_tokens == len(ref["token_ids"])
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.system_fingerprint.startswith("gannet-")


def test_streaming_adds_up_to_the_same_text(server):
    kw = dict(model="llama-tiny", prompt="Once upon a time", max_tokens=16, temperature=0)
    full = server.client.completions.create(**kw)
    chunks = list(server.client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == full.choices[0].finish_reason and all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_seeded_samples_reproduce_under_concurrent_load(server):
    kw = dict(model="llama-tiny", prompt="Numbers:", max_tokens=12, temperature=1.0, n=2, seed=123)
    alone = server.client.completions.create(**kw)
    assert [c.index for c in alone.choices] == [0, 1]
    results = [None] * 6

    def worker(i):
        extra = {} if i % 2 == 0 else {"prompt": "Something else", "seed": i}
        results[i] = server.client.completions.create(**{**kw, **extra})

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(0, 6, 2):
        assert [c.text for c in results[i].choices] == [c.text for c in alone.choices]


def test_stop_string_cuts_the_text(server):
    full = server.client.completions.create(model="llama-tiny", prompt="Hello", max_tokens=16, temperature=0).choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 2]
    assert stop
    r = server.client.completions.create(model="llama-tiny", prompt="Hello", max_tokens=16, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[:full.index(stop)]


def test_token_id_and_batched_prompts(server):
    ids = server.raw("POST", "/tokenize", {"prompt": "Hello world", "add_special_tokens": False})[1]["tokens"]
    assert server.raw("POST", "/detokenize", {"tokens": ids}) == (200, {"prompt": "Hello world"})
    by_text = server.client.completions.create(model="llama-tiny", prompt="Hello world", max_tokens=6, temperature=0)
    batch = server.client.completions.create(model="llama-tiny", prompt=["Hello world", "Hello world"], max_tokens=6,
                                             temperature=0, n=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert {c.text for c in batch.choices} == {by_text.choices[0].text}
    echoed = server.client.completions.create(model="llama-tiny", prompt="Hello world", max_tokens=6, temperature=0,
                                              echo=True)
    assert echoed.choices[0].text == "Hello world" + by_text.choices[0].text
    with_ids = server.client.completions.create(model="llama-tiny", prompt=ids, max_tokens=6, temperature=0)
    assert with_ids.usage.prompt_tokens == len(ids)


def test_errors_name_the_field(server):
    c = server.client
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    assert e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="llama-tiny", prompt="x", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="llama-tiny", prompt="x", max_tokens=2, temperature=-1)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="llama-tiny", prompt="x", max_tokens=2, extra_body={"frobnicate": 1})
    assert e.value.body["param"] == "frobnicate"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="llama-tiny", prompt="word " * 300, max_tokens=2)
    assert "context" in e.value.body["message"] or "max_model_len" in e.value.body["message"]
    assert e.value.body["param"] in (None, "prompt", "max_tokens"), e.value.body
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    # Fields the server does not honour are refused by name; 'user' changes nothing.
    for field, value in (("suffix", "x"), ("logit_bias", {"5": 1}), ("best_of", 2),
                         ("prompt_logprobs", 1)):
        status, body = server.raw("POST", "/v1/completions", {"model": "llama-tiny", "prompt": "x", field: value})
        assert status == 400 and body["error"]["param"] == field, (field, body)
    status, body = server.raw("POST", "/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}})
    assert status == 400 and body["error"]["param"] == "stream_options"
    plain = c.completions.create(model="llama-tiny", prompt="Hello", max_tokens=4, temperature=0)
    tagged = c.completions.create(model="llama-tiny", prompt="Hello", max_tokens=4, temperature=0, user="someone")
    assert tagged.choices[0].text == plain.choices[0].text
    status, body = server.raw("POST", "/v1/completions", data=b"{not json")
    assert status == 400 and "malformed JSON" in body["error"]["message"]
    status, body = server.raw("POST", "/v1/completions", {"model": "llama-tiny", "prompt": "x" * 9000})
    assert status == 413 and body["error"]["message"]
    # Nothing above disturbed the server.
    assert c.completions.create(model="llama-tiny", prompt="Hello", max_tokens=2, temperature=0).choices[0].text


# --- chat completions -------------------------------------------------------------------

CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Tell me a story"}]


def render_chat(messages):
    """The DeepSeek V3 template rendered as transformers' apply_chat_template renders it."""
    config = json.loads((ROOT / "assets" / "tokenizers" / "deepseek-v3" / "tokenizer_config.json").read_text())

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(config["chat_template"]).render(
        messages=messages, add_generation_prompt=True, bos_token="<｜begin▁of▁sentence｜>",
        eos_token="<｜end▁of▁sentence｜>")


def chat_ids(server, messages):
    status, body = server.raw("POST", "/tokenize", {"prompt": render_chat(messages), "add_special_tokens": False})
    assert status == 200, body
    return body["tokens"]


def sse_events(text):
    """The `data:` payloads of a server-sent event stream, in order."""
    return [e[len("data: "):] for e in text.split("\n\n") if e.startswith("data: ")]


def test_chat_equals_generate_on_the_rendered_template(server, model):
    template = json.loads((pathlib.Path(model) / "tokenizer_config.json").read_text())["chat_template"]
    assert template == json.loads(
        (ROOT / "assets" / "tokenizers" / "deepseek-v3" / "tokenizer_config.json").read_text())["chat_template"]
    ids = chat_ids(server, CHAT)
    assert ids[0] == 0  # the template writes BOS itself
    for params in ({"max_tokens": 12, "temperature": 0}, {"max_tokens": 10, "temperature": 0.8, "seed": 7}):
        r = server.client.chat.completions.create(model="llama-tiny", messages=CHAT, **params)
        ref = generate(model, ids, **params)
        assert r.usage.prompt_tokens == len(ids)
        assert r.choices[0].message.role == "assistant"
        assert r.choices[0].message.content == ref["text"]
        assert r.choices[0].finish_reason == ref["finish_reason"]
        assert r.usage.completion_tokens == len(ref["token_ids"])
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
        assert r.system_fingerprint.startswith("gannet-")


def test_chat_streaming_adds_up_to_the_same_message(server):
    kw = dict(model="llama-tiny", messages=CHAT, max_tokens=16, temperature=0)
    full = server.client.chat.completions.create(**kw)
    chunks = list(server.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == full.choices[0].finish_reason and all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    # On the wire: the usage chunk, then [DONE] last.
    status, body = server.raw("POST", "/v1/chat/completions",
                              {**kw, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == full.usage.completion_tokens
    assert all(json.loads(e)["choices"] for e in events[:-2])
    # Without include_usage there is no usage chunk.
    status, body = server.raw("POST", "/v1/chat/completions", {**kw, "stream": True})
    events = sse_events(body)
    assert events[-1] == "[DONE]" and all(json.loads(e)["choices"] for e in events[:-1])


def test_chat_n2_seeded_reproduces(server):
    kw = dict(model="llama-tiny", messages=CHAT, max_tokens=8, temperature=1.0, n=2, seed=123)
    first = server.client.chat.completions.create(**kw)
    second = server.client.chat.completions.create(**kw)
    assert [c.index for c in first.choices] == [0, 1]
    assert [c.message.content for c in first.choices] == [c.message.content for c in second.choices]
    assert first.usage.completion_tokens <= 2 * 8 and first.usage.prompt_tokens == len(chat_ids(server, CHAT))
    # Streamed, each choice adds up to its message.
    streamed = {0: "", 1: ""}
    for c in server.client.chat.completions.create(stream=True, **kw):
        for ch in c.choices:
            streamed[ch.index] += ch.delta.content or ""
    assert [streamed[0], streamed[1]] == [c.message.content for c in first.choices]


def test_chat_text_parts_are_joined_by_newlines(server):
    kw = dict(model="llama-tiny", max_tokens=6, temperature=0)
    parts = server.client.chat.completions.create(
        messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], **kw)
    joined = server.client.chat.completions.create(messages=[{"role": "user", "content": "a\nb"}], **kw)
    assert parts.choices[0].message.content == joined.choices[0].message.content
    assert parts.usage.prompt_tokens == joined.usage.prompt_tokens == len(
        chat_ids(server, [{"role": "user", "content": "a\nb"}]))
    status, body = server.raw("POST", "/v1/chat/completions", {
        "model": "llama-tiny", "max_tokens": 2,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                  {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]})
    assert status == 400 and body["error"]["param"] == "messages", body


def test_chat_errors_name_the_field(server):
    ok = {"model": "llama-tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    cases = (
        ({k: v for k, v in ok.items() if k != "messages"}, "messages"),
        ({**ok, "messages": []}, "messages"),
        ({**ok, "messages": [{"role": "robot", "content": "Hi"}]}, "messages"),
        ({**ok, "top_logprobs": 2}, "top_logprobs"),
        ({**ok, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({**ok, "max_tokens": 3, "max_completion_tokens": 4}, ("max_tokens", "max_completion_tokens")),
        ({**ok, "tools": [{"type": "retrieval"}]}, "tools"),
        ({**ok, "prompt": "Hi"}, "prompt"),
        ({**ok, "frobnicate": 1}, "frobnicate"),
        ({**ok, "temperature": -1}, "temperature"),
        ({**ok, "stream_options": {"include_usage": True}}, "stream_options"),
    )
    for body, param in cases:
        status, got = server.raw("POST", "/v1/chat/completions", body)
        params = param if isinstance(param, tuple) else (param,)
        assert status == 400 and got["error"]["param"] in params, (body, got)
        assert got["error"]["type"] == "invalid_request_error" and got["error"]["message"]
    # Beyond the context (refused by the engine): the error names no request id as its field.
    status, got = server.raw("POST", "/v1/chat/completions", {**ok, "max_tokens": 1000})
    assert status == 400 and "context" in got["error"]["message"], got
    assert got["error"]["param"] in (None, "messages", "max_tokens"), got
    # Streamed, it is refused before the stream starts (a 400, not an error event in a 200).
    status, got = server.raw("POST", "/v1/chat/completions", {**ok, "max_tokens": 1000, "stream": True})
    assert status == 400 and got["error"]["param"] == "max_tokens", got
    status, got = server.raw("POST", "/v1/chat/completions", {**ok, "model": "no-such-model"})
    assert status == 404 and got["error"]["param"] == "model"
    status, got = server.raw("POST", "/v1/chat/completions", ok, key="wrong")
    assert status == 401
    status, got = server.raw("POST", "/v1/chat/completions", ok, key=None)
    assert status == 401
    # The same value under both names, an empty tool list and tool_choice "none" are fine.
    for extra in ({"max_completion_tokens": 2}, {"tools": [], "tool_choice": "none"}):
        status, got = server.raw("POST", "/v1/chat/completions", {**ok, **extra})
        assert status == 200 and got["usage"]["completion_tokens"] <= 2, (extra, got)
    # Nothing above disturbed the server.
    r = server.client.chat.completions.create(model="llama-tiny", messages=ok["messages"], max_tokens=2, temperature=0)
    assert r.choices[0].message.content


def test_chat_default_max_tokens_fills_the_context(server):
    # The fixture's --max-model-len is 256; ignore_eos keeps the output to the full length.
    r = server.client.chat.completions.create(model="llama-tiny", messages=[{"role": "user", "content": "Go on"}],
                                              temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 256 - r.usage.prompt_tokens


# --- logprobs ---------------------------------------------------------------------------

def test_completion_logprobs_equal_generate(server, model):
    kw = dict(model="llama-tiny", prompt="The quick brown fox", max_tokens=8, temperature=0, logprobs=2)
    r = server.client.completions.create(**kw)
    lp = r.choices[0].logprobs
    count = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == count
    assert all(isinstance(d, dict) and 1 <= len(d) <= 2 for d in lp.top_logprobs)
    ref = generate(model, "The quick brown fox", max_tokens=8, temperature=0, logprobs=2)
    assert len(ref["logprobs"]) == count
    assert lp.token_logprobs == [p["logprob"] for p in ref["logprobs"]]
    for tok, value, top, p in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, ref["logprobs"]):
        assert top[tok] == value  # greedy: the chosen token is the most likely
        assert set(top.values()) <= {v for _, v in p["top"]}
    text = r.choices[0].text
    assert "".join(lp.tokens) == text
    # text_offset: where each token starts in the text.
    for tok, off in zip(lp.tokens, lp.text_offset):
        assert text[off:off + len(tok)] == tok, (lp.tokens, lp.text_offset, text)
    # Streamed, the per-chunk lists add up to the same.
    tokens, token_lps, tops, offsets = [], [], [], []
    for c in server.client.completions.create(stream=True, **kw):
        if c.choices and c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            token_lps += c.choices[0].logprobs.token_logprobs
            tops += c.choices[0].logprobs.top_logprobs
            offsets += c.choices[0].logprobs.text_offset
    assert tokens == lp.tokens and token_lps == lp.token_logprobs and tops == lp.top_logprobs
    assert offsets == lp.text_offset
    # echo cannot go with logprobs.
    status, body = server.raw("POST", "/v1/completions", {"model": "llama-tiny", "prompt": "x", "max_tokens": 2,
                                                          "logprobs": 1, "echo": True})
    assert status == 400 and body["error"]["param"] == "echo", body


def test_chat_logprobs(server, model):
    r = server.client.chat.completions.create(model="llama-tiny", messages=CHAT, max_tokens=8, temperature=0,
                                              logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert e.bytes == list(e.token.encode())
        assert len(e.top_logprobs) == 3
        assert e.logprob == e.top_logprobs[0].logprob  # greedy: the chosen token is the most likely
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
        assert all(t.bytes == list(t.token.encode()) for t in e.top_logprobs)
    assert "".join(e.token for e in content) == r.choices[0].message.content
    ref = generate(model, chat_ids(server, CHAT), max_tokens=8, temperature=0, logprobs=3)
    assert [e.logprob for e in content] == [p["logprob"] for p in ref["logprobs"]]
    assert [[t.logprob for t in e.top_logprobs] for e in content] == [[v for _, v in p["top"]] for p in ref["logprobs"]]
    # logprobs without top_logprobs: the chosen tokens only.
    plain = server.client.chat.completions.create(model="llama-tiny", messages=CHAT, max_tokens=8, temperature=0,
                                                  logprobs=True)
    assert [e.logprob for e in plain.choices[0].logprobs.content] == [e.logprob for e in content]
    assert all(e.top_logprobs == [] for e in plain.choices[0].logprobs.content)
    # Streamed, the per-chunk entries add up to the same.
    streamed = []
    for c in server.client.chat.completions.create(model="llama-tiny", messages=CHAT, max_tokens=8, temperature=0,
                                                   logprobs=True, top_logprobs=3, stream=True):
        if c.choices and c.choices[0].logprobs:
            streamed += c.choices[0].logprobs.content
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]


# --- metrics ----------------------------------------------------------------------------

def metric_values(server):
    """/metrics as {name or name{labels}: value}."""
    status, text = server.raw("GET", "/metrics")
    assert status == 200
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_metrics(server):
    before = metric_values(server)
    requests = 3
    for i in range(requests):
        server.client.completions.create(model="llama-tiny", prompt=f"Count {i}", max_tokens=4, temperature=0)
    m = metric_values(server)
    for name in ("gannet_time_to_first_token_seconds", "gannet_inter_token_latency_seconds"):
        buckets = [(k, v) for k, v in m.items() if k.startswith(name + "_bucket{")]
        assert buckets and buckets[-1][0] == name + '_bucket{le="+Inf"}'
        bounds = [float(k.split('le="')[1].rstrip('"}')) for k, _ in buckets[:-1]]
        assert bounds == sorted(bounds)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (name, counts)  # cumulative
        assert counts[-1] == m[name + "_count"] and m[name + "_sum"] >= 0
    assert m["gannet_time_to_first_token_seconds_count"] >= requests
    assert m["gannet_time_to_first_token_seconds_count"] - before["gannet_time_to_first_token_seconds_count"] >= requests
    assert m["gannet_inter_token_latency_seconds_count"] > before["gannet_inter_token_latency_seconds_count"] >= 0
    assert m["gannet_kv_blocks_total"] > 0 and m["gannet_kv_blocks_used"] >= 0
    assert m["gannet_kv_blocks_used"] + m["gannet_kv_blocks_free"] == m["gannet_kv_blocks_total"]
    assert m["gannet_requests_waiting"] >= 0 and m["gannet_preemptions_total"] >= 0
    assert m["gannet_requests_total"] - before["gannet_requests_total"] >= requests


def test_prefix_cache_hit_is_reported_and_exact(server, model):
    # 150 token ids: two full 64-token blocks. The second request takes them from the
    # cache, says so in usage and /metrics, and returns what a full computation does.
    ids = [1000 + (i * 7919) % 20000 for i in range(150)]
    before = metric_values(server)
    kw = dict(model="llama-tiny", prompt=ids, max_tokens=8, temperature=0, logprobs=2)
    first = server.client.completions.create(**kw)
    second = server.client.completions.create(**kw)
    ref = generate(model, ids, max_tokens=8, temperature=0)
    assert first.choices[0].text == second.choices[0].text == ref["text"]
    assert first.choices[0].logprobs.token_logprobs == second.choices[0].logprobs.token_logprobs
    assert second.usage.prompt_tokens_details.cached_tokens == 128
    assert second.usage.prompt_tokens == 150
    m = metric_values(server)
    assert m["gannet_prefix_cache_hits_total"] - before["gannet_prefix_cache_hits_total"] >= 128
    assert m["gannet_prefix_cache_queries_total"] - before["gannet_prefix_cache_queries_total"] >= 300
    assert m["gannet_prefix_cache_blocks"] >= 2


def test_vanished_streaming_client_is_aborted(model):
    # The model's whole context (a request that runs for seconds), a name of its own, one
    # HTTP thread per connection the test opens.
    server = Server(model, "--served-model-name", "custom", "--http-threads", "4")
    try:
        assert [m.id for m in server.client.models.list().data] == ["custom"]
        vanish(server, "/v1/completions", {"model": "custom", "prompt": "Go"})
        vanish(server, "/v1/chat/completions", {"model": "custom", "messages": [{"role": "user", "content": "Go"}]})
    finally:
        server.stop()


def test_bad_serve_flags_are_refused_by_name(model):
    for flags, named in ((["--port", "70000"], "--port"), (["--http-threads", "0"], "--http-threads"),
                         (["--api-key", ""], "--api-key"), (["--max-body-bytes", "10"], "--max-body-bytes"),
                         (["--frobnicate", "1"], "frobnicate"), (["--max-num-seqs", "0"], "--max-num-seqs")):
        p = run(["serve", "--model", str(model), *flags], check=False)
        assert p.returncode == 2 and named in p.stderr, (flags, p.stderr)


def vanish(server, path, body):
    """Streams `body` (a long request) to `path`, closes the socket after the first event and
    waits for the server to count the abort and free the request's KV blocks."""
    host, port = server.url.split("//")[1].split(":")
    before = metric_values(server)["gannet_requests_aborted_total"]
    body = json.dumps({**body, "max_tokens": 4000, "temperature": 0, "stream": True, "ignore_eos": True})
    s = socket.create_connection((host, int(port)))
    s.sendall(("POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY +
               "\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)) + "\r\n\r\n" + body).encode())
    s.settimeout(60)
    got = b""
    while b"data:" not in got:
        part = s.recv(4096)
        assert part, "the server closed the stream before any event"
        got += part
    s.close()
    deadline = time.time() + 60
    while time.time() < deadline:
        values = metric_values(server)
        if (values["gannet_requests_aborted_total"] >= before + 1 and values["gannet_requests_running"] == 0
                and values["gannet_kv_blocks_used"] == 0):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the request of a closed connection to {path} was not aborted:\n" +
                             server.raw("GET", "/metrics")[1])


def test_chat_template_flag_and_template_fields_are_honoured(model, tmp_path):
    """--chat-template replaces the checkpoint's template; add_generation_prompt and
    chat_template_kwargs reach it; an empty, missing or broken template file is refused by name."""
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                    "{% if greeting is defined %}{{ greeting }}{% endif %}{% if add_generation_prompt %}[assistant]{% endif %}")
    server = Server(model, "--chat-template", str(tmpl))
    try:
        msgs = [{"role": "user", "content": "Hi"}]

        def prompt_ids(text):
            status, got = server.raw("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
            assert status == 200, got
            return got["tokens"]

        def chat(**extra):
            status, got = server.raw("POST", "/v1/chat/completions",
                                     {"messages": msgs, "max_tokens": 2, "temperature": 0, **extra})
            assert status == 200, got
            return got["usage"]["prompt_tokens"]

        bos = "<｜begin▁of▁sentence｜>"
        assert chat() == len(prompt_ids(bos + "[user]Hi[assistant]"))
        assert chat(add_generation_prompt=False) == len(prompt_ids(bos + "[user]Hi"))
        assert chat(chat_template_kwargs={"greeting": " hello there"}) == len(prompt_ids(bos + "[user]Hi hello there[assistant]"))
    finally:
        server.stop()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}")
    for flags in (["--chat-template", ""], ["--chat-template", str(tmp_path / "missing.jinja")],
                  ["--chat-template", str(bad)]):
        p = run(["serve", "--model", str(model), "--port", "0", *flags], check=False)
        assert p.returncode != 0 and "--chat-template" in p.stderr, (flags, p.stderr)
