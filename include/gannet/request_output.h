// What a request produces: per sample the text, token ids, logprobs and why it stopped,
// plus the prompt's logprobs and timing metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace gannet {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One position's logprobs: the chosen (or prompt) token's and the top-N alternatives.
struct PositionLogprobs {
  int32_t id = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

struct CompletionOutput {
  int index = 0;  // sample index in [0, n)
  std::string text;
  std::vector<int32_t> token_ids;
  double cumulative_logprob = 0;
  std::vector<PositionLogprobs> logprobs;  // when requested, one per generated token
  std::string finish_reason;               // "stop", "length", "abort", "error"; empty while running
  // What stopped it: a stop string, or a stop token id; monostate for EOS / length.
  std::variant<std::monostate, std::string, int32_t> stop_reason;
};

struct RequestMetrics {
  double arrival_time = 0;          // seconds, steady clock
  double first_scheduled_time = 0;  // 0 until scheduled
  double first_token_time = 0;
  double finished_time = 0;
  // Speculative decoding, over the request's samples: verify steps, drafts proposed and
  // accepted (a step's tokens = 1 + its accepted drafts), and per draft position i the
  // drafts proposed and accepted there.
  int64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
  std::vector<int64_t> spec_drafted_at, spec_accepted_at;
  // A drafter with confidences (DSpark): every draft verification reached (the drafts
  // before it accepted), by confidence decile: how many, their confidence sum and how many
  // were accepted. Empty otherwise. The calibration error is
  // sum over deciles |conf_sum - accepted| / total.
  std::vector<int64_t> spec_calib_n, spec_calib_accepted;
  std::vector<double> spec_calib_conf;
  // Prefix caching: prompt positions taken from cached blocks at the request's first
  // admission (not computed).
  int64_t cached_tokens = 0;
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  // Position 0 has no logprob (nothing precedes it); present when prompt_logprobs asked.
  std::vector<std::optional<PositionLogprobs>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  // Non-empty: the request failed after it was accepted (its grammar did not compile);
  // it is finished, with finish_reason "error".
  std::string error;
  uint64_t seed = 0;  // the sampling seed used (given or drawn), to replay the request
  RequestMetrics metrics;
};

}  // namespace gannet
