// exp_f32, silu_mul, add, softmax, argmax, rmsnorm, RoPE and the sampler's fixed-point
// weights: every ISA variant
// bit-identical to the scalar reference, and the reference close to double precision.
// labels: exact
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/fixed_point_weights.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"

namespace gannet::kernels {
namespace {

std::vector<Isa> fast_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

std::vector<float> random_f32(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::vector<int64_t> kLengths = {1, 3, 7, 8, 15, 16, 17, 31, 33, 100, 257, 2048, 4099};

// Error of y against the exact value in units of the float spacing at the exact value
// (denormal spacing below FLT_MIN).
double ulp_error(float y, double exact) {
  double a = std::fabs(exact);
  double ulp = a < FLT_MIN ? 0x1p-149 : std::ldexp(1.0, std::ilogb(float(a)) - 23);
  return std::fabs(double(y) - exact) / ulp;
}

TEST(KernelsExp, AccurateOverDenseRange) {
  double worst = 0;
  float worst_x = 0;
  // Every 1021st float bit pattern (both signs) whose exp is finite and not flushed.
  for (uint64_t u = 0; u < 0x100000000ull; u += 1021) {
    float x = bits_to_f32(uint32_t(u));
    if (std::isnan(x) || x > 88.72f || x < -103.9f) continue;
    double e = ulp_error(exp_f32(x), std::exp(double(x)));
    if (e > worst) worst = e, worst_x = x;
  }
  EXPECT_LE(worst, 2.0) << "at x=" << worst_x;
}

TEST(KernelsExp, SpecialValues) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(exp_f32(-200.0f), 0.0f);
  EXPECT_EQ(exp_f32(-105.0f), 0.0f);
  EXPECT_EQ(exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(exp_f32(89.0f), INFINITY);
  EXPECT_EQ(exp_f32(1000.0f), INFINITY);
  EXPECT_TRUE(std::isfinite(exp_f32(88.72f)));
  EXPECT_GT(exp_f32(-103.0f), 0.0f);  // denormal result, not flushed
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
  EXPECT_LE(ulp_error(exp_f32(1.0f), std::exp(1.0)), 1.0);
}

TEST(KernelsExp, VariantsMatchScalar) {
  std::vector<float> x;
  for (uint64_t u = 0; u < 0x100000000ull; u += 4093) x.push_back(bits_to_f32(uint32_t(u)));
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, 88.73f, -103.97f, -87.3f}) x.push_back(s);
  std::vector<float> ref(x.size()), got(x.size());
  exp_n_isa(Isa::kScalar, x.data(), ref.data(), int64_t(x.size()));
  for (Isa isa : fast_isas()) {
    exp_n_isa(isa, x.data(), got.data(), int64_t(x.size()));
    EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa);
  }
}

