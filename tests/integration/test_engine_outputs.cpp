// Engine outputs: n > 1 samples (shared prompt blocks, each sample reproducible alone),
// stop strings split across tokens, stop token ids, min_tokens, prompt logprobs, seeds
// drawn and reported, and bad requests rejected without disturbing others.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "engine/engine.h"
#include "tiny_checkpoint.h"

namespace fs = std::filesystem;
using namespace gannet;

namespace {

const std::string& tiny_model() { return gannet::test_support::tiny_checkpoint("qwen3", 5); }

EngineArgs args() {
  EngineArgs a;
  a.model = tiny_model();
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = 32ull << 20;
  a.block_size = 16;
  return a;
}

// Steps until nothing is left; returns the last request that finished.
RequestOutput drain(engine::Engine& e) {
  RequestOutput last;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) last = o;
  return last;
}

RequestOutput run_one(engine::Engine& e, const std::string& prompt, const SamplingParams& p) {
  e.add_request("x", prompt, p);
  RequestOutput last = drain(e);
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  return last;
}

}  // namespace

TEST(EngineOutputs, NSamplesShareThePromptAndEachReproducesAlone) {
  engine::Engine e(args());
  SamplingParams p;
  p.n = 4;
  p.temperature = 1.0;
  p.seed = 77;
  p.max_tokens = 12;
  p.ignore_eos = true;
  // A prompt of 40 tokens (several blocks) so the samples share blocks after the fork.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(100 + i * 7);
  e.add_request("n4", prompt, p);
  bool saw_shared = false;
  RequestOutput out;
  while (e.has_unfinished()) {
    for (RequestOutput& o : e.step())
      if (o.finished) out = o;
    // After the fork, 4 sequences hold the prompt's first full blocks together.
    for (int32_t b = 0; b < int32_t(e.block_manager().num_blocks()); ++b)
      if (e.block_manager().ref_count(b) == 4) saw_shared = true;
  }
  EXPECT_TRUE(saw_shared) << "the n samples never shared a prompt block";
  ASSERT_EQ(out.outputs.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.outputs[size_t(i)].index, i);
    EXPECT_EQ(out.outputs[size_t(i)].token_ids.size(), 12u);
    distinct.insert(out.outputs[size_t(i)].token_ids);
  }
  EXPECT_GT(distinct.size(), 1u) << "different sample streams gave identical samples";
  // Sample 0 of an n=4 request equals the n=1 request with the same seed.
  SamplingParams one = p;
  one.n = 1;
  e.add_request("n1", prompt, one);
  RequestOutput single = drain(e);
  EXPECT_EQ(single.outputs[0].token_ids, out.outputs[0].token_ids);
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
}

TEST(EngineOutputs, StopStringAcrossTokensIsFoundAndCut) {
  engine::Engine e(args());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  RequestOutput free_run = run_one(e, "Stop strings are tested here", p);
  const std::string text = free_run.outputs[0].text;
  ASSERT_GT(free_run.outputs[0].token_ids.size(), 8u);
  // Pick a stop string that straddles the boundary between generated tokens 4 and 5.
  std::string t4, t5;
  {
    const auto& ids = free_run.outputs[0].token_ids;
    std::vector<int32_t> first4(ids.begin(), ids.begin() + 4), first5(ids.begin(), ids.begin() + 5);
    t4 = e.tokenizer()->decode(first4);
    t5 = e.tokenizer()->decode(first5);
  }
  ASSERT_GT(t5.size(), t4.size());
  ASSERT_GE(t4.size(), 2u);
  const std::string stop = t4.substr(t4.size() - 2) + t5.substr(t4.size(), 1);
  ASSERT_EQ(text.find(stop), t4.size() - 2) << "stop string must first occur at the boundary";
  SamplingParams ps = p;
  ps.stop = {stop};
  RequestOutput cut = run_one(e, "Stop strings are tested here", ps);
  EXPECT_EQ(cut.outputs[0].finish_reason, "stop");
  EXPECT_EQ(std::get<std::string>(cut.outputs[0].stop_reason), stop);
  EXPECT_EQ(cut.outputs[0].text, text.substr(0, t4.size() - 2));
  EXPECT_EQ(cut.outputs[0].token_ids.size(), 5u);
  ps.include_stop_str_in_output = true;
  RequestOutput kept = run_one(e, "Stop strings are tested here", ps);
  EXPECT_EQ(kept.outputs[0].text, text.substr(0, t4.size() + 1));
}

