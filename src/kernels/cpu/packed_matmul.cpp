// packed_matmul.h: the scalar column kernel, dispatch and the split over output columns.
#include "kernels/cpu/packed_matmul.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/packed_matmul_impl.h"
#include "kernels/cpu/parallel_grain.h"

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
// AVX-512, from this many x rows on where the few-row slices do not fit (k or scale blocks
// not whole chunks): kPanelRows w rows at a time are dequantized into an f32 panel
// (exactly dequant_row's values) and the f32 matmul kernel runs on it. That is the
// canonical f32 dot of each x row with each dequantized w row, which is how the product
// is defined, with the decode paid once per panel instead of once per register tile.
constexpr int64_t kPanelMinRows = 8;
constexpr int64_t kPanelRows = 16;
// From this many rows on, whole products (not column ranges) run as lane-split GEMMs
// (lane_gemm.h): on the 2-core Xeon VM (n = k = 2048, 2 threads) level with AVX-512's
// k-blocked few-row slices at 64 rows (those beat the lane GEMM and the panels below 48:
// MXFP4 at 12-24 rows 1.6-2x, FP8 at 32 rows 1.2-1.4x). On AVX2 the alternative is the
// 4-row decoding tile, which the lane GEMM beats from 16 rows (Zen 3, same sizes: FP8
// 1.3x, MXFP4 1.15-1.25x, bf16 1.07x at 16 rows; 1.1x at 32): batched decode's
// projections and the MoE's busier experts.
constexpr int64_t kLaneMinRows = 48;
constexpr int64_t kLaneMinRowsAvx2 = 16;
static_assert(avx512::kFewBlockedRows <= kLaneMinRows, "rows [kFewBlockedRows, kLaneMinRows) would take the panels");

using ColsFn = void (*)(const float*, int64_t, const PackedWeight&, int64_t, int64_t, float*, int64_t);

template <void (*Dequant)(const PackedWeight&, int64_t, int64_t, float*), typename F32Cols>
void panel_cols(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy,
                F32Cols f32_cols) {
  thread_local std::vector<float> panel;  // [kPanelRows, k], grows only
  if (int64_t(panel.size()) < kPanelRows * w.k) panel.resize(size_t(kPanelRows * w.k));
  for (int64_t j = n0; j < n1; j += kPanelRows) {
    const int64_t nr = std::min(kPanelRows, n1 - j);
    Dequant(w, j, j + nr, panel.data());
    f32_cols(x, m, w.k, panel.data(), 0, nr, y + j, ldy);
  }
}

void avx512_panel_cols(const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  panel_cols<avx512::dequant_rows>(x, m, w, n0, n1, y, ldy, avx512::matmul_f32_cols);
}

ColsFn pick_cols(Isa isa, const PackedWeight& w, int64_t m) {
  GANNET_CHECK(isa_supported(isa), "kernel path ", isa_name(isa), " is not supported by this CPU");
  // The SIMD kernels need scale blocks along k that are whole 16-element chunks.
  const bool simd_ok = w.scales == nullptr || w.block_k % 16 == 0 || w.format == WeightFormat::kInt8Row;
  if (!simd_ok || isa == Isa::kScalar) return ref::matmul_packed_cols;
  if (isa == Isa::kAvx2) return avx2::matmul_packed_cols;  // decodes 4 rows per GEMM tile itself
  // Rows [9, 48) where the chunks fit: few-row slices decoding w in registers.
  const bool few = m < avx512::kFewBlockedRows && avx512::few_rows_fit(w);
  return m >= kPanelMinRows && !few ? avx512_panel_cols : avx512::matmul_packed_cols;
}
}  // namespace

int64_t packed_lane_min_rows(Isa isa, const PackedWeight& w) {
  const ColsFn cols = pick_cols(isa, w, kLaneMinRows);
  if (cols == avx512_panel_cols) return kLaneMinRows;
  if (cols == avx2::matmul_packed_cols) return kLaneMinRowsAvx2;
  return INT64_MAX;
}

void matmul_packed_cols_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, int64_t n0, int64_t n1,
                            float* y, int64_t ldy) {
  GANNET_CHECK(m >= 0 && 0 <= n0 && n0 <= n1 && n1 <= w.n && ldy >= n1, "columns [", n0, ", ", n1, ") of ", w.n,
               ", ldy ", ldy);
  if (m == 0 || n0 == n1) return;
  pick_cols(isa, w, m)(x, m, w, n0, n1, y, ldy);
}

void matmul_packed_isa(Isa isa, const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool) {
  const PackedProduct p{&w, y};
  matmul_packed_many_isa(isa, x, m, std::span<const PackedProduct>(&p, 1), pool);
}

void matmul_packed(const float* x, int64_t m, const PackedWeight& w, float* y, ThreadPool* pool) {
  matmul_packed_isa(active_isa(), x, m, w, y, pool);
}

void matmul_packed_many(const float* x, int64_t m, std::span<const PackedProduct> products, ThreadPool* pool) {
  matmul_packed_many_isa(active_isa(), x, m, products, pool);
}

void matmul_packed_many_isa(Isa isa, const float* x, int64_t m, std::span<const PackedProduct> products,
                            ThreadPool* pool) {
  constexpr size_t kMaxParts = 8;  // on the stack: matmul_packed runs here, ~100 times a token
  if (products.size() > kMaxParts) {
    for (size_t i = 0; i < products.size(); i += kMaxParts)
      matmul_packed_many_isa(isa, x, m, products.subspan(i, std::min(kMaxParts, products.size() - i)), pool);
    return;
  }
  struct Part {
    ColsFn cols;
    const PackedProduct* p;
    int64_t begin;  // first column in the joint column space
  };
  Part parts[kMaxParts];
  size_t n_parts = 0;
  int64_t total = 0;
  for (const PackedProduct& p : products) {
    GANNET_CHECK(m >= 0 && p.w->n >= 0 && p.w->k >= 0);
    GANNET_CHECK(p.w->k == products[0].w->k, "grouped products of one x need one k: ", p.w->k, " vs ",
                 products[0].w->k);
    if (m >= packed_lane_min_rows(isa, *p.w)) {
      LaneWeight lw;  // the lane GEMM parallelizes itself
      lw.packed = p.w;
      if (p.w->n > 0) lane_matmul(isa, LaneOrder::kF32, x, m, p.w->k, lw, p.w->n, p.y, pool);
      continue;
    }
    if (m == 0 || p.w->n == 0) continue;
    parts[n_parts++] = {pick_cols(isa, *p.w, m), &p, total};
    total += p.w->n;
  }
  if (n_parts == 0) return;
  const int64_t k = products[0].w->k;
  int64_t bytes = 0;  // weight bytes the parts stream
  for (size_t i = 0; i < n_parts; ++i) bytes += parts[i].p->w->n * parts[i].p->w->row_bytes();
  auto run = [&](int64_t b, int64_t e) {
    for (size_t i = 0; i < n_parts; ++i) {
      const Part& q = parts[i];
      const int64_t n = q.p->w->n, lo = std::max(b, q.begin), hi = std::min(e, q.begin + n);
      if (lo < hi) q.cols(x, m, *q.p->w, lo - q.begin, hi - q.begin, q.p->y, n);
    }
  };
  if (!pool || pool->size() == 1 || (m * total * k < kMinParallelMacs && bytes < kMinParallelBytes)) run(0, total);
  else pool->parallel_for(total, [&](int64_t b, int64_t e, int) { run(b, e); }, kColumnGrain);
}

}  // namespace gannet::kernels