// The sampler's weights: the vector exp's results, and its fallback to libm where a weight
// sits near a rounding boundary, give the reference's bits everywhere.
TEST(KernelsFixedPointWeights, VariantsMatchTheReferenceEverywhere) {
  std::mt19937_64 g(41);
  std::vector<float> row(4099);
  std::vector<uint64_t> want(row.size()), got(row.size());
  const double inv_ts[] = {1.0, 1 / 0.7, 1 / 1.3, 1 / 0.05, 1 / 25.0};
  const double skips[] = {-HUGE_VAL, std::log(0.01) - 1e-6, -0.5};
  int64_t rows = 0;
  for (int r = 0; r < 60; ++r) {
    std::normal_distribution<float> normal(0.0f, r % 4 == 0 ? 0.05f : r % 4 == 1 ? 1.0f : r % 4 == 2 ? 6.0f : 40.0f);
    for (float& x : row) x = normal(g);
    row[size_t(g() % row.size())] = -INFINITY;
    if (r % 5 == 0) row[size_t(g() % row.size())] = NAN;
    float m = -INFINITY;
    for (float x : row) m = x > m ? x : m;
    for (double inv_t : inv_ts)
      for (double skip : skips) {
        fixed_point_weights_isa(Isa::kScalar, row.data(), int64_t(row.size()), m, inv_t, skip, want.data());
        for (Isa isa : fast_isas()) {
          std::fill(got.begin(), got.end(), ~uint64_t(0));
          fixed_point_weights_isa(isa, row.data(), int64_t(row.size()), m, inv_t, skip, got.data());
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(uint64_t)), 0)
              << isa_name(isa) << " row " << r << " inv_t " << inv_t << " skip " << skip;
        }
        ++rows;
      }
  }
  // Exponents placed on the rounding boundaries: d = -inv_t with exp(d) 2^40 within a few
  // ulps of w - 0.5, for weights across the range.
  std::vector<float> ones(8, -1.0f);
  std::vector<uint64_t> w8(8), r8(8);
  int64_t boundaries = 0;
  for (int b = 0; b < 41; ++b)
    for (uint64_t wv : {uint64_t(1) << b, (uint64_t(1) << b) + 1, (uint64_t(3) << b) / 2 + 7}) {
      if (wv < 1 || wv > (uint64_t(1) << 40)) continue;
      const double d0 = std::log((double(wv) - 0.5) * 0x1p-40);
      for (int step = -4; step <= 4; ++step) {
        const double inv_t = -std::nextafter(d0, step < 0 ? -HUGE_VAL : HUGE_VAL) + step * 0x1p-52 * std::fabs(d0);
        if (!(-inv_t >= -30.0) || inv_t <= 0) continue;
        fixed_point_weights_isa(Isa::kScalar, ones.data(), 8, 0.0f, inv_t, -HUGE_VAL, r8.data());
        for (Isa isa : fast_isas()) {
          fixed_point_weights_isa(isa, ones.data(), 8, 0.0f, inv_t, -HUGE_VAL, w8.data());
          ASSERT_EQ(w8, r8) << isa_name(isa) << " weight " << wv << " step " << step;
        }
        ++boundaries;
      }
    }
  EXPECT_GT(rows, 800);
  EXPECT_GT(boundaries, 500);
}

TEST(KernelsActivations, SiluMulMatchesReferenceAndDouble) {
  for (int64_t n : kLengths) {
    auto g = random_f32(n, 1, 4.0f), u = random_f32(n, 2);
    if (n > 3) g[0] = -100.0f, g[1] = 100.0f, g[2] = -0.0f;
    std::vector<float> ref(n), got(n);
    silu_mul_isa(Isa::kScalar, g.data(), u.data(), ref.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double e = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
      EXPECT_NEAR(ref[i], e, 4e-7 * std::fabs(e) + 1e-30) << i;
    }
    for (Isa isa : fast_isas()) {
      silu_mul_isa(isa, g.data(), u.data(), got.data(), n);
      EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " n=" << n;
      std::vector<float> inplace = g;  // out aliasing gate
      silu_mul_isa(isa, inplace.data(), u.data(), inplace.data(), n);
      EXPECT_TRUE(same_bits(ref, inplace)) << isa_name(isa) << " in place n=" << n;
      add_isa(isa, g.data(), u.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], g[i] + u[i]);
    }
  }
}

// An attention head's weighted sum of value rows: every ISA bit-identical to the plain
// loop written out here (product rounded, then the sum; rows in the given order, picked by
// index or taken in turn), for head widths on and off the vector widths.
TEST(KernelsActivations, AddWeightedRowsMatchesPlainLoop) {
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t d : {1, 7, 16, 33, 64, 100, 128, 200}) {
    for (int64_t rows : {0, 1, 5, 40}) {
      const int64_t pool_rows = 50;
      std::vector<float> base(static_cast<size_t>(pool_rows * (d + 3))), w(static_cast<size_t>(rows)), y0(static_cast<size_t>(d));
      for (auto& v : base) v = nd(g);
      for (auto& v : w) v = std::fabs(nd(g)) * 0.1f;
      for (auto& v : y0) v = nd(g);
      std::vector<int32_t> idx(static_cast<size_t>(rows));
      for (auto& i : idx) i = int32_t(g() % pool_rows);
      for (bool indexed : {false, true}) {
        std::vector<float> want = y0;
        for (int64_t j = 0; j < rows; ++j) {
          const float* r = base.data() + (indexed ? idx[size_t(j)] : j) * (d + 3);
          for (int64_t c = 0; c < d; ++c) {
            volatile float prod = w[size_t(j)] * r[c];  // rounded before the add, whatever the compiler
            want[size_t(c)] = want[size_t(c)] + prod;
          }
        }
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (!isa_supported(isa)) continue;
          std::vector<float> got = y0;
          add_weighted_rows_isa(isa, w.data(), base.data(), indexed ? idx.data() : nullptr, rows, d + 3, got.data(), d);
          EXPECT_TRUE(same_bits(want, got)) << isa_name(isa) << " d=" << d << " rows=" << rows << " indexed=" << indexed;
        }
      }
    }
  }
}

