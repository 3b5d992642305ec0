// DeepSeek-V4.1 in the engine (tests/golden/deepseek-v41-tiny, no tokenizer: token-id
// prompts): a request's token ids and logprobs are bit-identical alone or in a batch, with
// chunk budgets that split ratio-2 groups and the 8-token window (budget 1 is
// token-by-token decode of the prompt), under a KV budget that forces preemption and
// recompute, on 1 or 2 threads, with asynchronous scheduling on or off, and for n = 3
// seeded samples (forked state slots). Greedy decoding reproduces the reference's ids.
// Afterwards every block and state slot is free. The cache holds the compact forms:
// 890 bytes per token at V4.1-Flash's widths (test_io_deepseek_v41_config).
// labels: exact sanitize
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/model.h"
#include "test_scale.h"

using namespace gannet;

namespace {

std::string model_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return (std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v41-tiny").string();
}

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// 24 requests (12 under the sanitizers, test_scale.h): sampled and greedy, n = 3 forks,
// prompts of 1-60 tokens, enough that the KV budgets below force preemption.
const int kCases = test_support::scaled(24, 12);

// The members of `want` below kCases.
std::vector<int> below_cases(std::vector<int> want) {
  std::vector<int> v;
  for (int i : want)
    if (i < kCases) v.push_back(i);
  return v;
}

std::vector<Case> make_cases(int count) {
  std::mt19937 rng(77);
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c;
    const int len = 1 + int(rng() % 60);
    for (int j = 0; j < len; ++j) c.prompt.push_back(int32_t(rng() % 512));
    c.params.max_tokens = 4 + int(rng() % 9);
    c.params.logprobs = 3;
    c.params.ignore_eos = true;
    if (i % 2) {
      c.params.temperature = 1.0;
      c.params.seed = 500 + uint64_t(i);
    } else {
      c.params.temperature = 0;
    }
    if (i % 8 == 3) c.params.n = 3, c.params.seed = 900 + uint64_t(i), c.params.temperature = 1.0;
    cases.push_back(c);
  }
  return cases;
}

struct Result {
  std::vector<std::vector<int32_t>> ids;  // per sample
  std::vector<std::vector<float>> lps;
};

EngineArgs base_args(bool async) {
  EngineArgs a;
  a.async_scheduling = async;
  a.model = model_dir();
  a.quiet = true;
  a.threads = 2;
  a.max_num_seqs = 32;
  a.kv_cache_memory = 16ull << 20;
  a.block_size = 16;
  return a;
}

std::map<int, Result> run_batch(engine::Engine& e, const std::vector<Case>& cases, const std::vector<int>& which) {
  for (int i : which) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  std::map<int, Result> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) {
        Result r;
        for (const auto& c : o.outputs) {
          r.ids.push_back(c.token_ids);
          std::vector<float> lp;
          for (const auto& p : c.logprobs) {
            lp.push_back(p.logprob);
            for (const auto& t : p.top) lp.push_back(t.logprob), lp.push_back(float(t.id));
          }
          r.lps.push_back(lp);
        }
        out[std::stoi(o.request_id.substr(1))] = r;
      }
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
  EXPECT_EQ(e.num_executor_rows(), 0u);
  return out;
}

void expect_same(const std::map<int, Result>& a, const std::map<int, Result>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (auto& [i, ra] : a) {
    const Result& rb = b.at(i);
    EXPECT_EQ(ra.ids, rb.ids) << what << ": request " << i;
    EXPECT_EQ(ra.lps, rb.lps) << what << ": request " << i;
  }
}

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

const std::map<int, Result>& alone() {
  static const std::map<int, Result> ref = [] {
    auto cases = make_cases(kCases);
    engine::Engine e(base_args(false));
    std::map<int, Result> all;
    for (int i = 0; i < kCases; ++i) all[i] = run_batch(e, cases, {i}).at(i);
    return all;
  }();
  return ref;
}

TEST(EngineDeepseekV41, GreedyMatchesReference) {
  // The golden prompt's 16 greedy ids (transformers, float32).
  const std::vector<int32_t> prompt = {0,   476, 326, 263, 120, 365, 359, 258, 25,  125, 124, 449, 2,   38,
                                       267, 360, 472, 52,  502, 229, 365, 359, 258, 25,  502, 35,  435, 327,
                                       234, 252, 482, 328, 236, 225, 131, 365, 144, 360, 30,  198, 442};
  const std::vector<int32_t> want = {173, 128, 438, 359, 343, 139, 323, 149, 145, 41, 121, 70, 424, 499, 493, 125};
  for (bool async : {false, true}) {
    engine::Engine e(base_args(async));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 16;
    p.ignore_eos = true;
    e.add_request("g", prompt, p);
    std::vector<int32_t> got;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) got = o.outputs[0].token_ids;
    EXPECT_EQ(got, want) << (async ? "async on" : "async off");
  }
}

