// Rewrites a logits row the way vLLM's penalties and min_tokens processor do, before
// temperature and filtering. Everything is elementwise in float (as vLLM's float32
// tensors), so a row's result depends only on that row and its own token history.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gannet/sampling_params.h"

namespace gannet::sampling {

// A request's token history, as the penalties see it.
struct TokenHistory {
  std::span<const int32_t> prompt_ids;  // for repetition_penalty
  std::span<const int32_t> output_ids;  // for all three penalties and min_tokens
  std::span<const int32_t> eos_ids;     // masked (with stop_token_ids) until min_tokens
};

class Penalties {
 public:
  explicit Penalties(int64_t vocab_size);

  // Whether apply() would change any logit for these params and history.
  static bool active(const SamplingParams& p, const TokenHistory& h);

  // out[vocab] = raw[vocab] with, per token id, in vLLM's order:
  //   repetition: id in prompt or output: x > 0 ? x / rp : x * rp      (once per id)
  //   frequency:  x -= frequency_penalty * count_in_output(id)
  //   presence:   x -= presence_penalty if id occurs in output
  //   min_tokens: x = -inf for eos_ids and stop_token_ids while output has < min_tokens
  // Penalty factors are rounded to float first, as vLLM's float32 tensors hold them.
  // Ids in the history must be in [0, vocab); stop_token_ids outside it are ignored
  // (the engine rejects them at admission; a token that cannot occur needs no mask).
  void apply(const float* raw, float* out, const SamplingParams& p, const TokenHistory& h);

 private:
  int64_t vocab_;
  std::vector<int32_t> counts_;   // [vocab] occurrences in output; all zero between calls
  std::vector<uint8_t> seen_;     // [vocab] 1 if in prompt or output; all zero between calls
  std::vector<int32_t> touched_;  // distinct ids with seen_ set, to reset them in O(history)
};

}  // namespace gannet::sampling
