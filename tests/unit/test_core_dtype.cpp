// The small float formats against ml_dtypes (tests/golden/dtype-tables.json, made by
// tools/make_dtype_tables.py): every FP8 E4M3, E8M0 and FP4 E2M1 code decodes to the same
// float32 bits (NaN as NaN), and float32 values — ties, subnormals, the largest finite
// values, overflow, infinities, signed zeros — encode to the same codes.
// labels: exact
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"

using namespace gannet;

namespace {

nlohmann::json tables() {
  std::filesystem::path root = std::getenv("GANNET_SOURCE_DIR") ? std::getenv("GANNET_SOURCE_DIR")
                                                                : std::filesystem::path(__FILE__).parent_path() / ".." / "..";
  std::ifstream in(root / "tests" / "golden" / "dtype-tables.json");
  EXPECT_TRUE(in.good()) << "dtype-tables.json missing";
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

void expect_same_value(float got, uint32_t want_bits, const std::string& what) {
  const float want = bits_to_f32(want_bits);
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else {
    EXPECT_EQ(f32_to_bits(got), want_bits) << what << ": got " << got << ", want " << want;
  }
}

}  // namespace

TEST(DTypeTables, DecodeEveryCode) {
  const auto t = tables();
  const auto e4m3 = t["e4m3fn_decode"].get<std::vector<uint32_t>>();
  const auto e8m0 = t["e8m0fnu_decode"].get<std::vector<uint32_t>>();
  const auto e2m1 = t["e2m1fn_decode"].get<std::vector<uint32_t>>();
  ASSERT_EQ(e4m3.size(), 256u);
  ASSERT_EQ(e8m0.size(), 256u);
  ASSERT_EQ(e2m1.size(), 16u);
  for (int c = 0; c < 256; ++c) {
    expect_same_value(fp8_e4m3_to_f32(uint8_t(c)), e4m3[size_t(c)], "e4m3 code " + std::to_string(c));
    expect_same_value(e8m0_to_f32(uint8_t(c)), e8m0[size_t(c)], "e8m0 code " + std::to_string(c));
  }
  for (int c = 0; c < 16; ++c) expect_same_value(fp4_e2m1_to_f32(uint8_t(c)), e2m1[size_t(c)], "e2m1 code " + std::to_string(c));
  // The extremes the formats are chosen for.
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));  // an f32 subnormal, exactly
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
}

TEST(DTypeTables, EncodeRoundsAsMlDtypes) {
  const auto t = tables();
  const auto inputs = t["encode_inputs"].get<std::vector<uint32_t>>();
  const auto e4m3 = t["e4m3fn_encode"].get<std::vector<int>>();
  const auto e2m1 = t["e2m1fn_encode"].get<std::vector<int>>();
  ASSERT_EQ(inputs.size(), e4m3.size());
  ASSERT_EQ(inputs.size(), e2m1.size());
  ASSERT_GT(inputs.size(), 1000u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const float x = bits_to_f32(inputs[i]);
    EXPECT_EQ(int(f32_to_fp8_e4m3(x)), e4m3[i]) << "e4m3 of " << x << " (bits " << inputs[i] << ")";
    // E2M1 has no NaN; ml_dtypes turns NaN into a signed zero, gannet into +0.
    if (!std::isnan(x)) {
      EXPECT_EQ(int(f32_to_fp4_e2m1(x)), e2m1[i]) << "e2m1 of " << x;
    }
  }
  // Round trips of every finite code.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) != 0x7f) {
      EXPECT_EQ(int(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(c)))), c) << c;
    }
  }
  for (int c = 0; c < 16; ++c) EXPECT_EQ(int(f32_to_fp4_e2m1(fp4_e2m1_to_f32(uint8_t(c)))), c) << c;
}