TEST(EngineDeepseekV41, BatchEqualsAlone) {
  auto cases = make_cases(kCases);
  for (bool async : {false, true}) {
    engine::Engine e(base_args(async));
    expect_same(alone(), run_batch(e, cases, range(kCases)), async ? "async on" : "async off");
  }
}

TEST(EngineDeepseekV41, ChunkedPrefillEqualsOneShot) {
  auto cases = make_cases(kCases);
  const std::vector<int> subset = below_cases({0, 1, 2, 3, 5, 8, 11, 13});
  std::map<int, Result> ref;
  for (int i : subset) ref[i] = alone().at(i);
  for (bool async : {false, true})
    for (int64_t budget : {1, 3, 7}) {
      EngineArgs a = base_args(async);
      a.max_num_batched_tokens = budget;
      engine::Engine e(a);
      expect_same(ref, run_batch(e, cases, subset),
                  "chunk budget " + std::to_string(budget) + (async ? ", async on" : ", async off"));
    }
}

TEST(EngineDeepseekV41, PreemptionAndOneThreadEqualAlone) {
  auto cases = make_cases(kCases);
  for (bool async : {false, true}) {
    EngineArgs a = base_args(async);
    // The 32 state slots and 12 blocks of 16 positions: far less than kCases requests need.
    io::ModelConfig cfg = io::load_model_config(model_dir());
    io::Checkpoint ck(model_dir());
    const kernels::CacheSpec spec = model::create_model(cfg, ck)->cache_spec();
    a.kv_cache_memory = 32 * uint64_t(spec.state_bytes_per_seq) + 12 * spec.bytes_per_block(16);
    engine::Engine e(a);
    auto r = run_batch(e, cases, range(kCases));
    EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
    expect_same(alone(), r, std::string("preemption, ") + (async ? "async on" : "async off"));
    EngineArgs b = base_args(async);
    b.threads = 1;
    engine::Engine e1(b);
    expect_same(alone(), run_batch(e1, cases, range(kCases)), std::string("1 thread, ") + (async ? "async on" : "async off"));
  }
}

}  // namespace

namespace {

// Bounded replay active (keep 10 of prompts up to 60 tokens): still bit-identical alone or
// batched, one-shot or chunked (budget 7 splits the replay boundary), async or not; prompt
// logprobs are refused while it is on.
TEST(EngineDeepseekV41, BoundedReplayIsBatchAndChunkInvariant) {
  auto cases = make_cases(kCases);
  const std::vector<int> subset = below_cases({0, 2, 3, 4, 6, 9, 10, 12, 14});
  std::map<int, Result> ref;
  {
    EngineArgs a = base_args(false);
    a.yoco_keep_tokens = 10;
    engine::Engine e(a);
    for (int i : subset) ref[i] = run_batch(e, cases, {i}).at(i);
  }
  // Replay changes results (the test is not vacuous): some request differs from the full prefill.
  bool differs = false;
  for (int i : subset) differs |= ref.at(i).lps != alone().at(i).lps;
  EXPECT_TRUE(differs);
  for (bool async : {false, true})
    for (int64_t budget : {int64_t(2048), int64_t(7)}) {
      EngineArgs a = base_args(async);
      a.yoco_keep_tokens = 10;
      a.max_num_batched_tokens = budget;
      engine::Engine e(a);
      expect_same(ref, run_batch(e, cases, subset), "replay, budget " + std::to_string(budget) + (async ? ", async" : ""));
    }
  EngineArgs a = base_args(false);
  a.yoco_keep_tokens = 10;
  engine::Engine e(a);
  SamplingParams p;
  p.prompt_logprobs = 1;
  EXPECT_THROW(e.add_request("lp", cases[3].prompt, p), gannet::Error);
  a.yoco_replay = 0;
  engine::Engine e2(a);
  EXPECT_NO_THROW(e2.add_request("lp", cases[3].prompt, p));
}

}  // namespace