TEST(EngineOutputs, StopTokenIdsMinTokensAndMaxTokens) {
  engine::Engine e(args());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  p.ignore_eos = true;
  RequestOutput free_run = run_one(e, "Counting tokens", p);
  const auto ids = free_run.outputs[0].token_ids;
  EXPECT_EQ(free_run.outputs[0].finish_reason, "length");
  EXPECT_EQ(ids.size(), 16u);
  SamplingParams ps = p;
  ps.stop_token_ids = {ids[3]};
  RequestOutput stopped = run_one(e, "Counting tokens", ps);
  const size_t first = size_t(std::find(ids.begin(), ids.end(), ids[3]) - ids.begin());
  EXPECT_EQ(stopped.outputs[0].token_ids.size(), first + 1);
  EXPECT_EQ(stopped.outputs[0].finish_reason, "stop");
  EXPECT_EQ(std::get<int32_t>(stopped.outputs[0].stop_reason), ids[3]);
  // min_tokens masks the stop token until 6 tokens are out.
  ps.min_tokens = 6;
  RequestOutput longer = run_one(e, "Counting tokens", ps);
  EXPECT_GE(longer.outputs[0].token_ids.size(), 6u);
  for (size_t i = 0; i < 5 && i < longer.outputs[0].token_ids.size(); ++i)
    EXPECT_NE(longer.outputs[0].token_ids[i], ids[3]) << "stop token drawn before min_tokens";
  EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + 3, longer.outputs[0].token_ids.begin()));
}

TEST(EngineOutputs, PromptLogprobsAndReportedSeed) {
  engine::Engine e(args());
  SamplingParams p;
  p.temperature = 1.0;
  p.max_tokens = 6;
  p.prompt_logprobs = 2;
  p.logprobs = 1;
  RequestOutput a = run_one(e, "Prompt logprobs over every position", p);
  ASSERT_EQ(a.prompt_logprobs.size(), a.prompt_token_ids.size());
  EXPECT_FALSE(a.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < a.prompt_logprobs.size(); ++i) {
    ASSERT_TRUE(a.prompt_logprobs[i].has_value()) << i;
    EXPECT_EQ(a.prompt_logprobs[i]->id, a.prompt_token_ids[i]);
    EXPECT_LE(a.prompt_logprobs[i]->logprob, 0.0f);
    EXPECT_EQ(a.prompt_logprobs[i]->top.size(), 2u);
    EXPECT_GE(a.prompt_logprobs[i]->top[0].logprob, a.prompt_logprobs[i]->logprob);
  }
  // No seed given: one was drawn and reported; replaying with it gives the same tokens.
  SamplingParams replay = p;
  replay.seed = a.seed;
  RequestOutput b = run_one(e, "Prompt logprobs over every position", replay);
  EXPECT_EQ(a.outputs[0].token_ids, b.outputs[0].token_ids);
  EXPECT_EQ(a.outputs[0].cumulative_logprob, b.outputs[0].cumulative_logprob);
  // Prompt logprobs with chunked prefill equal one-shot.
  EngineArgs small = args();
  small.max_num_batched_tokens = 3;
  engine::Engine e2(small);
  RequestOutput c = run_one(e2, "Prompt logprobs over every position", replay);
  ASSERT_EQ(c.prompt_logprobs.size(), b.prompt_logprobs.size());
  for (size_t i = 1; i < c.prompt_logprobs.size(); ++i) EXPECT_EQ(c.prompt_logprobs[i]->logprob, b.prompt_logprobs[i]->logprob);
  EXPECT_EQ(c.outputs[0].token_ids, b.outputs[0].token_ids);
}

