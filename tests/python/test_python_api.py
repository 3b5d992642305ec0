"""The Python package (gannet.LLM, SamplingParams): the same results as `gannet generate`,
vLLM's attribute names, errors as ValueError naming the problem, Ctrl-C, the GIL."""
import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest

from conftest import ROOT, run

PYTHONPATH = os.environ.get("GANNET_PYTHONPATH", str(ROOT / "build" / "python"))


@pytest.fixture(scope="session")
def gannet_py():
    sys.path.insert(0, PYTHONPATH)
    import gannet  # a missing or broken extension module fails every test here

    assert pathlib.Path(gannet.__file__).parent == pathlib.Path(PYTHONPATH) / "gannet"
    return gannet


@pytest.fixture(scope="session")
def llm(gannet_py, tiny_models):
    return gannet_py.LLM(model=str(tiny_models["qwen3"]), quiet=True)


def cli_generate(model, tmp_path, lines, *extra):
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps(l) + "\n" for l in lines))
    p = run(["generate", "--model", str(model), "--prompts", str(f), "--json", *extra])
    return [json.loads(l) for l in p.stdout.splitlines()]


def env_with_package():
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHONPATH + os.pathsep + env.get("PYTHONPATH", "")
    return env


REQUESTS = [
    {"prompt": "The quick brown fox", "max_tokens": 9, "temperature": 0},
    {"prompt": "sampled with a seed " + "and more words " * 5, "max_tokens": 12, "temperature": 0.9, "top_p": 0.9,
     "seed": 17, "logprobs": 3},
    {"prompt_token_ids": [5, 77, 901, 4242, 13], "max_tokens": 7, "temperature": 1.0, "top_k": 20, "seed": 3},
    {"prompt": "several samples", "n": 3, "max_tokens": 6, "temperature": 1.0, "seed": 99, "min_p": 0.05},
    {"prompt": "penalties", "max_tokens": 10, "temperature": 0.7, "seed": 5, "repetition_penalty": 1.3,
     "presence_penalty": 0.5, "frequency_penalty": 0.4, "min_tokens": 4},
    {"prompt": "prompt logprobs here", "max_tokens": 3, "temperature": 0, "prompt_logprobs": 2},
]


def params_of(gannet, line):
    kw = {k: v for k, v in line.items() if k not in ("prompt", "prompt_token_ids")}
    return gannet.SamplingParams(**kw)


def prompt_of(line):
    return line["prompt"] if "prompt" in line else {"prompt_token_ids": line["prompt_token_ids"]}


def lp_dict(pos):
    """The CLI's logprobs entry {"id", "logprob", "top": [[id, lp], ...]} as gannet's dict."""
    d = {pos["id"]: pos["logprob"]}
    for t, lp in pos["top"]:
        d.setdefault(t, lp)
    return d


def test_same_tokens_as_gannet_generate(gannet_py, llm, tiny_models, tmp_path):
    cli = cli_generate(tiny_models["qwen3"], tmp_path, REQUESTS)
    outs = llm.generate([prompt_of(l) for l in REQUESTS], [params_of(gannet_py, l) for l in REQUESTS],
                        use_tqdm=False)
    assert len(outs) == len(REQUESTS)
    for line, c, o in zip(REQUESTS, cli, outs):
        assert o.finished
        samples = c.get("outputs", [c])
        assert len(o.outputs) == len(samples) == line.get("n", 1)
        for s, co in zip(samples, o.outputs):
            assert co.token_ids == s["token_ids"]
            assert co.text == s["text"]
            assert co.finish_reason == s["finish_reason"]
        assert [co.index for co in o.outputs] == list(range(len(o.outputs)))
        if "seed" in line:
            assert o.seed == line["seed"] == c["seed"]
        if "logprobs" in line:
            assert co.cumulative_logprob == c["cumulative_logprob"]
            assert len(o.outputs[0].logprobs) == len(o.outputs[0].token_ids)
            for pos, tok, cpos in zip(o.outputs[0].logprobs, o.outputs[0].token_ids, c["logprobs"]):
                assert next(iter(pos)) == tok  # the chosen token first
                assert {t: lp.logprob for t, lp in pos.items()} == lp_dict(cpos)
                assert sorted(lp.rank for t, lp in pos.items() if lp.rank is not None) == [1, 2, 3]
                assert all(isinstance(lp.decoded_token, str) for lp in pos.values())
        else:
            assert o.outputs[0].logprobs is None
        if "prompt_logprobs" in line:
            assert o.prompt_logprobs[0] is None and c["prompt_logprobs"][0] is None
            assert len(o.prompt_logprobs) == len(o.prompt_token_ids)
            for pos, cpos in zip(o.prompt_logprobs[1:], c["prompt_logprobs"][1:]):
                assert {t: lp.logprob for t, lp in pos.items()} == lp_dict(cpos)
        else:
            assert o.prompt_logprobs is None


