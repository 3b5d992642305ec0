// Determinism: a draw is a pure function of (row, params, history, seed, stream,
// position). The fast paths (streaming top-k, bit-length buckets) pick exactly the token
// that the full-sort definition in fixed_point_draw.h picks.
// labels: exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "sampling/counter_rng.h"
#include "sampling/fixed_point_draw.h"
#include "sampling/sampler.h"

namespace gannet::sampling {
namespace {

using u128 = unsigned __int128;
constexpr float kInf = std::numeric_limits<float>::infinity();

// The scheme of fixed_point_draw.h written out plainly: full sort, no shortcuts.
int32_t reference_draw(const std::vector<float>& l, const DrawFilters& f, uint64_t r) {
  const int64_t v = int64_t(l.size());
  std::vector<int32_t> order(static_cast<size_t>(v));
  for (int32_t i = 0; i < v; ++i) order[size_t(i)] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
  const double m = l[order[0]];
  const int64_t k = f.top_k > 0 && f.top_k < v ? f.top_k : v;
  struct C {
    uint64_t w;
    float l;
    int32_t id;
  };
  std::vector<C> c;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t id = order[size_t(j)];
    const double e = std::exp((double(l[id]) - m) * (1.0 / f.temperature));
    c.push_back({uint64_t(e * 1099511627776.0 + 0.5), l[id], id});
  }
  std::sort(c.begin(), c.end(), [](const C& a, const C& b) {
    return a.w != b.w ? a.w > b.w : a.l != b.l ? a.l > b.l : a.id < b.id;
  });
  u128 total = 0;
  for (const C& x : c) total += x.w;
  size_t n = c.size();
  if (f.top_p < 1) {
    const u128 target = u128(uint64_t(f.top_p * 4294967296.0 + 0.5)) * total;
    u128 before = 0;
    size_t keep = 0;
    while (keep < n && (keep == 0 || (before << 32) < target)) before += c[keep++].w;
    n = keep;
  }
  if (f.min_p > 0) {
    const uint64_t q = uint64_t(std::ceil(f.min_p * 1099511627776.0));
    size_t keep = 0;
    while (keep < n && c[keep].w >= q) ++keep;
    n = keep;
  }
  u128 kept = 0;
  for (size_t j = 0; j < n; ++j) kept += c[j].w;
  const uint64_t t = uint64_t((u128(r) * kept) >> 64);
  u128 acc = 0;
  for (size_t j = 0; j < n; ++j)
    if (t < (acc += c[j].w)) return c[j].id;
  ADD_FAILURE() << "reference ran off the end";
  return -1;
}

// Rows with plateaus (ties), long tails and masked entries.
std::vector<float> random_row(std::mt19937_64& g, int64_t v, double scale, bool quantise) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> l(static_cast<size_t>(v));
  for (float& x : l) {
    x = float(normal(g));
    if (quantise) x = std::round(x * 4) / 4;
  }
  if (v > 3) l[size_t(g() % uint64_t(v))] = -kInf;
  return l;
}

