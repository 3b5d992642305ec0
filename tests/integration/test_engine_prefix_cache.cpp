// Prefix caching at engine level (dense model): a request served partly from cached
// blocks returns bit-identical token ids and logprobs to the same request computed in
// full, whether the hit comes from an earlier request (the same prompt twice, a shared
// system prompt run one after another), from a batch sharing a system prompt, after
// preemption, or with the whole prompt cached (its last position computed again). n > 1
// samples and prompt logprobs (which compute every position) likewise. Hits are counted,
// so none of these can pass by missing the cache.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "tiny_checkpoint.h"

using namespace gannet;

namespace {

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Result {
  std::vector<std::vector<int32_t>> ids;  // per sample
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<float> prompt_logprobs;
  int64_t cached_tokens = 0;
};

constexpr int kBlock = 16;

// 20 requests: 12 share a 70-token system prompt (4 full blocks and 6 tokens) with
// suffixes of 1..30 tokens, 2 repeat one of those exactly, 2 are 64-token prompts (whole
// blocks: a full hit recomputes the last position), 2 are unrelated, and 2 share the
// system prompt with n = 2 samples or prompt logprobs.
std::vector<Case> make_cases() {
  std::mt19937 rng(99);
  auto tokens = [&](int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(int32_t(2 + rng() % 120000));
    return v;
  };
  const std::vector<int32_t> system = tokens(70);
  const std::vector<int32_t> whole = tokens(64);
  std::vector<Case> cases;
  auto add = [&](std::vector<int32_t> prompt, int i) {
    Case c;
    c.prompt = std::move(prompt);
    c.params.max_tokens = 6 + i % 5;
    c.params.logprobs = 2;
    c.params.ignore_eos = true;
    if (i % 2) {
      c.params.temperature = 1.0;
      c.params.seed = 500 + uint64_t(i);
    } else {
      c.params.temperature = 0;
    }
    cases.push_back(c);
  };
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p = system;
    for (int32_t t : tokens(1 + int(rng() % 30))) p.push_back(t);
    add(p, i);
  }
  add(cases[3].prompt, 12);
  add(cases[4].prompt, 13);
  add(whole, 14);
  add(whole, 15);
  add(tokens(40), 16);
  add(tokens(90), 17);
  std::vector<int32_t> p = system;
  for (int32_t t : tokens(9)) p.push_back(t);
  add(p, 18);
  cases.back().params.n = 2;
  add(p, 19);
  cases.back().params.prompt_logprobs = 1;
  return cases;
}

EngineArgs args(bool caching, bool async, uint64_t kv_bytes = 64ull << 20, int64_t budget = 2048) {
  EngineArgs a;
  a.model = gannet::test_support::tiny_checkpoint("llama", 3);
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = kv_bytes;
  a.block_size = kBlock;
  a.async_scheduling = async;
  a.max_num_batched_tokens = budget;
  a.enable_prefix_caching = caching ? 1 : 0;
  return a;
}

Result collect(const RequestOutput& o) {
  Result r;
  for (const CompletionOutput& c : o.outputs) {
    r.ids.push_back(c.token_ids);
    std::vector<float> lp;
    std::vector<int32_t> top;
    for (const PositionLogprobs& p : c.logprobs) {
      lp.push_back(p.logprob);
      for (const TokenLogprob& t : p.top) top.push_back(t.id);
    }
    r.logprobs.push_back(lp);
    r.top_ids.push_back(top);
  }
  for (const auto& p : o.prompt_logprobs) r.prompt_logprobs.push_back(p ? p->logprob : 0.0f);
  r.cached_tokens = o.metrics.cached_tokens;
  return r;
}

std::map<int, Result> run(engine::Engine& e, const std::vector<Case>& cases, const std::vector<int>& which) {
  for (int i : which) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  std::map<int, Result> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[std::stoi(o.request_id.substr(1))] = collect(o);
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
  EXPECT_EQ(e.scheduler().num_deferred_releases(), 0u);
  EXPECT_EQ(e.num_executor_rows(), 0u);
  return out;
}

std::vector<int> all(size_t n) {
  std::vector<int> v;
  for (size_t i = 0; i < n; ++i) v.push_back(int(i));
  return v;
}

// Each request alone on a fresh engine without caching: computed in full.
const std::map<int, Result>& reference() {
  static const std::map<int, Result> ref = [] {
    const auto cases = make_cases();
    std::map<int, Result> out;
    engine::Engine e(args(false, false));
    for (int i = 0; i < int(cases.size()); ++i) out[i] = run(e, cases, {i}).at(i);
    return out;
  }();
  return ref;
}

