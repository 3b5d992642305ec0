// Exact behaviour of each stage on small hand-made rows: penalties (numerically as vLLM
// defines them), min_tokens, greedy ties, temperature, top-k, top-p, min-p, logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "sampling/fixed_point_draw.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"

namespace gannet::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// logits = log(weights): at temperature 1 the probabilities are the normalised weights.
std::vector<float> log_of(const std::vector<double>& w) {
  std::vector<float> l;
  for (double x : w) l.push_back(float(std::log(x)));
  return l;
}

// Tokens drawn over `draws` positions. Every kept token below has probability >= 1%, so
// 3000 draws miss one with probability < 1e-13: the set drawn is the set kept.
std::set<int32_t> drawn(const std::vector<float>& logits, const SamplingParams& p, int draws = 3000) {
  Sampler s(int64_t(logits.size()));
  std::set<int32_t> out;
  for (int i = 0; i < draws; ++i) out.insert(s.sample(logits.data(), p, 7, 0, uint64_t(i)));
  return out;
}

SamplingParams sampling(double temperature = 1.0) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

TEST(SamplingFilters, PenaltiesFollowVllmFormulas) {
  const std::vector<float> raw = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, -1.0f};
  const std::vector<int32_t> prompt = {0, 1, 0};
  const std::vector<int32_t> output = {2, 2, 3, 5};
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  Penalties pen(6);
  std::vector<float> out(6);
  const TokenHistory h{prompt, output, {}};
  ASSERT_TRUE(Penalties::active(p, h));
  pen.apply(raw.data(), out.data(), p, h);
  EXPECT_EQ(out[0], 1.0f);                       // prompt, positive: 2 / 2 (once, though seen twice)
  EXPECT_EQ(out[1], -4.0f);                      // prompt, negative: -2 * 2
  EXPECT_EQ(out[2], 0.5f - 0.5f * 2 - 0.25f);    // 1 / 2, twice in output, present
  EXPECT_EQ(out[3], 0.25f - 0.5f * 1 - 0.25f);   // 0.5 / 2, once
  EXPECT_EQ(out[4], 3.0f);                       // never seen
  EXPECT_EQ(out[5], -2.0f - 0.5f - 0.25f);       // -1 * 2 (negative: multiplied), once
  // The scratch is reset: a second call without history leaves the row unchanged.
  SamplingParams plain;
  pen.apply(raw.data(), out.data(), plain, TokenHistory{});
  EXPECT_EQ(out, raw);
  EXPECT_FALSE(Penalties::active(plain, h));
}

TEST(SamplingFilters, MinTokensMasksEosAndStopIdsEvenWithIgnoreEos) {
  const std::vector<float> raw = {1.0f, 0.5f, 4.0f, 3.0f};
  const std::vector<int32_t> eos = {2};
  SamplingParams p = sampling(0.0);
  p.min_tokens = 3;
  p.stop_token_ids = {3, 99};  // 99 is outside this vocabulary: ignored
  p.ignore_eos = true;
  Sampler s(4);
  std::vector<int32_t> output = {1, 1};
  SampleInput in{raw.data(), &p, 0, 0, 2, {}, output, eos};
  EXPECT_EQ(s.sample(in).token, 0);  // 2 (EOS) and 3 (stop id) masked to -inf
  Penalties pen(4);
  std::vector<float> out(4);
  pen.apply(raw.data(), out.data(), p, TokenHistory{{}, output, eos});
  EXPECT_EQ(out, (std::vector<float>{1.0f, 0.5f, -kInf, -kInf}));
  output.push_back(0);  // three outputs: no longer masked
  in.output_ids = output;
  EXPECT_EQ(s.sample(in).token, 2);
}

