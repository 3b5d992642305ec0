"""make-model, info and generate through the real binary."""
import filecmp
import json
import os
import subprocess

import pytest

from conftest import gannet_bin


def test_make_model_is_byte_identical_for_a_seed(gannet, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, seed in ((a, "5"), (b, "5"), (c, "6")):
        gannet(["make-model", "--arch", "qwen3", "--preset", "tiny", "--seed", seed, "--out", str(d)])
    names = sorted(p.name for p in a.iterdir())
    assert names == ["LICENSE-tokenizer", "config.json", "generation_config.json", "model.safetensors",
                     "tokenizer.json", "tokenizer_config.json"]
    for n in names:
        assert filecmp.cmp(a / n, b / n, shallow=False), n
    assert not filecmp.cmp(a / "model.safetensors", c / "model.safetensors", shallow=False)
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["hidden_size"] == 64 and cfg["num_hidden_layers"] == 2


def test_make_model_rejects_bad_flags(gannet, tmp_path):
    p = gannet(["make-model", "--arch", "gpt9", "--out", str(tmp_path / "x")], check=False)
    assert p.returncode == 2 and "unknown architecture 'gpt9'" in p.stderr
    p = gannet(["make-model", "--arch", "llama", "--preset", "huge", "--out", str(tmp_path / "x")], check=False)
    assert p.returncode == 2 and "unknown preset 'huge'" in p.stderr
    p = gannet(["make-model", "--arch", "llama", "--bogus"], check=False)
    assert p.returncode == 2 and "unknown flag --bogus" in p.stderr


def test_sharded_checkpoint_gives_the_same_output(gannet, tmp_path, tiny_models):
    d = tmp_path / "sharded"
    gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--seed", "1", "--shard-size", "8000000",
            "--out", str(d)])
    assert (d / "model.safetensors.index.json").exists()
    assert len(list(d.glob("model-*-of-*.safetensors"))) > 1
    args = ["generate", "--prompt", "Hello there", "--max-tokens", "8", "--temperature", "0", "--json"]
    one = json.loads(gannet([*args, "--model", str(tiny_models["llama"])]).stdout)
    many = json.loads(gannet([*args, "--model", str(d)]).stdout)
    assert one["token_ids"] == many["token_ids"]


def test_info_json(gannet, tiny_models):
    j = json.loads(gannet(["info", "--model", str(tiny_models["qwen2"]), "--json"]).stdout)
    assert j["architecture"] == "Qwen2ForCausalLM"
    # embeddings (tied) + 2 layers of q,k,v,o, biases, MLP, norms + final norm
    h, f, q, kv, v = 64, 128, 64, 32, 129280
    layer = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h + q + 2 * kv
    assert j["num_parameters"] == v * h + 2 * layer + h
    assert j["kv_bytes_per_token"] == 2 * 2 * kv * 4
    assert j["kernel_path"].split()[0] in ("scalar", "avx2", "avx512")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_generate_json_greedy_is_deterministic(gannet, tiny_models, arch):
    args = ["generate", "--model", str(tiny_models[arch]), "--prompt", "The quick brown fox", "--max-tokens", "12",
            "--temperature", "0", "--json"]
    a = json.loads(gannet(args).stdout)
    b = json.loads(gannet([*args, "--threads", "1"]).stdout)
    assert a["token_ids"] == b["token_ids"]
    assert a["prompt"] == "The quick brown fox"
    assert a["finish_reason"] in ("stop", "length")
    assert len(a["token_ids"]) == 12 or a["finish_reason"] == "stop"


def test_generate_seeded_sampling_reproduces(gannet, tiny_models):
    args = ["generate", "--model", str(tiny_models["llama"]), "--prompt", "Once upon a time", "--max-tokens", "16",
            "--temperature", "1.0", "--top-p", "0.9", "--top-k", "50", "--json"]
    a = json.loads(gannet([*args, "--seed", "3"]).stdout)
    b = json.loads(gannet([*args, "--seed", "3"]).stdout)
    c = json.loads(gannet([*args, "--seed", "4"]).stdout)
    assert a["token_ids"] == b["token_ids"] and a["seed"] == 3
    assert a["token_ids"] != c["token_ids"]