namespace {

// Speculative decoding (n-gram drafts) on V4.1: the window rings, open ratio-2 groups and
// Engram history get room for K positions past the kept length (CacheLayout), so rejected
// drafts never overwrite what the next step reads. Outputs equal plain decoding's bit for
// bit, batched, with small chunk budgets, under preemption, async on or off; drafts are
// both accepted and rejected along the way.
// 16 requests for the n-gram test (fewer give too few accepted drafts to check); the
// DSpark tests take subsets, smaller under the sanitizers (test_scale.h).
const int kSpecCases = 16;

std::vector<Case> spec_cases() {
  std::mt19937 rng(99);
  std::vector<Case> cases;
  for (int i = 0; i < 16; ++i) {
    Case c;
    const int period = 2 + i % 3;
    std::vector<int32_t> pattern;
    for (int j = 0; j < period; ++j) pattern.push_back(int32_t(rng() % 512));
    for (int r = 0; r < 6; ++r) c.prompt.insert(c.prompt.end(), pattern.begin(), pattern.end());
    c.params.max_tokens = 24 + int(rng() % 24);
    c.params.ignore_eos = true;
    c.params.logprobs = 2;
    // Two candidate tokens per step: outputs fall into short cycles that drafts copy.
    c.params.temperature = 1.0;
    c.params.top_k = 2;
    c.params.seed = 40 + uint64_t(i);
    if (i % 4 == 0) c.params.temperature = 0;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

TEST(EngineDeepseekV41, SpeculativeNgramEqualsPlain) {
  const auto cases = spec_cases();
  std::map<int, Result> ref;
  {
    engine::Engine e(base_args(false));
    for (int i = 0; i < kSpecCases; ++i) ref[i] = run_batch(e, cases, {i}).at(i);
  }
  auto spec_args = [](bool async) {
    EngineArgs a = base_args(async);
    a.speculative = "ngram";
    a.num_speculative_tokens = 6;
    return a;
  };
  int64_t drafted = 0, accepted = 0;
  for (bool async : {false, true}) {
    engine::Engine e(spec_args(async));
    // Statistics from the same run.
    for (int i = 0; i < kSpecCases; ++i) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
    std::map<int, Result> got;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) {
          drafted += o.metrics.spec_drafted, accepted += o.metrics.spec_accepted;
          Result r;
          r.ids.push_back(o.outputs[0].token_ids);
          std::vector<float> lp;
          for (const auto& p : o.outputs[0].logprobs) {
            lp.push_back(p.logprob);
            for (const auto& t : p.top) lp.push_back(t.logprob), lp.push_back(float(t.id));
          }
          r.lps.push_back(lp);
          got[std::stoi(o.request_id.substr(1))] = r;
        }
    EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
    EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
    expect_same(ref, got, std::string("speculative batch, ") + (async ? "async on" : "async off"));
    EngineArgs b = spec_args(async);
    b.max_num_batched_tokens = 7;
    engine::Engine eb(b);
    expect_same(ref, run_batch(eb, cases, range(kSpecCases)), "speculative, budget 7");
    // Preemption: state slots for all, 10 blocks of 16 positions.
    io::ModelConfig cfg = io::load_model_config(model_dir());
    cfg.speculative_tokens = 6;
    io::Checkpoint ck(model_dir());
    const kernels::CacheSpec spec = model::create_model(cfg, ck)->cache_spec();
    EngineArgs c = spec_args(async);
    c.kv_cache_memory = 32 * uint64_t(spec.state_bytes_per_seq) + 10 * spec.bytes_per_block(16);
    engine::Engine ec(c);
    expect_same(ref, run_batch(ec, cases, range(kSpecCases)), "speculative, preempted");
    EXPECT_GT(ec.scheduler().num_preemptions(), 0);
  }
  EXPECT_GT(accepted, 10) << "drafts were meant to be accepted";
  EXPECT_GT(drafted - accepted, 10) << "and rejected";
}

namespace {

// DSpark drafting (the checkpoint's mtp.* drafter, 3 drafts per step): outputs equal plain
// decoding's bit for bit, batched, with small chunk budgets, under preemption, with bounded
// replay, async on or off; every decode step after the first verifies the drafter's block.
// (The random drafter's drafts are rarely accepted; acceptance is covered by the n-gram
// test above and the drafter's seeding around rejected positions by its unit tests.)
TEST(EngineDeepseekV41, SpeculativeDsparkEqualsPlain) {
  const auto cases = spec_cases();
  const std::vector<int> subset =
      test_support::kSanitized ? std::vector<int>{0, 1, 2, 5} : std::vector<int>{0, 1, 2, 5, 8, 11, 13};
  std::map<int, Result> ref, ref_replay;
  {
    engine::Engine e(base_args(false));
    for (int i : subset) ref[i] = run_batch(e, cases, {i}).at(i);
    EngineArgs a = base_args(false);
    a.yoco_keep_tokens = 10;
    engine::Engine er(a);
    for (int i : subset) ref_replay[i] = run_batch(er, cases, {i}).at(i);
  }
  auto spec_args = [](bool async) {
    EngineArgs a = base_args(async);
    a.speculative = "dspark";
    a.num_speculative_tokens = 3;
    return a;
  };
  for (bool async : {false, true}) {
    const std::string mode = async ? ", async on" : ", async off";
    engine::Engine e(spec_args(async));
    int64_t drafted = 0, steps = 0;
    for (int i : subset) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
    std::map<int, Result> got;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) {
          drafted += o.metrics.spec_drafted, steps += o.metrics.spec_steps;
          Result r;
          r.ids.push_back(o.outputs[0].token_ids);
          std::vector<float> lp;
          for (const auto& p : o.outputs[0].logprobs) {
            lp.push_back(p.logprob);
            for (const auto& t : p.top) lp.push_back(t.logprob), lp.push_back(float(t.id));
          }
          r.lps.push_back(lp);
          got[std::stoi(o.request_id.substr(1))] = r;
        }
    expect_same(ref, got, "dspark batch" + mode);
    EXPECT_GT(drafted, 2 * steps) << "steps were meant to verify DSpark blocks";
    EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
    EngineArgs b = spec_args(async);
    b.max_num_batched_tokens = 7;
    engine::Engine eb(b);
    expect_same(ref, run_batch(eb, cases, subset), "dspark, budget 7" + mode);
    io::ModelConfig cfg = io::load_model_config(model_dir());
    cfg.speculative_tokens = 3;
    cfg.dspark = true;
    io::Checkpoint ck(model_dir());
    const kernels::CacheSpec spec = model::create_model(cfg, ck)->cache_spec();
    EngineArgs c = spec_args(async);
    c.kv_cache_memory = 32 * uint64_t(spec.state_bytes_per_seq) + 8 * spec.bytes_per_block(16);
    engine::Engine ec(c);
    expect_same(ref, run_batch(ec, cases, subset), "dspark, preempted" + mode);
    EXPECT_GT(ec.scheduler().num_preemptions(), 0);
    EngineArgs r = spec_args(async);
    r.yoco_keep_tokens = 10;
    engine::Engine er(r);
    expect_same(ref_replay, run_batch(er, cases, subset), "dspark, bounded replay" + mode);
  }
  // More drafts than the drafter's block are refused; without --num-speculative-tokens the
  // drafter's block (3 here, below the default 4) is used.
  EngineArgs bad = spec_args(false);
  bad.num_speculative_tokens = 4;
  EXPECT_THROW({ engine::Engine e(bad); }, gannet::Error);
  EngineArgs dflt = spec_args(false);
  dflt.num_speculative_tokens = 0;
  engine::Engine ed(dflt);
  EXPECT_EQ(ed.args().speculative_tokens(), 3);
  expect_same(ref, run_batch(ed, cases, subset), "dspark, default depth");
}

}  // namespace

namespace {

// --speculative-verify varlen: the depth of each row follows the step-time profile. Given
// a cached profile where a wider step costs nothing, every draft is verified (as fixed);
// where each token costs as much as a whole step, none is (a draft is accepted with
// probability below 1, so it can never pay for itself). Outputs equal plain decoding.
TEST(EngineDeepseekV41, VarlenFollowsTheStepProfile) {
  const std::string cache = (std::filesystem::path(::testing::TempDir()) / "gannet_step_profile.json").string();
  std::filesystem::remove(cache);
  ASSERT_EQ(0, setenv("GANNET_STEP_PROFILE_CACHE", cache.c_str(), 1));
  const auto cases = spec_cases();
  const std::vector<int> subset = {0, 1, 4, 8};
  std::map<int, Result> ref;
  {
    engine::Engine e(base_args(false));
    ref = run_batch(e, cases, subset);
  }
  auto run = [&](const std::string& verify, int64_t* drafted) {
    EngineArgs a = base_args(true);
    a.speculative = "dspark";
    a.num_speculative_tokens = 3;
    a.speculative_verify = verify;
    engine::Engine e(a);
    for (int i : subset) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
    std::map<int, Result> got;
    *drafted = 0;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) {
          *drafted += o.metrics.spec_drafted;
          Result r;
          r.ids.push_back(o.outputs[0].token_ids);
          std::vector<float> lp;
          for (const auto& p : o.outputs[0].logprobs) {
            lp.push_back(p.logprob);
            for (const auto& t : p.top) lp.push_back(t.logprob), lp.push_back(float(t.id));
          }
          r.lps.push_back(lp);
          got[std::stoi(o.request_id.substr(1))] = r;
        }
    return got;
  };
  int64_t fixed = 0, measured = 0, flat = 0, steep = 0;
  expect_same(ref, run("fixed", &fixed), "fixed");
  expect_same(ref, run("varlen", &measured), "varlen, measured profile");
  ASSERT_TRUE(std::filesystem::exists(cache)) << "the measured profile is cached";
  auto rewrite = [&](auto f) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(cache));
    ASSERT_EQ(j.size(), 1u);
    auto& v = j.begin().value();
    for (size_t b = 0; b < v.size(); ++b) v[b] = f(double(b + 1));
    std::ofstream(cache) << j.dump();
  };
  rewrite([](double) { return 0.01; });
  expect_same(ref, run("varlen", &flat), "varlen, flat profile");
  // Steep enough that no measured cost beyond the profile (the executor adds what a step
  // takes past it, which a sanitizer build or a loaded machine makes large) flattens it:
  // each extra token doubles the step (whatever else the step holds: a prompt's last chunk
  // beside a decode), so no draft is worth verifying.
  rewrite([](double b) { return 1000.0 * std::exp2(b - 1); });
  expect_same(ref, run("varlen", &steep), "varlen, steep profile");
  EXPECT_GT(fixed, 0);
  EXPECT_EQ(flat, fixed);
  EXPECT_EQ(steep, 0);
  unsetenv("GANNET_STEP_PROFILE_CACHE");
}

}  // namespace

