"""--speculative through the real binary: the same outputs as without it, statistics in the
JSON, and every refused combination named."""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
V4 = ROOT / "tests" / "golden" / "deepseek-v4-tiny"
V41 = ROOT / "tests" / "golden" / "deepseek-v41-tiny"


def _lines(tmp_path):
    f = tmp_path / "p.jsonl"
    rows = [
        {"prompt_token_ids": [11, 12, 13, 14] * 8, "max_tokens": 24, "temperature": 0, "logprobs": 2},
        {"prompt": "one two three one two three one two", "max_tokens": 20, "temperature": 0.9, "seed": 3},
        {"prompt": "a b a b a b a", "max_tokens": 16, "temperature": 0, "n": 2},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_ngram_outputs_equal_plain_decoding(gannet, tmp_path, tiny_models):
    f = _lines(tmp_path)
    base = ["generate", "--model", str(tiny_models["llama"]), "--prompts", str(f), "--json"]
    plain = [json.loads(l) for l in gannet(base).stdout.splitlines()]
    for extra in (["--speculative", "ngram"], ["--speculative", "ngram", "--num-speculative-tokens", "7",
                                                "--ngram-min", "2", "--ngram-max", "3",
                                                "--async-scheduling", "off"]):
        p = gannet([*base, *extra])
        spec = [json.loads(l) for l in p.stdout.splitlines()]
        assert "[speculative:" in p.stderr
        total = 0
        for a, b in zip(plain, spec):
            assert a["token_ids"] == b["token_ids"] and a["text"] == b["text"]
            assert a.get("logprobs") == b.get("logprobs")
            assert a.get("outputs") == b.get("outputs")
            s = b["speculative"]
            assert s["steps"] > 0 and 0 <= s["accepted"] <= s["drafted"]
            assert s["mean_acceptance_length"] == (s["steps"] + s["accepted"]) / s["steps"]
            assert sum(s["accepted_at"]) == s["accepted"] and sum(s["drafted_at"]) == s["drafted"]
            total += s["accepted"]
        assert total > 0


def test_refusals_name_the_problem(gannet, tmp_path, tiny_models):
    m = ["--model", str(tiny_models["llama"]), "--prompt", "hi", "--max-tokens", "2"]
    cases = [
        (["--speculative", "medusa"], "--speculative must be off, ngram or dspark"),
        (["--speculative", "dspark"], "has no DSpark drafter"),
        (["--speculative", "ngram", "--speculative-verify", "varlen"], "needs --speculative dspark"),
        (["--num-speculative-tokens", "3"], "needs --speculative ngram or dspark"),
        (["--speculative", "ngram", "--num-speculative-tokens", "0"], "--num-speculative-tokens must be in [1, 16]"),
        (["--speculative", "ngram", "--ngram-min", "5", "--ngram-max", "2"], "--ngram-min / --ngram-max"),
    ]
    for extra, msg in cases:
        p = gannet(["generate", *m, *extra], check=False)
        assert p.returncode != 0 and msg in p.stderr, (extra, p.stderr)
    p = gannet(["generate", "--model", str(V4), "--prompts", str(_lines(tmp_path)), "--speculative", "dspark"],
               check=False)
    assert p.returncode != 0 and "has no DSpark drafter" in p.stderr and "DeepseekV4ForCausalLM" in p.stderr, p.stderr
    m41 = ["--model", str(V41), "--prompts", str(_lines(tmp_path))]
    for extra, msg in [
        (["--speculative", "ngram", "--speculative-sampling", "rejection"], "needs --speculative dspark"),
        (["--speculative", "dspark", "--num-speculative-tokens", "3", "--speculative-sampling", "rejection",
          "--speculative-verify", "varlen"], "varlen"),
        (["--speculative", "dspark", "--speculative-sampling", "maybe"], "--speculative-sampling must be exact or rejection"),
    ]:
        p = gannet(["generate", *m41, *extra], check=False)
        assert p.returncode != 0 and msg in p.stderr, (extra, p.stderr)



def test_dspark_outputs_equal_plain_decoding(gannet, tmp_path):
    f = tmp_path / "p.jsonl"
    rows = [
        {"prompt_token_ids": [5, 6, 7, 8, 9] * 4, "max_tokens": 12, "temperature": 0, "logprobs": 1},
        {"prompt_token_ids": [40, 41, 42], "max_tokens": 10, "temperature": 1.0, "seed": 5},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["generate", "--model", str(V41), "--prompts", str(f), "--json"]
    plain = [json.loads(l) for l in gannet(base).stdout.splitlines()]
    p = gannet([*base, "--speculative", "dspark", "--num-speculative-tokens", "3"])
    for a, b in zip(plain, [json.loads(l) for l in p.stdout.splitlines()]):
        assert a["token_ids"] == b["token_ids"] and a.get("logprobs") == b.get("logprobs")
        s = b["speculative"]
        assert s["steps"] > 0 and 0 < s["drafted"] <= 3 * s["steps"]
        assert len(s["drafted_at"]) == 3
    # The drafter proposes dspark_block_size (3 here) tokens; a checkpoint without one is named.
    p = gannet([*base, "--speculative", "dspark", "--num-speculative-tokens", "4"], check=False)
    assert p.returncode != 0 and "dspark_block_size = 3" in p.stderr, p.stderr
    bare = tmp_path / "bare"
    gannet(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--out", str(bare),
            "--config-overrides", '{"num_nextn_predict_layers": 0}'])
    p = gannet(["generate", "--model", str(bare), "--prompts", str(f), "--speculative", "dspark"], check=False)
    assert p.returncode != 0 and "has no DSpark drafter" in p.stderr and "mtp" in p.stderr, p.stderr


def test_bench_force_accept_is_refused_where_it_cannot_apply(gannet, tiny_models):
    m = ["--model", str(tiny_models["llama"])]
    p = gannet(["bench", "decode", *m, "--batch-sizes", "1", "--input-len", "8", "--output-len", "4",
                "--force-accept"], check=False)
    assert p.returncode != 0 and "--force-accept needs --speculative" in p.stderr, p.stderr
    p = gannet(["bench", "prefill", *m, "--force-accept"], check=False)
    assert p.returncode != 0 and "--force-accept applies to bench decode only" in p.stderr, p.stderr


def test_bench_reports_the_verify_steps_bytes(gannet, tmp_path):
    """A verify step reads the experts any of its 1 + k rows routes to: more bytes than the
    one-row step the plain columns count, and the bench puts them against the bandwidth."""
    out = tmp_path / "spec.json"
    gannet(["bench", "decode", "--model", str(V41), "--batch-sizes", "1", "--input-len", "8", "--output-len", "6",
            "--speculative", "dspark", "--num-speculative-tokens", "3", "--json", str(out)])
    row = json.loads(out.read_text())["rows"][0]
    assert row["drafts_per_step"] > 0 and row["verify_pct_bandwidth"] > 0, row
    wall = 1 * (6 - 1) / row["tokens_per_s"]
    plain_gb_per_step = row["gb_per_s"] * wall / row["steps_measured"]
    assert row["verify_gb_per_step"] > plain_gb_per_step, row