def test_generate_prompts_file_with_bad_lines(gannet, tiny_models, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join([
        json.dumps({"prompt": "first", "max_tokens": 3, "temperature": 0}),
        "{not json",
        json.dumps({"prompt": "x", "max_tokens": 0}),
        json.dumps({"prompt": "y", "temperature": -1}),
        json.dumps({"prompt": "z", "colour": "red"}),
        json.dumps({"prompt": "", "max_tokens": 2}),
        json.dumps({"prompt": "last", "max_tokens": 2, "temperature": 0}),
    ]) + "\n")
    p = gannet(["generate", "--model", str(tiny_models["llama"]), "--prompts", str(f), "--json"], check=False)
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(lines) == 7
    assert lines[0]["prompt"] == "first" and len(lines[0]["token_ids"]) == 3
    assert "bad JSON" in lines[1]["error"]
    assert "max_tokens" in lines[2]["error"]
    assert "temperature" in lines[3]["error"]
    assert "unknown field 'colour'" in lines[4]["error"]
    assert "prompt is empty" in lines[5]["error"]
    assert lines[6]["prompt"] == "last" and len(lines[6]["token_ids"]) == 2
    assert p.returncode == 1


def test_generate_usage_errors(gannet, tiny_models, tmp_path):
    m = str(tiny_models["llama"])
    # A directory that cannot be created: its parent is a regular file.
    (tmp_path / "file").write_text("x")
    bad_dir = str(tmp_path / "file" / "cache")
    for args, msg in [
        (["--prompt", "x"], "--model is required"),
        (["--model", m], "exactly one of --prompt and --prompts"),
        (["--model", m, "--prompt", "x", "--temperature", "hot"], "--temperature expects a number"),
        (["--model", m, "--prompt", "x", "--top-p", "0"], "top_p must be in (0, 1]"),
        (["--model", m, "--prompt", "x", "--max-tokens", "0"], "max_tokens must be >= 1"),
        (["--model", m, "--prompt", "x", "--max-tokens", "99999999"], "exceeds the model's context"),
        (["--model", m, "--prompt", "x", "--prefix-cache-disk-size", "1GiB"], "--prefix-cache-disk-size needs --prefix-cache-dir"),
        (["--model", m, "--prompt", "x", "--prefix-cache-dir", str(tmp_path / "pc"), "--no-prefix-caching"], "cannot be used with --no-prefix-caching"),
        (["--model", m, "--prompt", "x", "--no-prefix-caching", "--enable-prefix-caching"], "contradict each other"),
        (["--model", m, "--prompt", "x", "--prefix-cache-dir", bad_dir], "--prefix-cache-dir " + bad_dir),
    ]:
        p = gannet(["generate", *args], check=False)
        assert p.returncode != 0, args
        assert msg in p.stderr, (args, p.stderr)


def test_bad_checkpoint_is_reported(gannet, tiny_models, tmp_path):
    import shutil
    d = tmp_path / "broken"
    shutil.copytree(tiny_models["llama"], d)
    st = d / "model.safetensors"
    with open(st, "r+b") as fh:
        fh.truncate(st.stat().st_size - 1000)
    p = gannet(["info", "--model", str(d)], check=False)
    assert p.returncode == 1 and "model.safetensors" in p.stderr and "out of range" in p.stderr
    cfg = json.loads((tiny_models["llama"] / "config.json").read_text())
    cfg["hidden_size"] = 96
    shutil.copy(tiny_models["llama"] / "model.safetensors", st)
    (d / "config.json").write_text(json.dumps(cfg))
    p = gannet(["info", "--model", str(d)], check=False)
    assert p.returncode == 1 and "model.embed_tokens.weight" in p.stderr and "config.json implies" in p.stderr


