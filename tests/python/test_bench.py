"""Each `gannet bench` runs on the tiny preset and its JSON has the documented fields with
sane values. (Timings are never asserted: only that they exist and are positive.)"""
import json
import os

import pytest


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    env = dict(os.environ, GANNET_ROOFLINE_CACHE=str(d / "roofline.json"))
    return d, env


def run_bench(gannet_bin_env, args):
    import subprocess
    from conftest import gannet_bin
    d, env = gannet_bin_env
    p = subprocess.run([gannet_bin(), "bench", *args, "--threads", "2"], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def check_meta(j, bench):
    assert j["bench"] == bench
    for k in ("git_revision", "model", "threads", "kernel_path", "roofline"):
        assert k in j, k
    r = j["roofline"]
    assert r["read_gb_per_s"] > 0 and r["read_gb_per_s_1t"] > 0 and r["f32_fma_gflop_per_s"] > 0


def test_roofline_is_cached(bench_env):
    d, _ = bench_env
    p = run_bench(bench_env, ["roofline", "--json", str(d / "r.json")])
    j = json.loads((d / "r.json").read_text())
    check_meta(j, "roofline")
    cache = json.loads((d / "roofline.json").read_text())
    assert len(cache["entries"]) == 1 and cache["entries"][0]["threads"] == 2
    assert "read bandwidth" in p.stdout


def test_decode_rows(bench_env, tiny_models):
    d, _ = bench_env
    out = d / "decode.json"
    run_bench(bench_env, ["decode", "--model", str(tiny_models["llama"]), "--batch-sizes", "1,3",
                          "--input-len", "12", "--output-len", "10", "--json", str(out), "--csv", str(d / "decode.csv")])
    j = json.loads(out.read_text())
    check_meta(j, "decode")
    assert j["weight_memory"] == "auto" and j["weight_bytes_on_small_pages"] == 0
    assert [r["batch_size"] for r in j["rows"]] == [1, 3]
    for r in j["rows"]:
        for k in ("tokens_per_s", "tokens_per_s_per_user", "step_ms_p50", "step_ms_p90", "gb_per_s",
                  "pct_bandwidth", "gflop_per_s"):
            assert r[k] > 0, k
        assert r["step_ms_p90"] >= r["step_ms_p50"]
        assert abs(r["tokens_per_s"] - r["batch_size"] * r["tokens_per_s_per_user"]) < 1e-6 * r["tokens_per_s"]
    assert (d / "decode.csv").read_text().splitlines()[0].startswith("batch_size")


def test_prefill_rows(bench_env, tiny_models):
    d, _ = bench_env
    out = d / "prefill.json"
    # 300: one chunk longer than the step's logit rows (257 for one sequence); it needs one.
    run_bench(bench_env, ["prefill", "--model", str(tiny_models["qwen3"]), "--lengths", "8,33,300", "--repeats", "2",
                          "--json", str(out)])
    j = json.loads(out.read_text())
    check_meta(j, "prefill")
    assert j["weight_memory"] == "auto"
    assert [r["prompt_len"] for r in j["rows"]] == [8, 33, 300]
    for r in j["rows"]:
        assert r["tokens_per_s"] > 0 and r["gflop_per_s"] > 0 and 0 < r["pct_compute_peak"] < 1000


def test_throughput_synthetic_and_dataset(bench_env, tiny_models, tmp_path):
    d, _ = bench_env
    out = d / "tp.json"
    run_bench(bench_env, ["throughput", "--model", str(tiny_models["llama"]), "--num-prompts", "6", "--input-len", "9",
                          "--output-len", "5", "--json", str(out)])
    r = json.loads(out.read_text())["rows"][0]
    assert r["requests"] == 6 and r["output_tokens"] == 30 and r["prompt_tokens"] == 54
    for k in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "ttft_ms_p50", "ttft_ms_p90",
              "tpot_ms_p50", "tpot_ms_p99"):
        assert r[k] > 0, k
    ds = tmp_path / "ds.jsonl"
    ds.write_text("\n".join(json.dumps({"prompt": f"hello {i}", "max_tokens": 3, "ignore_eos": True})
                            for i in range(4)) + "\n")
    run_bench(bench_env, ["throughput", "--model", str(tiny_models["llama"]), "--dataset", str(ds), "--json", str(out)])
    r = json.loads(out.read_text())["rows"][0]
    assert r["requests"] == 4 and r["output_tokens"] == 12
    # --max-num-seqs 1: the same requests one at a time, so each step holds one sequence
    # and the run takes at least one step per output token.
    run_bench(bench_env, ["throughput", "--model", str(tiny_models["llama"]), "--dataset", str(ds), "--max-num-seqs", "1",
                          "--json", str(out)])
    r1 = json.loads(out.read_text())["rows"][0]
    assert r1["requests"] == 4 and r1["output_tokens"] == 12 and r1["steps"] >= 12 > r["steps"]


