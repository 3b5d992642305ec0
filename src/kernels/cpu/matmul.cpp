// Dispatch, x conversion and the split over output columns for matmul.h.
#include "kernels/cpu/matmul.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/matmul_impl.h"

namespace gannet::kernels {

namespace {

// Column ranges handed to threads are multiples of this, so they start on tile edges of
// most variants (register tiles are 1, 2, 4 or, AVX-512 bf16 prefill, 6 columns wide; a
// range there may end in a narrower edge tile, which is only a speed matter: each output
// keeps its own accumulator wherever tiles fall).
constexpr int64_t kColumnGrain = 16;

// Below this many multiply-adds a call runs on the calling thread: waking the pool costs
// more than the work (tiny models, test shapes). Which thread computes a column never
// changes its bits, so this is only a speed decision.
constexpr int64_t kMinParallelMacs = int64_t(1) << 17;

template <typename Fn>
void over_columns(int64_t macs, int64_t n, ThreadPool* pool, const Fn& fn) {
  if (!pool || pool->size() == 1 || macs < kMinParallelMacs) {
    fn(0, n);
    return;
  }
  pool->parallel_for(n, [&](int64_t b, int64_t e, int) { fn(b, e); }, kColumnGrain);
}

// x rounded to bf16, rows padded with +0 to a multiple of 32 so kernels load whole chunks.
// Grows only; one per calling thread.
const uint16_t* to_bf16_padded(const float* x, int64_t m, int64_t k, int64_t ldx) {
  thread_local std::vector<uint16_t> scratch;  // [m, ldx]
  if (int64_t(scratch.size()) < m * ldx) scratch.resize(m * ldx);
  uint16_t* xb = scratch.data();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j) xb[i * ldx + j] = f32_to_bf16(x[i * k + j]);
    for (int64_t j = k; j < ldx; ++j) xb[i * ldx + j] = 0;
  }
  return xb;
}

}  // namespace

void matmul_f32_isa(Isa isa, const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                    float* y, ThreadPool* pool) {
  GANNET_CHECK(m >= 0 && k >= 0 && n >= 0, "m=", m, " k=", k, " n=", n);
  if (m == 0 || n == 0) return;
  auto cols = pick_variant(isa, ref::matmul_f32_cols, avx2::matmul_f32_cols, avx512::matmul_f32_cols);
  over_columns(m * n * k, n, pool, [&](int64_t b, int64_t e) { cols(x, m, k, w, b, e, y, n); });
}

void matmul_bf16_isa(Isa isa, const float* x, int64_t m, int64_t k, const uint16_t* w,
                     int64_t n, float* y, ThreadPool* pool) {
  GANNET_CHECK(m >= 0 && k >= 0 && n >= 0, "m=", m, " k=", k, " n=", n);
  if (m == 0 || n == 0) return;
  const int64_t ldx = (k + kBf16Chunk - 1) / kBf16Chunk * kBf16Chunk;
  const uint16_t* xb = to_bf16_padded(x, m, k, ldx);
  auto cols = pick_variant(isa, ref::matmul_bf16_cols, avx2::matmul_bf16_cols, avx512::matmul_bf16_cols);
  over_columns(m * n * k, n, pool, [&](int64_t b, int64_t e) { cols(xb, ldx, m, k, w, b, e, y, n); });
}

void matmul_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                ThreadPool* pool) {
  matmul_f32_isa(active_isa(), x, m, k, w, n, y, pool);
}

void matmul_bf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                 ThreadPool* pool) {
  matmul_bf16_isa(active_isa(), x, m, k, w, n, y, pool);
}

}  // namespace gannet::kernels
