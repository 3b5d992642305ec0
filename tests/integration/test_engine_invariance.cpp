// Principle 1 at engine level: a request's token ids and logprobs are bit-identical
// whether it runs alone or among 64 others, with chunk budgets of 1, 7 or 64 tokens,
// under a KV budget that forces preemptions, and on 1 or 2 threads — for greedy and for
// seeded temperature-1 sampling. After every scenario all blocks and slots are free.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "engine/engine.h"
#include "tiny_checkpoint.h"

namespace fs = std::filesystem;
using namespace gannet;

namespace {

const std::string& tiny_model() { return gannet::test_support::tiny_checkpoint("llama", 3); }

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// 64 prompts of 1..150 tokens; half greedy, half seeded temperature 1 with top-k/top-p,
// every request asks for top-3 logprobs.
std::vector<Case> make_cases(int count) {
  std::mt19937 rng(1234);
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c;
    const int len = 1 + int(rng() % 150);
    for (int j = 0; j < len; ++j) c.prompt.push_back(int32_t(2 + rng() % 128000));
    c.params.max_tokens = 4 + int(rng() % 12);
    c.params.logprobs = 3;
    c.params.ignore_eos = true;
    if (i % 2) {
      c.params.temperature = 1.0;
      c.params.seed = 1000 + uint64_t(i);
      c.params.top_k = i % 4 == 1 ? 50 : 0;
      c.params.top_p = i % 4 == 3 ? 0.9 : 1.0;
    } else {
      c.params.temperature = 0;
    }
    cases.push_back(c);
  }
  return cases;
}

struct Result {
  std::vector<int32_t> ids;
  std::vector<PositionLogprobs> logprobs;
};

EngineArgs base_args() {
  EngineArgs a;
  a.model = tiny_model();
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = 64ull << 20;
  a.block_size = 16;
  return a;
}

void expect_no_leaks(const engine::Engine& e) {
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
  EXPECT_EQ(e.scheduler().num_running(), 0u);
  EXPECT_EQ(e.scheduler().num_waiting(), 0u);
}

// Runs `which` of the cases as one batch and returns their results by case index.
std::map<int, Result> run_batch(engine::Engine& e, const std::vector<Case>& cases, const std::vector<int>& which) {
  for (int i : which) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  std::map<int, Result> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[std::stoi(o.request_id.substr(1))] = {o.outputs[0].token_ids, o.outputs[0].logprobs};
  expect_no_leaks(e);
  return out;
}

void expect_same(const std::map<int, Result>& a, const std::map<int, Result>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (auto& [i, ra] : a) {
    const Result& rb = b.at(i);
    ASSERT_EQ(ra.ids, rb.ids) << what << ": request " << i;
    ASSERT_EQ(ra.logprobs.size(), rb.logprobs.size()) << what;
    for (size_t p = 0; p < ra.logprobs.size(); ++p) {
      // Bit equality of floats (memcmp-equivalent: no NaNs are produced here).
      ASSERT_EQ(ra.logprobs[p].logprob, rb.logprobs[p].logprob) << what << ": request " << i << " pos " << p;
      ASSERT_EQ(ra.logprobs[p].top.size(), rb.logprobs[p].top.size());
      for (size_t k = 0; k < ra.logprobs[p].top.size(); ++k) {
        ASSERT_EQ(ra.logprobs[p].top[k].id, rb.logprobs[p].top[k].id) << what;
        ASSERT_EQ(ra.logprobs[p].top[k].logprob, rb.logprobs[p].top[k].logprob) << what;
      }
    }
  }
}

// The reference: every request alone, one-shot prefill.
const std::map<int, Result>& alone_results() {
  static const std::map<int, Result> ref = [] {
    auto cases = make_cases(64);
    EngineArgs a = base_args();
    engine::Engine e(a);
    std::map<int, Result> all;
    for (int i = 0; i < 64; ++i) {
      auto r = run_batch(e, cases, {i});
      all[i] = r.at(i);
    }
    return all;
  }();
  return ref;
}

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

}  // namespace

TEST(EngineInvariance, BatchOf64EqualsAlone) {
  auto cases = make_cases(64);
  engine::Engine e(base_args());
  auto batch = run_batch(e, cases, range(64));
  expect_same(alone_results(), batch, "batch of 64");
}

TEST(EngineInvariance, ChunkedPrefillEqualsOneShot) {
  auto cases = make_cases(64);
  const std::vector<int> subset = {0, 1, 2, 3, 5, 8, 13, 21};
  std::map<int, Result> ref;
  for (int i : subset) ref[i] = alone_results().at(i);
  for (int64_t budget : {1, 7, 64}) {
    EngineArgs a = base_args();
    a.max_num_batched_tokens = budget;
    engine::Engine e(a);
    auto r = run_batch(e, cases, subset);
    expect_same(ref, r, ("chunk budget " + std::to_string(budget)).c_str());
  }
}

TEST(EngineInvariance, PreemptionUnderSmallBudgetEqualsAmple) {
  auto cases = make_cases(64);
  EngineArgs a = base_args();
  // 24 blocks of 16 tokens: far less than 64 prompts need at once.
  a.kv_cache_memory = uint64_t(24) * 16 * 512;
  engine::Engine e(a);
  auto r = run_batch(e, cases, range(64));
  EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
  expect_same(alone_results(), r, "preempted");
}

TEST(EngineInvariance, OneThreadEqualsTwo) {
  auto cases = make_cases(64);
  EngineArgs a = base_args();
  a.threads = 1;
  engine::Engine e(a);
  auto r = run_batch(e, cases, range(64));
  expect_same(alone_results(), r, "1 thread");
}

TEST(EngineInvariance, AbortsMidPrefillAndMidDecodeLeakNothing) {
  auto cases = make_cases(16);
  EngineArgs a = base_args();
  a.max_num_batched_tokens = 32;  // long prompts stay mid-prefill for several steps
  engine::Engine e(a);
  for (int i = 0; i < 16; ++i) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  int step = 0;
  while (e.has_unfinished()) {
    e.step();
    ++step;
    if (step == 2) e.abort("r3");   // some are mid-prefill here
    if (step == 6) e.abort("r0");   // and some are decoding
    if (step == 7) e.abort("r15");  // possibly still waiting
  }
  expect_no_leaks(e);
}
