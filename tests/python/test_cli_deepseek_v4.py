"""DeepSeek-V4-Flash from the command line: `make-model --arch deepseek_v4` writes the released
formats (the tiny preset: exactly the tensor names, dtypes and shapes of the transformers
reference checkpoint tests/golden/deepseek-v4-tiny, drafter aside), byte-identical for a
seed and loadable by the engine; `gannet info` works from config.json alone, its parameter
count and KV bytes per token computed independently here from the reference's header and
the compression schedule."""
import json
import struct

from conftest import ROOT, run

GOLDEN = ROOT / "tests" / "golden" / "deepseek-v4-tiny"


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in h.items()}


def test_make_model_writes_the_released_layout(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        run(["make-model", "--arch", "deepseek_v4", "--preset", "tiny", "--seed", "3", "--out", str(d)])
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    want = {k: v for k, v in header(GOLDEN / "model.safetensors").items() if not k.startswith("mtp.")}
    assert header(a / "model.safetensors") == want
    # Hash routing: every token's experts are distinct and in range.
    out = json.loads(run(["generate", "--model", str(a), "--prompts", "/dev/stdin", "--json"],
                         input=json.dumps({"prompt_token_ids": [0, 5, 9], "max_tokens": 4, "temperature": 0}) + "\n").stdout)
    assert len(out["token_ids"]) == 4
    p = run(["make-model", "--arch", "deepseek_v4", "--preset", "huge", "--out", str(tmp_path / "c")], check=False)
    assert p.returncode != 0 and "tiny or small" in p.stderr


def test_info_from_config_alone(tmp_path):
    (tmp_path / "config.json").write_bytes((GOLDEN / "config.json").read_bytes())
    j = json.loads(run(["info", "--model", str(tmp_path), "--json"]).stdout)
    assert j["weights_present"] is False and j["architecture"] == "DeepseekV4ForCausalLM"
    h = header(GOLDEN / "model.safetensors")
    params = 0
    for name, (dtype, shape) in h.items():
        if name.startswith("mtp.") or dtype in ("F8_E8M0", "I64"):
            continue
        n = 1
        for s in shape:
            n *= s
        params += 2 * n if dtype == "I8" else n  # two MXFP4 codes a byte
    assert j["num_parameters"] == params
    cfg = json.loads((GOLDEN / "config.json").read_text())
    D, idh = cfg["head_dim"], cfg["index_head_dim"]
    kv = sum((D + (idh if r == 4 else 0)) * 4 / r for r in cfg["compress_ratios"][:cfg["num_hidden_layers"]] if r)
    assert j["kv_bytes_per_token"] == kv
    assert j["read_bytes_per_token"] < j["weight_bytes"]
    j2 = json.loads(run(["info", "--model", str(GOLDEN), "--json"]).stdout)  # with the weights: checked too
    assert j2["weights_present"] is True and j2["num_parameters"] == params
