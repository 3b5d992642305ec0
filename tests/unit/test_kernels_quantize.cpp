// The weight quantizers (packed_quantize.h) against properties that pin them down without
// re-implementing them: the largest element of each row / tile lands on the top code, every
// dequantized element is within half a step of its input, zero stays zero, and non-finite
// input is refused.
// labels: exact
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/packed_quantize.h"

namespace gannet::kernels {
namespace {

std::vector<float> random_matrix(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(size_t(n * k));
  for (float& v : w) v = d(rng);
  // Some rows and tiles of very different magnitude, and an all-zero row.
  for (int64_t c = 0; c < k; ++c) w[size_t(1 * k + c)] *= 1000.0f;
  for (int64_t c = 0; c < k; ++c) w[size_t(2 * k + c)] = 0.0f;
  return w;
}

RowSource rows_of(const std::vector<float>& w, int64_t k) {
  return [&w, k](int64_t r, float* out) { std::memcpy(out, w.data() + r * k, size_t(k) * 4); };
}

TEST(KernelsQuantize, Int8PerRow) {
  const int64_t n = 37, k = 133;
  const std::vector<float> w = random_matrix(n, k, 1);
  auto q = quantize_int8_row(n, k, rows_of(w, k));
  ASSERT_EQ(q->w.format, WeightFormat::kInt8Row);
  ASSERT_EQ(q->w.bytes(), uint64_t(n * k + n * 4));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    const float s = q->w.scale_at(r, 0);
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[size_t(r * k + c)]));
    const int8_t* codes = reinterpret_cast<const int8_t*>(q->data.data()) + r * k;
    if (amax == 0) {
      EXPECT_EQ(s, 1.0f);
      for (int64_t c = 0; c < k; ++c) EXPECT_EQ(codes[c], 0);
      continue;
    }
    EXPECT_EQ(s, amax / 127.0f);
    int top = 0;
    q->w.dequant_row(r, row.data());
    for (int64_t c = 0; c < k; ++c) {
      top = std::max(top, std::abs(int(codes[c])));
      EXPECT_LE(std::fabs(row[size_t(c)] - w[size_t(r * k + c)]), 0.5f * s * (1 + 1e-5f)) << r << "," << c;
    }
    EXPECT_EQ(top, 127) << "row " << r;
  }
}

TEST(KernelsQuantize, Fp8BlockWithEdgeTiles) {
  for (Fp8Scales kind : {Fp8Scales::kAmax, Fp8Scales::kPow2})
  for (int64_t block : {128, 32}) {
    SCOPED_TRACE(kind == Fp8Scales::kPow2 ? "pow2 scales" : "amax scales");
    const int64_t n = 150, k = 200;  // partial tiles on both axes
    const std::vector<float> w = random_matrix(n, k, 2);
    auto q = quantize_fp8_block(n, k, block, rows_of(w, k), kind);
    const PackedWeight& p = q->w;
    ASSERT_EQ(p.format, WeightFormat::kFp8Block);
    ASSERT_EQ(p.scale_rows(), (n + block - 1) / block);
    ASSERT_EQ(p.scale_cols(), (k + block - 1) / block);
    ASSERT_EQ(p.bytes(), uint64_t(n * k + p.scale_rows() * p.scale_cols() * 4));
    std::vector<float> deq(size_t(n * k));
    for (int64_t r = 0; r < n; ++r) p.dequant_row(r, deq.data() + r * k);
    for (int64_t br = 0; br < p.scale_rows(); ++br)
      for (int64_t bc = 0; bc < p.scale_cols(); ++bc) {
        float amax = 0;
        bool top = false;
        const float s = p.scale_at(br * block, bc * block);
        for (int64_t r = br * block; r < std::min(n, (br + 1) * block); ++r)
          for (int64_t c = bc * block; c < std::min(k, (bc + 1) * block); ++c) amax = std::max(amax, std::fabs(w[size_t(r * k + c)]));
        if (kind == Fp8Scales::kAmax || amax == 0) {
          EXPECT_EQ(s, amax > 0 ? amax / 448.0f : 1.0f);
        } else {  // the smallest power of two that keeps the tile's amax within 448
          int e;
          EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;
          EXPECT_LE(amax / s, 448.0f);
          EXPECT_GT(amax / s, 224.0f);
        }
        for (int64_t r = br * block; r < std::min(n, (br + 1) * block); ++r)
          for (int64_t c = bc * block; c < std::min(k, (bc + 1) * block); ++c) {
            const float x = w[size_t(r * k + c)], d = deq[size_t(r * k + c)];
            const uint8_t code = q->data[size_t(r * k + c)];
            ASSERT_NE(code & 0x7f, 0x7f) << "NaN code";
            top |= kind == Fp8Scales::kAmax ? (code & 0x7f) == 0x7e : (code & 0x7f) >= 0x76;
            // E4M3 keeps 3 mantissa bits: half a step is 2^-4 of the value for normals,
            // and 2^-10 of the scale below the smallest normal (2^-6).
            const float tol = std::max(std::fabs(x) * 0.0625f, s * 0.0009765625f) * (1 + 1e-5f);
            EXPECT_LE(std::fabs(d - x), tol) << r << "," << c;
          }
        // amax / s is 448 with amax scales, above 224 with pow2 ones (codes 0x76 and up)
        if (amax > 0) {
          EXPECT_TRUE(top) << "tile " << br << "," << bc;
        }
      }
  }
}

// Power-of-two scales at the edges: amax exactly 448 times a power of two keeps it, a hair
// above doubles it, and tiny (subnormal) or huge amax still get the smallest power of two
// that keeps the tile within 448.
TEST(KernelsQuantize, Fp8Pow2ScaleEdges) {
  const std::pair<float, float> cases[] = {
      {448.0f, 1.0f}, {std::nextafter(448.0f, 1e9f), 2.0f}, {224.0f, 0.5f}, {std::nextafter(224.0f, 1e9f), 1.0f},
      {1.0f, 0x1p-8f}, {3e38f, 0x1p120f}, {1e-40f, 0x1p-141f}, {0x1p-149f, 0x1p-149f}};
  for (const auto& [amax, want] : cases) {
    std::vector<float> w(16, 0.0f);
    w[3] = -amax;
    auto q = quantize_fp8_block(1, 16, 128, rows_of(w, 16), Fp8Scales::kPow2);
    EXPECT_EQ(q->w.scale_at(0, 0), want) << "amax " << amax;
    std::vector<float> d(16);
    q->w.dequant_row(0, d.data());
    EXPECT_LE(std::fabs(d[3] + amax), amax * 0.0625f) << "amax " << amax;
  }
}

TEST(KernelsQuantize, NonFiniteIsRefused) {
  std::vector<float> w(4 * 8, 1.0f);
  w[13] = NAN;
  EXPECT_THROW(quantize_int8_row(4, 8, rows_of(w, 8)), Error);
  w[13] = INFINITY;
  try {
    quantize_fp8_block(4, 8, 128, rows_of(w, 8));
    FAIL() << "accepted an infinite weight";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 5]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gannet::kernels