def test_prompt_forms_and_input_order(gannet_py, llm):
    greedy = gannet_py.SamplingParams(temperature=0, max_tokens=5)
    tok = llm.get_tokenizer()
    texts = ["a much longer prompt " * 12, "short", "medium length prompt text"]
    by_text = llm.generate(texts, greedy, use_tqdm=False)
    # Outputs follow the input order whatever finishes first, with vLLM's attributes.
    assert [o.prompt for o in by_text] == texts
    assert [o.request_id for o in by_text] == sorted((o.request_id for o in by_text), key=int)
    ids = [tok.encode(t) for t in texts]
    assert [o.prompt_token_ids for o in by_text] == ids
    # The same prompts as token ids, as dicts, mixed, one at a time, and one bare string.
    as_ids = llm.generate(ids, greedy, use_tqdm=False)
    as_dicts = llm.generate([{"prompt": texts[0]}, {"prompt_token_ids": ids[1]}, texts[2]], greedy, use_tqdm=False)
    one = llm.generate(ids[1], greedy, use_tqdm=False)
    bare = llm.generate(texts[2], greedy, use_tqdm=False)
    old_kwarg = llm.generate(prompt_token_ids=ids, sampling_params=greedy, use_tqdm=False)
    want = [o.outputs[0].token_ids for o in by_text]
    assert [o.outputs[0].token_ids for o in as_ids] == want
    assert [o.outputs[0].token_ids for o in as_dicts] == want
    assert [o.outputs[0].token_ids for o in old_kwarg] == want
    assert len(one) == 1 and one[0].outputs[0].token_ids == want[1] and one[0].prompt is None
    assert len(bare) == 1 and bare[0].outputs[0].token_ids == want[2]
    assert llm.generate([], greedy) == []
    m = by_text[0].metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
    assert m.time_in_queue == pytest.approx(m.first_scheduled_time - m.arrival_time)


def test_stop_strings_and_stop_reason(gannet_py, llm):
    free = llm.generate(["stop here"], gannet_py.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
                        use_tqdm=False)[0].outputs[0]
    assert free.finish_reason == "length" and free.stop_reason is None
    stop = free.text[3:5]
    assert stop.strip()
    cut = llm.generate(["stop here"], gannet_py.SamplingParams(temperature=0, max_tokens=12, stop=stop),
                       use_tqdm=False)[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == free.text[:free.text.index(stop)]
    tid = free.token_ids[2]
    by_id = llm.generate(["stop here"], gannet_py.SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[tid]),
                         use_tqdm=False)[0].outputs[0]
    assert by_id.finish_reason == "stop" and by_id.stop_reason == tid
    assert by_id.token_ids == free.token_ids[:free.token_ids.index(tid) + 1]


def header_fields():
    """(name, default) of every field of include/gannet/sampling_params.h's SamplingParams."""
    text = (ROOT / "include" / "gannet" / "sampling_params.h").read_text()
    body = text[text.index("struct SamplingParams {"):]
    body = body[:body.index("\n};")]
    fields = {}
    for line in body.splitlines():
        m = re.match(r"^\s+([\w:<>, ]+?)\s+(\w+)(?:\s*=\s*([^;]+))?;", line)
        if m and not line.strip().startswith("static"):
            fields[m.group(2)] = m.group(3)
    return fields


def test_sampling_params_fields_and_defaults_are_the_engines(gannet_py):
    fields = header_fields()
    assert len(fields) >= 20
    sp = gannet_py.SamplingParams()
    literal = {"true": True, "false": False}
    for name, default in fields.items():
        attr = "structured_outputs" if name == "structured" else name
        assert hasattr(sp, attr), f"SamplingParams has no {attr} (the C++ struct's {name})"
        value = getattr(sp, attr)
        if default is None:  # std::optional, vectors, the structured output: empty
            assert value in (None, []), (name, value)
        else:
            assert value == literal.get(default, None if default in literal else float(default)), (name, default)
    assert gannet_py.SamplingParams(max_tokens=5, stop="x").stop == ["x"]


