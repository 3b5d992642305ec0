// lane_matmul: packing x and splitting columns across the pool for lane_gemm.h, on the
// ISA asked for.
#include "kernels/cpu/lane_gemm.h"

#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/parallel_grain.h"

namespace gannet::kernels {

int64_t lane_steps(LaneOrder order, int64_t k) {
  return order == LaneOrder::kF32 ? (k + 15) / 16 : 2 * ((k + 31) / 32);
}

namespace {

template <typename PackX, typename Cols>
void run(LaneOrder order, const float* x, int64_t m, int64_t k, int64_t n, ThreadPool* pool,
         int64_t x_floats, int64_t tiles, int64_t nr, PackX pack_x, Cols cols) {
  thread_local std::vector<float> scratch;  // grows only
  if (int64_t(scratch.size()) < x_floats) scratch.resize(size_t(x_floats));
  // The pool's threads must see this thread's buffer, not their own thread_local one.
  float* const xp = scratch.data();
  const bool parallel = pool && pool->size() > 1 && m * n * k >= kMinParallelMacs;
  if (parallel) pool->parallel_for(tiles, [&](int64_t b, int64_t e, int) { pack_x(order, x, m, k, b, e, xp); });
  else pack_x(order, x, m, k, 0, tiles, xp);
  if (parallel) pool->parallel_for(n, [&](int64_t b, int64_t e, int) { cols(xp, b, e); }, nr);
  else cols(xp, 0, n);
}

}  // namespace

int64_t lane_x_floats_isa(Isa isa, LaneOrder order, int64_t m, int64_t k) {
  GANNET_CHECK(lane_gemm_isa(isa), "lane GEMM on ", isa_name(isa));
  return isa == Isa::kAvx512 ? avx512::lane_x_floats(order, m, k) : avx2::lane_x_floats(order, m, k);
}

void lane_pack_x_isa(Isa isa, LaneOrder order, const float* x, int64_t m, int64_t k, float* xp) {
  GANNET_CHECK(lane_gemm_isa(isa), "lane GEMM on ", isa_name(isa));
  if (isa == Isa::kAvx512) avx512::lane_pack_x(order, x, m, k, 0, avx512::lane_tiles(m), xp);
  else avx2::lane_pack_x(order, x, m, k, 0, avx2::lane_tiles(m), xp);
}

void lane_gemm_cols_isa(Isa isa, LaneOrder order, const float* xp, int64_t m, int64_t k, const LaneWeight& w,
                        int64_t n0, int64_t n1, float* y, int64_t ldy) {
  GANNET_CHECK(lane_gemm_isa(isa), "lane GEMM on ", isa_name(isa));
  if (isa == Isa::kAvx512) avx512::lane_gemm_cols(order, xp, m, k, w, n0, n1, y, ldy);
  else avx2::lane_gemm_cols(order, xp, m, k, w, n0, n1, y, ldy);
}

void lane_matmul(Isa isa, LaneOrder order, const float* x, int64_t m, int64_t k, const LaneWeight& w, int64_t n,
                 float* y, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  GANNET_CHECK(isa == Isa::kAvx512 || isa == Isa::kAvx2, "lane GEMM on ", isa_name(isa));
  if (isa == Isa::kAvx512)
    return run(order, x, m, k, n, pool, avx512::lane_x_floats(order, m, k), avx512::lane_tiles(m),
               avx512::kLaneNr, avx512::lane_pack_x,
               [&](const float* xp, int64_t b, int64_t e) { avx512::lane_gemm_cols(order, xp, m, k, w, b, e, y, n); });
  run(order, x, m, k, n, pool, avx2::lane_x_floats(order, m, k), avx2::lane_tiles(m), avx2::kLaneNr,
      avx2::lane_pack_x,
      [&](const float* xp, int64_t b, int64_t e) { avx2::lane_gemm_cols(order, xp, m, k, w, b, e, y, n); });
}

}  // namespace gannet::kernels
