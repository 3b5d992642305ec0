#!/usr/bin/env bash
# `make bench`: the standard sweep on the 1b preset. Writes JSON, CSV and a PNG under
# build/bench/. Takes several minutes on a small machine.
set -euo pipefail
build=${1:-build}
out="$build/bench"
model="$out/llama-1b"
mkdir -p "$out"
if [ ! -f "$model/config.json" ]; then
  "$build/gannet" make-model --arch llama --preset 1b --seed 1 --out "$model"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements-bench.txt
threads=${GANNET_BENCH_THREADS:-$(nproc)}
"$build/gannet" bench roofline --threads "$threads" --json "$out/roofline.json"
"$build/gannet" bench decode --model "$model" --threads "$threads" --batch-sizes 1,2,4,8,16,32,64 \
    --input-len 128 --output-len 32 --json "$out/decode.json" --csv "$out/decode.csv"
"$build/gannet" bench prefill --model "$model" --threads "$threads" --lengths 128,512,2048 \
    --json "$out/prefill.json" --csv "$out/prefill.csv"
.venv/bin/python tools/plot_bench.py "$out/decode.json" "$out/decode.png"
