// N-gram drafting (sampling/speculative.h) against hand-worked histories.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "sampling/speculative.h"

using gannet::sampling::ngram_draft;
using gannet::sampling::NgramConfig;

namespace {

std::vector<int32_t> draft(const std::vector<int32_t>& h, int k, int lo = 1, int hi = 4) {
  std::vector<int32_t> out = {99};  // cleared by the call
  ngram_draft(h, k, NgramConfig{lo, hi}, &out);
  return out;
}

}  // namespace

TEST(NgramDraft, LongestSuffixLatestOccurrence) {
  // Suffix "1 2 3" (n = 3) occurs at 0 and 5; the latest (5) is followed by 9 1 2 3.
  const std::vector<int32_t> h = {1, 2, 3, 7, 7, 1, 2, 3, 9, 1, 2, 3};
  EXPECT_EQ(draft(h, 2), (std::vector<int32_t>{9, 1}));
  // Only n <= 2 allowed: suffix "2 3" latest earlier at 6, followed by 9 1 2 3.
  EXPECT_EQ(draft(h, 3, 1, 2), (std::vector<int32_t>{9, 1, 2}));
  // A longer n wins over a later shorter match: history ending "5 3" matches only "3".
  const std::vector<int32_t> g = {4, 5, 3, 8, 3, 6, 4, 5, 3};
  EXPECT_EQ(draft(g, 2), (std::vector<int32_t>{8, 3}));  // "4 5 3" at 0 (n = 3), not "3" at 4
}

TEST(NgramDraft, CopyContinuesPeriodically) {
  // A run of one token: the latest earlier "7" is the one before last; its copy runs into
  // the suffix and continues with its own drafts.
  EXPECT_EQ(draft({1, 7, 7}, 4), (std::vector<int32_t>{7, 7, 7, 7}));
  // Period 3: "a b c a b" -> suffix "a b" at 0, followed by c a b, then c a ...
  EXPECT_EQ(draft({1, 2, 3, 1, 2}, 5), (std::vector<int32_t>{3, 1, 2, 3, 1}));
}