TEST(SamplingFilters, GreedyIsArgmaxAfterPenaltiesLowestIdOnTies) {
  const std::vector<float> raw = {1.0f, 5.0f, 2.0f, 5.0f, 4.5f};
  SamplingParams p = sampling(0.0);
  p.top_k = 1;  // filters do not apply to greedy
  Sampler s(5);
  EXPECT_EQ(s.sample(raw.data(), p, 1, 0, 0), 1);
  EXPECT_EQ(Sampler::argmax(raw.data(), 5), 1);
  const std::vector<int32_t> prompt = {1, 3};
  p.repetition_penalty = 1.2;  // 5 / 1.2 < 4.5
  EXPECT_EQ(s.sample({raw.data(), &p, 1, 0, 0, prompt, {}, {}}).token, 4);
}

TEST(SamplingFilters, NoFilterDrawsEveryTokenAndNeverAMaskedOne) {
  std::vector<float> l = log_of({0.3, 0.25, 0.2, 0.15, 0.1});
  l.push_back(-kInf);
  EXPECT_EQ(drawn(l, sampling()), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(SamplingFilters, TopKKeepsExactlyKBreakingTiesByLowestId) {
  const std::vector<float> l = {1.0f, 3.0f, 3.0f, 3.0f, 0.0f, 2.9f};
  SamplingParams p = sampling();
  p.top_k = 2;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2}));
  p.top_k = 4;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2, 3, 5}));
  p.top_k = 6;  // >= vocab: off
  EXPECT_EQ(drawn(l, p).size(), 6u);
  p.top_k = -1;
  EXPECT_EQ(drawn(l, p).size(), 6u);
}

TEST(SamplingFilters, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<float> l = log_of({0.1, 0.4, 0.2, 0.3});  // order: 1, 3, 2, 0
  SamplingParams p = sampling();
  p.top_p = 0.39;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1}));
  p.top_p = 0.41;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 3}));
  p.top_p = 0.69;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 3}));
  p.top_p = 0.71;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 3, 2}));
  p.top_p = 1e-12;  // the top token is always kept
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1}));
}

TEST(SamplingFilters, TopPBoundaryIsExactInFixedPoint) {
  // Equal logits weigh exactly 2^40 each: a prefix of 2 reaches exactly p = 0.5, so the
  // third token (cumulative weight before it = p of the total) is cut, as in vLLM.
  const std::vector<float> l = {0.5f, 0.5f, 0.5f, 0.5f};
  SamplingParams p = sampling();
  p.top_p = 0.5;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1}));
  p.top_p = 0.5 + 1e-6;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplingFilters, TopPRenormalisesOverTopK) {
  const std::vector<float> l = log_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = sampling();
  p.top_p = 0.5;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1}));  // 0.4 < 0.5
  p.top_k = 2;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0}));  // 0.4 / 0.7 > 0.5
}

TEST(SamplingFilters, MinPIsRelativeToTheTopTokenAfterTemperature) {
  const std::vector<float> l = log_of({0.05, 1.0, 0.5, 0.2, 0.09});  // relative to the max
  SamplingParams p = sampling();
  p.min_p = 0.1;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2, 3}));
  p.min_p = 0.19;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2, 3}));
  p.min_p = 0.21;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2}));
  p.min_p = 1.0;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1}));
  // At temperature 2 the ratios are square roots: 0.224, 1, 0.707, 0.447, 0.3.
  p = sampling(2.0);
  p.min_p = 0.25;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{1, 2, 3, 4}));
}

TEST(SamplingFilters, MinPAppliesAfterTopP) {
  const std::vector<float> l = log_of({0.5, 0.3, 0.12, 0.08});
  SamplingParams p = sampling();
  p.top_p = 0.85;  // keeps 0, 1, 2
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.2;  // 0.12 / 0.5 = 0.24 stays; 0.08 already cut
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.3;
  EXPECT_EQ(drawn(l, p), (std::set<int32_t>{0, 1}));
}