def test_bench_usage_errors(gannet):
    p = gannet(["bench", "sideways"], check=False)
    assert p.returncode == 2 and "unknown bench 'sideways'" in p.stderr
    p = gannet(["bench", "decode", "--model", "/nonexistent", "--batch-sizes", "1,x"], check=False)
    assert p.returncode == 2 and "--batch-sizes expects an integer" in p.stderr
    p = gannet(["bench", "decode", "--model", "/nonexistent", "--max-num-seqs", "4"], check=False)
    assert p.returncode == 2 and "--max-num-seqs applies to bench throughput and agent only" in p.stderr
    p = gannet(["bench", "prefill", "--model", "/nonexistent", "--prefix-state-snapshots", "4"], check=False)
    assert p.returncode == 2 and "--prefix-state-snapshots applies to bench throughput and agent only" in p.stderr
    for flag in (["--shared-prefix-len", "8"], ["--turns", "2"], ["--no-prefix-caching"], ["--prefix-cache-dir", "d"]):
        p = gannet(["bench", "prefill", "--model", "/nonexistent", *flag], check=False)
        only = "throughput only" if flag[0] == "--shared-prefix-len" else "throughput and agent only"
        assert p.returncode == 2 and flag[0] + " applies to bench " + only in p.stderr, flag
    p = gannet(["bench", "throughput", "--model", "/nonexistent", "--no-prefix-caching", "--enable-prefix-caching"],
               check=False)
    assert p.returncode == 2 and "contradict each other" in p.stderr


def test_throughput_length_ranges_and_async_flag(bench_env, tiny_models, gannet):
    d, _ = bench_env
    out = d / "tp-range.json"
    # 5 requests, inputs spread over 4..8 and outputs over 2..6: every length used once.
    run_bench(bench_env, ["throughput", "--model", str(tiny_models["llama"]), "--num-prompts", "5", "--input-len", "4",
                          "--input-len-max", "8", "--output-len", "2", "--output-len-max", "6",
                          "--async-scheduling", "off", "--json", str(out)])
    j = json.loads(out.read_text())
    assert j["async_scheduling"] is False
    r = j["rows"][0]
    assert r["prompt_tokens"] == 4 + 5 + 6 + 7 + 8 and r["output_tokens"] == 2 + 3 + 4 + 5 + 6
    assert r["exposed_host_ms_per_step"] >= 0
    base = ["bench", "throughput", "--model", str(tiny_models["llama"]), "--num-prompts", "2"]
    p = gannet([*base, "--async-scheduling", "sideways"], check=False)
    assert p.returncode == 2 and "--async-scheduling must be on or off" in p.stderr
    p = gannet([*base, "--input-len", "8", "--input-len-max", "4"], check=False)
    assert p.returncode != 0 and "--input-len-max" in p.stderr


def test_bf16_gemm_route_env_is_honoured_or_refused(bench_env, tmp_path, gannet):
    """GANNET_BF16_GEMM fixes the bf16 prefill route (reported in the bench meta) for a
    model with bf16 linears; an unknown value is an error naming the variable."""
    import subprocess
    from conftest import gannet_bin
    m = tmp_path / "bf16"
    gannet(["make-model", "--arch", "llama", "--preset", "tiny", "--dtype", "bf16", "--out", str(m)])
    d, env = bench_env
    for route, name in (("fma", "fma"), ("dpbf16", "vdpbf16ps")):
        out = d / f"pp-{route}.json"
        p = subprocess.run([gannet_bin(), "bench", "prefill", "--model", str(m), "--lengths", "9", "--repeats", "1",
                            "--threads", "2", "--json", str(out)], capture_output=True, text=True,
                           env={**env, "GANNET_BF16_GEMM": route}, timeout=600)
        assert p.returncode == 0, p.stderr
        assert json.loads(out.read_text())["bf16_gemm"] == name
    p = subprocess.run([gannet_bin(), "generate", "--model", str(m), "--prompt", "x", "--max-tokens", "1"],
                       capture_output=True, text=True, env={**env, "GANNET_BF16_GEMM": "amx"}, timeout=300)
    assert p.returncode != 0 and "GANNET_BF16_GEMM must be auto, dpbf16 or fma" in p.stderr


