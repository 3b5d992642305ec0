// matmul_f32 / matmul_bf16: every ISA variant bit-identical to the scalar reference, the
// reference close to a double-precision dot, and DESIGN principle 1 (a row's bits do not
// depend on m, the other rows or the thread count).
// labels: exact
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/matmul.h"

namespace gannet::kernels {
namespace {

std::vector<Isa> fast_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

// N(0,1) values with a sprinkling of zeros, -0 and denormals, so the DAZ/FTZ and
// signed-zero behaviour is exercised too.
std::vector<float> random_f32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> v(n);
  for (auto& x : v) {
    int p = pick(rng);
    x = p == 0 ? 0.0f : p == 1 ? -0.0f : p == 2 ? nd(rng) * 1e-39f : nd(rng);
  }
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(KernelsCanonical, DotRefIsCloseToDouble) {
  for (int64_t k : {1, 3, 17, 100, 2048, 4099}) {
    auto x = random_f32(k, 1), w = random_f32(k, 2);
    auto xb = to_bf16(x), wb = to_bf16(w);
    double exact = 0, mag = 0, exact_b = 0, mag_b = 0;
    for (int64_t i = 0; i < k; ++i) {
      exact += double(x[i]) * w[i];
      mag += std::fabs(double(x[i]) * w[i]);
      double pb = double(bf16_to_f32(xb[i])) * bf16_to_f32(wb[i]);
      exact_b += pb;
      mag_b += std::fabs(pb);
    }
    // Pairwise-ish summation: error well under k * eps * sum |x w|.
    EXPECT_NEAR(dot_f32_ref(x.data(), w.data(), k), exact, 1e-6 * mag + 1e-30) << k;
    EXPECT_NEAR(dot_bf16_ref(xb.data(), wb.data(), k), exact_b, 1e-6 * mag_b + 1e-30) << k;
    // And bf16 rounding of both operands stays within its 2^-8 relative precision.
    EXPECT_NEAR(dot_bf16_ref(xb.data(), wb.data(), k), exact, 1e-2 * mag + 1e-30) << k;
  }
}

TEST(KernelsCanonical, Bf16StepMatchesDenormalRules) {
  const float m = FLT_MIN;
  EXPECT_EQ(bf16_fma_ref(1.0f, 1e-39f, 0.0f), 0.0f);                       // input DAZ
  EXPECT_EQ(f32_to_bits(bf16_fma_ref(0x1p-70f, -0x1p-70f, -0.0f)), 0x80000000u);  // FTZ, signed
  EXPECT_EQ(bf16_fma_ref(0x1p-76f, -3 * 0x1p-76f, m), 0.0f);  // rounds to FLT_MIN only with denormals
  EXPECT_EQ(bf16_fma_ref(0x1p-76f, -0x1p-76f, m), m);         // rounds to FLT_MIN unbounded too
}

// Dot products hitting the denormal corner cases, one element pair per output: k = 2
// makes each output a single vdpbf16ps step on the odd element then the even one.
TEST(KernelsGemm, Bf16DenormalCornersMatchReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> u16(0, 0xffff);
  const int64_t n = 4096, k = 2;
  std::vector<uint16_t> w(n * k);
  std::vector<float> x(k);
  for (int rep = 0; rep < 16; ++rep) {
    for (auto& v : x) v = bf16_to_f32(uint16_t((u16(rng) & 0x8000) | (0x0c00 + u16(rng) % 0x1800)));
    for (auto& v : w) {
      uint16_t s = u16(rng) & 0x8000;
      switch (u16(rng) % 4) {
        case 0: v = s | (u16(rng) & 0x7f); break;                   // bf16 denormal
        case 1: v = s | (0x0080 + u16(rng) % 0x0c00); break;        // tiny normal
        default: v = s | (0x2000 + u16(rng) % 0x3000); break;
      }
    }
    if (rep % 2) {
      // Sums right at FLT_MIN: odd product ~ +-2^-126 (2^-63 * 2^-63), even product a few
      // units of 2^-152, where only the hardware's unbounded-exponent tininess rule decides.
      x = {0x1p-76f, 0x1p-63f};
      for (int64_t j = 0; j < n; ++j) {
        uint16_t s = u16(rng) & 0x8000;
        w[j * k + 1] = uint16_t(s | (0x2000 + u16(rng) % 4));             // +-2^-63 (1 + i/128)
        w[j * k] = uint16_t((u16(rng) & 0x8000) | (0x1980 + u16(rng) % 0x200));  // ~2^-76..2^-72
      }
    }
    std::vector<float> ref(n), got(n);
    matmul_bf16_isa(Isa::kScalar, x.data(), 1, k, w.data(), n, ref.data(), nullptr);
    for (Isa isa : fast_isas()) {
      matmul_bf16_isa(isa, x.data(), 1, k, w.data(), n, got.data(), nullptr);
      EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa);
    }
  }
}

// The AVX-512 bf16 GEMM in both of its forms (vdpbf16ps, FMAs under DAZ/FTZ) against the
// reference on several rows: random shapes, and the denormal corners above where each
// output is one step on the odd element then the even one.
TEST(KernelsGemm, Bf16GemmVariantsMatchReference) {
  // Off AVX-512 the variant is ignored and the AVX2 emulation runs.
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> u16(0, 0xffff);
  auto corner = [&](uint16_t s) -> uint16_t {
    switch (u16(rng) % 4) {
      case 0: return uint16_t(s | (u16(rng) & 0x7f));             // bf16 denormal
      case 1: return uint16_t(s | (0x0080 + u16(rng) % 0x0c00));  // tiny normal
      default: return uint16_t(s | (0x2000 + u16(rng) % 0x3000));
    }
  };
  int checked = 0;
  for (int64_t k : {2, 31, 64, 97}) {
    for (int64_t m : {2, 5, 8, 9, 17}) {
      const int64_t n = 37;
      std::vector<float> x(size_t(m * k));
      std::vector<uint16_t> w(size_t(n * k));
      for (auto& v : x) v = bf16_to_f32(corner(uint16_t(u16(rng) & 0x8000)));
      for (auto& v : w) v = corner(uint16_t(u16(rng) & 0x8000));
      if (k == 2)  // sums right at FLT_MIN (see Bf16DenormalCornersMatchReference)
        for (int64_t i = 0; i < m; ++i) {
          x[size_t(i * k)] = 0x1p-76f;
          x[size_t(i * k + 1)] = 0x1p-63f;
          for (int64_t j = 0; j < n; ++j) {
            w[size_t(j * k + 1)] = uint16_t((u16(rng) & 0x8000) | (0x2000 + u16(rng) % 4));
            w[size_t(j * k)] = uint16_t((u16(rng) & 0x8000) | (0x1980 + u16(rng) % 0x200));
          }
        }
      std::vector<float> ref(size_t(m * n)), got(ref.size());
      matmul_bf16_isa(Isa::kScalar, x.data(), m, k, w.data(), n, ref.data(), nullptr);
      for (Isa isa : fast_isas())
        for (Bf16Gemm v : {Bf16Gemm::kDpbf16, Bf16Gemm::kFma}) {
          std::fill(got.begin(), got.end(), -1.0f);
          matmul_bf16_variant(isa, v, x.data(), m, k, w.data(), n, got.data(), nullptr);
          EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " " << bf16_gemm_name(v) << " m=" << m << " k=" << k;
          ++checked;
        }
    }
  }
  // Ordinary values over tile edges (8 x 3 FMA tiles, 64-row blocks) and a long k.
  ThreadPool pool(2);
  for (int64_t k : {33, 1000}) {
    for (int64_t m : {3, 64, 70}) {
      const int64_t n = 41;
      auto x = random_f32(m * k, uint32_t(m + k)), w = random_f32(n * k, uint32_t(m * k));
      auto wb = to_bf16(w);
      std::vector<float> ref(size_t(m * n)), got(ref.size());
      matmul_bf16_isa(Isa::kScalar, x.data(), m, k, wb.data(), n, ref.data(), nullptr);
      for (Isa isa : fast_isas())
        for (Bf16Gemm v : {Bf16Gemm::kDpbf16, Bf16Gemm::kFma})
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            matmul_bf16_variant(isa, v, x.data(), m, k, wb.data(), n, got.data(), p);
            EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " " << bf16_gemm_name(v) << " m=" << m << " k=" << k;
            ++checked;
          }
    }
  }
  EXPECT_EQ(checked, 64 * int(fast_isas().size()));
  // The automatic choice is one of the two, and stays fixed for the process.
  const Bf16Gemm c = bf16_gemm_choice();
  EXPECT_TRUE(c == Bf16Gemm::kDpbf16 || c == Bf16Gemm::kFma);
  EXPECT_EQ(bf16_gemm_choice(), c);
}