// Both GELU forms: every ISA bit-identical to the scalar reference (also in place and on
// the masked/remainder tails), and the reference within float rounding of the formula in
// double precision (std::erf / std::tanh), including large magnitudes and signed zero.
TEST(KernelsActivations, GeluMulMatchesReferenceAndDouble) {
  using Fn = void (*)(Isa, const float*, const float*, float*, int64_t);
  struct Form {
    const char* name;
    Fn fn;
    double (*exact)(double);
  };
  const Form forms[] = {
      {"erf", gelu_erf_mul_isa, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
      {"tanh", gelu_tanh_mul_isa,
       [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }},
  };
  for (const Form& f : forms) {
    for (int64_t n : kLengths) {
      auto g = random_f32(n, 5, 4.0f), u = random_f32(n, 6);
      if (n > 5) g[0] = -30.0f, g[1] = 30.0f, g[2] = -0.0f, g[3] = 1e-8f, g[4] = -9.0f;
      std::vector<float> ref(n), got(n);
      f.fn(Isa::kScalar, g.data(), u.data(), ref.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double e = f.exact(double(g[i])) * double(u[i]);
        // Relative 1e-6 of the product plus 1e-7 of |x * up| (the erf fit is relative to
        // erfc, so absolute in Phi near the sign change).
        EXPECT_NEAR(ref[i], e, 1e-6 * std::fabs(e) + 1e-7 * std::fabs(double(g[i]) * u[i]) + 1e-30)
            << f.name << " x=" << g[i];
      }
      for (Isa isa : fast_isas()) {
        f.fn(isa, g.data(), u.data(), got.data(), n);
        EXPECT_TRUE(same_bits(ref, got)) << f.name << " " << isa_name(isa) << " n=" << n;
        std::vector<float> inplace = g;
        f.fn(isa, inplace.data(), u.data(), inplace.data(), n);
        EXPECT_TRUE(same_bits(ref, inplace)) << f.name << " " << isa_name(isa) << " in place n=" << n;
      }
    }
  }
}

TEST(KernelsSoftmax, VariantsMatchReferenceAndSumToOne) {
  for (int64_t n : kLengths) {
    auto x = random_f32(n, 3, 5.0f);
    if (n > 4) x[1] = -INFINITY, x[3] = 30.0f;  // masked logit, dominant logit
    std::vector<float> ref = x;
    softmax_isa(Isa::kScalar, ref.data(), n);
    double sum = 0;
    for (float p : ref) sum += p;
    EXPECT_NEAR(sum, 1.0, 1e-5) << n;
    for (Isa isa : fast_isas()) {
      std::vector<float> got = x;
      softmax_isa(isa, got.data(), n);
      EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(KernelsSoftmax, ArgmaxFirstMaximumIgnoringNan) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (int64_t n : kLengths) {
      auto x = random_f32(n, 4);
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
      EXPECT_EQ(argmax_isa(isa, x.data(), n), best) << isa_name(isa) << " n=" << n;
      if (n >= 20) {
        x[5] = x[17] = 50.0f;  // tie: the first wins
        x[2] = NAN;
        EXPECT_EQ(argmax_isa(isa, x.data(), n), 5) << isa_name(isa);
      }
    }
    std::vector<float> all_nan(19, NAN), all_ninf(19, -INFINITY);
    EXPECT_EQ(argmax_isa(isa, all_nan.data(), 19), 0);
    all_ninf[4] = NAN;
    EXPECT_EQ(argmax_isa(isa, all_ninf.data(), 19), 0);
  }
}

TEST(KernelsRmsnorm, VariantsMatchReferenceAndDouble) {
  for (int64_t dim : kLengths) {
    const int64_t rows = 3;
    auto x = random_f32(rows * dim, 5), w = random_f32(dim, 6);
    std::vector<float> ref(rows * dim), ref_nw(rows * dim), got(rows * dim);
    rmsnorm_isa(Isa::kScalar, x.data(), w.data(), ref.data(), rows, dim, 1e-6f);
    rmsnorm_isa(Isa::kScalar, x.data(), nullptr, ref_nw.data(), rows, dim, 1e-6f);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      double s = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int64_t i = 0; i < dim; ++i) {
        double e = x[r * dim + i] * s * w[i];
        ASSERT_NEAR(ref[r * dim + i], e, 1e-6 * std::fabs(e) + 1e-7) << dim;
      }
    }
    for (Isa isa : fast_isas()) {
      rmsnorm_isa(isa, x.data(), w.data(), got.data(), rows, dim, 1e-6f);
      EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " dim=" << dim;
      rmsnorm_isa(isa, x.data(), nullptr, got.data(), rows, dim, 1e-6f);
      EXPECT_TRUE(same_bits(ref_nw, got)) << isa_name(isa) << " no weight, dim=" << dim;
      got = x;  // in place
      rmsnorm_isa(isa, got.data(), w.data(), got.data(), rows, dim, 1e-6f);
      EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " in place, dim=" << dim;
    }
  }
}