@pytest.mark.parametrize("kwargs, flag, message", [
    ({"top_p": 0}, ["--top-p", "0"], "top_p must be in (0, 1], got 0"),
    ({"temperature": -1}, ["--temperature", "-1"], "temperature must be finite and >= 0, got -1"),
    ({"max_tokens": 0}, ["--max-tokens", "0"], "max_tokens must be >= 1, got 0"),
    ({"min_p": 2}, ["--min-p", "2"], "min_p must be in [0, 1], got 2"),
    ({"top_k": -2}, ["--top-k", "-2"], "top_k must be -1, 0 (off) or positive, got -2"),
])
def test_validation_errors_are_the_engines(gannet_py, tiny_models, kwargs, flag, message):
    with pytest.raises(ValueError) as e:
        gannet_py.SamplingParams(**kwargs)
    assert str(e.value) == message
    p = run(["generate", "--model", str(tiny_models["qwen3"]), "--prompt", "x", *flag], check=False)
    assert p.returncode != 0 and message in p.stderr


def test_sampling_params_refusals(gannet_py):
    SP = gannet_py.SamplingParams
    for kwargs, words in [
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"n": 1.5}, "n must be an integer"),
        ({"ignore_eos": 3}, "ignore_eos must be True or False"),
        ({"stop": [1]}, "stop[0] must be a string"),
        ({"stop_token_ids": [-1]}, "stop_token_ids[0] must be >= 0"),
        ({"logprobs": 21}, "logprobs must be in [0, 20]"),
        ({"seed": -1}, "seed must be in [0, 2**64)"),
        ({"max_tokens": None}, "max_tokens=None"),
        ({"best_of": 3}, "best_of is not supported"),
        ({"logits_processors": [print]}, "logits_processors is not supported"),
        ({"min_tokens": 9, "max_tokens": 4}, "min_tokens must be <= max_tokens"),
        ({"ignore_eos": True, "structured_outputs": gannet_py.StructuredOutputsParams(regex="a+")},
         "ignore_eos cannot be combined with structured output"),
    ]:
        with pytest.raises(ValueError) as e:
            SP(**kwargs)
        assert words in str(e.value), (kwargs, str(e.value))
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        SP(temprature=0.5)
    with pytest.raises(ValueError, match="exactly one of"):
        gannet_py.StructuredOutputsParams(json={"type": "object"}, regex="a")
    # A field changed after construction is checked again when it is used.
    sp = SP(max_tokens=4)
    sp.top_p = 3.0
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        gannet_py.LLM.__new__(gannet_py.LLM)._run([("x", None)], [sp], False)
    assert SP(best_of=1).n == 1 and SP(detokenize=True).n == 1


def test_engine_argument_errors(gannet_py, tiny_models, tmp_path, llm):
    model = str(tiny_models["qwen3"])
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1"):
        gannet_py.LLM(model=model, max_num_seqs=0)
    with pytest.raises(ValueError, match="kv_cache_dtype must be auto, f32 or bf16"):
        gannet_py.LLM(model=model, kv_cache_dtype="int4")
    with pytest.raises(ValueError, match="weight_memory must be auto, map or copy"):
        gannet_py.LLM(model=model, weight_memory="mmap")
    with pytest.raises(ValueError, match="gpu_memory_utilization=0.9 is not supported: gannet runs on the CPU"):
        gannet_py.LLM(model=model, gpu_memory_utilization=0.9)
    with pytest.raises(ValueError, match="tensor_parallel_size=2 is not supported"):
        gannet_py.LLM(model=model, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="dtype='float16' is not supported"):
        gannet_py.LLM(model=model, dtype="float16")
    with pytest.raises(ValueError, match="speculative_config\\['method'\\] must be 'ngram' or 'dspark'"):
        gannet_py.LLM(model=model, speculative_config={"method": "eagle"})
    with pytest.raises(ValueError, match="memory size 'lots'"):
        gannet_py.LLM(model=model, kv_cache_memory="lots")
    with pytest.raises(ValueError, match="threads must be an integer"):
        gannet_py.LLM(model=model, threads="2")
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_num_seq'"):
        gannet_py.LLM(model=model, max_num_seq=4)
    with pytest.raises(ValueError, match="config.json"):
        gannet_py.LLM(model=str(tmp_path / "no-such-model"))
    # Accepted vLLM spellings.
    ok = gannet_py.LLM(model=tiny_models["qwen3"], quiet=True, dtype="auto", tensor_parallel_size=1, enforce_eager=True,
                       kv_cache_memory="64MiB", speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                                                   "prompt_lookup_max": 3})
    sp = gannet_py.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    out = ok.generate(["speculative path " * 4], sp, use_tqdm=False)
    # Speculation changes the speed, never the tokens; the metrics say what it did.
    assert out[0].outputs[0].token_ids == llm.generate(["speculative path " * 4], sp, use_tqdm=False)[0].outputs[0].token_ids
    assert out[0].metrics.spec_steps > 0 and len(out[0].metrics.spec_drafted_at) == 3


