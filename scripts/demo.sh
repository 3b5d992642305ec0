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