def test_f16_and_bf16_checkpoints_run_close_to_f32(gannet, tmp_path):
    """f16 weights are widened to f32 at load; bf16 ones run through the bf16 kernels. Both
    load, report their dtype, and give logprobs close to the f32 model's for the same tokens."""
    outs = {}
    for dt in ("f32", "f16", "bf16"):
        d = tmp_path / dt
        gannet(["make-model", "--arch", "qwen2", "--preset", "tiny", "--seed", "2", "--dtype", dt, "--out", str(d)])
        info = json.loads(gannet(["info", "--model", str(d), "--json"]).stdout)
        assert info["bytes_by_dtype"] == {{"f32": "F32", "f16": "F16", "bf16": "BF16"}[dt]: info["total_bytes"]}
        f = tmp_path / f"{dt}.jsonl"
        f.write_text(json.dumps({"prompt": "Precision check", "max_tokens": 1, "temperature": 0,
                                 "prompt_logprobs": 0}) + "\n")
        outs[dt] = json.loads(gannet(["generate", "--model", str(d), "--prompts", str(f), "--json"]).stdout)
    ref = [p["logprob"] for p in outs["f32"]["prompt_logprobs"][1:]]
    # Observed: f16 8e-4, bf16 2.3e-2 (bf16 weights and activations rounded to bf16).
    for dt, tol in (("f16", 5e-3), ("bf16", 8e-2)):
        got = [p["logprob"] for p in outs[dt]["prompt_logprobs"][1:]]
        assert len(got) == len(ref)
        assert max(abs(a - b) for a, b in zip(got, ref)) < tol, (dt, got, ref)


def _expected_params(arch, attention_bias, mlp_bias, tied, h=64, f=128, layers=2, heads=4, kv_heads=2, hd=16,
                     vocab=129280):
    """Parameters of a dense checkpoint counted from transformers' module definitions."""
    q, kv = heads * hd, kv_heads * hd
    layer = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h
    if arch == "qwen2" or attention_bias:
        layer += q + 2 * kv           # q/k/v biases (Qwen2 always)
    if attention_bias and arch != "qwen2":
        layer += h                    # o_proj bias (Llama, Qwen3)
    if mlp_bias:
        layer += 2 * f + h            # gate/up/down biases (Llama)
    if arch == "qwen3":
        layer += 2 * hd               # q_norm, k_norm
    return layers * layer + vocab * h * (1 if tied else 2) + h


@pytest.mark.parametrize("arch,attention_bias,mlp_bias,tied", [
    (a, ab, mb, t) for a in ("llama", "qwen2", "qwen3") for ab in (False, True)
    for mb in ((False, True) if a == "llama" else (False,)) for t in (True, False)])
def test_info_parameter_count_matches_tensors(gannet, tmp_path, arch, attention_bias, mlp_bias, tied):
    d = tmp_path / "m"
    overrides = {"attention_bias": attention_bias, "tie_word_embeddings": tied}
    if arch == "llama":
        overrides["mlp_bias"] = mlp_bias
    gannet(["make-model", "--arch", arch, "--preset", "tiny", "--out", str(d),
            "--config-overrides", json.dumps(overrides)])
    j = json.loads(gannet(["info", "--model", str(d), "--json"]).stdout)
    want = _expected_params(arch, attention_bias, mlp_bias, tied)
    assert j["num_parameters"] == want           # sum of the tensors' elements
    assert j["num_parameters_from_config"] == want
    assert j["o_proj_bias"] == (attention_bias and arch != "qwen2")


