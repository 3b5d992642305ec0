"""`gannet serve` checked with the official `openai` client (and raw HTTP where a client
cannot send what is tested): completions equal `gannet generate` for the same request,
streaming adds up to the same text, seeds reproduce under concurrent load, stop strings,
token-id and batched prompts, tokenize/detokenize, OpenAI-shaped errors naming the field,
the API key, oversize bodies, and a vanished streaming client's request is aborted."""
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import gannet_bin, run

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
    """`gannet generate` on one prompts-file line: the reference for the server's output."""
    line = json.dumps({"prompt": prompt, **params})
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


def test_vanished_streaming_client_is_aborted(model):
    # The model's whole context (a request that runs for seconds), a name of its own, one
    # HTTP thread per connection the test opens.
    server = Server(model, "--served-model-name", "custom", "--http-threads", "4")
    try:
        assert [m.id for m in server.client.models.list().data] == ["custom"]
        vanish(server, "custom")
    finally:
        server.stop()


def test_bad_serve_flags_are_refused_by_name(model):
    for flags, named in ((["--port", "70000"], "--port"), (["--http-threads", "0"], "--http-threads"),
                         (["--api-key", ""], "--api-key"), (["--max-body-bytes", "10"], "--max-body-bytes"),
                         (["--frobnicate", "1"], "frobnicate"), (["--max-num-seqs", "0"], "--max-num-seqs")):
        p = run(["serve", "--model", str(model), *flags], check=False)
        assert p.returncode == 2 and named in p.stderr, (flags, p.stderr)


def vanish(server, name):
    host, port = server.url.split("//")[1].split(":")
    body = json.dumps({"model": name, "prompt": "Go", "max_tokens": 4000, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    s = socket.create_connection((host, int(port)))
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY +
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
        metrics = server.raw("GET", "/metrics")[1]
        values = dict(l.split(" ") for l in metrics.splitlines() if l and not l.startswith("#"))
        if int(values["gannet_requests_aborted_total"]) >= 1 and int(values["gannet_requests_running"]) == 0:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the request of a closed connection was not aborted:\n" + metrics)
