// y[m, n] = x[m, k] · dequant(w)ᵀ for a packed weight (packed_weight.h), in its canonical
// order: every output is the canonical f32 dot of its x row with the dequantized w row, so
// it depends on neither the batch, the thread count nor the ISA. The AVX-512 and AVX2
// variants decode in registers (packed_matmul_avx512.cpp, packed_matmul_avx2.cpp); scale
// blocks along k that are not whole 16-element chunks run the scalar reference.
#pragma once

#include <cstdint>
#include <span>

#include "core/cpu_features.h"
#include "kernels/cpu/packed_weight.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::kernels {

// x: [m, w.k], y: [m, w.n]; pool may be nullptr.
void matmul_packed(const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool);
void matmul_packed_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool);

// Several products of the same x, y_i = x · dequant(w_i)ᵀ ([m, w_i.n]), with one fork-join
// for all of those that run on the column kernels (a decode step's projections of one
// input): the bits of matmul_packed one by one. Those that take the lane GEMM (prefill)
// still run one by one. Every w_i.k must equal the first's.
struct PackedProduct {
  const PackedWeight* w;
  float* y;
};
void matmul_packed_many(const float* x, int64_t m, std::span<const PackedProduct> products, ThreadPool* pool);
void matmul_packed_many_isa(Isa isa, const float* x, int64_t m, std::span<const PackedProduct> products,
                            ThreadPool* pool);

// Columns [n0, n1) of the same product for all m rows of x, on the calling thread:
// y[i * ldy + j] for j in [n0, n1). For callers that split the work themselves (the grouped
// MoE layer runs many experts' column tiles in one parallel loop); the bits are those of
// matmul_packed. x: [m, w.k]; y: [m, ldy], ldy >= n1.
void matmul_packed_cols_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1,
                            float* y, int64_t ldy);

// The fewest x rows from which matmul_packed runs w on the lane GEMM (lane_gemm.h) on this
// ISA (INT64_MAX: never): callers that pack x themselves for it (the MoE's experts) use
// the same crossover. Below it the column kernels run.
int64_t packed_lane_min_rows(Isa isa, const PackedWeight& w);

}  // namespace gannet::kernels
