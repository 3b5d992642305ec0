#!/usr/bin/env python3
"""Produce a golden reference file from Hugging Face transformers (float32, CPU).

The golden holds, for a prompt run through a (tiny, random-weight) checkpoint:
logits at every prompt position (or at --logit-rows evenly spaced positions, for
long prompts) for a fixed subset of vocabulary columns, the full-vocabulary
logsumexp and argmax at every position, and a greedy continuation.
gannet's C++ tests compare their own forward pass against the committed file;
CI never runs torch.

Usage (from the repository root, with the venv of tools/requirements-golden.txt):
    .venv-golden/bin/python tools/make_goldens.py --model DIR --name NAME \
        [--out tests/golden/NAME.json] [--prompt TEXT | --prompt-file F] [--steps 16]
        [--logit-rows N] [--bos-id ID|-1] [--threads N] [--make-model ARCH:PRESET:SEED]

DIR must hold config.json, *.safetensors, tokenizer.json and tokenizer_config.json.
The script refuses a checkpoint whose weights do not all load (missing,
unexpected or shape-mismatched tensors), because transformers would silently
randomly initialise what is missing and the golden would be meaningless.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

DEFAULT_PROMPT = "The quick brown fox jumps over the lazy dog. 1234 émigré 北京"
DENSE_COLUMNS = 1024   # logits of ids 0..1023 are always stored
COLUMN_STRIDE = 61     # then every 61st id from 1024 up to vocab_size-1
SIZE_LIMIT = 1 << 20   # a golden should stay under 1 MB


def f32_text(values):
    """float32 values -> Python floats whose repr is the shortest decimal that
    round-trips to the same float32 (what numpy's str() of a float32 gives)."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float32)
    out = [float(str(v)) for v in arr]
    back = np.asarray(out, dtype=np.float64).astype(np.float32)
    if not np.array_equal(back.view(np.uint32), arr.view(np.uint32)):
        raise AssertionError("float32 decimal round-trip failed")
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dumps_golden(obj):
    """Compact JSON with one top-level key per line and one logits row per line."""
    c = dict(separators=(",", ":"), ensure_ascii=False)
    lines = []
    items = list(obj.items())
    for i, (k, v) in enumerate(items):
        end = "," if i + 1 < len(items) else ""
        if k == "logits":
            rows = [json.dumps(r, **c) for r in v]
            body = "[\n" + ",\n".join("  " + r for r in rows) + "\n ]"
        else:
            body = json.dumps(v, **c)
        lines.append(" " + json.dumps(k) + ":" + body + end)
    return "{\n" + "\n".join(lines) + "\n}\n"


def is_int8_checkpoint(model_dir):
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        q = json.load(f).get("quantization_config") or {}
    return q.get("quant_method") == "compressed-tensors"


def dequantize_int8_checkpoint(src, dst):
    """Copy a compressed-tensors channel-int8 checkpoint as float32: every I8 `X.weight`
    with its `X.weight_scale` [n, 1] becomes q * scale (float32, one rounding); the
    quantization_config is dropped. FP8 checkpoints need no such step: transformers
    dequantizes them itself on a CPU (weight_scale_inv per block, exactly q * s in f32)."""
    import shutil
    import numpy as np
    from safetensors.numpy import load_file, save_file

    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        path = os.path.join(src, f)
        if f.endswith(".safetensors"):
            t = load_file(path)
            out = {}
            for k, v in t.items():
                if k.endswith("_scale"):
                    continue
                if v.dtype == np.int8:
                    scale = t[k + "_scale"].astype(np.float32).reshape(-1, 1)
                    out[k] = v.astype(np.float32) * scale
                else:
                    out[k] = v
            save_file(out, os.path.join(dst, f), metadata={"format": "pt"})
        elif f == "config.json":
            with open(path, encoding="utf-8") as fh:
                cfg = json.load(fh)
            cfg.pop("quantization_config", None)
            with open(os.path.join(dst, f), "w", encoding="utf-8") as fh:
                json.dump(cfg, fh, indent=2)
        elif f == "model.safetensors.index.json":
            sys.exit("error: sharded int8 checkpoints are not handled here")
        elif os.path.isfile(path):
            shutil.copy(path, os.path.join(dst, f))


def fq8_rows(x, block, pow2):
    """FQ8 of deepseek-v4-architecture.md §3.3 over the last dimension, per block: the
    numpy + ml_dtypes implementation of tools/make_fake_quant_golden.py (independent of
    gannet's C++)."""
    import numpy as np
    import torch
    from make_fake_quant_golden import blocks, fq8

    a = x.detach().to("cpu").numpy().astype(np.float32)
    flat = a.reshape(-1, a.shape[-1])
    out = np.stack([blocks(row, block, lambda v: fq8(v, pow2)) for row in flat])
    return torch.from_numpy(out.reshape(a.shape))


def add_fp8_activation_hooks(model, model_dir):
    """Registers a pre-hook on every linear whose checkpoint weight is FP8 E4M3."""
    from safetensors import safe_open
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        q = json.load(f).get("quantization_config") or {}
    if q.get("quant_method") != "fp8":
        sys.exit("error: --exact-activations needs an FP8 checkpoint")
    block = int((q.get("weight_block_size") or [128, 128])[1])
    pow2 = q.get("scale_fmt") == "ue8m0"
    fp8 = set()
    for f in os.listdir(model_dir):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, f), framework="pt") as st:
                for k in st.keys():
                    if k.endswith(".weight") and str(st.get_slice(k).get_dtype()) in ("F8_E4M3", "float8_e4m3fn"):
                        fp8.add(k[: -len(".weight")])
    hooked = 0
    for name, mod in model.named_modules():
        if name in fp8:
            mod.register_forward_pre_hook(lambda m, inp: (fq8_rows(inp[0], block, pow2),))
            hooked += 1
    if hooked != len(fp8):
        sys.exit(f"error: hooked {hooked} linears, the checkpoint has {len(fp8)} FP8 weights")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json, safetensors, tokenizer)")
    ap.add_argument("--name", required=True, help="golden name, also the default output file name")
    ap.add_argument("--out", help="output path (default tests/golden/NAME.json)")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("--prompt-file", help="read the prompt from this UTF-8 file, as is (overrides --prompt)")
    ap.add_argument("--logit-rows", type=int, default=0,
                    help="store logits rows only at this many evenly spaced positions, first and last "
                         "included (0: every position); keeps long-prompt goldens under 1 MB")
    ap.add_argument("--steps", type=int, default=16, help="greedy tokens to generate")
    ap.add_argument("--bos-id", type=int, default=None,
                    help="override the BOS id to prepend (-1: prepend none)")
    ap.add_argument("--make-model", metavar="ARCH:PRESET:SEED",
                    help="record how DIR was made (`gannet make-model --arch ARCH --preset PRESET --seed SEED`) "
                         "as \"make_model\" in the golden, so the C++ test can rebuild the checkpoint")
    ap.add_argument("--make-model-dtype", choices=["f32", "bf16", "f16", "fp8", "int8"],
                    help="record the --dtype DIR was made with (with --make-model)")
    ap.add_argument("--make-model-overrides", metavar="JSON",
                    help="record the --config-overrides DIR was made with (with --make-model)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--exact-activations", action="store_true",
                    help="FP8 checkpoints: fake-quantize each FP8 linear's input rows to E4M3 per "
                         "weight_block_size block (power-of-two scales with scale_fmt ue8m0), as "
                         "`gannet --exact-activations on` and the GPU kernels do")
    args = ap.parse_args(argv)
    make_model = None
    if args.make_model:
        parts = args.make_model.split(":")
        if len(parts) != 3 or not parts[2].isdigit():
            ap.error("--make-model wants ARCH:PRESET:SEED, e.g. qwen3:tiny:0")
        make_model = {"arch": parts[0], "preset": parts[1], "seed": int(parts[2])}
        if args.make_model_dtype:
            make_model["dtype"] = args.make_model_dtype
        if args.make_model_overrides:
            make_model["config_overrides"] = json.loads(args.make_model_overrides)
    elif args.make_model_dtype or args.make_model_overrides:
        ap.error("--make-model-dtype and --make-model-overrides go with --make-model")
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8") as f:
            args.prompt = f.read()

    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # nothing random is used; for peace of mind only
    out_path = args.out or os.path.join("tests", "golden", args.name + ".json")

    model_dir = args.model
    if is_int8_checkpoint(args.model):
        # transformers reads compressed-tensors int8 only through that package; the
        # reference weight is what it decompresses to, q * scale in float32.
        import tempfile
        tmp_dir = tempfile.mkdtemp(prefix="golden-int8-")
        dequantize_int8_checkpoint(args.model, tmp_dir)
        model_dir = tmp_dir
    kw = dict(attn_implementation="eager", output_loading_info=True)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kw)
    except TypeError:  # transformers < 4.56 only knows torch_dtype
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kw)
    bad = {k: list(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        sys.exit(f"error: checkpoint does not load cleanly: {bad}")
    model.eval()
    model.to("cpu")
    if args.exact_activations:
        add_fp8_activation_hooks(model, args.model)
    cfg = model.config
    if any(p.dtype != torch.float32 for p in model.parameters()):
        sys.exit("error: model parameters are not all float32")

    out_emb = model.get_output_embeddings()
    in_emb = model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr()

    # The reference tokenization is tokenizer.json run by the `tokenizers` library, which
    # is what gannet implements. AutoTokenizer is only cross-checked: transformers 5 maps
    # some model types to their own tokenizer class whatever tokenizer_config.json says
    # (model_type "qwen2" -> Qwen2Tokenizer), which replaces tokenizer.json's pre-tokenizer.
    tok = AutoTokenizer.from_pretrained(args.model)
    auto_ids = list(tok(args.prompt, add_special_tokens=False)["input_ids"])
    tok_json = os.path.join(args.model, "tokenizer.json")
    if os.path.exists(tok_json):
        import tokenizers
        text_ids = tokenizers.Tokenizer.from_file(tok_json).encode(args.prompt, add_special_tokens=False).ids
        tokenizer_used = f"tokenizers {tokenizers.__version__} (tokenizer.json)"
    else:
        text_ids = auto_ids
        tokenizer_used = f"AutoTokenizer ({type(tok).__name__})"
    auto_agrees = list(text_ids) == auto_ids
    if not auto_agrees:
        print(f"warning: AutoTokenizer ({type(tok).__name__}) tokenizes the prompt differently from "
              f"tokenizer.json; using tokenizer.json's ids", file=sys.stderr)

    gen_cfg = getattr(model, "generation_config", None)
    if args.bos_id is not None:
        bos, bos_source = (None if args.bos_id < 0 else args.bos_id), "--bos-id"
    elif gen_cfg is not None and getattr(gen_cfg, "bos_token_id", None) is not None:
        bos, bos_source = gen_cfg.bos_token_id, "generation_config.bos_token_id"
    elif getattr(cfg, "bos_token_id", None) is not None:
        bos, bos_source = cfg.bos_token_id, "config.bos_token_id"
    else:
        bos, bos_source = None, "none"
    if isinstance(bos, (list, tuple)):
        bos = bos[0]
    if bos is not None and tok.bos_token_id is not None and bos != tok.bos_token_id:
        print(f"warning: BOS id {bos} ({bos_source}) differs from the tokenizer's bos_token_id "
              f"{tok.bos_token_id}; using {bos}", file=sys.stderr)
    prompt_ids = ([bos] if bos is not None else []) + list(text_ids)
    if not prompt_ids:
        sys.exit("error: empty prompt")

    vocab = int(cfg.vocab_size)
    with torch.no_grad():
        x = torch.tensor([prompt_ids], dtype=torch.long)
        logits = model(input_ids=x, use_cache=False).logits[0].to(torch.float32)  # [T, V]
        if logits.shape != (len(prompt_ids), vocab):
            sys.exit(f"error: logits shape {tuple(logits.shape)}, expected ({len(prompt_ids)}, {vocab})")
        if not torch.isfinite(logits).all():
            sys.exit("error: non-finite logits")
        lse = torch.logsumexp(logits.to(torch.float64), dim=-1)
        argmax = logits.argmax(dim=-1)                      # first index among equal maxima
        top2 = logits.topk(2, dim=-1).values
        margins = (top2[:, 0] - top2[:, 1])

        # Greedy continuation: a full forward pass (no KV cache) per step, argmax of
        # the last position. EOS is not special: the loop always runs --steps steps.
        ids = list(prompt_ids)
        greedy, greedy_margins = [], []
        for _ in range(args.steps):
            last = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0, -1]
            last = last.to(torch.float32)
            nxt = int(last.argmax())
            t2 = last.topk(2).values
            greedy.append(nxt)
            greedy_margins.append(float(t2[0] - t2[1]))
            ids.append(nxt)
        if greedy and greedy[0] != int(argmax[-1]):
            sys.exit("error: first greedy token differs from the last prompt position's argmax")

    columns = set(range(min(DENSE_COLUMNS, vocab)))
    columns.update(range(DENSE_COLUMNS, vocab, COLUMN_STRIDE))
    columns.update(int(a) for a in argmax)
    columns = sorted(columns)
    n_pos = len(prompt_ids)
    if args.logit_rows <= 0 or args.logit_rows >= n_pos:
        rows = list(range(n_pos))
    elif args.logit_rows == 1:
        rows = [n_pos - 1]
    else:
        rows = sorted({round(i * (n_pos - 1) / (args.logit_rows - 1)) for i in range(args.logit_rows)})
    sub = logits[torch.tensor(rows, dtype=torch.long)][:, torch.tensor(columns, dtype=torch.long)].numpy()

    files = sorted(f for f in os.listdir(args.model) if f.endswith(".safetensors")
                   or f in ("config.json", "generation_config.json", "model.safetensors.index.json"))
    resolved = {}
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_parameters", "rope_theta",
                "max_position_embeddings", "attention_bias", "mlp_bias", "hidden_act", "tie_word_embeddings",
                "bos_token_id", "eos_token_id", "use_sliding_window", "sliding_window", "layer_types"):
        if hasattr(cfg, key):
            v = getattr(cfg, key)
            if v is None or isinstance(v, (int, float, str, bool, list, dict)):
                resolved[key] = v

    golden = {
        "name": args.name,
        "architecture": (cfg.architectures or [type(model).__name__])[0],
        **({"make_model": make_model} if make_model else {}),
        "generator": f"transformers {transformers.__version__} / torch {torch.__version__}, float32, CPU",
        "prompt": args.prompt,
        "prompt_ids": [int(i) for i in prompt_ids],
        "tokenizer": tokenizer_used,
        "autotokenizer_agrees": auto_agrees,
        "bos_id": bos,
        "bos_source": bos_source,
        "vocab_size": vocab,
        "lm_head_tied": bool(tied),
        "resolved_config": resolved,
        "checkpoint_sha256": {f: sha256_file(os.path.join(args.model, f)) for f in files},
        "logits_format": "float32, shortest decimal that round-trips to the same float32",
        "logit_positions": rows,
        "logit_columns": columns,
        "logits": [f32_text(row) for row in sub],
        "logsumexp": [float(v) for v in lse.tolist()],
        "argmax": [int(a) for a in argmax],
        "argmax_margins": f32_text(margins.numpy()),
        "greedy_ids": greedy,
        "greedy_margins": f32_text(np.asarray(greedy_margins, dtype=np.float32)),
        "tolerance": {"abs": 1e-3, "rel": 1e-3},
        **({"exact_activations": True} if args.exact_activations else {}),
    }
    for v in golden["logsumexp"]:
        if not math.isfinite(v):
            sys.exit("error: non-finite logsumexp")

    text = dumps_golden(golden)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    size = len(text.encode("utf-8"))
    print(f"wrote {out_path}: {len(prompt_ids)} prompt ids, {len(columns)} columns, {args.steps} greedy steps, "
          f"{size} bytes, {time.time() - t0:.1f} s")
    if size > SIZE_LIMIT:
        print(f"warning: {out_path} is {size} bytes (> 1 MB); use a shorter prompt", file=sys.stderr)
    small = min(golden["argmax_margins"] + golden["greedy_margins"]) if args.steps else min(golden["argmax_margins"])
    if small < 1e-3:
        print(f"warning: smallest top-1/top-2 logit margin is {small:g}; argmax/greedy ids may be "
              "fragile against tolerance-level differences", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
