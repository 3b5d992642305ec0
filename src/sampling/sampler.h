// Chooses a token from a row of logits, vLLM-compatible and deterministic.
//
// Per row, in vLLM's order: repetition / frequency / presence penalties and the min_tokens
// mask (penalties.h), then greedy argmax (temperature 0, lowest id on ties) or
// temperature, top-k, top-p, min-p and the draw in fixed point (fixed_point_draw.h).
// The 64 random bits are counter_random(seed, stream, position) (counter_rng.h), so a
// seeded request yields the same tokens whatever else is in the batch, whichever Sampler
// object serves it and whatever that object sampled before.
//
// One Sampler per thread: it owns its scratch (~42 bytes per vocabulary entry, ~5.4 MB
// for 129k) and sample(in, &out) allocates nothing once out.top has held the largest
// logprobs count asked for.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "gannet/sampling_params.h"
#include "sampling/fixed_point_draw.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"

namespace gannet::sampling {

struct SampleInput {
  const float* logits = nullptr;            // [vocab] raw model logits; not modified
  const SamplingParams* params = nullptr;   // validated
  uint64_t seed = 0;      // RNG key: the request's seed (the engine resolves unset seeds),
  uint64_t stream = 0;    //   the sample index within the request (0 .. n-1),
  uint64_t position = 0;  //   and the output position (number of tokens generated before)
  std::span<const int32_t> prompt_ids;  // for repetition_penalty
  std::span<const int32_t> output_ids;  // for the penalties and min_tokens
  std::span<const int32_t> eos_ids;     // masked with stop_token_ids until min_tokens
                                        // outputs exist, whatever ignore_eos says
  // Grammar mask (structured output): bit id % 32 of word id / 32 set for each token the
  // grammar allows; the others get probability 0 after the penalties. Null: no
  // constraint. When it allows nothing min_tokens leaves (the document is complete and only
  // EOS may follow), the grammar wins over min_tokens.
  const uint32_t* allowed = nullptr;
};

struct SampleOutput {
  int32_t token = -1;
  // Raw log-softmax of `token`; NaN unless params->logprobs is set.
  float logprob = std::numeric_limits<float>::quiet_NaN();
  std::vector<TokenLogprob> top;  // params->logprobs highest (empty if unset), descending
};

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);

  int64_t vocab_size() const { return vocab_; }

  void sample(const SampleInput& in, SampleOutput* out);
  SampleOutput sample(const SampleInput& in);

  // No token history (penalties and min_tokens see none) and no logprobs: the token only.
  int32_t sample(const float* logits, const SamplingParams& p, uint64_t seed, uint64_t stream,
                 uint64_t position);

  // Prompt logprobs for one row: `logits` predicts the prompt token `next_token`.
  // Fills out->token = next_token, out->logprob and out->top (top_n entries).
  void prompt_logprobs(const float* logits, int32_t next_token, int top_n, SampleOutput* out) const;

  // Highest logit, lowest id on ties.
  static int32_t argmax(const float* logits, int64_t n);

  // The token sample(in) picks, without logprobs.
  int32_t choose_token(const SampleInput& in) { return choose(in); }
  // The distribution sample(in) draws from, as kept fixed-point weights into w [vocab]
  // (penalties and min_tokens first; temperature 0: weight 1 on the argmax). Returns
  // their total. in.seed / stream / position are not used.
  uint64_t weights(const SampleInput& in, uint64_t* w);
  // out as sample() fills it, for a token chosen elsewhere (its raw logprob and the top
  // list from in.logits when in.params asks for logprobs).
  void fill(const SampleInput& in, int32_t token, SampleOutput* out) const;

 private:
  int32_t choose(const SampleInput& in);  // penalties, then greedy or the fixed-point draw
  // The row greedy / the draw see: the raw logits, or adjusted_ after penalties, min_tokens
  // and the grammar mask.
  const float* processed(const SampleInput& in);

  int64_t vocab_;
  Penalties penalties_;
  FixedPointDraw draw_;
  std::vector<float> adjusted_;  // [vocab] logits after penalties / min_tokens mask
};

}  // namespace gannet::sampling