void expect_same(const std::map<int, Result>& got, const std::string& what) {
  const auto& ref = reference();
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (auto& [i, g] : got) {
    const Result& r = ref.at(i);
    EXPECT_EQ(g.ids, r.ids) << what << ": request " << i;
    EXPECT_EQ(g.top_ids, r.top_ids) << what << ": request " << i;
    ASSERT_EQ(g.logprobs.size(), r.logprobs.size()) << what;
    for (size_t k = 0; k < g.logprobs.size(); ++k) {
      ASSERT_EQ(g.logprobs[k].size(), r.logprobs[k].size()) << what << ": request " << i;
      for (size_t p = 0; p < g.logprobs[k].size(); ++p)
        ASSERT_EQ(g.logprobs[k][p], r.logprobs[k][p]) << what << ": request " << i << " sample " << k << " pos " << p;
    }
    ASSERT_EQ(g.prompt_logprobs, r.prompt_logprobs) << what << ": request " << i;
  }
}

const bool kModes[] = {false, true};

}  // namespace

// One after another on one engine: every request after the first that shares a prefix
// hits it; repeats and the whole-block prompt hit all but their last position.
TEST(EnginePrefixCache, SequentialHitsEqualFullComputation) {
  const auto cases = make_cases();
  for (bool async : kModes) {
    engine::Engine e(args(true, async));
    std::map<int, Result> got;
    for (int i = 0; i < int(cases.size()); ++i) got[i] = run(e, cases, {i}).at(i);
    expect_same(got, async ? "sequential, async" : "sequential");
    for (int i = 1; i < 12; ++i) EXPECT_EQ(got[i].cached_tokens, 64) << "request " << i << ": 4 system-prompt blocks";
    EXPECT_EQ(got[0].cached_tokens, 0);
    EXPECT_EQ(got[12].cached_tokens, int64_t(cases[12].prompt.size() - 1) / kBlock * kBlock);
    EXPECT_EQ(got[15].cached_tokens, 63) << "a whole cached prompt computes its last position again";
    EXPECT_EQ(got[16].cached_tokens, 0);
    EXPECT_EQ(got[18].cached_tokens, 64);
    EXPECT_EQ(got[19].cached_tokens, 0) << "prompt logprobs need every position computed";
    EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 900);
    // The whole batch again: everything is cached now.
    auto again = run(e, cases, all(cases.size()));
    expect_same(again, async ? "repeated batch, async" : "repeated batch");
    for (int i = 0; i < 19; ++i) EXPECT_GT(again[i].cached_tokens, 0) << "request " << i;
  }
}

// One batch sharing a system prompt, prefilled in chunks so later admissions find the
// blocks earlier ones have written; with and without asynchronous scheduling.
TEST(EnginePrefixCache, BatchSharingASystemPromptEqualsFullComputation) {
  const auto cases = make_cases();
  for (bool async : kModes)
    for (int64_t budget : {int64_t(2048), int64_t(40)}) {
      engine::Engine e(args(true, async, 64ull << 20, budget));
      auto got = run(e, cases, all(cases.size()));
      expect_same(got, "batch, budget " + std::to_string(budget) + (async ? ", async" : ""));
      if (budget == 40) {
        EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 300) << "chunked admissions should hit";
      }
    }
}

// A KV budget far below what the batch needs: sequences are preempted and recomputed,
// taking their own and each other's cached blocks back (eviction runs too).
TEST(EnginePrefixCache, HitsAfterPreemptionEqualFullComputation) {
  const auto cases = make_cases();
  for (bool async : kModes) {
    // 20 blocks of 16 tokens (512 bytes per token in the tiny model).
    engine::Engine e(args(true, async, uint64_t(20) * kBlock * 512, 64));
    auto got = run(e, cases, all(cases.size()));
    expect_same(got, async ? "preempted, async" : "preempted");
    EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
    EXPECT_GT(e.scheduler().prefix_stats().hit_tokens, 0);
    EXPECT_GT(e.block_manager().counters().evictions, 0);
  }
}

// --no-prefix-caching: no block is kept, nothing hits.
TEST(EnginePrefixCache, OffMeansNoHits) {
  const auto cases = make_cases();
  engine::Engine e(args(false, true));
  auto got = run(e, cases, all(cases.size()));
  run(e, cases, all(cases.size()));
  expect_same(got, "caching off");
  EXPECT_EQ(e.scheduler().prefix_stats().hit_tokens, 0);
  EXPECT_EQ(e.block_manager().num_cached_blocks(), 0);
  for (auto& [i, r] : got) EXPECT_EQ(r.cached_tokens, 0);
}
