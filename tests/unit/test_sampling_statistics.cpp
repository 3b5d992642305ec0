// Statistical check of the sampler (DESIGN section 6): with fixed seeds, 20,000 draws per
// setting from a 12-token vocabulary must fit the distribution computed here, analytically
// and independently of the sampler, by a chi-square goodness-of-fit test at significance
// 0.001; tokens the filters remove must never be drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "sampling/sampler.h"

namespace gannet::sampling {
namespace {

// Upper critical values of the chi-square distribution at significance 0.001, for 1..11
// degrees of freedom: NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.4
// ("Critical Values of the Chi-Square Distribution"), column 0.001.
constexpr double kChi2Critical001[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458,
                                       24.322, 26.125, 27.877, 29.588, 31.264};

// Upper regularised incomplete gamma Q(a, x) (Numerical Recipes 6.2: series below a + 1,
// Lentz continued fraction above); the chi-square upper tail is Q(df / 2, stat / 2).
double upper_gamma_q(double a, double x) {
  const double log_front = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1 / a, sum = term;
    for (int n = 1; n < 500; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1 - sum * std::exp(log_front);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 500; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    d = 1 / d;
    c = b + an / c;
    h *= d * c;
  }
  return std::exp(log_front) * h;
}

TEST(SamplingStatistics, CriticalValuesMatchTheirSignificance) {
  for (int df = 1; df <= 11; ++df)
    EXPECT_NEAR(upper_gamma_q(df / 2.0, kChi2Critical001[df - 1] / 2.0), 0.001, 2e-6) << "df " << df;
}

const std::vector<float> kLogits = {1.9f, -0.3f, 1.2f, 0.4f, -1.1f, 2.3f, 0.0f, -0.7f, 1.5f, -1.6f, 0.8f, -2.0f};

struct Setting {
  const char* name;
  double temperature;
  int64_t top_k;
  double top_p;
  double min_p;
  double repetition = 1.0, frequency = 0.0, presence = 0.0;
  bool vary_stream = false;  // draw over streams (sample index) instead of positions
};

const std::vector<int32_t> kPrompt = {0, 5, 5};
const std::vector<int32_t> kOutput = {2, 2, 8};

// The target distribution from the definitions (vLLM's), in double: penalties,
// softmax(l / T), top-k (ties by id), renormalise, top-p (smallest prefix reaching p),
// min-p (relative to the top probability), renormalise. `margin` receives the smallest
// distance of any cumulative sum or ratio from its threshold, so that the test can insist
// the setting is not a knife-edge case where float rounding could decide membership.
std::vector<double> target(const Setting& s, double* margin) {
  const size_t v = kLogits.size();
  std::vector<double> l(kLogits.begin(), kLogits.end());
  std::vector<int> count(v, 0);
  std::vector<bool> seen(v, false);
  for (int32_t id : kPrompt) seen[size_t(id)] = true;
  for (int32_t id : kOutput) seen[size_t(id)] = true, ++count[size_t(id)];
  for (size_t i = 0; i < v; ++i) {
    if (seen[i]) l[i] = l[i] > 0 ? l[i] / s.repetition : l[i] * s.repetition;
    if (count[i]) l[i] -= s.frequency * count[i] + s.presence;
  }
  std::vector<size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  const size_t k = s.top_k > 0 ? std::min(v, size_t(s.top_k)) : v;
  std::vector<double> q(v, 0.0);
  double z = 0;
  for (size_t j = 0; j < k; ++j) z += std::exp((l[order[j]] - l[order[0]]) / s.temperature);
  for (size_t j = 0; j < k; ++j) q[order[j]] = std::exp((l[order[j]] - l[order[0]]) / s.temperature) / z;
  *margin = 1.0;
  double before = 0;
  for (size_t j = 0; j < k; ++j) {
    if (s.top_p < 1) {
      *margin = std::min(*margin, std::abs(before - s.top_p));
      if (j > 0 && before >= s.top_p) q[order[j]] = 0;
    }
    before += std::exp((l[order[j]] - l[order[0]]) / s.temperature) / z;
  }
  const double top = q[order[0]];
  for (size_t i = 0; i < v; ++i) {
    if (s.min_p > 0 && q[i] > 0) {
      *margin = std::min(*margin, std::abs(q[i] / top - s.min_p));
      if (q[i] < s.min_p * top) q[i] = 0;
    }
  }
  const double kept = std::accumulate(q.begin(), q.end(), 0.0);
  for (double& x : q) x /= kept;
  return q;
}

TEST(SamplingStatistics, DrawsFitTheAnalyticDistribution) {
  constexpr int kDraws = 20000;
  const Setting settings[] = {
      {"plain", 1.0, 0, 1.0, 0.0},
      {"cold top-k", 0.7, 6, 1.0, 0.0},
      {"hot top-p", 1.3, 0, 0.8, 0.0},
      {"min-p", 1.0, 0, 1.0, 0.12},
      {"all filters", 0.9, 9, 0.9, 0.05},
      {"flat top-k", 2.0, 10, 1.0, 0.0},
      {"penalties", 1.1, 0, 0.95, 0.0, 1.3, 0.4, 0.2},
      {"streams", 0.8, 0, 0.88, 0.02, 1.0, 0.0, 0.0, true},
  };
  Sampler sampler(int64_t(kLogits.size()));
  const std::vector<int32_t> eos;
  uint64_t seed = 1000;
  for (const Setting& s : settings) {
    SCOPED_TRACE(s.name);
    double margin = 0;
    const std::vector<double> q = target(s, &margin);
    ASSERT_GT(margin, 1e-3) << "a filter threshold sits too close to a probability";
    SamplingParams p;
    p.temperature = s.temperature;
    p.top_k = s.top_k;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repetition;
    p.frequency_penalty = s.frequency;
    p.presence_penalty = s.presence;
    p.validate();
    std::vector<int64_t> observed(kLogits.size(), 0);
    ++seed;
    for (uint64_t i = 0; i < kDraws; ++i) {
      const uint64_t stream = s.vary_stream ? i : 3, position = s.vary_stream ? 5 : i;
      const SampleInput in{kLogits.data(), &p, seed, stream, position, kPrompt, kOutput, eos};
      ++observed[size_t(sampler.sample(in).token)];
    }
    double chi2 = 0;
    int cells = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      if (q[i] == 0) {
        EXPECT_EQ(observed[i], 0) << "filtered-out token " << i << " was drawn";
        continue;
      }
      const double expected = kDraws * q[i];
      ASSERT_GE(expected, 5.0) << "token " << i << ": too few expected draws for chi-square";
      chi2 += (observed[i] - expected) * (observed[i] - expected) / expected;
      ++cells;
    }
    ASSERT_GE(cells, 2);
    const int df = cells - 1;
    const double critical = kChi2Critical001[df - 1];
    EXPECT_LT(chi2, critical) << "df " << df << ", p-value " << upper_gamma_q(df / 2.0, chi2 / 2.0);
    std::printf("  %-12s kept %2d  chi2 %7.3f  critical(df %2d, 0.001) %6.3f  p-value %.3f\n", s.name, cells, chi2,
                df, critical, upper_gamma_q(df / 2.0, chi2 / 2.0));
  }
}

}  // namespace
}  // namespace gannet::sampling
