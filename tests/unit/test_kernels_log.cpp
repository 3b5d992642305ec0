// log_f32 and log1p_f32 against the C library's double-precision results (accuracy in ulp
// of the correctly rounded f32 value), their special values, and softplus_f32's threshold.
// labels: exact
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/cpu/exp.h"
#include "kernels/cpu/log.h"

using namespace gannet::kernels;

namespace {

// Distance in representable f32 values between got and the double want (rounded to f32).
double ulp_error(float got, double want) {
  const float w = float(want);
  if (got == w) return 0.0;
  const double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
  return std::fabs(double(got) - want) / ulp;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(KernelsLog, LogWithinOneUlp) {
  std::mt19937 g(5);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits(uint32_t(g() % 0x7f800000u) + 1u);  // every positive finite, subnormals too
    worst = std::max(worst, ulp_error(log_f32(x), std::log(double(x))));
  }
  for (float x = 0.5f; x < 2.0f; x = std::nextafter(x, 4.0f) + 1e-5f)  // dense around 1
    worst = std::max(worst, ulp_error(log_f32(x), std::log(double(x))));
  EXPECT_LE(worst, 1.0);
  EXPECT_EQ(log_f32(1.0f), 0.0f);
  EXPECT_EQ(log_f32(0.0f), -INFINITY);
  EXPECT_EQ(log_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(log_f32(NAN)));
}

TEST(KernelsLog, Log1pKeepsRelativeAccuracy) {
  std::mt19937 g(6);
  std::uniform_real_distribution<double> exponent(-40.0, 38.0), unit(-0.999, 1.0);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const float a = i % 2 ? float(std::pow(10.0, exponent(g))) : float(unit(g));
    worst = std::max(worst, ulp_error(log1p_f32(a), std::log1p(double(a))));
  }
  EXPECT_LE(worst, 1.5);
  EXPECT_EQ(log1p_f32(0.0f), 0.0f);
  EXPECT_EQ(log1p_f32(1e-30f), 1e-30f);
  EXPECT_EQ(log1p_f32(-1.0f), -INFINITY);
  EXPECT_EQ(log1p_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(log1p_f32(-2.0f)));
  EXPECT_TRUE(std::isnan(log1p_f32(NAN)));
}

TEST(KernelsLog, SoftplusFollowsTorchThreshold) {
  for (float z : {20.0001f, 25.0f, 88.0f, 1e10f, std::numeric_limits<float>::max()}) EXPECT_EQ(softplus_f32(z), z);
  // At and below 20 the formula is used; at 20 it rounds to 20 + 2e-9, i.e. 20 in f32.
  EXPECT_EQ(softplus_f32(20.0f), log1p_f32(exp_f32(20.0f)));
  EXPECT_EQ(softplus_f32(-200.0f), 0.0f);
  double worst = 0.0;
  for (float z = -80.0f; z <= 20.0f; z += 0.01f)
    worst = std::max(worst, ulp_error(softplus_f32(z), std::log1p(std::exp(double(z)))));
  EXPECT_LE(worst, 2.5);  // exp_f32's error plus log1p_f32's
}
