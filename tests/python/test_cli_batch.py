"""generate --prompts as one continuous batch: order, per-line errors, sampling fields."""
import json


def run_prompts(gannet, model, tmp_path, lines, *extra):
    f = tmp_path / "prompts.jsonl"
    f.write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    p = gannet(["generate", "--model", str(model), "--prompts", str(f), "--json", *extra], check=False)
    return p, [json.loads(l) for l in p.stdout.splitlines()]


def test_batch_equals_one_at_a_time(gannet, tiny_models, tmp_path):
    lines = [{"prompt": f"request number {i} " + "word " * (i * 3), "max_tokens": 5 + i % 4, "temperature": 1.0,
              "seed": 40 + i, "logprobs": 2} for i in range(12)]
    _, batch = run_prompts(gannet, tiny_models["llama"], tmp_path, lines)
    _, single = run_prompts(gannet, tiny_models["llama"], tmp_path, lines, "--max-num-seqs", "1", "--threads", "1")
    assert [b["prompt"] for b in batch] == [l["prompt"] for l in lines]
    for b, s in zip(batch, single):
        assert b["token_ids"] == s["token_ids"]
        assert b["logprobs"] == s["logprobs"]
        assert len(b["logprobs"]) == len(b["token_ids"])
        for pos, tok in zip(b["logprobs"], b["token_ids"]):
            assert pos["id"] == tok and len(pos["top"]) == 2


def test_n_samples_and_prompt_logprobs(gannet, tiny_models, tmp_path):
    _, out = run_prompts(gannet, tiny_models["qwen3"], tmp_path, [
        {"prompt": "several samples", "n": 3, "max_tokens": 6, "seed": 9, "temperature": 1.0, "ignore_eos": True},
        {"prompt": "prompt logprobs", "max_tokens": 2, "prompt_logprobs": 1, "temperature": 0},
    ])
    assert len(out[0]["outputs"]) == 3
    assert all(len(o["token_ids"]) == 6 for o in out[0]["outputs"])
    assert out[0]["outputs"][0]["token_ids"] == out[0]["token_ids"]
    pl = out[1]["prompt_logprobs"]
    assert pl[0] is None and all(p is not None and len(p["top"]) == 1 for p in pl[1:])


def test_bad_requests_get_error_lines_in_place(gannet, tiny_models, tmp_path):
    lines = [
        {"prompt": "ok one", "max_tokens": 3, "temperature": 0},
        {"prompt": "", "max_tokens": 2},
        {"prompt": "x " * 5000, "max_tokens": 2},
        {"prompt": "x", "max_tokens": 0},
        {"prompt": "x", "temperature": -0.5},
        {"prompt": "x", "top_p": 0},
        {"prompt": "x", "n": 0},
        {"prompt": "x", "bogus_field": 1},
        "{broken json",
        {"prompt": "ok two", "max_tokens": 2, "temperature": 0},
    ]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path, lines, "--max-model-len", "512")
    assert p.returncode == 1
    assert len(out) == len(lines)
    assert out[0]["prompt"] == "ok one" and len(out[0]["token_ids"]) == 3
    assert "prompt is empty" in out[1]["error"]
    assert "exceeds the model's context" in out[2]["error"]
    assert "max_tokens" in out[3]["error"]
    assert "temperature" in out[4]["error"]
    assert "top_p" in out[5]["error"]
    assert "n must be" in out[6]["error"] or "'n'" in out[6]["error"]
    assert "unknown field 'bogus_field'" in out[7]["error"]
    assert "bad JSON" in out[8]["error"]
    assert out[9]["prompt"] == "ok two" and len(out[9]["token_ids"]) == 2


def test_prompt_longer_than_the_kv_budget(gannet, tiny_models, tmp_path):
    # 4 blocks of 16 tokens: a 100-token request cannot fit, a short one can.
    _, out = run_prompts(gannet, tiny_models["llama"], tmp_path, [
        {"prompt": "word " * 100, "max_tokens": 2},
        {"prompt": "short", "max_tokens": 2, "temperature": 0},
    ], "--kv-cache-memory", str(4 * 16 * 512), "--block-size", "16")
    assert "KV blocks than the whole budget" in out[0]["error"]
    assert len(out[1]["token_ids"]) == 2


def test_preemption_keeps_results(gannet, tiny_models, tmp_path):
    lines = [{"prompt": "preempt me " * (2 + i), "max_tokens": 24, "temperature": 1.0, "seed": i, "ignore_eos": True}
             for i in range(10)]
    p1, ample = run_prompts(gannet, tiny_models["llama"], tmp_path, lines)
    p2, tight = run_prompts(gannet, tiny_models["llama"], tmp_path, lines,
                            "--kv-cache-memory", str(12 * 16 * 512), "--block-size", "16")
    assert "preemptions]" in p2.stderr and " 0 preemptions]" not in p2.stderr
    assert [a["token_ids"] for a in ample] == [t["token_ids"] for t in tight]


