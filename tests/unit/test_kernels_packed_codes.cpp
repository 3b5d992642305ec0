// Packed-weight products on the codes and scales that take a kernel off its fast path:
// every FP8 E4M3 code (NaN, subnormals, ±448) and every E2M1 code, E8M0 scales at both ends
// (2^-127 subnormal, 2^127, NaN), f32 scales that are subnormal, huge (s * 256 overflows),
// infinite. Each ISA must give the scalar reference's bits (NaN for NaN: payloads are not
// specified), with and without the load-time scan (PackedWeight::scan_codes) that enables
// the f16 route for FP8.
// labels: exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/packed_matmul.h"

namespace gannet::kernels {
namespace {

bool same(const std::vector<float>& a, const std::vector<float>& b, size_t* where) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      *where = i;
      return false;
    }
  }
  return true;
}

void check_all_isas(const PackedWeight& w, const std::string& what) {
  ThreadPool pool(2);
  for (int64_t m : {1, 2, 5, 8, 19}) {  // 8 and more: the dequantized-panel prefill path
    std::vector<float> x(size_t(m * w.k)), ref(size_t(m * w.n)), got(ref.size());
    std::mt19937 g{uint32_t(m * 7 + w.k)};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(g);
    matmul_packed_ref(x.data(), m, w, ref.data());
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::fill(got.begin(), got.end(), -1.0f);
        matmul_packed_isa(isa, x.data(), m, w, got.data(), p);
        size_t at = 0;
        ASSERT_TRUE(same(ref, got, &at)) << what << " m=" << m << " " << isa_name(isa) << " output " << at << ": ref "
                                         << ref[at] << " got " << got[at];
      }
    }
  }
}

TEST(KernelsPackedCodes, EveryFp8CodeWithExtremeScales) {
  const int64_t n = 19, k = 256 + 48;  // partial blocks on both axes at block 32 and 128
  std::vector<uint8_t> codes(size_t(n * k));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 37 + i / 256);  // every code, spread
  std::vector<uint8_t> no_nan = codes;
  for (auto& b : no_nan)
    if ((b & 0x7f) == 0x7f) b = 0x7e;
  // Scales up to just below 2^8 (the plain routes' bound: the GEMV's f32 route takes them
  // times 2^120), or with some beyond it; the extreme one first, so every block size has it.
  for (int64_t block : {32, 128}) {
    for (bool e8m0 : {true, false}) for (bool beyond : {false, true}) {
      const int64_t sr = (n + block - 1) / block, sc = (k + block - 1) / block;
      std::vector<uint8_t> s8(size_t(sr * sc));
      std::vector<float> s32(size_t(sr * sc));
      for (size_t i = 0; i < s8.size(); ++i) {
        s8[i] = uint8_t(beyond ? std::vector<int>{140, 0, 1, 100, 127, 254}[i % 6]
                               : std::vector<int>{134, 0, 1, 100, 127, 3}[i % 6]);
        s32[i] = beyond ? std::vector<float>{1e30f, 1e-40f, 0.5f, 3e-3f, 7.0f}[i % 5]
                        : std::vector<float>{255.99998f, 1e-40f, 0.5f, 3e-3f, 7.0f}[i % 5];
      }
      for (int data_kind = 0; data_kind < 2; ++data_kind) {
        PackedWeight w;
        w.format = WeightFormat::kFp8Block;
        w.n = n;
        w.k = k;
        w.block_n = w.block_k = block;
        w.scale_dtype = e8m0 ? DType::F8_E8M0 : DType::F32;
        w.scales = e8m0 ? static_cast<const void*>(s8.data()) : s32.data();
        w.data = data_kind ? codes.data() : no_nan.data();
        const std::string what = std::string("fp8 block ") + std::to_string(block) + (e8m0 ? " e8m0" : " f32") +
                                 (beyond ? " beyond 2^8" : "") + (data_kind ? " with NaN codes" : "");
        check_all_isas(w, what + " unscanned");
        w.scan_codes();
        // NaN codes, or a finite scale of 2^8 or more, keep the exact route.
        EXPECT_EQ(w.fp8_plain, !data_kind && !beyond) << what;
        check_all_isas(w, what + " scanned");
      }
    }
  }
  // f32 scales of 2^8 and beyond FLT_MAX / 256, infinite and NaN.
  const int64_t block = 32, sr = 1, sc = 2;
  std::vector<float> s32 = {256.0f, std::numeric_limits<float>::infinity()};
  PackedWeight w;
  w.format = WeightFormat::kFp8Block;
  w.n = 7;
  w.k = 64;
  w.block_n = w.block_k = block;
  w.scale_dtype = DType::F32;
  w.scales = s32.data();
  w.data = no_nan.data();
  w.scan_codes();
  EXPECT_FALSE(w.fp8_plain);
  check_all_isas(w, "fp8 scale 2^8");
  s32 = {3e38f, 1.0f};
  w.scan_codes();
  EXPECT_FALSE(w.fp8_plain);
  check_all_isas(w, "fp8 huge scales");
  s32 = {std::numeric_limits<float>::infinity(), NAN};
  (void)sr;
  (void)sc;
  w.scan_codes();
  EXPECT_TRUE(w.fp8_plain);  // inf and NaN scale the same way through the plain routes
  check_all_isas(w, "fp8 inf/NaN scales");
}

