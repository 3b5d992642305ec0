// The packed-weight product on every kernel path equals the scalar reference bit for
// bit, for every format, odd shapes (k not a multiple of 16, partial scale blocks), 1 to
// 7 rows of x and 1 or 2 threads.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/packed_matmul.h"

using namespace gannet;
using namespace gannet::kernels;

namespace {

struct Owned {
  std::vector<uint8_t> data, scales;
  PackedWeight w;
};

Owned make(WeightFormat f, int64_t n, int64_t k, uint32_t seed, int64_t block = 32, DType sdt = DType::F8_E8M0) {
  std::mt19937 g(seed);
  Owned o;
  PackedWeight& w = o.w;
  w.format = f;
  w.n = n;
  w.k = k;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  switch (f) {
    case WeightFormat::kF32:
      o.data.resize(size_t(n * k) * 4);
      for (int64_t i = 0; i < n * k; ++i) reinterpret_cast<float*>(o.data.data())[i] = u(g);
      break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      o.data.resize(size_t(n * k) * 2);
      for (int64_t i = 0; i < n * k; ++i)
        reinterpret_cast<uint16_t*>(o.data.data())[i] = f == WeightFormat::kBF16 ? f32_to_bf16(u(g)) : f32_to_f16(u(g));
      break;
    case WeightFormat::kFp8Block:
    case WeightFormat::kInt8Row:
      o.data.resize(size_t(n * k));
      for (auto& b : o.data) {
        b = uint8_t(g());
        if (f == WeightFormat::kFp8Block && (b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
      }
      break;
    case WeightFormat::kMxfp4:
      o.data.resize(size_t(n * ((k + 1) / 2)));
      for (auto& b : o.data) b = uint8_t(g());
      break;
  }
  if (f == WeightFormat::kFp8Block) {
    w.block_n = w.block_k = block;
    w.scale_dtype = sdt;
  } else if (f == WeightFormat::kMxfp4) {
    w.block_n = 1;
    w.block_k = 32;
    w.scale_dtype = DType::F8_E8M0;
  } else if (f == WeightFormat::kInt8Row) {
    w.block_n = 1;
    w.block_k = k;
    w.scale_dtype = DType::F32;
  }
  if (f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4 || f == WeightFormat::kInt8Row) {
    const int64_t cnt = w.scale_rows() * w.scale_cols();
    o.scales.resize(size_t(cnt) * dtype_size(w.scale_dtype));
    for (int64_t i = 0; i < cnt; ++i) {
      if (w.scale_dtype == DType::F8_E8M0) o.scales[size_t(i)] = uint8_t(118 + g() % 14);
      else reinterpret_cast<float*>(o.scales.data())[i] = 0.001f + 0.01f * float(g() % 100);
    }
    w.scales = o.scales.data();
  }
  w.data = o.data.data();
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST(KernelsPacked, EveryPathMatchesTheReference) {
  ThreadPool pool(2);
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{1, 32}, {5, 64}, {17, 70}, {40, 130}, {33, 256}, {64, 96}};
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                                  WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kInt8Row};
  int checked = 0;
  for (WeightFormat f : formats)
    for (const Shape& s : shapes) {
      if (f == WeightFormat::kMxfp4 && s.k % 2) continue;
      for (int variant = 0; variant < (f == WeightFormat::kFp8Block ? 2 : 1); ++variant) {
        Owned o = variant ? make(f, s.n, s.k, uint32_t(s.n * 131 + s.k), 128, DType::F32)
                          : make(f, s.n, s.k, uint32_t(s.n * 131 + s.k));
        for (int64_t m : {1, 3, 7, 9, 20}) {
          std::vector<float> x(size_t(m * s.k)), ref(size_t(m * s.n)), got(size_t(m * s.n));
          std::mt19937 g{uint32_t(m)};
          std::normal_distribution<float> nd(0.0f, 1.0f);
          for (float& v : x) v = nd(g);
          matmul_packed_ref(x.data(), m, o.w, ref.data());
          for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
            if (!isa_supported(isa)) continue;
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::fill(got.begin(), got.end(), -1.0f);
              matmul_packed_isa(isa, x.data(), m, o.w, got.data(), p);
              ASSERT_TRUE(same_bits(ref, got)) << weight_format_name(f) << " n=" << s.n << " k=" << s.k << " m=" << m
                                               << " " << isa_name(isa) << (p ? " 2 threads" : "");
              ++checked;
            }
          }
        }
      }
    }
  EXPECT_GT(checked, 100);
}

// The column entry point writes exactly columns [n0, n1) of every row, with the
// reference's bits, through a row stride wider than the weight.
TEST(KernelsPacked, ColumnTilesMatchTheReference) {
  int checked = 0;
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    Owned o = make(f, 40, 96, 7);
    const int64_t m = 5, ldy = 47;
    std::vector<float> x(size_t(m * 96)), ref(size_t(m * 40));
    std::mt19937 g{3};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(g);
    matmul_packed_ref(x.data(), m, o.w, ref.data());
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 40}, {3, 21}, {32, 33}, {17, 17}}) {
        std::vector<float> y(size_t(m * ldy), -7.0f);
        matmul_packed_cols_isa(isa, x.data(), m, o.w, n0, n1, y.data(), ldy);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldy; ++j) {
            const float want = j >= n0 && j < n1 ? ref[size_t(i * 40 + j)] : -7.0f;
            ASSERT_EQ(std::memcmp(&y[size_t(i * ldy + j)], &want, 4), 0)
                << weight_format_name(f) << " " << isa_name(isa) << " [" << n0 << ", " << n1 << ") row " << i
                << " col " << j;
          }
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 12);
}