TEST(EngineOutputs, BadRequestsAreRejectedAndOthersComplete) {
  EngineArgs a = args();
  a.max_model_len = 256;
  engine::Engine e(a);
  SamplingParams ok;
  ok.max_tokens = 4;
  ok.temperature = 0;
  e.add_request("good", "fine prompt", ok);
  auto rejects = [&](const std::string& prompt, SamplingParams p, const std::string& needle) {
    try {
      e.add_request("bad", prompt, p);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  rejects("", ok, "prompt is empty");
  SamplingParams p = ok;
  p.max_tokens = 0;
  rejects("x", p, "max_tokens");
  p = ok;
  p.temperature = -1;
  rejects("x", p, "temperature");
  p = ok;
  p.top_p = 1.5;
  rejects("x", p, "top_p");
  p = ok;
  p.n = 0;
  rejects("x", p, "n must be");
  rejects(std::string(3000, 'a') + " b c d e f g h", ok, "exceeds the model's context");
  EXPECT_THROW(e.add_request("good", "again", ok), Error);  // duplicate id
  RequestOutput last = drain(e);
  EXPECT_EQ(last.request_id, "good");
  EXPECT_EQ(last.outputs[0].token_ids.size(), 4u);
}

TEST(EngineOutputs, StreamedTextIsNeverTakenBack) {
  engine::Engine e(args());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  RequestOutput free_run = run_one(e, "Streaming with stop strings", p);
  const std::string text = free_run.outputs[0].text;
  ASSERT_GE(text.size(), 12u);
  // A stop string starting mid-way: the text before it streams out, and what is shown
  // while running is always a prefix of everything shown later.
  SamplingParams ps = p;
  ps.stop = {text.substr(text.size() / 2, 3)};
  e.add_request("s", "Streaming with stop strings", ps);
  // Streamed outputs are deltas: their text and token ids, joined, are a prefix of the
  // final (complete) output's, and only the first carries the prompt.
  std::string streamed;
  std::vector<int32_t> streamed_ids;
  int outputs = 0;
  std::optional<RequestOutput> final_out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step()) {
      EXPECT_EQ(o.prompt_token_ids.empty(), outputs > 0 && !o.finished) << "output " << outputs;
      ++outputs;
      if (o.finished) {
        final_out = std::move(o);
        continue;
      }
      streamed += o.outputs[0].text;
      streamed_ids.insert(streamed_ids.end(), o.outputs[0].token_ids.begin(), o.outputs[0].token_ids.end());
    }
  ASSERT_TRUE(final_out.has_value());
  ASSERT_GT(outputs, 2);
  const std::string& final_text = final_out->outputs[0].text;
  EXPECT_EQ(final_text, text.substr(0, text.find(ps.stop[0])));
  EXPECT_EQ(final_text.compare(0, streamed.size(), streamed), 0) << "streamed text was taken back";
  EXPECT_FALSE(streamed.empty());
  const auto& ids = final_out->outputs[0].token_ids;
  ASSERT_LE(streamed_ids.size(), ids.size());
  EXPECT_TRUE(std::equal(streamed_ids.begin(), streamed_ids.end(), ids.begin()));
}

TEST(EngineOutputs, AbortReturnsTheFinalOutput) {
  engine::Engine e(args());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 50;
  p.ignore_eos = true;
  e.add_request("a", "to be aborted", p);
  e.step();
  e.step();
  std::optional<RequestOutput> out = e.abort("a");
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->finished);
  EXPECT_EQ(out->outputs[0].finish_reason, "abort");
  EXPECT_FALSE(out->outputs[0].token_ids.empty());
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_FALSE(e.abort("a").has_value());
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
}

TEST(EngineOutputs, LongPromptLogprobsUnderATightCacheComplete) {
  EngineArgs a = args();
  a.kv_cache_memory = uint64_t(40) * 16 * 512;  // 40 blocks of 16 tokens
  engine::Engine e(a);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 4;
  p.prompt_logprobs = 1;
  std::vector<int32_t> prompt(400, 0);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(300 + (i * 37) % 5000);
  e.add_request("x", prompt, p);
  e.add_request("y", prompt, p);
  int64_t steps = 0;
  while (e.has_unfinished() && steps < 5000) {
    e.step();
    ++steps;
  }
  EXPECT_FALSE(e.has_unfinished()) << "stalled";
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
}