TEST(SamplingDeterminism, FastPathsEqualTheFullSortDefinition) {
  std::mt19937_64 g(20240601);
  const double temps[] = {0.05, 0.5, 1.0, 1.7, 10.0};
  const double top_ps[] = {1.0, 0.999, 0.9, 0.5, 0.1, 1e-9};
  const double min_ps[] = {0.0, 1e-12, 0.01, 0.2, 0.9, 1.0};
  const double scales[] = {0.01, 1.0, 4.0, 30.0};
  int checked = 0;
  for (int64_t v : {1, 2, 7, 100, 3000}) {
    FixedPointDraw draw(v);
    const int64_t top_ks[] = {0, 1, 2, 10, v / 2, v - 1, v + 5};
    for (int row = 0; row < 12; ++row) {
      const std::vector<float> l = random_row(g, v, scales[row % 4], row % 3 == 0);
      if (*std::max_element(l.begin(), l.end()) == -kInf) continue;
      for (int trial = 0; trial < 20; ++trial) {
        DrawFilters f{temps[g() % 5], top_ks[g() % 7], top_ps[g() % 6], min_ps[g() % 6]};
        const uint64_t r = trial == 0 ? 0 : trial == 1 ? ~uint64_t(0) : g();
        ASSERT_EQ(draw.draw(l.data(), f, r), reference_draw(l, f, r))
            << "v=" << v << " row=" << row << " T=" << f.temperature << " k=" << f.top_k << " p=" << f.top_p
            << " min_p=" << f.min_p << " r=" << r;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(SamplingDeterminism, MinPShortcutIsExactAtItsThreshold) {
  // Logits packed around m + ln(min_p): the bucketed path skips the exp for tokens below
  // the cut by a margin; the kept set (hence every draw) must still match the definition.
  std::mt19937_64 g(3);
  for (double min_p : {0x1p-20, 0.003, 0.05, 0.3, 0.999}) {
    std::vector<float> l = {0.0f};
    const double cut = std::log(min_p);
    for (int i = -400; i <= 400; ++i) l.push_back(float(cut + i * 1e-8 * std::max(1.0, -cut)));
    FixedPointDraw draw(int64_t(l.size()));
    for (double t : {1.0, 0.999999, 1.000001}) {
      const DrawFilters f{t, 0, 1.0, min_p};
      for (int trial = 0; trial < 200; ++trial) {
        const uint64_t r = trial == 0 ? ~uint64_t(0) : g();  // all ones: the last token kept
        ASSERT_EQ(draw.draw(l.data(), f, r), reference_draw(l, f, r)) << "min_p " << min_p << " T " << t;
      }
    }
  }
}

TEST(SamplingDeterminism, FastPathsEqualTheDefinitionAtFullVocabulary) {
  constexpr int64_t kVocab = 129280;
  std::mt19937_64 g(7);
  FixedPointDraw draw(kVocab);
  const DrawFilters filters[] = {{1.0, 0, 1.0, 0.0},   {0.8, 0, 0.95, 0.0}, {1.0, 0, 1.0, 0.05},
                                 {0.6, 50, 0.9, 0.0},  {1.2, 0, 0.7, 0.02}, {1.0, 40000, 1.0, 0.0}};
  // 0.3: a near-flat row (a random-weight model's), whose tokens crowd into a few weight
  // buckets of tens of thousands each, where the cut and the draw are found by quickselect.
  for (double scale : {0.3, 2.0, 8.0}) {
    const std::vector<float> l = random_row(g, kVocab, scale, scale > 4);
    for (const DrawFilters& f : filters)
      for (int trial = 0; trial < 3; ++trial) {
        const uint64_t r = g();
        ASSERT_EQ(draw.draw(l.data(), f, r), reference_draw(l, f, r)) << "k=" << f.top_k << " p=" << f.top_p;
      }
  }
}

TEST(SamplingDeterminism, DrawsAndTopPCutsOnExactBoundaries) {
  // 1024 equal logits: every weight is 2^40 and every cumulative weight a multiple of it,
  // so these random bits put t exactly on a boundary between two tokens, and these top_p
  // put the cut exactly on one. Quickselect must resolve each the way the sorted walk
  // does (strictly below a cumulative weight; a cut at equality drops the token).
  constexpr int64_t n = 1024;
  const std::vector<float> l(size_t(n), 0.0f);
  FixedPointDraw draw(n);
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t r = uint64_t(k) << 54;  // t = floor(r * n * 2^40 / 2^64) = k * 2^40
    const DrawFilters f{1.0, 0, 1.0, 0.0};
    ASSERT_EQ(draw.draw(l.data(), f, r), k);
    ASSERT_EQ(reference_draw(l, f, r), k);
  }
  for (int64_t j = 1; j <= n; ++j) {
    const DrawFilters f{1.0, 0, double(j) / double(n), 0.0};  // keeps exactly j tokens
    for (uint64_t r : {~uint64_t(0), uint64_t(0), (uint64_t(j - 1) << 54) / uint64_t(j) * uint64_t(n)}) {
      const int32_t want = reference_draw(l, f, r);
      ASSERT_EQ(draw.draw(l.data(), f, r), want) << "top_p " << j << "/" << n << " r " << r;
      if (r == ~uint64_t(0)) {
        ASSERT_EQ(want, j - 1);
      }
    }
  }
}

TEST(SamplingDeterminism, DrawsAndTopPCutsOnWeightClassBoundaries) {
  // One token of weight 2^40, then 600 of one weight and 600 of a lower one in the same
  // bit-length bucket but different classes of its next six bits: the draw narrows a large
  // bucket to a class before quickselect, so t placed exactly where one class ends and the
  // next begins (and top-p cuts either side of it) must land as the sorted walk says.
  std::vector<float> l(1201);
  l[0] = 0.0f;
  for (int i = 1; i <= 600; ++i) l[size_t(i)] = float(std::log(0.9));
  for (int i = 601; i <= 1200; ++i) l[size_t(i)] = float(std::log(0.6));
  FixedPointDraw draw(int64_t(l.size()));
  const uint64_t w0 = fixed_point_weight(l[0], 0.0f, 1.0), w9 = fixed_point_weight(l[1], 0.0f, 1.0),
                 w6 = fixed_point_weight(l[601], 0.0f, 1.0);
  ASSERT_EQ(std::bit_width(w9), std::bit_width(w6));
  const uint64_t total = w0 + 600 * w9 + 600 * w6;
  auto r_for = [total](uint64_t t) { return uint64_t(((u128(t) << 64) + total - 1) / total); };
  const DrawFilters plain{1.0, 0, 1.0, 0.0};
  for (uint64_t edge : {w0, w0 + 600 * w9, w0 + 300 * w9, w0 + 600 * w9 + 300 * w6})
    for (int64_t delta : {-1, 0, 1}) {
      const uint64_t t = edge + uint64_t(delta);
      const uint64_t r = r_for(t);
      ASSERT_EQ(uint64_t((u128(r) * total) >> 64), t);
      ASSERT_EQ(draw.draw(l.data(), plain, r), reference_draw(l, plain, r)) << "t = edge " << edge << " + " << delta;
    }
  for (uint64_t cum : {w0 + 600 * w9, w0 + 599 * w9, w0 + 600 * w9 + w6})
    for (int64_t dp : {-1, 0, 1}) {
      const uint64_t P = uint64_t((u128(cum) << 32) / total) + uint64_t(dp);
      const DrawFilters f{1.0, 0, double(P) * 0x1p-32, 0.0};
      for (uint64_t r : {~uint64_t(0), uint64_t(0), r_for(cum - 1)})
        ASSERT_EQ(draw.draw(l.data(), f, r), reference_draw(l, f, r)) << "cut near " << cum << " P " << P;
    }
}

struct Row {
  std::vector<float> logits;
  SamplingParams params;
  std::vector<int32_t> prompt, output;
  uint64_t seed, stream, position;
};

std::vector<Row> mixed_batch(int64_t vocab) {
  std::mt19937_64 g(99);
  std::vector<Row> rows;
  for (int i = 0; i < 10; ++i) {
    Row r;
    r.logits = random_row(g, vocab, 3.0, i % 2 == 0);
    r.params.temperature = i == 3 ? 0.0 : 0.4 + 0.2 * i;
    r.params.top_k = i % 3 == 0 ? 20 : 0;
    r.params.top_p = i % 4 == 1 ? 0.8 : 1.0;
    r.params.min_p = i % 5 == 2 ? 0.05 : 0.0;
    r.params.repetition_penalty = i % 2 ? 1.3 : 1.0;
    r.params.frequency_penalty = i % 3 == 1 ? 0.5 : 0.0;
    r.params.presence_penalty = i % 4 == 2 ? -0.7 : 0.0;
    r.params.min_tokens = i == 6 ? 4 : 0;
    r.params.logprobs = i % 2 ? std::optional<int>(5) : std::nullopt;
    for (int j = 0; j < 30; ++j) r.prompt.push_back(int32_t(g() % uint64_t(vocab)));
    for (int j = 0; j < i; ++j) r.output.push_back(int32_t(g() % uint64_t(vocab)));
    r.seed = g();
    r.stream = uint64_t(i % 3);
    r.position = uint64_t(i);
    rows.push_back(r);
  }
  return rows;
}

SampleOutput sample_row(Sampler& s, const Row& r) {
  static const std::vector<int32_t> eos = {0};
  return s.sample({r.logits.data(), &r.params, r.seed, r.stream, r.position, r.prompt, r.output, eos});
}

TEST(SamplingDeterminism, ARowDependsOnNeitherOtherRowsNorEarlierCalls) {
  constexpr int64_t kVocab = 2000;
  const std::vector<Row> rows = mixed_batch(kVocab);
  Sampler fresh(kVocab), used(kVocab);
  std::vector<SampleOutput> want;
  for (const Row& r : rows) want.push_back(sample_row(fresh, r));
  // Reverse order, each row preceded by every other row: the scratch is always dirty.
  for (size_t i = rows.size(); i-- > 0;) {
    for (size_t j = 0; j < rows.size(); ++j)
      if (j != i) sample_row(used, rows[j]);
    const SampleOutput got = sample_row(used, rows[i]);
    EXPECT_EQ(got.token, want[i].token) << "row " << i;
    EXPECT_EQ(std::isnan(got.logprob), std::isnan(want[i].logprob));
    if (!std::isnan(got.logprob)) {
      EXPECT_EQ(got.logprob, want[i].logprob);
    }
    ASSERT_EQ(got.top.size(), want[i].top.size());
    for (size_t t = 0; t < got.top.size(); ++t) {
      EXPECT_EQ(got.top[t].id, want[i].top[t].id);
      EXPECT_EQ(got.top[t].logprob, want[i].top[t].logprob);
    }
  }
  // The input rows were not modified (the penalties work on a copy).
  EXPECT_EQ(mixed_batch(kVocab)[5].logits, rows[5].logits);
}

TEST(SamplingDeterminism, SameKeySameTokenOtherPositionsOtherDraws) {
  constexpr int64_t kVocab = 64;
  const std::vector<float> flat(kVocab, 0.0f);  // uniform: the token is the random number's
  SamplingParams p;
  Sampler a(kVocab), b(kVocab);
  std::set<int32_t> seen;
  std::set<uint64_t> bits;
  for (uint64_t pos = 0; pos < 400; ++pos) {
    const int32_t t = a.sample(flat.data(), p, 42, 0, pos);
    EXPECT_EQ(b.sample(flat.data(), p, 42, 0, pos), t);
    seen.insert(t);
    bits.insert(counter_random(42, 0, pos));
    bits.insert(counter_random(42, 1, pos));
    bits.insert(counter_random(43, 0, pos));
  }
  EXPECT_EQ(bits.size(), 1200u);  // distinct for each seed, stream and position
  EXPECT_GT(seen.size(), 55u);    // 400 uniform draws over 64 leave ~1 unseen
  // The key's parts are not interchangeable.
  EXPECT_NE(counter_random(1, 2, 3), counter_random(1, 3, 2));
  EXPECT_NE(counter_random(1, 2, 3), counter_random(2, 1, 3));
}

}  // namespace
}  // namespace gannet::sampling
