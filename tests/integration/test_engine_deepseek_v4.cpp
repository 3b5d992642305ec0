// DeepSeek-V4-Flash in the engine (tests/golden/deepseek-v4-tiny, token-id prompts): the
// reference's greedy ids with --no-kv-fake-quant, and bit-identical results alone or
// batched, one-shot or chunked (budget 3 splits ratio-4 and ratio-8 groups), async or not.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "engine/engine.h"

using namespace gannet;

namespace {

std::string model_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return (std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v4-tiny").string();
}

EngineArgs args(bool async, int64_t budget = 2048) {
  EngineArgs a;
  a.model = model_dir();
  a.quiet = true;
  a.threads = 2;
  a.max_num_seqs = 16;
  a.kv_cache_memory = 16ull << 20;
  a.block_size = 16;
  a.async_scheduling = async;
  a.max_num_batched_tokens = budget;
  a.kv_fake_quant = 0;
  return a;
}

std::map<int, std::vector<int32_t>> run(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<int>& which) {
  for (int i : which) {
    SamplingParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.temperature = i % 2 ? 1.0 : 0.0;
    p.seed = 40 + uint64_t(i);
    e.add_request("r" + std::to_string(i), prompts[size_t(i)], p);
  }
  std::map<int, std::vector<int32_t>> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[std::stoi(o.request_id.substr(1))] = o.outputs[0].token_ids;
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  return out;
}

TEST(EngineDeepseekV4, GreedyMatchesReferenceAndBatchingIsExact) {
  std::ifstream in(std::filesystem::path(model_dir()) / "golden.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str());
  {
    engine::Engine e(args(true));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 16;
    p.ignore_eos = true;
    e.add_request("g", g["prompt_ids"].get<std::vector<int32_t>>(), p);
    std::vector<int32_t> got;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) got = o.outputs[0].token_ids;
    EXPECT_EQ(got, g["greedy"]["float32_ids"].get<std::vector<int32_t>>());
  }
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> p;
    for (int j = 0, n = 1 + int(rng() % 50); j < n; ++j) p.push_back(int32_t(rng() % 1024));
    prompts.push_back(p);
  }
  std::map<int, std::vector<int32_t>> alone;
  {
    engine::Engine e(args(false));
    for (int i = 0; i < 10; ++i) alone[i] = run(e, prompts, {i}).at(i);
  }
  for (bool async : {false, true})
    for (int64_t budget : {int64_t(2048), int64_t(3)}) {
      engine::Engine e(args(async, budget));
      EXPECT_EQ(run(e, prompts, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), alone) << "budget " << budget << " async " << async;
    }
}

}  // namespace

namespace {

// Speculative decoding (n-gram drafts) on V4: window rings and open compressor groups
// (ratio 4 overlapping, the indexer's, ratio 128) get room for K positions past the kept
// length. Token ids and logprobs equal plain decoding's, greedy or sampled, batched, with
// small chunk budgets and preemption, async on or off; drafts are accepted and rejected.
TEST(EngineDeepseekV4, SpeculativeNgramEqualsPlain) {
  std::mt19937 rng(11);
  struct Case {
    std::vector<int32_t> prompt;
    SamplingParams p;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 8; ++i) {
    Case c;
    std::vector<int32_t> pat;
    for (int j = 0, n = 2 + i % 3; j < n; ++j) pat.push_back(int32_t(rng() % 1024));
    for (int r = 0; r < 5; ++r) c.prompt.insert(c.prompt.end(), pat.begin(), pat.end());
    c.p.max_tokens = 20 + int(rng() % 12);
    c.p.ignore_eos = true;
    c.p.logprobs = 1;
    c.p.temperature = i % 3 ? 1.0 : 0.0;
    c.p.top_k = 2;
    c.p.seed = 7 + uint64_t(i);
    cases.push_back(c);
  }
  using Out = std::pair<std::vector<int32_t>, std::vector<float>>;
  auto go = [&](engine::Engine& e, int64_t* drafted, int64_t* accepted) {
    for (size_t i = 0; i < cases.size(); ++i) e.add_request("r" + std::to_string(i), cases[i].prompt, cases[i].p);
    std::map<int, Out> out;
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) {
          Out r{o.outputs[0].token_ids, {}};
          for (const auto& lp : o.outputs[0].logprobs) r.second.push_back(lp.logprob);
          out[std::stoi(o.request_id.substr(1))] = r;
          if (drafted) *drafted += o.metrics.spec_drafted, *accepted += o.metrics.spec_accepted;
        }
    EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
    return out;
  };
  std::map<int, Out> ref;
  {
    engine::Engine e(args(false));
    ref = go(e, nullptr, nullptr);
  }
  int64_t drafted = 0, accepted = 0;
  for (bool async : {false, true})
    for (int64_t budget : {int64_t(2048), int64_t(5)}) {
      EngineArgs a = args(async, budget);
      a.speculative = "ngram";
      a.num_speculative_tokens = 4;
      engine::Engine e(a);
      EXPECT_EQ(go(e, &drafted, &accepted), ref) << "budget " << budget << " async " << async;
    }
  EngineArgs a = args(true);
  a.speculative = "ngram";
  a.num_speculative_tokens = 4;
  {
    // Preemption: room for a few sequences' blocks only.
    engine::Engine probe(a);
    const kernels::CacheSpec spec = probe.model().cache_spec();
    a.kv_cache_memory = 16 * uint64_t(spec.state_bytes_per_seq) + 10 * spec.bytes_per_block(16);
  }
  engine::Engine ep(a);
  EXPECT_EQ(go(ep, &drafted, &accepted), ref) << "preempted";
  EXPECT_GT(ep.scheduler().num_preemptions(), 0);
  EXPECT_GT(accepted, 10);
  EXPECT_GT(drafted - accepted, 10);
}

}  // namespace