TEST(KernelsRope, DefaultInvFreqMatchesFormula) {
  RopeTable t(64, 10000.0, 4096);
  ASSERT_EQ(t.inv_freq().size(), 32u);
  for (int i = 0; i < 32; ++i)
    EXPECT_NEAR(t.inv_freq()[i], std::pow(10000.0, -2.0 * i / 64), 2e-6 * std::pow(10000.0, -2.0 * i / 64));
  EXPECT_EQ(t.attention_factor(), 1.0f);
  std::vector<float> c(32), s(32);
  t.cos_sin(1000, c.data(), s.data());
  for (int i = 0; i < 32; ++i) {
    const double a = double(1000.0f * t.inv_freq()[i]);
    EXPECT_NEAR(c[i], std::cos(a), 1e-6);
    EXPECT_NEAR(s[i], std::sin(a), 1e-6);
  }
}

TEST(KernelsRope, Llama3ScalingBands) {
  RopeScalingParams p;
  p.kind = RopeScalingKind::kLlama3;
  p.factor = 32;
  p.low_freq_factor = 1;
  p.high_freq_factor = 4;
  p.original_max_position_embeddings = 8192;
  RopeTable base(64, 500000.0, 64), t(64, 500000.0, 64, p);
  for (int i = 0; i < 32; ++i) {
    const double f = base.inv_freq()[i], wavelen = 2 * M_PI / f;
    if (wavelen < 8192 / 4.0) {
      EXPECT_EQ(t.inv_freq()[i], base.inv_freq()[i]) << i;
    } else if (wavelen > 8192 / 1.0) {
      EXPECT_FLOAT_EQ(t.inv_freq()[i], float(f / 32)) << i;
    } else {
      const double smooth = (8192 / wavelen - 1) / 3;
      EXPECT_NEAR(t.inv_freq()[i], (1 - smooth) * f / 32 + smooth * f, 1e-6 * f) << i;
    }
  }
}

