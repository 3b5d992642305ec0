// lane_matmul: packing x and splitting columns across the pool for lane_gemm.h.
#include "kernels/cpu/lane_gemm.h"

#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/parallel_grain.h"

namespace gannet::kernels {

void lane_matmul(avx512::LaneOrder order, const float* x, int64_t m, int64_t k, const avx512::LaneWeight& w,
                 int64_t n, float* y, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  thread_local std::vector<float> scratch;  // grows only
  const int64_t need = avx512::lane_x_floats(order, m, k);
  if (int64_t(scratch.size()) < need) scratch.resize(size_t(need));
  // The pool's threads must see this thread's buffer, not their own thread_local one.
  float* const xp = scratch.data();
  const int64_t tiles = avx512::lane_tiles(m);
  const bool parallel = pool && pool->size() > 1 && m * n * k >= kMinParallelMacs;
  if (parallel)
    pool->parallel_for(tiles, [&](int64_t b, int64_t e, int) { avx512::lane_pack_x(order, x, m, k, b, e, xp); });
  else
    avx512::lane_pack_x(order, x, m, k, 0, tiles, xp);
  auto cols = [&](int64_t b, int64_t e) { avx512::lane_gemm_cols(order, xp, m, k, w, b, e, y, n); };
  if (parallel) pool->parallel_for(n, [&](int64_t b, int64_t e, int) { cols(b, e); }, avx512::kLaneNr);
  else cols(0, n);
}

}  // namespace gannet::kernels