def test_info_warns_when_tokenizer_ids_exceed_vocab(gannet, tmp_path):
    d = tmp_path / "small-vocab"
    gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--out", str(d),
            "--config-overrides", '{"vocab_size": 1000}'])
    p = gannet(["info", "--model", str(d)])
    assert "warning: the tokenizer has ids up to 128814 but vocab_size is 1000" in p.stderr
    p = gannet(["info", "--model", str(d), "--json"])
    assert "vocab_size is 1000" in p.stderr and json.loads(p.stdout)["tokenizer_vocab_size"] == 128815
    # No warning when the vocabulary covers the tokenizer (the presets' 129280 > 128815).
    full = tmp_path / "full"
    gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--out", str(full)])
    assert "warning" not in gannet(["info", "--model", str(full)]).stderr


def test_config_fields_refused_with_their_name(gannet, tmp_path):
    """A config field gannet cannot honour is an error naming it, at make-model and at load."""
    p = gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--out", str(tmp_path / "a"),
                "--config-overrides", '{"hidden_act": "relu"}'], check=False)
    assert p.returncode != 0 and "'hidden_act' = \"relu\" is not supported" in p.stderr
    d = tmp_path / "b"
    gannet(["make-model", "--arch", "qwen2", "--preset", "tiny", "--out", str(d)])
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "dynamic", "factor": 2.0}
    (d / "config.json").write_text(json.dumps(cfg))
    for cmd in (["info", "--model", str(d)], ["generate", "--model", str(d), "--prompt", "hi"]):
        p = gannet(cmd, check=False)
        assert p.returncode != 0 and "'rope_scaling.rope_type' = \"dynamic\"" in p.stderr, p.stderr


def test_make_model_config_overrides(gannet, tmp_path):
    d = tmp_path / "o"
    gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--out", str(d), "--config-overrides",
            '{"head_dim": 24, "rope_scaling": null, "hidden_act": "gelu"}'])
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["head_dim"] == 24 and "rope_scaling" not in cfg and cfg["hidden_act"] == "gelu"
    j = json.loads(gannet(["info", "--model", str(d), "--json"]).stdout)
    assert j["head_dim"] == 24 and j["hidden_act"] == "gelu" and j["rope_type"] == "default"
    for bad, msg in (("[1]", "expected a JSON object"), ("{", "not valid JSON")):
        p = gannet(["make-model", "--arch", "llama", "--out", str(tmp_path / "x"), "--config-overrides", bad],
                   check=False)
        assert p.returncode != 0 and msg in p.stderr


def test_kv_cache_that_cannot_be_committed_is_refused_at_start(gannet, tiny_models):
    p = gannet(["generate", "--model", str(tiny_models["llama"]), "--prompt", "hi", "--max-tokens", "2",
                "--kv-cache-memory", "100TiB"], check=False)
    assert p.returncode != 0
    assert "KV cache needs" in p.stderr and "--kv-cache-memory" in p.stderr, p.stderr