def test_engine_flag_errors(gannet, tiny_models):
    m = str(tiny_models["llama"])
    for args, msg in [
        (["--kv-cache-memory", "lots"], "memory size 'lots'"),
        (["--kv-cache-memory", "4XB"], "unknown unit"),
        (["--max-num-seqs", "0"], "--max-num-seqs must be in [1, "),
        (["--block-size", "0"], "--block-size must be in"),
        (["--block-size", "4294967360"], "--block-size must be in [1, 4096]"),
        (["--threads", "100000"], "--threads must be in [1, 1024]"),
        (["--kv-cache-memory", "0"], "--kv-cache-memory must be more than 0"),
        (["--max-model-len", "0"], "--max-model-len must be in [1, "),
        (["--logprobs", "99"], "logprobs"),
        (["--prefix-wait-steps", "-1"], "--prefix-wait-steps must be in [0, "),
        (["--prefix-state-snapshots", "-1"], "--prefix-state-snapshots must be in [0, "),
    ]:
        p = gannet(["generate", "--model", m, "--prompt", "x", *args], check=False)
        assert p.returncode == 2, (args, p.stderr)
        assert msg in p.stderr, (args, p.stderr)
    # Well-formed but beyond what this model allows: an error naming the limit.
    p = gannet(["generate", "--model", m, "--prompt", "x", "--max-model-len", "999999"], check=False)
    assert p.returncode == 1 and "exceeds the model's context of 4096" in p.stderr, p.stderr
    # State snapshots are for models with per-sequence state: refused by name for Llama,
    # and without prefix caching.
    p = gannet(["generate", "--model", m, "--prompt", "x", "--prefix-state-snapshots", "2"], check=False)
    assert p.returncode == 1 and "--prefix-state-snapshots" in p.stderr and "no per-sequence state" in p.stderr, p.stderr
    p = gannet(["generate", "--model", m, "--prompt", "x", "--prefix-state-snapshots", "2", "--no-prefix-caching"],
               check=False)
    assert p.returncode != 0 and "--prefix-state-snapshots" in p.stderr and "--no-prefix-caching" in p.stderr, p.stderr


def test_bad_config_values_are_named(gannet, tiny_models, tmp_path):
    import shutil
    for field, value, msg in [("num_key_value_heads", -3, "'num_key_value_heads' = -3 is outside"),
                              ("head_dim", 2147483648, "'head_dim' = 2147483648 is outside"),
                              ("num_hidden_layers", 100000000, "'num_hidden_layers' = 100000000 is outside"),
                              ("rms_norm_eps", 0, "rms_norm_eps"),
                              ("eos_token_id", -1, "eos_token_id")]:
        d = tmp_path / field
        shutil.copytree(tiny_models["llama"], d)
        cfg = json.loads((d / "config.json").read_text())
        cfg[field] = value
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "generation_config.json").unlink()
        p = gannet(["info", "--model", str(d)], check=False)
        assert p.returncode == 1, (field, p.stderr)
        assert msg in p.stderr and "config.json" in p.stderr, (field, p.stderr)
    # An end-of-sequence id outside the model's vocabulary is named, not a crash later.
    d = tmp_path / "eos"
    shutil.copytree(tiny_models["llama"], d)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 129280}))
    p = gannet(["generate", "--model", str(d), "--prompt", "x", "--max-tokens", "2"], check=False)
    assert p.returncode == 1, p.stderr
    assert "generation_config.json" in p.stderr and "eos_token_id" in p.stderr and "129280" in p.stderr, p.stderr


def test_n_and_stop_flags(gannet, tiny_models):
    m = str(tiny_models["llama"])
    base = ["generate", "--model", m, "--prompt", "Flags for samples", "--max-tokens", "12", "--json"]
    two = json.loads(gannet([*base, "--n", "2", "--seed", "5"]).stdout)
    assert len(two["outputs"]) == 2 and all(len(o["token_ids"]) <= 12 for o in two["outputs"])
    free = json.loads(gannet([*base, "--temperature", "0"]).stdout)
    text = free["text"]
    assert len(text) >= 6 and free["finish_reason"] == "length"
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = json.loads(gannet([*base, "--temperature", "0", "--stop", stop]).stdout)
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert cut["text"] == text[: text.find(stop)]
    p = gannet([*base, "--n", "0"], check=False)
    assert p.returncode == 2 and "--n must be in [1, 1024]" in p.stderr