TEST(KernelsGemm, VariantsMatchReferenceBitExact) {
  const std::vector<int64_t> ks = {1, 3, 15, 16, 17, 31, 33, 100, 257, 2048};
  const std::vector<int64_t> ms = {1, 2, 3, 4, 5, 6, 7, 8, 9, 33, 64};
  uint32_t seed = 100;
  for (int64_t k : ks)
    for (int64_t n : {1, 5, 13}) {
      for (int64_t m : ms) {
        if (k == 2048 && m > 9 && n > 5) continue;  // keep the scalar reference quick
        auto x = random_f32(m * k, seed++), w = random_f32(n * k, seed++);
        auto wb = to_bf16(w);
        std::vector<float> ref(m * n), ref_b(m * n), got(m * n);
        matmul_f32_isa(Isa::kScalar, x.data(), m, k, w.data(), n, ref.data(), nullptr);
        matmul_bf16_isa(Isa::kScalar, x.data(), m, k, wb.data(), n, ref_b.data(), nullptr);
        for (Isa isa : fast_isas()) {
          matmul_f32_isa(isa, x.data(), m, k, w.data(), n, got.data(), nullptr);
          EXPECT_TRUE(same_bits(ref, got)) << "f32 " << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n;
          matmul_bf16_isa(isa, x.data(), m, k, wb.data(), n, got.data(), nullptr);
          EXPECT_TRUE(same_bits(ref_b, got)) << "bf16 " << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n;
        }
      }
    }
}

