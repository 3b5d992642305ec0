#!/usr/bin/env bash
# The tiny dense checkpoints the command-line tests share (tests/python/conftest.py reads
# them from GANNET_TEST_MODELS): made afresh by each ctest run, before any pytest entry.
# usage: make_test_models.sh GANNET_BINARY OUT_DIR
set -euo pipefail
gannet=$1 out=$2
rm -rf "$out"
mkdir -p "$out"
for arch in llama qwen2 qwen3; do
  "$gannet" make-model --arch "$arch" --preset tiny --seed 1 --out "$out/$arch-tiny"
done
touch "$out/complete"