def test_bad_prompts_leave_nothing_behind(gannet_py, llm):
    greedy = gannet_py.SamplingParams(temperature=0, max_tokens=6)
    want = llm.generate(["fine", "also fine"], greedy, use_tqdm=False)
    for prompts, words in [
        (["fine", ""], "prompt 1: the prompt is empty"),
        (["fine", [1, 2, 10**6]], "prompt 1"),
        (["fine", [1, "x"]], "prompt 1: token 1 must be an integer id"),
        ([{"text": "x"}], "unsupported key(s) ['text']"),
        ([3.5], "prompt 0 must be a string"),
        (42, "prompts must be a string"),
        (["fine", "x" * 100000], "prompt 1"),
    ]:
        with pytest.raises(ValueError) as e:
            llm.generate(prompts, greedy, use_tqdm=False)
        assert words in str(e.value), (prompts if len(str(prompts)) < 80 else "...", str(e.value))
    with pytest.raises(ValueError, match="3 SamplingParams for 2 prompts"):
        llm.generate(["a", "b"], [greedy] * 3)
    # Nothing of the refused calls stayed queued: the same results as before.
    again = llm.generate(["fine", "also fine"], greedy, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in want]


def test_progress_bar(gannet_py, llm, capfd):
    seen = []

    class Bar:
        def __init__(self, total, desc):
            seen.append(("total", total, desc))

        def set_postfix_str(self, text, refresh=False):
            seen.append(("postfix", text))

        def update(self, k=1):
            seen.append(("update", k))

        def close(self):
            seen.append(("close",))

    llm.generate(["one", "two", "three"], gannet_py.SamplingParams(temperature=0, max_tokens=3), use_tqdm=Bar)
    assert seen[0] == ("total", 3, "Processed prompts")
    assert [s for s in seen if s[0] == "update"] == [("update", 1)] * 3
    assert seen[-1] == ("close",)
    assert any(s[0] == "postfix" and "output:" in s[1] for s in seen)
    capfd.readouterr()
    llm.generate(["one", "two"], gannet_py.SamplingParams(temperature=0, max_tokens=3))
    assert "Processed prompts" in capfd.readouterr().err
    llm.generate(["one", "two"], gannet_py.SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert "Processed prompts" not in capfd.readouterr().err


def test_llm_seed_makes_unseeded_requests_reproducible(gannet_py, tiny_models):
    model = str(tiny_models["qwen3"])
    sampled = gannet_py.SamplingParams(temperature=1.0, max_tokens=8)
    runs = []
    for _ in range(2):
        llm = gannet_py.LLM(model=model, quiet=True, seed=1234)
        runs.append([(o.seed, o.outputs[0].token_ids) for o in llm.generate(["x", "y"], sampled, use_tqdm=False)])
    assert runs[0] == runs[1]
    assert runs[0][0][0] != runs[0][1][0]  # each request its own seed
    # The reported seed replays the request exactly.
    llm = gannet_py.LLM(model=model, quiet=True)
    seed, ids = runs[0][1]
    replay = llm.generate(["y"], gannet_py.SamplingParams(temperature=1.0, max_tokens=8, seed=seed), use_tqdm=False)
    assert replay[0].outputs[0].token_ids == ids


def test_chat_uses_the_checkpoints_template(gannet_py, llm, tiny_models):
    import jinja2  # requirements-test.txt: an independent renderer of the same template
    config = json.loads((tiny_models["qwen3"] / "tokenizer_config.json").read_text())
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    template = jinja2.Environment().from_string(config["chat_template"])

    def special(name):
        v = config.get(name)
        return v["content"] if isinstance(v, dict) else v

    want_text = template.render(messages=conv, add_generation_prompt=True,
                                **{k: special(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")})
    greedy = gannet_py.SamplingParams(temperature=0, max_tokens=5)
    out = llm.chat(conv, greedy, use_tqdm=False)
    assert len(out) == 1 and out[0].prompt == want_text
    tok = llm.get_tokenizer()
    assert out[0].prompt_token_ids == tok.encode(want_text, add_special_tokens=False)
    plain = llm.generate({"prompt_token_ids": out[0].prompt_token_ids}, greedy, use_tqdm=False)
    assert out[0].outputs[0].token_ids == plain[0].outputs[0].token_ids
    both = llm.chat([conv, [{"role": "user", "content": "Second"}]], greedy, use_tqdm=False)
    assert len(both) == 2 and both[0].outputs[0].token_ids == out[0].outputs[0].token_ids
    own = llm.chat(conv, greedy, use_tqdm=False, chat_template="{% for m in messages %}<{{ m.content }}>{% endfor %}")
    assert own[0].prompt == "<Be brief.><Hi there>"
    with pytest.raises(ValueError, match="conversation 0"):
        llm.chat(conv, greedy, chat_template="{{ raise_exception('no system messages') }}")
    with pytest.raises(ValueError, match="messages must be a non-empty list"):
        llm.chat([], greedy)


def test_structured_output(gannet_py, llm):
    S = gannet_py.StructuredOutputsParams
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    sp = gannet_py.SamplingParams(temperature=1.0, seed=4, max_tokens=40, structured_outputs=S(json=schema))
    out = llm.generate(["json please"], sp, use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop"
    value = json.loads(out.text)
    assert set(value) == {"ok"} and isinstance(value["ok"], bool)
    pick = gannet_py.SamplingParams(temperature=1.0, seed=2, max_tokens=10,
                                    guided_decoding=S(choice=["yes.", "no (never)", "a|b"]))
    for o in llm.generate(["pick"] * 4, [pick.clone() for _ in range(4)], use_tqdm=False):
        assert o.outputs[0].text in ("yes.", "no (never)", "a|b")
    rx = gannet_py.SamplingParams(temperature=1.0, seed=8, max_tokens=12, structured_outputs=S(regex="[0-9]{3}-x"))
    assert re.fullmatch("[0-9]{3}-x", llm.generate(["digits"], rx, use_tqdm=False)[0].outputs[0].text)


def test_two_engines_in_threads_run_concurrently_and_exactly(gannet_py, tiny_models, llm):
    """Two LLMs generate at once from two Python threads (each step runs without the GIL:
    the engine counts the steps it ran so); each gets what it gets alone."""
    prompts = [f"thread prompt {i} " * (1 + i % 3) for i in range(6)]
    sp = gannet_py.SamplingParams(temperature=0.8, seed=11, max_tokens=16)
    want = [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
    other = gannet_py.LLM(model=str(tiny_models["qwen3"]), quiet=True, threads=1)
    results = {}

    def work(name, engine):
        results[name] = [o.outputs[0].token_ids for o in engine.generate(prompts, sp, use_tqdm=False)]

    before = llm._engine.steps_without_gil
    threads = [threading.Thread(target=work, args=("a", llm)), threading.Thread(target=work, args=("b", other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"] == want and results["b"] == want
    assert llm._engine.steps_without_gil > before
    assert llm._engine.steps_without_gil == llm._engine.step_calls


def test_ctrl_c_aborts_cleanly(gannet_py, tiny_models, llm):
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "python" / "scripts" / "interrupt_generate.py"),
                        str(tiny_models["qwen3"])], capture_output=True, text=True, timeout=300, env=env_with_package())
    assert p.returncode == 0, p.stderr
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    assert lines[0]["interrupted"] is True
    # The LLM works after the interrupt, with what a fresh engine computes.
    fresh = llm.generate(["after the interrupt"], gannet_py.SamplingParams(temperature=0, max_tokens=6),
                         use_tqdm=False)
    assert lines[1]["token_ids"] == fresh[0].outputs[0].token_ids


def test_a_vllm_script_runs_unchanged_but_the_import(tiny_models, tmp_path):
    src = (ROOT / "tests" / "python" / "scripts" / "vllm_offline_example.py").read_text()
    assert src.count("from vllm import LLM, SamplingParams") == 1
    script = tmp_path / "example.py"
    script.write_text(src.replace("from vllm import LLM, SamplingParams", "from gannet import LLM, SamplingParams"))
    p = subprocess.run([sys.executable, str(script), str(tiny_models["qwen3"])], capture_output=True, text=True,
                       timeout=300, env=env_with_package())
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 6
    for line, prompt in zip(lines, ["Hello, my name is", "The president of the United States is",
                                    "The capital of France is", "The future of AI is"]):
        assert line.startswith(f"Prompt: {prompt!r}, Generated text: ")
    assert "Processed prompts" in p.stderr  # the progress bar, as vLLM shows it
    # The greedy lines: the same tokens as the command line computes.
    cli = cli_generate(tiny_models["qwen3"], tmp_path, [{"prompt": "Hello, my name is", "max_tokens": 8,
                                                         "temperature": 0}])
    rid, rest = lines[4].split(" ", 1)
    assert rid.isdigit()
    assert str(cli[0]["token_ids"]) in rest
