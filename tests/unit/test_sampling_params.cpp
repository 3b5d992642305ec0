// SamplingParams: vLLM defaults and validate()'s messages (field name and bad value).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/error.h"
#include "gannet/sampling_params.h"

namespace gannet {
namespace {

TEST(SamplingParams, DefaultsMatchVllm) {
  const SamplingParams p;
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_EQ(p.min_tokens, 0);
  EXPECT_EQ(p.temperature, 1.0);
  EXPECT_EQ(p.top_p, 1.0);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.min_p, 0.0);
  EXPECT_EQ(p.repetition_penalty, 1.0);
  EXPECT_EQ(p.presence_penalty, 0.0);
  EXPECT_EQ(p.frequency_penalty, 0.0);
  EXPECT_TRUE(p.stop.empty());
  EXPECT_TRUE(p.stop_token_ids.empty());
  EXPECT_FALSE(p.ignore_eos);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_FALSE(p.logprobs.has_value());
  EXPECT_FALSE(p.prompt_logprobs.has_value());
  EXPECT_TRUE(p.skip_special_tokens);
  EXPECT_FALSE(p.include_stop_str_in_output);
  EXPECT_NO_THROW(p.validate());
}

// Applies `edit` to default params and expects validate() to throw a message holding
// every piece of `want`.
void expect_rejected(const std::function<void(SamplingParams&)>& edit, std::initializer_list<std::string> want) {
  SamplingParams p;
  edit(p);
  try {
    p.validate();
    ADD_FAILURE() << "accepted; expected a message with " << *want.begin();
  } catch (const Error& e) {
    for (const std::string& w : want) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(SamplingParams, RejectsEachBadFieldByName) {
  expect_rejected([](SamplingParams& p) { p.n = 0; }, {"n must be >= 1", "got 0"});
  expect_rejected([](SamplingParams& p) { p.max_tokens = 0; }, {"max_tokens", "got 0"});
  expect_rejected([](SamplingParams& p) { p.min_tokens = -1; }, {"min_tokens", "got -1"});
  expect_rejected([](SamplingParams& p) { p.min_tokens = 17; }, {"min_tokens", "max_tokens (16)", "got 17"});
  expect_rejected([](SamplingParams& p) { p.temperature = -0.5; }, {"temperature", "got -0.5"});
  expect_rejected([](SamplingParams& p) { p.temperature = std::numeric_limits<double>::infinity(); },
                  {"temperature", "inf"});
  expect_rejected([](SamplingParams& p) { p.temperature = std::nan(""); }, {"temperature", "nan"});
  expect_rejected([](SamplingParams& p) { p.top_p = 0; }, {"top_p", "(0, 1]", "got 0"});
  expect_rejected([](SamplingParams& p) { p.top_p = 1.5; }, {"top_p", "got 1.5"});
  expect_rejected([](SamplingParams& p) { p.top_k = -2; }, {"top_k", "got -2"});
  expect_rejected([](SamplingParams& p) { p.min_p = -0.1; }, {"min_p", "[0, 1]", "got -0.1"});
  expect_rejected([](SamplingParams& p) { p.min_p = 1.25; }, {"min_p", "got 1.25"});
  expect_rejected([](SamplingParams& p) { p.repetition_penalty = 0; }, {"repetition_penalty", "> 0", "got 0"});
  expect_rejected([](SamplingParams& p) { p.presence_penalty = 2.5; }, {"presence_penalty", "[-2, 2]", "got 2.5"});
  expect_rejected([](SamplingParams& p) { p.frequency_penalty = -3; }, {"frequency_penalty", "got -3"});
  expect_rejected([](SamplingParams& p) { p.stop = {"ok", ""}; }, {"stop[1]", "empty"});
  expect_rejected([](SamplingParams& p) { p.stop_token_ids = {5, -7}; }, {"stop_token_ids[1]", "got -7"});
  expect_rejected([](SamplingParams& p) { p.logprobs = -1; }, {"logprobs", "[0, 20]", "got -1"});
  expect_rejected([](SamplingParams& p) { p.logprobs = 21; }, {"logprobs", "got 21"});
  expect_rejected([](SamplingParams& p) { p.prompt_logprobs = 21; }, {"prompt_logprobs", "got 21"});
  // Tool-call values take json.dumps's layout, so a whitespace allowance is refused by name.
  expect_rejected(
      [](SamplingParams& p) {
        p.structured.kind = StructuredOutput::Kind::kToolCalls;
        p.structured.spec = "{}";
        p.structured.max_whitespace = 1;
      },
      {"max_whitespace", "tool_calls", "json.dumps"});
}

TEST(SamplingParams, AcceptsTheEdgesOfEachRange) {
  SamplingParams p;
  p.n = 4;
  p.max_tokens = 1;
  p.min_tokens = 1;
  p.temperature = 0;
  p.top_p = 1;
  p.top_k = -1;
  p.min_p = 1;
  p.repetition_penalty = 0.01;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.stop = {"\n\n"};
  p.stop_token_ids = {0};
  p.logprobs = 0;
  p.prompt_logprobs = 20;
  EXPECT_NO_THROW(p.validate());
}

}  // namespace
}  // namespace gannet