def test_info_reports_usable_cpus(gannet, tiny_models):
    j = json.loads(gannet(["info", "--model", str(tiny_models["llama"]), "--json"]).stdout)
    assert 1 <= j["usable_cpus"] <= os.cpu_count()
    one = subprocess.run(["taskset", "-c", "0", gannet_bin(), "info", "--model", str(tiny_models["llama"]), "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(one.stdout)["usable_cpus"] == 1


def test_async_scheduling_flag_and_env(gannet, tiny_models, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(json.dumps({"prompt": f"prompt number {i}", "max_tokens": 6, "temperature": 0.8,
                                       "seed": i, "n": 1 + i % 2}) for i in range(6)) + "\n")
    base = ["generate", "--model", str(tiny_models["qwen3"]), "--prompts", str(f), "--json"]
    on = gannet([*base, "--async-scheduling", "on"]).stdout
    off = gannet([*base, "--async-scheduling", "off"]).stdout
    assert on == off and len(on.splitlines()) == 6
    p = gannet([*base, "--async-scheduling", "maybe"], check=False)
    assert p.returncode == 2 and "--async-scheduling must be on or off" in p.stderr
    env_off = subprocess.run([gannet_bin(), *base], capture_output=True, text=True,
                             env={**os.environ, "GANNET_ASYNC_SCHEDULING": "off"})
    assert env_off.returncode == 0 and env_off.stdout == on
    bad = subprocess.run([gannet_bin(), *base], capture_output=True, text=True,
                         env={**os.environ, "GANNET_ASYNC_SCHEDULING": "sometimes"})
    assert bad.returncode != 0 and "GANNET_ASYNC_SCHEDULING must be on or off" in bad.stderr


def _prompt_logprobs(gannet, model, tmp_path, extra=()):
    f = tmp_path / "pl.jsonl"
    f.write_text(json.dumps({"prompt": "Quantized weights, same tokens?", "max_tokens": 4, "temperature": 0,
                             "prompt_logprobs": 0}) + "\n")
    out = json.loads(gannet(["generate", "--model", str(model), "--prompts", str(f), "--json", *extra]).stdout)
    return [p["logprob"] for p in out["prompt_logprobs"][1:]], out["token_ids"]


def test_quantized_checkpoints_and_load_time_quantization(gannet, tmp_path):
    """make-model --dtype fp8|int8 writes quantized linears that info reports by format;
    --quantize converts the float linears at load. Quantizing an f32 checkpoint to int8 at
    load gives exactly the weights the quantized checkpoint stores (the same quantizer over
    the same values), so with the remaining float lm_head converted too the outputs are
    bit-identical. --quantize fp8 picks power-of-two scales where make-model keeps each
    tile's amax / 448, so those two differ; all stay close to the f32 model."""
    over = '{"tie_word_embeddings": false}'
    f32 = tmp_path / "f32"
    gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--seed", "5", "--config-overrides", over,
            "--out", str(f32)])
    ref, _ = _prompt_logprobs(gannet, f32, tmp_path)
    # Observed max |logprob error| against f32: fp8 0.105, int8 0.022 (3 vs 7 mantissa bits).
    for fmt, fmt_name, tol in (("fp8", "fp8-block", 0.15), ("int8", "int8-row", 0.05)):
        q = tmp_path / fmt
        gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--seed", "5", "--dtype", fmt,
                "--config-overrides", over, "--out", str(q)])
        info = json.loads(gannet(["info", "--model", str(q), "--json"]).stdout)
        assert info["quantization"] == fmt
        assert set(info["read_bytes_by_format"]) == {"f32", fmt_name}
        # lm_head [129280, 64] stays f32 in the checkpoint; 2 layers of 7 linears are 1 byte/weight.
        n_linear = 2 * (64 * 64 * 2 + 32 * 64 * 2 + 3 * 128 * 64)
        assert info["read_bytes_by_format"]["f32"] == 129280 * 64 * 4
        n_scales = 2 * 7 if fmt == "fp8" else 2 * (64 + 32 + 32 + 64 + 128 + 128 + 64)
        assert info["read_bytes_by_format"][fmt_name] == n_linear + 4 * n_scales
        qinfo = json.loads(gannet(["info", "--model", str(f32), "--quantize", fmt, "--json"]).stdout)
        assert set(qinfo["read_bytes_by_format"]) == {fmt_name}
        stored, stored_ids = _prompt_logprobs(gannet, q, tmp_path, ["--quantize", fmt])
        converted, converted_ids = _prompt_logprobs(gannet, f32, tmp_path, ["--quantize", fmt])
        if fmt == "int8":
            assert stored == converted and stored_ids == converted_ids
        else:
            assert stored != converted
            assert max(abs(a - b) for a, b in zip(converted, ref)) < tol, (fmt, converted, ref)
        plain, _ = _prompt_logprobs(gannet, q, tmp_path)
        assert max(abs(a - b) for a, b in zip(plain, ref)) < tol, (fmt, plain, ref)
        assert plain != ref  # the quantized weights really are used
    # Exact activations change an FP8 model's results (the golden test checks the values).
    exact, _ = _prompt_logprobs(gannet, tmp_path / "fp8", tmp_path, ["--exact-activations", "on"])
    plain, _ = _prompt_logprobs(gannet, tmp_path / "fp8", tmp_path, ["--exact-activations", "off"])
    assert exact != plain
    p = gannet(["generate", "--model", str(f32), "--prompt", "x", "--exact-activations", "maybe"], check=False)
    assert p.returncode == 2 and "--exact-activations must be on or off" in p.stderr
    p = gannet(["generate", "--model", str(f32), "--prompt", "x", "--quantize", "q4"], check=False)
    assert p.returncode == 2 and "--quantize must be none, fp8 or int8" in p.stderr
    p = gannet(["make-model", "--arch", "llama", "--dtype", "q4", "--out", str(tmp_path / "bad")], check=False)
    assert p.returncode == 2 and "--dtype must be" in p.stderr