def test_quantize_flags_refused_with_their_name(bench_env, tiny_models, gannet):
    import subprocess
    from conftest import gannet_bin
    model = str(tiny_models["llama"])
    p = gannet(["bench", "decode", "--model", model, "--quantize", "q4"], check=False)
    assert p.returncode == 2 and "--quantize must be none, fp8 or int8" in p.stderr
    p = gannet(["info", "--model", model, "--quantize", "q4"], check=False)
    assert p.returncode == 2 and "--quantize must be none, fp8 or int8" in p.stderr
    _, env = bench_env
    for var, val, msg in (("GANNET_QUANTIZE", "q4", "--quantize must be none, fp8 or int8"),
                          ("GANNET_EXACT_ACTIVATIONS", "maybe", "GANNET_EXACT_ACTIVATIONS must be on or off")):
        p = subprocess.run([gannet_bin(), "generate", "--model", model, "--prompt", "x", "--max-tokens", "1"],
                           capture_output=True, text=True, env={**env, var: val}, timeout=300)
        assert p.returncode != 0 and msg in p.stderr, (var, p.stderr)
    # Honoured: GANNET_QUANTIZE=int8 gives what --quantize int8 gives, and differs from none.
    base = [gannet_bin(), "generate", "--model", model, "--prompt", "quantized?", "--max-tokens", "4", "--json",
            "--temperature", "0",
            "--logprobs", "1"]
    flag = subprocess.run([*base, "--quantize", "int8"], capture_output=True, text=True, env=env, timeout=300)
    via_env = subprocess.run(base, capture_output=True, text=True, env={**env, "GANNET_QUANTIZE": "int8"}, timeout=300)
    plain = subprocess.run(base, capture_output=True, text=True, env=env, timeout=300)
    def result(p):
        assert p.returncode == 0, p.stderr
        j = json.loads(p.stdout)
        j.pop("seed")  # drawn per request when none is given
        return j
    assert result(flag) == result(via_env) and result(flag) != result(plain)


def test_grammar_bench_with_and_without_precompute(bench_env, tmp_path, gannet):
    """bench grammar on two suite schemas: every valid document's tokens are allowed with the
    engine's compile-time precompute and without it (--no-precompute); the JSON reports the
    share of masks over 100 us; --no-precompute is refused, by name, for other benches."""
    from conftest import ROOT
    lines = [l for l in (ROOT / "tests/data/json_schema_suite.jsonl").read_text().splitlines() if l.strip()][:2]
    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(lines) + "\n")
    n_docs = sum(len(json.loads(l)["valid"]) for l in lines)
    tok = str(ROOT / "assets/tokenizers/deepseek-v3/tokenizer.json")
    for extra in ([], ["--no-precompute"]):
        out = tmp_path / "grammar.json"
        p = run_bench(bench_env, ["grammar", "--suite", str(suite), "--tokenizer", tok, "--vocab-size", "129280",
                                  "--json", str(out), *extra])
        j = json.loads(out.read_text())
        assert j["schemas"] == 2 and j["compile_failures"] == [] and j["token_failures"] == [], extra
        assert j["mask_us"]["n"] >= n_docs and 0 <= j["mask_us"]["over_100us"] <= 1, extra
        assert "over 100 us" in p.stdout
    p = gannet(["bench", "decode", "--model", "/nonexistent", "--no-precompute"], check=False)
    assert p.returncode == 2 and "--no-precompute applies to bench grammar only" in p.stderr


def test_vision_bench(bench_env, gannet):
    """bench vision on the vision golden's tower: the image's grid, tokens and FLOPs from the
    config (2 x the multiply-adds of the ViT, its attention and the aligner), one row per
    repeat; --image-size is refused by name elsewhere, and a model without a tower is refused."""
    from conftest import ROOT
    d, _ = bench_env
    model = ROOT / "tests" / "golden" / "deepseek-v41-vision-tiny"
    out = d / "vision.json"
    run_bench(bench_env, ["vision", "--model", str(model), "--image-size", "154x112", "--repeats", "2", "--json", str(out)])
    j = json.loads(out.read_text())
    check_meta(j, "vision")
    assert j["patch_grid"] == [8, 11] and j["tokens_per_image"] == 17
    C, I, N, L, D, r2 = 64, 176, 88, 2, 256, 9
    macs = N * 588 * C + L * (N * (4 * C * C + 3 * C * I) + 2 * N * N * C) + 12 * (r2 * C * D + D * D)
    assert j["flops_per_image"] == 2 * macs
    assert len(j["rows"]) == 2 and all(r["seconds"] > 0 for r in j["rows"])
    p = gannet(["bench", "decode", "--model", str(model), "--image-size", "10x10"], check=False)
    assert p.returncode == 2 and "--image-size applies to bench vision only" in p.stderr
    p = gannet(["bench", "vision", "--model", str(ROOT / "tests" / "golden" / "deepseek-v41-tiny")], check=False)
    assert p.returncode != 0 and "no vision tower" in p.stderr


def test_weight_memory_copy_is_recorded(bench_env, tiny_models):
    """--weight-memory copy copies every mapped byte: the meta says how many (the whole file,
    whose size the checkpoint directory tells)."""
    d, _ = bench_env
    out = d / "copy.json"
    model = tiny_models["llama"]
    run_bench(bench_env, ["decode", "--model", str(model), "--batch-sizes", "1", "--input-len", "4",
                          "--output-len", "4", "--weight-memory", "copy", "--json", str(out)])
    j = json.loads(out.read_text())
    assert j["weight_memory"] == "copy"
    assert j["weight_bytes_copied"] == sum(f.stat().st_size for f in model.glob("*.safetensors")), j
