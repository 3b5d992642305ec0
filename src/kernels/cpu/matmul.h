// Dense matmul against a Linear weight: y[m, n] = x[m, k] · w[n, k]ᵀ (Hugging Face layout,
// w row-major [n, k]). Each y element is one canonical dot (canonical.h) of its x row and
// w row, so a row's result does not depend on m, the other rows or the thread count.
// m == 1 is the decode GEMV and streams w once; bias, if any, is added by the caller.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::kernels {

// x: [m, k] f32, w: [n, k] f32, y: [m, n] f32. pool may be nullptr (calling thread only).
void matmul_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                ThreadPool* pool);
// As matmul_f32 with bf16 weights w: [n, k]; x is rounded to bf16 (nearest even) first.
void matmul_bf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                 ThreadPool* pool);

// The same on a chosen kernel path (tests and benchmarks); Isa::kScalar is the reference.
// The dispatching versions above use active_isa().
void matmul_f32_isa(Isa isa, const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                    float* y, ThreadPool* pool);
void matmul_bf16_isa(Isa isa, const float* x, int64_t m, int64_t k, const uint16_t* w,
                     int64_t n, float* y, ThreadPool* pool);

// How AVX-512 computes a bf16 product of more than one row: vdpbf16ps, or two FMAs per
// lane under DAZ/FTZ (same bits; from 64 rows on as the lane-split GEMM, lane_gemm.h). kAuto takes what bf16_gemm_choice() measured.
enum class Bf16Gemm { kAuto, kDpbf16, kFma };
const char* bf16_gemm_name(Bf16Gemm v);
void matmul_bf16_variant(Isa isa, Bf16Gemm variant, const float* x, int64_t m, int64_t k, const uint16_t* w,
                         int64_t n, float* y, ThreadPool* pool);
// The variant kAuto uses: GANNET_BF16_GEMM=dpbf16|fma if set, else measured once per
// process, at first use, on that call's pool (a few milliseconds): FMAs only when clearly
// faster (on some CPUs vdpbf16ps issues at half the FMA rate, on others it is the faster).
// kDpbf16 where AVX-512 is absent (the AVX2 path has its own FMA emulation).
Bf16Gemm bf16_gemm_choice(ThreadPool* pool = nullptr);

}  // namespace gannet::kernels