def test_automatic_kv_budget_and_its_environment_variable(tiny_models):
    """Without --kv-cache-memory or GANNET_KV_CACHE_MEMORY the budget holds max_num_seqs full
    contexts (within 40 % of free memory, far more than this needs); the variable sets it.
    (The suite itself runs with GANNET_KV_CACHE_MEMORY=64MiB: tests/CMakeLists.txt.)"""
    m = str(tiny_models["llama"])
    args = [gannet_bin(), "generate", "--model", m, "--prompt", "hi", "--max-tokens", "1", "--max-num-seqs", "4"]
    env = {k: v for k, v in os.environ.items() if k != "GANNET_KV_CACHE_MEMORY"}
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    # llama tiny: 2 layers x (K, V) x 2 heads x 16 dims x 4 bytes = 512 bytes a token.
    assert "kv_cache_memory=auto" in p.stderr and "KV cache 8.0 MiB" in p.stderr, p.stderr
    assert "4.00 sequences of the full context (4096 tokens) fit at once" in p.stderr, p.stderr
    p = subprocess.run(args, capture_output=True, text=True, env=dict(env, GANNET_KV_CACHE_MEMORY="2MiB"), timeout=120)
    assert p.returncode == 0 and "KV cache 2.0 MiB" in p.stderr, p.stderr


def test_kv_cache_dtype_flag(gannet, tiny_models):
    """--kv-cache-dtype bf16 halves a dense model's KV bytes per block; bad values are refused."""
    m = str(tiny_models["llama"])
    f32 = gannet(["generate", "--model", m, "--prompt", "hi", "--max-tokens", "2", "--kv-cache-memory", "8MiB"])
    bf16 = gannet(["generate", "--model", m, "--prompt", "hi", "--max-tokens", "2", "--kv-cache-memory", "8MiB",
                   "--kv-cache-dtype", "bf16"])
    import re
    blocks = lambda p: int(re.search(r"(\d+) blocks x", p.stderr).group(1))
    assert blocks(bf16) >= 2 * blocks(f32) - 1
    r = gannet(["generate", "--model", m, "--prompt", "hi", "--kv-cache-dtype", "fp8"], check=False)
    assert r.returncode == 2 and "--kv-cache-dtype must be auto, f32 or bf16" in r.stderr


def test_weight_memory_flag(gannet, tiny_models):
    """--weight-memory copy reads the weights into the process's own memory: the same tokens
    as the file mapping; bad values are refused naming the flag."""
    m = str(tiny_models["llama"])
    base = ["generate", "--model", m, "--prompt", "The weights", "--max-tokens", "6", "--temperature", "0", "--json"]
    mapped = gannet(base + ["--weight-memory", "map"])
    copied = gannet(base + ["--weight-memory", "copy"])
    ids = lambda p: json.loads(p.stdout.strip().splitlines()[-1])["token_ids"]
    assert len(ids(mapped)) == 6 and ids(mapped) == ids(copied)
    assert "weight_memory=copy" in copied.stderr, copied.stderr
    r = gannet(base + ["--weight-memory", "mmap"], check=False)
    assert r.returncode == 2 and "--weight-memory must be auto, map or copy, got 'mmap'" in r.stderr, r.stderr
