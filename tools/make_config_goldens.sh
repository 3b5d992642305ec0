#!/usr/bin/env bash
# Regenerates the golden files for dense configurations unlike the presets
# (tests/golden/cfg-*.json): odd shapes, every rope scaling type in both config
# spellings, GELU activations, biases everywhere, f16/f32 weights. Each checkpoint is
# made by `gannet make-model --config-overrides`, so the C++ golden test can rebuild it.
# Needs build/gannet and the venv of tools/requirements-golden.txt (.venv-golden).
set -euo pipefail
cd "$(dirname "$0")/.."
GANNET=${GANNET:-build/gannet}
PY=${PY:-.venv-golden/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

golden() {  # name arch dtype overrides [extra make_goldens.py flags]; ONLY=name: just that one
  local name=$1 arch=$2 dtype=$3 overrides=$4 extra=${5:-}
  if [[ -n "${ONLY:-}" && "$ONLY" != "$name" ]]; then return; fi
  "$GANNET" make-model --arch "$arch" --preset tiny --seed 3 --dtype "$dtype" \
      --config-overrides "$overrides" --out "$tmp/$name" 2>/dev/null
  "$PY" tools/make_goldens.py --model "$tmp/$name" --name "$name" --threads 2 \
      --make-model "$arch:tiny:3" --make-model-dtype "$dtype" --make-model-overrides "$overrides" $extra
}

# head_dim 24 (hidden/heads = 16), MHA (kv heads = heads), odd ffn, untied, f16 weights,
# linear rope scaling in transformers 5's rope_parameters spelling.
golden cfg-llama-mha-linear llama f16 '{"head_dim": 24, "num_key_value_heads": 4, "intermediate_size": 171,
  "tie_word_embeddings": false, "rope_scaling": null, "rope_theta": null,
  "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}'
# Biases on q/k/v/o and on the MLP, gelu_pytorch_tanh, llama3 scaling in rope_parameters.
golden cfg-llama-bias-gelu-tanh llama f32 '{"attention_bias": true, "mlp_bias": true,
  "hidden_act": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "rope_scaling": null, "rope_theta": null,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
  "high_freq_factor": 4.0, "original_max_position_embeddings": 256}}'
# YaRN with truncate false (a fractional correction range), erf GELU, Qwen3 with
# attention_bias (q/k/v/o) and head_dim 32.
golden cfg-qwen3-yarn-notrunc-gelu qwen3 f32 '{"hidden_act": "gelu", "attention_bias": true, "head_dim": 32,
  "rope_theta": null, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
  "original_max_position_embeddings": 1024, "truncate": false}}'
# YaRN with truncate true (legacy rope_scaling spelling), gelu_new, one kv head, odd ffn,
# Qwen2.5-style inactive sliding-window fields. (bf16 weights are left out: their GEMM
# rounds activations to bf16 as vdpbf16ps does, ~1e-3 from an f32 reference.)
golden cfg-qwen2-yarn-trunc-gelu-new qwen2 f32 '{"hidden_act": "gelu_new", "num_key_value_heads": 1,
  "intermediate_size": 97, "rope_theta": 10000.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
  "original_max_position_embeddings": 1024, "truncate": true}, "use_sliding_window": false,
  "sliding_window": 4096, "max_window_layers": 1}'
# FP8 block-scaled linears (Hugging Face fine-grained FP8, 128x128 f32 weight_scale_inv),
# two blocks along k or n in places. Every shape is a multiple of 128: transformers' CPU
# dequantization derives the block from rows / scale_rows, which is wrong for a partial
# edge block (gannet follows the ceil-div block grid; its kernel tests cover edges).
golden cfg-llama-fp8 llama fp8 '{"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
  "head_dim": 64, "intermediate_size": 256}'
# int8 with one scale per output row (compressed-tensors channel scheme), Qwen3 q/k norms.
golden cfg-qwen3-int8 qwen3 int8 '{"intermediate_size": 200}'
# The same FP8 model with --exact-activations: each FP8 linear's input fake-quantized to
# E4M3 per 128 (f32 scales), by a hook in the reference.
golden cfg-llama-fp8-exact llama fp8 '{"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
  "head_dim": 64, "intermediate_size": 256}' --exact-activations