TEST(KernelsPackedCodes, EveryMxfp4CodeAndScale) {
  const int64_t n = 10, k = 32 * 9 + 16;  // a partial last scale block; a partial tile of 3 and of 4 rows
  const int64_t k_whole = 32 * 10;        // the same 10 scale blocks per row, all whole (below)
  std::vector<uint8_t> codes(size_t(n * k_whole / 2));  // room for either k
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 13 + i / 16);
  std::vector<uint8_t> scales(size_t(n * ((k + 31) / 32)));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(std::vector<int>{0, 1, 127, 200, 254, 255}[i % 6]);
  PackedWeight w;
  w.format = WeightFormat::kMxfp4;
  w.n = n;
  w.k = k;
  w.block_n = 1;
  w.block_k = 32;
  w.scale_dtype = DType::F8_E8M0;
  w.scales = scales.data();
  w.data = codes.data();
  check_all_isas(w, "mxfp4");
  // Whole scale blocks too (k a multiple of 32, every chunk on the GEMVs' whole-chunk
  // loop), with the NaN-scale rows in some tiles of 3 rows and not in others.
  w.k = k_whole;
  check_all_isas(w, "mxfp4 whole blocks");
  // Every row above holds a NaN scale, so each of its outputs is NaN whatever the codes
  // decode to. One scale code at a time instead: in whole odd rows, and in one block of
  // each even row among ordinary scales, so only the rows holding 253-255 overflow or
  // are NaN and every other output checks the decoded values' bits.
  const int64_t sc = k_whole / 32;
  for (int code : {0, 1, 2, 100, 127, 200, 252, 253, 254, 255}) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t b = 0; b < sc; ++b) scales[size_t(r * sc + b)] = uint8_t(r % 2 || b == r / 2 % sc ? code : 127);
    check_all_isas(w, "mxfp4 whole blocks, scale code " + std::to_string(code));
  }
}

// FP8 with power-of-two scales (E8M0 or f32): the AVX2 decode GEMVs (one x row, and 2-5
// rows) fold the scale (times 2^120) into x where x times it stays finite and every
// code's value * s is exact. x that overflows, infinities and NaN must take the unfolded
// route and give the reference's bits; a row of tiny x makes products in the subnormal
// range, where any lost bit would show in the output; scale codes 9 and 10 lie either side
// of the fold's lower bound. The same x as the first or the last of 2-8 rows runs the
// few-row GEMVs on the same codes.
TEST(KernelsPackedCodes, Fp8ScalesFoldedIntoXKeepTheBits) {
  const int64_t n = 70, k = 256;  // block rows of 32: two whole, one partial
  std::vector<uint8_t> codes(size_t(n * k));
  for (size_t i = 0; i < codes.size(); ++i) {
    codes[i] = uint8_t(i * 37 + i / 256);
    if ((codes[i] & 0x7f) == 0x7f) codes[i] = 0x7e;
  }
  const int64_t sr = 3, sc = k / 32;
  // f32 scales fold where they are powers of two: the same codes as f32 values, then
  // (scale_code 0 below) a block of 1.5, a negative scale and a zero one, which must not.
  for (bool e8m0 : {true, false})
  for (int scale_code : {100, 127, 134, 9, 10, 246, 0}) {
    if (e8m0 && scale_code == 0) continue;
    std::vector<uint8_t> s8(size_t(sr * sc), uint8_t(scale_code));
    s8[1] = 127;  // one ordinary block among them
    std::vector<float> s32(s8.size());
    for (size_t i = 0; i < s8.size(); ++i) s32[i] = kE8m0Values[s8[i]];
    if (scale_code == 0) s32[0] = 1.5f, s32[2] = -1.0f, s32[sc + 3] = 0.0f, s32[2 * sc] = 0x1p-3f;
    PackedWeight w;
    w.format = WeightFormat::kFp8Block;
    w.n = n;
    w.k = k;
    w.block_n = w.block_k = 32;
    w.scale_dtype = e8m0 ? DType::F8_E8M0 : DType::F32;
    w.scales = e8m0 ? static_cast<const void*>(s8.data()) : s32.data();
    w.data = codes.data();
    w.scan_codes();
    if (scale_code != 0) {
      ASSERT_EQ(w.fp8_plain, scale_code <= 134);
    }
    for (int x_kind = 0; x_kind < 6; ++x_kind) {
      std::vector<float> x(static_cast<size_t>(k)), ref(static_cast<size_t>(n)), got(ref.size());
      std::mt19937 g{uint32_t(x_kind * 31 + scale_code)};
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : x) v = nd(g);
      switch (x_kind) {
        case 1: x[40] = 3e38f; break;                          // x * 2^(e + 8) overflows for e >= 0
        case 2: for (float& v : x) v *= 0x1p-120f; break;       // tiny x, subnormal products
        case 3: x[200] = 1e-42f; break;                         // one subnormal x
        case 4: x[5] = -std::numeric_limits<float>::infinity(); break;
        case 5: x[77] = std::numeric_limits<float>::quiet_NaN(); break;
        default: break;
      }
      // 1 x row (decode), and 2, 3, 5 or 8 (a verify step, a small batch: one w decode for
      // several rows), x first or last, the others ordinary: the few-row kernels fold the
      // scale only where every row passes the check
      for (int64_t m : {1, 2, 3, 5, 8})
        for (const bool last : {false, true}) {
          if (last && m == 1) continue;
          std::vector<float> xm(size_t(m * k));
          for (float& v : xm) v = nd(g);
          std::copy(x.begin(), x.end(), xm.begin() + (last ? (m - 1) * k : 0));
          ref.assign(size_t(m * n), 0.0f);
          got.assign(size_t(m * n), 0.0f);
          matmul_packed_ref(xm.data(), m, w, ref.data());
          for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
            if (!isa_supported(isa)) continue;
            std::fill(got.begin(), got.end(), -1.0f);
            matmul_packed_isa(isa, xm.data(), m, w, got.data(), nullptr);
            for (int64_t j = 0; j < m * n; ++j) {
              const bool both_nan = std::isnan(ref[size_t(j)]) && std::isnan(got[size_t(j)]);
              ASSERT_TRUE(both_nan || std::memcmp(&ref[size_t(j)], &got[size_t(j)], 4) == 0)
                  << (e8m0 ? "e8m0" : "f32") << " scale code " << scale_code << " x kind " << x_kind << " m " << m
                  << (last ? " (x last) " : " ") << isa_name(isa) << " output " << j << ": ref " << ref[size_t(j)]
                  << " got " << got[size_t(j)];
            }
          }
        }
    }
  }
}

