#!/usr/bin/env python3
"""numpy's default_rng(seed).integers(0, high, n, dtype=int64) for many seeds and bounds.

Writes tests/golden/numpy-integers.json, the reference for gannet's NumpyPcg64
(src/core/numpy_random.h), which DeepSeek-V4.1's Engram hash multipliers need.
Run with any numpy >= 1.17 (the generator has been stable since):
    .venv-golden/bin/python tools/make_numpy_random_golden.py
"""
import json
import pathlib

import numpy as np

SEEDS = [0, 1, 2, 7, 10007, 10007 * 14, 140098, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 123,
         2**63 + 99, 2**64 - 1]
BOUNDS = [1, 2, 3, 100, 2**16 + 1, 2**31 + 11, 2**32 - 1, 2**32, 2**32 + 1, 2**33 + 7,
          46539438283891, 9007199254740991, 2**62 + 3, 2**63 - 1]


def multiplier_bound(vocab):
    return max(1, (np.iinfo(np.int64).max // vocab) // 2)


def main():
    cases = []
    for seed in SEEDS:
        for high in BOUNDS:
            vals = np.random.default_rng(seed).integers(0, high, size=9, dtype=np.int64)
            cases.append({"seed": str(seed), "high": str(high), "values": [str(int(v)) for v in vals]})
    # The DeepSeek-V4.1 multipliers: released config (vocab 99092, layers 1 and 14, n-gram 4)
    # and the tiny test config (vocab 512, layer 1, n-gram 3).
    mult = []
    for vocab, layers, n in [(99092, [1, 14], 4), (512, [1], 3)]:
        bound = multiplier_bound(vocab)
        for layer in layers:
            v = np.random.default_rng(10007 * layer).integers(0, bound, size=n, dtype=np.int64) * 2 + 1
            mult.append({"compressed_vocab": vocab, "layer": layer, "n": n, "bound": str(bound),
                         "multipliers": [str(int(x)) for x in v]})
    out = {"numpy_version": np.__version__, "draws_per_case": 9, "cases": cases, "engram_multipliers": mult}
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden" / "numpy-integers.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
