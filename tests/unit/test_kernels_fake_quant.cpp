// Fake quantization (fake_quant.h) against tests/golden/fake-quant.json, written from the
// specification with numpy + ml_dtypes (tools/make_fake_quant_golden.py): every output bit.
// labels: exact
#include <gtest/gtest.h>

#include <cstdlib>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "kernels/cpu/fake_quant.h"

namespace gannet::kernels {
namespace {

nlohmann::json load_golden() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  const std::filesystem::path p = std::filesystem::path(src ? src : ".") / "tests" / "golden" / "fake-quant.json";
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::vector<float> from_bits(const nlohmann::json& a) {
  std::vector<float> v;
  for (const auto& b : a) {
    const uint32_t u = b.get<uint32_t>();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

TEST(KernelsFakeQuant, MatchesNumpyMlDtypesReference) {
  const nlohmann::json g = load_golden();
  ASSERT_GE(g["cases"].size(), 8u);
  int compared = 0;
  for (const auto& c : g["cases"]) {
    const std::vector<float> x = from_bits(c["x"]);
    struct Op {
      const char* name;
      void (*run)(float*, int64_t);
    };
    const Op ops[] = {
        {"fq8_b32", [](float* v, int64_t n) { fake_quant_fp8(v, n, 32, false); }},
        {"fq8_pow2_b32", [](float* v, int64_t n) { fake_quant_fp8(v, n, 32, true); }},
        {"fq8_pow2_b128", [](float* v, int64_t n) { fake_quant_fp8(v, n, 128, true); }},
        {"fq4_b32", [](float* v, int64_t n) { fake_quant_fp4(v, n, 32); }},
        {"fq4e_b16", [](float* v, int64_t n) { fake_quant_fp4_e4m3_scale(v, n, 16); }},
    };
    for (const Op& op : ops) {
      std::vector<float> got = x;
      op.run(got.data(), int64_t(got.size()));
      const std::vector<float> want = from_bits(c[op.name]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&b, &want[i], 4);
        ASSERT_EQ(a, b) << op.name << " element " << i << " of " << got.size() << ": x " << x[i] << " got " << got[i]
                        << " want " << want[i];
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, int(g["cases"].size()) * 5);
}

TEST(KernelsFakeQuant, Pow2CeilFromBits) {
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.0000001f), 2.0f);
  EXPECT_EQ(pow2_ceil(0.75f), 1.0f);
  EXPECT_EQ(pow2_ceil(0x1p-20f), 0x1p-20f);
  EXPECT_EQ(pow2_ceil(3e-7f), 0x1p-21f);
}

TEST(KernelsFakeQuant, NanPoisonsOnlyItsBlock) {
  std::vector<float> x(64, 0.5f);
  x[40] = NAN;
  fake_quant_fp8(x.data(), 64, 32, true);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(x[size_t(i)], 0.5f);
  for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(x[size_t(i)]));
}


// The packed forms (pack_* / unpack_*) reproduce the fake quantizations bit for bit:
// values over 60 binades, exact zeros and signed zeros, scale ties, a NaN block.
TEST(KernelsFakeQuant, PackedFormsEqualFakeQuant) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 30), pick(0, 15);
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int p = pick(rng);
    const int blk_exp = ex(rng);  // roughly one exponent per element; blocks mix them
    x[size_t(i)] = p == 0 ? 0.0f : p == 1 ? -0.0f : p == 2 ? 6.0f * std::ldexp(1.0f, blk_exp) : std::ldexp(mant(rng), blk_exp);
  }
  for (int64_t i = 64; i < 96; ++i) x[size_t(i)] = std::numeric_limits<float>::quiet_NaN();
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  for (int64_t block : {16, 32, 64}) {
    std::vector<uint8_t> codes(static_cast<size_t>(n)), scales(size_t(n / block));
    std::vector<float> want = x, got(static_cast<size_t>(n));
    fake_quant_fp8(want.data(), n, block, true);
    pack_fp8_pow2(x.data(), n, block, codes.data(), scales.data());
    unpack_fp8_pow2(codes.data(), scales.data(), n, block, got.data());
    EXPECT_TRUE(same(want, got)) << "fp8 block " << block;
    want = x;
    fake_quant_fp4(want.data(), n, block);
    pack_fp4(x.data(), n, block, codes.data(), scales.data());
    unpack_fp4(codes.data(), scales.data(), n, block, got.data());
    EXPECT_TRUE(same(want, got)) << "fp4 block " << block;
    want = x;
    fake_quant_fp4_e4m3_scale(want.data(), n, block);
    pack_fp4_e4m3_scale(x.data(), n, block, codes.data(), scales.data());
    unpack_fp4_e4m3_scale(codes.data(), scales.data(), n, block, got.data());
    EXPECT_TRUE(same(want, got)) << "fp4e block " << block;
  }
}

}  // namespace
}  // namespace gannet::kernels
