#!/usr/bin/env python3
"""Reference outputs of the DeepSeek-V4 fake-quantization operators, from numpy + ml_dtypes.

Writes tests/golden/fake-quant.json: rows of float32 inputs (mixed magnitudes, zeros,
subnormals, exact ties, blocks cut short at the row's end) and, for each operator of
deepseek-v4-architecture.md §3.3 (FQ8 with f32 or power-of-two scales, FQ4, FQ4 with an
E4M3 scale), the output bits. Written from the specification independently of gannet's
C++ (src/kernels/cpu/fake_quant.cpp), which tests/unit/test_kernels_fake_quant.cpp checks
against this file; CI never needs ml_dtypes.

    .venv-golden/bin/python tools/make_fake_quant_golden.py
"""
import json
import os

import ml_dtypes
import numpy as np

F32 = np.float32


def pow2_ceil(s):
    b = np.asarray(s, dtype=F32).view(np.uint32)
    e = ((b >> 23) & 0xFF).astype(np.int64) - 127 + ((b & 0x7FFFFF) != 0)
    return np.ldexp(F32(1), e).astype(F32)


def e4m3(v):
    return np.asarray(v, dtype=F32).astype(ml_dtypes.float8_e4m3fn).astype(F32)


def e2m1(v):
    return np.asarray(v, dtype=F32).astype(ml_dtypes.float4_e2m1fn).astype(F32)


def blocks(x, block, fn):
    out = x.copy()
    for b0 in range(0, len(x), block):
        out[b0:b0 + block] = fn(x[b0:b0 + block])
    return out


def fq8(v, pow2):
    amax = np.maximum(np.max(np.abs(v)), F32(1e-4)).astype(F32)
    s = (amax * F32(1.0 / 448.0)).astype(F32)
    if pow2:
        s = pow2_ceil(s)
    q = e4m3(np.clip((v / s).astype(F32), F32(-448), F32(448)))
    return (q * s).astype(F32)


def fq4(v):
    amax = np.maximum(np.max(np.abs(v)), F32(6 * 2.0 ** -126)).astype(F32)
    s = pow2_ceil((amax / F32(6)).astype(F32))
    return (e2m1(np.clip((v / s).astype(F32), F32(-6), F32(6))) * s).astype(F32)


def fq4e(v):
    amax = np.maximum(np.max(np.abs(v)), F32(6 * 2.0 ** -9)).astype(F32)
    s = e4m3((amax / F32(6)).astype(F32))
    return (e2m1(np.clip((v / s).astype(F32), F32(-6), F32(6))) * s).astype(F32)


def bits(a):
    return [int(b) for b in np.asarray(a, dtype=F32).view(np.uint32)]


def main():
    rng = np.random.default_rng(11)
    rows = []
    for n, scale in ((96, 1.0), (100, 1e-3), (77, 300.0), (64, 1e-7), (33, 1e4), (128, 0.05)):
        x = (rng.standard_normal(n) * scale).astype(F32)
        x[::17] = 0
        if n > 40:
            x[5] = F32(-0.0)
            x[7] = F32(1e-40)  # subnormal
        rows.append(x)
    # A block whose values sit on E4M3 / E2M1 ties after scaling.
    rows.append(np.array([448, 416, 208, 13, 11.5, 6.5, 0.5, -3, 1.25, 5, 2.75, -0.75] * 3, dtype=F32))
    rows.append(np.zeros(40, dtype=F32))
    cases = []
    for x in rows:
        case = {"x": bits(x)}
        for name, block, fn in (("fq8_b32", 32, lambda v: fq8(v, False)), ("fq8_pow2_b32", 32, lambda v: fq8(v, True)),
                                ("fq8_pow2_b128", 128, lambda v: fq8(v, True)), ("fq4_b32", 32, fq4),
                                ("fq4e_b16", 16, fq4e)):
            case[name] = bits(blocks(x, block, fn))
        cases.append(case)
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "fake-quant.json")
    with open(out, "w") as f:
        json.dump({"generator": f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}",
                   "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}: {len(cases)} rows")


if __name__ == "__main__":
    main()