// DeepSeek-V4 numbers (docs/deepseek-v4-architecture.md 4.2): R = 64, theta = 160000,
// L0 = 65536, factor 16: pairs 0..15 keep f_i, pairs >= 25 use f_i / 16.
TEST(KernelsRope, YarnCorrectionRange) {
  RopeScalingParams p;
  p.kind = RopeScalingKind::kYarn;
  p.factor = 16;
  p.original_max_position_embeddings = 65536;
  RopeTable base(64, 160000.0, 64), t(64, 160000.0, 64, p);
  for (int i = 0; i < 32; ++i) {
    const float f = base.inv_freq()[i];
    if (i <= 15) {
      EXPECT_FLOAT_EQ(t.inv_freq()[i], f) << i;
    } else if (i >= 25) {
      EXPECT_FLOAT_EQ(t.inv_freq()[i], f / 16) << i;
    } else {
      EXPECT_TRUE(t.inv_freq()[i] < f && t.inv_freq()[i] > f / 16) << i;
    }
  }
  EXPECT_NEAR(t.attention_factor(), 0.1 * std::log(16.0) + 1.0, 1e-6);  // HF default mscale
  p.attention_factor = 1.0;  // V4: no mscale
  EXPECT_EQ(RopeTable(64, 160000.0, 64, p).attention_factor(), 1.0f);
}

TEST(KernelsRope, VariantsMatchReferenceAndRotate) {
  struct Case { int head_dim, rotary_dim, offset; };
  const int64_t n_tokens = 5;
  const int n_heads = 3;
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 40000};  // 40000: past the table
  for (Case c : {Case{64, 64, 0}, Case{128, 128, 0}, Case{80, 80, 0}, Case{96, 32, 0},
                 Case{512, 64, 448}, Case{24, 10, 6}}) {
    RopeTable table(c.rotary_dim, 10000.0, 50000);
    for (bool interleaved : {false, true})
      for (bool inverse : {false, true}) {
        auto x = random_f32(n_tokens * n_heads * c.head_dim, 7);
        std::vector<float> ref = x;
        apply_rope_isa(Isa::kScalar, ref.data(), n_tokens, n_heads, c.head_dim, positions.data(),
                       table, interleaved, c.offset, inverse);
        // Against the rotation computed in double from the table's cos/sin.
        std::vector<float> cs(c.rotary_dim);
        for (int64_t t = 0; t < n_tokens; ++t) {
          table.cos_sin(positions[t], cs.data(), cs.data() + c.rotary_dim / 2);
          for (int h = 0; h < n_heads; ++h)
            for (int i = 0; i < c.rotary_dim / 2; ++i) {
              const int64_t base = (t * n_heads + h) * c.head_dim + c.offset;
              const int64_t ia = base + (interleaved ? 2 * i : i);
              const int64_t ib = base + (interleaved ? 2 * i + 1 : i + c.rotary_dim / 2);
              const double co = cs[i], si = inverse ? -cs[c.rotary_dim / 2 + i] : cs[c.rotary_dim / 2 + i];
              ASSERT_NEAR(ref[ia], x[ia] * co - x[ib] * si, 1e-5);
              ASSERT_NEAR(ref[ib], x[ib] * co + x[ia] * si, 1e-5);
            }
          for (int h = 0; h < n_heads; ++h)  // channels outside the rotary range untouched
            for (int d = 0; d < c.head_dim; ++d)
              if (d < c.offset || d >= c.offset + c.rotary_dim) {
                ASSERT_EQ(ref[(t * n_heads + h) * c.head_dim + d], x[(t * n_heads + h) * c.head_dim + d]);
              }
        }
        for (Isa isa : fast_isas()) {
          std::vector<float> got = x;
          apply_rope_isa(isa, got.data(), n_tokens, n_heads, c.head_dim, positions.data(), table,
                         interleaved, c.offset, inverse);
          EXPECT_TRUE(same_bits(ref, got)) << isa_name(isa) << " head_dim=" << c.head_dim
                                           << " interleaved=" << interleaved << " inverse=" << inverse;
        }
      }
  }
}

TEST(KernelsRope, InverseUndoesRotation) {
  RopeTable table(64, 10000.0, 4096);
  const std::vector<int32_t> pos = {3, 1000};
  auto x = random_f32(2 * 4 * 64, 8);
  std::vector<float> y = x;
  apply_rope(y.data(), 2, 4, 64, pos.data(), table, true);
  apply_rope(y.data(), 2, 4, 64, pos.data(), table, true, 0, true);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5);
}

}  // namespace
}  // namespace gannet::kernels
