// Principle 1 at engine level: a request's token ids and logprobs are bit-identical
// whether it runs alone or among 64 others, with chunk budgets of 1, 7 or 64 tokens,
// under a KV budget that forces preemptions, on 1 or 2 threads, and with asynchronous
// scheduling on or off — for greedy and seeded temperature-1 sampling, n > 1, stop
// strings, stop token ids and prompt logprobs. After every scenario all blocks, slots and
// executor rows are free.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "engine/engine.h"
#include "test_scale.h"
#include "tiny_checkpoint.h"

namespace fs = std::filesystem;
using namespace gannet;

namespace {

const std::string& tiny_model() { return gannet::test_support::tiny_checkpoint("llama", 3); }

// 64 requests; 24 under the sanitizers (test_scale.h), which still fill the 24-block
// budget below many times over and cover the chunked subset's indices.
const int kCases = gannet::test_support::scaled(64, 24);

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

// The reference runs synchronously; every scenario runs in both modes.
EngineArgs base_args(bool async_scheduling = false) {
  EngineArgs a;
  a.async_scheduling = async_scheduling;
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
  EXPECT_EQ(e.scheduler().num_deferred_releases(), 0u);
  EXPECT_EQ(e.num_executor_rows(), 0u);
}

const bool kModes[] = {false, true};
const char* mode_name(bool async) { return async ? "async on" : "async off"; }

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
    auto cases = make_cases(kCases);
    EngineArgs a = base_args();
    a.enable_prefix_caching = 0;  // every prompt computed in full (the scenarios cache)
    engine::Engine e(a);
    std::map<int, Result> all;
    for (int i = 0; i < kCases; ++i) {
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
  auto cases = make_cases(kCases);
  for (bool async : kModes) {
    engine::Engine e(base_args(async));
    ASSERT_EQ(e.async_scheduling(), async);
    auto batch = run_batch(e, cases, range(kCases));
    expect_same(alone_results(), batch, mode_name(async));
  }
}

TEST(EngineInvariance, ChunkedPrefillEqualsOneShot) {
  auto cases = make_cases(kCases);
  const std::vector<int> subset = {0, 1, 2, 3, 5, 8, 13, 21};
  std::map<int, Result> ref;
  for (int i : subset) ref[i] = alone_results().at(i);
  for (bool async : kModes)
    for (int64_t budget : {1, 7, 64}) {
      EngineArgs a = base_args(async);
      a.max_num_batched_tokens = budget;
      engine::Engine e(a);
      auto r = run_batch(e, cases, subset);
      expect_same(ref, r, ("chunk budget " + std::to_string(budget) + ", " + mode_name(async)).c_str());
    }
}

TEST(EngineInvariance, PreemptionUnderSmallBudgetEqualsAmple) {
  auto cases = make_cases(kCases);
  for (bool async : kModes) {
    EngineArgs a = base_args(async);
    // 24 blocks of 16 tokens: far less than 64 prompts need at once.
    a.kv_cache_memory = uint64_t(24) * 16 * 512;
    engine::Engine e(a);
    auto r = run_batch(e, cases, range(kCases));
    EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
    expect_same(alone_results(), r, mode_name(async));
  }
}

TEST(EngineInvariance, OneThreadEqualsTwo) {
  auto cases = make_cases(kCases);
  for (bool async : kModes) {
    EngineArgs a = base_args(async);
    a.threads = 1;
    engine::Engine e(a);
    auto r = run_batch(e, cases, range(kCases));
    expect_same(alone_results(), r, mode_name(async));
  }
}

// Aborts land mid-prefill, mid-decode and while waiting; with async scheduling they land
// while a step that includes the request is in flight. The others finish exactly as
// alone, and nothing leaks.
TEST(EngineInvariance, AbortsMidPrefillAndMidDecodeLeakNothing) {
  auto cases = make_cases(16);
  for (bool async : kModes) {
    EngineArgs a = base_args(async);
    a.max_num_batched_tokens = 32;  // long prompts stay mid-prefill for several steps
    engine::Engine e(a);
    for (int i = 0; i < 16; ++i) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
    std::map<int, Result> done;
    int step = 0;
    while (e.has_unfinished()) {
      for (RequestOutput& o : e.step())
        if (o.finished) done[std::stoi(o.request_id.substr(1))] = {o.outputs[0].token_ids, o.outputs[0].logprobs};
      ++step;
      if (step == 2) e.abort("r3");   // some are mid-prefill here
      if (step == 6) e.abort("r0");   // and some are decoding
      if (step == 7) e.abort("r15");  // possibly still waiting
    }
    expect_no_leaks(e);
    std::map<int, Result> ref;
    for (auto& [i, r] : done) ref[i] = alone_results().at(i);
    EXPECT_GE(done.size(), 13u);
    expect_same(ref, done, mode_name(async));
  }
}

namespace {

// n > 1, stop strings, stop token ids and prompt logprobs: everything a request returns.
struct FullResult {
  std::vector<CompletionOutput> samples;
  std::vector<std::optional<PositionLogprobs>> prompt_logprobs;
};

std::map<std::string, FullResult> run_full(bool async, int64_t budget, const std::vector<std::pair<std::string, SamplingParams>>& reqs,
                                           const std::vector<int32_t>& prompt) {
  EngineArgs a = base_args(async);
  a.max_num_batched_tokens = budget;
  engine::Engine e(a);
  for (auto& [id, p] : reqs) e.add_request(id, prompt, p);
  std::map<std::string, FullResult> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[o.request_id] = {o.outputs, o.prompt_logprobs};
  expect_no_leaks(e);
  return out;
}

void expect_same_full(const std::map<std::string, FullResult>& a, const std::map<std::string, FullResult>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (auto& [id, ra] : a) {
    const FullResult& rb = b.at(id);
    ASSERT_EQ(ra.samples.size(), rb.samples.size()) << what << " " << id;
    for (size_t k = 0; k < ra.samples.size(); ++k) {
      const CompletionOutput &x = ra.samples[k], &y = rb.samples[k];
      EXPECT_EQ(x.token_ids, y.token_ids) << what << " " << id << " sample " << k;
      EXPECT_EQ(x.text, y.text) << what << " " << id;
      EXPECT_EQ(x.finish_reason, y.finish_reason) << what << " " << id;
      EXPECT_EQ(x.stop_reason, y.stop_reason) << what << " " << id;
      EXPECT_EQ(x.cumulative_logprob, y.cumulative_logprob) << what << " " << id;
      ASSERT_EQ(x.logprobs.size(), y.logprobs.size());
      for (size_t p = 0; p < x.logprobs.size(); ++p) EXPECT_EQ(x.logprobs[p].logprob, y.logprobs[p].logprob);
    }
    ASSERT_EQ(ra.prompt_logprobs.size(), rb.prompt_logprobs.size()) << what << " " << id;
    for (size_t p = 0; p < ra.prompt_logprobs.size(); ++p) {
      ASSERT_EQ(ra.prompt_logprobs[p].has_value(), rb.prompt_logprobs[p].has_value());
      if (ra.prompt_logprobs[p]) {
        EXPECT_EQ(ra.prompt_logprobs[p]->logprob, rb.prompt_logprobs[p]->logprob);
      }
    }
  }
}

}  // namespace

TEST(EngineInvariance, SamplesStopsAndPromptLogprobsAsyncOnEqualsOff) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(int32_t(300 + (i * 7919) % 90000));
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 16;
  greedy.ignore_eos = true;
  // A free run tells which token and text to stop at, so the stops really trigger.
  const auto free_run = run_full(false, 2048, {{"free", greedy}}, prompt).at("free").samples[0];
  ASSERT_GE(free_run.token_ids.size(), 10u);
  std::vector<std::pair<std::string, SamplingParams>> reqs;
  SamplingParams n3 = greedy;
  n3.temperature = 1.0;
  n3.seed = 77;
  n3.n = 3;
  n3.logprobs = 2;
  reqs.push_back({"n3", n3});
  SamplingParams stop_tok = greedy;
  stop_tok.stop_token_ids = {free_run.token_ids[6]};
  reqs.push_back({"stop_token", stop_tok});
  SamplingParams stop_str = greedy;
  ASSERT_GE(free_run.text.size(), 8u);
  stop_str.stop = {free_run.text.substr(free_run.text.size() / 2, 2)};
  reqs.push_back({"stop_string", stop_str});
  SamplingParams plp = greedy;
  plp.prompt_logprobs = 2;
  plp.max_tokens = 5;
  reqs.push_back({"prompt_logprobs", plp});
  SamplingParams n2plp = n3;
  n2plp.n = 2;
  n2plp.prompt_logprobs = 1;
  reqs.push_back({"n2_prompt_logprobs", n2plp});
  const auto ref = run_full(false, 2048, reqs, prompt);
  EXPECT_EQ(ref.at("stop_token").samples[0].finish_reason, "stop");
  EXPECT_EQ(ref.at("stop_token").samples[0].token_ids.size(), 7u);
  EXPECT_EQ(ref.at("stop_string").samples[0].finish_reason, "stop");
  EXPECT_EQ(ref.at("n3").samples.size(), 3u);
  for (bool async : kModes)
    for (int64_t budget : {2048, 9}) {
      const std::string what = std::string(mode_name(async)) + ", budget " + std::to_string(budget);
      expect_same_full(ref, run_full(async, budget, reqs, prompt), what);
    }
  // Each request alone (asynchronous, small chunks) gives the same as in the batch.
  for (auto& r : reqs)
    expect_same_full({{r.first, ref.at(r.first)}}, run_full(true, 9, {r}, prompt), r.first + " alone");
}

// --kv-cache-dtype bf16 (dense models): the cache holds half the bytes, and results stay
// bit-identical alone, batched and chunked, async or not.
TEST(EngineInvariance, Bf16KvCacheStaysExact) {
  auto cases = make_cases(12);
  const std::vector<int> subset = {0, 1, 2, 3, 4, 5, 6, 7};
  std::map<int, Result> ref;
  {
    EngineArgs a = base_args(false);
    a.kv_cache_dtype = "bf16";
    engine::Engine e(a);
    EXPECT_EQ(e.model().cache_spec().groups[0].format, kernels::CacheFormat::kBF16);
    for (int i : subset) ref[i] = run_batch(e, cases, {i}).at(i);
  }
  for (bool async : kModes)
    for (int64_t budget : {int64_t(2048), int64_t(7)}) {
      EngineArgs a = base_args(async);
      a.kv_cache_dtype = "bf16";
      a.max_num_batched_tokens = budget;
      engine::Engine e(a);
      expect_same(ref, run_batch(e, cases, subset), ("bf16 kv, budget " + std::to_string(budget)).c_str());
    }
}
