#!/usr/bin/env python3
"""Reference decode/encode tables for gannet's small float formats, from ml_dtypes.

Writes tests/golden/dtype-tables.json: every code of FP8 E4M3 (fn), E8M0 (fnu) and FP4
E2M1 (fn) decoded to float32 bits, and float32 inputs (ties, subnormals, the largest
finite values, overflow, NaN, signed zero) encoded to E4M3 and E2M1 codes. gannet's C++
test (tests/unit/test_core_dtype.cpp) compares its own conversions with these; CI never
needs ml_dtypes.

    .venv-golden/bin/pip install ml_dtypes==0.6.0
    .venv-golden/bin/python tools/make_dtype_tables.py
"""
import json
import os
import sys

import ml_dtypes
import numpy as np


def f32_bits(values):
    return [int(b) for b in np.asarray(values, dtype=np.float32).view(np.uint32)]


def main():
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "dtype-tables.json")
    e4m3 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    e8m0 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    # float4_e2m1fn occupies a byte per value in numpy; codes 0..15.
    e2m1 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)

    rng = np.random.default_rng(7)
    samples = [0.0, -0.0, 1.0, -1.0, 448.0, -448.0, 449.0, 463.99, 464.0, 465.0, 480.0, 1e6, -1e6,
               np.inf, -np.inf, np.nan, 2.0 ** -6, 2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -10, 2.0 ** -11,
               3 * 2.0 ** -10, 0.3, -0.3, 6.0, -6.0, 5.0, 7.0, 8.0, 0.25, 0.75, 1.25, 2.5, 3.5, 1e-30]
    # Every midpoint between neighbouring E4M3 values (ties to even) and its two neighbours.
    finite = np.unique(e4m3[np.isfinite(e4m3) & (e4m3 >= 0)])
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    for m in mids:
        m32 = np.float32(m)
        samples += [float(m32), float(np.nextafter(m32, np.float32(0))), float(np.nextafter(m32, np.float32(np.inf)))]
    samples += list(rng.normal(0, 50, 200)) + list(rng.normal(0, 0.01, 100))
    samples = np.asarray(samples, dtype=np.float32)
    samples = np.concatenate([samples, -samples])
    enc_e4m3 = samples.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    enc_e2m1 = samples.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)

    tables = {
        "generator": f"ml_dtypes {ml_dtypes.__version__} / numpy {np.__version__}",
        "note": "float32 values as uint32 bit patterns; encodings round to nearest even, as ml_dtypes casts",
        "e4m3fn_decode": f32_bits(e4m3),
        "e8m0fnu_decode": f32_bits(e8m0),
        "e2m1fn_decode": f32_bits(e2m1),
        "encode_inputs": f32_bits(samples),
        "e4m3fn_encode": [int(c) for c in enc_e4m3],
        "e2m1fn_encode": [int(c) & 0xF for c in enc_e2m1],
    }
    with open(out, "w") as f:
        json.dump(tables, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}: {len(samples)} encode samples", file=sys.stderr)


if __name__ == "__main__":
    main()