// PackedWeight::rows: a slice's data, scales and subnormal-row marks are the parent's
// rows [r0, r0 + count), and its products are the parent's outputs for those rows.
TEST(KernelsPackedCodes, RowSliceKeepsScalesAndMarks) {
  const int64_t n = 160, k = 96;  // 32 x 32 E8M0 blocks: 5 block rows, 3 block columns
  std::vector<uint8_t> codes(size_t(n * k)), s8(size_t(5 * 3));
  for (size_t i = 0; i < codes.size(); ++i) {
    codes[i] = uint8_t(0x08 | (i * 29 % 0x70) | (i % 3 == 0 ? 0x80 : 0));  // normal codes, no NaN
  }
  for (int64_t r : {3, 40, 41, 77, 130, 159}) codes[size_t(r * k + r % k)] = 0x03;  // subnormal
  for (size_t i = 0; i < s8.size(); ++i) s8[i] = uint8_t(120 + i);
  PackedWeight w;
  w.format = WeightFormat::kFp8Block;
  w.n = n;
  w.k = k;
  w.block_n = w.block_k = 32;
  w.scale_dtype = DType::F8_E8M0;
  w.scales = s8.data();
  w.data = codes.data();
  w.scan_codes();
  ASSERT_TRUE(w.fp8_plain);
  std::vector<float> x(size_t(3 * k)), full(size_t(3 * n)), part;
  std::mt19937 g{7};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(g);
  for (const auto& [r0, count] : std::vector<std::pair<int64_t, int64_t>>{{32, 64}, {64, 96}, {0, 160}, {128, 7}}) {
    const PackedWeight s = w.rows(r0, count);
    ASSERT_EQ(s.n, count);
    for (int64_t r = 0; r < count; ++r) {
      ASSERT_EQ(s.fp8_subnormal_row(r), w.fp8_subnormal_row(r0 + r)) << "row " << r << " of the slice at " << r0;
      for (int64_t c = 0; c < k; c += 32) ASSERT_EQ(s.scale_at(r, c), w.scale_at(r0 + r, c));
    }
    const PackedWeight s2 = s.rows(0, count);  // a slice of a slice
    for (int64_t r = 0; r < count; ++r) ASSERT_EQ(s2.fp8_subnormal_row(r), w.fp8_subnormal_row(r0 + r));
    for (int64_t m : {1, 3}) {
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        full.assign(size_t(m * n), 0.0f);
        part.assign(size_t(m * count), -1.0f);
        matmul_packed_isa(isa, x.data(), m, w, full.data(), nullptr);
        matmul_packed_isa(isa, x.data(), m, s, part.data(), nullptr);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < count; ++j)
            ASSERT_EQ(std::memcmp(&part[size_t(i * count + j)], &full[size_t(i * n + r0 + j)], 4), 0)
                << "slice at " << r0 << " row " << j << " x row " << i << " " << isa_name(isa);
      }
    }
  }
  int marked = 0;
  for (int64_t r = 0; r < n; ++r) marked += w.fp8_subnormal_row(r);
  EXPECT_EQ(marked, 6);
}

}  // namespace
}  // namespace gannet::kernels
