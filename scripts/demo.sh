#!/usr/bin/env bash
# `make demo`: create a random-weight checkpoint (once) and generate from it.
# The weights are random, so the text is noise; it shows the whole path working.
set -euo pipefail
build=${1:-build}
model=models/demo-llama-small
if [ ! -f "$model/config.json" ]; then
  mkdir -p models
  "$build/gannet" make-model --arch llama --preset small --seed 1 --out "$model"
fi
"$build/gannet" info --model "$model"
echo
echo "== gannet generate (random weights: expect noise) =="
"$build/gannet" generate --model "$model" --prompt "The capital of France is" --max-tokens 32 --temperature 0.8 --seed 7

# DeepSeek-V4.1 (the tiny test shapes, released formats) with the DeepSeek-V3 tokenizer:
# its vocabulary and the Engram map the tokenizer gives (98,627 keys).
v41=models/demo-deepseek-v41-tiny
if [ ! -f "$v41/config.json" ]; then
  "$build/gannet" make-model --arch deepseek_v41 --preset tiny --seed 1 --out "$v41" \
      --config-overrides '{"vocab_size": 129280, "engram_compressed_vocab_size": 98627, "max_position_embeddings": 512}'
  cp assets/tokenizers/deepseek-v3/tokenizer.json assets/tokenizers/deepseek-v3/tokenizer_config.json "$v41/"
fi
echo
echo "== DeepSeek-V4.1 (tiny, random weights): info from its config, then generate =="
"$build/gannet" info --model "$v41"
"$build/gannet" generate --model "$v41" --prompt "The capital of France is" --max-tokens 16 --temperature 0.8 --seed 7
