"""DeepSeek-V4.1 through the binary: info from config.json alone, and generation on the
tiny reference checkpoint, which has no tokenizer (prompts as token ids)."""
# labels: exact
import json
import os
import subprocess

from conftest import ROOT, gannet_bin

TINY = ROOT / "tests" / "golden" / "deepseek-v41-tiny"
FLASH = ROOT / "tests" / "fixtures" / "deepseek-v41-flash"


def test_info_from_config_alone(gannet):
    j = json.loads(gannet(["info", "--model", str(FLASH), "--json", "--memory", "1TiB"]).stdout)
    assert j["weights_present"] is False
    assert j["kv_bytes_per_token"] == 890
    assert j["state_bytes_per_seq"] >= 40 * 128 * 528
    free = 2**40 - j["weight_bytes"]
    assert j["fit_tokens"] == int(free / 890)
    assert j["fit_full_context_sequences"] == int(free / (1048576 * 890 + j["state_bytes_per_seq"]))
    # Routed experts dominate the weights; a decode token reads a fraction of them.
    assert j["bytes_by_dtype"]["I8"] > j["bytes_by_dtype"]["BF16"]
    assert j["read_bytes_per_token"] < j["weight_bytes"] / 20
    text = gannet(["info", "--model", str(FLASH), "--memory", "256GiB"]).stdout
    assert "890.0 bytes" in text and "the weights alone need" in text
    p = gannet(["info", "--model", str(FLASH), "--memory", "lots"], check=False)
    assert p.returncode == 2 and "--memory" in p.stderr


def test_info_vision_tower_at_released_sizes(gannet, tmp_path):
    """The released vision_config (deepseek-v41-vision.md §1): the tower's parameters from
    the released tensor shapes, and a 544x544 image as 39x39 patches, 13x13 aligner rows,
    184 prompt tokens; a config without a tower refuses --image-size by name."""
    cfg = json.loads((FLASH / "config.json").read_text())
    cfg["architectures"] = ["DeepseekV41ForConditionalGeneration"]
    cfg["vision_config"] = {"model_type": "deepseek_v41_vision", "hidden_size": 1024, "intermediate_size": 2816,
                            "num_hidden_layers": 32, "num_attention_heads": 16, "patch_size": 14,
                            "downsample_ratio": 3, "rope_theta": 10000.0, "max_image_tokens": 1024,
                            "min_pixels": 295936, "max_wh_ratio": None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    j = json.loads(gannet(["info", "--model", str(tmp_path), "--json"]).stdout)["vision"]
    block = 2 * 1024 + (3072 * 1024 + 3072) + (1024 * 1024 + 1024) + 5632 * 1024 + 1024 * 2816
    aligner = 5120 * 9216 + 5120 + 5120 * 5120 + 5120
    assert j["num_parameters"] == 1024 * 588 + 1024 + 32 * block + 1024 + aligner + 3 * 5120
    assert j["weight_bytes"] == 2 * j["num_parameters"]  # BF16, no scales
    assert j["image_token_id"] == 129264
    assert (j["patch_grid"], j["tokens_per_image"]) == ([39, 39], 184)
    wide = json.loads(gannet(["info", "--model", str(tmp_path), "--json", "--image-size", "4000x1000"]).stdout)["vision"]
    assert wide["tokens_per_image"] <= 1024 and wide["patch_grid"][1] > wide["patch_grid"][0]
    p = gannet(["info", "--model", str(FLASH), "--image-size", "544x544"], check=False)
    assert p.returncode != 0 and "no vision tower" in p.stderr


def test_info_checks_weights_when_present(gannet):
    j = json.loads(gannet(["info", "--model", str(TINY), "--json"]).stdout)
    assert j["weights_present"] is True and j["architecture"] == "DeepseekV41ForCausalLM"
    assert j["kv_bytes_per_token"] == 159  # (64 + 8 + 32 + 2) bytes per entry: 106 / 2 + 106


def test_generate_token_ids_greedy_matches_reference(gannet, tmp_path):
    golden = json.loads((TINY / "golden.json").read_text())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt_token_ids": golden["prompt_ids"], "max_tokens": 16, "temperature": 0})
                       + "\n" + json.dumps({"prompt": "text needs a tokenizer"}) + "\n"
                       + json.dumps({"prompt_token_ids": [1, 600]}) + "\n")
    out = gannet(["generate", "--model", str(TINY), "--prompts", str(prompts), "--json"], check=False)
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert lines[0]["token_ids"] == golden["greedy"]["float32_ids"]
    assert "no tokenizer.json" in lines[1]["error"]
    assert "outside the vocabulary" in lines[2]["error"]


