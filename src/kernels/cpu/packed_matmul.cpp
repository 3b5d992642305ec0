// packed_matmul.h: the scalar column kernel, dispatch and the split over output columns.
#include "kernels/cpu/packed_matmul.h"

#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/dispatch.h"
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
}  // namespace

void matmul_packed_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool) {
  GANNET_CHECK(isa_supported(isa), "kernel path ", isa_name(isa), " is not supported by this CPU");
  GANNET_CHECK(m >= 0 && w.n >= 0 && w.k >= 0);
  if (m == 0 || w.n == 0) return;
  // The SIMD kernels need scale blocks along k that are whole 16-element chunks.
  const bool simd_ok = w.scales == nullptr || w.block_k % 16 == 0 || w.format == WeightFormat::kInt8Row;
  auto cols = pick_variant(isa, ref::matmul_packed_cols, avx2::matmul_packed_cols, avx512::matmul_packed_cols);
  if (!simd_ok) cols = ref::matmul_packed_cols;
  auto run = [&](int64_t b, int64_t e) { cols(x, m, w, b, e, y, w.n); };
  if (!pool || pool->size() == 1 || m * w.n * w.k < kMinParallelMacs) run(0, w.n);
  else pool->parallel_for(w.n, [&](int64_t b, int64_t e, int) { run(b, e); }, kColumnGrain);
}

void matmul_packed(const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool) {
  matmul_packed_isa(active_isa(), x, m, w, y, pool);
}

}  // namespace gannet::kernels
