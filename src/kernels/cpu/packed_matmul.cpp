// packed_matmul.h: the scalar column kernel, dispatch and the split over output columns.
#include "kernels/cpu/packed_matmul.h"

#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/packed_matmul_impl.h"

namespace gannet::kernels {

namespace ref {
GANNET_MATMUL_PACKED_COLS(matmul_packed_cols) {
  thread_local std::vector<float> row;  // [k], grows only
  if (int64_t(row.size()) < w.k) row.resize(size_t(w.k));
  for (int64_t j = n0; j < n1; ++j) {
    w.dequant_row(j, row.data());
    for (int64_t i = 0; i < m; ++i) y[i * ldy + j] = dot_f32_ref(x + i * w.k, row.data(), w.k);
  }
}
}  // namespace ref

namespace {
constexpr int64_t kColumnGrain = 16;
constexpr int64_t kMinParallelMacs = int64_t(1) << 17;

using ColsFn = void (*)(const float*, int64_t, const PackedWeight&, int64_t, int64_t, float*, int64_t);

ColsFn pick_cols(Isa isa, const PackedWeight& w) {
  GANNET_CHECK(isa_supported(isa), "kernel path ", isa_name(isa), " is not supported by this CPU");
  // The AVX-512 kernel needs scale blocks along k that are whole 16-element chunks.
  const bool simd_ok = w.scales == nullptr || w.block_k % 16 == 0 || w.format == WeightFormat::kInt8Row;
  return isa == Isa::kAvx512 && simd_ok ? avx512::matmul_packed_cols : ref::matmul_packed_cols;
}
}  // namespace

void matmul_packed_cols_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1,
                            float* y, int64_t ldy) {
  GANNET_CHECK(m >= 0 && 0 <= n0 && n0 <= n1 && n1 <= w.n && ldy >= n1, "columns [", n0, ", ", n1, ") of ", w.n,
               ", ldy ", ldy);
  if (m == 0 || n0 == n1) return;
  pick_cols(isa, w)(x, m, w, n0, n1, y, ldy);
}

void matmul_packed_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool) {
  GANNET_CHECK(m >= 0 && w.n >= 0 && w.k >= 0);
  const ColsFn cols = pick_cols(isa, w);
  if (m == 0 || w.n == 0) return;
  auto run = [&](int64_t b, int64_t e) { cols(x, m, w, b, e, y, w.n); };
  if (!pool || pool->size() == 1 || m * w.n * w.k < kMinParallelMacs) run(0, w.n);
  else pool->parallel_for(w.n, [&](int64_t b, int64_t e, int) { run(b, e); }, kColumnGrain);
}

void matmul_packed(const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool) {
  matmul_packed_isa(active_isa(), x, m, w, y, pool);
}

}  // namespace gannet::kernels
