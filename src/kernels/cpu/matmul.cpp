// Dispatch, x conversion and the split over output columns for matmul.h.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/parallel_grain.h"

namespace gannet::kernels {

namespace {

// From this many x rows on, AVX-512 products run as lane-split GEMMs (lane_gemm.h). Below
// them the 12-row tiles waste padding and packing w costs more than it saves: on the
// 2-core Xeon VM (n = k = 2048, 2 threads) the lane GEMM measured 1.35x the 4x4 f32 tiles
// at 64 rows and level at 32; for bf16 level with the FMA tiles at 64 and 0.8x at 32.
// AVX2 takes its own lane GEMM (6 x 16 tiles) from the same sizes: the 1b model's pp512
// ran 2.2-2.3x faster than on the 16-lane AVX2 tiles.
constexpr int64_t kLaneMinRowsF32 = 48;
constexpr int64_t kLaneMinRowsBf16 = 64;

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

// As to_bf16_padded, with each 32-element chunk stored as its 16 odd elements then its
// 16 even ones, as f32 (matmul_impl.h's split layout).
const float* to_bf16_split(const float* x, int64_t m, int64_t k, int64_t ldx) {
  thread_local std::vector<float> scratch;  // [m, ldx]
  if (int64_t(scratch.size()) < m * ldx) scratch.resize(m * ldx);
  float* xs = scratch.data();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < ldx; c += kBf16Chunk)
      for (int64_t l = 0; l < kBf16Chunk / 2; ++l) {
        const int64_t odd = c + 2 * l + 1, even = c + 2 * l;
        xs[i * ldx + c + l] = odd < k ? bf16_to_f32(f32_to_bf16(x[i * k + odd])) : 0.0f;
        xs[i * ldx + c + kBf16Chunk / 2 + l] = even < k ? bf16_to_f32(f32_to_bf16(x[i * k + even])) : 0.0f;
      }
  return xs;
}

// Times both AVX-512 bf16 GEMM variants on a prefill-shaped problem (192 rows, 128
// columns, k = 2048: 100 MFLOP each, the lane-split GEMM on the FMA side) on the pool of
// the first call that asks, and takes the FMA route only when it is at least 10 % faster.
// The two are timed in alternation, 8 rounds of 2 products each (the first round warms
// caches and wakes the pool), best round each: timed one after the other with single
// products (0.2-0.4 ms windows), a burst of host noise or a slow thread wake-up during
// one variant's turn decided the choice, and on the noisy Zen 4 VM 3 of 5 processes took
// the FMA route at 88-93 tok/s on the 1b model's pp512 where vdpbf16ps ran 149-151. On the
// 2-core Xeon VM the lane GEMM ran that pp512 1.4x faster than vdpbf16ps; before it, 4x4
// FMA tiles had lost to vdpbf16ps by 8-10 %. Both give the same bits (the FMA route
// follows vdpbf16ps's element order), so the choice only moves time.
Bf16Gemm measure_bf16_gemm(ThreadPool* pool) {
  if (!isa_supported(Isa::kAvx512)) return Bf16Gemm::kDpbf16;
  const int64_t m = 192, n = 128, k = 2048;
  std::vector<float> x(size_t(m * k)), y(size_t(m * n));
  std::vector<uint16_t> w(size_t(n * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) * 0.125f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(float(int(i % 7) - 3) * 0.25f);
  auto round = [&](Bf16Gemm v) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 2; ++rep) matmul_bf16_variant(Isa::kAvx512, v, x.data(), m, k, w.data(), n, y.data(), pool);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double dp = 1e30, fma = 1e30;
  for (int r = 0; r < 8; ++r) {
    const double a = round(Bf16Gemm::kDpbf16), b = round(Bf16Gemm::kFma);
    if (r > 0) dp = std::min(dp, a), fma = std::min(fma, b);
  }
  return fma < 0.9 * dp ? Bf16Gemm::kFma : Bf16Gemm::kDpbf16;
}

}  // namespace

const char* bf16_gemm_name(Bf16Gemm v) {
  switch (v) {
    case Bf16Gemm::kAuto: return "auto";
    case Bf16Gemm::kDpbf16: return "vdpbf16ps";
    case Bf16Gemm::kFma: return "fma";
  }
  return "?";
}

Bf16Gemm bf16_gemm_choice(ThreadPool* pool) {
  static const Bf16Gemm choice = [pool] {
    if (const char* e = std::getenv("GANNET_BF16_GEMM"); e && *e) {
      const std::string v = e;
      if (v == "fma") return Bf16Gemm::kFma;
      if (v == "dpbf16") return Bf16Gemm::kDpbf16;
      if (v != "auto") fail("GANNET_BF16_GEMM must be auto, dpbf16 or fma, got '", v, "'");
    }
    return measure_bf16_gemm(pool);
  }();
  return choice;
}

void matmul_f32_isa(Isa isa, const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                    float* y, ThreadPool* pool) {
  GANNET_CHECK(m >= 0 && k >= 0 && n >= 0, "m=", m, " k=", k, " n=", n);
  if (m == 0 || n == 0) return;
  if ((isa == Isa::kAvx512 || isa == Isa::kAvx2) && m >= kLaneMinRowsF32) {
    LaneWeight lw;
    lw.f32 = w;
    return lane_matmul(isa, LaneOrder::kF32, x, m, k, lw, n, y, pool);
  }
  auto cols = pick_variant(isa, ref::matmul_f32_cols, avx2::matmul_f32_cols, avx512::matmul_f32_cols);
  over_columns(m * n * k, n, pool, [&](int64_t b, int64_t e) { cols(x, m, k, w, b, e, y, n); });
}

void matmul_bf16_isa(Isa isa, const float* x, int64_t m, int64_t k, const uint16_t* w,
                     int64_t n, float* y, ThreadPool* pool) {
  matmul_bf16_variant(isa, Bf16Gemm::kAuto, x, m, k, w, n, y, pool);
}

void matmul_bf16_variant(Isa isa, Bf16Gemm variant, const float* x, int64_t m, int64_t k, const uint16_t* w,
                         int64_t n, float* y, ThreadPool* pool) {
  GANNET_CHECK(m >= 0 && k >= 0 && n >= 0, "m=", m, " k=", k, " n=", n);
  GANNET_CHECK(isa_supported(isa), "kernel path ", isa_name(isa), " is not supported by this CPU");
  if (m == 0 || n == 0) return;
  const int64_t ldx = (k + kBf16Chunk - 1) / kBf16Chunk * kBf16Chunk;
  // One row is the bandwidth-bound GEMV: vdpbf16ps reads the same bytes.
  if (isa == Isa::kAvx512 && m > 1) {
    if (variant == Bf16Gemm::kAuto) variant = bf16_gemm_choice(pool);
    if (variant == Bf16Gemm::kFma && m >= kLaneMinRowsBf16) {
      LaneWeight lw;
      lw.bf16 = w;
      return lane_matmul(isa, LaneOrder::kBf16, x, m, k, lw, n, y, pool);
    }
    if (variant == Bf16Gemm::kFma) {
      const float* xs = to_bf16_split(x, m, k, ldx);
      over_columns(m * n * k, n, pool, [&](int64_t b, int64_t e) { avx512::matmul_bf16_fma_cols(xs, ldx, m, k, w, b, e, y, n); });
      return;
    }
  }
  if (isa == Isa::kAvx2 && m >= kLaneMinRowsBf16) {
    LaneWeight lw;
    lw.bf16 = w;
    return lane_matmul(isa, LaneOrder::kBf16, x, m, k, lw, n, y, pool);
  }
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