// Principle 1: row r of an m-row call equals the row computed alone, on 1 and 2 threads.
TEST(KernelsGemm, RowIsIndependentOfBatchAndThreads) {
  const int64_t k = 300, n = 77, max_m = 256;
  auto x = random_f32(max_m * k, 11), w = random_f32(n * k, 12);
  auto wb = to_bf16(w);
  ThreadPool pool1(1), pool2(2);
  std::vector<Isa> isas = fast_isas();
  isas.push_back(Isa::kScalar);
  for (Isa isa : isas) {
    for (bool bf16 : {false, true}) {
      auto run = [&](const float* xr, int64_t m, float* y, ThreadPool* pool) {
        if (bf16) matmul_bf16_isa(isa, xr, m, k, wb.data(), n, y, pool);
        else matmul_f32_isa(isa, xr, m, k, w.data(), n, y, pool);
      };
      std::vector<float> alone(max_m * n);  // [max_m, n], each row computed with m = 1
      for (int64_t r = 0; r < max_m; ++r) run(x.data() + r * k, 1, alone.data() + r * n, nullptr);
      for (int64_t m : {1, 2, 3, 5, 8, 17, 64, 255, 256}) {
        if (isa == Isa::kScalar && m > 17) continue;
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::vector<float> y(m * n);
          run(x.data(), m, y.data(), pool);
          EXPECT_EQ(0, std::memcmp(y.data(), alone.data(), m * n * sizeof(float)))
              << isa_name(isa) << (bf16 ? " bf16" : " f32") << " m=" << m << " threads=" << pool->size();
        }
      }
    }
  }
}

TEST(KernelsGemm, DispatchUsesActiveIsa) {
  const int64_t m = 3, k = 65, n = 9;
  auto x = random_f32(m * k, 21), w = random_f32(n * k, 22);
  std::vector<float> a(m * n), b(m * n);
  matmul_f32(x.data(), m, k, w.data(), n, a.data(), nullptr);
  matmul_f32_isa(active_isa(), x.data(), m, k, w.data(), n, b.data(), nullptr);
  EXPECT_TRUE(same_bits(a, b));
}

}  // namespace
}  // namespace gannet::kernels