namespace {

// --speculative-sampling rejection: sampled requests draw their drafts from the drafter's
// distribution and verify them by rejection sampling (the distribution test is in
// test_sampling_speculative). Tokens then differ from plain decoding's for sampled
// requests (greedy ones stay identical), but are reproducible and batch-invariant: alone,
// batched, chunked, preempted, async or not.
TEST(EngineDeepseekV41, RejectionSamplingIsBatchInvariant) {
  const auto cases = spec_cases();
  const std::vector<int> subset =
      test_support::kSanitized ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1, 2, 3, 4, 5, 6};
  auto args = [](bool async) {
    EngineArgs a = base_args(async);
    a.speculative = "dspark";
    a.num_speculative_tokens = 3;
    a.speculative_sampling = "rejection";
    return a;
  };
  std::map<int, Result> alone_r, plain;
  {
    engine::Engine e(args(false));
    for (int i : subset) alone_r[i] = run_batch(e, cases, {i}).at(i);
    engine::Engine p(base_args(false));
    plain = run_batch(p, cases, subset);
  }
  bool differs = false;
  for (int i : subset) {
    if (cases[size_t(i)].params.temperature == 0) {
      EXPECT_EQ(alone_r.at(i).ids, plain.at(i).ids) << "greedy request " << i;
    } else {
      differs |= alone_r.at(i).ids != plain.at(i).ids;
    }
  }
  EXPECT_TRUE(differs) << "rejection sampling was meant to change some sampled request's tokens";
  for (bool async : {false, true}) {
    const std::string mode = async ? ", async on" : ", async off";
    engine::Engine e(args(async));
    expect_same(alone_r, run_batch(e, cases, subset), "rejection, batched" + mode);
    EngineArgs b = args(async);
    b.max_num_batched_tokens = 7;
    engine::Engine eb(b);
    expect_same(alone_r, run_batch(eb, cases, subset), "rejection, budget 7" + mode);
    io::ModelConfig cfg = io::load_model_config(model_dir());
    cfg.speculative_tokens = 3;
    cfg.dspark = true;
    io::Checkpoint ck(model_dir());
    const kernels::CacheSpec spec = model::create_model(cfg, ck)->cache_spec();
    EngineArgs c = args(async);
    c.kv_cache_memory = 32 * uint64_t(spec.state_bytes_per_seq) + 8 * spec.bytes_per_block(16);
    engine::Engine ec(c);
    expect_same(alone_r, run_batch(ec, cases, subset), "rejection, preempted" + mode);
    EXPECT_GT(ec.scheduler().num_preemptions(), 0);
  }
}

}  // namespace