TEST(SamplingFilters, FixedPointWeights) {
  EXPECT_EQ(fixed_point_weight(3.0f, 3.0f, 1 / 0.7), uint64_t(1) << 40);
  EXPECT_EQ(fixed_point_weight(-kInf, 3.0f, 1.0), 0u);
  EXPECT_EQ(fixed_point_weight(-27.0f, 3.0f, 1.0), 0u);  // e^-30 * 2^40 ~ 0.1
  const double half = std::log(0.5);
  EXPECT_NEAR(double(fixed_point_weight(float(half), 0.0f, 1.0)), 0x1p39, 0x1p39 * 1e-7);
}

TEST(SamplingFilters, EqualWeightsAreOrderedByLogitThenId) {
  // Both tail logits round to weight 2 (e^-27 * 2^40 ~ 2.07); the draw landing right after
  // the top token must take the higher logit, then the lower id, on both code paths.
  const std::vector<float> l = {-27.00001f, -26.99999f, 0.0f, -kInf, -27.00001f};
  ASSERT_EQ(fixed_point_weight(l[0], 0.0f, 1.0), 2u);
  ASSERT_EQ(fixed_point_weight(l[1], 0.0f, 1.0), 2u);
  using u128 = unsigned __int128;
  const uint64_t kept = (uint64_t(1) << 40) + 6;
  auto random_for = [&](uint64_t t) { return uint64_t(((u128(t) << 64) + kept - 1) / kept); };
  FixedPointDraw d(5);
  for (int64_t k : {0, 4}) {
    const DrawFilters f{1.0, k, 1.0, 0.0};
    EXPECT_EQ(d.draw(l.data(), f, random_for((uint64_t(1) << 40) - 1)), 2);
    EXPECT_EQ(d.draw(l.data(), f, random_for(uint64_t(1) << 40)), 1);
    EXPECT_EQ(d.draw(l.data(), f, random_for((uint64_t(1) << 40) + 2)), 0);
    EXPECT_EQ(d.draw(l.data(), f, random_for((uint64_t(1) << 40) + 5)), 4);
  }
}

TEST(SamplingFilters, LogprobsAreRawLogSoftmaxWithTopNByLogitThenId) {
  const std::vector<float> raw = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double z = 0;
  for (float x : raw) z += std::exp(double(x));
  auto ref = [&](int i) { return float(double(raw[size_t(i)]) - std::log(z)); };
  SamplingParams p = sampling(0.0);
  p.logprobs = 3;
  p.repetition_penalty = 2.0;  // changes the choice, not the reported logprobs
  const std::vector<int32_t> prompt = {1, 3};
  Sampler s(5);
  SampleOutput out = s.sample({raw.data(), &p, 0, 0, 0, prompt, {}, {}});
  EXPECT_EQ(out.token, 2);
  EXPECT_NEAR(out.logprob, ref(2), 1e-6);
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].id, 1);
  EXPECT_EQ(out.top[1].id, 3);
  EXPECT_EQ(out.top[2].id, 2);
  for (const TokenLogprob& t : out.top) EXPECT_NEAR(t.logprob, ref(t.id), 1e-6);
  p.logprobs = 0;  // the chosen token's logprob only
  out = s.sample({raw.data(), &p, 0, 0, 0, prompt, {}, {}});
  EXPECT_TRUE(out.top.empty());
  EXPECT_NEAR(out.logprob, ref(2), 1e-6);
  p.logprobs.reset();
  out = s.sample({raw.data(), &p, 0, 0, 0, prompt, {}, {}});
  EXPECT_TRUE(std::isnan(out.logprob));

  s.prompt_logprobs(raw.data(), 4, 2, &out);
  EXPECT_EQ(out.token, 4);
  EXPECT_NEAR(out.logprob, ref(4), 1e-6);
  ASSERT_EQ(out.top.size(), 2u);
  EXPECT_EQ(out.top[0].id, 1);
  EXPECT_EQ(out.top[1].id, 3);
}

}  // namespace
}  // namespace gannet::sampling