TEST(NgramDraft, NothingWithoutAMatch) {
  EXPECT_TRUE(draft({1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(draft({5}, 4).empty());
  EXPECT_TRUE(draft({}, 4).empty());
  EXPECT_TRUE(draft({1, 2, 1, 2}, 0).empty());
  // ngram_min above every repeat: "3 1 2" appears once.
  EXPECT_TRUE(draft({1, 2, 3, 1, 2}, 3, 3, 4).empty());
}

// Verification of deterministic drafts over many seeds, against known distributions: each
// seed's samples equal plain sampling's at the same output positions, the first verified
// token has the target distribution of its row (chi-square, alpha = 0.001), the draft is
// accepted with its target probability, and after an acceptance the next row's token has
// that row's distribution.
TEST(VerifyPointDrafts, SamplesAreThePlainOnesAndHaveTheTargetDistribution) {
  using namespace gannet::sampling;
  constexpr int64_t V = 6;
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 0.7f, 0.0f, -1.0f,   // row 0: token after the last
                                     0.3f, 1.2f, -0.2f, 0.0f, 0.5f, -0.7f,   // row 1: after draft 1
                                     -0.4f, 0.1f, 0.9f, 0.3f, -0.2f, 0.6f};  // row 2: after draft 2
  auto softmax = [&](int row) {
    std::vector<double> p(V);
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += p[size_t(v)] = std::exp(double(logits[size_t(row * V + v)]));
    for (double& x : p) x /= z;
    return p;
  };
  const std::vector<int32_t> history = {0, 1, 2, 3, 0};  // prompt {0, 1}, last token 2, drafts 3, 0
  const int64_t prompt_len = 2, start = 2, count = 3;
  gannet::SamplingParams params;
  params.temperature = 1.0;
  params.validate();
  Sampler sampler(V), plain(V);
  SampleOutput out, ref;
  constexpr int kSeeds = 20000;
  std::vector<int64_t> first(V, 0), second(V, 0);
  int64_t accepted = 0;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    SampleInput in;
    in.params = &params;
    in.seed = seed;
    std::vector<int32_t> got;
    const int taken = verify_point_drafts(sampler, in, logits.data(), V, history, prompt_len, start, count, &out,
                                          [&](int64_t, const SampleOutput& o) { got.push_back(o.token); });
    ASSERT_EQ(taken, int(got.size()));
    // Plain decoding: the token at output position 1, then (if it was the draft) at 2, ...
    for (int j = 0; j < taken; ++j) {
      SampleInput p = in;
      p.logits = logits.data() + j * V;
      p.position = uint64_t(start + j + 1 - prompt_len);
      const std::span<const int32_t> before(history.data(), size_t(start + j + 1));
      p.prompt_ids = before.subspan(0, size_t(prompt_len));
      p.output_ids = before.subspan(size_t(prompt_len));
      plain.sample(p, &ref);
      ASSERT_EQ(got[size_t(j)], ref.token) << "seed " << seed << " row " << j;
      if (j + 1 < taken) {
        ASSERT_EQ(got[size_t(j)], history[size_t(start + j + 1)]);  // kept only on a match
      }
    }
    if (taken < count) {
      ASSERT_NE(got.back(), history[size_t(start + taken)]);
    }
    ++first[size_t(got[0])];
    if (taken >= 2) {
      ++accepted;
      ++second[size_t(got[1])];
    }
  }
  auto chi2 = [](const std::vector<int64_t>& obs, const std::vector<double>& p) {
    double n = 0, c = 0;
    for (int64_t o : obs) n += double(o);
    for (size_t i = 0; i < obs.size(); ++i) c += std::pow(double(obs[i]) - n * p[i], 2) / (n * p[i]);
    return c;
  };
  constexpr double kChi2Df5 = 20.515;  // 0.999 quantile, 5 degrees of freedom
  EXPECT_LT(chi2(first, softmax(0)), kChi2Df5);
  EXPECT_LT(chi2(second, softmax(1)), kChi2Df5);
  // Acceptance of draft 3 at row 0 with probability p0(3).
  const double pa = softmax(0)[3];
  const double z = (double(accepted) - kSeeds * pa) / std::sqrt(kSeeds * pa * (1 - pa));
  EXPECT_LT(std::abs(z), 3.3) << accepted << " accepted of " << kSeeds;
  EXPECT_GT(accepted, 0);
}

namespace {

using gannet::sampling::FixedPointDraw;
using gannet::sampling::DrawFilters;

// kept_weights is the distribution draw() samples: for every filter combination, the token
// draw() returns for random bits r is the one a plain walk over the kept weights (in the
// canonical order: weight desc, logit desc, id asc) gives for floor(r * W' / 2^64).
TEST(FixedPointDraw, KeptWeightsAreWhatDrawSamples) {
  const int64_t V = 300;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(V));
  for (float& x : logits) x = g(rng);
  logits[7] = logits[8];  // a tie
  FixedPointDraw draw(V);
  std::vector<uint64_t> w(static_cast<size_t>(V));
  for (DrawFilters f : {DrawFilters{1.0, 0, 1.0, 0.0}, DrawFilters{0.7, 20, 1.0, 0.0}, DrawFilters{1.3, 0, 0.8, 0.0},
                        DrawFilters{1.0, 0, 1.0, 0.05}, DrawFilters{0.9, 50, 0.9, 0.01}}) {
    const uint64_t W = draw.kept_weights(logits.data(), f, w.data());
    std::vector<int32_t> order;
    for (int32_t i = 0; i < V; ++i)
      if (w[size_t(i)]) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      if (w[size_t(a)] != w[size_t(b)]) return w[size_t(a)] > w[size_t(b)];
      if (logits[size_t(a)] != logits[size_t(b)]) return logits[size_t(a)] > logits[size_t(b)];
      return a < b;
    });
    uint64_t sum = 0;
    for (int32_t i : order) sum += w[size_t(i)];
    ASSERT_EQ(sum, W);
    if (f.top_k) {
      EXPECT_LE(int64_t(order.size()), f.top_k);
    }
    for (int t = 0; t < 3000; ++t) {
      const uint64_t r = rng();
      const uint64_t th = uint64_t((static_cast<unsigned __int128>(r) * W) >> 64);
      uint64_t acc = 0;
      int32_t want = -1;
      for (int32_t i : order)
        if (th < (acc += w[size_t(i)])) {
          want = i;
          break;
        }
      ASSERT_EQ(draw.draw(logits.data(), f, r), want) << "T " << f.temperature << " k " << f.top_k << " p " << f.top_p
                                                      << " min_p " << f.min_p;
    }
  }
}