def test_replay_and_act_quant_flags(gannet, tmp_path, tiny_models):
    golden = json.loads((TINY / "golden.json").read_text())
    prompts = tmp_path / "p.jsonl"
    ids = golden["prompt_ids"] + list(range(100, 140))  # 81 tokens: keep 10 replays the decoder
    prompts.write_text(json.dumps({"prompt_token_ids": ids, "max_tokens": 12, "temperature": 0}) + "\n")
    base = ["generate", "--model", str(TINY), "--prompts", str(prompts), "--json"]
    full = json.loads(gannet(base + ["--no-yoco-replay"]).stdout)["token_ids"]
    short = json.loads(gannet(base + ["--yoco-keep-tokens", "10"]).stdout)["token_ids"]
    assert len(full) == len(short) == 12
    # The environment variables equal the flags.
    env = dict(os.environ, GANNET_YOCO_KEEP_TOKENS="10")
    p = subprocess.run([gannet_bin(), *base], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(p.stdout)["token_ids"] == short
    env = dict(os.environ, GANNET_YOCO_REPLAY="off")
    p = subprocess.run([gannet_bin(), *base], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(p.stdout)["token_ids"] == full
    # act-quant fp8 is exact-activations on; the two spellings must agree.
    aq = json.loads(gannet(base + ["--act-quant", "fp8"]).stdout)["token_ids"]
    assert aq == json.loads(gannet(base + ["--exact-activations", "on"]).stdout)["token_ids"]
    for bad, msg in ((["--act-quant", "int4"], "--act-quant must be none or fp8"),
                     (["--act-quant", "fp8", "--exact-activations", "off"], "disagree"),
                     (["--yoco-keep-tokens", "0"], "yoco-keep-tokens")):
        r = gannet(base + bad, check=False)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
    # Dense models have no decoder layers to replay: the flag is refused, not ignored.
    r = gannet(["generate", "--model", str(tiny_models["llama"]), "--prompt", "hi", "--max-tokens", "1",
                "--no-yoco-replay"], check=False)
    assert r.returncode != 0 and "DeepSeek-V4.1 only" in r.stderr


def test_engram_map_from_tokenizer(gannet, tmp_path):
    """A checkpoint with tokenizer.json hashes Engram n-grams over the tokenizer's compressed
    map (98,627 keys for the DeepSeek-V3 tokenizer), and a config that disagrees is refused."""
    import shutil
    d = tmp_path / "v41"
    over = {"vocab_size": 129280, "engram_compressed_vocab_size": 98627, "max_position_embeddings": 256}
    gannet(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--out", str(d),
            "--config-overrides", json.dumps(over)])
    for f in ("tokenizer.json", "tokenizer_config.json"):
        src = ROOT / "assets" / "tokenizers" / "deepseek-v3" / f
        if src.exists():
            shutil.copy(src, d / f)
    out = gannet(["generate", "--model", str(d), "--prompt", "Hello world", "--max-tokens", "4", "--json"])
    assert len(json.loads(out.stdout)["token_ids"]) == 4
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["engram_compressed_vocab_size"] = 99092
    (d / "config.json").write_text(json.dumps(cfg))
    r = gannet(["generate", "--model", str(d), "--prompt", "Hello", "--max-tokens", "1"], check=False)
    assert r.returncode != 0 and "98627 distinct keys" in r.stderr and "engram_compressed_vocab_size" in r.stderr


def test_deepseek_v4_no_kv_fake_quant(gannet, tmp_path, tiny_models):
    """DeepSeek-V4-Flash: --no-kv-fake-quant gives transformers' greedy ids; the default
    (the official reference's fake quantizations) differs; other models refuse the flag."""
    v4 = ROOT / "tests" / "golden" / "deepseek-v4-tiny"
    golden = json.loads((v4 / "golden.json").read_text())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt_token_ids": golden["prompt_ids"], "max_tokens": 16,
                                   "temperature": 0}) + "\n")
    base = ["generate", "--model", str(v4), "--prompts", str(prompts), "--json"]
    off = json.loads(gannet(base + ["--no-kv-fake-quant"]).stdout)["token_ids"]
    assert off == golden["greedy"]["float32_ids"]
    env = dict(os.environ, GANNET_KV_FAKE_QUANT="off")
    p = subprocess.run([gannet_bin(), *base], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(p.stdout)["token_ids"] == off
    on = json.loads(gannet(base).stdout)["token_ids"]
    assert on != off
    r = gannet(["generate", "--model", str(tiny_models["llama"]), "--prompt", "hi", "--max-tokens", "1",
                "--no-kv-fake-quant"], check=False)
    assert r.returncode != 0 and "DeepSeek-V4-Flash only" in r.stderr