// Rejection sampling against sampled drafts: drafts drawn from q (draw_draft), verified
// against p. Every emitted token has the target distribution of its row (chi-square,
// alpha = 0.001) whatever q is, acceptance runs at sum min(p, q), and a seed gives the
// same tokens every time.
TEST(VerifySampledDrafts, OutputsHaveTheTargetDistribution) {
  using namespace gannet::sampling;
  const int64_t V = 6;
  // Target rows (independent of history) and a draft distribution unlike them.
  const std::vector<float> target = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f,   // row 0
                                     0.3f, 1.5f, -0.2f, 0.1f, 0.9f, -0.7f,   // row 1
                                     0.0f, 0.0f, 1.0f, -1.0f, 0.5f, 0.2f};   // row 2
  const std::vector<float> draft = {2.0f, 0.0f, 0.0f, 1.0f, -1.0f, 0.5f,     // q for draft 1
                                    0.0f, 2.0f, 1.0f, -0.5f, 0.0f, 0.0f};    // q for draft 2
  for (const bool filtered : {false, true}) {
    gannet::SamplingParams params;
    params.temperature = filtered ? 0.8 : 1.0;
    if (filtered) params.top_k = 4;
    params.validate();
    // The distributions sampling gives each row (the fixed-point weights, normalised).
    Sampler sampler(V);
    auto dist = [&](const float* row) {
      SampleInput in;
      in.params = &params;
      in.logits = row;
      std::vector<uint64_t> w(static_cast<size_t>(V));
      const double W = double(sampler.weights(in, w.data()));
      std::vector<double> p;
      for (uint64_t x : w) p.push_back(double(x) / W);
      return p;
    };
    const auto p0 = dist(target.data()), p1 = dist(target.data() + V), q0 = dist(draft.data());
    const std::vector<int32_t> prompt = {0, 1, 2};
    const int64_t prompt_len = 2, start = 2, count = 3;
    RejectionScratch scratch;
    SampleOutput out;
    constexpr int kSeeds = 20000;
    std::vector<int64_t> first(V, 0), second(V, 0);
    int64_t accepted = 0;
    for (uint64_t seed = 0; seed < kSeeds; ++seed) {
      SampleInput in;
      in.params = &params;
      in.seed = seed;
      // Draft two tokens from q, as the executor does (history with the drafts before).
      std::vector<int32_t> h = prompt;
      for (int i = 0; i < 2; ++i) {
        SampleInput d = in;
        d.logits = draft.data() + i * V;
        d.position = uint64_t(int64_t(h.size()) - prompt_len);
        d.prompt_ids = std::span<const int32_t>(h.data(), size_t(prompt_len));
        d.output_ids = std::span<const int32_t>(h.data() + prompt_len, h.size() - size_t(prompt_len));
        const int32_t t = draw_draft(sampler, d);
        h.push_back(t);
      }
      std::vector<int32_t> got;
      auto run = [&] {
        got.clear();
        return verify_sampled_drafts(sampler, scratch, in, target.data(), draft.data(), V, h, prompt_len, start, count,
                                     &out, [&](int64_t, const SampleOutput& o) { got.push_back(o.token); });
      };
      const int taken = run();
      const std::vector<int32_t> again = got;
      ASSERT_EQ(run(), taken);
      ASSERT_EQ(got, again) << "seed " << seed << ": not reproducible";
      for (int j = 0; j + 1 < taken; ++j) ASSERT_EQ(got[size_t(j)], h[size_t(start + 1 + j)]);
      ++first[size_t(got[0])];
      if (taken >= 2) {
        ++accepted;
        ++second[size_t(got[1])];
      }
    }
    auto chi2 = [](const std::vector<int64_t>& obs, const std::vector<double>& p) {
      double n = 0, c = 0;
      int df = -1;
      for (int64_t o : obs) n += double(o);
      for (size_t i = 0; i < obs.size(); ++i) {
        if (p[i] == 0) {
          EXPECT_EQ(obs[i], 0) << "a token the target never samples";
          continue;
        }
        c += std::pow(double(obs[i]) - n * p[i], 2) / (n * p[i]);
        ++df;
      }
      // 0.999 quantiles for 3 and 5 degrees of freedom.
      return c / (df == 5 ? 20.515 : df == 3 ? 16.266 : 1e9);
    };
    EXPECT_LT(chi2(first, p0), 1.0) << (filtered ? "top-k 4, T 0.8" : "T 1");
    EXPECT_LT(chi2(second, p1), 1.0) << (filtered ? "top-k 4, T 0.8" : "T 1");
    double overlap = 0;
    for (int64_t v = 0; v < V; ++v) overlap += std::min(p0[size_t(v)], q0[size_t(v)]);
    const double z = (double(accepted) - kSeeds * overlap) / std::sqrt(kSeeds * overlap * (1 - overlap));
    EXPECT_LT(std::abs(z), 3.3) << accepted << " accepted of " << kSeeds << ", expected " << overlap;
  }
}

}  // namespace
